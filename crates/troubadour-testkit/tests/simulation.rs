//! The simulator itself: the same seed replays the same run bit for bit,
//! different seeds explore different schedules, and the runtime's
//! guarantees hold in every schedule.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_testkit::{seeds, simulate, Simulation, TraceEvent};

type Log = Arc<Mutex<Vec<String>>>;

fn log(log: &Log, line: String) {
    log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
}

/// Passes a token on `hops` times among the peers; ticks on a timer.
struct Peer {
    me: usize,
    peers: Vec<ActorRef<Peer>>,
    log: Log,
    ticks: u32,
}

impl Actor for Peer {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.send_interval(Duration::from_millis(100 + self.me as u64), Tick);
    }
}

struct Token {
    id: u32,
    hops: u32,
}
impl Message for Token {
    type Reply = ();
}
impl Handler<Token> for Peer {
    fn handle(&mut self, t: Token, ctx: &mut Context<Self>) {
        // A token from another peer can overtake the test's `Join` (they
        // come from different senders): keep it until we know our peers.
        if self.peers.is_empty() {
            ctx.stash(t);
            return;
        }
        log(
            &self.log,
            format!("{} got token {} at hop {}", self.me, t.id, t.hops),
        );
        if t.hops > 0 {
            let next = (self.me * 7 + t.id as usize + t.hops as usize) % self.peers.len();
            let _ = self.peers[next].tell(Token {
                id: t.id,
                hops: t.hops - 1,
            });
        }
    }
}

#[derive(Clone)]
struct Tick;
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Peer {
    fn handle(&mut self, _: Tick, _: &mut Context<Self>) {
        self.ticks += 1;
        log(&self.log, format!("{} tick {}", self.me, self.ticks));
    }
}

struct Join(Vec<ActorRef<Peer>>);
impl Message for Join {
    type Reply = ();
}
impl Handler<Join> for Peer {
    fn handle(&mut self, Join(peers): Join, ctx: &mut Context<Self>) {
        self.peers = peers;
        ctx.unstash_all();
    }
}

/// 50 actors pass 20 tokens 500 hops each (10,020 messages) while each
/// ticks on its own interval for 2 virtual seconds; returns the trace and
/// every actor's log, as text.
fn gossip(seed: u64) -> String {
    let mut sim = Simulation::new(seed);
    let log: Log = Arc::default();
    let peers: Vec<_> = (0..50)
        .map(|me| {
            sim.spawn(Peer {
                me,
                peers: Vec::new(),
                log: log.clone(),
                ticks: 0,
            })
            .unwrap()
        })
        .collect();
    for p in &peers {
        p.tell(Join(peers.clone())).unwrap();
    }
    for id in 0..20 {
        peers[id as usize].tell(Token { id, hops: 500 }).unwrap();
    }
    sim.run_for(Duration::from_secs(2));
    let lines = log.lock().unwrap().clone();
    assert_eq!(
        lines.iter().filter(|l| l.contains("token")).count(),
        20 * 501
    );
    format!("{}\n{}", sim.trace_text(), lines.join("\n"))
}

#[test]
fn the_same_seed_gives_the_same_run_bit_for_bit() {
    let mut distinct = std::collections::HashSet::new();
    for seed in 0..100 {
        let first = gossip(seed);
        assert_eq!(first, gossip(seed), "seed {seed} ran differently twice");
        distinct.insert(first);
    }
    assert!(
        distinct.len() > 90,
        "seeds barely change the schedule: {} distinct runs of 100",
        distinct.len()
    );
}

/// Per-sender FIFO holds in every schedule.
struct Collector {
    seen: Vec<(usize, u32)>,
}
impl Actor for Collector {}

struct Item(usize, u32);
impl Message for Item {
    type Reply = ();
}
impl Handler<Item> for Collector {
    fn handle(&mut self, Item(from, n): Item, _: &mut Context<Self>) {
        self.seen.push((from, n));
    }
}

struct Seen;
impl Message for Seen {
    type Reply = Vec<(usize, u32)>;
}
impl Handler<Seen> for Collector {
    fn handle(&mut self, _: Seen, _: &mut Context<Self>) -> Vec<(usize, u32)> {
        std::mem::take(&mut self.seen)
    }
}

struct Sender {
    me: usize,
    to: ActorRef<Collector>,
}
impl Actor for Sender {}

struct Burst(u32);
impl Message for Burst {
    type Reply = ();
}
impl Handler<Burst> for Sender {
    fn handle(&mut self, Burst(n): Burst, _: &mut Context<Self>) {
        for i in 0..n {
            let _ = self.to.tell(Item(self.me, i));
        }
    }
}

#[test]
fn per_sender_order_holds_in_every_schedule() {
    simulate(seeds(200), |sim| {
        let collector = sim.spawn(Collector { seen: Vec::new() }).unwrap();
        let senders: Vec<_> = (0..5)
            .map(|me| {
                sim.spawn(Sender {
                    me,
                    to: collector.clone(),
                })
                .unwrap()
            })
            .collect();
        for (round, s) in senders.iter().cycle().take(15).enumerate() {
            s.tell(Burst(10 + round as u32)).unwrap();
        }
        sim.run_until_idle();
        let seen = sim.block_on(collector.ask(Seen)).unwrap();
        let mut next = [0u32; 5];
        let mut expected_total = 0;
        for (round, _) in (0..15).enumerate() {
            expected_total += 10 + round as u32;
        }
        assert_eq!(seen.len() as u32, expected_total, "no loss, no duplication");
        // Each burst restarts at 0; within a burst, order is kept.
        for (from, n) in seen {
            assert!(
                n == 0 || n == next[from],
                "sender {from}: {n} after {}",
                next[from]
            );
            next[from] = n + 1;
        }
    });
}

/// A worker that fails on request, supervised one-for-one.
struct Supervisor {
    children: Vec<ActorRef<Worker>>,
}
impl Actor for Supervisor {
    fn started(&mut self, ctx: &mut Context<Self>) {
        for i in 0..3 {
            let child = ctx
                .spawn_with(move || Worker { id: i, handled: 0 })
                .unwrap();
            self.children.push(child);
        }
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::new(Strategy::OneForOne).intensity(10, Duration::from_secs(60))
    }
}

struct Worker {
    id: u32,
    handled: u32,
}
impl Actor for Worker {}

struct Work(bool);
impl Message for Work {
    type Reply = ();
}
impl Handler<Work> for Worker {
    fn handle(&mut self, Work(fail): Work, _: &mut Context<Self>) {
        if fail {
            panic!("worker {} told to fail", self.id);
        }
        self.handled += 1;
    }
}

struct Handled;
impl Message for Handled {
    type Reply = u32;
}
impl Handler<Handled> for Worker {
    fn handle(&mut self, _: Handled, _: &mut Context<Self>) -> u32 {
        self.handled
    }
}

struct Children;
impl Message for Children {
    type Reply = Vec<ActorRef<Worker>>;
}
impl Handler<Children> for Supervisor {
    fn handle(&mut self, _: Children, _: &mut Context<Self>) -> Vec<ActorRef<Worker>> {
        self.children.clone()
    }
}

#[test]
fn one_for_one_restarts_only_the_failed_child_in_every_schedule() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    simulate(seeds(200), |sim| {
        let sup = sim
            .spawn(Supervisor {
                children: Vec::new(),
            })
            .unwrap();
        let children = sim.block_on(sup.ask(Children)).unwrap();
        for c in &children {
            c.tell(Work(false)).unwrap();
        }
        // Child 1 fails, then gets more work, which its fresh instance counts.
        children[1].tell(Work(true)).unwrap();
        children[1].tell(Work(false)).unwrap();
        sim.run_until_idle();
        let handled: Vec<u32> = children
            .iter()
            .map(|c| sim.block_on(c.ask(Handled)).unwrap())
            .collect();
        assert_eq!(
            handled,
            [1, 1, 1],
            "child 1 restarted fresh; the others kept their state"
        );
        assert!(children.iter().all(|c| c.is_alive()));
    });
    std::panic::set_hook(quiet);
}

#[test]
fn shutdown_stops_children_before_parents_in_every_schedule() {
    struct Node {
        name: &'static str,
        kids: &'static [&'static str],
        log: Log,
    }
    impl Actor for Node {
        fn started(&mut self, ctx: &mut Context<Self>) {
            for kid in self.kids {
                let grandkids: &'static [&'static str] =
                    if *kid == "a" { &["a1", "a2"] } else { &[] };
                ctx.spawn(Node {
                    name: kid,
                    kids: grandkids,
                    log: self.log.clone(),
                })
                .unwrap();
            }
        }
        fn stopped(&mut self, _: &mut Context<Self>) {
            log(&self.log, self.name.to_string());
        }
    }
    simulate(seeds(200), |sim| {
        let order: Log = Arc::default();
        sim.spawn(Node {
            name: "root",
            kids: &["a", "b"],
            log: order.clone(),
        })
        .unwrap();
        sim.run_until_idle();
        sim.shutdown(Duration::from_secs(1)).unwrap();
        let order = order.lock().unwrap().clone();
        let pos = |n: &str| {
            order
                .iter()
                .position(|x| x == n)
                .unwrap_or_else(|| panic!("{n} never stopped: {order:?}"))
        };
        assert!(pos("a1") < pos("a") && pos("a2") < pos("a"), "{order:?}");
        assert!(
            pos("a") < pos("root") && pos("b") < pos("root"),
            "{order:?}"
        );
        assert!(sim
            .trace()
            .iter()
            .any(|e| matches!(e, TraceEvent::Turn { .. })));
    });
}

/// An async handler that awaits the system clock and another actor's reply
/// is simulated too: same seed, same run; the naps end in virtual time.
struct Relay {
    system: SystemHandle,
    counter: ActorRef<Tally>,
    log: Log,
}
impl Actor for Relay {}

struct Relay1(u64);
impl Message for Relay1 {
    type Reply = u32;
}
impl AsyncHandler<Relay1> for Relay {
    async fn handle(&mut self, Relay1(ms): Relay1, _: &mut Context<Self>) -> u32 {
        self.system.sleep(Duration::from_millis(ms)).await;
        let n = self.counter.ask(Bump).await.unwrap_or(0);
        log(&self.log, format!("relay slept {ms} ms, tally {n}"));
        n
    }
}

struct Tally(u32);
impl Actor for Tally {}
struct Bump;
impl Message for Bump {
    type Reply = u32;
}
impl Handler<Bump> for Tally {
    fn handle(&mut self, _: Bump, _: &mut Context<Self>) -> u32 {
        self.0 += 1;
        self.0
    }
}

fn naps(seed: u64) -> (String, Duration) {
    let mut sim = Simulation::new(seed);
    let start = sim.now();
    let log: Log = Arc::default();
    let tally = sim.spawn(Tally(0)).unwrap();
    let relays: Vec<_> = (0..5)
        .map(|_| {
            sim.spawn(Relay {
                system: sim.handle(),
                counter: tally.clone(),
                log: log.clone(),
            })
            .unwrap()
        })
        .collect();
    let asks: Vec<_> = relays
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.ask(Relay1(1_000 * (5 - i as u64)))
                .timeout(Duration::from_secs(60))
        })
        .collect();
    let mut got: Vec<u32> = asks.into_iter().map(|a| sim.block_on(a).unwrap()).collect();
    got.sort();
    assert_eq!(got, [1, 2, 3, 4, 5]);
    let elapsed = sim.now() - start;
    let lines = log.lock().unwrap().join("\n");
    (format!("{}\n{lines}", sim.trace_text()), elapsed)
}

#[test]
fn async_handlers_sleeping_and_asking_are_simulated() {
    for seed in 0..50 {
        let (trace, elapsed) = naps(seed);
        assert_eq!(
            elapsed,
            Duration::from_secs(5),
            "the longest nap, in virtual time"
        );
        assert_eq!(trace, naps(seed).0, "seed {seed} ran differently twice");
        // The shortest nap wakes first whatever the seed.
        assert!(trace.contains("relay slept 1000 ms, tally 1"), "{trace}");
    }
}
