//! Best-effort mode (`Cluster::best_effort`) on the simulated network: no
//! lease store; each node places shards by rendezvous hashing over the
//! members it sees. While the members agree, an entity lives once, where
//! placement puts it, and is reached from every node; a crashed owner's
//! entities answer from the others once membership declares it down,
//! with no lease to wait out; a partition activates an entity on both
//! sides (the mode's documented duplicates), and the duplicate ends once
//! the partition heals. `TROUBADOUR_SIM_SEED=<seed>` replays one seed.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{
    placement, with_cluster, Cluster, Entity, EntityMessages, MembershipConfig, ShardCount,
};
use troubadour_remote::RemoteMessage;
use troubadour_testkit::{seeds, simulate_network, SimNetwork};

const S: Duration = Duration::from_secs(1);
/// The nodes' lease setting; in this mode nothing waits for it.
const TTL: Duration = Duration::from_secs(10);
const SHARDS: u32 = 64;

#[derive(Debug, Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = u64;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "be-test.Add";
}

/// Which node the entity runs on.
#[derive(Debug, Serialize, Deserialize)]
struct WhereAreYou;
impl Message for WhereAreYou {
    type Reply = String;
}
impl RemoteMessage for WhereAreYou {
    const NAME: &'static str = "be-test.WhereAreYou";
}

/// Per id: the nodes it was activated on, in order, and how many of its
/// activations are alive now and at most at once.
#[derive(Default)]
struct Census {
    made: HashMap<String, Vec<String>>,
    alive: HashMap<String, usize>,
    most: HashMap<String, usize>,
}
type CensusLog = Arc<Mutex<Census>>;

struct Counter {
    id: String,
    total: u64,
    census: CensusLog,
}
impl Actor for Counter {
    fn started(&mut self, _: &mut Context<Self>) {
        let mut c = self.census.lock().unwrap();
        let now = {
            let n = c.alive.entry(self.id.clone()).or_default();
            *n += 1;
            *n
        };
        let most = c.most.entry(self.id.clone()).or_default();
        *most = (*most).max(now);
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let mut c = self.census.lock().unwrap();
        *c.alive.get_mut(&self.id).unwrap() -= 1;
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
/// Work that takes this many seconds of (virtual) time.
#[derive(Debug, Serialize, Deserialize)]
struct Slow(u64);
impl Message for Slow {
    type Reply = ();
}
impl RemoteMessage for Slow {
    const NAME: &'static str = "be-test.Slow";
}
impl AsyncHandler<Slow> for Counter {
    async fn handle(&mut self, Slow(seconds): Slow, ctx: &mut Context<Self>) {
        ctx.system().sleep(Duration::from_secs(seconds)).await;
    }
}
impl Entity for Counter {
    const KIND: &'static str = "counter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Add>()
            .handle::<WhereAreYou>()
            .handle_async::<Slow>();
    }
}

/// Starts best-effort node `i` of `net`.
fn start_node(net: &mut SimNetwork, i: usize, census: &CensusLog) -> Cluster {
    start_node_with(net, i, census, SHARDS)
}

/// Starts best-effort node `i` of `net` with `shards` shards.
fn start_node_with(net: &mut SimNetwork, i: usize, census: &CensusLog, shards: u32) -> Cluster {
    let census = census.clone();
    let name = net.system(i).node().name().to_string();
    let starting = Cluster::best_effort()
        .shards(ShardCount::new(shards).unwrap())
        .lease(TTL, S)
        .passivate_after(None)
        .membership(MembershipConfig::expected_size(3).seed(net.seed() * 7 + i as u64))
        .entity::<Counter>(move |id| {
            census
                .lock()
                .unwrap()
                .made
                .entry(id.to_string())
                .or_default()
                .push(name.clone());
            Counter {
                id: id.to_string(),
                total: 0,
                census: census.clone(),
            }
        })
        .start(net.system(i), net.remote(i));
    net.block_on(starting).unwrap()
}

/// `n` best-effort nodes `n0`, `n1`, … joined through `n0`, run until
/// membership has settled.
fn best_effort_cluster(net: &mut SimNetwork, n: usize, census: &CensusLog) -> Vec<Cluster> {
    for i in 0..n {
        net.node(&format!("n{i}"), with_cluster);
    }
    let clusters: Vec<Cluster> = (0..n).map(|i| start_node(net, i, census)).collect();
    let seed = net.system(0).node();
    for c in &clusters[1..] {
        c.membership().join([seed.clone()]);
    }
    net.run_for(10 * S);
    clusters
}

/// Where rendezvous hashing over `members` puts entity `id`.
fn placed(id: &str, members: &[&str]) -> String {
    let shard = ShardCount::new(SHARDS).unwrap().shard_of(id);
    placement::owner(shard, members).unwrap().to_string()
}

fn where_is(net: &mut SimNetwork, from: &Cluster, id: &str) -> String {
    net.block_on(from.entity::<Counter>(id).ask(WhereAreYou).timeout(30 * S))
        .unwrap()
}

#[test]
fn without_a_store_each_entity_lives_once_where_placement_puts_it() {
    simulate_network(seeds(5), |net| {
        let census = CensusLog::default();
        let clusters = best_effort_cluster(net, 3, &census);
        let mut hosts: HashMap<String, usize> = HashMap::new();
        for i in 0..60 {
            let id = format!("vehicle-{i}");
            // Asked from every node: one count, one host.
            for (k, c) in clusters.iter().enumerate() {
                let got =
                    net.block_on(c.entity::<Counter>(id.as_str()).ask(Add(1)).timeout(30 * S));
                assert_eq!(got, Ok(k as u64 + 1), "{id} asked from n{k}");
            }
            let host = where_is(net, &clusters[i % 3], &id);
            assert_eq!(host, placed(&id, &["n0", "n1", "n2"]), "{id}");
            *hosts.entry(host).or_default() += 1;
        }
        assert_eq!(hosts.len(), 3, "spread over the three nodes: {hosts:?}");
        let c = census.lock().unwrap();
        assert_eq!(c.made.len(), 60);
        assert!(c.made.values().all(|v| v.len() == 1), "{:?}", c.made);
    });
}

#[test]
fn a_crashed_nodes_entities_answer_from_the_others_once_membership_knows() {
    simulate_network(seeds(5), |net| {
        let census = CensusLog::default();
        let clusters = best_effort_cluster(net, 3, &census);
        // An entity on n2, asked from n0.
        let id = (0..)
            .map(|i| format!("user{i}"))
            .find(|id| placed(id, &["n0", "n1", "n2"]) == "n2")
            .unwrap();
        let from = &clusters[0];
        assert_eq!(where_is(net, from, &id), "n2");
        net.block_on(
            from.entity::<Counter>(id.as_str())
                .ask(Add(5))
                .timeout(30 * S),
        )
        .unwrap();

        let crashed_at = net.now();
        net.crash(2);
        let got = loop {
            let asked = from.entity::<Counter>(id.as_str()).ask(Add(0)).timeout(S);
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
        // Nothing waits for the lost node's lease: membership's down
        // (about three seconds) is the failover.
        assert!(
            failover < TTL,
            "failover took {failover:?}, a lease or more"
        );
        let host = where_is(net, from, &id);
        assert_eq!(host, placed(&id, &["n0", "n1"]));
        assert_eq!(where_is(net, &clusters[1], &id), host);
    });
}

#[test]
fn a_partition_activates_an_entity_on_both_sides_until_it_heals() {
    simulate_network(seeds(5), |net| {
        let census = CensusLog::default();
        let clusters = best_effort_cluster(net, 3, &census);
        // An entity whose home in the whole cluster is n1.
        let id = (0..)
            .map(|i| format!("user{i}"))
            .find(|id| placed(id, &["n0", "n1", "n2"]) == "n1")
            .unwrap();
        assert_eq!(where_is(net, &clusters[0], &id), "n1");

        // n0 cut off from both others: each side declares the other down.
        net.partition(0, 1);
        net.partition(0, 2);
        net.run_for(15 * S);
        // n0 alone places every shard on itself; n1 and n2 keep it on n1.
        assert_eq!(where_is(net, &clusters[0], &id), "n0");
        assert_eq!(where_is(net, &clusters[2], &id), "n1");
        let during = census.lock().unwrap().most[&id];
        assert_eq!(during, 2, "one activation on each side of the partition");

        // Healed: the members agree again and n0 hands its copy over.
        net.heal_all();
        net.run_for(30 * S);
        for c in &clusters {
            assert_eq!(where_is(net, c, &id), "n1");
        }
        assert_eq!(
            census.lock().unwrap().alive[&id],
            1,
            "the duplicate stopped once the partition healed"
        );
    });
}

#[test]
fn a_joining_node_takes_its_shards_and_what_the_old_owner_was_sent_is_still_handled() {
    simulate_network(seeds(5), |net| {
        let census = CensusLog::default();
        let mut clusters = best_effort_cluster(net, 3, &census);
        // An entity on n0 whose home moves to n3 when n3 joins.
        let id = (0..)
            .map(|i| format!("user{i}"))
            .find(|id| {
                placed(id, &["n0", "n1", "n2"]) == "n0"
                    && placed(id, &["n0", "n1", "n2", "n3"]) == "n3"
            })
            .unwrap();
        let from = clusters[1].clone();
        assert_eq!(where_is(net, &from, &id), "n0");
        // Busy for 20 s, with an ask queued behind the work.
        from.entity::<Counter>(id.as_str()).tell(Slow(20)).unwrap();
        let queued = from
            .entity::<Counter>(id.as_str())
            .ask(Add(1))
            .timeout(60 * S);
        net.run_for(S);

        net.node("n3", with_cluster);
        let joiner = start_node(net, 3, &census);
        joiner.membership().join([net.system(0).node()]);
        clusters.push(joiner);
        net.run_for(10 * S);
        // The shard is n3's now, while n0's activation still works.
        assert_eq!(where_is(net, &clusters[2], &id), "n3");
        // n0 handed its activation over: it finishes what it was sent.
        assert_eq!(net.block_on(queued), Ok(1));
        net.run_for(30 * S);
        assert_eq!(
            census.lock().unwrap().alive[&id],
            1,
            "n0's activation stopped"
        );
    });
}

/// Two nodes that place a shard on each other (here because they were
/// given different shard counts; in a healthy cluster, briefly, while a
/// change of members is not known everywhere) do not bounce a message
/// between them as fast as the network goes: the node that got it from
/// the other holds it until its next read of its members, and the ask ends
/// with its timeout rather than never.
#[test]
fn a_message_two_nodes_place_on_each_other_waits_instead_of_bouncing() {
    simulate_network(seeds(3), |net| {
        let census = CensusLog::default();
        net.node("n0", with_cluster);
        net.node("n1", with_cluster);
        let n0 = start_node_with(net, 0, &census, 64);
        let n1 = start_node_with(net, 1, &census, 128);
        n1.membership().join([net.system(0).node()]);
        net.run_for(10 * S);
        let on = |id: &str, shards: u32| {
            let shard = ShardCount::new(shards).unwrap().shard_of(id);
            placement::owner(shard, &["n0", "n1"]).unwrap().to_string()
        };
        // n0 places it on n1, n1 places it on n0.
        let id = (0..)
            .map(|i| format!("user{i}"))
            .find(|id| on(id, 64) == "n1" && on(id, 128) == "n0")
            .unwrap();
        let asked = n0.entity::<Counter>(id.as_str()).ask(Add(1)).timeout(5 * S);
        // Part way: the message waits on one of the two nodes.
        net.run_for(S / 10);
        let waiting: usize = [&n0, &n1]
            .iter()
            .map(|c| net.block_on(c.status()).unwrap().waiting)
            .sum();
        assert_eq!(waiting, 1, "the message waits on one node");
        assert!(matches!(net.block_on(asked), Err(AskError::Timeout(_))));
        assert!(census.lock().unwrap().made.is_empty(), "no node took it");
    });
}
