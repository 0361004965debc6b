//! Cluster-wide groups (Erlang's `pg`) over real sockets: three nodes in
//! one process on loopback with mutual TLS. What `pg` users rely on: a join
//! on one node is seen on every node, a broadcast reaches every member
//! wherever it runs (in the order one sender sent), and members go when
//! they leave, when they stop, and when their node goes down; a node that
//! joins the cluster later learns the members that joined before it.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, ClusterError, GroupError, MemoryLeaseStore};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage};

mod common;
use common::{eventually, fast_membership, tls_remote};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Said(u64);
impl Message for Said {
    type Reply = ();
}
impl RemoteMessage for Said {
    const NAME: &'static str = "groups-test.Said";
}

/// Keeps what it heard, for the test to read.
struct Listener(Arc<Mutex<Vec<u64>>>);
impl Actor for Listener {}
impl Handler<Said> for Listener {
    fn handle(&mut self, Said(n): Said, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(n);
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
}

fn node(ca: &DevCa, name: &str, store: &Arc<MemoryLeaseStore>) -> Node {
    let system = ActorSystem::builder().name(name).build();
    // Members travel as `Recipient<Said>`s: the remote layer must know
    // `Said`, as for any message that crosses nodes.
    let remote = tls_remote(&system, ca, "groups-test", name, |b| b.register::<Said>());
    let starting = Cluster::builder(store.clone())
        .lease(Duration::from_secs(3), Duration::from_millis(300))
        .membership(fast_membership())
        .group::<Said>()
        .start(&system, &remote);
    let cluster = system.block_on(starting).unwrap();
    Node {
        system,
        remote,
        cluster,
    }
}

fn join_cluster(n: &Node, seed: &Node) {
    let seed = seed.remote.local_addr().unwrap();
    n.system
        .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
}

fn members(n: &Node, group: &str) -> usize {
    n.system
        .block_on(n.cluster.group::<Said>(group).members())
        .unwrap()
        .len()
}

fn listener(n: &Node) -> (ActorRef<Listener>, Arc<Mutex<Vec<u64>>>) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    (n.system.spawn(Listener(heard.clone())).unwrap(), heard)
}

#[test]
fn a_broadcast_reaches_every_member_on_every_node_in_order_and_members_go_when_they_leave_or_stop()
{
    let ca = DevCa::new("groups test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| node(&ca, n, &store))
        .collect();
    for n in &nodes[1..] {
        join_cluster(n, &nodes[0]);
    }
    eventually("three members everywhere", || {
        nodes
            .iter()
            .all(|n| n.cluster.membership().members().len() == 3)
    });
    let listeners: Vec<_> = nodes.iter().map(listener).collect();
    for (n, (actor, _)) in nodes.iter().zip(&listeners) {
        n.cluster.group::<Said>("room").join(actor).unwrap();
    }
    eventually("every node sees the three members", || {
        nodes.iter().all(|n| members(n, "room") == 3)
    });
    // Another group is another group.
    assert_eq!(members(&nodes[0], "hall"), 0);

    // From one node, 100 numbered messages: every member hears all, in order.
    let room = nodes[1].cluster.group::<Said>("room");
    for i in 0..100 {
        room.broadcast(Said(i)).unwrap();
    }
    for (_, heard) in &listeners {
        eventually("every member heard the 100", || {
            heard.lock().unwrap().len() == 100
        });
        assert_eq!(*heard.lock().unwrap(), (0..100).collect::<Vec<u64>>());
    }

    // c's member leaves; a's member stops: both are gone everywhere, and
    // a broadcast reaches b's member alone.
    nodes[2]
        .cluster
        .group::<Said>("room")
        .leave(&listeners[2].0)
        .unwrap();
    listeners[0].0.stop();
    eventually("one member left everywhere", || {
        nodes.iter().all(|n| members(n, "room") == 1)
    });
    nodes[0]
        .cluster
        .group::<Said>("room")
        .broadcast(Said(1000))
        .unwrap();
    eventually("b's member heard it", || {
        listeners[1].1.lock().unwrap().last() == Some(&1000)
    });
    assert_eq!(
        listeners[2].1.lock().unwrap().len(),
        100,
        "c's member left before"
    );
}

#[test]
fn members_of_a_node_that_goes_down_are_removed_and_a_late_node_learns_the_rest() {
    let ca = DevCa::new("groups test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let a = node(&ca, "a", &store);
    let b = node(&ca, "b", &store);
    join_cluster(&b, &a);
    let (la, _) = listener(&a);
    let (lb, _) = listener(&b);
    // Joined twice: a member twice, as in pg.
    a.cluster.group::<Said>("room").join(&la).unwrap();
    a.cluster.group::<Said>("room").join(&la).unwrap();
    b.cluster.group::<Said>("room").join(&lb).unwrap();
    eventually("a and b see the three memberships", || {
        members(&a, "room") == 3 && members(&b, "room") == 3
    });

    // c joins the cluster after the members joined: it learns them all.
    let c = node(&ca, "c", &store);
    join_cluster(&c, &a);
    eventually("c learns the memberships made before it came", || {
        members(&c, "room") == 3
    });

    // b goes down without a word: its member is removed on a and c.
    let _ = b.system.shutdown(Duration::from_secs(5));
    drop(b);
    eventually("b's member is gone once b is down", || {
        members(&a, "room") == 2 && members(&c, "room") == 2
    });

    // Joining another node's actor is refused: join where it runs.
    let on_a = a.system.spawn(Listener(Arc::default())).unwrap();
    assert_eq!(
        c.cluster.group::<Said>("room").join(&on_a),
        Err(GroupError::NotLocal)
    );
}

/// A group message the node's remote layer was not told about: no member
/// could ever reach another node, so the node does not start, and says
/// what to add.
#[test]
fn a_group_message_the_remote_layer_does_not_know_fails_the_start() {
    let ca = DevCa::new("groups test CA").unwrap();
    let system = ActorSystem::builder().name("forgetful").build();
    let remote = tls_remote(&system, &ca, "groups-test", "forgetful", |b| b);
    let starting = Cluster::builder(Arc::new(MemoryLeaseStore::new()))
        .group::<Said>()
        .start(&system, &remote);
    match system.block_on(starting) {
        Err(e @ ClusterError::GroupMessage(name)) => {
            assert_eq!(name, Said::NAME);
            assert!(e.to_string().contains(".register::<M>()"), "{e}");
        }
        Err(other) => panic!("expected GroupMessage, got {other}"),
        Ok(_) => panic!("the node started with a group message it cannot send"),
    }
}
