//! Safe code cannot break the runtime's promises: one message at a time per
//! actor also for direct dispatch (`LocalActor`) with a suspended async
//! handler, and a stashed message never takes another message's reply
//! channel. Small enough for Miri (`scripts/test` runs this file under it).

mod common;

use common::LIVENESS;
use tokio::sync::oneshot;
use troubadour::prelude::*;

// ---- LocalActor: a suspended async handler owns the state ---------------

/// A counter whose `SlowIncr` reads the count, awaits a gate, and writes the
/// count plus one: a read-modify-write across an `.await`, which is only
/// correct if nothing else touches the state meanwhile.
struct Tally {
    n: u64,
    gate: Option<oneshot::Receiver<()>>,
}
impl Actor for Tally {}

struct SlowIncr;
impl Message for SlowIncr {
    type Reply = ();
}
impl AsyncHandler<SlowIncr> for Tally {
    async fn handle(&mut self, _: SlowIncr, _: &mut Context<Self>) {
        let before = self.n;
        if let Some(gate) = self.gate.take() {
            let _ = gate.await;
        }
        self.n = before + 1;
    }
}

#[derive(Debug, PartialEq)]
struct Add(u64);
impl Message for Add {
    type Reply = u64;
}
impl Handler<Add> for Tally {
    fn handle(&mut self, Add(k): Add, _: &mut Context<Self>) -> u64 {
        self.n += k;
        self.n
    }
}
impl AsyncHandler<Add> for Tally {
    async fn handle(&mut self, Add(k): Add, _: &mut Context<Self>) -> u64 {
        self.n += k;
        self.n
    }
}

/// A `Tally` with its `SlowIncr` suspended on the gate inside `run_pending`.
fn tally_suspended(system: &ActorSystem) -> (LocalActor<Tally>, oneshot::Sender<()>) {
    let (open, gate) = oneshot::channel();
    let mut local = LocalActor::new(
        system,
        Tally {
            n: 0,
            gate: Some(gate),
        },
    )
    .unwrap();
    local.actor_ref().unwrap().tell(SlowIncr).unwrap();
    local.run_pending();
    (local, open)
}

#[test]
fn local_handle_waits_for_a_suspended_handler_instead_of_losing_its_update() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    // Woken, not yet resumed: the direct call must let it finish first.
    open.send(()).unwrap();
    assert_eq!(local.handle(Add(100)), Ok(101));
    local.run_pending();
    assert_eq!(local.actor().map(|t| t.n), Some(101));
}

#[test]
fn local_handle_waits_for_a_handler_woken_from_another_thread() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    // Whether the gate opens before or while `handle` waits, the direct
    // message is handled after the suspended one.
    let opener = std::thread::spawn(move || open.send(()).unwrap());
    assert_eq!(local.handle(Add(100)), Ok(101));
    opener.join().unwrap();
    assert_eq!(local.actor().map(|t| t.n), Some(101));
}

#[test]
fn local_handle_async_waits_for_a_suspended_handler() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    open.send(()).unwrap();
    assert_eq!(
        local.handle_async::<Add>(Add(100)).map_err(|_| "stopped"),
        Ok(101)
    );
}

#[test]
fn local_actor_state_is_not_lent_out_while_a_handler_is_suspended() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    assert!(local.is_suspended());
    assert!(
        local.actor().is_none(),
        "the suspended handler's future holds the state mutably"
    );
    open.send(()).unwrap();
    local.run_pending();
    assert!(!local.is_suspended());
    assert_eq!(local.actor().map(|t| t.n), Some(1));
}

#[test]
fn a_stop_while_suspended_ends_the_wait_of_a_direct_call() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    // Stopped from outside: the stop drops the suspended future, and the
    // direct call that was going to wait for it finds the actor stopped.
    local.actor_ref().unwrap().stop();
    assert!(matches!(
        local.handle(Add(1)),
        Err(SendError::Stopped(Add(1)))
    ));
    drop(open);
}

// ---- LocalActor::handle_all: the state lives in a local meanwhile -------

/// Counts the messages it handled into a state that knows how often it was
/// dropped, so a state moved out of the cell and back is seen to be dropped
/// exactly once, and never while still in use.
struct Ledger {
    entries: Vec<u64>,
    drops: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stops: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}
impl Actor for Ledger {
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.stops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
impl Drop for Ledger {
    fn drop(&mut self) {
        self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Entry `0` panics, `1` asks the context to stop, `2` sends the actor a
/// stop signal through its reference; anything else is recorded.
#[derive(Debug, PartialEq)]
struct Entry(u64);
impl Message for Entry {
    type Reply = usize;
}
impl Handler<Entry> for Ledger {
    fn handle(&mut self, Entry(n): Entry, ctx: &mut Context<Self>) -> usize {
        self.entries.push(n);
        match n {
            0 => panic!("entry 0"),
            1 => ctx.stop(),
            2 => ctx.myself().stop(),
            _ => {}
        }
        self.entries.len()
    }
}

fn ledger(
    system: &ActorSystem,
) -> (
    LocalActor<Ledger>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let local = LocalActor::new(
        system,
        Ledger {
            entries: Vec::new(),
            drops: drops.clone(),
            stops: stops.clone(),
        },
    )
    .unwrap();
    (local, drops, stops)
}

fn count(c: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> usize {
    c.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn handle_all_handles_every_message_in_order_and_keeps_the_state() {
    let system = ActorSystem::new();
    let (mut local, drops, stops) = ledger(&system);
    local.handle_all((3..100).map(Entry)).unwrap();
    // The state went back into the cell: readable, and handled on.
    assert_eq!(
        local.actor().map(|l| l.entries.clone()),
        Some((3..100).collect())
    );
    assert_eq!(local.handle(Entry(100)), Ok(98));
    assert_eq!(count(&drops), 0);
    drop(local);
    assert_eq!((count(&stops), count(&drops)), (1, 1));
}

#[test]
fn handle_all_ends_at_a_stop_asked_by_the_handler_with_the_next_message() {
    let system = ActorSystem::new();
    let (mut local, drops, stops) = ledger(&system);
    let mut entries = [5, 6, 1, 7, 8].into_iter().map(Entry);
    assert_eq!(
        local.handle_all(&mut entries),
        Err(SendError::Stopped(Entry(7)))
    );
    assert_eq!(
        entries.next(),
        Some(Entry(8)),
        "the rest stays the caller's"
    );
    // Stopped: its hook ran once, its state is gone.
    assert_eq!((count(&stops), count(&drops)), (1, 1));
    assert!(local.actor().is_none());
    assert_eq!(
        local.handle_all([Entry(9)]),
        Err(SendError::Stopped(Entry(9)))
    );
    assert_eq!(local.handle_all(std::iter::empty()), Ok(()));
    drop(local);
    assert_eq!((count(&stops), count(&drops)), (1, 1));
}

#[test]
fn a_signal_sent_during_handle_all_acts_before_the_next_message() {
    let system = ActorSystem::new();
    let (mut local, drops, stops) = ledger(&system);
    // Entry 2 sends a stop signal, as another actor or thread could: it
    // overtakes the messages still to come.
    assert_eq!(
        local.handle_all([5, 2, 6].map(Entry)),
        Err(SendError::Stopped(Entry(6)))
    );
    assert_eq!((count(&stops), count(&drops)), (1, 1));
}

#[test]
fn a_panic_in_handle_all_leaves_the_state_as_the_handler_left_it() {
    let system = ActorSystem::new();
    let (mut local, drops, stops) = ledger(&system);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        local.handle_all([5, 6, 0, 7].map(Entry))
    }));
    assert!(panicked.is_err(), "the handler's panic reaches the caller");
    // As after a panicking `handle`: the state is the one the handler left
    // (entry 0 recorded before it panicked), not dropped, and the actor
    // goes on.
    assert_eq!(count(&drops), 0);
    assert_eq!(
        local.actor().map(|l| l.entries.clone()),
        Some(vec![5, 6, 0])
    );
    local.handle_all([8].map(Entry)).unwrap();
    assert_eq!(local.actor().map(|l| l.entries.len()), Some(4));
    drop(local);
    assert_eq!((count(&stops), count(&drops)), (1, 1));
}

#[test]
fn handle_all_waits_for_a_suspended_handler_first() {
    let system = ActorSystem::new();
    let (mut local, open) = tally_suspended(&system);
    open.send(()).unwrap();
    local.handle_all([Add(100), Add(1000)]).unwrap();
    // 1 from the suspended read-modify-write, then the batch.
    assert_eq!(local.actor().map(|t| t.n), Some(1101));
}

// ---- Stash: the reply goes to the asker of the message that was asked ---

/// Answers `Get` at once, but defers a `Compute` it owes until `Open`.
struct Store {
    open: bool,
}
impl Actor for Store {}

struct Get;
impl Message for Get {
    type Reply = u32;
}
impl Handler<Get> for Store {
    fn handle(&mut self, _: Get, ctx: &mut Context<Self>) -> u32 {
        if !self.open {
            // Another message with the same reply type: it must not take
            // the reply channel of this `ask(Get)`.
            ctx.stash(Compute(7000));
        }
        42
    }
}

struct Compute(u32);
impl Message for Compute {
    type Reply = u32;
}
impl Handler<Compute> for Store {
    fn handle(&mut self, Compute(n): Compute, _: &mut Context<Self>) -> u32 {
        n
    }
}

struct Open;
impl Message for Open {
    type Reply = usize;
}
impl Handler<Open> for Store {
    fn handle(&mut self, _: Open, ctx: &mut Context<Self>) -> usize {
        self.open = true;
        let n = ctx.stashed();
        ctx.unstash_all();
        n
    }
}

#[test]
fn stashing_another_message_with_the_same_reply_type_keeps_the_askers_reply() {
    let system = ActorSystem::new();
    let store = system.spawn(Store { open: false }).unwrap();
    let get = store.ask(Get);
    assert_eq!(store.ask(Open).timeout(LIVENESS).wait(), Ok(1));
    assert_eq!(get.timeout(LIVENESS).wait(), Ok(42));
    // The stashed `Compute` was handled (as a tell: nobody asked it).
    assert_eq!(store.ask(Compute(5)).timeout(LIVENESS).wait(), Ok(5));
}

/// Stashes `Work` while closed, like `mailbox_stash.rs`'s `Lazy`, but first
/// runs a `LocalActor`'s queued `ask` on the same thread: an inner turn in
/// the middle of the handler.
struct Nested {
    open: bool,
}
impl Actor for Nested {}

struct Work(u32);
impl Message for Work {
    type Reply = u32;
}
impl Handler<Work> for Nested {
    fn handle(&mut self, Work(n): Work, ctx: &mut Context<Self>) -> u32 {
        if self.open {
            return n * 10;
        }
        let system = ctx.system();
        let mut inner = LocalActor::new(&system, Store { open: true }).unwrap();
        let inner_reply = inner.actor_ref().unwrap().ask(Compute(1));
        inner.run_pending();
        drop(inner_reply);
        // The inner turn is over; this handler's `ask` is current again.
        ctx.stash(Work(n));
        0 // discarded: the reply goes out when the stashed `Work` is handled
    }
}
impl Handler<Open> for Nested {
    fn handle(&mut self, _: Open, ctx: &mut Context<Self>) -> usize {
        self.open = true;
        let n = ctx.stashed();
        ctx.unstash_all();
        n
    }
}

#[test]
fn a_turn_nested_in_a_handler_does_not_take_the_handlers_reply_slot() {
    let system = ActorSystem::new();
    let nested = system.spawn(Nested { open: false }).unwrap();
    let work = nested.ask(Work(7));
    assert_eq!(nested.ask(Open).timeout(LIVENESS).wait(), Ok(1));
    assert_eq!(work.timeout(LIVENESS).wait(), Ok(70));
}

// ---- Fault nodes of held messages: handled and discarded ----------------
// (They have their own vtable and free their victim node; these runs give
// Miri both paths, the handled one and the discarded one.)

struct Sink {
    got: Vec<u32>,
}
impl Actor for Sink {}

struct Item(u32);
impl Message for Item {
    type Reply = ();
}
impl Handler<Item> for Sink {
    fn handle(&mut self, Item(n): Item, _: &mut Context<Self>) {
        self.got.push(n);
    }
}

fn held_system() -> ActorSystem {
    ActorSystem::builder()
        .manual_scheduling()
        .hold_messages()
        .build()
}

fn run_all(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, 64)).is_some() {}
}

#[test]
fn a_message_delivered_after_a_stop_is_a_dead_letter_and_the_stop_is_normal() {
    let system = held_system();
    let sink = system.spawn(Sink { got: vec![] }).unwrap();
    run_all(&system); // started
    sink.tell(Item(1)).unwrap();
    let asked = sink.ask(Item(2));
    let mut held = system.take_in_flight();
    assert_eq!(held.len(), 2);
    let second = held.pop().unwrap();
    held.pop().unwrap().deliver_after_stop();
    second.deliver();
    run_all(&system);
    assert_eq!(system.block_on(sink.wait_stopped()), ExitReason::Normal);
    assert_eq!(asked.wait(), Err(AskError::NoReply));
    assert_eq!(system.dead_letter_count(), 2);
}

#[test]
fn a_fault_node_still_queued_when_its_actor_stops_is_a_dead_letter() {
    let system = held_system();
    let sink = system.spawn(Sink { got: vec![] }).unwrap();
    run_all(&system);
    sink.tell(Item(1)).unwrap();
    system
        .take_in_flight()
        .pop()
        .unwrap()
        .deliver_with_panic("never reached");
    // The stop overtakes the fault node, which is discarded unhandled.
    sink.stop();
    run_all(&system);
    assert_eq!(system.block_on(sink.wait_stopped()), ExitReason::Normal);
    assert_eq!(system.dead_letter_count(), 1);
}

// ---- A supervisor's decision reads the actor: not while a handler is ----
// ---- suspended in it ----------------------------------------------------

/// Counts in a `Cell` how often its strategy was consulted; its async
/// `Hold` reads that count, awaits a gate and writes it back plus 100.
struct Overseer {
    consulted: std::cell::Cell<u32>,
    child: Option<ActorRef<Fragile>>,
}
impl Actor for Overseer {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.child = Some(ctx.spawn_with(|| Fragile).unwrap());
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        self.consulted.set(self.consulted.get() + 1);
        SupervisorStrategy::default()
    }
}

struct Hold(oneshot::Receiver<()>);
impl Message for Hold {
    type Reply = ();
}
impl AsyncHandler<Hold> for Overseer {
    async fn handle(&mut self, Hold(gate): Hold, _: &mut Context<Self>) {
        let before = self.consulted.get();
        let _ = gate.await;
        self.consulted.set(before + 100);
    }
}

struct Consulted;
impl Message for Consulted {
    type Reply = u32;
}
impl Handler<Consulted> for Overseer {
    fn handle(&mut self, _: Consulted, _: &mut Context<Self>) -> u32 {
        self.consulted.get()
    }
}

struct ChildRef;
impl Message for ChildRef {
    type Reply = ActorRef<Fragile>;
}
impl Handler<ChildRef> for Overseer {
    fn handle(&mut self, _: ChildRef, _: &mut Context<Self>) -> ActorRef<Fragile> {
        self.child.clone().unwrap()
    }
}

struct Fragile;
impl Actor for Fragile {}
struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for Fragile {
    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!("crash");
    }
}
struct Alive;
impl Message for Alive {
    type Reply = bool;
}
impl Handler<Alive> for Fragile {
    fn handle(&mut self, _: Alive, _: &mut Context<Self>) -> bool {
        true
    }
}

#[test]
fn a_child_failing_while_its_supervisor_awaits_is_decided_after_the_handler() {
    // Manual scheduling: the child's failure reaches the supervisor while
    // its handler is suspended, every run.
    let system = ActorSystem::builder().manual_scheduling().build();
    let overseer = system
        .spawn(Overseer {
            consulted: std::cell::Cell::new(0),
            child: None,
        })
        .unwrap();
    let child = overseer.ask(ChildRef);
    run_all(&system);
    let child = child.wait().unwrap();
    let (open, gate) = oneshot::channel();
    overseer.tell(Hold(gate)).unwrap();
    run_all(&system); // suspended at the gate
    child.tell(Crash).unwrap();
    run_all(&system); // the child fails; its supervisor hears of it
    open.send(()).unwrap();
    run_all(&system); // the handler ends; then the failure is decided
    let consulted = overseer.ask(Consulted);
    let alive = child.ask(Alive);
    run_all(&system);
    assert_eq!(
        consulted.wait(),
        Ok(101),
        "the strategy must not read the actor while the handler holds it"
    );
    assert_eq!(alive.wait(), Ok(true), "the child was restarted");
}

// ---- Deferred replies: an explicit handle on the asker ------------------

/// Takes over the reply of every `Take` and answers them on `Put`; `Peek`
/// (same reply type) tries to take a `Take`'s reply and must get none.
struct Slot {
    waiting: Vec<troubadour::DeferredReply<u32>>,
    told: usize,
}
impl Actor for Slot {}

struct Take;
impl Message for Take {
    type Reply = u32;
}
impl Handler<Take> for Slot {
    fn handle(&mut self, _: Take, ctx: &mut Context<Self>) -> u32 {
        match ctx.defer_reply::<Take>() {
            Some(reply) => self.waiting.push(reply),
            None => self.told += 1,
        }
        // A second call finds the reply taken.
        assert!(ctx.defer_reply::<Take>().is_none());
        0 // discarded when the reply was taken over
    }
}

struct Peek;
impl Message for Peek {
    type Reply = u32;
}
impl Handler<Peek> for Slot {
    fn handle(&mut self, _: Peek, ctx: &mut Context<Self>) -> u32 {
        // Not the message being handled: no reply to take.
        assert!(ctx.defer_reply::<Take>().is_none());
        self.waiting.len() as u32 * 1000 + self.told as u32
    }
}

struct Put(Option<u32>);
impl Message for Put {
    type Reply = ();
}
impl Handler<Put> for Slot {
    fn handle(&mut self, Put(n): Put, _: &mut Context<Self>) {
        for reply in self.waiting.drain(..) {
            if let Some(n) = n {
                let _ = reply.send(n);
            } // else dropped unanswered
        }
    }
}

#[test]
fn a_deferred_reply_reaches_its_asker_when_sent() {
    let system = ActorSystem::new();
    let slot = system
        .spawn(Slot {
            waiting: vec![],
            told: 0,
        })
        .unwrap();
    let first = slot.ask(Take);
    let second = slot.ask(Take);
    slot.tell(Take).unwrap(); // told: nothing to defer
    assert_eq!(slot.ask(Peek).timeout(LIVENESS).wait(), Ok(2001));
    slot.tell(Put(Some(7))).unwrap();
    assert_eq!(first.timeout(LIVENESS).wait(), Ok(7));
    assert_eq!(second.timeout(LIVENESS).wait(), Ok(7));
}

#[test]
fn a_deferred_reply_dropped_unanswered_ends_the_ask() {
    let system = ActorSystem::new();
    let slot = system
        .spawn(Slot {
            waiting: vec![],
            told: 0,
        })
        .unwrap();
    let asked = slot.ask(Take);
    slot.tell(Put(None)).unwrap();
    assert_eq!(asked.timeout(LIVENESS).wait(), Err(AskError::NoReply));
}

// ---- The graceful stop's marker node: handled and discarded -------------
// (Its own vtable frees a boxed node; Miri gets both paths here.)

/// Logs what it handles into a shared list.
struct Logger(std::sync::Arc<std::sync::Mutex<Vec<u32>>>);
impl Actor for Logger {}
impl Handler<Item> for Logger {
    fn handle(&mut self, Item(n): Item, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(n);
    }
}

#[test]
fn a_graceful_stop_handles_what_was_queued_then_stops() {
    let system = ActorSystem::builder().manual_scheduling().build();
    let got = std::sync::Arc::default();
    let logger = system.spawn(Logger(std::sync::Arc::clone(&got))).unwrap();
    logger.tell(Item(1)).unwrap();
    logger.tell(Item(2)).unwrap();
    logger.stop_gracefully();
    assert!(
        logger.tell(Item(3)).is_err(),
        "refused after the graceful stop"
    );
    run_all(&system);
    assert_eq!(system.block_on(logger.wait_stopped()), ExitReason::Normal);
    assert_eq!(*got.lock().unwrap(), [1, 2]);
}

#[test]
fn a_graceful_stop_overtaken_by_a_stop_is_a_dead_letter() {
    let system = ActorSystem::builder().manual_scheduling().build();
    let got = std::sync::Arc::default();
    let logger = system.spawn(Logger(std::sync::Arc::clone(&got))).unwrap();
    run_all(&system);
    logger.tell(Item(1)).unwrap();
    logger.stop_gracefully();
    logger.stop(); // overtakes the queue: the item and the marker are dropped
    run_all(&system);
    assert_eq!(system.block_on(logger.wait_stopped()), ExitReason::Normal);
    assert!(got.lock().unwrap().is_empty());
    assert_eq!(system.dead_letter_count(), 2, "the item and the marker");
}
