//! The observer: samples a system while someone watches, keeps message
//! rates and recent dead letters, and answers the dashboard's questions
//! (an overview, one supervisor's children, one actor, a search).
//!
//! Sampling costs a walk over every live actor, so it runs only while a
//! dashboard is open (a live stream is subscribed, or a request came in
//! the last [`IDLE_AFTER`]), and at most a twentieth of the time: with a
//! million actors a sample takes a few hundred milliseconds, and the next
//! one waits twenty times that. Per-actor rates are kept for at most
//! [`ObserverConfig::tracked_actors`] actors; above that the overview says
//! so and ranks the hottest among those tracked, while the per-kind
//! figures stay exact.

use crate::prometheus::{self, Format};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use troubadour::{ActorId, ActorSample, DeadLetter, RuntimeMetrics, SystemHandle};

/// Sampling stops this long after the last request when no live stream
/// is open.
pub const IDLE_AFTER: Duration = Duration::from_secs(10);

/// How an [`Observer`] samples.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ObserverConfig {
    /// Time between samples while watched (default 1 s).
    pub interval: Duration,
    /// Actors whose message rates are tracked one by one (default
    /// 100,000); more are counted per kind only.
    pub tracked_actors: usize,
    /// Dead letters kept for the live list (default 100).
    pub recent_dead_letters: usize,
    /// Rows in the hottest-actors list (default 20).
    pub hottest: usize,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        ObserverConfig {
            interval: Duration::from_secs(1),
            tracked_actors: 100_000,
            recent_dead_letters: 100,
            hottest: 20,
        }
    }
}

/// Watches one actor system for a dashboard and a metrics endpoint.
///
/// Cloning is cheap: clones share one sampler. Build the system with
/// [`observe`](troubadour::ActorSystemBuilder::observe) to see actors; without it
/// the overview shows the system-wide figures only.
///
/// ```no_run
/// use troubadour::ActorSystem;
/// use troubadour_observe::Observer;
/// # async fn run() -> std::io::Result<()> {
/// let system = ActorSystem::builder().observe().build();
/// let observer = Observer::new(system.handle());
/// // The dashboard at http://127.0.0.1:9100/ and metrics at /metrics.
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
/// observer.serve(listener).await
/// # }
/// ```
#[derive(Clone)]
pub struct Observer {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) system: SystemHandle,
    config: ObserverConfig,
    state: Mutex<State>,
    /// Each sample's overview, as JSON, for the live streams.
    pub(crate) overviews: broadcast::Sender<Arc<str>>,
    /// Set by [`Observer::close`]: live streams end.
    pub(crate) closed: watch::Sender<bool>,
    /// Wakes the sampler when a dashboard opens.
    wake: tokio::sync::Notify,
    #[cfg(feature = "remote")]
    pub(crate) remote: std::sync::OnceLock<troubadour_remote::RemoteView>,
    /// The kind view's control channel (`kinds.rs`).
    #[cfg(feature = "remote")]
    pub(crate) kinds: crate::kinds::remote::KindChannel,
    #[cfg(feature = "cluster")]
    cluster: std::sync::OnceLock<troubadour_cluster::Cluster>,
    #[cfg(feature = "persistence")]
    stores: Mutex<Vec<Arc<troubadour_persistence::StoreStats>>>,
}

#[derive(Default)]
struct State {
    last_request: Option<Instant>,
    /// Per tracked actor: messages handled at the previous sample.
    previous: HashMap<ActorId, u64>,
    rates: HashMap<ActorId, f64>,
    /// Per kind: messages handled at the previous sample.
    previous_kinds: HashMap<&'static str, u64>,
    kind_rates: HashMap<&'static str, f64>,
    previous_at: Option<Instant>,
    overview: Option<Arc<Overview>>,
    dead_letters: VecDeque<DeadLetterRow>,
    /// The cluster as the sampler last asked (feature `cluster`).
    cluster: Option<ClusterPanel>,
    /// Per peer (name, incarnation): bytes sent and received at the
    /// previous sample (feature `remote`).
    #[cfg(feature = "remote")]
    previous_traffic: HashMap<(String, u64), (u64, u64)>,
}

/// What the dashboard shows at the top, refreshed at each sample.
#[derive(Clone, Debug, Serialize)]
pub struct Overview {
    /// The node (system name, address when remote, incarnation).
    pub node: String,
    /// Whether the system observes its actors.
    pub observing: bool,
    /// Seconds since the system started.
    pub uptime_s: f64,
    /// Actors alive, all kinds.
    pub actors: u64,
    /// Messages handled per second, all kinds, over the last interval.
    pub messages_per_s: f64,
    /// The scheduler's workers.
    pub workers: Workers,
    /// Timers armed.
    pub timers_armed: usize,
    /// Dead letters since the start, by reason.
    pub dead_letters: DeadLetterTotals,
    /// Per kind, most alive first.
    pub kinds: Vec<KindRow>,
    /// The busiest actors over the last interval.
    pub hottest: Vec<ActorRow>,
    /// Whether `hottest` was ranked among a subset only (more actors than
    /// [`ObserverConfig::tracked_actors`]).
    pub hottest_sampled: bool,
    /// The latest dead letters, newest first.
    pub recent_dead_letters: Vec<DeadLetterRow>,
    /// The cluster, when the observer was given one
    /// (`Observer::with_cluster`, feature `cluster`).
    pub cluster: Option<ClusterPanel>,
    /// The other nodes, when the observer was given the remote layer
    /// (`Observer::with_remote`, feature `remote`).
    pub network: Option<NetworkPanel>,
}

/// The other nodes as this node's remote layer sees them, for the
/// dashboard.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkPanel {
    /// Frames from other nodes refused, all reasons.
    pub frames_refused: u64,
    /// Connections lost, for any reason.
    pub connections_lost: u64,
    /// Incoming connections refused in TLS or the handshake.
    pub handshakes_refused: u64,
    /// Every node known, by name.
    pub peers: Vec<PeerRow>,
}

/// One node in the [`NetworkPanel`].
#[derive(Clone, Debug, Serialize)]
pub struct PeerRow {
    /// Its name.
    pub node: String,
    /// Its incarnation, in hex.
    pub incarnation: String,
    /// Where it listens, if known.
    pub address: Option<String>,
    /// `connected`, `connecting`, `waiting_for_node`, `disconnected` or
    /// `down`.
    pub state: &'static str,
    /// Whether the connection is mutual TLS.
    pub tls: bool,
    /// Consecutive failed dials.
    pub failed_attempts: u32,
    /// Connections established with it.
    pub connections: u64,
    /// Totals since this node first heard of it.
    pub bytes_sent: u64,
    #[allow(missing_docs)]
    pub bytes_received: u64,
    #[allow(missing_docs)]
    pub frames_sent: u64,
    #[allow(missing_docs)]
    pub frames_received: u64,
    /// Bytes per second over the last interval.
    pub sent_per_s: f64,
    #[allow(missing_docs)]
    pub received_per_s: f64,
}

/// A cluster as one node sees it, for the dashboard.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterPanel {
    /// This node.
    pub node: String,
    /// Whether its lease is valid (it hosts shards only then).
    pub lease_valid: bool,
    /// Time left on its lease, in milliseconds.
    pub lease_left_ms: Option<u64>,
    /// Whether it is leaving.
    pub leaving: bool,
    /// Whether its shards are the ones placement gives it.
    pub balanced: bool,
    /// Virtual actors active here.
    pub entities: usize,
    /// Messages waiting for a shard's owner.
    pub waiting: usize,
    /// Shards taken over from lost nodes.
    pub failovers: u64,
    /// Every node membership sees up or the lease store names as an
    /// owner.
    pub nodes: Vec<ClusterNode>,
}

/// One node in the [`ClusterPanel`].
#[derive(Clone, Debug, Serialize)]
pub struct ClusterNode {
    /// Its name.
    pub name: String,
    /// Whether membership sees it up.
    pub up: bool,
    /// Whether its lease was valid at the latest read of the store.
    pub lease_valid: bool,
    /// Shards it owns, by the latest read of the store.
    pub shards: usize,
    /// Whether it is the node serving this dashboard.
    pub here: bool,
}

/// The scheduler's workers, for JSON.
#[derive(Clone, Debug, Serialize)]
#[allow(missing_docs)]
pub struct Workers {
    pub total: usize,
    pub busy: usize,
    pub searching: usize,
    pub parked: usize,
    pub steals: u64,
}

/// Dead letters by reason, for JSON.
#[derive(Clone, Debug, Serialize)]
#[allow(missing_docs)]
pub struct DeadLetterTotals {
    pub total: u64,
    pub recipient_stopped: u64,
    pub discarded_at_stop: u64,
    pub lost: u64,
    pub mailbox_full: u64,
}

/// One kind of actor in the overview.
#[derive(Clone, Debug, Serialize)]
pub struct KindRow {
    /// The full type name.
    pub kind: &'static str,
    /// The type's last path segment (generic arguments kept).
    pub short: String,
    /// Alive now.
    pub alive: u64,
    /// Spawned since the start.
    pub spawned: u64,
    /// Restarts since the start.
    pub restarts: u64,
    /// Failures since the start.
    pub failures: u64,
    /// Messages handled since the start.
    pub handled: u64,
    /// Messages handled per second over the last interval.
    pub rate: f64,
    /// Queued messages at the latest samples (sum).
    pub mailbox_depth: u64,
    /// The deepest sampled mailbox.
    pub max_mailbox_depth: u32,
}

/// One actor, as the dashboard's rows show it.
#[derive(Clone, Debug, Serialize)]
pub struct ActorRow {
    /// Its serial on this node (`/api/actor?id=`).
    pub id: u64,
    /// How its id prints (`<name.serial>`).
    pub label: String,
    /// Its registered name, if any.
    pub name: Option<String>,
    /// The full type name.
    pub kind: &'static str,
    /// The type's last path segment.
    pub short: String,
    /// Its supervisor's serial; `None` under the guardian.
    pub parent: Option<u64>,
    /// Messages handled.
    pub handled: u64,
    /// Messages per second over the last interval (0 if untracked).
    pub rate: f64,
    /// Sampled mailbox depth.
    pub mailbox_depth: u32,
    /// Restarts.
    pub restarts: u32,
    /// Failures.
    pub failures: u32,
    /// Seconds since it was spawned.
    pub age_s: f64,
}

/// One actor with its latest failure and how many children it has.
#[derive(Clone, Debug, Serialize)]
pub struct ActorDetail {
    /// The actor.
    #[serde(flatten)]
    pub row: ActorRow,
    /// Every name it is registered under.
    pub names: Vec<String>,
    /// Its supervisor as the dashboard names it (its registered name, or
    /// its kind and id); `None` under the guardian.
    pub parent_label: Option<String>,
    /// Why it last failed or was killed.
    pub last_failure: Option<String>,
    /// Its children, by kind.
    pub children: Vec<Group>,
}

/// Children of one kind under one supervisor.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// The full type name.
    pub kind: &'static str,
    /// The type's last path segment.
    pub short: String,
    /// How many.
    pub count: usize,
}

/// A page of one supervisor's children.
#[derive(Clone, Debug, Serialize)]
pub struct Children {
    /// All its children, by kind.
    pub groups: Vec<Group>,
    /// The children of the kind asked for (or of all kinds), busiest first,
    /// from `offset`.
    pub actors: Vec<ActorRow>,
    /// How many match before paging.
    pub total: usize,
}

/// One dead letter, as the live list shows it (never the message itself).
#[derive(Clone, Debug, Serialize)]
pub struct DeadLetterRow {
    /// Seconds since the system started.
    pub at_s: f64,
    /// The intended recipient.
    pub recipient: String,
    /// The message's type name.
    pub message_type: &'static str,
    /// Why it was not handled.
    pub reason: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A type name's last path segment, generics kept:
/// `realtime_map::fleet::Vehicle` → `Vehicle`,
/// `troubadour::FnActor<app::S, app::M>` → `FnActor<app::S, app::M>`.
pub fn short_kind(kind: &str) -> String {
    let base = kind.split('<').next().unwrap_or(kind);
    let start = base.rfind("::").map_or(0, |i| i + 2);
    kind[start..].to_string()
}

impl Observer {
    /// Watches `system` with the default [`ObserverConfig`]. Must be called
    /// within a tokio runtime or not: the sampler runs on the system's own
    /// tokio runtime.
    pub fn new(system: SystemHandle) -> Observer {
        Observer::with_config(system, ObserverConfig::default())
    }

    /// Watches `system`, sampling as `config` says.
    pub fn with_config(system: SystemHandle, config: ObserverConfig) -> Observer {
        let (overviews, _) = broadcast::channel(4);
        let (closed, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            system: system.clone(),
            config,
            state: Mutex::new(State::default()),
            overviews,
            closed,
            wake: tokio::sync::Notify::new(),
            #[cfg(feature = "remote")]
            remote: std::sync::OnceLock::new(),
            #[cfg(feature = "remote")]
            kinds: Default::default(),
            #[cfg(feature = "cluster")]
            cluster: std::sync::OnceLock::new(),
            #[cfg(feature = "persistence")]
            stores: Mutex::new(Vec::new()),
        });
        let runtime = system.tokio_handle().clone();
        runtime.spawn(sample_while_watched(Arc::downgrade(&shared)));
        runtime.spawn(collect_dead_letters(Arc::downgrade(&shared)));
        Observer { shared }
    }

    /// The system watched.
    pub fn system(&self) -> &SystemHandle {
        &self.shared.system
    }

    /// Adds the remote layer to the metrics and the dashboard: per peer
    /// its connection's state and the bytes and frames both ways; frames
    /// refused by reason, connections lost, handshakes refused. It also
    /// answers the other nodes' observers about this node's actors of a
    /// kind, and asks them ([`Observer::kind_across_nodes`]), over the
    /// control channel `troubadour.observe.kind` (one observer per
    /// `Remote` answers; a second one still asks).
    #[cfg(feature = "remote")]
    pub fn with_remote(self, remote: &troubadour_remote::Remote) -> Observer {
        let _ = self.shared.remote.set(remote.view());
        if let Err(reason) = crate::kinds::remote::open(&self.shared, remote) {
            // Another observer of this node answers; this one still asks.
            tracing::warn!(%reason, "this observer will not answer other nodes' kind views");
        }
        self
    }

    /// Adds the cluster to the metrics and the dashboard: members, shards
    /// per node (as this node last read the lease store), the lease,
    /// active virtual actors, failovers.
    #[cfg(feature = "cluster")]
    pub fn with_cluster(self, cluster: troubadour_cluster::Cluster) -> Observer {
        let _ = self.shared.cluster.set(cluster);
        self
    }

    /// Adds a persistence store's counters to the metrics (events, group
    /// commits and their sizes, write latency):
    /// `observer.with_store(store.stats())`. Several stores may be added.
    #[cfg(feature = "persistence")]
    pub fn with_store(self, stats: Arc<troubadour_persistence::StoreStats>) -> Observer {
        lock(&self.shared.stores).push(stats);
        self
    }

    /// The system's figures in a Prometheus exposition format, with the
    /// remote layer's, the cluster's and the stores' when given.
    pub async fn render_metrics(&self, format: Format) -> String {
        let mut out = String::new();
        #[cfg(feature = "remote")]
        if let Some(remote) = self.shared.remote.get() {
            prometheus::render_remote(remote.stats(), &remote.peers(), format, &mut out);
        }
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.shared.cluster.get() {
            if let Ok(status) = cluster.status().await {
                prometheus::render_cluster(&status, format, &mut out);
            }
        }
        #[cfg(feature = "persistence")]
        {
            let stores = lock(&self.shared.stores).clone();
            let stores: Vec<&troubadour_persistence::StoreStats> =
                stores.iter().map(|s| &**s).collect();
            prometheus::render_stores(&stores, format, &mut out);
        }
        prometheus::render(&self.shared.system.metrics(), format, &mut out);
        out
    }

    /// Ends every live stream (for a server's graceful shutdown: a stream
    /// left open would keep it waiting) and stops sampling.
    pub fn close(&self) {
        self.shared.closed.send_replace(true);
        self.shared.wake.notify_one();
    }

    /// The latest overview, sampling now if there is none yet or it is
    /// older than the interval.
    pub fn overview(&self) -> Arc<Overview> {
        self.shared.touch();
        let fresh = {
            let state = lock(&self.shared.state);
            match (&state.overview, state.previous_at) {
                (Some(o), Some(at)) if at.elapsed() < self.shared.config.interval => {
                    Some(o.clone())
                }
                _ => None,
            }
        };
        fresh.unwrap_or_else(|| self.shared.sample())
    }

    /// A supervisor's children (`None`: the top-level actors), grouped by
    /// kind, with one page of them (of `kind` only, if given), busiest
    /// first.
    pub fn children(
        &self,
        parent: Option<ActorId>,
        kind: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Children {
        self.shared.touch();
        let mut groups: HashMap<&'static str, usize> = HashMap::new();
        let mut matching = Vec::new();
        let mut total = 0;
        self.shared.system.for_each_actor(|a| {
            if a.parent != parent {
                return;
            }
            *groups.entry(a.kind).or_default() += 1;
            if kind.is_none_or(|k| k == a.kind) {
                total += 1;
                // An empty page (the groups alone) copies no samples.
                if limit > 0 {
                    matching.push(a);
                }
            }
        });
        let rows = self.shared.rows(matching, offset, limit);
        let mut groups: Vec<Group> = groups
            .into_iter()
            .map(|(kind, count)| Group {
                kind,
                short: short_kind(kind),
                count,
            })
            .collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(b.kind)));
        Children {
            groups,
            actors: rows,
            total,
        }
    }

    /// One actor by its serial on this node, with its latest failure and
    /// its children by kind; `None` if it is not alive (or not observed).
    pub fn actor(&self, serial: u64) -> Option<ActorDetail> {
        self.shared.touch();
        let id = ActorId::on(&self.shared.system.node(), serial)?;
        let details = self.shared.system.actor_details(id)?;
        let row = self
            .shared
            .rows(vec![details.sample], 0, 1)
            .pop()
            .expect("one sample makes one row");
        let children = self.children(Some(id), None, 0, 0).groups;
        let parent_label =
            details
                .sample
                .parent
                .map(|parent| match self.shared.system.actor_details(parent) {
                    Some(p) => match p.names.first() {
                        Some(name) => name.clone(),
                        None => format!("{} {parent}", short_kind(p.sample.kind)),
                    },
                    None => parent.to_string(),
                });
        Some(ActorDetail {
            row,
            names: details.names,
            parent_label,
            last_failure: details.last_failure.map(|r| r.to_string()),
            children,
        })
    }

    /// Actors whose registered name or kind contains `query` (case
    /// insensitive), at most `limit`, named ones first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<ActorRow> {
        self.shared.touch();
        let query = query.to_lowercase();
        if query.is_empty() {
            return Vec::new();
        }
        let named = self.shared.names(true);
        let mut by_name = Vec::new();
        let mut by_kind = Vec::new();
        self.shared.system.for_each_actor(|a| {
            if by_name.len() >= limit {
                return;
            }
            if named
                .get(&a.id)
                .is_some_and(|n| n.to_lowercase().contains(&query))
            {
                by_name.push(a);
            } else if by_kind.len() < limit && a.kind.to_lowercase().contains(&query) {
                by_kind.push(a);
            }
        });
        by_name.extend(by_kind);
        by_name.truncate(limit);
        self.shared.rows_with_names(by_name, &named, 0, limit)
    }
}

impl Shared {
    pub(crate) fn touch(&self) {
        let first = lock(&self.state)
            .last_request
            .replace(Instant::now())
            .is_none();
        if first {
            self.wake.notify_one();
        }
    }

    fn watched(&self) -> bool {
        self.overviews.receiver_count() > 0
            || lock(&self.state)
                .last_request
                .is_some_and(|at| at.elapsed() < IDLE_AFTER)
    }

    /// Each sample's message rate at the latest sample (0 if untracked).
    pub(crate) fn rates_of(&self, samples: &[ActorSample]) -> Vec<f64> {
        let state = lock(&self.state);
        samples
            .iter()
            .map(|s| state.rates.get(&s.id).copied().unwrap_or(0.0))
            .collect()
    }

    /// Rows for `samples`, busiest first, from `offset`.
    fn rows(&self, samples: Vec<ActorSample>, offset: usize, limit: usize) -> Vec<ActorRow> {
        let named = self.names(true);
        self.rows_with_names(samples, &named, offset, limit)
    }

    fn rows_with_names(
        &self,
        samples: Vec<ActorSample>,
        named: &HashMap<ActorId, String>,
        offset: usize,
        limit: usize,
    ) -> Vec<ActorRow> {
        let rates = self.rates_of(&samples);
        let rated: Vec<(ActorSample, f64)> = samples.into_iter().zip(rates).collect();
        busiest(rated, offset.saturating_add(limit))
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|(s, rate)| row(s, rate, named.get(&s.id).cloned()))
            .collect()
    }

    /// Registered names by actor; empty without asking the registry when
    /// no name is `wanted`.
    pub(crate) fn names(&self, wanted: bool) -> HashMap<ActorId, String> {
        if !wanted {
            return HashMap::new();
        }
        self.system
            .registered_names()
            .into_iter()
            .map(|(name, id)| (id, name))
            .collect()
    }

    /// Takes a sample: rates since the previous one, the overview, and
    /// publishes it to the live streams.
    fn sample(&self) -> Arc<Overview> {
        let metrics: RuntimeMetrics = self.system.metrics();
        let now = Instant::now();
        let mut samples = Vec::new();
        let mut actors = 0usize;
        let limit = self.config.tracked_actors;
        self.system.for_each_actor(|a| {
            actors += 1;
            if samples.len() < limit {
                samples.push(a);
            }
        });
        let hottest_sampled = actors > samples.len();
        let mut state = lock(&self.state);
        let elapsed = state
            .previous_at
            .map(|at| now.saturating_duration_since(at).as_secs_f64())
            .filter(|s| *s > 0.0);
        let mut previous = HashMap::with_capacity(samples.len());
        let mut rates = HashMap::with_capacity(samples.len());
        for s in &samples {
            previous.insert(s.id, s.messages_handled);
            if let (Some(secs), Some(before)) = (elapsed, state.previous.get(&s.id)) {
                let rate = s.messages_handled.saturating_sub(*before) as f64 / secs;
                rates.insert(s.id, rate);
            }
        }
        let mut kind_rates = HashMap::new();
        let mut previous_kinds = HashMap::new();
        for k in &metrics.kinds {
            previous_kinds.insert(k.kind, k.messages_handled);
            if let (Some(secs), Some(before)) = (elapsed, state.previous_kinds.get(k.kind)) {
                kind_rates.insert(
                    k.kind,
                    k.messages_handled.saturating_sub(*before) as f64 / secs,
                );
            }
        }
        state.previous = previous;
        state.rates = rates;
        state.previous_kinds = previous_kinds;
        state.kind_rates = kind_rates;
        state.previous_at = Some(now);

        let mut hot: Vec<(ActorSample, f64)> = samples
            .iter()
            .map(|s| (*s, state.rates.get(&s.id).copied().unwrap_or(0.0)))
            .filter(|(_, rate)| *rate > 0.0)
            .collect();
        hot.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.id.cmp(&b.0.id)));
        hot.truncate(self.config.hottest);
        let mut kinds: Vec<KindRow> = metrics
            .kinds
            .iter()
            .filter(|k| k.alive > 0 || k.messages_handled > 0)
            .map(|k| KindRow {
                kind: k.kind,
                short: short_kind(k.kind),
                alive: k.alive,
                spawned: k.spawned,
                restarts: k.restarts,
                failures: k.failures,
                handled: k.messages_handled,
                rate: state.kind_rates.get(k.kind).copied().unwrap_or(0.0),
                mailbox_depth: k.mailbox_depth,
                max_mailbox_depth: k.max_mailbox_depth,
            })
            .collect();
        kinds.sort_by(|a, b| b.alive.cmp(&a.alive).then(a.kind.cmp(b.kind)));
        let recent_dead_letters = state.dead_letters.iter().rev().cloned().collect();
        let cluster = state.cluster.clone();
        #[cfg(feature = "remote")]
        let network = self
            .remote
            .get()
            .map(|remote| network_panel(remote, &mut state.previous_traffic, elapsed));
        #[cfg(not(feature = "remote"))]
        let network = None;
        drop(state);

        let named = self.names(!hot.is_empty());
        let hottest = hot
            .into_iter()
            .map(|(s, rate)| row(s, rate, named.get(&s.id).cloned()))
            .collect();
        let dead = metrics.dead_letters;
        let overview = Arc::new(Overview {
            node: self.system.node().to_string(),
            observing: metrics.observing,
            uptime_s: metrics.uptime.as_secs_f64(),
            actors: metrics.kinds.iter().map(|k| k.alive).sum(),
            messages_per_s: kinds.iter().map(|k| k.rate).sum(),
            workers: Workers {
                total: metrics.workers.total,
                busy: metrics.workers.busy,
                searching: metrics.workers.searching,
                parked: metrics.workers.parked,
                steals: metrics.workers.steals,
            },
            timers_armed: metrics.timers_armed,
            dead_letters: DeadLetterTotals {
                total: dead.total(),
                recipient_stopped: dead.recipient_stopped,
                discarded_at_stop: dead.discarded_at_stop,
                lost: dead.lost,
                mailbox_full: dead.mailbox_full,
            },
            kinds,
            hottest,
            hottest_sampled,
            recent_dead_letters,
            cluster,
            network,
        });
        lock(&self.state).overview = Some(overview.clone());
        if self.overviews.receiver_count() > 0 {
            if let Ok(json) = serde_json::to_string(&*overview) {
                let _ = self.overviews.send(json.into());
            }
        }
        overview
    }
}

/// The network panel, with each peer's byte rates since the previous
/// sample (`elapsed` seconds ago).
#[cfg(feature = "remote")]
fn network_panel(
    remote: &troubadour_remote::RemoteView,
    previous: &mut HashMap<(String, u64), (u64, u64)>,
    elapsed: Option<f64>,
) -> NetworkPanel {
    use troubadour_remote::RemoteStats;
    let stats = remote.stats();
    let mut now = HashMap::new();
    let peers = remote
        .peers()
        .into_iter()
        .map(|p| {
            let key = (p.node.clone(), p.incarnation);
            let rate = |before: Option<u64>, total: u64| match (elapsed, before) {
                (Some(secs), Some(before)) => total.saturating_sub(before) as f64 / secs,
                _ => 0.0,
            };
            let before = previous.get(&key);
            let row = PeerRow {
                incarnation: format!("{:#x}", p.incarnation),
                address: p.address.map(|a| a.to_string()),
                state: p.state.as_str(),
                tls: p.tls,
                failed_attempts: p.failed_attempts,
                connections: p.connections,
                sent_per_s: rate(before.map(|b| b.0), p.bytes_sent),
                received_per_s: rate(before.map(|b| b.1), p.bytes_received),
                bytes_sent: p.bytes_sent,
                bytes_received: p.bytes_received,
                frames_sent: p.frames_sent,
                frames_received: p.frames_received,
                node: p.node,
            };
            now.insert(key, (row.bytes_sent, row.bytes_received));
            row
        })
        .collect();
    *previous = now;
    NetworkPanel {
        frames_refused: stats.frames_refused().iter().map(|(_, n)| n).sum(),
        connections_lost: RemoteStats::get(&stats.connections_lost),
        handshakes_refused: RemoteStats::get(&stats.handshakes_refused),
        peers,
    }
}

#[cfg(feature = "cluster")]
fn cluster_panel(status: troubadour_cluster::ClusterStatus) -> ClusterPanel {
    let mut nodes: Vec<ClusterNode> = status
        .members
        .iter()
        .map(|name| ClusterNode {
            name: name.clone(),
            up: true,
            lease_valid: false,
            shards: 0,
            here: *name == status.node,
        })
        .collect();
    for owner in &status.owners {
        match nodes.iter_mut().find(|n| n.name == owner.node) {
            Some(node) => {
                node.shards += owner.shards;
                node.lease_valid |= owner.lease_valid;
            }
            None => nodes.push(ClusterNode {
                name: owner.node.clone(),
                up: false,
                lease_valid: owner.lease_valid,
                shards: owner.shards,
                here: owner.node == status.node,
            }),
        }
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    ClusterPanel {
        node: status.node,
        lease_valid: status.lease_valid,
        lease_left_ms: status.lease_left_ms,
        leaving: status.leaving,
        balanced: status.balanced,
        entities: status.entities,
        waiting: status.waiting,
        failovers: status.failovers,
        nodes,
    }
}

/// The `end` busiest of `rated` (by rate, then messages handled), busiest
/// first. For a page of a million actors: the page's end is selected in
/// linear time, and only what is shown and what precedes it is sorted.
pub(crate) fn busiest(mut rated: Vec<(ActorSample, f64)>, end: usize) -> Vec<(ActorSample, f64)> {
    let busiest_first = |a: &(ActorSample, f64), b: &(ActorSample, f64)| {
        b.1.total_cmp(&a.1)
            .then(b.0.messages_handled.cmp(&a.0.messages_handled))
            .then(a.0.id.cmp(&b.0.id))
    };
    let end = end.min(rated.len());
    if end == 0 {
        return Vec::new();
    }
    if end < rated.len() {
        rated.select_nth_unstable_by(end - 1, busiest_first);
        rated.truncate(end);
    }
    rated.sort_by(busiest_first);
    rated
}

fn row(s: ActorSample, rate: f64, name: Option<String>) -> ActorRow {
    ActorRow {
        id: s.id.serial(),
        label: s.id.to_string(),
        name,
        kind: s.kind,
        short: short_kind(s.kind),
        parent: s.parent.map(|p| p.serial()),
        handled: s.messages_handled,
        rate,
        mailbox_depth: s.mailbox_depth,
        restarts: s.restarts,
        failures: s.failures,
        age_s: s.age.as_secs_f64(),
    }
}

/// Samples at the configured interval while watched; sleeps otherwise.
async fn sample_while_watched(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        if *s.closed.borrow() {
            return;
        }
        if s.watched() {
            let started = Instant::now();
            #[cfg(feature = "cluster")]
            if let Some(cluster) = s.cluster.get() {
                let panel = cluster.status().await.ok().map(cluster_panel);
                lock(&s.state).cluster = panel;
            }
            s.sample();
            // A sample walks every live actor: with a million it takes a
            // good part of a second. Sampling then slows down so that it
            // never takes more than a twentieth of one core.
            let interval = s.config.interval.max(started.elapsed() * 20);
            drop(s);
            tokio::time::sleep(interval).await;
        } else {
            let woken = async {
                s.wake.notified().await;
            };
            // Re-checked now and then, so a dropped observer ends the task.
            let _ = tokio::time::timeout(IDLE_AFTER, woken).await;
        }
    }
}

/// Keeps the latest dead letters for the live list.
async fn collect_dead_letters(shared: std::sync::Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let Ok(mut inbox) = s.system.inbox::<DeadLetter>() else {
        return;
    };
    s.system.subscribe_dead_letters(inbox.recipient());
    let started = Instant::now() - s.system.metrics().uptime;
    let keep = s.config.recent_dead_letters;
    let mut closed = s.closed.subscribe();
    drop(s);
    loop {
        let received = tokio::select! {
            r = inbox.recv() => r,
            _ = closed.wait_for(|c| *c) => return,
        };
        let Some(s) = shared.upgrade() else { return };
        let letter = received.message();
        let mut state = lock(&s.state);
        if state.dead_letters.len() >= keep {
            state.dead_letters.pop_front();
        }
        state.dead_letters.push_back(DeadLetterRow {
            at_s: started.elapsed().as_secs_f64(),
            recipient: letter.recipient.to_string(),
            message_type: letter.message_type,
            reason: letter.reason.as_str(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::short_kind;

    #[test]
    fn kinds_are_shortened_to_their_last_segment_with_generics_kept() {
        assert_eq!(short_kind("realtime_map::fleet::Vehicle"), "Vehicle");
        assert_eq!(short_kind("Plain"), "Plain");
        assert_eq!(
            short_kind("troubadour::api::fn_actor::FnActor<app::S, app::M>"),
            "FnActor<app::S, app::M>"
        );
    }
}
