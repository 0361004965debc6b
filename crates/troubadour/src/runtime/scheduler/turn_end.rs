//! Work deferred to the end of the running actor turn.
//!
//! The remote layer batches: every message an actor sends to one node
//! during its turn goes into that node's buffer, and the buffer is written
//! once, when the turn ends, by the worker that ran it. Without this seam
//! the remote layer could only hand each batch to its writer thread (a
//! wake-up and a thread hand-off per batch) or write after every message
//! (a system call each, which cut remote throughput to an eighth).
//!
//! One queue per worker thread, touched only by that thread: a `Cell` flag
//! the worker reads after each turn (one load and one branch per turn, none
//! per message), and the list itself.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Work to do when the actor turn running on this thread ends. See
/// [`at_turn_end`](crate::remote::at_turn_end).
pub trait TurnEnd: Send + Sync + 'static {
    /// Called once on the worker thread after the turn that deferred it
    /// (or, if it was deferred outside a turn, before the worker next
    /// waits for work). Must not block for long: the worker's next actor
    /// waits for it.
    fn turn_ended(&self);
}

#[derive(Default)]
pub(super) struct TurnEndQueue {
    pending: Cell<bool>,
    work: RefCell<Vec<Arc<dyn TurnEnd>>>,
}

impl TurnEndQueue {
    /// Adds `work` unless the same object is queued already.
    pub(super) fn defer(&self, work: &Arc<dyn TurnEnd>) {
        let mut queued = self.work.borrow_mut();
        if !queued
            .iter()
            .any(|w| std::ptr::addr_eq(Arc::as_ptr(w), Arc::as_ptr(work)))
        {
            queued.push(work.clone());
        }
        self.pending.set(true);
    }

    /// Runs what was deferred, including what the work itself defers.
    #[inline]
    pub(super) fn run(&self) {
        if self.pending.get() {
            self.run_all();
        }
    }

    #[cold]
    fn run_all(&self) {
        while self.pending.replace(false) {
            let work = std::mem::take(&mut *self.work.borrow_mut());
            for w in work {
                w.turn_ended();
            }
        }
    }
}
