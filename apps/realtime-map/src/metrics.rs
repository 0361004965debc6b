//! Counters the service keeps and their Prometheus text rendering.
//!
//! Everything is a relaxed atomic: a scrape may see one counter a message
//! ahead of another, which Prometheus tolerates, and the hot paths pay one
//! uncontended-in-the-common-case increment.
//!
//! The HTTP counters are bumped by every request on every tokio thread, so
//! they are kept per thread (`HttpShard`) and summed when read: with one
//! set shared by all, each answer's three increments fetched lines the
//! other thread had just written.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the HTTP latency buckets, in microseconds.
const LATENCY_BOUNDS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// A Prometheus histogram of durations, as one thread records it.
#[derive(Default)]
struct Latency {
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
}

impl Latency {
    fn record(&self, d: Duration) {
        let us = d.as_micros() as u64;
        let i = LATENCY_BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
}

/// A histogram's figures summed over the threads, for rendering.
#[derive(Default)]
struct LatencyTotals {
    buckets: [u64; LATENCY_BOUNDS_US.len() + 1],
    sum_ns: u64,
}

impl LatencyTotals {
    fn add(&mut self, l: &Latency) {
        for (total, b) in self.buckets.iter_mut().zip(&l.buckets) {
            *total += b.load(Relaxed);
        }
        self.sum_ns += l.sum_ns.load(Relaxed);
    }

    fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BOUNDS_US.iter().enumerate() {
            cumulative += self.buckets[i];
            let le = *bound as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.buckets[LATENCY_BOUNDS_US.len()];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// How many sets of HTTP counters there are. A thread draws one number
/// when it first answers and counts into that set ever after, so threads
/// share a set only beyond this many.
const HTTP_SHARDS: usize = 8;

/// One thread's HTTP counters, on lines of their own.
#[derive(Default)]
#[repr(align(128))]
struct HttpShard {
    /// Answers by class: 2xx, 4xx, 5xx.
    responses: [AtomicU64; 3],
    vehicle: Latency,
    vehicles: Latency,
}

/// The HTTP counters of every thread.
struct HttpCounters {
    shards: Box<[HttpShard]>,
}

impl Default for HttpCounters {
    fn default() -> Self {
        HttpCounters {
            shards: (0..HTTP_SHARDS).map(|_| HttpShard::default()).collect(),
        }
    }
}

impl HttpCounters {
    /// This thread's set.
    fn mine(&self) -> &HttpShard {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, Relaxed) % HTTP_SHARDS;
        }
        &self.shards[SHARD.with(|s| *s)]
    }

    fn responses(&self, class: usize) -> u64 {
        self.shards
            .iter()
            .map(|s| s.responses[class].load(Relaxed))
            .sum()
    }

    fn latency(&self, route: Route) -> LatencyTotals {
        let mut totals = LatencyTotals::default();
        for s in self.shards.iter() {
            totals.add(match route {
                Route::Vehicle => &s.vehicle,
                Route::Vehicles => &s.vehicles,
            });
        }
        totals
    }
}

/// The HTTP routes with their own latency series.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// `GET /vehicle`
    Vehicle,
    /// `GET /vehicles`
    Vehicles,
}

/// All the service's metrics.
#[derive(Default)]
pub struct Metrics {
    /// Positions taken off MQTT that parsed.
    pub positions_received: AtomicU64,
    /// Payloads that did not parse.
    pub malformed: AtomicU64,
    /// Positions the fleet has routed to a vehicle.
    pub positions_routed: AtomicU64,
    /// Positions vehicle actors have applied.
    pub positions_handled: AtomicU64,
    /// Vehicle actors created (first position, or again after passivation).
    pub vehicles_spawned: AtomicU64,
    /// Vehicle actors stopped for being idle.
    pub vehicles_passivated: AtomicU64,
    /// Vehicle actors restarted by their supervisor after a failure.
    pub vehicle_restarts: AtomicU64,
    /// Vehicle actors alive now.
    pub vehicles_alive: AtomicI64,
    /// In a cluster: batches of map moves this node received for its
    /// browsers (from every node, itself included).
    pub map_batches_received: AtomicU64,
    /// Positions per second over the last second (sampled).
    pub positions_per_second: AtomicU64,
    /// HTTP answers by class and their latency, per thread.
    http: HttpCounters,
}

impl Metrics {
    /// Counts one HTTP answer.
    pub fn answered(&self, route: Route, status: u16, took: Duration) {
        let mine = self.http.mine();
        let class = match status {
            200..=299 => 0,
            400..=499 => 1,
            _ => 2,
        };
        mine.responses[class].fetch_add(1, Relaxed);
        match route {
            Route::Vehicle => mine.vehicle.record(took),
            Route::Vehicles => mine.vehicles.record(took),
        }
    }

    /// HTTP answers with a 2xx status so far.
    pub fn http_2xx(&self) -> u64 {
        self.http.responses(0)
    }

    /// HTTP answers with a 4xx status so far.
    pub fn http_4xx(&self) -> u64 {
        self.http.responses(1)
    }

    /// HTTP answers with any other status (5xx) so far.
    pub fn http_5xx(&self) -> u64 {
        self.http.responses(2)
    }

    /// Answers to `route` so far, every status.
    pub fn http_answers(&self, route: Route) -> u64 {
        self.http.latency(route).count()
    }

    /// Positions waiting in the fleet actor's mailbox.
    pub fn fleet_queue(&self) -> u64 {
        self.positions_received
            .load(Relaxed)
            .saturating_sub(self.positions_routed.load(Relaxed))
    }

    /// Positions waiting in vehicle actors' mailboxes, all vehicles together.
    pub fn vehicle_queues(&self) -> u64 {
        self.positions_routed
            .load(Relaxed)
            .saturating_sub(self.positions_handled.load(Relaxed))
    }

    /// The Prometheus text exposition of everything above.
    pub fn render(&self, dead_letters: u64) -> String {
        let mut out = String::with_capacity(4096);
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let get = |a: &AtomicU64| a.load(Relaxed).to_string();
        metric(
            "realtime_map_positions_received_total",
            "counter",
            "Vehicle positions received over MQTT that parsed.",
            get(&self.positions_received),
        );
        metric(
            "realtime_map_positions_per_second",
            "gauge",
            "Vehicle positions handled by vehicle actors in the last second.",
            get(&self.positions_per_second),
        );
        metric(
            "realtime_map_positions_handled_total",
            "counter",
            "Vehicle positions applied by vehicle actors.",
            get(&self.positions_handled),
        );
        metric(
            "realtime_map_malformed_payloads_total",
            "counter",
            "MQTT payloads rejected as malformed (see the log for reasons).",
            get(&self.malformed),
        );
        metric(
            "realtime_map_vehicles_alive",
            "gauge",
            "Vehicle actors alive now.",
            self.vehicles_alive.load(Relaxed).to_string(),
        );
        metric(
            "realtime_map_vehicles_spawned_total",
            "counter",
            "Vehicle actors created, on a first position or after passivation.",
            get(&self.vehicles_spawned),
        );
        metric(
            "realtime_map_vehicles_passivated_total",
            "counter",
            "Vehicle actors stopped after the idle time without a position.",
            get(&self.vehicles_passivated),
        );
        metric(
            "realtime_map_map_batches_received_total",
            "counter",
            "Batches of map moves received for this node's browsers (a cluster sends them only to nodes with browsers open).",
            get(&self.map_batches_received),
        );
        metric(
            "realtime_map_vehicle_restarts_total",
            "counter",
            "Vehicle actors restarted by the fleet supervisor after a failure.",
            get(&self.vehicle_restarts),
        );
        metric(
            "realtime_map_fleet_mailbox_depth",
            "gauge",
            "Positions queued in the fleet actor's mailbox.",
            self.fleet_queue().to_string(),
        );
        metric(
            "realtime_map_vehicle_mailbox_depth",
            "gauge",
            "Positions queued in vehicle actors' mailboxes, all vehicles together.",
            self.vehicle_queues().to_string(),
        );
        metric(
            "realtime_map_dead_letters_total",
            "counter",
            "Messages that reached an actor after it stopped.",
            dead_letters.to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP realtime_map_http_responses_total HTTP responses by status class.\n# TYPE realtime_map_http_responses_total counter"
        );
        for (class, count) in [
            ("2xx", self.http_2xx()),
            ("4xx", self.http_4xx()),
            ("5xx", self.http_5xx()),
        ] {
            let _ = writeln!(
                out,
                "realtime_map_http_responses_total{{class=\"{class}\"}} {count}"
            );
        }
        let name = "realtime_map_http_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a request reaching its handler to its answer.\n# TYPE {name} histogram"
        );
        self.http
            .latency(Route::Vehicle)
            .render(&mut out, name, "route=\"/vehicle\"");
        self.http
            .latency(Route::Vehicles)
            .render(&mut out, name, "route=\"/vehicles\"");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_cumulative_and_bounded_inclusively() {
        let l = Latency::default();
        l.record(Duration::from_micros(50)); // le 0.00005
        l.record(Duration::from_micros(51)); // le 0.0001
        l.record(Duration::from_secs(3)); // +Inf only
        let mut totals = LatencyTotals::default();
        totals.add(&l);
        let mut out = String::new();
        totals.render(&mut out, "x", "r=\"a\"");
        assert!(
            out.contains("x_bucket{r=\"a\",le=\"0.00005\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{r=\"a\",le=\"0.0001\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{r=\"a\",le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{r=\"a\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count{r=\"a\"} 3\n"), "{out}");
        assert_eq!(totals.count(), 3);
    }

    /// Answers counted on more threads than there are sets of counters
    /// (so some threads share one) all show in the totals and the text.
    #[test]
    fn answers_from_every_thread_are_summed() {
        let m = Metrics::default();
        let threads = 2 * HTTP_SHARDS + 3;
        std::thread::scope(|s| {
            for t in 0..threads {
                let m = &m;
                s.spawn(move || {
                    for i in 0..1_000 {
                        let status = if i % 10 == 0 { 404 } else { 200 };
                        m.answered(Route::Vehicle, status, Duration::from_micros(t as u64));
                    }
                    m.answered(Route::Vehicles, 503, Duration::from_secs(2));
                });
            }
        });
        let n = threads as u64;
        assert_eq!(m.http_2xx(), 900 * n);
        assert_eq!(m.http_4xx(), 100 * n);
        assert_eq!(m.http_5xx(), n);
        assert_eq!(m.http_answers(Route::Vehicle), 1_000 * n);
        assert_eq!(m.http_answers(Route::Vehicles), n);
        let text = m.render(0);
        assert!(
            text.contains(&format!(
                "realtime_map_http_responses_total{{class=\"2xx\"}} {}\n",
                900 * n
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "realtime_map_http_request_duration_seconds_count{{route=\"/vehicles\"}} {n}\n"
            )),
            "{text}"
        );
    }
}
