//! Which workers are searching for work and which are asleep, and the
//! protocol that never leaves work queued while every worker sleeps.
//!
//! A worker out of work searches for a while (`start_searching` ..
//! `stop_searching`), then `prepare_sleep`s: it registers as a sleeper and
//! issues a `SeqCst` fence, and only then re-checks every queue. If it
//! finds work it `cancel_sleep`s, else it parks. A producer makes its work
//! visible (a push), then asks [`Idle::worker_to_wake`], which issues a
//! `SeqCst` fence before reading the counts, and unparks the worker it
//! names.
//!
//! Proof sketch (no lost wake-up). Take a worker W that parks and a
//! producer P whose push W's re-check missed. W: register (RMW on
//! `num_sleeping`) ; fence F_w ; re-check (misses the push). P: push ;
//! fence F_p ; load the counts. The two fences are totally ordered in the
//! `SeqCst` order S. If F_p <S F_w, the push (sequenced before F_p) is
//! visible to W's re-check after F_w: contradiction. So F_w <S F_p, and P's
//! load after F_p sees W's registration: `num_sleeping > 0`. P then either
//! pops a sleeper and unparks it (the unpark token makes a later park
//! return at once), or sees `num_searching > 0`: some worker S is still
//! searching, and the same argument applied to S's decrement (an RMW before
//! its own registration fence) shows S re-checks after the push. A searcher
//! that finds work leaves the search before running it, and the `SeqCst`
//! order on `num_searching` means P's load that saw it searching precedes
//! its decrement. The loom model `idle_protocol_never_loses_a_wakeup`
//! explores these interleavings on this very code.
//!
//! No parallelism lost either. The argument above only says that S looks
//! at the queues after the push, not that S takes the pushed work: S may
//! find *other* work first and run it, for as long as that handler takes,
//! while the work P pushed waits with W asleep (two actors that each wait
//! for the other to run, on two workers, hung that way). So S keeps the
//! duty to wake a sleeper until it either sleeps or hands the duty on:
//!
//! - S finds work while searching: it leaves with [`Idle::found_work`]; if
//!   it was the last searcher, it issues a `SeqCst` fence, re-checks the
//!   queues and wakes a sleeper for what is left. It sees P's push: P's
//!   load that saw S searching reads before S's decrement (both `SeqCst`),
//!   so F_p precedes S's fence in S, and S's re-check after its fence sees
//!   the push. A searcher that is not the last leaves the duty to those
//!   still searching.
//! - S stops searching to sleep and its re-check finds work: it cancels the
//!   sleep, takes one task and, if work is still queued, wakes a sleeper
//!   (its registration fence already ordered P's push before the re-check).
//!
//! - A worker woken by a waker looks for work as a searcher (it is one of
//!   the workers a later push counts on), so when it finds some it hands
//!   the duty on by the first rule: a waker wakes one sleeper, for its own
//!   push, and work pushed while others searched is woken for in a chain.
//!   (Four workers and four actors told at once, one worker woken and the
//!   rest skipped for a searcher, left the fourth actor queued beside a
//!   sleeping worker before this; `tests/scheduling.rs`.)
//!
//! This is tokio's rule too (a woken worker searches, and the last searcher
//! to find work notifies a parked worker). The loom model
//! `idle_protocol_wakes_a_sleeper_for_work_left_behind` checks both cases:
//! two workers, two tasks, and a worker that takes a task never comes back.
//!
//! One fence fewer per wake-up check. Every scheduled actor asks
//! [`Idle::worker_to_wake`], and its `SeqCst` fence was a tenth of a ring
//! hop (decision 0041); sleeping is rare by comparison. Where the process
//! can issue a barrier on all its threads at once (`process_barrier`), a
//! sleeper does that instead of its fence, and a producer first reads
//! `num_sleeping` after only a compiler fence: if it reads 0 it is done,
//! otherwise it goes on with the fence and the checks above. Reading 0
//! cannot lose a wake-up: by the argument in `process_barrier.rs`, either
//! the producer's push is visible to the re-check of any worker that
//! registered, or its read saw that registration. Searchers are not
//! involved: a producer that reads 0 sleepers wakes no one whatever it
//! would read of the searchers, and a worker that was awake then and goes
//! to sleep later re-checks after its own barrier. Where that barrier is
//! not available (off Linux, under loom and Miri) both sides fence, as the
//! loom models check.
//!
//! A worker also takes itself off the sleepers' list whenever its park
//! returns ([`Idle::woke`]): a park can return on an unpark token left from
//! a wake-up the worker had cancelled, and the entry it registered since
//! would otherwise stay, so a waker could pick it, awake, over a worker
//! that sleeps.

use crate::primitives::process_barrier;
use crate::primitives::sync::{fence, AtomicUsize, Mutex, Ordering};
use std::sync::atomic::{compiler_fence, AtomicBool};

pub struct Idle {
    /// Indices of the workers that are (about to be) parked.
    sleepers: Mutex<Vec<usize>>,
    num_sleeping: AtomicUsize,
    num_searching: AtomicUsize,
    /// Sleepers register with a barrier on every thread of the process,
    /// so producers skip their fence when nobody sleeps (see above).
    /// Cleared for good if the kernel ever refuses that barrier.
    asymmetric: AtomicBool,
}

impl Idle {
    pub fn new(workers: usize) -> Self {
        Idle {
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            num_sleeping: AtomicUsize::new(0),
            num_searching: AtomicUsize::new(0),
            asymmetric: AtomicBool::new(process_barrier::available()),
        }
    }

    /// The sleeper's side of the handshake: a barrier on every thread where
    /// producers skip their fence, and always this thread's own fence (the
    /// one the fallback needs; after the barrier it costs next to nothing).
    fn sleeper_barrier(&self) {
        if self.asymmetric.load(Ordering::Relaxed) && !process_barrier::heavy() {
            // Refused after registering, which the kernel documents no case
            // of: fences on both sides from now on. A send that read the
            // flag just before this store may still skip its check once.
            self.asymmetric.store(false, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    fn sleepers(&self) -> crate::primitives::sync::MutexGuard<'_, Vec<usize>> {
        self.sleepers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Workers searching and workers (about to be) parked, for observers.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.num_searching.load(Ordering::Relaxed),
            self.num_sleeping.load(Ordering::Relaxed),
        )
    }

    /// A worker begins searching: wakers need not unpark anyone meanwhile.
    pub fn start_searching(&self) {
        self.num_searching.fetch_add(1, Ordering::SeqCst);
    }

    /// The worker stopped searching because it found work. `true` if it was
    /// the last searcher: the caller must then re-check the queues (a fence
    /// was issued) and wake a sleeper ([`worker_to_wake`](Self::worker_to_wake))
    /// if work is left, since wakers skipped the unpark while it searched.
    pub fn found_work(&self) -> bool {
        let last = self.num_searching.fetch_sub(1, Ordering::SeqCst) == 1;
        if last {
            fence(Ordering::SeqCst);
        }
        last
    }

    /// The worker stopped searching and will sleep: it re-checks after
    /// [`prepare_sleep`](Self::prepare_sleep).
    pub fn stop_searching(&self) {
        self.num_searching.fetch_sub(1, Ordering::SeqCst);
    }

    /// Registers worker `me` as a sleeper. The caller must then re-check
    /// every queue, and either [`cancel_sleep`](Self::cancel_sleep) (work
    /// found) or park.
    pub fn prepare_sleep(&self, me: usize) {
        {
            let mut sleepers = self.sleepers();
            sleepers.push(me);
            self.num_sleeping.fetch_add(1, Ordering::SeqCst);
        }
        self.sleeper_barrier();
    }

    /// Worker `me` found work after registering: it will not park.
    pub fn cancel_sleep(&self, me: usize) {
        let mut sleepers = self.sleepers();
        if let Some(pos) = sleepers.iter().position(|&i| i == me) {
            sleepers.swap_remove(pos);
            self.num_sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        // Otherwise a waker already took `me` off the list, and its unpark
        // token makes the next park return at once: harmless.
    }

    /// Worker `me`'s park returned. Usually a waker took it off the list
    /// before unparking it, but a park also returns on an unpark token left
    /// from a wake-up the worker had cancelled (see above), or spuriously;
    /// its entry then stays, and a waker would later pick this worker, awake
    /// and perhaps in a long turn, instead of one that sleeps (with two
    /// workers, the other then sleeps beside queued work). So every worker
    /// takes itself off the list when it wakes.
    pub fn woke(&self, me: usize) {
        self.cancel_sleep(me);
    }

    /// Called after new work became visible: the sleeping worker to unpark,
    /// if no worker is searching and one sleeps. Taken off the list, so two
    /// wakers wake two workers.
    ///
    /// Inlined into every send that schedules an actor: while no worker
    /// sleeps (a busy system) the answer is two loads; the rest is out of
    /// line.
    #[inline(always)]
    pub fn worker_to_wake(&self) -> Option<usize> {
        if self.asymmetric.load(Ordering::Relaxed) {
            // The push stays before this read in the program; the
            // sleepers' barrier orders it in the hardware (see above).
            compiler_fence(Ordering::SeqCst);
            if self.num_sleeping.load(Ordering::Relaxed) == 0 {
                return None;
            }
        }
        self.sleeper_to_wake()
    }

    /// [`worker_to_wake`](Self::worker_to_wake) once a worker may sleep
    /// (or off Linux, where every waker fences).
    #[inline(never)]
    fn sleeper_to_wake(&self) -> Option<usize> {
        fence(Ordering::SeqCst);
        if self.num_searching.load(Ordering::SeqCst) != 0
            || self.num_sleeping.load(Ordering::SeqCst) == 0
        {
            return None;
        }
        let mut sleepers = self.sleepers();
        let index = sleepers.pop();
        if index.is_some() {
            self.num_sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        index
    }
}
