//! A deadline many actors share: each stops at its first turn after the
//! deadline has passed, before it handles another message.
//!
//! For extension crates that grant actors a time-limited right to run. A
//! cluster node hosts entities only while its lease is valid by its own
//! clock: when the lease ends, every entity must stop before the lease
//! store lets another node start them again. The code that watches the
//! lease is an actor too, and may be late (a backlog in its mailbox, a
//! process paused and resumed: then every actor is ready at once, in any
//! order). With the deadline checked at every turn of every entity, none
//! handles a message past it, however late the watcher is.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

/// A moment after which actors spawned with it
/// ([`SpawnOptions::deadline`](crate::SpawnOptions::deadline)) handle no
/// more messages: each stops at its next turn, before its next message
/// (which goes to dead letters, its `ask` failing, as for any actor that
/// stopped with messages queued). The deadline can be moved either way at
/// any time, by any thread: an actor checks it, against its system's clock
/// ([`Context::now`](crate::Context::now), virtual in a simulation), before
/// every message.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use troubadour::Deadline;
///
/// let now = Instant::now();
/// let lease = Arc::new(Deadline::new(now + Duration::from_secs(10)));
/// assert!(lease.admits(now));
/// lease.set(now + Duration::from_secs(20)); // renewed
/// assert!(lease.admits(now + Duration::from_secs(15)));
/// lease.expire(); // lost
/// assert!(!lease.admits(now));
/// ```
#[derive(Debug)]
pub struct Deadline {
    /// Every instant is kept as signed nanoseconds from this one, so one
    /// atomic holds it.
    base: Instant,
    /// The deadline, in nanoseconds from `base`; `i64::MIN` once expired.
    at: AtomicI64,
}

impl Deadline {
    /// A deadline at `at`.
    pub fn new(at: Instant) -> Deadline {
        Deadline {
            base: at,
            at: AtomicI64::new(0),
        }
    }

    /// Moves the deadline to `at` (later or earlier).
    pub fn set(&self, at: Instant) {
        self.at.store(self.offset(at), Ordering::Release);
    }

    /// Makes the deadline one that has passed, whatever the clock says.
    pub fn expire(&self) {
        self.at.store(i64::MIN, Ordering::Release);
    }

    /// Whether an actor may still handle a message at `now`: strictly
    /// before the deadline.
    #[inline]
    pub fn admits(&self, now: Instant) -> bool {
        let at = self.at.load(Ordering::Acquire);
        at != i64::MIN && self.offset(now) < at
    }

    /// `t` in nanoseconds from `base`, saturating (±292 years).
    fn offset(&self, t: Instant) -> i64 {
        match t.checked_duration_since(self.base) {
            Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            None => {
                i64::try_from(self.base.duration_since(t).as_nanos()).map_or(i64::MIN + 1, |n| -n)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn admits_strictly_before_the_deadline_wherever_it_moves() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let d = Deadline::new(t0);
        assert!(d.admits(t0 - Duration::from_secs(50)));
        assert!(d.admits(t0 - Duration::from_nanos(1)));
        assert!(!d.admits(t0));
        assert!(!d.admits(t0 + Duration::from_secs(1)));
        // Moved earlier than the instant it was made with.
        d.set(t0 - Duration::from_secs(10));
        assert!(d.admits(t0 - Duration::from_secs(11)));
        assert!(!d.admits(t0 - Duration::from_secs(10)));
        d.set(t0 + Duration::from_secs(10));
        assert!(d.admits(t0 + Duration::from_secs(9)));
        d.expire();
        assert!(!d.admits(t0 - Duration::from_secs(99)));
        d.set(t0 + Duration::from_secs(1));
        assert!(d.admits(t0), "a deadline set again after expiring admits");
    }
}
