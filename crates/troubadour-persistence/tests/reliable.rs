//! Reliable delivery under a link that drops, duplicates and reorders
//! (both ways) and a consumer that crashes before and after its write.
//! Checker: every value is handled exactly once, in order. With the dedup
//! switched off the same checker sees duplicates (proof that it can).
//! Then the producer crashes too: a durable producer (its outbox in a
//! journal) still gets every value handled once, in order; an in-memory
//! one loses what was unacknowledged when it crashed (the checker sees
//! it).

mod common;

use common::LIVENESS;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_persistence::*;

const VALUES: u64 = 300;

#[derive(Serialize, Deserialize)]
struct Took(u64);
impl Event for Took {
    const TYPE: &'static str = "test.Took";
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct Seen(Vec<u64>);
impl EventSourced for Seen {
    type Event = Took;
    fn apply(&mut self, Took(v): &Took) {
        self.0.push(*v);
    }
}

/// A small deterministic generator (xorshift), one per actor.
struct Dice(u64);
impl Dice {
    fn roll(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % 100
    }
}

/// Between producer and consumer: drops 15 %, duplicates 15 %, and holds
/// 15 % back until after the next message; the same for acks.
struct Link {
    consumer: Recipient<Delivery<u64>>,
    producer: Option<Recipient<Ack>>,
    held: Option<Delivery<u64>>,
    held_ack: Option<Ack>,
    dice: Dice,
}

impl Actor for Link {}

impl Handler<Delivery<u64>> for Link {
    fn handle(&mut self, mut d: Delivery<u64>, ctx: &mut Context<Self>) {
        self.producer = Some(d.ack_to.clone());
        d.ack_to = ctx.myself().recipient();
        let copy = |d: &Delivery<u64>| Delivery {
            producer: d.producer.clone(),
            seq: d.seq,
            msg: d.msg,
            ack_to: d.ack_to.clone(),
        };
        match self.dice.roll() {
            0..15 => {}
            15..30 => {
                let _ = self.consumer.tell(copy(&d));
                let _ = self.consumer.tell(d);
            }
            30..45 => {
                if let Some(earlier) = self.held.replace(d) {
                    let _ = self.consumer.tell(earlier);
                }
            }
            _ => {
                let _ = self.consumer.tell(d);
                if let Some(earlier) = self.held.take() {
                    let _ = self.consumer.tell(earlier);
                }
            }
        }
    }
}

impl Handler<Ack> for Link {
    fn handle(&mut self, ack: Ack, _: &mut Context<Self>) {
        let Some(producer) = self.producer.clone() else {
            return;
        };
        match self.dice.roll() {
            0..15 => {}
            15..30 => {
                let _ = producer.tell(ack.clone());
                let _ = producer.tell(ack);
            }
            30..45 => {
                if let Some(earlier) = self.held_ack.replace(ack) {
                    let _ = producer.tell(earlier);
                }
            }
            _ => {
                let _ = producer.tell(ack);
                if let Some(earlier) = self.held_ack.take() {
                    let _ = producer.tell(earlier);
                }
            }
        }
    }
}

/// The consumer. `dedup: false` handles every delivery it gets and
/// acknowledges it: the mistake the checker must catch.
struct Ledger {
    seen: Persistent<Deduplicated<Seen>>,
    plain: Persistent<Seen>,
    dedup: bool,
    /// Deliveries taken by every incarnation (crashes are placed by it).
    taken: Arc<AtomicU64>,
    /// At which deliveries it crashes: before its write (`false`) or
    /// after it, the ack never sent (`true`).
    crashes: &'static [(u64, bool)],
}

/// Three crashes (the guardian's intensity allows three restarts): one
/// before the write, two after it.
const CONSUMER_CRASHES: &[(u64, bool)] = &[(40, false), (120, true), (200, true)];

impl Actor for Ledger {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(async move {
            self.seen.recovery().await?;
            self.plain.recovery().await
        })
    }
}

impl AsyncHandler<Delivery<u64>> for Ledger {
    async fn handle(&mut self, d: Delivery<u64>, ctx: &mut Context<Self>) {
        let taken = self.taken.fetch_add(1, Ordering::SeqCst) + 1;
        let crash = self
            .crashes
            .iter()
            .find(|(at, _)| *at == taken)
            .map(|(_, after)| *after);
        if crash == Some(false) {
            ctx.fail("crash before the write");
            return;
        }
        if self.dedup {
            self.seen
                .receive(d, ctx, |_, v| vec![Took(v)])
                .await
                .unwrap();
        } else {
            let (seq, ack_to, producer) = (d.seq, d.ack_to.clone(), d.producer.clone());
            self.plain.persist(Took(d.msg), ctx).await.unwrap();
            let _ = ack_to.tell(Ack {
                producer,
                next: seq + 1,
            });
        }
        if crash == Some(true) {
            ctx.fail("crash after the write");
        }
    }
}

struct Values;
impl Message for Values {
    type Reply = Vec<u64>;
}
impl Handler<Values> for Ledger {
    fn handle(&mut self, _: Values, _: &mut Context<Self>) -> Vec<u64> {
        if self.dedup {
            self.seen.state.0.clone()
        } else {
            self.plain.0.clone()
        }
    }
}

/// Runs the scenario; returns what the consumer handled, in order.
/// The consumer (crashing at `crashes`) behind a lossy link seeded with
/// `seed`: the ledger, the link producers send to, and the count of
/// deliveries the ledger took.
fn consumer_behind_link(
    system: &ActorSystem,
    persistence: &Persistence,
    dedup: bool,
    crashes: &'static [(u64, bool)],
    seed: u64,
) -> (ActorRef<Ledger>, ActorRef<Link>, Arc<AtomicU64>) {
    let taken = Arc::new(AtomicU64::new(0));
    let counted = taken.clone();
    let p = persistence.clone();
    let ledger = system
        .spawn_factory_with_options(SpawnOptions::new().restart(Restart::Permanent), move || {
            Ledger {
                seen: Persistent::new(&p, "ledger", Deduplicated::new(Seen::default())),
                plain: Persistent::new(&p, "ledger-plain", Seen::default()),
                dedup,
                taken: counted.clone(),
                crashes,
            }
        })
        .unwrap();
    let link = system
        .spawn(Link {
            consumer: ledger.recipient(),
            producer: None,
            held: None,
            held_ack: None,
            dice: Dice(seed),
        })
        .unwrap();
    (ledger, link, taken)
}

fn run(dedup: bool, seed: u64) -> Vec<u64> {
    let system = ActorSystem::new();
    let persistence = Persistence::in_memory();
    let (ledger, link, taken) =
        consumer_behind_link(&system, &persistence, dedup, CONSUMER_CRASHES, seed);
    let producer = system
        .spawn(ReliableProducer::new(
            "orders",
            link.recipient(),
            Duration::from_millis(20),
        ))
        .unwrap();
    for v in 1..=VALUES {
        producer.tell(Produce(v)).unwrap();
    }
    let start = Instant::now();
    while producer.ask(Unconfirmed).timeout(LIVENESS).wait().unwrap() > 0 {
        assert!(start.elapsed() < LIVENESS, "delivery did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let what is still on the link (duplicates) arrive.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        taken.load(Ordering::SeqCst) >= 200,
        "the consumer did not reach its crashes"
    );
    ledger.ask(Values).timeout(LIVENESS).wait().unwrap()
}

#[test]
fn every_value_is_handled_exactly_once_in_order_despite_the_link_and_crashes() {
    for seed in [7, 11, 13] {
        let handled = run(true, seed);
        let want: Vec<u64> = (1..=VALUES).collect();
        let lost = want.iter().filter(|v| !handled.contains(v)).count();
        let twice = handled.len() - {
            let mut d = handled.clone();
            d.sort();
            d.dedup();
            d.len()
        };
        assert_eq!((lost, twice), (0, 0), "seed {seed}: lost, processed twice");
        assert_eq!(handled, want, "seed {seed}: out of order");
    }
}

#[test]
fn without_dedup_the_checker_sees_duplicates() {
    let handled = run(false, 7);
    let mut distinct = handled.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        handled.len() > distinct.len(),
        "no duplicate was handled: the checker could not tell"
    );
}

/// Fails the producer it is sent to (its supervisor restarts it).
struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for ReliableProducer<u64> {
    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.fail("the producer crashes, as the test asks");
    }
}
impl Handler<Crash> for DurableProducer<u64> {
    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.fail("the producer crashes, as the test asks");
    }
}

/// The scenario with the producer crashing twice while it still has
/// unacknowledged values, and the consumer once; returns what the consumer
/// handled, in order.
fn run_with_producer_crashes(durable: bool, seed: u64) -> Vec<u64> {
    let system = ActorSystem::new();
    let persistence = Persistence::in_memory();
    let (ledger, link, taken) =
        consumer_behind_link(&system, &persistence, true, &[(120, true)], seed);
    let every = Duration::from_millis(20);
    let permanent = || SpawnOptions::new().restart(Restart::Permanent);
    let (to, p) = (link.recipient(), persistence.clone());
    let unconfirmed: Box<dyn Fn() -> usize> = if durable {
        let producer = system
            .spawn_factory_with_options(permanent(), move || {
                DurableProducer::new(&p, "orders", to.clone(), every)
            })
            .unwrap();
        for v in 1..=VALUES {
            producer.tell(ProduceDurably(v)).unwrap();
            if v == 100 || v == 200 {
                producer.tell(Crash).unwrap();
            }
        }
        Box::new(move || producer.ask(Unconfirmed).timeout(LIVENESS).wait().unwrap())
    } else {
        let producer = system
            .spawn_factory_with_options(permanent(), move || {
                ReliableProducer::new("orders", to.clone(), every)
            })
            .unwrap();
        for v in 1..=VALUES {
            producer.tell(Produce(v)).unwrap();
            if v == 100 || v == 200 {
                producer.tell(Crash).unwrap();
            }
        }
        Box::new(move || producer.ask(Unconfirmed).timeout(LIVENESS).wait().unwrap())
    };
    let start = Instant::now();
    while unconfirmed() > 0 {
        assert!(start.elapsed() < LIVENESS, "delivery did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        taken.load(Ordering::SeqCst) >= 120,
        "the consumer did not reach its crash"
    );
    ledger.ask(Values).timeout(LIVENESS).wait().unwrap()
}

#[test]
fn with_a_durable_producer_its_crashes_lose_nothing_either() {
    for seed in [7, 11, 13] {
        let handled = run_with_producer_crashes(true, seed);
        let want: Vec<u64> = (1..=VALUES).collect();
        assert_eq!(handled, want, "seed {seed}: lost, twice or out of order");
    }
}

#[test]
fn an_in_memory_producer_that_crashes_loses_what_was_unacknowledged() {
    let handled = run_with_producer_crashes(false, 7);
    let lost = (1..=VALUES).filter(|v| !handled.contains(v)).count();
    assert!(lost > 0, "nothing was lost: the checker could not tell");
}
