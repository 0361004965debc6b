//! The remote guarantees of DISTRIBUTION.md on the simulated network, for
//! many seeds: every seed is one interleaving of actor turns, byte chunks,
//! delays and (where the test says) partitions and crashes, and replays
//! with `TROUBADOUR_SIM_SEED=<seed>`; `TROUBADOUR_SIM_SEEDS=<n>` runs more.

use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::{Accepts, RemoteActor, RemoteBuilder, RemoteMessage};
use troubadour_testkit::{seeds, simulate_network, SimNetwork};

#[derive(Debug, Serialize, Deserialize)]
struct Seq(u32, u64);
impl Message for Seq {
    type Reply = ();
}
impl RemoteMessage for Seq {
    const NAME: &'static str = "sim.Seq";
}

#[derive(Serialize, Deserialize)]
struct Count;
impl Message for Count {
    type Reply = u64;
}
impl RemoteMessage for Count {
    const NAME: &'static str = "sim.Count";
}

/// Never answered while the test runs.
#[derive(Serialize, Deserialize)]
struct Hold;
impl Message for Hold {
    type Reply = ();
}
impl RemoteMessage for Hold {
    const NAME: &'static str = "sim.Hold";
}

/// Sends `n` sequence numbers to `to`, then stops.
#[derive(Serialize, Deserialize)]
struct Burst {
    sender: u32,
    n: u64,
    to: ActorRef<Store>,
}
impl Message for Burst {
    type Reply = ();
}
impl RemoteMessage for Burst {
    const NAME: &'static str = "sim.Burst";
}

/// Messages any store saw out of order, in any test: a failed actor
/// would hide an `assert!` (its supervisor restarts it).
static OUT_OF_ORDER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Checks per-sender order of `Seq`; records `Down`s after what it got.
#[derive(Default)]
struct Store {
    next: std::collections::HashMap<u32, u64>,
    total: u64,
    held: Vec<troubadour::DeferredReply<()>>,
    log: Option<mpsc::Sender<String>>,
}
impl Actor for Store {}
impl Handler<Seq> for Store {
    fn handle(&mut self, Seq(sender, n): Seq, _: &mut Context<Self>) {
        let next = self.next.entry(sender).or_insert(0);
        if n != *next {
            OUT_OF_ORDER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        assert_eq!(n, *next, "sender {sender}: {n} arrived out of order");
        *next += 1;
        self.total += 1;
    }
}
impl Handler<Count> for Store {
    fn handle(&mut self, _: Count, _: &mut Context<Self>) -> u64 {
        self.total
    }
}
impl Handler<Hold> for Store {
    fn handle(&mut self, _: Hold, ctx: &mut Context<Self>) {
        self.held.extend(ctx.defer_reply::<Hold>());
    }
}
impl Handler<Burst> for Store {
    fn handle(&mut self, Burst { sender, n, to }: Burst, ctx: &mut Context<Self>) {
        for i in 0..n {
            to.tell(Seq(sender, i)).unwrap();
        }
        ctx.stop();
    }
}
impl Handler<Down> for Store {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        if let Some(log) = &self.log {
            let _ = log.send(format!("down after {}: {}", self.total, d.reason));
        }
    }
}
struct Watch(ActorRef<Store>);
impl Message for Watch {
    type Reply = ();
}
impl Handler<Watch> for Store {
    fn handle(&mut self, Watch(other): Watch, ctx: &mut Context<Self>) {
        ctx.monitor(&other);
    }
}
impl RemoteActor for Store {
    const NAME: &'static str = "sim.Store";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts
            .handle::<Seq>()
            .handle::<Count>()
            .handle::<Hold>()
            .handle::<Burst>();
    }
}

fn configure(b: RemoteBuilder) -> RemoteBuilder {
    b.register::<Seq>()
        .register::<Count>()
        .register::<Hold>()
        .register::<Burst>()
        .actor::<Store>()
}

/// Three nodes; node 1 exposes a `Store` as "store".
fn three(net: &mut SimNetwork) -> (ActorRef<Store>, ActorRef<Store>, ActorRef<Store>) {
    let a = net.node("a", configure);
    let b = net.node("b", configure);
    let c = net.node("c", configure);
    let store = net.system(b).spawn(Store::default()).unwrap();
    net.remote(b).expose("store", &store).unwrap();
    let from_a = net.lookup::<Store>(a, b, "store").unwrap();
    let from_c = net.lookup::<Store>(c, b, "store").unwrap();
    (store, from_a, from_c)
}

#[test]
fn messages_from_each_sender_arrive_in_order_under_every_interleaving() {
    simulate_network(seeds(40), |net| {
        let (store, from_a, from_c) = three(net);
        for i in 0..50 {
            from_a.tell(Seq(0, i)).unwrap();
            from_c.tell(Seq(1, i)).unwrap();
        }
        // Each ask comes after its sender's tells (per-pair order), so once
        // both are answered all 100 are in; the store asserts order on
        // every message.
        let a = net.block_on(from_a.ask(Count)).unwrap();
        let c = net.block_on(from_c.ask(Count)).unwrap();
        assert!(a >= 50 && c >= 50, "{a} {c}");
        assert_eq!(net.block_on(store.ask(Count)), Ok(100));
    });
}

#[test]
fn a_down_from_another_node_comes_after_the_messages_sent_before_it() {
    simulate_network(seeds(40), |net| {
        let a = net.node("a", configure);
        let b = net.node("b", configure);
        let (tx, log) = mpsc::channel();
        let watcher = net
            .system(a)
            .spawn(Store {
                log: Some(tx),
                ..Store::default()
            })
            .unwrap();
        let sender = net.system(b).spawn(Store::default()).unwrap();
        net.remote(b).expose("sender", &sender).unwrap();
        let sender = net.lookup::<Store>(a, b, "sender").unwrap();
        watcher.tell(Watch(sender.clone())).unwrap();
        net.block_on(sender.ask(Count)).unwrap(); // the monitor is in place
        sender
            .tell(Burst {
                sender: 7,
                n: 30,
                to: watcher.clone(),
            })
            .unwrap();
        net.run_for(Duration::from_millis(200));
        assert_eq!(log.try_recv().unwrap(), "down after 30: normal");
    });
}

#[test]
fn an_ask_across_a_partition_ends_with_connection_lost() {
    simulate_network(seeds(30), |net| {
        let (_, from_a, _) = three(net);
        net.block_on(from_a.ask(Count)).unwrap();
        net.partition(0, 1);
        let outcome = net.block_on(from_a.ask(Count).timeout(Duration::from_secs(30)));
        assert_eq!(outcome, Err(AskError::ConnectionLost));
    });
}

#[test]
fn an_ask_whose_reply_is_cut_one_way_ends_with_connection_lost() {
    simulate_network(seeds(30), |net| {
        let (store, from_a, _) = three(net);
        net.block_on(from_a.ask(Count)).unwrap();
        // Requests reach b, replies never reach a.
        net.partition_one_way(1, 0);
        from_a.tell(Seq(0, 0)).unwrap();
        let outcome = net.block_on(from_a.ask(Count).timeout(Duration::from_secs(30)));
        assert_eq!(outcome, Err(AskError::ConnectionLost));
        // The request did arrive (only the way back was cut).
        let local = net.block_on(store.ask(Count)).unwrap();
        assert!(local >= 1, "the tell crossed the open direction");
    });
}

#[test]
fn a_crashed_node_fails_outstanding_asks_and_fires_monitors_with_noconnection() {
    simulate_network(seeds(30), |net| {
        let (_, from_a, _) = three(net);
        let (tx, log) = mpsc::channel();
        let watcher = net
            .system(0)
            .spawn(Store {
                log: Some(tx),
                ..Store::default()
            })
            .unwrap();
        watcher.tell(Watch(from_a.clone())).unwrap();
        net.block_on(from_a.ask(Count)).unwrap();
        let held = from_a.ask(Hold).timeout(Duration::from_secs(30));
        net.run_for(Duration::from_millis(50));
        net.crash(1);
        assert_eq!(net.block_on(held), Err(AskError::ConnectionLost));
        net.run_until_idle();
        assert_eq!(
            log.try_recv().unwrap(),
            "down after 0: noconnection (the connection to the actor's node was lost)"
        );
        assert!(!from_a.is_alive());
    });
}

#[test]
fn a_seed_replays_the_same_run() {
    let run = |seed: u64| {
        let mut net = SimNetwork::new(seed);
        let (_, from_a, from_c) = three(&mut net);
        for i in 0..20 {
            from_a.tell(Seq(0, i)).unwrap();
            from_c.tell(Seq(1, i)).unwrap();
        }
        net.block_on(from_a.ask(Count)).unwrap();
        net.trace().to_vec()
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12), "two seeds, two interleavings");
}

#[test]
fn on_a_flaky_network_every_ask_ends_and_nothing_arrives_out_of_order() {
    simulate_network(seeds(40), |net| {
        net.set_reset_rate(20_000); // 2 % of deliveries break the connection
        let (_, from_a, from_c) = three(net);
        let mut asks = Vec::new();
        for i in 0..20 {
            let _ = from_a.tell(Seq(0, i));
            let _ = from_c.tell(Seq(1, i));
            asks.push(from_a.ask(Count).timeout(Duration::from_secs(30)));
        }
        for ask in asks {
            // A reply, or a typed end: never a hang (block_on panics on one).
            match net.block_on(ask) {
                Ok(_) | Err(AskError::ConnectionLost) | Err(AskError::Stopped) => {}
                Err(e) => panic!("unexpected end of an ask: {e}"),
            }
        }
        // Lost messages are allowed (at most once); reordered ones are not.
        assert_eq!(OUT_OF_ORDER.load(std::sync::atomic::Ordering::SeqCst), 0);
    });
}
