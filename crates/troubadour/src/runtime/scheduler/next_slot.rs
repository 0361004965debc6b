//! The actor a worker runs next: the one its running turn woke.
//!
//! When a turn sends to an idle actor, that actor goes here rather than to
//! the worker's deque. The worker runs it as soon as the turn ends, on the
//! same core, while the message it was woken by is still in this core's
//! cache. Other workers may take it too, but only after they have searched
//! in vain for a while (`scheduler.rs`): a thief that took it at once would
//! start reading the mailbox while the sender is still writing it, and every
//! message would then move a cache line between the cores. The delay is
//! bounded by the thief's search, a few microseconds, so an actor woken by a
//! long turn still runs soon.
//!
//! # Invariants
//!
//! `state` is `EMPTY`, `FULL` or `TAKING`, and `task` is `Some` exactly in
//! `FULL` (and during the transitions below, which each have one owner).
//!
//! * Only the owning worker puts, and only from `EMPTY` (observed with
//!   `Acquire`, so the previous taker's read of `task` happened before the
//!   owner's write). It writes `task`, then publishes `FULL` with `Release`.
//!   Only the owner ever writes `FULL`.
//! * A thief takes with one `compare_exchange(FULL -> TAKING)`: exactly one
//!   taker wins a given `FULL`; the `Acquire` makes the owner's write
//!   visible. The winner moves `task` out, then stores `EMPTY` with
//!   `Release`. While `TAKING` nobody else touches `task`: other takers lose
//!   the exchange, and the owner, seeing not-`EMPTY`, puts elsewhere.
//!
//! # The owner takes without a read-modify-write
//!
//! The owner takes its slot after nearly every turn, thieves rarely, so the
//! exchange is the thieves' alone (it was a sixth of a ring hop's samples,
//! decision 0051). The two sides meet as in Dekker's algorithm:
//!
//! * The owner stores `owner_taking`, then reads `thieves`. Seeing none, it
//!   reads `state` again and, if `FULL`, moves `task` out and stores `EMPTY`
//!   with plain stores. Seeing a thief, it takes with the exchange like one
//!   (exactly one of them wins).
//! * A worker becomes a thief of the other slots ([`become_thief`]) by
//!   counting itself in their `thieves` and then passing one barrier; from
//!   then on, until it stops ([`stop_thieving`], before it sleeps), each
//!   steal reads `owner_taking` and takes with the exchange only if the
//!   owner is not taking. The barrier is paid once per thieving worker and
//!   sleep, not per steal: a receiver stolen from a long turn's slot again
//!   and again (one sender flooding it) would otherwise cost one per
//!   wake-up.
//!
//! Each side writes its mark and then reads the other's, so with a full
//! barrier between on both sides at least one sees the other's: an owner
//! take that begins after a thief's barrier sees it counted and uses the
//! exchange; one that began before is seen taking (or, if over, its
//! `EMPTY` is seen, below) by every steal after the barrier. The thief's
//! barrier is `membarrier` (`process_barrier.rs`), which puts one on the
//! owner's CPU too, so the owner needs only a compiler fence; where that is
//! not available (off Linux, under loom and Miri) both sides use `SeqCst`
//! fences. A worker whose `membarrier` fails does not become a thief. Each
//! side reads the other's mark with `Acquire`, and clears its own with
//! `Release` after its last write to `state`: a side that reads the mark
//! already cleared also sees the other's `EMPTY`, so it cannot take the
//! same task from a stale `FULL`. The loom model fails without either
//! fence or with those reads `Relaxed`.
//!
//! `tests/loom_mailbox.rs` models an owner and a thief racing.

use crate::primitives::process_barrier;
use crate::primitives::sync::{fence, AtomicBool, AtomicU32, AtomicU8, Ordering, UnsafeCell};
use std::sync::atomic::compiler_fence;

const EMPTY: u8 = 0;
const FULL: u8 = 1;
const TAKING: u8 = 2;

/// One worker's slot for the actor it runs next. Each worker writes its own
/// slot on every turn, so slots must not share a cache line: the scheduler
/// keeps them `CachePadded` (side by side, `perf` put two thirds of
/// skynet's `find_task` samples on the slot's state load).
pub struct NextSlot<T> {
    state: AtomicU8,
    /// The owner is taking without the exchange (see above).
    owner_taking: AtomicBool,
    /// How many workers are thieves of this slot (see above).
    thieves: AtomicU32,
    /// Whether thieves use `membarrier`, so the owner needs no fence. Fixed
    /// for the process: both sides must agree for the slot's whole life.
    asymmetric: bool,
    task: UnsafeCell<Option<T>>,
}

// SAFETY: `task` is only accessed by the one thread the state protocol above
// gives it to, and `T` moves between threads with it.
unsafe impl<T: Send> Sync for NextSlot<T> {}
// SAFETY: as for `Sync`.
unsafe impl<T: Send> Send for NextSlot<T> {}

/// Makes the caller a thief of `slots` (none of them its own): counted in
/// each, then one barrier for all. `false` if the barrier failed; the
/// caller is then a thief of none.
pub fn become_thief<'a, T: 'a>(slots: impl Iterator<Item = &'a NextSlot<T>> + Clone) -> bool {
    for slot in slots.clone() {
        slot.thieves.fetch_add(1, Ordering::SeqCst);
    }
    let ordered = if process_barrier::available() {
        process_barrier::heavy()
    } else {
        fence(Ordering::SeqCst);
        true
    };
    if !ordered {
        stop_thieving(slots);
    }
    ordered
}

/// Ends what [`become_thief`] began, for the same `slots`.
pub fn stop_thieving<'a, T: 'a>(slots: impl Iterator<Item = &'a NextSlot<T>>) {
    for slot in slots {
        slot.thieves.fetch_sub(1, Ordering::Release);
    }
}

impl<T> NextSlot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        NextSlot {
            state: AtomicU8::new(EMPTY),
            owner_taking: AtomicBool::new(false),
            thieves: AtomicU32::new(0),
            asymmetric: process_barrier::available(),
            task: UnsafeCell::new(None),
        }
    }

    /// Puts `task` in the slot if it is empty; otherwise hands it back.
    /// Only the owning worker may call this.
    #[inline]
    pub fn put(&self, task: T) -> Result<(), T> {
        if self.state.load(Ordering::Acquire) != EMPTY {
            return Err(task);
        }
        // SAFETY: EMPTY, and only the owner (us) leaves EMPTY, so nobody
        // else accesses `task` now.
        self.task.with_mut(|t| unsafe { *t = Some(task) });
        self.state.store(FULL, Ordering::Release);
        Ok(())
    }

    /// Takes the task, if there is one. Only the owning worker may call
    /// this; with no thief about it writes no atomic read-modify-write.
    #[inline]
    pub fn take_own(&self) -> Option<T> {
        // Only the owner writes `FULL`: anything else means empty, or being
        // (or already) stolen.
        if self.state.load(Ordering::Relaxed) != FULL {
            return None;
        }
        self.owner_taking.store(true, Ordering::Relaxed);
        if self.asymmetric {
            // The thieves' `membarrier` orders this side (see above).
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        // `Acquire`: a thief that stopped already published its `EMPTY`.
        let task = if self.thieves.load(Ordering::Acquire) != 0 {
            // A thief may be taking: race it with the exchange.
            self.owner_taking.store(false, Ordering::Relaxed);
            return self.exchange_take();
        } else if self.state.load(Ordering::Acquire) == FULL {
            // No thief can take it now (see above): ours alone.
            // SAFETY: FULL, and no thief takes while `owner_taking`.
            let task = self.task.with_mut(|t| unsafe { (*t).take() });
            self.state.store(EMPTY, Ordering::Release);
            task
        } else {
            // Stolen before we announced ourselves.
            None
        };
        self.owner_taking.store(false, Ordering::Release);
        task
    }

    /// Takes the task for a thief, unless the owner is taking it.
    ///
    /// # Safety
    /// The caller is a thief of this slot: [`become_thief`] returned `true`
    /// for it, and it has not called [`stop_thieving`] since.
    pub unsafe fn steal(&self) -> Option<T> {
        // `Acquire`: an owner that is done already published its `EMPTY`.
        if self.state.load(Ordering::Relaxed) != FULL || self.owner_taking.load(Ordering::Acquire) {
            return None;
        }
        self.exchange_take()
    }

    /// Takes the task for a thread that is no thief of this slot (the
    /// scheduler's shutdown, which may find a worker left behind still
    /// running): a thief for this one steal. Costs a `membarrier`.
    pub fn steal_once(&self) -> Option<T> {
        if !become_thief(std::iter::once(self)) {
            return None;
        }
        // SAFETY: a thief of this slot until the next line.
        let stolen = unsafe { self.steal() };
        stop_thieving(std::iter::once(self));
        stolen
    }

    /// The exchange `FULL -> TAKING`, then the task (invariants).
    #[inline]
    fn exchange_take(&self) -> Option<T> {
        if self
            .state
            .compare_exchange(FULL, TAKING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: winning FULL -> TAKING gives us `task` alone until EMPTY.
        let task = self.task.with_mut(|t| unsafe { (*t).take() });
        self.state.store(EMPTY, Ordering::Release);
        task
    }

    /// True if a task is waiting (a hint: it may be taken at any moment).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.state.load(Ordering::Relaxed) == FULL
    }
}

impl<T> Default for NextSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn put_take_and_full_slot_hands_back() {
        let slot = NextSlot::new();
        assert!(!slot.is_full());
        assert_eq!(slot.take_own(), None::<u32>);
        assert_eq!(slot.steal_once(), None::<u32>);
        assert_eq!(slot.put(1), Ok(()));
        assert!(slot.is_full());
        assert_eq!(slot.put(2), Err(2));
        assert_eq!(slot.take_own(), Some(1));
        assert_eq!(slot.take_own(), None);
        assert_eq!(slot.put(3), Ok(()));
        assert_eq!(
            slot.steal_once(),
            Some(3),
            "a thief takes it when the owner does not"
        );
        assert_eq!(slot.steal_once(), None);
    }

    /// An owner putting (and sometimes taking back) against three thieves:
    /// every task is taken exactly once. Run under `--release` too.
    #[test]
    fn stress_owner_and_thieves() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::sync::Arc;
        const N: usize = if cfg!(miri) { 200 } else { 200_000 };
        let slot = Arc::new(NextSlot::new());
        let taken = Arc::new(AtomicUsize::new(0));
        let sum = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let thieves: Vec<_> = (0..3)
            .map(|_| {
                let (slot, taken, sum, done) =
                    (slot.clone(), taken.clone(), sum.clone(), done.clone());
                std::thread::spawn(move || {
                    // Thieves for a few attempts at a time, as a worker is
                    // from a search until it sleeps; in between, the owner
                    // takes without the exchange.
                    let me = || std::iter::once(&*slot);
                    while !done.load(Ordering::Acquire) || slot.is_full() {
                        assert!(become_thief(me()));
                        for _ in 0..8 {
                            // SAFETY: a thief of this slot (above).
                            if let Some(v) = unsafe { slot.steal() } {
                                taken.fetch_add(1, Ordering::Relaxed);
                                sum.fetch_add(v, Ordering::Relaxed);
                            }
                            std::hint::spin_loop();
                        }
                        stop_thieving(me());
                        for _ in 0..64 {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut mine = 0;
        for v in 1..=N {
            let mut v = v;
            // Full: the owner takes it back itself sometimes, as a worker
            // does after its turn.
            while let Err(back) = slot.put(v) {
                if let Some(w) = slot.take_own() {
                    mine += 1;
                    sum.fetch_add(w, Ordering::Relaxed);
                }
                v = back;
            }
        }
        done.store(true, Ordering::Release);
        for t in thieves {
            t.join().unwrap();
        }
        if let Some(w) = slot.take_own() {
            mine += 1;
            sum.fetch_add(w, Ordering::Relaxed);
        }
        assert_eq!(taken.load(Ordering::Relaxed) + mine, N);
        assert_eq!(sum.load(Ordering::Relaxed), N * (N + 1) / 2);
    }
}
