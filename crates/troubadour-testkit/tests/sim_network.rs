//! The remote guarantees of DISTRIBUTION.md on the simulated network, for
//! many seeds: every seed is one interleaving of actor turns, byte chunks,
//! delays and (where the test says) partitions and crashes, and replays
//! with `TROUBADOUR_SIM_SEED=<seed>`; `TROUBADOUR_SIM_SEEDS=<n>` runs more.

use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::{Accepts, RemoteActor, RemoteBuilder, RemoteMessage};
use troubadour_testkit::{seeds, simulate_network, NetEvent, SimNetwork};

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

/// Checks per-sender order of `Seq` (a gap is a loss, which a lost
/// connection may cause; going back is a reorder or a duplicate, which
/// nothing may); records `Down`s after what it got.
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
        if n < *next {
            OUT_OF_ORDER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        assert!(
            n >= *next,
            "sender {sender}: {n} arrived after {}",
            *next - 1
        );
        *next = n + 1;
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

/// How long dials to a node may fail before it is declared down.
const NODE_DOWN_AFTER: Duration = Duration::from_secs(5);

fn configure(b: RemoteBuilder) -> RemoteBuilder {
    b.node_down_after(NODE_DOWN_AFTER)
        .register::<Seq>()
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
        // Every later send dials the node again, and fails; once dials
        // have failed for `node_down_after` the node is down for good.
        let tries = keep_sending_until_declared_down(net, &from_a);
        assert!(!from_a.is_alive());
        assert!(
            tries > NODE_DOWN_AFTER.as_secs(),
            "declared down after {tries} s"
        );
        assert!(matches!(from_a.tell(Seq(9, 0)), Err(SendError::Stopped(_))));
    });
}

/// Sends to `to` once a second of virtual time until its node is declared
/// down; returns how many seconds that took (at most a minute).
fn keep_sending_until_declared_down(net: &mut SimNetwork, to: &ActorRef<Store>) -> u64 {
    let mut seconds = 0;
    while to.is_alive() && seconds < 60 {
        let _ = to.tell(Seq(9, seconds));
        net.run_for(Duration::from_secs(1));
        seconds += 1;
    }
    seconds
}

#[test]
fn after_a_partition_heals_the_next_send_connects_again() {
    simulate_network(seeds(30), |net| {
        let (store, from_a, _) = three(net);
        for i in 0..10 {
            from_a.tell(Seq(0, i)).unwrap();
        }
        assert_eq!(net.block_on(from_a.ask(Count)), Ok(10));
        net.partition(0, 1);
        net.run_for(Duration::from_secs(2)); // past the heartbeat timeout
                                             // The dial this ask makes fails: the ask ends, it does not hang.
        let cut = net.block_on(from_a.ask(Count).timeout(Duration::from_secs(30)));
        assert_eq!(cut, Err(AskError::ConnectionLost));
        assert!(
            from_a.is_alive(),
            "one failed dial does not make a node down"
        );
        net.heal(0, 1);
        for i in 10..20 {
            from_a.tell(Seq(0, i)).unwrap();
        }
        // All ten sent after the heal arrive, in order (the store checks).
        assert_eq!(net.block_on(from_a.ask(Count)), Ok(20));
        assert_eq!(net.block_on(store.ask(Count)), Ok(20));
    });
}

#[test]
fn a_node_unreachable_for_node_down_after_is_down_for_good() {
    simulate_network(seeds(20), |net| {
        let (_, from_a, _) = three(net);
        let on_a = net.system(0).spawn(Store::default()).unwrap();
        net.remote(0).expose("on-a", &on_a).unwrap();
        let from_b = net.lookup::<Store>(1, 0, "on-a").unwrap();
        net.block_on(from_a.ask(Count)).unwrap();
        net.partition(0, 1);
        let tries = keep_sending_until_declared_down(net, &from_a);
        assert!(!from_a.is_alive());
        assert!(
            tries > NODE_DOWN_AFTER.as_secs(),
            "declared down after {tries} s"
        );
        // Healing does not bring that incarnation back: a's sends are
        // refused, and a refuses b's dials.
        net.heal(0, 1);
        assert!(matches!(
            from_a.tell(Seq(9, 99)),
            Err(SendError::Stopped(_))
        ));
        let refused = net.block_on(from_b.ask(Count).timeout(Duration::from_secs(30)));
        assert_eq!(refused, Err(AskError::ConnectionLost));
        assert!(
            net.trace().iter().any(|e| matches!(
                e,
                NetEvent::DialFailed {
                    from: 1,
                    to: Some(0),
                    ..
                }
            )),
            "b's dial was refused by a"
        );
    });
}

#[test]
fn a_restarted_node_is_a_new_node_and_old_references_to_it_are_dead() {
    simulate_network(seeds(20), |net| {
        let (_, from_a, _) = three(net);
        net.block_on(from_a.ask(Count)).unwrap();
        net.crash(1);
        net.restart(1, configure);
        // The first send to the old incarnation dials, finds the new one
        // and declares the old one down.
        let _ = from_a.tell(Seq(0, 0));
        net.run_for(Duration::from_secs(1));
        assert!(!from_a.is_alive());
        assert!(matches!(from_a.tell(Seq(0, 1)), Err(SendError::Stopped(_))));
        // The new incarnation is reached by a new lookup.
        let fresh = net.system(1).spawn(Store::default()).unwrap();
        net.remote(1).expose("store", &fresh).unwrap();
        let again = net.lookup::<Store>(0, 1, "store").unwrap();
        again.tell(Seq(0, 0)).unwrap();
        assert_eq!(net.block_on(again.ask(Count)), Ok(1));
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
