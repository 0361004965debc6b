//! The cluster over real sockets: three nodes in one process on loopback,
//! mutual TLS, real time. The same code as the simulation, with tokio's
//! sockets and timers under it: entities reached from every node, made
//! once, and served again from another node after one node leaves; with
//! the in-memory lease store and with PostgreSQL; and each sender's order
//! under real threads while shards move.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{
    Cluster, Entity, EntityMessages, LeaseStore, MemoryLeaseStore, PostgresLeaseStore, ShardCount,
};

mod postgres;
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage};

mod common;
use common::{eventually, fast_membership, tls_remote, GUARD};

#[derive(Debug, Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = u64;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "tls-test.Add";
}

#[derive(Debug, Serialize, Deserialize)]
struct WhereAreYou;
impl Message for WhereAreYou {
    type Reply = String;
}
impl RemoteMessage for WhereAreYou {
    const NAME: &'static str = "tls-test.WhereAreYou";
}

/// A count, and the entity's id.
struct Counter(u64, String);
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
        m.handle::<Add>()
            .handle::<WhereAreYou>()
            .handle::<Numbered>()
            .handle::<LastFrom>();
    }
}

/// The `n`th message of a sender to one entity.
#[derive(Debug, Serialize, Deserialize)]
struct Numbered(u32, u64);
impl Message for Numbered {
    type Reply = ();
}
impl RemoteMessage for Numbered {
    const NAME: &'static str = "tls-test.Numbered";
}

/// The last number an entity got from a sender.
#[derive(Debug, Serialize, Deserialize)]
struct LastFrom(u32);
impl Message for LastFrom {
    type Reply = Option<u64>;
}
impl RemoteMessage for LastFrom {
    const NAME: &'static str = "tls-test.LastFrom";
}

/// What every entity got, by (entity, sender), kept outside the entities
/// so that it survives their moves; and every number out of order.
#[derive(Default)]
struct Received {
    last: HashMap<(String, u32), u64>,
    disorder: Vec<String>,
}
static RECEIVED: Mutex<Option<Received>> = Mutex::new(None);

impl Handler<Numbered> for Counter {
    fn handle(&mut self, Numbered(sender, n): Numbered, ctx: &mut Context<Self>) {
        let id = self.1.clone();
        let mut received = RECEIVED.lock().unwrap();
        let received = received.get_or_insert_with(Received::default);
        let last = received.last.insert((id.clone(), sender), n);
        if n != last.map_or(0, |l| l + 1) {
            received.disorder.push(format!(
                "{id} got {n} from sender {sender} after {last:?} on {}",
                ctx.system().node().name()
            ));
        }
    }
}
impl Handler<LastFrom> for Counter {
    fn handle(&mut self, LastFrom(sender): LastFrom, _: &mut Context<Self>) -> Option<u64> {
        let id = self.1.clone();
        let received = RECEIVED.lock().unwrap();
        received.as_ref()?.last.get(&(id, sender)).copied()
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
    store: Arc<dyn LeaseStore>,
}

fn node_on(system: ActorSystem, ca: &DevCa, name: &str, store: Arc<dyn LeaseStore>) -> Node {
    let remote = tls_remote(&system, ca, "tls-cluster", name, |b| b);
    let starting = Cluster::builder(store.clone())
        .shards(ShardCount::new(32).unwrap())
        .lease(Duration::from_secs(3), Duration::from_millis(300))
        .membership(fast_membership())
        .entity::<Counter>(|id| Counter(0, id.to_string()))
        .start(&system, &remote);
    let cluster = system.block_on(starting).unwrap();
    Node {
        system,
        remote,
        cluster,
        store,
    }
}

#[test]
fn entities_work_across_three_nodes_over_tls_and_move_when_a_node_leaves() {
    let store = Arc::new(MemoryLeaseStore::new());
    three_nodes_then_a_leave(|_| store.clone() as Arc<dyn LeaseStore>);
}

/// The same with the PostgreSQL store, a server the test starts, and a
/// store client per node.
#[test]
fn the_same_with_the_postgresql_store() {
    let server = postgres::Server::start();
    let url = server.url();
    three_nodes_then_a_leave(|system| {
        let connecting = PostgresLeaseStore::connect(&url);
        Arc::new(system.block_on(connecting).unwrap()) as Arc<dyn LeaseStore>
    });
}

fn three_nodes_then_a_leave(mut store_for: impl FnMut(&ActorSystem) -> Arc<dyn LeaseStore>) {
    let ca = DevCa::new("cluster test CA").unwrap();
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let system = ActorSystem::builder().name(*n).build();
            let store = store_for(&system);
            node_on(system, &ca, n, store)
        })
        .collect();
    let store = nodes[0].store.clone();
    let seed = nodes[0].remote.local_addr().unwrap();
    for n in &nodes[1..] {
        let found = n
            .system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
        assert_eq!(found, 1);
    }
    // Settled: the counters below keep their state in memory only, so one
    // moved by the rebalancing that follows a join would start over.
    eventually(
        "every shard has an owner and every node has its share",
        || {
            let view = nodes[0].system.block_on(store.view()).unwrap();
            view.assignments.iter().all(|a| a.owner.is_some())
                && nodes.iter().all(|n| {
                    let status = n.system.block_on(n.cluster.status());
                    status.is_ok_and(|s| s.members.len() == 3 && s.balanced)
                })
        },
    );
    // One counter, asked from every node: one instance answers all.
    let mut expected = 0;
    for _ in 0..3 {
        for n in &nodes {
            expected += 1;
            let got = n
                .cluster
                .entity::<Counter>("shared")
                .ask(Add(1))
                .timeout(GUARD)
                .wait();
            assert_eq!(got, Ok(expected));
        }
    }
    // Many entities spread over the nodes.
    let mut hosts = std::collections::BTreeSet::new();
    for i in 0..40 {
        let e = nodes[i % 3].cluster.entity::<Counter>(format!("e{i}"));
        assert_eq!(e.ask(Add(2)).timeout(GUARD).wait(), Ok(2));
        hosts.insert(e.ask(WhereAreYou).timeout(GUARD).wait().unwrap());
    }
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    // The node hosting "shared" leaves: it is served again elsewhere.
    let host = nodes[0]
        .cluster
        .entity::<Counter>("shared")
        .ask(WhereAreYou)
        .timeout(GUARD)
        .wait()
        .unwrap();
    let leaver = nodes
        .iter()
        .position(|n| n.system.node().name() == host)
        .unwrap();
    nodes[leaver]
        .system
        .block_on(nodes[leaver].cluster.leave())
        .unwrap();
    let asker = &nodes[(leaver + 1) % 3];
    let mut answered = None;
    eventually("the entity answers from another node", || {
        let got = asker
            .cluster
            .entity::<Counter>("shared")
            .ask(WhereAreYou)
            .timeout(Duration::from_secs(5))
            .wait();
        answered = got.ok();
        answered.is_some()
    });
    assert_ne!(answered.unwrap(), host);
    let status = nodes[leaver]
        .system
        .block_on(nodes[leaver].cluster.status())
        .unwrap();
    assert!(status.leaving && status.shards.is_empty(), "{status:?}");
}

/// Two threads of one node stream numbered messages to eight entities
/// while a fourth node joins and then leaves, so every shard's route
/// closes and opens again under load (senders switch between their
/// node's region and the shortcut to the owner, `routes.rs`): every
/// entity gets each sender's numbers in order, none missing.
#[test]
fn each_senders_order_holds_under_load_while_shards_move() {
    let ca = DevCa::new("cluster test CA").unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let start = |name: &str| {
        node_on(
            ActorSystem::builder().name(name).build(),
            &ca,
            name,
            store.clone(),
        )
    };
    let nodes: Vec<Node> = ["a", "b", "c"].iter().map(|n| start(n)).collect();
    let seed = nodes[0].remote.local_addr().unwrap();
    let join = |n: &Node| {
        n.system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]))
    };
    for n in &nodes[1..] {
        assert_eq!(join(n), 1);
    }
    let settled = |nodes: &[&Node], members: usize| {
        eventually("every shard has an owner and every node its share", || {
            nodes.iter().all(|n| {
                let status = n.system.block_on(n.cluster.status());
                status.is_ok_and(|s| s.members.len() == members && s.balanced)
            })
        })
    };
    settled(&nodes.iter().collect::<Vec<_>>(), 3);
    let ids: Vec<String> = (0..8).map(|i| format!("in-order-{i}")).collect();
    const PER_SENDER: u64 = 40_000;
    let senders: Vec<_> = (0..2u32)
        .map(|sender| {
            let cluster = nodes[0].cluster.clone();
            let ids = ids.clone();
            std::thread::spawn(move || {
                let refs: Vec<_> = ids
                    .iter()
                    .map(|id| cluster.entity::<Counter>(id.clone()))
                    .collect();
                for n in 0..PER_SENDER {
                    let e = &refs[(n % refs.len() as u64) as usize];
                    e.tell(Numbered(sender, n / refs.len() as u64)).unwrap();
                    if n % 64 == 0 {
                        // Paced, so the stream spans the join and the leave.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    let d = start("d");
    assert!(join(&d) >= 1);
    settled(&[&nodes[0], &nodes[1], &nodes[2], &d], 4);
    d.system.block_on(d.cluster.leave()).unwrap();
    for s in senders {
        s.join().unwrap();
    }
    // Each sender's last number is in once an ask after it is answered
    // (its own order).
    let last = PER_SENDER / ids.len() as u64 - 1;
    for id in &ids {
        for sender in 0..2 {
            let e = nodes[0].cluster.entity::<Counter>(id.clone());
            let got = e.ask(LastFrom(sender)).timeout(GUARD).wait();
            assert_eq!(got, Ok(Some(last)), "{id} from sender {sender}");
        }
    }
    let received = RECEIVED.lock().unwrap();
    let disorder = &received.as_ref().unwrap().disorder;
    assert!(
        disorder.is_empty(),
        "{} out of order: {:#?}",
        disorder.len(),
        &disorder[..disorder.len().min(10)]
    );
}
