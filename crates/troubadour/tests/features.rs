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

// ---- inbox --------------------------------------------------------------

#[derive(Debug, PartialEq)]
struct Note(u32);
impl Message for Note {
    type Reply = ();
}

struct Question(u32);
impl Message for Question {
    type Reply = u32;
}

/// An actor that talks to an inbox: tells it notes, and asks it questions
/// from an async handler (the answer comes from whoever owns the inbox).
struct Colleague {
    notes: Recipient<Note>,
    questions: Recipient<Question>,
}
impl Actor for Colleague {}

struct SendNotes(u32);
impl Message for SendNotes {
    type Reply = ();
}
impl Handler<SendNotes> for Colleague {
    fn handle(&mut self, SendNotes(n): SendNotes, _: &mut Context<Self>) {
        for i in 1..=n {
            self.notes.tell(Note(i)).unwrap();
        }
    }
}

struct AskTheInbox(u32);
impl Message for AskTheInbox {
    type Reply = Result<u32, AskError>;
}
impl AsyncHandler<AskTheInbox> for Colleague {
    async fn handle(
        &mut self,
        AskTheInbox(q): AskTheInbox,
        _: &mut Context<Self>,
    ) -> Result<u32, AskError> {
        self.questions.ask(Question(q)).timeout(LIVENESS).await
    }
}

#[test]
fn a_plain_thread_receives_tells_and_answers_asks_from_an_actor_through_an_inbox() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let mut notes = system.inbox::<Note>().unwrap();
    let mut questions = system.inbox::<Question>().unwrap();
    let colleague = system
        .spawn(Colleague {
            notes: notes.recipient(),
            questions: questions.recipient(),
        })
        .unwrap();
    colleague.tell(SendNotes(50)).unwrap();
    for i in 1..=50 {
        let note = notes.recv_timeout(LIVENESS).wait().unwrap();
        assert!(!note.is_ask());
        assert_eq!(note.message(), &Note(i), "in the order sent");
    }
    assert!(notes.try_recv().is_none());

    let answer = colleague.ask(AskTheInbox(20)).timeout(LIVENESS);
    let question = questions.recv_timeout(LIVENESS).wait().unwrap();
    assert!(question.is_ask());
    let n = question.message().0;
    assert!(question.reply(n + 22), "the actor was waiting");
    assert_eq!(answer.wait(), Ok(Ok(42)));
}

#[test]
fn an_async_task_receives_with_await() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let mut inbox = system.inbox::<Note>().unwrap();
    let to_inbox = inbox.recipient();
    let task = system.tokio_handle().spawn(async move {
        let mut sum = 0;
        for _ in 0..100 {
            sum += inbox.recv().await.message().0;
        }
        // Nothing more comes: the timeout ends the wait (real clock here).
        let after = inbox
            .recv_timeout(std::time::Duration::from_millis(20))
            .await;
        (sum, after.map(|r| r.into_parts().0))
    });
    std::thread::spawn(move || {
        for i in 1..=100 {
            to_inbox.tell(Note(i)).unwrap();
        }
    });
    let (sum, after) = within(&system, task).unwrap();
    assert_eq!(sum, 5050);
    assert!(matches!(after, Err(RecvError::Timeout(_))), "{after:?}");
}

#[test]
fn recv_timeout_runs_on_the_systems_virtual_clock() {
    use std::task::{Context as TaskContext, Poll, Waker};
    use std::time::Duration;
    let system = ActorSystem::builder().virtual_time().build();
    let mut inbox = system.inbox::<Note>().unwrap();
    let hour = Duration::from_secs(3600);
    let mut cx = TaskContext::from_waker(Waker::noop());
    {
        let mut recv = std::pin::pin!(inbox.recv_timeout(hour));
        assert!(recv.as_mut().poll(&mut cx).is_pending());
        system.advance_time(hour - Duration::from_secs(1)).unwrap();
        assert!(recv.as_mut().poll(&mut cx).is_pending(), "not yet due");
        system.advance_time(Duration::from_secs(1)).unwrap();
        assert!(matches!(
            recv.as_mut().poll(&mut cx),
            Poll::Ready(Err(RecvError::Timeout(d))) if d == hour
        ));
    }
    // A message that arrives before the deadline is received.
    {
        let to_inbox = inbox.recipient();
        let mut recv = std::pin::pin!(inbox.recv_timeout(hour));
        assert!(recv.as_mut().poll(&mut cx).is_pending());
        to_inbox.tell(Note(7)).unwrap();
        match recv.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(received)) => assert_eq!(received.message(), &Note(7)),
            other => panic!("expected the note, got {other:?}"),
        }
    }
    // A zero timeout looks once and never needs the clock to move.
    assert!(matches!(
        inbox.recv_timeout(Duration::ZERO).wait(),
        Err(RecvError::Timeout(_))
    ));
    // A plain thread blocked in `wait` is released by the clock alone. (The
    // clock first moves past the cancelled deadline of the answered receive,
    // so the next deadline the system knows of is the thread's.)
    system.advance_time(2 * hour).unwrap();
    assert_eq!(system.next_timer_at(), None);
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || done.send(inbox.recv_timeout(hour).wait().map(|_| ())));
    let started = std::time::Instant::now();
    while system.next_timer_at().is_none() {
        assert!(
            started.elapsed() < LIVENESS,
            "the receive never armed its timeout"
        );
        std::thread::yield_now();
    }
    system.advance_time(hour).unwrap();
    assert_eq!(
        result
            .recv_timeout(LIVENESS)
            .expect("the receive was not released"),
        Err(RecvError::Timeout(hour))
    );
}

#[test]
fn dropping_the_inbox_makes_its_address_dead_and_fails_pending_asks() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let inbox = system.inbox::<Question>().unwrap();
    let address = inbox.recipient();
    assert!(address.is_alive());
    assert_eq!(address.id(), inbox.id());
    address.tell(Question(1)).unwrap();
    let pending = address.ask(Question(2)).timeout(LIVENESS);
    drop(inbox);
    // Both queued messages are dead letters; the ask ends at once.
    assert_eq!(system.dead_letter_count(), 2);
    assert_eq!(pending.wait(), Err(AskError::NoReply));
    assert!(!address.is_alive());
    assert!(matches!(
        address.tell(Question(3)),
        Err(SendError::Stopped(Question(3)))
    ));
    assert_eq!(address.ask(Question(4)).wait(), Err(AskError::Stopped));
    assert_eq!(system.dead_letter_count(), 4);
}

#[test]
fn an_ask_received_and_not_answered_fails_instead_of_hanging() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let mut inbox = system.inbox::<Question>().unwrap();
    let address = inbox.recipient();
    let dropped = address.ask(Question(1)).timeout(LIVENESS);
    drop(inbox.recv().wait());
    assert_eq!(dropped.wait(), Err(AskError::NoReply));
    // A responder can outlive the message it came with.
    let later = address.ask(Question(2)).timeout(LIVENESS);
    let (Question(n), responder) = inbox.recv().wait().into_parts();
    assert!(responder.is_ask());
    std::thread::spawn(move || responder.reply(n * 10));
    assert_eq!(later.wait(), Ok(20));
}

#[test]
fn under_simulation_no_fault_can_lose_the_marker() {
    // Losing the marker, or panicking in its place, would leave an actor
    // that refuses every message (it was asked to stop) and never stops.
    for fault in ["panic", "stop", "lose", "drop"] {
        let system = ActorSystem::builder()
            .manual_scheduling()
            .hold_messages()
            .build();
        let run_all = || while system.run_one(&mut |_| (0, 64)).is_some() {};
        let (tx, rx) = log();
        let actor = system
            .spawn_with(move || Recorder {
                log: tx.clone(),
                gate: None,
            })
            .unwrap();
        run_all();
        actor.tell(Item(1)).unwrap();
        actor.stop_gracefully();
        let mut held = system.take_in_flight();
        let marker = held.pop().unwrap();
        assert!(marker.is_control(), "{fault}: {marker:?}");
        assert!(!held[0].is_control());
        for m in held {
            m.deliver();
        }
        match fault {
            "panic" => marker.deliver_with_panic("injected"),
            "stop" => marker.deliver_after_stop(),
            "lose" => marker.lose(),
            _ => drop(marker),
        }
        run_all();
        assert_eq!(rx.drain(), ["item 1", "stopping", "stopped"], "{fault}");
        assert!(!actor.is_alive(), "{fault}");
    }
}

/// Logs its starts and stops, to see whether it was restarted.
struct Phoenix {
    log: Sender<String>,
}

impl Actor for Phoenix {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("started".into());
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopped".into());
    }
}

impl Handler<Item> for Phoenix {
    fn handle(&mut self, Item(n): Item, _: &mut Context<Self>) -> u32 {
        let _ = self.log.send(format!("item {n}"));
        n
    }
}

fn phoenix(log: &Sender<String>) -> impl FnMut() -> Phoenix + Send + 'static {
    let log = log.clone();
    move || Phoenix { log: log.clone() }
}

/// Asks a parent for a permanent child (`Some`) or its children's ids.
enum Nursery {
    Spawn(Sender<String>),
    Children,
}
impl Message for Nursery {
    type Reply = (Option<ActorRef<Phoenix>>, Vec<ActorId>);
}

#[test]
fn a_graceful_stop_sticks_even_for_a_permanent_actor() {
    // Akka's PoisonPill and kameo's stop_gracefully end the actor; unlike
    // `ActorRef::stop` (a normal exit, which OTP restarts when permanent),
    // draining and then coming back would help nobody.
    let system = ActorSystem::builder().worker_threads(2).build();
    let (tx, rx) = log();
    let top = system
        .spawn_factory_with_options(
            SpawnOptions::new().restart(Restart::Permanent),
            phoenix(&tx),
        )
        .unwrap();
    assert_eq!(rx.next(), "started");
    top.tell(Item(1)).unwrap();
    top.stop_gracefully();
    assert_eq!(within(&system, top.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["item 1", "stopped"]);
    assert!(!top.is_alive());

    // The same for a child: its supervisor does not restart it and no
    // longer counts it among its children.
    let parent = system
        .spawn_fn((), |_, msg: Nursery, ctx| match msg {
            Nursery::Spawn(log) => {
                let child = ctx
                    .spawn_factory_with_options(
                        SpawnOptions::new().restart(Restart::Permanent),
                        phoenix(&log),
                    )
                    .expect("the parent is running");
                (Some(child), ctx.children())
            }
            Nursery::Children => (None, ctx.children()),
        })
        .unwrap();
    let (child, _) = within(&system, parent.ask(Nursery::Spawn(tx))).unwrap();
    let child = child.unwrap();
    assert_eq!(rx.next(), "started");
    child.tell(Item(2)).unwrap();
    child.stop_gracefully();
    assert_eq!(within(&system, child.wait_stopped()), ExitReason::Normal);
    assert_eq!(rx.drain(), ["item 2", "stopped"]);
    let started = std::time::Instant::now();
    loop {
        // The parent hears of the exit on its own turn; poll, as a hang guard.
        let (_, children) = within(&system, parent.ask(Nursery::Children)).unwrap();
        if children.is_empty() {
            break;
        }
        assert!(started.elapsed() < LIVENESS, "still a child: {children:?}");
        std::thread::yield_now();
    }
    assert!(rx.drain().is_empty(), "not restarted");
    assert!(!child.is_alive());
}

/// Pends for ever, handing its waker to the test.
struct Parked {
    waker: std::sync::Arc<std::sync::Mutex<Option<std::task::Waker>>>,
}

impl Actor for Parked {}

struct Park;
impl Message for Park {
    type Reply = ();
}

impl AsyncHandler<Park> for Parked {
    async fn handle(&mut self, _: Park, _: &mut Context<Self>) {
        let waker = self.waker.clone();
        std::future::poll_fn(move |cx| {
            *waker.lock().unwrap() = Some(cx.waker().clone());
            std::task::Poll::<()>::Pending
        })
        .await
    }
}

/// A waker can outlive the handler it belonged to (a timer or a socket
/// keeps it): waking it after the actor stopped must do nothing, not keep
/// the waking thread busy with an actor that has nothing to resume.
#[test]
fn a_waker_fired_after_its_actor_stopped_does_nothing() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
    let actor = system
        .spawn(Parked {
            waker: slot.clone(),
        })
        .unwrap();
    actor.tell(Park).unwrap();
    let waker = loop {
        if let Some(w) = slot.lock().unwrap().take() {
            break w;
        }
        std::thread::yield_now();
    };
    actor.stop();
    assert_eq!(system.block_on(actor.wait_stopped()), ExitReason::Normal);
    let (done, woke) = mpsc::channel();
    std::thread::spawn(move || {
        waker.wake();
        let _ = done.send(());
    });
    woke.recv_timeout(LIVENESS)
        .expect("waking a stopped actor's waker never returned");
    // The stopped actor still refuses messages, and its system shuts down.
    assert!(actor.tell(Park).is_err());
    system.shutdown(LIVENESS).unwrap();
}
