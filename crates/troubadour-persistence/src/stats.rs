//! What a store's writer did, for metrics exporters
//! (`troubadour_observe::Observer::with_store`): events written, group
//! commits and their sizes, how long a write waited to be durable.
//!
//! Counted by the writer (one thread or task per store) once per
//! transaction, and by each write's future once when it is answered:
//! nothing per event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the write-latency buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
];
/// Upper bounds of the batch-size buckets, in writes per transaction.
pub const BATCH_BUCKETS: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A histogram with fixed buckets (Prometheus' cumulative form is made
/// when it is read).
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    bounds: &'static [f64; N],
    /// Per bucket, not cumulative; the last slot is past every bound.
    counts: [AtomicU64; N],
    over: AtomicU64,
    /// The sum of what was recorded, in millionths (of seconds or writes).
    sum_micros: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    const fn new(bounds: &'static [f64; N]) -> Self {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            over: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn record(&self, value: f64) {
        match self.bounds.iter().position(|b| value <= *b) {
            Some(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            None => self.over.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_micros
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    /// `(upper bound, cumulative count)` per bucket, ending with
    /// `(+Inf, count)`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        let mut out: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| {
                total += c.load(Ordering::Relaxed);
                (*b, total)
            })
            .collect();
        out.push((f64::INFINITY, total + self.over.load(Ordering::Relaxed)));
        out
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.cumulative().last().map_or(0, |(_, n)| *n)
    }

    /// Their sum.
    pub fn sum(&self) -> f64 {
        self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// One store's counters. [`SqliteStore::stats`](crate::SqliteStore::stats)
/// and [`PostgresStore::stats`](crate::PostgresStore::stats) hand them out.
#[derive(Debug)]
pub struct StoreStats {
    /// Which store (`sqlite`, `postgres`), for a label.
    pub store: &'static str,
    /// Events appended by committed transactions.
    pub events: AtomicU64,
    /// Transactions committed (each a group commit of one or more writes).
    pub commits: AtomicU64,
    /// Transactions that failed (their writes were answered with the
    /// error).
    pub failed_commits: AtomicU64,
    /// Writes refused by the journal's rules (a stale epoch, a sequence
    /// conflict), the rest of their batch standing.
    pub refused: AtomicU64,
    /// Writes per committed transaction.
    pub batch_sizes: Histogram<11>,
    /// From a write's call to its answer (durable, refused or failed),
    /// in seconds: what `persist` waits.
    pub write_seconds: Histogram<12>,
}

impl StoreStats {
    pub(crate) fn new(store: &'static str) -> Self {
        StoreStats {
            store,
            events: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            failed_commits: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            batch_sizes: Histogram::new(&BATCH_BUCKETS),
            write_seconds: Histogram::new(&LATENCY_BUCKETS),
        }
    }

    /// A transaction of `writes` writes ended; `events`: those its
    /// writes that were not refused carried.
    pub(crate) fn transaction(&self, writes: usize, events: u64, refused: u64, committed: bool) {
        if committed {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.events.fetch_add(events, Ordering::Relaxed);
            self.batch_sizes.record(writes as f64);
        } else {
            self.failed_commits.fetch_add(1, Ordering::Relaxed);
        }
        self.refused.fetch_add(refused, Ordering::Relaxed);
    }

    pub(crate) fn answered(&self, waited: Duration) {
        self.write_seconds.record(waited.as_secs_f64());
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inclusive() {
        let h = Histogram::new(&BATCH_BUCKETS);
        for v in [1.0, 1.0, 3.0, 4.0, 2000.0] {
            h.record(v);
        }
        let c = h.cumulative();
        assert_eq!(c[0], (1.0, 2));
        assert_eq!(c[1], (2.0, 2));
        assert_eq!(c[2], (4.0, 4), "4 falls in le=4");
        assert_eq!(c.last(), Some(&(f64::INFINITY, 5)));
        assert_eq!(h.count(), 5);
        assert_eq!(h.sum(), 2009.0);
    }
}
