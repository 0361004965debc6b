//! Timers against backpressure and failure: a full bounded mailbox does not
//! cancel an interval or lose a `send_after`, and a failed actor's timers
//! stop at the failure, not at the restart that may come much later.
//!
//! Every test runs on a manually driven scheduler with virtual time, so the
//! order of turns and timer firings is exactly the one written here.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;

const PERIOD: Duration = Duration::from_millis(20);

fn system() -> ActorSystem {
    ActorSystem::builder()
        .manual_scheduling()
        .virtual_time()
        .build()
}

/// Runs every ready actor until none is left.
fn settle(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, u32::MAX)).is_some() {}
}

/// Logs what it handles, tagged with its incarnation.
struct Ticker {
    incarnation: u32,
    log: Sender<String>,
    arm: Arm,
}

#[derive(Clone, Copy)]
enum Arm {
    Interval,
    After,
}

impl Actor for Ticker {
    fn started(&mut self, ctx: &mut Context<Self>) {
        match self.arm {
            Arm::Interval => {
                ctx.send_interval(PERIOD, Tick);
            }
            Arm::After => {
                ctx.send_after(PERIOD, Tick);
            }
        }
    }
}

#[derive(Clone)]
struct Tick;
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Ticker {
    fn handle(&mut self, _: Tick, _: &mut Context<Self>) {
        let _ = self.log.send(format!("tick {}", self.incarnation));
    }
}

struct Note;
impl Message for Note {
    type Reply = ();
}
impl Handler<Note> for Ticker {
    fn handle(&mut self, _: Note, _: &mut Context<Self>) {
        let _ = self.log.send(format!("note {}", self.incarnation));
    }
}

struct Fail;
impl Message for Fail {
    type Reply = ();
}
impl Handler<Fail> for Ticker {
    fn handle(&mut self, _: Fail, ctx: &mut Context<Self>) {
        ctx.fail("boom");
    }
}

fn drain(log: &Receiver<String>) -> Vec<String> {
    log.try_iter().collect()
}

fn bounded_ticker(system: &ActorSystem, arm: Arm) -> (ActorRef<Ticker>, Receiver<String>) {
    let (tx, log) = channel();
    let ticker = system
        .spawn_with_options(
            SpawnOptions::new().mailbox(Mailbox::Bounded(1)),
            Ticker {
                incarnation: 1,
                log: tx,
                arm,
            },
        )
        .unwrap();
    settle(system); // `started` arms the timer
    (ticker, log)
}

#[test]
fn an_interval_survives_a_tick_that_met_a_full_mailbox() {
    let system = system();
    let (ticker, log) = bounded_ticker(&system, Arm::Interval);
    ticker.tell(Note).unwrap(); // the mailbox (bound 1) is now full
    let dead_before = system.dead_letter_count();
    system.advance_time(PERIOD).unwrap(); // this tick finds no room
    assert_eq!(
        system.dead_letter_count(),
        dead_before + 1,
        "the skipped tick is counted, not silently lost"
    );
    settle(&system);
    assert_eq!(drain(&log), ["note 1"]);
    for _ in 0..3 {
        system.advance_time(PERIOD).unwrap();
        settle(&system);
    }
    assert_eq!(
        drain(&log),
        ["tick 1", "tick 1", "tick 1"],
        "the interval must go on after momentary backpressure"
    );
}

#[test]
fn a_send_after_that_meets_a_full_mailbox_is_still_delivered() {
    let system = system();
    let (ticker, log) = bounded_ticker(&system, Arm::After);
    ticker.tell(Note).unwrap(); // full
    system.advance_time(PERIOD).unwrap();
    settle(&system);
    assert_eq!(drain(&log), ["note 1", "tick 1"]);
    // And the bound is one again afterwards.
    ticker.tell(Note).unwrap();
    assert!(matches!(ticker.tell(Note), Err(SendError::Full(_))));
}

/// Restarts its child only when told to decide: until then the child
/// waits, failed, as it would for a busy supervisor.
struct Parent {
    log: Sender<String>,
    child: Option<ActorRef<Ticker>>,
}

impl Actor for Parent {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let incarnations = Arc::new(AtomicU32::new(0));
        let log = self.log.clone();
        self.child = Some(
            ctx.spawn_with(move || Ticker {
                incarnation: incarnations.fetch_add(1, Ordering::Relaxed) + 1,
                log: log.clone(),
                arm: Arm::Interval,
            })
            .unwrap(),
        );
    }
}

#[test]
fn a_failed_actor_s_interval_stops_at_the_failure_not_at_the_restart() {
    let system = system();
    let (tx, log) = channel();
    let parent = system
        .spawn(Parent {
            log: tx,
            child: None,
        })
        .unwrap();
    settle(&system);
    system.advance_time(PERIOD).unwrap();
    settle(&system);
    assert_eq!(drain(&log), ["tick 1"]);
    let child = child_of(&system, &parent);
    child.tell(Fail).unwrap();
    // Run the child's turn only: it fails and tells the parent, whose
    // decision is left waiting.
    let ran = system.run_one(&mut |_| (0, u32::MAX)).unwrap();
    assert_eq!(ran.actor, child.id());
    // The supervisor is busy for 300 ms: 15 periods.
    system.advance_time(PERIOD * 15).unwrap();
    settle(&system); // the parent restarts the child
    assert_eq!(
        drain(&log),
        Vec::<String>::new(),
        "ticks armed by the failed incarnation reached the new one"
    );
    system.advance_time(PERIOD).unwrap();
    settle(&system);
    assert_eq!(
        drain(&log),
        ["tick 2"],
        "the new incarnation's own interval"
    );
}

struct GetChild;
impl Message for GetChild {
    type Reply = Option<ActorRef<Ticker>>;
}
impl Handler<GetChild> for Parent {
    fn handle(&mut self, _: GetChild, _: &mut Context<Self>) -> Option<ActorRef<Ticker>> {
        self.child.clone()
    }
}

fn child_of(system: &ActorSystem, parent: &ActorRef<Parent>) -> ActorRef<Ticker> {
    let mut answer = parent.ask(GetChild);
    settle(system);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(&mut answer).poll(&mut cx) {
        std::task::Poll::Ready(Ok(Some(child))) => child,
        other => panic!("no child: {:?}", other.map(|r| r.map(|c| c.is_some()))),
    }
}
