//! Durable reminders of virtual actors in a cluster (troubadour-persistence's
//! `Reminders`, owned by `Cluster::hosts`): three nodes in one process on
//! loopback with mutual TLS, one store shared as a database would be. Each
//! tick is fired by the node that hosts the entity, activates it when it
//! was passivated, and is delivered once; when a node leaves, the new
//! owners go on firing. Each vehicle sets its reminder itself, from its
//! context (`ctx.remind`), under the identity the cluster activated it
//! with.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, Entity, EntityMessages, MemoryLeaseStore};
use troubadour_persistence::{MemoryStore, Remind, Reminders};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage};

mod common;
use common::{eventually, fast_membership, tls_remote};

/// A reminder's tick, as the entity receives it.
#[derive(Debug, Serialize, Deserialize)]
struct Tick {
    due: SystemTime,
    /// The node whose reminder service fired it.
    fired_by: String,
}
impl Message for Tick {
    type Reply = ();
}
impl RemoteMessage for Tick {
    const NAME: &'static str = "reminders-test.Tick";
}

/// Tells a vehicle to remind itself from `first` on, every `every_ms`.
#[derive(Debug, Serialize, Deserialize)]
struct Enroll {
    first: SystemTime,
    every_ms: u64,
}
impl Message for Enroll {
    type Reply = Result<(), String>;
}
impl RemoteMessage for Enroll {
    const NAME: &'static str = "reminders-test.Enroll";
}

/// Every tick handled: (vehicle, due, fired by, handled on), and every
/// activation.
#[derive(Default)]
struct Census {
    ticks: Mutex<Vec<(String, SystemTime, String, String)>>,
    activations: Mutex<Vec<String>>,
}

struct Vehicle {
    id: String,
    census: Arc<Census>,
}
impl Actor for Vehicle {
    fn started(&mut self, _: &mut Context<Self>) {
        self.census
            .activations
            .lock()
            .unwrap()
            .push(self.id.clone());
    }
}
impl Handler<Tick> for Vehicle {
    fn handle(&mut self, t: Tick, ctx: &mut Context<Self>) {
        let here = ctx.system().node().name().to_string();
        self.census
            .ticks
            .lock()
            .unwrap()
            .push((self.id.clone(), t.due, t.fired_by, here));
    }
}
impl AsyncHandler<Enroll> for Vehicle {
    async fn handle(&mut self, e: Enroll, ctx: &mut Context<Self>) -> Result<(), String> {
        let every = Duration::from_millis(e.every_ms);
        ctx.remind("report", e.first, Some(every))
            .await
            .map_err(|e| e.to_string())
    }
}
impl Entity for Vehicle {
    const KIND: &'static str = "vehicle";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Tick>().handle_async::<Enroll>();
    }
}

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
    reminders: Reminders,
}

fn node(
    ca: &DevCa,
    name: &str,
    leases: &Arc<MemoryLeaseStore>,
    db: &MemoryStore,
    census: &Arc<Census>,
) -> Node {
    let system = ActorSystem::builder().name(name).build();
    let remote = tls_remote(&system, ca, "reminders-test", name, |b| {
        b.register::<Tick>().register::<Enroll>()
    });
    let c = census.clone();
    let starting = Cluster::builder(leases.clone())
        .lease(Duration::from_secs(3), Duration::from_millis(300))
        .membership(fast_membership())
        // Passivated between ticks: each tick activates it again.
        .passivate_after(Some(Duration::from_millis(100)))
        .entity::<Vehicle>(move |id| Vehicle {
            id: id.to_string(),
            census: c.clone(),
        })
        .start(&system, &remote);
    let cluster = system.block_on(starting).unwrap();
    let reminders = Reminders::start(&system, db.clone(), Duration::from_millis(20));
    let owner = cluster.clone();
    reminders.owned_by(move |_, id| owner.hosts(id).is_some());
    let (to, me) = (cluster.clone(), name.to_string());
    reminders.deliver("vehicle", move |id, r| {
        let _ = to.entity::<Vehicle>(id).tell(Tick {
            due: r.due,
            fired_by: me.clone(),
        });
    });
    Node {
        system,
        remote,
        cluster,
        reminders,
    }
}

fn settled(nodes: &[&Node], members: usize) -> bool {
    nodes
        .iter()
        .all(|n| common::settled_at(&n.system, &n.cluster, members))
}

#[test]
fn reminders_fire_on_the_owner_once_per_tick_and_go_on_after_a_node_leaves() {
    let ca = DevCa::new("reminders test CA").unwrap();
    let leases = Arc::new(MemoryLeaseStore::new());
    let db = MemoryStore::new();
    let census = Arc::new(Census::default());
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| node(&ca, n, &leases, &db, &census))
        .collect();
    let seed = nodes[0].remote.local_addr().unwrap();
    for n in &nodes[1..] {
        n.system
            .block_on(n.cluster.membership().join_addresses(&n.remote, &[seed]));
    }
    let all: Vec<&Node> = nodes.iter().collect();
    eventually("the cluster settles", || settled(&all, 3));

    // Twelve vehicles, told from one node to remind themselves every
    // 300 ms: each sets its reminder on the node that hosts it.
    let start = SystemTime::now();
    for i in 0..12 {
        let id = format!("v{i}");
        let enrolled = nodes[0]
            .cluster
            .entity::<Vehicle>(id.as_str())
            .ask(Enroll {
                first: start,
                every_ms: 300,
            })
            .timeout(Duration::from_secs(10))
            .wait()
            .unwrap();
        assert_eq!(enrolled, Ok(()));
        let set = nodes[0]
            .system
            .block_on(nodes[0].reminders.list("vehicle", &id))
            .unwrap();
        assert_eq!(set.len(), 1, "{id}'s reminder is kept under its entity");
    }
    eventually("36 ticks", || census.ticks.lock().unwrap().len() >= 36);

    // A node leaves; the others host its vehicles and fire their ticks.
    let before = census.ticks.lock().unwrap().len();
    nodes[2].system.block_on(nodes[2].cluster.leave()).unwrap();
    eventually("the two nodes settle", || settled(&all[..2], 2));
    eventually("36 more ticks", || {
        census.ticks.lock().unwrap().len() >= before + 36
    });

    let ticks = census.ticks.lock().unwrap().clone();
    // While no shard moves, each tick is fired by the node that hosts the
    // vehicle (and handled there).
    let elsewhere: Vec<_> = ticks[..before].iter().filter(|t| t.2 != t.3).collect();
    assert!(
        elsewhere.is_empty(),
        "ticks fired by a node that did not host the vehicle: {elsewhere:?}"
    );
    // Once per tick.
    let distinct: HashSet<(&String, &SystemTime)> = ticks.iter().map(|t| (&t.0, &t.1)).collect();
    assert_eq!(distinct.len(), ticks.len(), "a tick was delivered twice");
    // After the leave (allowing the ticks already on their way), only the
    // nodes that stayed fire.
    assert!(ticks[before + 12..].iter().all(|t| t.2 != "c"));
    // Passivated between ticks, activated again by them.
    let activations = census.activations.lock().unwrap().len();
    assert!(
        activations > 24,
        "ticks did not activate passivated vehicles ({activations})"
    );
}
