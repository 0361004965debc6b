//! Virtual actors on the simulated network (DISTRIBUTION.md, "Cluster"):
//! an entity exists once in the whole cluster and is reached from every
//! node; after its owner crashes it answers again from another node
//! within the lease time + 2 s. Time is virtual and seeded:
//! `TROUBADOUR_SIM_SEED=<seed>` replays one seed.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{
    with_cluster, Cluster, Entity, EntityMessages, LeaseStore, MembershipConfig, MemoryLeaseStore,
    ShardCount,
};
use troubadour_remote::RemoteMessage;
use troubadour_testkit::{seeds, simulate_network, NodeIndex, SimNetwork};

mod store_link;
use store_link::StoreLink;

const S: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = u64;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "va-test.Add";
}

/// Which node the entity runs on.
#[derive(Debug, Serialize, Deserialize)]
struct WhereAreYou;
impl Message for WhereAreYou {
    type Reply = String;
}
impl RemoteMessage for WhereAreYou {
    const NAME: &'static str = "va-test.WhereAreYou";
}

/// Activations per (node, id), across the whole test.
type Activations = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// Entities alive now per id, across every node of the test, and the
/// most ever alive at once per id: the single-activation checker.
#[derive(Default)]
struct Alive {
    now: HashMap<String, usize>,
    most: HashMap<String, usize>,
    /// The last `Seq` number each entity got from each sender, across its
    /// activations, and every one that did not follow it.
    last_seq: HashMap<(String, u32), u64>,
    disorder: Vec<String>,
}
type AliveLog = Arc<Mutex<Alive>>;

struct Counter {
    id: String,
    total: u64,
    alive: AliveLog,
}
impl Actor for Counter {
    /// Entities named `broken…` cannot be activated (as with a state that
    /// no longer reads).
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl std::future::Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        let broken = self.id.starts_with("broken");
        Some(async move {
            if broken {
                Err(ExitReason::Failed("its state does not read".into()))
            } else {
                Ok(())
            }
        })
    }
    fn started(&mut self, _: &mut Context<Self>) {
        let mut a = self.alive.lock().unwrap();
        let now = {
            let n = a.now.entry(self.id.clone()).or_default();
            *n += 1;
            *n
        };
        let most = a.most.entry(self.id.clone()).or_default();
        *most = (*most).max(now);
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let mut a = self.alive.lock().unwrap();
        *a.now.get_mut(&self.id).unwrap() -= 1;
    }
}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 {
        self.total += n;
        self.total
    }
}
impl Handler<WhereAreYou> for Counter {
    fn handle(&mut self, _: WhereAreYou, ctx: &mut Context<Self>) -> String {
        ctx.system().node().name().to_string()
    }
}
/// Makes the handler panic.
#[derive(Debug, Serialize, Deserialize)]
struct Explode;
impl Message for Explode {
    type Reply = ();
}
impl RemoteMessage for Explode {
    const NAME: &'static str = "va-test.Explode";
}
impl Handler<Explode> for Counter {
    fn handle(&mut self, _: Explode, _: &mut Context<Self>) {
        panic!("{} exploded, as the test asked", self.id)
    }
}

/// Work that takes this many seconds of (virtual) time: the entity is
/// busy in an async handler meanwhile.
#[derive(Debug, Serialize, Deserialize)]
struct Slow(u64);
impl Message for Slow {
    type Reply = ();
}
impl RemoteMessage for Slow {
    const NAME: &'static str = "va-test.Slow";
}
impl AsyncHandler<Slow> for Counter {
    async fn handle(&mut self, Slow(seconds): Slow, ctx: &mut Context<Self>) {
        ctx.system().sleep(Duration::from_secs(seconds)).await;
    }
}

/// Numbered messages from one sender: each must follow the last one the
/// entity got from that sender, whichever activation got it.
#[derive(Debug, Serialize, Deserialize)]
struct Seq(u32, u64);
impl Message for Seq {
    type Reply = ();
}
impl RemoteMessage for Seq {
    const NAME: &'static str = "va-test.Seq";
}
impl Handler<Seq> for Counter {
    fn handle(&mut self, Seq(sender, n): Seq, ctx: &mut Context<Self>) {
        let mut a = self.alive.lock().unwrap();
        let last = a.last_seq.insert((self.id.clone(), sender), n);
        let expected = last.map_or(0, |l| l + 1);
        if n != expected {
            let node = ctx.system().node().name().to_string();
            a.disorder.push(format!(
                "{} got {n} from {sender} after {last:?} on {node}",
                self.id
            ));
        }
    }
}

impl Entity for Counter {
    const KIND: &'static str = "counter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Add>()
            .handle::<WhereAreYou>()
            .handle::<StopYourself>()
            .handle::<Seq>()
            .handle::<Explode>()
            .handle_async::<Slow>();
    }
}

struct TestCluster {
    clusters: Vec<Cluster>,
    store: Arc<MemoryLeaseStore>,
    activations: Activations,
    alive: AliveLog,
}

fn start_node(
    net: &mut SimNetwork,
    i: NodeIndex,
    store: Arc<dyn LeaseStore>,
    activations: &Activations,
    alive: &AliveLog,
    passivate: Option<Duration>,
    max_active: Option<usize>,
) -> Cluster {
    let activations = activations.clone();
    let alive = alive.clone();
    let name = net.system(i).node().name().to_string();
    let builder = Cluster::builder(store)
        .shards(ShardCount::new(64).unwrap())
        .lease(TTL, S)
        .passivate_after(passivate)
        .max_active_entities(max_active)
        .membership(MembershipConfig::expected_size(3).seed(net.seed() * 7 + i as u64))
        .entity::<Counter>(move |id| {
            activations
                .lock()
                .unwrap()
                .entry(id.to_string())
                .or_default()
                .push(name.clone());
            Counter {
                id: id.to_string(),
                total: 0,
                alive: alive.clone(),
            }
        });
    let starting = builder.start(net.system(i), net.remote(i));
    net.block_on(starting).unwrap()
}

impl TestCluster {
    /// No node gave up a flush of a moved shard's old path (each would
    /// have held the shard's messages for a second, then let them go on
    /// unordered).
    fn assert_no_flush_given_up(&self, net: &mut SimNetwork) {
        let given_up: Vec<u64> = self
            .clusters
            .iter()
            .map(|c| net.block_on(c.status()).unwrap().flushes_given_up)
            .collect();
        assert!(
            given_up.iter().all(|&n| n == 0),
            "flushes given up, per node: {given_up:?}"
        );
    }

    /// Every entity of `ids` got senders 0's and 1's numbers `0..rounds`
    /// in the order sent, none missing.
    fn assert_each_senders_order(&self, ids: &[String], rounds: u64) {
        let alive = self.alive.lock().unwrap();
        assert!(alive.disorder.is_empty(), "{:#?}", alive.disorder);
        for id in ids {
            for sender in [0u32, 1] {
                assert_eq!(
                    alive.last_seq.get(&(id.clone(), sender)),
                    Some(&(rounds - 1)),
                    "{id} from sender {sender}"
                );
            }
        }
    }

    /// A new node `name` joins the cluster through node 0.
    fn join(&mut self, net: &mut SimNetwork, name: &str) {
        let joiner = net.node(name, with_cluster);
        let c = start_node(
            net,
            joiner,
            self.store.clone(),
            &self.activations,
            &self.alive,
            None,
            None,
        );
        c.membership().join([net.system(0).node()]);
        self.clusters.push(c);
    }
}

fn cluster(net: &mut SimNetwork, n: usize) -> TestCluster {
    cluster_with(net, n, None)
}

/// `n` nodes joined through node 0, entities passivated after
/// `passivate`, run until placement has settled.
fn cluster_with(net: &mut SimNetwork, n: usize, passivate: Option<Duration>) -> TestCluster {
    cluster_limited(net, n, passivate, None)
}

/// The same, with at most `max_active` entities active per node.
fn cluster_limited(
    net: &mut SimNetwork,
    n: usize,
    passivate: Option<Duration>,
    max_active: Option<usize>,
) -> TestCluster {
    let store = Arc::new(MemoryLeaseStore::with_clock(net.clock()).recording());
    let activations: Activations = Arc::default();
    let alive: AliveLog = Arc::default();
    for i in 0..n {
        net.node(&format!("n{i}"), with_cluster);
    }
    let clusters: Vec<Cluster> = (0..n)
        .map(|i| {
            start_node(
                net,
                i,
                store.clone(),
                &activations,
                &alive,
                passivate,
                max_active,
            )
        })
        .collect();
    let seed = net.system(0).node();
    for c in &clusters[1..] {
        c.membership().join([seed.clone()]);
    }
    // Long enough for the first claims and the rebalancing after them
    // (16 shards a tick) to settle.
    net.run_for(30 * S);
    TestCluster {
        clusters,
        store,
        activations,
        alive,
    }
}

#[test]
fn an_entity_is_reached_from_every_node_and_exists_once() {
    simulate_network(seeds(10), |net| {
        let t = cluster(net, 3);
        let mut expected = 0;
        for round in 0..3 {
            for c in &t.clusters {
                expected += 1;
                let got = net.block_on(c.entity::<Counter>("user1").ask(Add(1)).timeout(30 * S));
                assert_eq!(got, Ok(expected), "round {round} from {:?}", c);
            }
        }
        let made = t.activations.lock().unwrap()["user1"].clone();
        assert_eq!(made.len(), 1, "made once in the whole cluster: {made:?}");
        // Tells reach it too, in order with the asks after them.
        for c in &t.clusters {
            c.entity::<Counter>("user1").tell(Add(10)).unwrap();
        }
        let got = net.block_on(
            t.clusters[0]
                .entity::<Counter>("user1")
                .ask(Add(0))
                .timeout(30 * S),
        );
        assert!(
            got.unwrap() >= 9 + 10,
            "the tell from node 0 came before its ask"
        );
        // Every shard has an owner, spread over the three nodes.
        let view = net.block_on(t.store.view()).unwrap();
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for a in &view.assignments {
            let owner = a.owner.as_ref().expect("every shard is owned");
            *per_node.entry(owner.name.clone()).or_default() += 1;
        }
        assert_eq!(per_node.len(), 3, "{per_node:?}");
    });
}

#[test]
fn many_entities_are_spread_over_the_nodes_and_each_made_once() {
    simulate_network(seeds(5), |net| {
        let t = cluster(net, 3);
        let mut hosts: HashMap<String, usize> = HashMap::new();
        for i in 0..60 {
            let from = &t.clusters[i % 3];
            let e = from.entity::<Counter>(format!("vehicle-{i}"));
            assert_eq!(net.block_on(e.ask(Add(1)).timeout(30 * S)), Ok(1));
            let host = net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap();
            *hosts.entry(host).or_default() += 1;
        }
        assert_eq!(hosts.len(), 3, "{hosts:?}");
        let activations = t.activations.lock().unwrap();
        assert_eq!(activations.len(), 60);
        assert!(
            activations.values().all(|v| v.len() == 1),
            "{activations:?}"
        );
    });
}

#[test]
fn after_its_owner_crashes_an_entity_answers_from_another_node_within_the_lease_and_two_seconds() {
    simulate_network(seeds(10), |net| {
        let t = cluster(net, 3);
        let from = &t.clusters[0];
        // An entity whose owner is not node 0, so the ask survives the crash.
        let (id, host) = (0..)
            .map(|i| format!("user{i}"))
            .map(|id| {
                let host = net
                    .block_on(
                        from.entity::<Counter>(id.clone())
                            .ask(WhereAreYou)
                            .timeout(30 * S),
                    )
                    .unwrap();
                (id, host)
            })
            .find(|(_, host)| host != "n0")
            .unwrap();
        let victim: usize = host[1..].parse().unwrap();
        net.block_on(
            from.entity::<Counter>(id.clone())
                .ask(Add(5))
                .timeout(30 * S),
        )
        .unwrap();
        let still = net
            .block_on(
                from.entity::<Counter>(id.clone())
                    .ask(WhereAreYou)
                    .timeout(30 * S),
            )
            .unwrap();
        assert_eq!(still, host, "placement had settled");
        let failovers = |net: &mut SimNetwork| -> u64 {
            (0..3)
                .filter(|&i| i != victim)
                .map(|i| net.block_on(t.clusters[i].status()).unwrap().failovers)
                .sum()
        };
        assert_eq!(
            failovers(net),
            0,
            "shards so far were only claimed fresh or handed over"
        );
        let crashed_at = net.now();
        net.crash(victim);
        // A client asking again and again, as the failover benchmark
        // does: asks that reach the dead owner end with an error (at most
        // once: they may or may not have been handled), none hangs, and
        // the first answer comes from the shard's next owner.
        // Asks that time out may still be handled later (they wait for the
        // next owner): they add nothing, so the first answer shows the
        // state of the new activation.
        let got = loop {
            let asked = from.entity::<Counter>(id.clone()).ask(Add(0)).timeout(S);
            match net.block_on(asked) {
                Ok(n) => break n,
                Err(AskError::ConnectionLost | AskError::Timeout(_)) => {}
                Err(e) => panic!("an ask during the failover ended with {e}"),
            }
            assert!(
                net.now() - crashed_at < 60 * S,
                "no failover within a minute"
            );
        };
        let failover = net.now() - crashed_at;
        assert_eq!(got, 0, "a fresh activation (no persistence here)");
        assert!(failover <= TTL + 2 * S, "failover took {failover:?}");
        let new_host = net
            .block_on(
                from.entity::<Counter>(id.clone())
                    .ask(WhereAreYou)
                    .timeout(30 * S),
            )
            .unwrap();
        assert_ne!(new_host, host);
        assert!(
            failovers(net) >= 1,
            "the entity's shard was taken over from the lost node"
        );
    });
}

/// An entity that fails (its handler panics, its activation fails) stops
/// alone, as in Akka's sharding: however many fail, their regions keep
/// serving every other entity, and the next message activates a failed
/// one afresh.
#[test]
fn failing_entities_never_take_their_region_down() {
    simulate_network(seeds(5), |net| {
        let t = cluster(net, 2);
        let c = &t.clusters[0];
        // Ten panics and ten failed activations, in moments: past any
        // supervisor's restart intensity.
        for i in 0..10 {
            let fragile = c.entity::<Counter>(format!("fragile{i}"));
            assert_eq!(net.block_on(fragile.ask(Add(1)).timeout(30 * S)), Ok(1));
            let exploded = net.block_on(fragile.ask(Explode).timeout(30 * S));
            assert!(
                matches!(exploded, Err(ref e) if !matches!(e, AskError::Timeout(_))),
                "an ask whose handler panicked ends at once with an error: {exploded:?}"
            );
            let broken = c.entity::<Counter>(format!("broken{i}"));
            let refused = net.block_on(broken.ask(Add(1)).timeout(30 * S));
            assert!(
                matches!(refused, Err(ref e) if !matches!(e, AskError::Timeout(_))),
                "an ask to an entity that cannot activate ends with an error: {refused:?}"
            );
        }
        for (i, c) in t.clusters.iter().enumerate() {
            let status = net.block_on(c.status());
            assert!(status.is_ok(), "n{i}'s region stopped: {status:?}");
        }
        for i in 0..10 {
            let again = c.entity::<Counter>(format!("fragile{i}"));
            assert_eq!(
                net.block_on(again.ask(Add(1)).timeout(30 * S)),
                Ok(1),
                "fragile{i} answers again, from a fresh activation"
            );
        }
        for i in 0..20 {
            let healthy = c.entity::<Counter>(format!("healthy{i}"));
            assert_eq!(net.block_on(healthy.ask(Add(2)).timeout(30 * S)), Ok(2));
        }
    });
}

#[test]
fn a_seed_replays_the_same_cluster_run() {
    let run = |seed: u64| {
        let mut net = SimNetwork::new(seed);
        let t = cluster(&mut net, 3);
        for i in 0..10 {
            let e = t.clusters[i % 3].entity::<Counter>(format!("e{i}"));
            net.block_on(e.ask(Add(1)).timeout(30 * S)).unwrap();
        }
        net.crash(1);
        net.run_for(15 * S);
        net.trace().to_vec()
    };
    let (a, b) = (run(5), run(5));
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!(
            "the runs part at event {i} of {}: {:?} against {:?}",
            a.len(),
            &a[i.saturating_sub(5)..(i + 3).min(a.len())],
            &b[i.saturating_sub(5)..(i + 3).min(b.len())]
        );
    }
    assert_eq!(a, b);
}

#[test]
fn a_joining_node_takes_its_shards_and_no_entity_is_ever_active_twice() {
    simulate_network(seeds(10), |net| {
        let mut t = cluster(net, 2);
        let ids: Vec<String> = (0..20).map(|i| format!("e{i}")).collect();
        for id in &ids {
            let got = net.block_on(
                t.clusters[0]
                    .entity::<Counter>(id.clone())
                    .ask(Add(1))
                    .timeout(30 * S),
            );
            assert_eq!(got, Ok(1));
        }
        t.join(net, "n2");
        // Every entity is busy for a minute while shards move to the
        // joiner: a handoff that did not wait for its entities to stop
        // would have the joiner run a second one meanwhile.
        for id in &ids {
            t.clusters[0]
                .entity::<Counter>(id.clone())
                .tell(Slow(60))
                .unwrap();
        }
        for _ in 0..90 {
            for id in &ids {
                let asked = t.clusters[1]
                    .entity::<Counter>(id.clone())
                    .ask(Add(1))
                    .timeout(5 * S);
                match net.block_on(asked) {
                    Ok(_) | Err(AskError::Timeout(_)) | Err(AskError::ConnectionLost) => {}
                    Err(e) => panic!("an ask during the move ended with {e}"),
                }
            }
            net.run_for(S);
        }
        let mut on_joiner = 0;
        for id in &ids {
            let host = net
                .block_on(
                    t.clusters[2]
                        .entity::<Counter>(id.clone())
                        .ask(WhereAreYou)
                        .timeout(30 * S),
                )
                .unwrap();
            on_joiner += usize::from(host == "n2");
        }
        assert!(on_joiner > 0, "no entity moved to the joining node");
        let alive = t.alive.lock().unwrap();
        for id in &ids {
            assert_eq!(alive.most[id], 1, "{id} was active on two nodes at once");
        }
    });
}

// ---- passivation, self-stop, leave, status ---------------------------------

/// Stops itself.
#[derive(Debug, Serialize, Deserialize)]
struct StopYourself;
impl Message for StopYourself {
    type Reply = ();
}
impl RemoteMessage for StopYourself {
    const NAME: &'static str = "va-test.StopYourself";
}
impl Handler<StopYourself> for Counter {
    fn handle(&mut self, _: StopYourself, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

fn alive_now(t: &TestCluster, id: &str) -> usize {
    t.alive.lock().unwrap().now.get(id).copied().unwrap_or(0)
}

fn made(t: &TestCluster, id: &str) -> usize {
    t.activations.lock().unwrap().get(id).map_or(0, Vec::len)
}

#[test]
fn an_idle_entity_is_passivated_and_made_again_on_its_next_message() {
    simulate_network(seeds(10), |net| {
        let t = cluster_with(net, 3, Some(10 * S));
        let e = t.clusters[0].entity::<Counter>("sleepy");
        assert_eq!(net.block_on(e.ask(Add(3)).timeout(30 * S)), Ok(3));
        assert_eq!(alive_now(&t, "sleepy"), 1);
        // Idle for 10 s, swept every 2.5 s: stopped by 12.5 s.
        net.run_for(13 * S);
        assert_eq!(alive_now(&t, "sleepy"), 0, "not passivated");
        assert_eq!(made(&t, "sleepy"), 1);
        // The next message makes it again, from its factory.
        assert_eq!(net.block_on(e.ask(Add(1)).timeout(30 * S)), Ok(1));
        assert_eq!(made(&t, "sleepy"), 2);
        // Operators see it in the owner's status: two activations, one
        // passivation, and leases renewed all along.
        let statuses: Vec<_> = t
            .clusters
            .iter()
            .map(|c| net.block_on(c.status()).unwrap())
            .collect();
        let activations: u64 = statuses.iter().map(|s| s.activations).sum();
        let passivations: u64 = statuses.iter().map(|s| s.passivations).sum();
        assert_eq!((activations, passivations), (2, 1), "{statuses:?}");
        assert!(statuses
            .iter()
            .all(|s| s.lease_renewals > 0 && s.lease_renewal_failures == 0));
    });
}

#[test]
fn what_is_sent_while_an_entity_passivates_waits_for_its_next_activation() {
    simulate_network(seeds(10), |net| {
        let t = cluster_with(net, 3, Some(10 * S));
        let e = t.clusters[1].entity::<Counter>("busy");
        // Twenty seconds of work: the sweep finds it idle (nothing sent
        // for 10 s) while it is still working, and passivates it: it
        // finishes the work, then stops.
        e.tell(Slow(20)).unwrap();
        net.run_for(13 * S);
        for _ in 0..5 {
            e.tell(Add(1)).unwrap();
        }
        // All five reach the next activation, none the dead letters.
        assert_eq!(net.block_on(e.ask(Add(0)).timeout(60 * S)), Ok(5));
        assert_eq!(made(&t, "busy"), 2);
        assert_eq!(t.alive.lock().unwrap().most["busy"], 1);
    });
}

#[test]
fn an_entity_that_stopped_itself_gets_later_messages_in_its_next_activation() {
    simulate_network(seeds(10), |net| {
        let t = cluster_with(net, 3, None);
        let e = t.clusters[2].entity::<Counter>("quitter");
        assert_eq!(net.block_on(e.ask(Add(7)).timeout(30 * S)), Ok(7));
        e.tell(StopYourself).unwrap();
        net.run_for(S);
        assert_eq!(alive_now(&t, "quitter"), 0);
        assert_eq!(net.block_on(e.ask(Add(1)).timeout(30 * S)), Ok(1));
        assert_eq!(made(&t, "quitter"), 2);
    });
}

#[test]
fn a_node_that_leaves_hands_its_shards_over_within_a_second() {
    simulate_network(seeds(10), |net| {
        let t = cluster_with(net, 3, None);
        // An entity on node 2, asked from node 0.
        let id = (0..)
            .map(|i| format!("leaver{i}"))
            .find(|id| {
                let e = t.clusters[0].entity::<Counter>(id.clone());
                net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap() == "n2"
            })
            .unwrap();
        let e = t.clusters[0].entity::<Counter>(id.clone());
        assert_eq!(net.block_on(e.ask(Add(2)).timeout(30 * S)), Ok(2));
        let before = net.block_on(t.clusters[2].status()).unwrap();
        assert!(!before.shards.is_empty() && before.entities >= 1);
        let started = net.now();
        net.block_on(t.clusters[2].leave()).unwrap();
        let answered = net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap();
        let handoff = net.now() - started;
        assert_ne!(answered, "n2");
        assert!(handoff <= S, "the handoff took {handoff:?}");
        let after = net.block_on(t.clusters[2].status()).unwrap();
        assert!(
            after.leaving && after.shards.is_empty() && !after.lease_valid,
            "{after:?}"
        );
        // Never two at once, and the store gave every shard a new owner,
        // by handoff: none was a failover.
        assert_eq!(t.alive.lock().unwrap().most[&id], 1);
        for c in &t.clusters[..2] {
            assert_eq!(net.block_on(c.status()).unwrap().failovers, 0);
        }
        let view = net.block_on(t.store.view()).unwrap();
        assert!(view
            .assignments
            .iter()
            .all(|a| a.owner.as_ref().is_some_and(|o| o.name != "n2")));
    });
}

// ---- the lease store out of reach -------------------------------------------

/// A node that loses its way to the lease store stops its shards before
/// its lease runs out in the store, and says so in its status; the others
/// take the shards over once the store's lease has run out, and no entity
/// is ever active on two nodes. Healed, the node serves again.
#[test]
fn a_node_cut_off_from_the_lease_store_stops_its_shards_before_others_take_them() {
    simulate_network(seeds(10), |net| {
        let store = Arc::new(MemoryLeaseStore::with_clock(net.clock()).recording());
        let activations: Activations = Arc::default();
        let alive: AliveLog = Arc::default();
        let mut cuts = Vec::new();
        let mut clusters = Vec::new();
        for i in 0..3 {
            net.node(&format!("n{i}"), with_cluster);
            let (reachable, cut) = StoreLink::new(&store);
            cuts.push(cut);
            clusters.push(start_node(
                net,
                i,
                reachable,
                &activations,
                &alive,
                None,
                None,
            ));
        }
        let seed = net.system(0).node();
        for c in &clusters[1..] {
            c.membership().join([seed.clone()]);
        }
        net.run_for(30 * S);
        // An entity on node 1, asked from node 0.
        let id = (0..)
            .map(|i| format!("cut{i}"))
            .find(|id| {
                let e = clusters[0].entity::<Counter>(id.clone());
                net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap() == "n1"
            })
            .unwrap();
        let e = clusters[0].entity::<Counter>(id.clone());
        assert_eq!(net.block_on(e.ask(Add(1)).timeout(30 * S)), Ok(1));
        cuts[1].store(true, std::sync::atomic::Ordering::SeqCst);
        // Within its lease (10 s, 1 s margin) node 1 has stopped serving.
        net.run_for(TTL);
        let status = net.block_on(clusters[1].status()).unwrap();
        assert!(
            !status.lease_valid && status.shards.is_empty() && status.entities == 0,
            "{status:?}"
        );
        // The others serve the entity again (from a new activation).
        let host = loop {
            match net.block_on(e.ask(WhereAreYou).timeout(S)) {
                Ok(host) => break host,
                Err(AskError::Timeout(_) | AskError::ConnectionLost) => {}
                Err(other) => panic!("{other}"),
            }
        };
        assert_ne!(host, "n1");
        assert_eq!(
            alive.lock().unwrap().most[&id],
            1,
            "two activations at once"
        );
        // Healed, node 1 takes its place again.
        cuts[1].store(false, std::sync::atomic::Ordering::SeqCst);
        net.run_for(30 * S);
        let status = net.block_on(clusters[1].status()).unwrap();
        assert!(
            status.lease_valid && !status.shards.is_empty(),
            "{status:?}"
        );
        assert_eq!(
            alive.lock().unwrap().most[&id],
            1,
            "two activations at once"
        );
    });
}

/// Two senders number their messages to ten entities while a node joins
/// and another leaves, moving shards both ways: every entity gets every
/// sender's messages in the order sent, none lost, across its moves.
#[test]
fn each_senders_order_holds_across_moves() {
    simulate_network(seeds(10), |net| {
        let mut t = cluster(net, 3);
        let ids: Vec<String> = (0..10).map(|i| format!("ordered{i}")).collect();
        const ROUNDS: u64 = 100;
        for round in 0..ROUNDS {
            for id in &ids {
                for sender in [0u32, 1] {
                    let e = t.clusters[sender as usize].entity::<Counter>(id.clone());
                    e.tell(Seq(sender, round)).unwrap();
                }
            }
            net.run_for(S / 10);
            if round == 20 {
                t.join(net, "n3");
            }
            if round == 60 {
                let leaving = t.clusters[2].clone();
                net.block_on(leaving.leave()).unwrap();
            }
        }
        // Each sender's last message is in once an ask after it is
        // answered (its own order).
        for id in &ids {
            for sender in [0usize, 1] {
                let e = t.clusters[sender].entity::<Counter>(id.clone());
                net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap();
            }
        }
        t.assert_no_flush_given_up(net);
        t.assert_each_senders_order(&ids, ROUNDS);
        let moved = t
            .activations
            .lock()
            .unwrap()
            .values()
            .filter(|v| v.len() > 1)
            .count();
        assert!(moved > 0, "no entity moved: the test proved nothing");
    });
}

/// With at most two entities active per node, a new activation passivates
/// the one sent nothing for longest: never more than six alive on three
/// nodes once each passivation is done, and a passivated entity is made
/// again on its next message, which is not lost.
#[test]
fn a_limit_on_active_entities_passivates_the_least_recently_used() {
    simulate_network(seeds(10), |net| {
        let t = cluster_limited(net, 3, None, Some(2));
        let ids: Vec<String> = (0..12).map(|i| format!("limited{i}")).collect();
        for id in &ids {
            let e = t.clusters[0].entity::<Counter>(id.clone());
            assert_eq!(net.block_on(e.ask(Add(1)).timeout(30 * S)), Ok(1));
            net.run_until_idle();
            let alive: usize = t.alive.lock().unwrap().now.values().sum();
            assert!(
                alive <= 6,
                "{alive} entities alive on three nodes with a limit of two each"
            );
        }
        let passivated: Vec<&String> = ids.iter().filter(|id| alive_now(&t, id) == 0).collect();
        assert!(passivated.len() >= 6, "{passivated:?}");
        // Made again, from scratch (nothing is persisted here), and what it
        // is sent arrives.
        let first = passivated[0].clone();
        t.clusters[1]
            .entity::<Counter>(first.clone())
            .tell(Add(5))
            .unwrap();
        let got = net.block_on(
            t.clusters[1]
                .entity::<Counter>(first.clone())
                .ask(Add(0))
                .timeout(30 * S),
        );
        assert_eq!(got, Ok(5));
        assert_eq!(made(&t, &first), 2);
    });
}

/// A shard that moved twice (n0 → n1 → n2) while n0 and n1 each sent it
/// messages only through the other (n1 while n0 hosted it, n0 while n1
/// did) leaves each of them with the other as its old path. The next
/// message from n0 makes n0 flush n1, and that flush, passing n1, makes n1
/// flush n0: the two flushes cross. Neither may wait for the other (they
/// would until the flush limit, a second, and let the held messages go on
/// unordered): every ask is answered and no flush is given up.
#[test]
fn crossing_flushes_of_a_shard_moved_twice_do_not_wait_for_each_other() {
    simulate_network(seeds(10), |net| {
        let mut t = cluster(net, 1);
        let ids: Vec<String> = (0..64).map(|i| format!("crossing{i}")).collect();
        // Active entities on every shard: placement then moves the shards
        // a few at a time, leaving n1 time to send to them on n0.
        for id in &ids {
            let e = t.clusters[0].entity::<Counter>(id.clone());
            net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap();
        }
        t.join(net, "n1");
        // From n1 while n0 still hosts them (placement has not moved them
        // yet): n1's path to them is n0.
        let mut on_n0 = Vec::new();
        for id in &ids {
            let e = t.clusters[1].entity::<Counter>(id.clone());
            if net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap() == "n0" {
                on_n0.push(id.clone());
            }
        }
        net.run_for(60 * S);
        // From n0 once n1 hosts them: n0's path is n1.
        let mut on_n1 = Vec::new();
        for id in &on_n0 {
            let e = t.clusters[0].entity::<Counter>(id.clone());
            if net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap() == "n1" {
                on_n1.push(id.clone());
            }
        }
        t.join(net, "n2");
        net.run_for(30 * S);
        // Now both send, numbered: each one's first message of a shard
        // that went on to n2 flushes its old path, the other node.
        const ROUNDS: u64 = 20;
        for round in 0..ROUNDS {
            for id in &on_n1 {
                for sender in [0u32, 1] {
                    let e = t.clusters[sender as usize].entity::<Counter>(id.clone());
                    e.tell(Seq(sender, round)).unwrap();
                }
            }
            net.run_for(S / 10);
        }
        let mut moved = 0;
        for id in &on_n1 {
            for sender in [0usize, 1] {
                let e = t.clusters[sender].entity::<Counter>(id.clone());
                let host = net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap();
                moved += usize::from(sender == 0 && host == "n2");
            }
        }
        assert!(
            moved > 0,
            "no shard went on from n1 to n2: the test proved nothing"
        );
        t.assert_each_senders_order(&on_n1, ROUNDS);
        t.assert_no_flush_given_up(net);
    });
}

/// A node that left and then ended (its process exited, closing its
/// connections) is still the old path of the shards it hosted, for every
/// node that sent them messages through it. The first message each such
/// shard gets afterwards flushes that path. Those flushes must end at once,
/// the path being gone: if each dialled the ended node again, the link's
/// reconnect backoff, doubling with every refused dial, would soon pass the
/// flush limit, and every later shard would hold its messages for a second
/// and then let them go on unordered, as happened when nodes left a
/// cluster for good (`scaling_three_to_five_to_three_keeps_each_senders_order`).
#[test]
fn flushes_down_the_path_of_a_node_that_left_and_ended_end_at_once() {
    simulate_network(seeds(10), |net| {
        let mut t = cluster(net, 3);
        t.join(net, "n3");
        net.run_for(60 * S);
        // n0 sends to every entity: its path to those on n3 leads to n3.
        let mut on_n3 = Vec::new();
        for i in 0..64 {
            let id = format!("ended{i}");
            let e = t.clusters[0].entity::<Counter>(id.clone());
            if net.block_on(e.ask(WhereAreYou).timeout(30 * S)).unwrap() == "n3" {
                on_n3.push(id);
            }
        }
        assert!(
            on_n3.len() >= 8,
            "only {} entities on n3: too few flushes to show the backoff",
            on_n3.len()
        );
        let leaving = t.clusters.pop().expect("n3 runs");
        net.block_on(leaving.leave()).unwrap();
        net.crash(3);
        // One shard at a time, each ask answered before the next: every
        // first message flushes the old path on its own.
        for id in &on_n3 {
            let e = t.clusters[0].entity::<Counter>(id.clone());
            net.block_on(e.ask(Add(1)).timeout(30 * S)).unwrap();
        }
        t.assert_no_flush_given_up(net);
    });
}
