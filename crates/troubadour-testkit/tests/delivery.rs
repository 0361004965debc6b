//! Messages in flight: a message may overtake one sent earlier by another
//! sender (never one from its own sender), and the trace tells who sent
//! what to whom.

use std::sync::{Arc, Mutex};
use troubadour::prelude::*;
use troubadour::ActorId;
use troubadour_testkit::{Simulation, TraceEvent};

type Log = Arc<Mutex<Vec<&'static str>>>;

struct Sink(Log);
impl Actor for Sink {}

struct Mark(&'static str);
impl Message for Mark {
    type Reply = ();
}
impl Handler<Mark> for Sink {
    fn handle(&mut self, Mark(m): Mark, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(m);
    }
}

struct Forwarder(ActorRef<Sink>);
impl Actor for Forwarder {}

struct Forward;
impl Message for Forward {
    type Reply = ();
}
impl Handler<Forward> for Forwarder {
    fn handle(&mut self, _: Forward, _: &mut Context<Self>) {
        let _ = self.0.tell(Mark("forwarded"));
    }
}

/// The test marks the sink directly, then has a forwarder mark it: which
/// mark arrives first?
fn first_mark(seed: u64, reordering: bool) -> &'static str {
    let mut sim = Simulation::new(seed);
    sim.set_reordering(reordering);
    let log: Log = Arc::default();
    let sink = sim.spawn(Sink(log.clone())).unwrap();
    let forwarder = sim.spawn(Forwarder(sink.clone())).unwrap();
    sink.tell(Mark("direct")).unwrap();
    forwarder.tell(Forward).unwrap();
    sim.run_until_idle();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2, "both marks arrive: {log:?}");
    log[0]
}

#[test]
fn a_message_can_overtake_one_sent_earlier_by_another_sender() {
    let firsts: Vec<_> = (0..100).map(|seed| first_mark(seed, true)).collect();
    assert!(
        firsts.contains(&"direct") && firsts.contains(&"forwarded"),
        "both orders are allowed and some seed must produce each: {firsts:?}"
    );
}

#[test]
fn without_reordering_a_message_is_in_the_mailbox_when_its_senders_turn_ends() {
    for seed in 0..100 {
        assert_eq!(
            first_mark(seed, false),
            "direct",
            "seed {seed}: the direct mark was sent first, from one process"
        );
    }
}

/// A ping-pong between two actors, started by an ask from the test.
struct Player {
    other: Option<ActorRef<Player>>,
    log: Log,
}
impl Actor for Player {}

struct Start(ActorRef<Player>);
impl Message for Start {
    type Reply = ();
}
impl Handler<Start> for Player {
    fn handle(&mut self, Start(other): Start, ctx: &mut Context<Self>) {
        let _ = other.tell(Ball { from: ctx.myself() });
    }
}

struct Ball {
    from: ActorRef<Player>,
}
impl Message for Ball {
    type Reply = ();
}
impl Handler<Ball> for Player {
    fn handle(&mut self, Ball { from }: Ball, _: &mut Context<Self>) {
        self.log.lock().unwrap().push("ball");
        self.other = Some(from.clone());
        let _ = from.tell(Back);
    }
}

struct Back;
impl Message for Back {
    type Reply = ();
}
impl Handler<Back> for Player {
    fn handle(&mut self, _: Back, _: &mut Context<Self>) {
        self.log.lock().unwrap().push("back");
    }
}

#[test]
fn the_trace_says_who_sent_what_to_whom_in_order() {
    for seed in 0..50 {
        let mut sim = Simulation::new(seed);
        let log: Log = Arc::default();
        let a = sim
            .spawn(Player {
                other: None,
                log: log.clone(),
            })
            .unwrap();
        let b = sim
            .spawn(Player {
                other: None,
                log: log.clone(),
            })
            .unwrap();
        sim.block_on(a.ask(Start(b.clone()))).unwrap();
        sim.run_until_idle();
        assert_eq!(*log.lock().unwrap(), ["ball", "back"]);

        let sends: Vec<(u64, Option<ActorId>, ActorId, &str, bool)> = sim
            .trace()
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Send {
                    message,
                    from,
                    to,
                    kind,
                    ask,
                } => Some((*message, *from, *to, *kind, *ask)),
                _ => None,
            })
            .collect();
        let story: Vec<_> = sends
            .iter()
            .map(|(_, from, to, kind, ask)| (*from, *to, kind.rsplit("::").next().unwrap(), *ask))
            .collect();
        assert_eq!(
            story,
            [
                (None, a.id(), "Start", true),
                (Some(a.id()), b.id(), "Ball", false),
                (Some(b.id()), a.id(), "Back", false),
            ],
            "seed {seed}"
        );
        // Each message is sent, then delivered, then handled in a turn of
        // its receiver, and the next send happens in that turn.
        let at = |wanted: &dyn Fn(&TraceEvent) -> bool| {
            sim.trace()
                .iter()
                .position(wanted)
                .expect("event in the trace")
        };
        for (number, _, to, _, _) in &sends {
            let sent = at(&|e| matches!(e, TraceEvent::Send { message, .. } if message == number));
            let delivered =
                at(&|e| matches!(e, TraceEvent::Deliver { message, .. } if message == number));
            let handled = delivered
                + sim.trace()[delivered..]
                    .iter()
                    .position(|e| matches!(e, TraceEvent::Turn { actor, .. } if actor == to))
                    .expect("a turn of the receiver after delivery");
            assert!(sent < delivered && delivered < handled, "seed {seed}");
        }
        let text = sim.trace_text();
        assert!(
            text.contains(&format!("test -> {} ask  delivery::Start", a.id())),
            "{text}"
        );
        assert!(
            text.contains(&format!("{} -> {} tell delivery::Ball", a.id(), b.id())),
            "{text}"
        );
    }
}
