//! Cluster singletons over real sockets: three nodes in one process on
//! loopback with mutual TLS. What a user of Akka's cluster singleton
//! relies on: exactly one instance runs in the cluster, started without
//! waiting for a message, reachable from every node; when its node leaves
//! it runs again on another node, and again when it stops by itself.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, Entity, EntityMessages, MemoryLeaseStore};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage};

mod common;
use common::{eventually, fast_membership, tls_remote, GUARD};

#[derive(Debug, Serialize, Deserialize)]
struct WhereAreYou;
impl Message for WhereAreYou {
    type Reply = String;
}
impl RemoteMessage for WhereAreYou {
    const NAME: &'static str = "singleton-test.WhereAreYou";
}

#[derive(Debug, Serialize, Deserialize)]
struct StopYourself;
impl Message for StopYourself {
    type Reply = ();
}
impl RemoteMessage for StopYourself {
    const NAME: &'static str = "singleton-test.StopYourself";
}

/// Counts its instances alive in the process, and every start.
#[derive(Default)]
struct Census {
    alive: AtomicI64,
    started: AtomicU64,
}

struct Scheduler(Arc<Census>);
impl Actor for Scheduler {
    fn started(&mut self, _: &mut Context<Self>) {
        self.0.alive.fetch_add(1, Ordering::SeqCst);
        self.0.started.fetch_add(1, Ordering::SeqCst);
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
    }
}
impl Handler<WhereAreYou> for Scheduler {
    fn handle(&mut self, _: WhereAreYou, ctx: &mut Context<Self>) -> String {
        ctx.system().node().name().to_string()
    }
}
impl Handler<StopYourself> for Scheduler {
    fn handle(&mut self, _: StopYourself, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
impl Entity for Scheduler {
    const KIND: &'static str = "scheduler";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<WhereAreYou>().handle::<StopYourself>();
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
}

fn node(ca: &DevCa, name: &str, store: &Arc<MemoryLeaseStore>, census: &Arc<Census>) -> Node {
    let system = ActorSystem::builder().name(name).build();
    let remote = tls_remote(&system, ca, "singleton-test", name, |b| b);
    let census = census.clone();
    let starting = Cluster::builder(store.clone())
        .lease(Duration::from_secs(3), Duration::from_millis(300))
        .membership(fast_membership())
        // Passivation on, short: a singleton is never passivated.
        .passivate_after(Some(Duration::from_millis(200)))
        .singleton::<Scheduler>(move || Scheduler(census.clone()))
        .start(&system, &remote);
    let cluster = system.block_on(starting).unwrap();
    Node {
        system,
        remote,
        cluster,
    }
}

fn settled(nodes: &[&Node], members: usize) -> bool {
    nodes
        .iter()
        .all(|n| common::settled_at(&n.system, &n.cluster, members))
}

fn where_is(n: &Node) -> String {
    n.cluster
        .singleton::<Scheduler>()
        .ask(WhereAreYou)
        .timeout(GUARD)
        .wait()
        .unwrap()
}

#[test]
fn one_singleton_runs_without_being_asked_and_runs_again_elsewhere_when_its_node_leaves() {
    let ca = DevCa::new("singleton test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let census = Arc::new(Census::default());
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| node(&ca, n, &store, &census))
        .collect();
    let seed = nodes[0].remote.local_addr().unwrap();
    for n in &nodes[1..] {
        n.system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
    }
    let all: Vec<&Node> = nodes.iter().collect();
    eventually("the cluster settles", || settled(&all, 3));
    // Started with no message sent to it; one instance.
    eventually("the singleton runs", || {
        census.alive.load(Ordering::SeqCst) == 1
    });
    // (It may have moved while the cluster formed: count from here.)
    let starts = census.started.load(Ordering::SeqCst);
    // Every node reaches the same one; passivation (200 ms) does not stop
    // it while it idles.
    let home = where_is(&nodes[0]);
    std::thread::sleep(Duration::from_millis(800));
    for n in &nodes {
        assert_eq!(where_is(n), home);
    }
    assert_eq!(census.alive.load(Ordering::SeqCst), 1);
    assert_eq!(
        census.started.load(Ordering::SeqCst),
        starts,
        "never passivated"
    );

    // It stops by itself: it runs again (on its shard's owner).
    let first = nodes[1].cluster.singleton::<Scheduler>();
    first.ask(StopYourself).timeout(GUARD).wait().unwrap();
    eventually("it runs again after stopping itself", || {
        census.started.load(Ordering::SeqCst) == starts + 1
            && census.alive.load(Ordering::SeqCst) == 1
    });
    assert_eq!(where_is(&nodes[2]), home);

    // Its node leaves: it runs on another node, once.
    let leaver = nodes
        .iter()
        .position(|n| n.system.node().name() == home)
        .unwrap();
    nodes[leaver]
        .system
        .block_on(nodes[leaver].cluster.leave())
        .unwrap();
    let stay: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leaver)
        .map(|(_, n)| n)
        .collect();
    eventually("it runs on a node that stayed", || {
        census.started.load(Ordering::SeqCst) == starts + 2
            && census.alive.load(Ordering::SeqCst) == 1
    });
    let moved = where_is(stay[0]);
    assert_ne!(moved, home);
    assert_eq!(where_is(stay[1]), moved);
    assert_eq!(census.alive.load(Ordering::SeqCst), 1);
}
