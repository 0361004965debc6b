//! A system's [`RuntimeMetrics`] in the Prometheus text format (0.0.4) or
//! in OpenMetrics 1.0, every family under the `troubadour_` prefix, with
//! the conventions both ask for: counters end in `_total`, units in the
//! name (`_seconds`), one `HELP` and `TYPE` per family, label values
//! escaped.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `troubadour_actors_alive` | gauge | `kind` |
//! | `troubadour_actors_spawned_total` | counter | `kind` |
//! | `troubadour_actors_stopped_total` | counter | `kind` |
//! | `troubadour_restarts_total` | counter | `kind` |
//! | `troubadour_actor_failures_total` | counter | `kind` |
//! | `troubadour_messages_handled_total` | counter | `kind` |
//! | `troubadour_mailbox_depth` | gauge | `kind` (sum of sampled depths) |
//! | `troubadour_mailbox_depth_max` | gauge | `kind` |
//! | `troubadour_dead_letters_total` | counter | `reason` |
//! | `troubadour_scheduler_workers` | gauge | `state` (`busy`, `searching`, `parked`) |
//! | `troubadour_scheduler_steals_total` | counter | |
//! | `troubadour_timers_armed` | gauge | |
//! | `troubadour_uptime_seconds` | gauge | |
//!
//! The per-kind families are present only when the system
//! [observes](troubadour::ActorSystemBuilder::observe) its actors.
//!
//! With the remote layer (feature `remote`, `render_remote`):
//!
//! | family | type | labels |
//! |---|---|---|
//! | `troubadour_remote_frames_refused_total` | counter | `reason` (`unknown_type`, `undecodable`, `no_such_actor`, `mailbox_full`, `unknown_channel`) |
//! | `troubadour_remote_connections_lost_total` | counter | |
//! | `troubadour_remote_framing_errors_total` | counter | |
//! | `troubadour_remote_handshakes_refused_total` | counter | |
//! | `troubadour_remote_peer_state` | gauge (1 for the current state) | `peer`, `incarnation`, `state` (`connected`, `connecting`, `waiting_for_node`, `disconnected`, `down`) |
//! | `troubadour_remote_bytes_sent_total`, `troubadour_remote_bytes_received_total` | counter | `peer`, `incarnation` |
//! | `troubadour_remote_frames_sent_total`, `troubadour_remote_frames_received_total` | counter | `peer`, `incarnation` |
//! | `troubadour_remote_connections_established_total` | counter | `peer`, `incarnation` |
//!
//! With the cluster (feature `cluster`, `render_cluster`), all labelled
//! `node` (the node reporting):
//!
//! | family | type | more labels |
//! |---|---|---|
//! | `troubadour_cluster_members` | gauge | |
//! | `troubadour_cluster_shards` | gauge | |
//! | `troubadour_cluster_shard_epoch` | gauge | `shard` (each shard hosted here; the value is its assignment's epoch) |
//! | `troubadour_cluster_shards_owned` | gauge | `owner` (every owner, as this node last read the lease store) |
//! | `troubadour_cluster_entities_active` | gauge | |
//! | `troubadour_cluster_lease_valid` | gauge | |
//! | `troubadour_cluster_lease_left_seconds` | gauge | |
//! | `troubadour_cluster_messages_waiting` | gauge | |
//! | `troubadour_cluster_failovers_total` | counter | |
//! | `troubadour_cluster_activations_total`, `troubadour_cluster_passivations_total` | counter | |
//! | `troubadour_cluster_flushes_given_up_total` | counter | (0 in a healthy cluster: each is a moved shard whose held messages went on unflushed) |
//! | `troubadour_cluster_lease_renewals_total` | counter | `outcome` (`accepted`, `failed`) |
//! | `troubadour_cluster_lease_renewal_seconds_total` | counter | (summed; over the renewals, the mean) |
//! | `troubadour_cluster_lease_renewal_last_seconds` | gauge | |
//!
//! With persistence stores (feature `persistence`, `render_stores`),
//! labelled `store` (`sqlite`, `postgres`):
//!
//! | family | type |
//! |---|---|
//! | `troubadour_persistence_events_total` | counter |
//! | `troubadour_persistence_commits_total` | counter |
//! | `troubadour_persistence_failed_commits_total` | counter |
//! | `troubadour_persistence_refused_writes_total` | counter |
//! | `troubadour_persistence_batch_writes` | histogram (writes per group commit) |
//! | `troubadour_persistence_write_seconds` | histogram (from a write's call to its answer: what `persist` waits) |

use std::fmt::Write;
use troubadour::{KindMetrics, RuntimeMetrics};

/// The content type of [`Format::Text`].
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of [`Format::OpenMetrics`].
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which exposition format to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus' text format, version 0.0.4 (what every scraper reads).
    Text,
    /// OpenMetrics 1.0 text (counters' `TYPE` names the family without
    /// `_total`, and the exposition ends with `# EOF`).
    OpenMetrics,
}

impl Format {
    /// The format a scraper asked for in its `Accept` header: OpenMetrics
    /// if it lists `application/openmetrics-text`, else the text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// Writes `metrics` in `format`. With [`Format::OpenMetrics`] the output
/// ends with `# EOF`; with [`Format::Text`] it can be followed by an
/// application's own families (as the realtime map's `/metrics` does).
///
/// ```
/// use troubadour::ActorSystem;
/// use troubadour_observe::prometheus::{render, Format};
/// let system = ActorSystem::builder().observe().build();
/// let mut out = String::new();
/// render(&system.metrics(), Format::Text, &mut out);
/// assert!(out.contains("# TYPE troubadour_dead_letters_total counter"));
/// ```
pub fn render(metrics: &RuntimeMetrics, format: Format, out: &mut String) {
    let mut w = Writer { format, out };
    type KindValue = fn(&KindMetrics) -> u64;
    let per_kind: [(&str, Kind, &str, KindValue); 8] = [
        (
            "troubadour_actors_alive",
            Kind::Gauge,
            "Actors alive now, by kind (Rust type).",
            |k| k.alive,
        ),
        (
            "troubadour_actors_spawned_total",
            Kind::Counter,
            "Actors spawned since the system started, by kind.",
            |k| k.spawned,
        ),
        (
            "troubadour_actors_stopped_total",
            Kind::Counter,
            "Actors stopped since the system started, by kind.",
            |k| k.stopped,
        ),
        (
            "troubadour_restarts_total",
            Kind::Counter,
            "Restarts of actors by their supervisors, by kind.",
            |k| k.restarts,
        ),
        (
            "troubadour_actor_failures_total",
            Kind::Counter,
            "Actor failures (panics, failures asked for, kills, exit signals), by kind.",
            |k| k.failures,
        ),
        (
            "troubadour_messages_handled_total",
            Kind::Counter,
            "Messages handled, by kind of the actor that handled them.",
            |k| k.messages_handled,
        ),
        (
            "troubadour_mailbox_depth",
            Kind::Gauge,
            "Messages queued in the mailboxes of the kind's actors (sampled at the end of their turns).",
            |k| k.mailbox_depth,
        ),
        (
            "troubadour_mailbox_depth_max",
            Kind::Gauge,
            "The deepest sampled mailbox of the kind.",
            |k| u64::from(k.max_mailbox_depth),
        ),
    ];
    if metrics.observing {
        for (name, kind, help, value) in per_kind {
            w.family(name, kind, help);
            for k in &metrics.kinds {
                w.sample(name, &[("kind", k.kind)], value(k));
            }
        }
    }
    let dead = &metrics.dead_letters;
    w.family(
        "troubadour_dead_letters_total",
        Kind::Counter,
        "Messages that could not be handled, by reason.",
    );
    for (reason, n) in dead.by_reason() {
        w.sample(
            "troubadour_dead_letters_total",
            &[("reason", reason.as_str())],
            n,
        );
    }
    let workers = &metrics.workers;
    w.family(
        "troubadour_scheduler_workers",
        Kind::Gauge,
        "The scheduler's worker threads, by what they are doing.",
    );
    for (state, n) in [
        ("busy", workers.busy),
        ("searching", workers.searching),
        ("parked", workers.parked),
    ] {
        w.sample(
            "troubadour_scheduler_workers",
            &[("state", state)],
            n as u64,
        );
    }
    w.family(
        "troubadour_scheduler_steals_total",
        Kind::Counter,
        "Actors a worker took from another worker's queues.",
    );
    w.sample("troubadour_scheduler_steals_total", &[], workers.steals);
    w.family(
        "troubadour_timers_armed",
        Kind::Gauge,
        "Timers armed and neither fired nor cancelled.",
    );
    w.sample("troubadour_timers_armed", &[], metrics.timers_armed as u64);
    w.family(
        "troubadour_uptime_seconds",
        Kind::Gauge,
        "Seconds since the actor system started.",
    );
    w.sample_f64(
        "troubadour_uptime_seconds",
        &[],
        metrics.uptime.as_secs_f64(),
    );
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
    }
}

/// Appends the remote layer's counters (see the module docs). With
/// [`Format::OpenMetrics`], call it before [`render`], which ends the
/// exposition.
#[cfg(feature = "remote")]
pub fn render_remote(
    stats: &troubadour_remote::RemoteStats,
    peers: &[troubadour_remote::PeerStatus],
    format: Format,
    out: &mut String,
) {
    use troubadour_remote::{PeerState, RemoteStats};
    let mut w = Writer { format, out };
    let labels =
        |p: &troubadour_remote::PeerStatus| (p.node.clone(), format!("{:#x}", p.incarnation));
    let name = "troubadour_remote_peer_state";
    w.family(
        name,
        Kind::Gauge,
        "The connection to each other node: 1 for its current state, 0 for the others.",
    );
    for p in peers {
        let (peer, incarnation) = labels(p);
        for state in PeerState::ALL {
            w.sample(
                name,
                &[
                    ("peer", &peer),
                    ("incarnation", &incarnation),
                    ("state", state.as_str()),
                ],
                u64::from(p.state == state),
            );
        }
    }
    for (name, help, value) in [
        (
            "troubadour_remote_bytes_sent_total",
            "Bytes written to each other node.",
            (|p: &troubadour_remote::PeerStatus| p.bytes_sent) as fn(&_) -> u64,
        ),
        (
            "troubadour_remote_bytes_received_total",
            "Bytes read from each other node.",
            |p| p.bytes_received,
        ),
        (
            "troubadour_remote_frames_sent_total",
            "Frames sent to each other node.",
            |p| p.frames_sent,
        ),
        (
            "troubadour_remote_frames_received_total",
            "Frames received from each other node.",
            |p| p.frames_received,
        ),
        (
            "troubadour_remote_connections_established_total",
            "Connections established with each other node.",
            |p| p.connections,
        ),
    ] {
        w.family(name, Kind::Counter, help);
        for p in peers {
            let (peer, incarnation) = labels(p);
            w.sample(
                name,
                &[("peer", &peer), ("incarnation", &incarnation)],
                value(p),
            );
        }
    }
    let name = "troubadour_remote_frames_refused_total";
    w.family(
        name,
        Kind::Counter,
        "Frames from other nodes refused, by reason.",
    );
    for (reason, n) in stats.frames_refused() {
        w.sample(name, &[("reason", reason)], n);
    }
    for (name, help, counter) in [
        (
            "troubadour_remote_connections_lost_total",
            "Connections to other nodes lost, for any reason.",
            &stats.connections_lost,
        ),
        (
            "troubadour_remote_framing_errors_total",
            "Connections closed for a framing error.",
            &stats.framing_errors,
        ),
        (
            "troubadour_remote_handshakes_refused_total",
            "Incoming connections refused in TLS or the handshake.",
            &stats.handshakes_refused,
        ),
    ] {
        w.family(name, Kind::Counter, help);
        w.sample(name, &[], RemoteStats::get(counter));
    }
}

/// Appends a cluster node's view (see the module docs). With
/// [`Format::OpenMetrics`], call it before [`render`], which ends the
/// exposition.
#[cfg(feature = "cluster")]
pub fn render_cluster(
    status: &troubadour_cluster::ClusterStatus,
    format: Format,
    out: &mut String,
) {
    let mut w = Writer { format, out };
    let node = status.node.as_str();
    let gauges = [
        (
            "troubadour_cluster_members",
            "Members this node sees up, itself included.",
            status.members.len() as u64,
        ),
        (
            "troubadour_cluster_shards",
            "Shards this node hosts.",
            status.shards.len() as u64,
        ),
        (
            "troubadour_cluster_entities_active",
            "Virtual actors active (or passivating) on this node.",
            status.entities as u64,
        ),
        (
            "troubadour_cluster_lease_valid",
            "1 while this node's lease is valid (it hosts shards only then).",
            u64::from(status.lease_valid),
        ),
        (
            "troubadour_cluster_messages_waiting",
            "Messages waiting for their shard's owner to be known.",
            status.waiting as u64,
        ),
    ];
    for (name, help, value) in gauges {
        w.family(name, Kind::Gauge, help);
        w.sample(name, &[("node", node)], value);
    }
    let name = "troubadour_cluster_lease_left_seconds";
    w.family(
        name,
        Kind::Gauge,
        "Time left on this node's lease by its own clock (0 without one).",
    );
    w.sample_f64(
        name,
        &[("node", node)],
        status.lease_left_ms.unwrap_or(0) as f64 / 1e3,
    );
    let name = "troubadour_cluster_shard_epoch";
    w.family(
        name,
        Kind::Gauge,
        "Each shard this node hosts, with the epoch of its assignment (it grows with every move).",
    );
    for shard in &status.shards {
        w.sample(
            name,
            &[("node", node), ("shard", &shard.shard.to_string())],
            shard.epoch,
        );
    }
    let name = "troubadour_cluster_shards_owned";
    w.family(
        name,
        Kind::Gauge,
        "Shards each owner holds, as this node last read the lease store.",
    );
    for owner in &status.owners {
        w.sample(
            name,
            &[("node", node), ("owner", owner.node.as_str())],
            owner.shards as u64,
        );
    }
    for (name, help, value) in [
        (
            "troubadour_cluster_failovers_total",
            "Shards this node took over from lost nodes.",
            status.failovers,
        ),
        (
            "troubadour_cluster_activations_total",
            "Virtual actors started on this node (first message, or after a passivation or a move).",
            status.activations,
        ),
        (
            "troubadour_cluster_passivations_total",
            "Virtual actors stopped on this node for being idle.",
            status.passivations,
        ),
        (
            "troubadour_cluster_flushes_given_up_total",
            "Moved shards whose old path's flush went unanswered for a second: held messages went on, maybe out of order.",
            status.flushes_given_up,
        ),
    ] {
        w.family(name, Kind::Counter, help);
        w.sample(name, &[("node", node)], value);
    }
    let name = "troubadour_cluster_lease_renewals_total";
    w.family(
        name,
        Kind::Counter,
        "Renewals of this node's lease, by outcome.",
    );
    w.sample(
        name,
        &[("node", node), ("outcome", "accepted")],
        status.lease_renewals,
    );
    w.sample(
        name,
        &[("node", node), ("outcome", "failed")],
        status.lease_renewal_failures,
    );
    let name = "troubadour_cluster_lease_renewal_seconds_total";
    w.family(
        name,
        Kind::Counter,
        "Time renewals took (send to answer), summed: divided by the renewals, the mean.",
    );
    w.sample_f64(
        name,
        &[("node", node)],
        status.lease_renewal_micros_total as f64 / 1e6,
    );
    let name = "troubadour_cluster_lease_renewal_last_seconds";
    w.family(name, Kind::Gauge, "Time the latest renewal took.");
    w.sample_f64(
        name,
        &[("node", node)],
        status.last_lease_renewal_micros.unwrap_or(0) as f64 / 1e6,
    );
}

/// Appends persistence stores' counters (see the module docs), each
/// family once with a sample per store. With [`Format::OpenMetrics`], call
/// it before [`render`], which ends the exposition.
#[cfg(feature = "persistence")]
pub fn render_stores(
    stores: &[&troubadour_persistence::StoreStats],
    format: Format,
    out: &mut String,
) {
    use troubadour_persistence::StoreStats;
    if stores.is_empty() {
        return;
    }
    let mut w = Writer { format, out };
    type Counter = fn(&StoreStats) -> &std::sync::atomic::AtomicU64;
    let counters: [(&str, &str, Counter); 4] = [
        (
            "troubadour_persistence_events_total",
            "Events appended by committed transactions.",
            |s| &s.events,
        ),
        (
            "troubadour_persistence_commits_total",
            "Transactions committed (each a group commit of one or more writes).",
            |s| &s.commits,
        ),
        (
            "troubadour_persistence_failed_commits_total",
            "Transactions that failed; their writes were answered with the error.",
            |s| &s.failed_commits,
        ),
        (
            "troubadour_persistence_refused_writes_total",
            "Writes refused by the journal's rules (stale epoch, sequence conflict).",
            |s| &s.refused,
        ),
    ];
    for (name, help, counter) in counters {
        w.family(name, Kind::Counter, help);
        for s in stores {
            w.sample(name, &[("store", s.store)], StoreStats::get(counter(s)));
        }
    }
    let name = "troubadour_persistence_batch_writes";
    w.histogram_family(name, "Writes per committed transaction (group commit).");
    for s in stores {
        w.histogram(
            name,
            &[("store", s.store)],
            &s.batch_sizes.cumulative(),
            s.batch_sizes.sum(),
        );
    }
    let name = "troubadour_persistence_write_seconds";
    w.histogram_family(
        name,
        "Time from a write's call to its answer: what persist waits.",
    );
    for s in stores {
        w.histogram(
            name,
            &[("store", s.store)],
            &s.write_seconds.cumulative(),
            s.write_seconds.sum(),
        );
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

struct Writer<'a> {
    format: Format,
    out: &'a mut String,
}

impl Writer<'_> {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        // OpenMetrics names a counter's family without the `_total` its
        // samples carry.
        let family = match (self.format, kind) {
            (Format::OpenMetrics, Kind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# HELP {family} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {family} {kind}");
    }

    fn labels(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(value));
            }
            self.out.push('}');
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.labels(name, labels);
        let _ = writeln!(self.out, " {value}");
    }

    fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.labels(name, labels);
        let _ = writeln!(self.out, " {value:.6}");
    }

    #[cfg_attr(not(feature = "persistence"), allow(dead_code))]
    fn histogram_family(&mut self, name: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} histogram");
    }

    /// One histogram's samples: cumulative `(upper bound, count)` pairs
    /// ending with `+Inf`, and the sum.
    #[cfg_attr(not(feature = "persistence"), allow(dead_code))]
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], buckets: &[(f64, u64)], sum: f64) {
        let bucket = format!("{name}_bucket");
        for (le, count) in buckets {
            let le = if le.is_infinite() {
                "+Inf".to_string()
            } else {
                format!("{le}")
            };
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, *count);
        }
        let count = buckets.last().map_or(0, |(_, n)| *n);
        self.sample(&format!("{name}_count"), labels, count);
        self.labels(&format!("{name}_sum"), labels);
        let _ = writeln!(self.out, " {sum}");
    }
}

/// A label value as both formats spell it: backslash, double quote and
/// newline escaped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label("app::Vehicle<u8>"), "app::Vehicle<u8>");
    }

    #[test]
    fn a_scraper_asking_for_openmetrics_gets_it() {
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Text);
        assert_eq!(Format::from_accept(None), Format::Text);
    }
}
