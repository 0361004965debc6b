//! Virtual actors: one counter per id in the whole cluster, reached from
//! any node. Three nodes in this one process, on loopback with mutual TLS
//! (certificates made on the spot), their shards owned through an
//! in-memory lease store. Every node increments the same counters; then
//! one node leaves and the others take its counters over.
//!
//! Run: `cargo run -p troubadour-cluster --example cluster_counters`
//!
//! Across machines, each node is one process: give every node the same
//! lease store (`PostgresLeaseStore`, feature `postgres`) and seed
//! addresses, and build its `Remote` from PEM files (see
//! `examples/remote_counter.rs`; `bench/src/cluster.rs` runs three such
//! processes).

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{with_cluster, Cluster, Entity, EntityMessages, MemoryLeaseStore};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage, Security};

/// Adds to a counter; the reply is the new total.
#[derive(Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = u64;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "example.Add";
}

/// Which node the counter lives on now.
#[derive(Serialize, Deserialize)]
struct WhereAreYou;
impl Message for WhereAreYou {
    type Reply = String;
}
impl RemoteMessage for WhereAreYou {
    const NAME: &'static str = "example.WhereAreYou";
}

struct Counter(u64);
impl Actor for Counter {}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 {
        self.0 += n;
        self.0
    }
}
impl Handler<WhereAreYou> for Counter {
    fn handle(&mut self, _: WhereAreYou, ctx: &mut Context<Self>) -> String {
        ctx.system().node().name().to_string()
    }
}
impl Entity for Counter {
    const KIND: &'static str = "counter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Add>().handle::<WhereAreYou>();
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
}

fn start(
    name: &str,
    ca: &DevCa,
    store: &Arc<MemoryLeaseStore>,
) -> Result<Node, Box<dyn std::error::Error>> {
    let system = ActorSystem::builder().name(name).build();
    let security = Security::Tls(ca.tls(name)?);
    let remote = system.block_on(
        with_cluster(Remote::builder("example", security))
            .listen("127.0.0.1:0".parse()?)
            .start(&system),
    )?;
    let cluster = system.block_on(
        Cluster::builder(store.clone())
            .lease(Duration::from_secs(3), Duration::from_millis(300))
            .entity::<Counter>(|_id| Counter(0))
            .start(&system, &remote),
    )?;
    Ok(Node {
        system,
        remote,
        cluster,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ca = DevCa::new("example CA (for this run only)")?;
    let store = Arc::new(MemoryLeaseStore::new());
    let nodes: Vec<Node> = ["alpha", "beta", "gamma"]
        .iter()
        .map(|n| start(n, &ca, &store))
        .collect::<Result<_, _>>()?;
    let seed = nodes[0]
        .remote
        .local_addr()
        .ok_or("alpha listens nowhere")?;
    for n in &nodes[1..] {
        n.system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
    }
    // Wait until the cluster has settled: every node sees the three
    // members and owns the shards placement gives it. (Counters here keep
    // their state in memory only, so one moved meanwhile would start over.)
    let start = std::time::Instant::now();
    while !nodes.iter().all(|n| {
        let status = n.system.block_on(n.cluster.status());
        status.is_ok_and(|s| s.members.len() == 3 && s.balanced)
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the cluster never settled"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ask = Duration::from_secs(10);
    // Every node adds 1 to each of ten counters, three times over. Each
    // sender's messages to one counter arrive in the order sent, so once a
    // node's ask is answered, its tells before it have arrived too.
    for _round in 1..=3u64 {
        for n in &nodes {
            for i in 0..10 {
                n.cluster
                    .entity::<Counter>(format!("counter-{i}"))
                    .tell(Add(1))?;
            }
        }
        for n in &nodes {
            for i in 0..10 {
                let counter = n.cluster.entity::<Counter>(format!("counter-{i}"));
                counter.ask(Add(0)).timeout(ask).wait()?;
            }
        }
    }
    for i in 0..10 {
        let counter = nodes[1].cluster.entity::<Counter>(format!("counter-{i}"));
        let total = counter.ask(Add(0)).timeout(ask).wait()?;
        let home = counter.ask(WhereAreYou).timeout(ask).wait()?;
        println!("counter-{i} = {total} on {home}");
        assert_eq!(total, 9, "every increment from every node arrived once");
    }
    // Gamma leaves: its counters move to alpha and beta (fresh: nothing
    // is persisted here; persistence is the next layer).
    nodes[2].system.block_on(nodes[2].cluster.leave())?;
    for i in 0..10 {
        let counter = nodes[0].cluster.entity::<Counter>(format!("counter-{i}"));
        let home = counter.ask(WhereAreYou).timeout(ask).wait()?;
        assert_ne!(home, "gamma");
        println!("after gamma left: counter-{i} on {home}");
    }
    Ok(())
}
