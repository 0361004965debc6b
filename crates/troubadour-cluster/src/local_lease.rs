//! A node's own view of its lease: valid until when, by its monotonic
//! clock. This is the node's half of the ownership argument in
//! [`lease`](crate::lease): a node hosts shards only while
//! [`LocalLease::is_valid`], and the store never gives them away before
//! that has turned false.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::Deadline;

/// A node's lease by its own clock: valid until when, by its monotonic
/// clock. This is the node's half of the ownership argument in
/// [`lease`](crate::lease): a node hosts shards only while
/// [`is_valid`](Self::is_valid), and the store never gives them away
/// before that has turned false.
///
/// ```
/// use std::time::{Duration, Instant};
/// use troubadour_cluster::{LocalLease, Renewal};
///
/// let mut lease = LocalLease::new(Duration::from_secs(10), Duration::from_secs(1))?;
/// let sent = Instant::now();
/// // ... the store accepted the renewal sent at `sent` ...
/// assert_eq!(lease.renewed(sent, sent), Renewal::Started);
/// assert!(lease.is_valid(sent + Duration::from_secs(8)));
/// // The store counts 10 s from when it received the renewal; the node
/// // stops a second before 10 s from when it sent it.
/// assert!(!lease.is_valid(sent + Duration::from_secs(9)));
/// # Ok::<(), troubadour_cluster::LeaseConfigError>(())
/// ```
#[derive(Debug)]
pub struct LocalLease {
    ttl: Duration,
    margin: Duration,
    valid_until: Option<Instant>,
    /// `valid_until` as the node's entities read it, before each message
    /// ([`deadline`](Self::deadline)).
    ends: Arc<Deadline>,
}

/// What a renewal did to the node's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease was valid all along and now lasts longer: shards held
    /// stay held.
    Extended,
    /// The lease had run out (or never was) before this renewal's answer:
    /// other nodes may have claimed this node's shards meanwhile, so
    /// nothing held before counts; shards must be claimed again.
    Started,
}

impl LocalLease {
    /// A lease of `ttl`, of which the node gives up `margin` at the end.
    /// The margin covers the node's clock running faster than the
    /// store's: a tenth of the time to live covers any working clock.
    pub fn new(ttl: Duration, margin: Duration) -> Result<LocalLease, LeaseConfigError> {
        if ttl.is_zero() || margin >= ttl {
            return Err(LeaseConfigError { ttl, margin });
        }
        let ends = Arc::new(Deadline::new(Instant::now()));
        ends.expire();
        Ok(LocalLease {
            ttl,
            margin,
            valid_until: None,
            ends,
        })
    }

    /// The lease's time to live, as asked of the store.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often to renew: every third of the time to live, so two
    /// renewals in a row can fail before the lease runs out.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// The store accepted a renewal this node sent at `sent_at`; `now` is
    /// when the answer came. The lease is valid until `sent_at + ttl -
    /// margin` (the store counts from later, when it received it).
    pub fn renewed(&mut self, sent_at: Instant, now: Instant) -> Renewal {
        let was_valid = self.is_valid(now);
        let until = sent_at + (self.ttl - self.margin);
        let until = self.valid_until.map_or(until, |u| u.max(until));
        self.valid_until = Some(until);
        self.ends.set(until);
        if was_valid {
            Renewal::Extended
        } else {
            Renewal::Started
        }
    }

    /// The store said this node has no lease (it expired there, or the
    /// node left): invalid from now on.
    pub fn lost(&mut self) {
        self.valid_until = None;
        self.ends.expire();
    }

    /// Whether the node may host shards at `now`.
    pub fn is_valid(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|u| now < u)
    }

    /// Until when the lease is valid, if it was ever granted.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// The lease's end as a [`Deadline`] that follows every renewal and
    /// loss: actors spawned with it
    /// ([`SpawnOptions::deadline`](troubadour::SpawnOptions::deadline))
    /// handle nothing past it, however late the code watching the lease.
    pub fn deadline(&self) -> &Arc<Deadline> {
        &self.ends
    }
}

/// A lease whose margin is not below its time to live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfigError {
    ttl: Duration,
    margin: Duration,
}

impl fmt::Display for LeaseConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a lease of {:?} with a safety margin of {:?} is never valid: \
             give the lease a time to live above its margin (for example 10 s with 1 s)",
            self.ttl, self.margin
        )
    }
}

impl std::error::Error for LeaseConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn valid_from_the_first_renewal_to_its_send_time_plus_ttl_less_the_margin() {
        let t0 = Instant::now();
        let mut lease = LocalLease::new(10 * S, S).unwrap();
        assert!(!lease.is_valid(t0), "no lease before the first renewal");
        // Sent at t0, answered 2 s later: counted from t0.
        assert_eq!(lease.renewed(t0, t0 + 2 * S), Renewal::Started);
        assert!(lease.is_valid(t0 + 2 * S));
        assert!(lease.is_valid(t0 + 9 * S - Duration::from_nanos(1)));
        assert!(!lease.is_valid(t0 + 9 * S));
    }

    #[test]
    fn a_renewal_answered_after_the_lease_ran_out_starts_a_new_one() {
        let t0 = Instant::now();
        let mut lease = LocalLease::new(10 * S, S).unwrap();
        lease.renewed(t0, t0);
        // Sent in time, answered too late: the lease lapsed in between.
        assert_eq!(lease.renewed(t0 + 8 * S, t0 + 9 * S), Renewal::Started);
        // Sent and answered in time.
        assert_eq!(lease.renewed(t0 + 11 * S, t0 + 12 * S), Renewal::Extended);
        assert!(lease.is_valid(t0 + 19 * S));
    }

    #[test]
    fn an_older_answer_arriving_late_never_shortens_the_lease() {
        let t0 = Instant::now();
        let mut lease = LocalLease::new(10 * S, S).unwrap();
        lease.renewed(t0 + 3 * S, t0 + 3 * S);
        assert_eq!(lease.renewed(t0, t0 + 4 * S), Renewal::Extended);
        assert_eq!(lease.valid_until(), Some(t0 + 12 * S));
    }

    #[test]
    fn a_lost_lease_is_invalid_at_once() {
        let t0 = Instant::now();
        let mut lease = LocalLease::new(10 * S, S).unwrap();
        lease.renewed(t0, t0);
        lease.lost();
        assert!(!lease.is_valid(t0));
    }

    #[test]
    fn a_margin_not_below_the_ttl_is_refused_with_what_to_do() {
        let e = LocalLease::new(S, S).unwrap_err();
        assert!(
            e.to_string().contains("time to live above its margin"),
            "{e}"
        );
        assert!(LocalLease::new(Duration::ZERO, Duration::ZERO).is_err());
    }
}
