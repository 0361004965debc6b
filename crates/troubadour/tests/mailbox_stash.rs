//! Bounded mailboxes with backpressure, stash/unstash, dead letters and
//! control messages overtaking user messages.

mod common;

use common::{log, LIVENESS};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier};
use troubadour::prelude::*;
use troubadour::DeadLetter;

/// Blocks in a handler until released, so its mailbox fills up.
struct Gate {
    log: Sender<String>,
}
impl Actor for Gate {}

struct Hold(Arc<Barrier>);
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Gate {
    fn handle(&mut self, Hold(b): Hold, _: &mut Context<Self>) {
        b.wait(); // entered
        b.wait(); // released
    }
}

struct Item(u32);
impl Message for Item {
    type Reply = ();
}
impl Handler<Item> for Gate {
    fn handle(&mut self, Item(n): Item, _: &mut Context<Self>) {
        let _ = self.log.send(format!("item {n}"));
    }
}

#[test]
fn bounded_mailbox_refuses_when_full_and_send_waits_for_room() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let gate = system
        .spawn_with_options(
            SpawnOptions::new().mailbox(Mailbox::Bounded(3)),
            Gate { log: tx },
        )
        .unwrap();
    let barrier = Arc::new(Barrier::new(2));
    gate.tell(Hold(barrier.clone())).unwrap();
    barrier.wait(); // the gate is inside the handler; its mailbox is empty
    for n in 0..3 {
        gate.try_tell(Item(n)).unwrap();
    }
    match gate.try_tell(Item(99)) {
        Err(SendError::Full(Item(99))) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    assert!(matches!(gate.ask(Item(98)).wait(), Err(AskError::Full)));
    // `send` waits for room instead of failing.
    let g2 = gate.clone();
    let waiter = std::thread::spawn(move || g2.cell_send_blocking(Item(3)));
    barrier.wait(); // release the handler
    waiter.join().unwrap().unwrap();
    for n in 0..4 {
        assert_eq!(rx.next(), format!("item {n}"));
    }
}

trait SendBlocking {
    fn cell_send_blocking(&self, m: Item) -> Result<(), SendError<Item>>;
}
impl SendBlocking for ActorRef<Gate> {
    fn cell_send_blocking(&self, m: Item) -> Result<(), SendError<Item>> {
        common::block_on(self.send(m))
    }
}

#[test]
fn send_waiting_for_room_fails_when_the_actor_stops() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let gate = system
        .spawn_with_options(
            SpawnOptions::new().mailbox(Mailbox::Bounded(1)),
            Gate { log: tx },
        )
        .unwrap();
    let barrier = Arc::new(Barrier::new(2));
    gate.tell(Hold(barrier.clone())).unwrap();
    barrier.wait();
    gate.tell(Item(0)).unwrap();
    let g2 = gate.clone();
    let waiter = std::thread::spawn(move || g2.cell_send_blocking(Item(1)));
    gate.stop();
    barrier.wait();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(SendError::Stopped(_)) | Ok(())
    ));
    system.block_on(gate.wait_stopped());
}

#[test]
fn stop_overtakes_queued_messages_which_become_dead_letters() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let gate = system.spawn(Gate { log: tx }).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    gate.tell(Hold(barrier.clone())).unwrap();
    barrier.wait();
    for n in 0..100 {
        gate.tell(Item(n)).unwrap();
    }
    gate.stop();
    barrier.wait();
    assert_eq!(system.block_on(gate.wait_stopped()), ExitReason::Normal);
    assert!(
        rx.drain().is_empty(),
        "the stop must overtake all 100 items"
    );
    assert_eq!(system.dead_letter_count(), 100);
}

struct Collector {
    log: Sender<String>,
}
impl Actor for Collector {}
impl Handler<DeadLetter> for Collector {
    fn handle(&mut self, d: DeadLetter, _: &mut Context<Self>) {
        let _ = self.log.send(format!("dead: {}", d.message_type));
    }
}

#[test]
fn dead_letters_are_observable() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let collector = system.spawn(Collector { log: tx.clone() }).unwrap();
    system.subscribe_dead_letters(collector.recipient());
    let gate = system.spawn(Gate { log: tx }).unwrap();
    gate.stop();
    system.block_on(gate.wait_stopped());
    let err = gate.tell(Item(1)).unwrap_err();
    assert!(err.to_string().contains("dead letters"));
    assert!(rx.next().ends_with("Item"));
    assert_eq!(system.dead_letter_count(), 1);
}

/// Stashes `Work` until it is `Ready`.
struct Lazy {
    ready: bool,
    log: Sender<String>,
}
impl Actor for Lazy {}

struct Work(u32);
impl Message for Work {
    type Reply = u32;
}
impl Handler<Work> for Lazy {
    fn handle(&mut self, Work(n): Work, ctx: &mut Context<Self>) -> u32 {
        if !self.ready {
            ctx.stash(Work(n));
            return 0; // discarded: the reply goes out after unstashing
        }
        let _ = self.log.send(format!("work {n}"));
        n * 10
    }
}

struct Ready;
impl Message for Ready {
    type Reply = usize;
}
impl Handler<Ready> for Lazy {
    fn handle(&mut self, _: Ready, ctx: &mut Context<Self>) -> usize {
        self.ready = true;
        let n = ctx.stashed();
        ctx.unstash_all();
        n
    }
}

#[test]
fn stash_and_unstash_keep_order_and_replies() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let lazy = system
        .spawn(Lazy {
            ready: false,
            log: tx,
        })
        .unwrap();
    for n in 0..5 {
        lazy.tell(Work(n)).unwrap();
    }
    let asked = lazy.ask(Work(5));
    // Sent after Ready, so handled after the replayed stash.
    assert_eq!(lazy.ask(Ready).timeout(LIVENESS).wait(), Ok(6));
    lazy.tell(Work(6)).unwrap();
    assert_eq!(asked.timeout(LIVENESS).wait(), Ok(50));
    for n in 0..7 {
        assert_eq!(rx.next(), format!("work {n}"));
    }
}

#[test]
fn stashed_messages_become_dead_letters_on_stop() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let lazy = system
        .spawn(Lazy {
            ready: false,
            log: tx,
        })
        .unwrap();
    let asked = lazy.ask(Work(1));
    lazy.tell(Work(2)).unwrap();
    lazy.stop();
    assert_eq!(asked.timeout(LIVENESS).wait(), Err(AskError::NoReply));
    system.block_on(lazy.wait_stopped());
    assert_eq!(system.dead_letter_count(), 2);
}
