//! Safe code cannot break the runtime's promises: one message at a time per
//! actor also for direct dispatch (`LocalActor`) with a suspended async
//! handler, and a stashed message never takes another message's reply
//! channel. Small enough for Miri (`scripts/test` runs this file under it).

mod common;

use common::LIVENESS;
use troubadour::prelude::*;

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
