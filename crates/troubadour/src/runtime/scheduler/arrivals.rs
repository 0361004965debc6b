//! Running an actor on the thread its message arrived on.
//!
//! A message read from a socket is told to its actor by the thread that
//! read it, which is not a worker: the actor goes to the global queue and a
//! sleeping worker is woken to run it. On an idle node that wake-up is most
//! of a remote round trip's cost (the reader thread wakes, then wakes a
//! worker, and the worker's reply wakes the reader again on the far side).
//! [`keep_arrival`] lets the reader keep the actor its delivery woke and
//! run its turn itself ([`Arrival::run`]), with no worker woken.
//!
//! While a keeping call runs, a flag in this thread's [`Keeper`] is set; the
//! non-worker branch of `Shared::schedule` (the only one that reads it, so
//! workers pay nothing) hands the actor it would have queued to the keeper
//! instead. If the delivery wakes a second actor, both go to the global
//! queue as usual (in the order woken) and nothing is kept: there is work
//! for several threads then, and the reading thread is better spent
//! reading. An `Arrival` holds the actor's consumer role, exactly like a task
//! in a run queue: run, or dropped unrun (then queued for a worker), it
//! gives the role on once.

use super::{Shared, Task, Turn};
use crate::api::exit::ActorId;
use crate::runtime::crash_report;
use crate::runtime::scheduler::turn_end::TurnEndQueue;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// The keeping state of one thread.
#[derive(Default)]
struct Keeper {
    /// Inside [`keep_arrival`]: the next schedule is kept.
    keeping: Cell<bool>,
    /// Its scheduler is borrowed from it when needed: each thread cloning
    /// the scheduler's `Arc` per delivery would pass that count's cache
    /// line between the cores on every message.
    kept: RefCell<Option<Task>>,
    /// The delivery woke more than one actor, or an ask in it was answered
    /// here (`handle_here`): nothing is kept.
    crowded: Cell<bool>,
    /// The keeping call is `handle_here`'s, which runs what it keeps in
    /// any case: an ask of an idle actor may be answered as it is sent
    /// (`may_handle_here`). A bare `keep_arrival` leaves its caller the
    /// choice to run the arrival or hand it to the workers.
    answering: Cell<bool>,
    /// The scheduler whose actor is running a turn here (null: none), for
    /// `is_worker_thread` and the turn-end queue.
    running: Cell<*const Shared>,
    turn_end: TurnEndQueue,
}

thread_local! {
    static KEEPER: Keeper = Keeper::default();
}

/// An actor woken by a delivery, whose turn the receiving thread may run
/// itself. See [`keep_arrival`](crate::remote::keep_arrival).
pub struct Arrival {
    task: Option<Task>,
}

impl std::fmt::Debug for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arrival")
            .field("actor", &self.id())
            .finish()
    }
}

impl Arrival {
    /// The actor that will run.
    pub fn id(&self) -> ActorId {
        self.task.as_ref().map_or(ActorId(0), |t| t.id())
    }

    /// Runs one turn of the actor on this thread (at most the system's
    /// message budget), then the work its turn deferred
    /// ([`at_turn_end`](crate::remote::at_turn_end)). If the actor has
    /// more to do afterwards it goes to a worker.
    ///
    /// The thread is not a worker: a handler that blocks holds up whatever
    /// else this thread does (the caller reads a socket), so call this only
    /// where that is acceptable, and prefer handing long-running actors to
    /// the workers (drop the `Arrival` instead). Troubadour's own waits
    /// (`ask(..).wait()`) are safe here: on a thread of a multi-threaded
    /// tokio runtime they hand the thread's other tasks on first
    /// (`block_in_place`). On such a thread a handler that calls
    /// `tokio::runtime::Handle::block_on` itself panics, as it would in any
    /// tokio task.
    pub fn run(mut self) {
        let Some(task) = self.task.take() else { return };
        let shared = &task.scheduler().shared;
        if shared.shutdown.load(std::sync::atomic::Ordering::Relaxed) {
            // The workers are gone; the queue is drained by the shutdown.
            Arc::clone(shared).injector.push(task);
            return;
        }
        // The turn consumes the task, and an actor that stops in it may be
        // freed, scheduler reference and all, before it returns: only plain
        // values are taken from it here.
        let (running, budget, crash_reports) =
            (Arc::as_ptr(shared), shared.budget, shared.crash_reports);
        // SAFETY: the arrival holds the consumer role (taken from the
        // schedule it replaced) with the task, and gives both to this turn.
        let turn = as_turn_here(running, crash_reports, || unsafe { task.run_turn(budget) });
        if let Turn::Again(task) = turn {
            to_workers(task);
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Not run here: a worker runs it, as it would have.
            to_workers(task);
        }
    }
}

/// Runs `turn` on this thread as an actor's turn run here: it counts as a
/// turn of `running`'s (`is_running_for`, for `is_worker_thread` and the
/// blocking waits of its handlers), its panics are reported as on a worker,
/// and the work it defers to its end runs when it returns.
fn as_turn_here<R>(
    running: *const Shared,
    crash_reports: crash_report::CrashReports,
    turn: impl FnOnce() -> R,
) -> R {
    let _crash_reports = crash_report::actor_thread(crash_reports);
    KEEPER.with(|k| {
        let was = k.running.replace(running);
        // Restores the flag even if the turn unwinds (a panic outside
        // the handler's own catch), so the thread is never left looking
        // like a worker.
        struct Restore<'a>(&'a Keeper, *const Shared);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.running.set(self.1);
            }
        }
        let _restore = Restore(k, was);
        let out = turn();
        k.turn_end.run();
        out
    })
}

/// Whether an ask sent now may be handled on this thread as it is sent
/// (`ActorCell::ask_here`): inside `handle_here`'s keeping call, which has
/// neither kept an actor nor passed one on, off any turn, for a scheduler with workers
/// that is not shutting down. The actor it would wake is then the one
/// [`keep`] would keep.
pub(super) fn may_handle_here(shared: &Shared) -> bool {
    KEEPER.with(|k| {
        k.answering.get()
            && k.keeping.get()
            && !k.crowded.get()
            && k.running.get().is_null()
            && !shared.unparkers.is_empty()
            && !shared.shutdown.load(std::sync::atomic::Ordering::Relaxed)
            && k.kept.borrow().is_none()
    })
}

/// Runs `handle`, an ask's handling on the thread that sent it, as a turn
/// run here (see `as_turn_here`). It ends what this keeping call may run
/// here: anything woken from then on, by the handler or after it, the same
/// actor included, goes to the workers, as from an [`Arrival`]'s turn.
pub(super) fn handle_here<R>(shared: &Shared, handle: impl FnOnce() -> R) -> R {
    KEEPER.with(|k| k.crowded.set(true));
    as_turn_here(shared, shared.crash_reports, handle)
}

/// Queues an actor for its scheduler's workers and wakes one.
fn to_workers(task: Task) {
    let shared = Arc::clone(&task.scheduler().shared);
    shared.injector.push(task);
    shared.wake_one();
}

/// See [`keep_arrival`](crate::remote::keep_arrival).
pub(crate) fn keep_arrival<R>(deliver: impl FnOnce() -> R) -> (R, Option<Arrival>) {
    keeping(deliver, false)
}

/// [`keep_arrival`] for `handle_here`, whose caller runs the arrival: an
/// ask in `deliver` of an idle actor may be answered as it is sent.
pub(crate) fn keep_arrival_answering<R>(deliver: impl FnOnce() -> R) -> (R, Option<Arrival>) {
    keeping(deliver, true)
}

fn keeping<R>(deliver: impl FnOnce() -> R, answering: bool) -> (R, Option<Arrival>) {
    let nested = KEEPER.with(|k| {
        let nested = k.keeping.replace(true);
        if !nested {
            k.answering.set(answering);
        }
        nested
    });
    if nested {
        return (deliver(), None);
    }
    // Stops keeping (and queues what was kept) if `deliver` unwinds.
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            drop(stop_keeping());
        }
    }
    let stop = Stop;
    let out = deliver();
    std::mem::forget(stop);
    (out, stop_keeping())
}

/// Ends a keeping call: what it kept, if anything.
fn stop_keeping() -> Option<Arrival> {
    let kept = KEEPER.with(|k| {
        k.keeping.set(false);
        k.crowded.set(false);
        k.answering.set(false);
        k.kept.borrow_mut().take()
    });
    kept.map(|task| Arrival { task: Some(task) })
}

/// Called by `Shared::schedule` off the workers: keeps `task` if this
/// thread is keeping and this is the first actor its delivery woke;
/// otherwise hands it back to be queued (and, on the second actor, queues
/// the first one too).
pub(super) fn keep(shared: &Arc<Shared>, task: Task) -> Option<Task> {
    KEEPER.with(|k| {
        // A scheduler with no workers (the simulation's) runs only what
        // its owner picks.
        if !k.keeping.get() || k.crowded.get() || shared.unparkers.is_empty() {
            return Some(task);
        }
        let mut kept = k.kept.borrow_mut();
        if let Some(first) = kept.take() {
            // A second actor: the workers get both (the first one first,
            // as it was woken first). A delivery that wakes several actors
            // has work for several threads, and the reading thread is
            // better spent reading the next frames.
            k.crowded.set(true);
            drop(kept);
            to_workers(first);
            return Some(task);
        }
        *kept = Some(task);
        None
    })
}

/// Defers `work` to the end of the turn an [`Arrival`] is running on this
/// thread; `false` if none is.
pub(super) fn defer_to_turn_end(work: &Arc<dyn super::TurnEnd>) -> bool {
    KEEPER.with(|k| {
        if k.running.get().is_null() {
            return false;
        }
        k.turn_end.defer(work);
        true
    })
}

/// Runs what the turn an [`Arrival`] is running here deferred so far.
pub(super) fn run_turn_end_now() {
    KEEPER.with(|k| k.turn_end.run());
}

/// True while an [`Arrival`] of `shared`'s runs a turn on this thread.
pub(super) fn is_running_for(shared: *const Shared) -> bool {
    KEEPER.with(|k| std::ptr::eq(k.running.get(), shared))
}

/// True while an [`Arrival`] runs a turn on this thread.
pub(crate) fn is_running() -> bool {
    KEEPER.with(|k| !k.running.get().is_null())
}
