//! What users of Erlang and Akka expect beyond the basics (issue 13 §4):
//! a graceful stop that drains the mailbox first, function actors, and an
//! inbox for code that is not an actor.

mod common;

use common::{log, LIVENESS};
use std::future::Future;
use std::sync::mpsc::{self, Receiver, Sender};
use troubadour::prelude::*;

/// Waits for `fut` on the system's runtime, failing the test (instead of
/// hanging) if it never completes.
fn within<F: Future>(system: &ActorSystem, fut: F) -> F::Output {
    system
        .block_on(async { tokio::time::timeout(LIVENESS, fut).await })
        .expect("timed out: the actor system appears hung")
}

// ---- graceful stop ------------------------------------------------------

/// Logs every message and hook. `Gate` blocks its handler until the test
/// opens the gate, so whatever the test sends meanwhile is queued.
struct Recorder {
    log: Sender<String>,
    gate: Option<Receiver<()>>,
}

impl Recorder {
    fn new(log: &Sender<String>) -> (Self, Sender<()>) {
        let (open, gate) = mpsc::channel();
        let recorder = Recorder {
            log: log.clone(),
            gate: Some(gate),
        };
        (recorder, open)
    }
}

impl Actor for Recorder {
    fn stopping(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopping".into());
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopped".into());
    }
}

struct Gate;
impl Message for Gate {
    type Reply = ();
}

impl Handler<Gate> for Recorder {
    fn handle(&mut self, _: Gate, _: &mut Context<Self>) {
        let _ = self.log.send("gate entered".into());
        if let Some(gate) = &self.gate {
            gate.recv_timeout(LIVENESS)
                .expect("the test never opened the gate");
        }
    }
}

struct Item(u32);
impl Message for Item {
    type Reply = u32;
}

impl Handler<Item> for Recorder {
    fn handle(&mut self, Item(n): Item, _: &mut Context<Self>) -> u32 {
        let _ = self.log.send(format!("item {n}"));
        n
    }
}

fn items(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|n| format!("item {n}")).collect()
}

#[test]
fn graceful_stop_handles_everything_queued_in_order_then_runs_the_stop_hooks() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let (recorder, open) = Recorder::new(&tx);
    let actor = system.spawn(recorder).unwrap();
    actor.tell(Gate).unwrap();
    assert_eq!(rx.next(), "gate entered");
    for n in 1..=100 {
        actor.tell(Item(n)).unwrap();
    }
    actor.stop_gracefully();
    open.send(()).unwrap();
    assert_eq!(within(&system, actor.wait_stopped()), ExitReason::Normal);
    // `wait_stopped` resolved: the queue was handled and both hooks ran.
    let mut want = items(1..=100);
    want.extend(["stopping".to_string(), "stopped".to_string()]);
    assert_eq!(rx.drain(), want);
    assert!(!actor.is_alive());
    assert_eq!(
        system.dead_letter_count(),
        0,
        "the marker is no dead letter"
    );
}

#[test]
fn sends_after_a_graceful_stop_are_refused_and_counted_as_dead_letters() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let (recorder, open) = Recorder::new(&tx);
    let actor = system.spawn(recorder).unwrap();
    actor.tell(Gate).unwrap();
    assert_eq!(rx.next(), "gate entered");
    actor.tell(Item(1)).unwrap();
    actor.stop_gracefully();
    // Still running (it has a message to handle), but closed to new mail.
    assert!(actor.is_alive());
    assert!(matches!(
        actor.tell(Item(2)),
        Err(SendError::Stopped(Item(2)))
    ));
    let ask = actor.ask(Item(3));
    assert_eq!(within(&system, ask), Err(AskError::Stopped));
    assert!(matches!(
        actor.recipient::<Item, _>().tell(Item(4)),
        Err(SendError::Stopped(_))
    ));
    assert_eq!(system.dead_letter_count(), 3);
    // A second graceful stop changes nothing.
    actor.stop_gracefully();
    open.send(()).unwrap();
    assert_eq!(within(&system, actor.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["item 1", "stopping", "stopped"]);
    assert_eq!(system.dead_letter_count(), 3);
}

#[test]
fn a_full_bounded_mailbox_does_not_refuse_a_graceful_stop() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let (recorder, open) = Recorder::new(&tx);
    let actor = system
        .spawn_with_options(SpawnOptions::new().mailbox(Mailbox::Bounded(2)), recorder)
        .unwrap();
    actor.tell(Gate).unwrap();
    assert_eq!(rx.next(), "gate entered");
    actor.tell(Item(1)).unwrap();
    actor.tell(Item(2)).unwrap();
    assert!(matches!(actor.tell(Item(3)), Err(SendError::Full(_))));
    // A sender waiting for room is still waiting when the stop comes...
    let waiting = {
        let actor = actor.clone();
        system
            .tokio_handle()
            .spawn(async move { actor.send(Item(4)).await.map_err(|e| e.into_message().0) })
    };
    actor.stop_gracefully();
    open.send(()).unwrap();
    assert_eq!(within(&system, actor.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["item 1", "item 2", "stopping", "stopped"]);
    // ...and, once room frees up, learns the actor is stopping.
    assert_eq!(within(&system, waiting).unwrap(), Err(4));
}

#[test]
fn a_stop_after_a_graceful_stop_overtakes_the_queue() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let (recorder, open) = Recorder::new(&tx);
    let actor = system.spawn(recorder).unwrap();
    actor.tell(Gate).unwrap();
    assert_eq!(rx.next(), "gate entered");
    for n in 1..=3 {
        actor.tell(Item(n)).unwrap();
    }
    actor.stop_gracefully();
    actor.stop();
    open.send(()).unwrap();
    assert_eq!(within(&system, actor.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["stopping", "stopped"]);
    // Three items and the marker never reached.
    assert_eq!(system.dead_letter_count(), 4);
}

/// Suspends in its handler until the test completes the future it waits on.
struct Waiter {
    log: Sender<String>,
}

impl Actor for Waiter {
    fn stopping(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopping".into());
    }
}

struct WaitFor(tokio::sync::oneshot::Receiver<()>);
impl Message for WaitFor {
    type Reply = ();
}

impl AsyncHandler<WaitFor> for Waiter {
    async fn handle(&mut self, WaitFor(rx): WaitFor, _: &mut Context<Self>) {
        let _ = self.log.send("awaiting".into());
        let _ = rx.await;
        let _ = self.log.send("resumed".into());
    }
}

#[test]
fn graceful_stop_waits_for_a_suspended_async_handler() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let actor = system.spawn(Waiter { log: tx }).unwrap();
    let (release, wait) = tokio::sync::oneshot::channel();
    actor.tell(WaitFor(wait)).unwrap();
    assert_eq!(rx.next(), "awaiting");
    actor.stop_gracefully();
    release.send(()).unwrap();
    assert_eq!(within(&system, actor.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["resumed", "stopping"]);
}

#[test]
fn under_simulation_the_marker_is_held_and_delivered_in_order() {
    let system = ActorSystem::builder()
        .manual_scheduling()
        .hold_messages()
        .build();
    let run_all = || while system.run_one(&mut |_| (0, 64)).is_some() {};
    let (tx, rx) = log();
    let actor = system
        .spawn(Recorder {
            log: tx,
            gate: None,
        })
        .unwrap();
    run_all();
    for n in 1..=3 {
        actor.tell(Item(n)).unwrap();
    }
    actor.stop_gracefully();
    assert!(matches!(actor.tell(Item(4)), Err(SendError::Stopped(_))));
    let held = system.take_in_flight();
    let kinds: Vec<_> = held.iter().map(|m| m.message_type()).collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert!(kinds[..3].iter().all(|k| k.ends_with("Item")), "{kinds:?}");
    assert_eq!(kinds[3], "troubadour::GracefulStop");
    // Nothing happens until the simulation delivers.
    run_all();
    assert!(actor.is_alive());
    assert!(rx.drain().is_empty());
    for m in held {
        m.deliver();
    }
    run_all();
    let mut want = items(1..=3);
    want.extend(["stopping".to_string(), "stopped".to_string()]);
    assert_eq!(rx.drain(), want);
    assert!(!actor.is_alive());
    assert_eq!(system.dead_letter_count(), 1, "only the refused Item(4)");
}

// ---- function actors ----------------------------------------------------

/// One message type for a function actor; the reply is the total after it.
enum Tally {
    Add(u64),
    Get,
    Crash,
    Stop,
}
impl Message for Tally {
    type Reply = u64;
}

fn tally(total: &mut u64, msg: Tally, ctx: &mut Context<FnActor<u64, Tally>>) -> u64 {
    match msg {
        Tally::Add(n) => *total += n,
        Tally::Get => {}
        Tally::Crash => panic!("tally asked to crash"),
        Tally::Stop => ctx.stop(),
    }
    *total
}

#[test]
fn a_function_actor_answers_tell_and_ask_from_its_state() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let counter = system
        .spawn_fn(10u64, |total, msg: Tally, _| {
            if let Tally::Add(n) = msg {
                *total += n;
            }
            *total
        })
        .unwrap();
    for n in 1..=4 {
        counter.tell(Tally::Add(n)).unwrap();
    }
    assert_eq!(within(&system, counter.ask(Tally::Get)), Ok(20));
    // A recipient knows only the message type.
    let r: Recipient<Tally> = counter.recipient();
    assert_eq!(within(&system, r.ask(Tally::Add(1))), Ok(21));
}

#[test]
fn a_function_actor_that_panics_is_restarted_from_its_initial_state() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let counter = system.spawn_fn(10u64, tally).unwrap();
    counter.tell(Tally::Add(5)).unwrap();
    assert_eq!(within(&system, counter.ask(Tally::Get)), Ok(15));
    // The ask for the crashing message gets no reply; the actor fails and
    // its supervisor (the guardian) restarts it from a clone of 10.
    assert_eq!(
        within(&system, counter.ask(Tally::Crash)),
        Err(AskError::NoReply)
    );
    assert_eq!(within(&system, counter.ask(Tally::Get)), Ok(10));
    assert!(counter.is_alive());
}

#[test]
fn a_function_actor_can_stop_itself_through_its_context() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let counter = system.spawn_fn(0u64, tally).unwrap();
    counter.tell(Tally::Stop).unwrap();
    assert_eq!(within(&system, counter.wait_stopped()), ExitReason::Normal);
    assert!(matches!(
        counter.tell(Tally::Get),
        Err(SendError::Stopped(_))
    ));
}

/// Asks a function actor to start a function child and hand it back; the
/// parent logs each spawn to the sender.
struct NewChild(Sender<String>);
impl Message for NewChild {
    type Reply = ActorRef<FnActor<u64, Tally>>;
}

#[test]
fn function_actors_spawn_function_children_and_supervise_them() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let parent = system
        .spawn_fn(0u32, |spawned, NewChild(probe): NewChild, ctx| {
            *spawned += 1;
            let _ = probe.send(format!("spawning child {spawned}"));
            ctx.spawn_fn(100u64, tally).expect("the parent is running")
        })
        .unwrap();
    let child =
        within(&system, parent.ask(NewChild(tx))).expect("the parent replies with its child");
    assert_eq!(rx.next(), "spawning child 1");
    child.tell(Tally::Add(1)).unwrap();
    assert_eq!(within(&system, child.ask(Tally::Get)), Ok(101));
    // The child's failure is the parent's to handle: restarted from 100,
    // with the same reference, and the parent untouched.
    child.tell(Tally::Crash).unwrap();
    assert_eq!(within(&system, child.ask(Tally::Get)), Ok(100));
    assert!(parent.is_alive());
    assert!(rx.drain().is_empty(), "the parent did not run again");
    // Children stop with their parent.
    parent.stop();
    assert_eq!(within(&system, child.wait_stopped()), ExitReason::Shutdown);
    assert_eq!(within(&system, parent.wait_stopped()), ExitReason::Normal);
}
