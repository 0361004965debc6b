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
//! * Anyone takes with one `compare_exchange(FULL -> TAKING)`: exactly one
//!   taker wins a given `FULL`; the `Acquire` makes the owner's write
//!   visible. The winner moves `task` out, then stores `EMPTY` with
//!   `Release`. While `TAKING` nobody else touches `task`: other takers lose
//!   the exchange, and the owner, seeing not-`EMPTY`, puts elsewhere.
//!
//! `tests/loom_mailbox.rs` models an owner and a thief racing.

use crate::primitives::sync::{AtomicU8, Ordering, UnsafeCell};

const EMPTY: u8 = 0;
const FULL: u8 = 1;
const TAKING: u8 = 2;

/// One worker's slot for the actor it runs next. Each worker writes its own
/// slot on every turn, so slots must not share a cache line: the scheduler
/// keeps them `CachePadded` (side by side, `perf` put two thirds of
/// skynet's `find_task` samples on the slot's state load).
pub struct NextSlot<T> {
    state: AtomicU8,
    task: UnsafeCell<Option<T>>,
}

// SAFETY: `task` is only accessed by the one thread the state protocol above
// gives it to, and `T` moves between threads with it.
unsafe impl<T: Send> Sync for NextSlot<T> {}
// SAFETY: as for `Sync`.
unsafe impl<T: Send> Send for NextSlot<T> {}

impl<T> NextSlot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        NextSlot {
            state: AtomicU8::new(EMPTY),
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

    /// Takes the task, if there is one and no one else is taking it.
    #[inline]
    pub fn take(&self) -> Option<T> {
        if self.state.load(Ordering::Relaxed) != FULL
            || self
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
        assert_eq!(slot.take(), None::<u32>);
        assert_eq!(slot.put(1), Ok(()));
        assert!(slot.is_full());
        assert_eq!(slot.put(2), Err(2));
        assert_eq!(slot.take(), Some(1));
        assert_eq!(slot.take(), None);
        assert_eq!(slot.put(3), Ok(()));
        assert_eq!(slot.take(), Some(3));
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
                    while !done.load(Ordering::Acquire) || slot.is_full() {
                        if let Some(v) = slot.take() {
                            taken.fetch_add(1, Ordering::Relaxed);
                            sum.fetch_add(v, Ordering::Relaxed);
                        }
                        std::hint::spin_loop();
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
                if let Some(w) = slot.take() {
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
        if let Some(w) = slot.take() {
            mine += 1;
            sum.fetch_add(w, Ordering::Relaxed);
        }
        assert_eq!(taken.load(Ordering::Relaxed) + mine, N);
        assert_eq!(sum.load(Ordering::Relaxed), N * (N + 1) / 2);
    }
}
