//! The lease store's rules (DISTRIBUTION.md, "Cluster"): node leases, claims
//! fenced by epoch, releases; the rules under many threads at once; and the
//! whole ownership argument (store plus each node's local lease) under
//! random delays and pauses, checked by a checker that fails on any two
//! nodes hosting one shard at one instant.

use proptest::prelude::*;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use troubadour_cluster::{
    Assignment, LeaseError, LeaseStore, LocalLease, MemoryLeaseStore, NodeKey, Renewal, ShardCount,
    ShardId, StoreChange,
};

const S: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(10);

/// The in-memory store answers at once.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory store never waits"),
    }
}

/// A store on a clock the test moves.
fn store_on_manual_clock(shards: u32) -> (MemoryLeaseStore, Arc<Mutex<Instant>>) {
    let clock = Arc::new(Mutex::new(Instant::now()));
    let c = clock.clone();
    let store = MemoryLeaseStore::with_clock(Arc::new(move || *c.lock().unwrap())).recording();
    now(store.join(ShardCount::new(shards).unwrap())).unwrap();
    (store, clock)
}

fn advance(clock: &Mutex<Instant>, by: Duration) {
    *clock.lock().unwrap() += by;
}

fn shard(n: u32) -> ShardId {
    ShardId::new(n)
}

#[test]
fn a_leased_node_claims_an_unowned_shard_at_epoch_one() {
    let (store, _) = store_on_manual_clock(8);
    let a = NodeKey::new("a", 1);
    assert_eq!(
        now(store.claim(shard(0), &a, 0)),
        Err(LeaseError::NotLeased(a.clone())),
        "no claim without a lease"
    );
    now(store.renew(&a, TTL)).unwrap();
    let got = now(store.claim(shard(0), &a, 0)).unwrap();
    assert_eq!(got.owner, Some(a));
    assert_eq!(got.epoch, 1);
}

#[test]
fn no_claim_takes_a_shard_from_a_node_whose_lease_is_valid() {
    let (store, clock) = store_on_manual_clock(8);
    let (a, b) = (NodeKey::new("a", 1), NodeKey::new("b", 2));
    now(store.renew(&a, TTL)).unwrap();
    now(store.renew(&b, TTL)).unwrap();
    now(store.claim(shard(1), &a, 0)).unwrap();
    advance(&clock, TTL - Duration::from_millis(1));
    now(store.renew(&b, TTL)).unwrap();
    match now(store.claim(shard(1), &b, 1)) {
        Err(LeaseError::Conflict(current)) => assert_eq!(current.owner, Some(a.clone())),
        other => panic!("b took a's shard while a's lease was valid: {other:?}"),
    }
    // Once a's lease has run out by the store's clock, b may claim.
    advance(&clock, Duration::from_millis(1));
    let got = now(store.claim(shard(1), &b, 1)).unwrap();
    assert_eq!((got.owner, got.epoch), (Some(b), 2));
}

#[test]
fn a_claim_from_a_stale_epoch_loses() {
    let (store, clock) = store_on_manual_clock(8);
    let (a, b, c) = (
        NodeKey::new("a", 1),
        NodeKey::new("b", 2),
        NodeKey::new("c", 3),
    );
    now(store.renew(&a, TTL)).unwrap();
    now(store.claim(shard(2), &a, 0)).unwrap();
    advance(&clock, TTL);
    now(store.renew(&b, TTL)).unwrap();
    now(store.renew(&c, TTL)).unwrap();
    // b and c both saw epoch 1 with a gone: one wins, the other sees why.
    now(store.claim(shard(2), &b, 1)).unwrap();
    let lost = now(store.claim(shard(2), &c, 1)).unwrap_err();
    let LeaseError::Conflict(current) = &lost else {
        panic!("{lost:?}")
    };
    assert_eq!((current.owner.clone(), current.epoch), (Some(b), 2));
    assert!(lost.to_string().contains("read the store again"), "{lost}");
}

#[test]
fn a_released_shard_can_be_claimed_while_its_owner_is_leased() {
    let (store, _) = store_on_manual_clock(8);
    let (a, b) = (NodeKey::new("a", 1), NodeKey::new("b", 2));
    now(store.renew(&a, TTL)).unwrap();
    now(store.renew(&b, TTL)).unwrap();
    now(store.claim(shard(3), &a, 0)).unwrap();
    // Only the owner, at its epoch, may release.
    assert!(matches!(
        now(store.release(shard(3), &b, 1)),
        Err(LeaseError::Conflict(_))
    ));
    assert!(matches!(
        now(store.release(shard(3), &a, 0)),
        Err(LeaseError::Conflict(_))
    ));
    let released = now(store.release(shard(3), &a, 1)).unwrap();
    assert!(released.released);
    let got = now(store.claim(shard(3), &b, 1)).unwrap();
    assert_eq!((got.owner, got.epoch, got.released), (Some(b), 2, false));
}

#[test]
fn a_leave_ends_the_lease_and_releases_every_shard_of_the_node() {
    let (store, _) = store_on_manual_clock(8);
    let (a, b) = (NodeKey::new("a", 1), NodeKey::new("b", 2));
    now(store.renew(&a, TTL)).unwrap();
    now(store.renew(&b, TTL)).unwrap();
    for n in 0..4 {
        now(store.claim(shard(n), &a, 0)).unwrap();
    }
    now(store.leave(&a)).unwrap();
    let view = now(store.view()).unwrap();
    assert!(!view.is_leased(&a));
    for n in 0..4 {
        assert_eq!(now(store.claim(shard(n), &b, 1)).unwrap().epoch, 2);
    }
    assert_eq!(
        now(store.claim(shard(4), &a, 0)),
        Err(LeaseError::NotLeased(a))
    );
}

#[test]
fn a_node_with_another_shard_count_is_refused_with_what_to_do() {
    let (store, _) = store_on_manual_clock(8);
    now(store.join(ShardCount::new(8).unwrap())).unwrap();
    let refused = now(store.join(ShardCount::DEFAULT)).unwrap_err();
    assert_eq!(
        refused,
        LeaseError::ShardCountMismatch {
            cluster: ShardCount::new(8).unwrap(),
            ours: ShardCount::DEFAULT,
        }
    );
    assert!(refused
        .to_string()
        .contains("give every node the cluster's count"));
    let a = NodeKey::new("a", 1);
    now(store.renew(&a, TTL)).unwrap();
    assert_eq!(
        now(store.claim(shard(8), &a, 0)),
        Err(LeaseError::NoSuchShard(shard(8)))
    );
}

#[test]
fn the_view_shows_each_lease_remaining_by_the_stores_clock() {
    let (store, clock) = store_on_manual_clock(4);
    let a = NodeKey::new("a", 1);
    now(store.renew(&a, TTL)).unwrap();
    advance(&clock, 4 * S);
    let view = now(store.view()).unwrap();
    assert_eq!(view.leases[0].remaining, 6 * S);
    assert_eq!(
        view.assignments,
        (0..4)
            .map(|n| Assignment::unowned(shard(n)))
            .collect::<Vec<_>>()
    );
    advance(&clock, 6 * S);
    assert!(!now(store.view()).unwrap().is_leased(&a));
}

/// Eight threads race to claim the same shards, each from the epoch it
/// read, again and again: every epoch of every shard has exactly one
/// winner, and the history has no gap and no repeat.
#[test]
fn racing_claims_from_many_threads_have_one_winner_per_epoch() {
    const THREADS: usize = 8;
    const SHARDS: u32 = 4;
    const ROUNDS: usize = 500;
    let (store, _) = store_on_manual_clock(SHARDS);
    let store = Arc::new(store);
    let nodes: Vec<NodeKey> = (0..THREADS)
        .map(|i| NodeKey::new(format!("n{i}"), i as u64))
        .collect();
    for n in &nodes {
        now(store.renew(n, Duration::from_secs(3600))).unwrap();
    }
    let start = Arc::new(Barrier::new(THREADS));
    let wins: Vec<Vec<(u32, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|me| {
                let (store, start) = (store.clone(), start.clone());
                scope.spawn(move || {
                    start.wait();
                    let mut won = Vec::new();
                    for round in 0..ROUNDS {
                        let s = shard(round as u32 % SHARDS);
                        let seen = now(store.view()).unwrap().assignments[s.get() as usize].clone();
                        // Hand the shard on so others may claim it next.
                        if let Some(owner) = &seen.owner {
                            if owner == me && !seen.released {
                                let _ = now(store.release(s, me, seen.epoch));
                                continue;
                            }
                        }
                        if let Ok(got) = now(store.claim(s, me, seen.epoch)) {
                            won.push((s.get(), got.epoch));
                        }
                    }
                    won
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<(u32, u64)> = wins.into_iter().flatten().collect();
    all.sort();
    let total = all.len();
    all.dedup();
    assert_eq!(
        all.len(),
        total,
        "two threads won the same epoch of a shard"
    );
    let view = now(store.view()).unwrap();
    for s in 0..SHARDS {
        let epochs: Vec<u64> = all
            .iter()
            .filter(|(sh, _)| *sh == s)
            .map(|(_, e)| *e)
            .collect();
        let last = view.assignments[s as usize].epoch;
        assert_eq!(
            epochs,
            (1..=last).collect::<Vec<_>>(),
            "shard {s}: a gap or a lost claim"
        );
    }
    // Claims in the history, per shard, go up by one each time.
    let mut last: BTreeMap<ShardId, u64> = BTreeMap::new();
    for r in store.history() {
        if let StoreChange::Claimed(a) = r.change {
            let prev = last.insert(a.shard, a.epoch).unwrap_or(0);
            assert_eq!(a.epoch, prev + 1);
        }
    }
}

// ---- the ownership argument, end to end ----------------------------------

/// Something that happens to a node at an instant of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The node's periodic work: send a renewal, claim what it lacks.
    Tick(usize),
    /// A renewal sent at `sent` reaches the store.
    RenewalArrives { node: usize, sent: Duration },
    /// The store's answer to it reaches the node.
    RenewalAnswered { node: usize, sent: Duration },
}

struct ModelNode {
    key: NodeKey,
    lease: LocalLease,
    /// Shards hosted, with the epoch claimed and since when.
    hosting: BTreeMap<ShardId, (u64, Duration)>,
    /// When the node is stopped (SIGSTOP, a long GC): nothing it does
    /// happens in these windows; work due in one waits for its end.
    pauses: Vec<(Duration, Duration)>,
}

impl ModelNode {
    fn resumed_at(&self, t: Duration) -> Duration {
        self.pauses
            .iter()
            .find(|(from, to)| *from <= t && t < *to)
            .map_or(t, |(_, to)| *to)
    }
}

/// Plays a cluster of `pauses.len()` nodes for two minutes of model time
/// against the store, with message delays drawn from `delays` and the
/// nodes stopped in `pauses`; returns every interval in which a node
/// hosted a shard: (shard, node, epoch, from, to).
fn play(
    shards: u32,
    delays: &[u64],
    pauses: Vec<Vec<(Duration, Duration)>>,
) -> Vec<(ShardId, usize, u64, Duration, Duration)> {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let c = clock.clone();
    let store = MemoryLeaseStore::with_clock(Arc::new(move || *c.lock().unwrap()));
    now(store.join(ShardCount::new(shards).unwrap())).unwrap();
    let mut nodes: Vec<ModelNode> = pauses
        .into_iter()
        .enumerate()
        .map(|(i, pauses)| ModelNode {
            key: NodeKey::new(format!("n{i}"), i as u64),
            lease: LocalLease::new(TTL, S).unwrap(),
            hosting: BTreeMap::new(),
            pauses,
        })
        .collect();
    let mut delays = delays.iter().cycle().map(|ms| Duration::from_millis(*ms));
    let mut queue: BinaryHeap<std::cmp::Reverse<(Duration, Event)>> = BinaryHeap::new();
    for i in 0..nodes.len() {
        queue.push(std::cmp::Reverse((
            Duration::from_millis(i as u64 * 100),
            Event::Tick(i),
        )));
    }
    let mut intervals = Vec::new();
    let end = Duration::from_secs(120);
    // A node's hosting ends the instant its local lease runs out.
    let lapse = |node: &mut ModelNode, at: Duration, intervals: &mut Vec<_>| {
        let valid = node.lease.is_valid(t0 + at);
        if !valid {
            let until = node.lease.valid_until().map_or(at, |u| u - t0).min(at);
            for (s, (epoch, from)) in std::mem::take(&mut node.hosting) {
                intervals.push((s, node.key.incarnation as usize, epoch, from, until));
            }
        }
    };
    while let Some(std::cmp::Reverse((at, event))) = queue.pop() {
        if at >= end {
            break;
        }
        *clock.lock().unwrap() = t0 + at;
        let i = match event {
            Event::Tick(i) | Event::RenewalAnswered { node: i, .. } => i,
            Event::RenewalArrives { node, .. } => node,
        };
        // The node's own work waits while it is stopped; the store's does not.
        if !matches!(event, Event::RenewalArrives { .. }) {
            let resumed = nodes[i].resumed_at(at);
            if resumed != at {
                queue.push(std::cmp::Reverse((resumed, event)));
                continue;
            }
            lapse(&mut nodes[i], at, &mut intervals);
        }
        match event {
            Event::Tick(i) => {
                queue.push(std::cmp::Reverse((
                    at + delays.next().unwrap(),
                    Event::RenewalArrives { node: i, sent: at },
                )));
                queue.push(std::cmp::Reverse((
                    at + nodes[i].lease.renew_every(),
                    Event::Tick(i),
                )));
                claim_all(&store, &mut nodes[i], t0, at);
            }
            Event::RenewalArrives { node, sent } => {
                now(store.renew(&nodes[node].key, TTL)).unwrap();
                queue.push(std::cmp::Reverse((
                    at + delays.next().unwrap(),
                    Event::RenewalAnswered { node, sent },
                )));
            }
            Event::RenewalAnswered { node, sent } => {
                if nodes[node].lease.renewed(t0 + sent, t0 + at) == Renewal::Started {
                    // Nothing held before the lapse counts (it ended above).
                    assert!(nodes[node].hosting.is_empty());
                }
                claim_all(&store, &mut nodes[node], t0, at);
            }
        }
    }
    for node in &mut nodes {
        lapse(node, end, &mut intervals);
        let until = node.lease.valid_until().map_or(end, |u| (u - t0).min(end));
        for (s, (epoch, from)) in std::mem::take(&mut node.hosting) {
            intervals.push((s, node.key.incarnation as usize, epoch, from, until));
        }
    }
    intervals
}

/// While its lease is valid, a node claims every shard it does not host
/// (greedy: the store alone must keep it from taking what is owned).
fn claim_all(store: &MemoryLeaseStore, node: &mut ModelNode, t0: Instant, at: Duration) {
    if !node.lease.is_valid(t0 + at) {
        return;
    }
    let view = now(store.view()).unwrap();
    for a in view.assignments {
        if node.hosting.contains_key(&a.shard) {
            continue;
        }
        if let Ok(got) = now(store.claim(a.shard, &node.key, a.epoch)) {
            node.hosting.insert(a.shard, (got.epoch, at));
        }
    }
}

/// Fails if two nodes hosted one shard at one instant.
fn check_no_two_hosts(
    intervals: &[(ShardId, usize, u64, Duration, Duration)],
) -> Result<(), String> {
    for (k, a) in intervals.iter().enumerate() {
        for b in &intervals[k + 1..] {
            if a.0 == b.0 && a.1 != b.1 && a.3 < b.4 && b.3 < a.4 {
                return Err(format!(
                    "{} hosted by two nodes at once: {a:?} and {b:?}",
                    a.0
                ));
            }
        }
    }
    Ok(())
}

fn pause_strategy() -> impl Strategy<Value = Vec<(Duration, Duration)>> {
    proptest::collection::vec((0u64..100_000, 0u64..35_000), 0..3).prop_map(|ps| {
        let mut ps: Vec<(Duration, Duration)> = ps
            .into_iter()
            .map(|(from, len)| {
                (
                    Duration::from_millis(from),
                    Duration::from_millis(from + len),
                )
            })
            .collect();
        ps.sort();
        ps
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Three greedy nodes, message delays up to 4 s, pauses up to 3.5×
    /// the lease: no shard is ever hosted by two nodes at once.
    #[test]
    fn no_shard_is_ever_hosted_by_two_nodes_at_once(
        delays in proptest::collection::vec(0u64..4_000, 1..32),
        pauses in proptest::collection::vec(pause_strategy(), 3),
    ) {
        let intervals = play(4, &delays, pauses);
        if let Err(e) = check_no_two_hosts(&intervals) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// With short delays and no pauses the first node to hold a lease hosts
/// every shard for the whole run: one interval per shard, no gap.
#[test]
fn with_a_healthy_network_each_shard_has_one_host_throughout() {
    let intervals = play(4, &[20, 35, 50], vec![Vec::new(); 3]);
    assert_eq!(intervals.len(), 4, "{intervals:?}");
    for (_, node, epoch, from, to) in &intervals {
        assert_eq!((*node, *epoch), (0, 1));
        assert!(
            *from < S && *to == Duration::from_secs(120),
            "{from:?}..{to:?}"
        );
    }
}

/// A paused node's shards go to another node, which hosts them from after
/// the paused node's lease ran out.
#[test]
fn a_node_paused_past_its_lease_loses_its_shards_to_another() {
    let pause = (Duration::from_secs(20), Duration::from_secs(60));
    let intervals = play(4, &[20, 35, 50], vec![vec![pause], Vec::new(), Vec::new()]);
    check_no_two_hosts(&intervals).unwrap();
    for s in 0..4 {
        let of_shard: Vec<_> = intervals.iter().filter(|i| i.0 == shard(s)).collect();
        let first = of_shard
            .iter()
            .find(|i| i.1 == 0)
            .expect("node 0 hosted it first");
        assert!(
            first.4 <= pause.0 + TTL,
            "node 0 stopped within its lease: {first:?}"
        );
        assert!(
            of_shard.iter().any(|i| i.1 != 0 && i.3 < pause.1),
            "another node took {s} during the pause: {of_shard:?}"
        );
    }
}

/// The checker can fail: a node that counted its lease from when the answer
/// came (not when it sent the renewal) would overlap the next owner.
#[test]
fn the_checker_catches_two_hosts() {
    let t = Duration::from_secs;
    let overlapping = [
        (shard(0), 0, 1, t(0), t(12)),
        (shard(0), 1, 2, t(11), t(20)),
    ];
    assert!(check_no_two_hosts(&overlapping).is_err());
    let one_after_another = [
        (shard(0), 0, 1, t(0), t(10)),
        (shard(0), 1, 2, t(10), t(20)),
    ];
    assert!(check_no_two_hosts(&one_after_another).is_ok());
}
