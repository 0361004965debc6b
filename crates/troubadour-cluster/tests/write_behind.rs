//! Write-behind across a handoff: entities keep their state in memory
//! (troubadour-persistence's `Durable`), each node's `WriteBehind` never
//! flushes on its own in this test (an hour's period), and
//! `ClusterBuilder::before_handoff` flushes it once a leaving node's
//! entities have stopped and before its shards go. The next owners read
//! the states the stopped entities left. Without the hook they start from
//! nothing (checked: proof the test can fail).

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, Entity, EntityMessages, MemoryLeaseStore};
use troubadour_persistence::{Durable, MemoryStore, WriteBehind};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage};

mod common;
use common::{eventually, fast_membership, tls_remote, GUARD};

#[derive(Debug, Serialize, Deserialize)]
struct Set(u64);
impl Message for Set {
    type Reply = ();
}
impl RemoteMessage for Set {
    const NAME: &'static str = "write-behind-test.Set";
}

#[derive(Debug, Serialize, Deserialize)]
struct Get;
impl Message for Get {
    type Reply = u64;
}
impl RemoteMessage for Get {
    const NAME: &'static str = "write-behind-test.Get";
}

#[derive(Serialize, Deserialize, Default)]
struct Value(u64);

struct Meter {
    value: Durable<Value>,
}
impl Actor for Meter {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.value.loading())
    }
}
impl Handler<Set> for Meter {
    fn handle(&mut self, Set(v): Set, _: &mut Context<Self>) {
        self.value.update(|s| s.0 = v);
    }
}
impl Handler<Get> for Meter {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> u64 {
        self.value.0
    }
}
impl Entity for Meter {
    const KIND: &'static str = "meter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Set>().handle::<Get>();
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
}

fn node(
    ca: &DevCa,
    name: &str,
    leases: &Arc<MemoryLeaseStore>,
    db: &MemoryStore,
    flush_on_handoff: bool,
) -> Node {
    let system = ActorSystem::builder().name(name).build();
    let remote = tls_remote(&system, ca, "write-behind-test", name, |b| {
        b.register::<Set>().register::<Get>()
    });
    let behind = WriteBehind::start(db.clone(), Duration::from_secs(3600), system.tokio_handle());
    let b = behind.clone();
    let mut builder = Cluster::builder(leases.clone())
        .lease(Duration::from_secs(3), Duration::from_millis(300))
        .membership(fast_membership())
        // Written with the epoch of the shard: the next owner's epoch is
        // newer, so what it writes replaces what this node left.
        .entity_in_shard::<Meter>(move |id, at| Meter {
            value: Durable::new(&b, id, Value::default()).epoch(at.epoch),
        });
    if flush_on_handoff {
        builder = builder.before_handoff(move || {
            let behind = behind.clone();
            Box::pin(async move {
                let _ = behind.flush().await;
            })
        });
    }
    let cluster = system.block_on(builder.start(&system, &remote)).unwrap();
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

/// Sets 60 meters through node a, makes c leave, reads them through a;
/// returns how many kept their value.
fn kept_after_a_leave(flush_on_handoff: bool) -> usize {
    let ca = DevCa::new("write-behind test CA").unwrap();
    let leases = Arc::new(MemoryLeaseStore::new());
    let db = MemoryStore::new();
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| node(&ca, n, &leases, &db, flush_on_handoff))
        .collect();
    let seed = nodes[0].remote.local_addr().unwrap();
    for n in &nodes[1..] {
        n.system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
    }
    let all: Vec<&Node> = nodes.iter().collect();
    eventually("the cluster settles", || settled(&all, 3));
    let a = &nodes[0].cluster;
    for i in 0..60u64 {
        let m = a.entity::<Meter>(format!("m{i}"));
        m.tell(Set(1000 + i)).unwrap();
        assert_eq!(m.ask(Get).timeout(GUARD).wait().unwrap(), 1000 + i);
    }
    nodes[2].system.block_on(nodes[2].cluster.leave()).unwrap();
    eventually("two nodes settle", || settled(&all[..2], 2));
    (0..60u64)
        .filter(|i| {
            a.entity::<Meter>(format!("m{i}"))
                .ask(Get)
                .timeout(GUARD)
                .wait()
                .unwrap()
                == 1000 + i
        })
        .count()
}

#[test]
fn states_left_by_a_leaving_node_are_read_by_the_next_owners() {
    assert_eq!(kept_after_a_leave(true), 60);
}

#[test]
fn without_the_flush_on_handoff_the_leaving_nodes_states_are_lost() {
    // About a third of the meters lived on c: they start again from zero.
    assert!(kept_after_a_leave(false) < 60);
}
