//! How a client of a shared store (PostgreSQL, SQLite) times other nodes'
//! leases without trusting any clock but its own monotonic one.
//!
//! No time is stored. A lease row holds a counter its node bumps on every
//! renewal; each store client notes, by its own monotonic clock, when it
//! first saw each counter value, and takes a lease for expired once its
//! value has not changed for the lease's time to live. A claim names the
//! stale value it saw, and succeeds only if the owner's counter still has
//! it: a renewal the claimant missed makes the claim fail. The owner's
//! own validity ([`LocalLease`](crate::LocalLease)) runs from the send
//! time of its last successful renewal, which committed before any
//! claimant could first see the new value, so every claimant's wait ends
//! after the owner has stopped, whatever any wall clock does.

use crate::lease::NodeKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each lease's counter as this client last saw it, and since when.
#[derive(Clone, Default)]
pub(crate) struct SeenRenewals {
    seen: Arc<Mutex<HashMap<NodeKey, (i64, Instant)>>>,
}

impl SeenRenewals {
    /// How long `node`'s lease has left by this client's clock, given its
    /// counter read `now`.
    pub(crate) fn observe(
        &self,
        node: &NodeKey,
        counter: i64,
        ttl: Duration,
        now: Instant,
    ) -> Duration {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let entry = seen.entry(node.clone()).or_insert((counter, now));
        if entry.0 != counter {
            *entry = (counter, now);
        }
        ttl.saturating_sub(now.saturating_duration_since(entry.1))
    }

    /// Whether this client has watched `node`'s counter at `counter` for
    /// its whole time to live: the lease is over, and a claim naming that
    /// counter may take the node's shards.
    pub(crate) fn expired_at(&self, node: &NodeKey, counter: i64, ttl: Duration) -> bool {
        let last = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .copied();
        match last {
            Some((c, _)) if c == counter => {
                self.observe(node, counter, ttl, Instant::now()).is_zero()
            }
            // A value this client has not watched yet: no time has run.
            _ => false,
        }
    }
}
