//! The worker pool that runs actors.
//!
//! A run queue holds actors that have input, not messages: an actor with a
//! thousand queued messages is one entry, and an idle actor costs the
//! scheduler nothing. Each worker thread has a LIFO deque (crossbeam-deque,
//! Chase–Lev): an actor woken by a message from a worker runs next on that
//! worker, while its caches are warm, and a freshly spawned child runs
//! before its parent spawns the next one, which keeps spawn trees depth-first
//! and small. Other threads' wake-ups go to a global FIFO injector; idle
//! workers steal.
//!
//! Fairness: an actor handles at most `budget` messages per turn; if it has
//! more it goes to the back of its worker's *yielded* FIFO, never the top of
//! the local LIFO (which would run it again at once). A worker takes from
//! its yielded FIFO only when its slot, its deque and the global queue are
//! empty, and every 61st pick looks at the global queue first. A
//! self-flooding actor therefore yields to everything queued before it, yet
//! stays on the core where its mailbox's memory is (sending it to the global
//! queue instead moved pingpong's actors between cores: 84.7 against 103.3
//! M msg/s, medians of 8 interleaved runs). After 16 turns in a row from the
//! next-actor slot a worker takes the *oldest* actor of its own deque, so
//! actors that keep waking each other (and so keep the slot busy) cannot
//! hold back the rest of the deque either.
//!
//! Next actor: an actor woken by a message from the running turn goes to
//! the worker's next-actor slot (`next_slot.rs`), which the worker runs
//! first when the turn ends; a second one woken in the same turn goes to the
//! deque. Other workers take from the slot only after searching in vain for
//! a while (`SLOT_STEAL_ROUND`, a few microseconds), so the woken actor reads
//! its mailbox on the core that wrote it instead of racing the sender for
//! the same cache lines.
//!
//! Sleeping: a worker with nothing to do searches for a short while (spins,
//! then yields) and then parks. A waker only pays for an `unpark` (a system
//! call) when no worker is searching and one is parked. The sleep protocol
//! (`idle.rs`, with its proof sketch and a loom model): the worker registers
//! as sleeping, issues a `SeqCst` fence and re-checks every queue before
//! parking; a producer pushes, fences and then reads the sleeper count. One
//! of the two sees the other (store-buffer pattern), so work is never left
//! with every worker asleep. And since a waker skips the unpark while some
//! worker searches, the last searcher to find work re-checks the queues and
//! wakes a sleeper for what is left: otherwise it could run a long turn
//! while work waits with the other workers asleep.

mod arrivals;
mod idle;
mod next_slot;
mod turn_end;

use crate::api::exit::ActorId;
use crate::runtime::crash_report::{self, CrashReports};
use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_utils::sync::{Parker, Unparker};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

#[cfg(loom)]
pub use idle::Idle;
#[cfg(not(loom))]
use idle::Idle;
#[cfg(not(loom))]
use next_slot::NextSlot;
#[cfg(loom)]
pub use next_slot::{
    become_thief as next_slot_become_thief, stop_thieving as next_slot_stop_thieving, NextSlot,
};

/// What a worker does with an actor after a turn.
pub(crate) enum Turn {
    /// Released; someone else will schedule it when input arrives.
    Idle,
    /// Still owned by the caller and has work: schedule it again. The task
    /// comes back with the role, so running a turn moves the queue's
    /// reference in and out instead of cloning it (two atomic
    /// read-modify-writes on the actor's count per turn, a tenth of a
    /// ring hop's cost; decision 0040).
    Again(Task),
}

/// Something the scheduler runs: an actor, as far as it is concerned. The
/// actor cell implements it; the scheduler knows nothing else of actors.
///
/// An `Arc<dyn Runnable>` in a run queue carries the actor's consumer role:
/// it is queued only by the holder of the role, and whoever takes it out
/// holds the role until [`run_turn`](Runnable::run_turn) returns
/// [`Turn::Idle`]. Its strong count is the actor's own run-queue reference,
/// which moves with the role (decision 0050): a task is made without
/// touching the count, and a turn that ends idle leaves it with the actor.
/// Dropping a task without running it drops that reference and strands the
/// role, which only a stopped scheduler does.
pub(crate) trait Runnable: Send + Sync + 'static {
    /// Runs one turn of at most `budget` messages, then gives up the
    /// consumer role ([`Turn::Idle`], consuming the task) unless there is
    /// more to do ([`Turn::Again`]: the task comes back, the caller still
    /// holds the role and must run or queue the actor again).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`), and
    /// `self` is the task that carries it: the actor's run-queue
    /// reference, not a clone.
    unsafe fn run_turn(self: Arc<Self>, budget: u32) -> Turn;
    /// As [`run_turn`](Self::run_turn), for a thread that holds the role
    /// and a reference of its own (an actor's dedicated thread), lent to
    /// the turn as `self`: `true` while it still holds the role.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role.
    unsafe fn run_turn_owned(self: Arc<Self>, budget: u32) -> bool;
    fn is_finished(&self) -> bool;
    fn id(&self) -> ActorId;
    /// The scheduler that runs this actor. Borrowed from the actor, so
    /// code holding a task reaches the scheduler without touching the
    /// scheduler's reference count, which every thread shares.
    fn scheduler(&self) -> &Scheduler;
}

pub(crate) type Task = Arc<dyn Runnable>;

const GLOBAL_QUEUE_INTERVAL: u32 = 61;
/// After this many turns in a row from its next-actor slot, a worker takes
/// the oldest actor of its own deque instead.
const SLOT_STREAK: u32 = 16;
/// Search rounds of about 32 spin-loop hints each (about 15 µs in all on
/// the machine the suite runs on), then rounds that yield the core, before
/// a worker sleeps. Longer searching took the cores from the threads with
/// work: remote round trips' p99 grew by a third or more at 64/16 and
/// nearly tripled at 256/16, with no local workload faster (decision 0021).
const SPIN_ROUNDS: u32 = 16;
const YIELD_ROUNDS: u32 = 4;
/// Search rounds (each about 32 spin-loop hints) before a worker takes
/// another worker's next actor (see "Next actor" above).
const SLOT_STEAL_ROUND: u32 = 16;

struct Shared {
    injector: Injector<Task>,
    stealers: Vec<Stealer<Task>>,
    /// Per worker: the actors that ran out of budget there (see `yielded`).
    yielded_stealers: Vec<Stealer<Task>>,
    /// Per worker: the actor its running turn woke (see `next_slot.rs`).
    next: Vec<CachePadded<NextSlot<Task>>>,
    unparkers: Vec<Unparker>,
    /// Who searches and who sleeps (`idle.rs`: the no-lost-wake-up protocol).
    idle: Idle,
    /// Actors taken from another worker (its deque, its yielded queue or
    /// its next-actor slot), for observers. Counted on the stealing path
    /// only.
    steals: AtomicU64,
    shutdown: AtomicBool,
    budget: u32,
    /// How the threads running these actors report a caught panic.
    crash_reports: CrashReports,
}

struct WorkerLocal {
    shared: *const Shared,
    me: usize,
    deque: Worker<Task>,
    /// FIFO of actors that used their whole budget here and have more to
    /// do: they run again after everything in the slot and the deque, on
    /// this worker, where their mailbox's memory is.
    yielded: Worker<Task>,
    turn_end: turn_end::TurnEndQueue,
    /// Whether this worker is a thief of the other workers' next-actor
    /// slots (`next_slot.rs`): from its first search that reached them
    /// until it next sleeps, so one `membarrier` covers every steal
    /// between (decision 0051).
    thieving: Cell<bool>,
}

pub use arrivals::Arrival;
pub(crate) use arrivals::{is_running as arrival_running, keep_arrival, keep_arrival_answering};
pub use turn_end::TurnEnd;

/// Runs, now, the work deferred to the end of the turn running on this
/// thread, for a handler about to block: what it waits for may hang on
/// that work (a remote ask is written to the network when the turn ends).
pub(crate) fn run_turn_end_now() {
    CURRENT.with(|c| {
        let local = c.get();
        if local.is_null() {
            return arrivals::run_turn_end_now();
        }
        // SAFETY: a non-null pointer is this thread's own worker local,
        // alive for the whole worker loop, and only this thread uses it.
        unsafe { (*local).turn_end.run() };
    })
}

/// Defers `work` to the end of the actor turn running on this thread; `false`
/// (and nothing deferred) when this is not a worker thread.
pub(crate) fn defer_to_turn_end(work: &Arc<dyn TurnEnd>) -> bool {
    CURRENT.with(|c| {
        let local = c.get();
        if local.is_null() {
            return arrivals::defer_to_turn_end(work);
        }
        // SAFETY: a non-null pointer is this thread's own worker local,
        // alive for the whole worker loop, and only this thread uses it.
        unsafe { (*local).turn_end.defer(work) };
        true
    })
}

thread_local! {
    static CURRENT: Cell<*const WorkerLocal> = const { Cell::new(std::ptr::null()) };
}

pub(crate) struct Scheduler {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Disconnects when the last worker thread has ended: each worker holds
    /// a sender until it returns (or unwinds), so shutdown can wait for the
    /// workers with a deadline, which `JoinHandle::join` cannot.
    exits: Mutex<Option<Receiver<()>>>,
    tokio: tokio::runtime::Handle,
    /// `Some` for a manually driven scheduler (no worker threads; see
    /// [`Scheduler::manual`]): the actors that are ready to run.
    manual: Option<Mutex<Vec<Task>>>,
    /// On a manual scheduler: the id of the actor whose turn is running
    /// (0: none), so a held message knows its sender.
    current: AtomicU64,
}

/// One turn a manually driven scheduler ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnRun {
    /// The actor that ran.
    pub actor: ActorId,
    /// How many ready actors there were to choose from.
    pub ready: usize,
    /// The message budget it was given.
    pub budget: u32,
}

impl Scheduler {
    pub(crate) fn new(
        threads: usize,
        budget: u32,
        tokio: tokio::runtime::Handle,
        crash_reports: CrashReports,
    ) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let deques: Vec<Worker<Task>> = (0..threads).map(|_| Worker::new_lifo()).collect();
        let yielded: Vec<Worker<Task>> = (0..threads).map(|_| Worker::new_fifo()).collect();
        let parkers: Vec<Parker> = (0..threads).map(|_| Parker::new()).collect();
        let shared = Arc::new(Shared {
            injector: Injector::new(),
            stealers: deques.iter().map(|d| d.stealer()).collect(),
            yielded_stealers: yielded.iter().map(|d| d.stealer()).collect(),
            next: (0..threads)
                .map(|_| CachePadded::new(NextSlot::new()))
                .collect(),
            unparkers: parkers.iter().map(|p| p.unparker().clone()).collect(),
            idle: Idle::new(threads),
            steals: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            budget: budget.max(1),
            crash_reports,
        });
        let mut handles = Vec::with_capacity(threads);
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
        // Each worker says when it is ready to run turns (`run_worker`), so
        // the system is ready when it is returned.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let queues = deques.into_iter().zip(yielded);
        for (index, ((deque, yielded), parker)) in queues.zip(parkers).enumerate() {
            let (worker_shared, worker_tokio) = (shared.clone(), tokio.clone());
            let (exit, ready) = (exit_tx.clone(), ready_tx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("troubadour-worker-{index}"))
                .spawn(move || {
                    let _exit = exit;
                    let _runtime = worker_tokio.enter();
                    run_worker(worker_shared, index, deque, yielded, parker, ready)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Stop the workers already started before reporting.
                    drop(exit_tx);
                    let partial = Scheduler {
                        shared,
                        threads: Mutex::new(handles),
                        exits: Mutex::new(Some(exit_rx)),
                        tokio,
                        manual: None,
                        current: AtomicU64::new(0),
                    };
                    partial.shutdown(None);
                    return Err(e);
                }
            }
        }
        drop(exit_tx);
        drop(ready_tx);
        // One message per worker; an error means every worker left already
        // (none can be waited for any more).
        for _ in 0..handles.len() {
            if ready_rx.recv().is_err() {
                break;
            }
        }
        Ok(Scheduler {
            shared,
            threads: Mutex::new(handles),
            exits: Mutex::new(Some(exit_rx)),
            tokio,
            manual: None,
            current: AtomicU64::new(0),
        })
    }

    /// A scheduler with no worker threads: actors run only when the owner
    /// calls [`run_one`](Self::run_one), on the calling thread. Everything
    /// that becomes ready goes to the global queue (nobody is a worker), in
    /// the order it happened; `run_one` moves it to the ready list and
    /// lets the caller choose. This is the deterministic simulation's
    /// scheduler; the normal paths are unchanged (with no workers, a wake-up
    /// finds no sleeper and returns).
    pub(crate) fn manual(
        budget: u32,
        tokio: tokio::runtime::Handle,
        crash_reports: CrashReports,
    ) -> Self {
        Scheduler {
            shared: Arc::new(Shared {
                injector: Injector::new(),
                stealers: Vec::new(),
                yielded_stealers: Vec::new(),
                next: Vec::new(),
                unparkers: Vec::new(),
                idle: Idle::new(0),
                steals: AtomicU64::new(0),
                shutdown: AtomicBool::new(false),
                budget: budget.max(1),
                crash_reports,
            }),
            threads: Mutex::new(Vec::new()),
            exits: Mutex::new(None),
            tokio,
            manual: Some(Mutex::new(Vec::new())),
            current: AtomicU64::new(0),
        }
    }

    /// How threads running this scheduler's actors report caught panics.
    pub(crate) fn crash_reports(&self) -> CrashReports {
        self.shared.crash_reports
    }

    /// What the worker threads are doing now (a manual scheduler has
    /// none).
    pub(crate) fn workers(&self) -> crate::runtime::observation::WorkerMetrics {
        let total = self.shared.stealers.len();
        let (searching, parked) = self.shared.idle.counts();
        // Read apart, a worker moving from searching to parked can be seen
        // in both: the three always add up to the workers.
        let parked = parked.min(total);
        let searching = searching.min(total - parked);
        crate::runtime::observation::WorkerMetrics {
            total,
            busy: total.saturating_sub(searching + parked),
            searching,
            parked,
            steals: self.shared.steals.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// On a manual scheduler, the actor whose turn is running on the
    /// caller's thread.
    pub(crate) fn current_actor(&self) -> Option<ActorId> {
        match self.current.load(Ordering::Relaxed) {
            0 => None,
            id => Some(ActorId(id)),
        }
    }

    /// On a manual scheduler: how many actors are ready to run (0 on a
    /// scheduler with workers).
    #[cfg(feature = "simulation")]
    pub(crate) fn ready_len(&self) -> usize {
        self.ready().map_or(0, |ready| ready.len())
    }

    /// On a manual scheduler: the ready list, with everything that became
    /// ready since the last look appended in the order it happened.
    fn ready(&self) -> Option<std::sync::MutexGuard<'_, Vec<Task>>> {
        let mut ready = self
            .manual
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while let Some(t) = steal_one(&self.shared.injector) {
            ready.push(t);
        }
        Some(ready)
    }

    /// On a manual scheduler: runs one turn of the ready actor `choose`
    /// picks. `choose(n)` gets the number of ready actors and returns the
    /// index to run (taken modulo `n`) and a message budget (at least 1).
    /// Ready actors are listed in the order they became ready. `None` when
    /// nothing is ready (or the scheduler is not manual).
    pub(crate) fn run_one(&self, choose: &mut dyn FnMut(usize) -> (usize, u32)) -> Option<TurnRun> {
        let task = {
            let mut ready = self.ready()?;
            if ready.is_empty() {
                return None;
            }
            let n = ready.len();
            let (index, budget) = choose(n);
            // `remove`, not `swap_remove`: the others keep their order, so a
            // choice sequence means the same thing on every run.
            (ready.remove(index % n), n, budget.max(1))
        };
        let (task, n, budget) = task;
        let actor = task.id();
        let _runtime = self.tokio.enter();
        let _crash_reports = crash_report::actor_thread(self.shared.crash_reports);
        self.current.store(actor.0, Ordering::Relaxed);
        // SAFETY: a task in the ready list carries its consumer role
        // (`Runnable`); with `Again` it still does and goes back in line.
        let turn = unsafe { task.run_turn(budget) };
        self.current.store(0, Ordering::Relaxed);
        if let Turn::Again(task) = turn {
            self.shared.injector.push(task);
        }
        Some(TurnRun {
            actor,
            ready: n,
            budget,
        })
    }

    /// Queues an actor to be run by a worker.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role and hands it over with
    /// the task: whoever takes the task out of a queue runs the actor.
    #[inline]
    pub(crate) unsafe fn schedule(&self, task: Task) {
        // SAFETY: the role goes with the task (contract).
        unsafe { self.shared.schedule(task) };
    }

    /// Whether an ask sent now may be handled on the sending thread as it
    /// is sent (`arrivals::may_handle_here`).
    #[inline]
    pub(crate) fn may_handle_here(&self) -> bool {
        arrivals::may_handle_here(&self.shared)
    }

    /// Runs an ask's handling on the sending thread as a turn run there
    /// (`arrivals::handle_here`).
    pub(crate) fn handle_here<R>(&self, handle: impl FnOnce() -> R) -> R {
        arrivals::handle_here(&self.shared, handle)
    }

    /// True on one of this scheduler's worker threads.
    pub(crate) fn is_worker_thread(&self) -> bool {
        let shared = Arc::as_ptr(&self.shared);
        CURRENT.with(|c| {
            let local = c.get();
            // SAFETY: a non-null pointer is the current worker's own local.
            (!local.is_null() && unsafe { (*local).shared } == shared)
                || arrivals::is_running_for(shared)
        })
    }

    /// Runs an actor on a thread of its own ([`SpawnOptions::blocking`]).
    ///
    /// [`SpawnOptions::blocking`]: crate::SpawnOptions::blocking
    ///
    /// # Safety
    /// The caller holds the actor's consumer role and gives it to the new
    /// thread (if one starts: on an error the caller still holds it). From
    /// then on, whoever wins the role hands it back by unparking `parker`
    /// (the cell's `dedicated` unparker), never by queueing the task.
    pub(crate) unsafe fn spawn_dedicated(
        &self,
        task: Arc<dyn Runnable>,
        parker: Parker,
    ) -> std::io::Result<()> {
        let tokio = self.tokio.clone();
        let crash_reports = self.shared.crash_reports;
        std::thread::Builder::new()
            .name("troubadour-blocking".into())
            .spawn(move || {
                let _runtime = tokio.enter();
                let _crash_reports = crash_report::actor_thread(crash_reports);
                // Each unpark hands the consumer role to this thread (see
                // `mailbox.rs`); the thread was created owning it.
                loop {
                    // SAFETY: this thread holds the role: it was created
                    // holding it, `Again` keeps it, and each unpark hands it
                    // back (the function's contract).
                    while unsafe { task.clone().run_turn_owned(u32::MAX) } {}
                    if task.is_finished() {
                        return;
                    }
                    parker.park();
                }
            })
            .map(|_| ())
    }

    /// Stops the workers after the queues are no longer needed.
    /// Stops the workers and waits for them until `give_up_at` (`None`: for
    /// as long as it takes). A worker still inside a handler then (a handler
    /// blocked in a system call, or looping) is left behind, detached: a
    /// thread cannot be stopped from outside, and a shutdown must keep its
    /// deadline. It ends by itself when the handler returns. Returns how
    /// many workers were left behind.
    pub(crate) fn shutdown(&self, give_up_at: Option<Instant>) -> usize {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for u in &self.shared.unparkers {
            u.unpark();
        }
        if self.is_worker_thread() {
            // Joining ourselves would deadlock; the workers exit on their own.
            return 0;
        }
        let exits = self.exits.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(exits), Some(until)) = (exits, give_up_at) {
            // Only disconnection ends this: no worker ever sends.
            while let Err(RecvTimeoutError::Timeout) =
                exits.recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                if Instant::now() >= until {
                    break;
                }
            }
        }
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let mut left_behind = 0;
        for h in handles {
            if give_up_at.is_none() || h.is_finished() {
                let _ = h.join();
            } else {
                left_behind += 1;
            }
        }
        // Whatever is still queued will never run; release it so actors'
        // memory (and the dead letters of their mailboxes) is reclaimed.
        while steal_one(&self.shared.injector).is_some() {}
        for slot in &self.shared.next {
            // Not the owners: a worker left behind may still be running.
            drop(slot.steal_once());
        }
        if let Some(manual) = &self.manual {
            manual.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        left_behind
    }
}

impl Shared {
    /// Inlined: the common case, a turn on one of this scheduler's workers
    /// waking an actor into the worker's empty slot, is a few loads and
    /// stores; the rest is out of line.
    ///
    /// # Safety
    /// As for [`Scheduler::schedule`].
    #[inline(always)]
    unsafe fn schedule(self: &Arc<Self>, task: Task) {
        let local = CURRENT.with(Cell::get);
        // SAFETY: a non-null pointer is the current worker's own local,
        // alive for the whole worker loop.
        if !local.is_null() && std::ptr::eq(unsafe { (*local).shared }, Arc::as_ptr(self)) {
            // SAFETY: as above.
            let local = unsafe { &*local };
            match self.next[local.me].put(task) {
                Ok(()) => self.wake_one(),
                Err(t) => self.push_local(local, t),
            }
        } else {
            // SAFETY: the role goes with the task (contract).
            unsafe { self.schedule_from_elsewhere(task) }
        }
    }

    /// [`schedule`](Self::schedule) on a worker whose slot is taken.
    #[inline(never)]
    fn push_local(&self, local: &WorkerLocal, task: Task) {
        local.deque.push(task);
        self.wake_one();
    }

    /// [`schedule`](Self::schedule) off this scheduler's workers.
    ///
    /// # Safety
    /// As for `schedule`.
    #[inline(never)]
    unsafe fn schedule_from_elsewhere(self: &Arc<Self>, task: Task) {
        // Off the workers, a thread delivering what it read from the
        // network may keep the actor to run itself (`arrivals.rs`).
        if let Some(t) = arrivals::keep(self, task) {
            self.injector.push(t);
            self.wake_one();
        }
    }

    #[inline(always)]
    fn wake_one(&self) {
        if let Some(i) = self.idle.worker_to_wake() {
            self.unparkers[i].unpark();
        }
    }

    /// This worker leaves the search with a task in hand: if it was the
    /// last searcher, work pushed while it searched may have skipped its
    /// wake-up, so a sleeper is woken for whatever is still queued
    /// (`idle.rs`, "No parallelism lost").
    #[inline]
    fn found_work(&self) {
        if self.idle.found_work() && self.has_work() {
            self.wake_one();
        }
    }

    fn has_work(&self) -> bool {
        !self.injector.is_empty()
            || self.stealers.iter().any(|s| !s.is_empty())
            || self.yielded_stealers.iter().any(|s| !s.is_empty())
            || self.next.iter().any(|s| s.is_full())
    }

    /// Another worker's next actor, for a worker that searched long enough.
    /// The first time since it last slept, the worker becomes a thief of
    /// every other slot (one `membarrier` for all), if any holds a task.
    fn steal_next(&self, local: &WorkerLocal) -> Option<Task> {
        let (me, n) = (local.me, self.next.len());
        let others = || (1..n).map(|k| &*self.next[(me + k) % n]);
        if !local.thieving.get() {
            if !others().any(|s| s.is_full()) {
                return None;
            }
            if !next_slot::become_thief(others()) {
                return None;
            }
            local.thieving.set(true);
        }
        // SAFETY: this worker is a thief of every slot but its own.
        let stolen = others().find_map(|s| unsafe { s.steal() });
        if stolen.is_some() {
            self.steals.fetch_add(1, Ordering::Relaxed);
        }
        stolen
    }

    /// Ends this worker's thieving of the other slots (`steal_next`), so
    /// their owners take without the exchange again.
    fn stop_thieving(&self, local: &WorkerLocal) {
        if local.thieving.replace(false) {
            let (me, n) = (local.me, self.next.len());
            next_slot::stop_thieving((1..n).map(|k| &*self.next[(me + k) % n]));
        }
    }

    /// The next task for this worker. Most turns end with the next actor
    /// in this worker's slot (the one the turn's last send woke), and that
    /// case is inlined into the worker's loop; every other source, in the
    /// order below, is out of line.
    #[inline(always)]
    fn find_task(&self, local: &WorkerLocal, tick: &mut u32, streak: &mut u32) -> Option<Task> {
        *tick = tick.wrapping_add(1);
        if *tick % GLOBAL_QUEUE_INTERVAL != 0 && *streak < SLOT_STREAK {
            if let Some(t) = self.next[local.me].take_own() {
                *streak += 1;
                return Some(t);
            }
        }
        self.find_task_anywhere(local, *tick, streak)
    }

    /// Where [`find_task`](Self::find_task) looks when the slot is not its
    /// answer: the global queue every `GLOBAL_QUEUE_INTERVAL` ticks, this
    /// worker's oldest task after `SLOT_STREAK` turns from the slot, the
    /// slot, the deque, the global queue, what yielded, then the others'
    /// deques.
    #[inline(never)]
    fn find_task_anywhere(&self, local: &WorkerLocal, tick: u32, streak: &mut u32) -> Option<Task> {
        let (me, deque) = (local.me, &local.deque);
        if tick % GLOBAL_QUEUE_INTERVAL == 0 {
            if let Some(t) = steal_one(&self.injector) {
                return Some(t);
            }
        }
        if *streak >= SLOT_STREAK {
            // The slot is always the newest: two actors waking each other
            // would otherwise keep everything in the deque waiting for ever.
            *streak = 0;
            if let Steal::Success(t) = self.stealers[me].steal() {
                return Some(t);
            }
        }
        if let Some(t) = self.next[me].take_own() {
            *streak += 1;
            return Some(t);
        }
        *streak = 0;
        if let Some(t) = deque.pop() {
            return Some(t);
        }
        if let Some(t) = steal_one(&self.injector) {
            return Some(t);
        }
        if let Some(t) = local.yielded.pop() {
            return Some(t);
        }
        let n = self.stealers.len();
        for k in 1..n {
            let victims = [
                &self.stealers[(me + k) % n],
                &self.yielded_stealers[(me + k) % n],
            ];
            for victim in victims {
                loop {
                    match victim.steal_batch_and_pop(deque) {
                        Steal::Success(t) => {
                            self.steals.fetch_add(1, Ordering::Relaxed);
                            return Some(t);
                        }
                        Steal::Retry => continue,
                        Steal::Empty => break,
                    }
                }
            }
        }
        None
    }
}

fn steal_one(injector: &Injector<Task>) -> Option<Task> {
    loop {
        match injector.steal() {
            Steal::Success(t) => return Some(t),
            Steal::Retry => continue,
            Steal::Empty => return None,
        }
    }
}

fn run_worker(
    shared: Arc<Shared>,
    me: usize,
    deque: Worker<Task>,
    yielded: Worker<Task>,
    parker: Parker,
    ready: std::sync::mpsc::Sender<()>,
) {
    let local = WorkerLocal {
        shared: Arc::as_ptr(&shared),
        me,
        deque,
        yielded,
        turn_end: Default::default(),
        thieving: Cell::new(false),
    };
    CURRENT.with(|c| c.set(&local as *const WorkerLocal));
    let _crash_reports = crash_report::actor_thread(shared.crash_reports);
    crate::primitives::nodes::batch_frees_on_this_thread();
    crate::primitives::nodes::prepare_this_thread();
    // The receiver may be gone (a scheduler that failed to start); the
    // worker then stops with the others.
    let _ = ready.send(());
    drop(ready);
    let mut tick = 0u32;
    // Turns in a row taken from the next-actor slot.
    let mut streak = 0u32;
    // Whether this worker was just unparked: it then looks for work as a
    // searcher, so that it wakes the next sleeper if it finds work and more
    // is queued (a waker wakes one worker per push it saw no searcher for;
    // the pushes it skipped are the searchers' to hand on, `idle.rs`).
    let mut woken = false;
    'outer: loop {
        if !woken {
            if let Some(task) = shared.find_task(&local, &mut tick, &mut streak) {
                // SAFETY: taken from a run queue: it carries its role.
                unsafe { run_task(&shared, &local, task) };
                continue;
            }
            // Frees batched by the turns run so far go to their slabs before
            // this worker waits, so an idle worker keeps no slab alive.
            crate::primitives::nodes::settle();
        }
        woken = false;
        // Search a little before sleeping: wake-ups that come soon (the
        // common case under load) then cost no system call.
        shared.idle.start_searching();
        for round in 0..SPIN_ROUNDS + YIELD_ROUNDS {
            if let Some(task) = shared.find_task(&local, &mut tick, &mut streak) {
                shared.found_work();
                // SAFETY: taken from a run queue: it carries its role.
                unsafe { run_task(&shared, &local, task) };
                continue 'outer;
            }
            if round >= SLOT_STEAL_ROUND {
                if let Some(task) = shared.steal_next(&local) {
                    shared.found_work();
                    // SAFETY: taken from a run queue: it carries its role.
                    unsafe { run_task(&shared, &local, task) };
                    continue 'outer;
                }
            }
            if shared.shutdown.load(Ordering::Relaxed) {
                break;
            }
            if round < SPIN_ROUNDS {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::yield_now();
            }
        }
        shared.idle.stop_searching();
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        // Nothing deferred outside a turn waits for this worker's sleep.
        local.turn_end.run();
        // Idle now: memory a drained backlog left goes back to the system.
        crate::primitives::nodes::purge_idle_slabs();
        shared.stop_thieving(&local);
        shared.idle.prepare_sleep(me);
        if shared.has_work() || shared.shutdown.load(Ordering::SeqCst) {
            shared.idle.cancel_sleep(me);
            // Work came while this worker stopped searching, and its wakers
            // may have skipped the unpark because it searched: it takes one
            // task and wakes a sleeper for the rest (`idle.rs`).
            if let Some(task) = shared.find_task(&local, &mut tick, &mut streak) {
                if shared.has_work() {
                    shared.wake_one();
                }
                // SAFETY: taken from a run queue: it carries its role.
                unsafe { run_task(&shared, &local, task) };
            }
            continue;
        }
        parker.park();
        // Awake: off the sleepers' list, if no waker took it off (`idle.rs`).
        shared.idle.woke(me);
        woken = true;
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
    }
    // Work deferred by the last turns (a connection's flush) still runs.
    local.turn_end.run();
    // The slot outlives this thread (it is shared); empty it as the deque
    // empties when it drops, so no actor is kept alive by a stopped worker.
    drop(shared.next[me].take_own());
    shared.stop_thieving(&local);
    CURRENT.with(|c| c.set(std::ptr::null()));
}

/// Runs one turn of `task` on this worker.
///
/// # Safety
/// The caller holds the task's consumer role (it took the task out of a
/// run queue); with `Again` the role goes back into this worker's queue.
#[inline(always)]
unsafe fn run_task(shared: &Shared, local: &WorkerLocal, task: Task) {
    // SAFETY: we hold the role (contract).
    let turn = unsafe { task.run_turn(shared.budget) };
    local.turn_end.run();
    if let Turn::Again(task) = turn {
        yielded(shared, local, task);
    }
}

/// A task out of budget with more to do: behind everything else this
/// worker has, but still on this worker. Out of line: `run_task` is
/// inlined into the worker's loop, and most turns end idle.
#[inline(never)]
fn yielded(shared: &Shared, local: &WorkerLocal, task: Task) {
    local.yielded.push(task);
    // This worker runs its slot, its deque and the global queue before
    // what yielded; if any has work, the yielded actor would wait behind
    // it (for as long as that turn takes), so a sleeper is woken to take
    // one or the other. Otherwise this worker takes it back next, on the
    // same core.
    if shared.next[local.me].is_full() || !local.deque.is_empty() || !shared.injector.is_empty() {
        shared.wake_one();
    }
}
