//! One node of the service as a cluster: the actor system on the network
//! (mutual TLS), the lease store and the state store, the vehicles as
//! virtual actors, a share of the MQTT feed, and the same HTTP API, which
//! answers for every vehicle of the cluster whichever node is asked.

use crate::app::{self, Dashboard};
use crate::broker::BrokerError;
use crate::fleet::MapBatch;
use crate::http::{self, Shared, Vehicles};
use crate::ingest::{self, Broker, Subscription};
use crate::metrics::Metrics;
use crate::sharded::{
    InBox, MapNode, NodeBatch, Summarize, VirtualVehicle, IN_BOX_GROUP, SUMMARY_GROUP,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;
use troubadour::{ActorSystem, ShutdownError, SpawnOptions};
use troubadour_cluster::discovery::{DnsSeeds, StaticSeeds};
use troubadour_cluster::{
    with_cluster, Cluster, LeaseStore, MembershipConfig, PostgresLeaseStore, ShardCount,
    SqliteLeaseStore,
};
use troubadour_observe::Observer;
use troubadour_persistence::{PostgresStore, SqliteStore, WriteBehind};
use troubadour_remote::{Remote, Security, TlsConfig};

/// Where a node keeps leases or states: a SQLite file (the node processes
/// of one machine share it) or a PostgreSQL database (across machines).
#[derive(Clone, Debug, PartialEq)]
pub enum StoreLocation {
    /// `sqlite:<path>`.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`.
    Postgres(String),
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    /// ```
    /// use realtime_map::node::StoreLocation;
    /// assert_eq!(
    ///     "sqlite:/var/lib/map/leases.db".parse(),
    ///     Ok(StoreLocation::Sqlite("/var/lib/map/leases.db".into()))
    /// );
    /// assert!(matches!("postgres://map@db/map".parse(), Ok(StoreLocation::Postgres(_))));
    /// assert!("mysql://db".parse::<StoreLocation>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(format!("`{s}` names no file; write sqlite:<path>"));
            }
            return Ok(StoreLocation::Sqlite(path.into()));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(s.to_string()));
        }
        Err(format!(
            "`{s}` is not a store; write sqlite:<path> or postgres://user@host/db"
        ))
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            // Never print a password.
            StoreLocation::Postgres(url) => match url.split_once('@') {
                Some((_, host)) => write!(f, "postgres://…@{host}"),
                None => f.write_str(url),
            },
        }
    }
}

/// The node's certificate, key and the cluster's CA, as PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// This node's certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The cluster's CA certificate, which every node's certificate is
    /// signed by.
    pub ca: PathBuf,
}

impl TlsFiles {
    /// `<name>.pem`, `<name>.key` and `ca.pem` in `dir` (the layout the
    /// local cluster writes).
    pub fn in_dir(dir: &std::path::Path, name: &str) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join("ca.pem"),
        }
    }
}

/// Everything a cluster node can be told.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The node's name, unique in the cluster.
    pub name: String,
    /// The cluster's name: nodes of another cluster are refused.
    pub cluster: String,
    /// HTTP address. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where other nodes reach this one (mutual TLS).
    pub cluster_listen: SocketAddr,
    /// The address other nodes are told to dial, when `cluster_listen` is
    /// every interface.
    pub cluster_advertise: Option<SocketAddr>,
    /// Nodes to join through.
    pub seeds: Seeds,
    /// Certificates.
    pub tls: TlsFiles,
    /// Identify dialled nodes by the node name in their certificate, not
    /// by the address dialled (pods).
    pub tls_identify_by_node_name: bool,
    /// Where shard leases live: the one authority on who owns what.
    pub lease_store: StoreLocation,
    /// Where the vehicles' states are flushed.
    pub state_store: StoreLocation,
    /// The broker positions come from (shared with the other nodes).
    pub mqtt: Broker,
    /// A vehicle without a message for this long is passivated.
    pub idle: Duration,
    /// How often vehicles' states are flushed.
    pub flush_every: Duration,
    /// The node lease's time to live: a lost node's vehicles answer again
    /// from other nodes within about this.
    pub lease: Duration,
    /// Shards (the same on every node).
    pub shards: ShardCount,
    /// How many nodes the cluster is expected to have (tunes failure
    /// detection).
    pub expected_nodes: u32,
    /// Worker threads of the actor system; `None` for half the cores (at
    /// least one).
    pub workers: Option<usize>,
    /// Where the runtime's dashboard is served.
    pub dashboard: Dashboard,
}

/// Where a node finds the others to join through.
#[derive(Clone, Debug)]
pub enum Seeds {
    /// These addresses (their `cluster_listen`); empty for the first node.
    Static(Vec<SocketAddr>),
    /// The A/AAAA records of `name` (a Kubernetes headless Service), at
    /// `port`; asked again while the node sees no other member.
    Dns {
        /// The name to resolve.
        name: String,
        /// The nodes' cluster port.
        port: u16,
    },
}

/// Why a node did not start.
#[derive(Debug)]
pub enum NodeError {
    /// The HTTP address could not be bound.
    Http(SocketAddr, std::io::Error),
    /// The actor system's threads could not be started.
    Actors(troubadour::BuildError),
    /// A certificate, key or CA file could not be read or used.
    Tls(String),
    /// The network layer did not start.
    Remote(String),
    /// The lease or state store could not be opened.
    Store(String),
    /// The cluster did not start.
    Cluster(String),
    /// An actor of the node could not be spawned.
    Spawn(troubadour::SpawnError),
    /// The subscription to the broker was not acknowledged in time.
    NotSubscribed(Broker),
    /// The embedded broker did not start.
    Broker(BrokerError),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Http(addr, e) => write!(
                f,
                "cannot serve HTTP on {addr}: {e}; pick another address with --listen"
            ),
            NodeError::Actors(e) => write!(f, "cannot start the actor system: {e}"),
            NodeError::Tls(e) => write!(
                f,
                "cannot use the TLS files: {e}; give --tls-cert, --tls-key and --tls-ca (PEM)"
            ),
            NodeError::Remote(e) => write!(
                f,
                "cannot join the network: {e}; pick another --cluster-listen address"
            ),
            NodeError::Store(e) => write!(f, "{e}"),
            NodeError::Cluster(e) => write!(f, "cannot start the cluster: {e}"),
            NodeError::Spawn(e) => write!(f, "cannot start the node's actors: {e}"),
            NodeError::NotSubscribed(b) => write!(
                f,
                "no subscription to vehicle positions on {b} within 10 s; is an MQTT broker running there?"
            ),
            NodeError::Broker(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NodeError {}

/// A running cluster node.
pub struct Node {
    name: String,
    http: SocketAddr,
    cluster_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
    behind: WriteBehind,
    metrics: Arc<Metrics>,
    observer: Observer,
    dashboard: SocketAddr,
}

/// The MQTT shared subscription's group: every node takes a share.
const SHARE_GROUP: &str = "realtime-map";

impl Node {
    /// Starts the node; returns once it is on the network, in the cluster,
    /// subscribed to its share of the feed and serving HTTP. Call from a
    /// tokio runtime.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let (listener, http) = app::bind_http(config.listen)
            .await
            .map_err(|e| NodeError::Http(config.listen, e))?;
        let system =
            app::actor_system(Some(&config.name), config.workers).map_err(NodeError::Actors)?;
        match Node::start_on(&system, config, listener, http).await {
            Ok(parts) => Ok(parts.into_node(system)),
            Err(e) => {
                let _ =
                    tokio::task::spawn_blocking(move || system.shutdown(Duration::from_secs(5)))
                        .await;
                Err(e)
            }
        }
    }

    async fn start_on(
        system: &ActorSystem,
        config: NodeConfig,
        listener: tokio::net::TcpListener,
        http: SocketAddr,
    ) -> Result<Parts, NodeError> {
        let mut tls = read_tls(&config.tls)?;
        if config.tls_identify_by_node_name {
            tls = tls.identify_peers_by_node_name();
        }
        let mut remote = with_cluster(Remote::builder(&config.cluster, Security::Tls(tls)))
            .register::<crate::hfp::Position>()
            .register::<crate::fleet::GetState>()
            .register::<NodeBatch>()
            .register::<InBox>()
            .register::<Summarize>()
            .listen(config.cluster_listen);
        if let Some(addr) = config.cluster_advertise {
            remote = remote.advertise(addr);
        }
        let remote = remote
            .start(&system.handle())
            .await
            .map_err(|e| NodeError::Remote(e.to_string()))?;
        let cluster_addr = remote
            .advertised_addr()
            .ok_or_else(|| NodeError::Remote("no listen address".into()))?;

        let (behind, store_stats) = match &config.state_store {
            StoreLocation::Sqlite(path) => {
                let store = SqliteStore::open(path).map_err(|e| {
                    NodeError::Store(format!(
                        "cannot open the state store {}: {e}",
                        path.display()
                    ))
                })?;
                let stats = store.stats();
                (
                    WriteBehind::start(store, config.flush_every, system.tokio_handle()),
                    stats,
                )
            }
            StoreLocation::Postgres(url) => {
                let store = PostgresStore::connect(url).await.map_err(|e| {
                    NodeError::Store(format!(
                        "cannot reach the state store {}: {e}",
                        config.state_store
                    ))
                })?;
                let stats = store.stats();
                (
                    WriteBehind::start(store, config.flush_every, system.tokio_handle()),
                    stats,
                )
            }
        };
        let leases: Arc<dyn LeaseStore> = match &config.lease_store {
            StoreLocation::Sqlite(path) => {
                Arc::new(SqliteLeaseStore::open(path).map_err(|e| NodeError::Store(e.to_string()))?)
            }
            StoreLocation::Postgres(url) => Arc::new(
                PostgresLeaseStore::connect(url)
                    .await
                    .map_err(|e| NodeError::Store(e.to_string()))?,
            ),
        };

        let metrics = Arc::new(Metrics::default());
        let node_name: Arc<str> = config.name.as_str().into();
        let (updates, _) = broadcast::channel::<MapBatch>(16);
        let started = Arc::new(OnceLock::new());
        let map = {
            let (name, url, updates, started, metrics) = (
                node_name.clone(),
                format!("http://{http}"),
                updates.clone(),
                started.clone(),
                metrics.clone(),
            );
            system
                .spawn_factory_with_options(SpawnOptions::new().name("map"), move || {
                    MapNode::new(
                        name.clone(),
                        url.clone(),
                        updates.clone(),
                        started.clone(),
                        metrics.clone(),
                    )
                })
                .map_err(NodeError::Spawn)?
        };
        let cluster = {
            let (behind, map, metrics, node) = (
                behind.clone(),
                map.clone(),
                metrics.clone(),
                node_name.clone(),
            );
            let before_handoff = behind.clone();
            let builder = Cluster::builder(leases)
                .shards(config.shards)
                .lease(
                    config.lease,
                    (config.lease / 10).max(Duration::from_millis(100)),
                )
                .membership(MembershipConfig::expected_size(config.expected_nodes))
                .passivate_after(Some(config.idle))
                .group::<NodeBatch>()
                .group::<InBox>()
                .group::<Summarize>()
                .entity_in_shard::<VirtualVehicle>(move |id, at| {
                    VirtualVehicle::new(
                        id,
                        at.epoch,
                        node.clone(),
                        &behind,
                        map.clone(),
                        metrics.clone(),
                    )
                })
                // A vehicle's next owner reads what it left here.
                .before_handoff(move || {
                    let behind = before_handoff.clone();
                    Box::pin(async move {
                        if let Err(e) = behind.flush().await {
                            tracing::warn!("flush before a handoff failed: {e}");
                        }
                    })
                });
            let builder = match &config.seeds {
                Seeds::Static(addrs) => builder.discovery(StaticSeeds::new(addrs.iter().copied())),
                Seeds::Dns { name, port } => {
                    builder.discovery(DnsSeeds::addresses(name.clone(), *port).map_err(|e| {
                        NodeError::Cluster(format!("cannot look up seeds in DNS: {e}"))
                    })?)
                }
            };
            builder
                .start(&system.handle(), &remote)
                .await
                .map_err(|e| NodeError::Cluster(e.to_string()))?
        };
        let _ = started.set(cluster.clone());
        // The map feed (MAP_GROUP) is joined by the MapNode itself while
        // its node has browsers open.
        for joined in [
            cluster.group::<InBox>(IN_BOX_GROUP).join(&map),
            cluster.group::<Summarize>(SUMMARY_GROUP).join(&map),
        ] {
            joined.map_err(|e| NodeError::Cluster(e.to_string()))?;
        }

        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let (subscribed, is_subscribed) = oneshot::channel();
        let (to, m) = (cluster.clone(), metrics.clone());
        tasks.push(tokio::spawn(ingest::run(
            config.mqtt.clone(),
            Subscription::Shared(SHARE_GROUP.into()),
            move |p| {
                m.positions_routed.fetch_add(1, Relaxed);
                let id = p.id.to_string();
                if to.entity::<VirtualVehicle>(id).tell(p).is_err() {
                    // Refused only while this node shuts down, or when more
                    // positions wait for an owner than the buffer holds.
                    m.positions_handled.fetch_add(1, Relaxed);
                }
            },
            metrics.clone(),
            subscribed,
            stopped.clone(),
        )));
        if tokio::time::timeout(Duration::from_secs(10), is_subscribed)
            .await
            .map_or(true, |r| r.is_err())
        {
            let _ = stop.send(true);
            return Err(NodeError::NotSubscribed(config.mqtt));
        }
        tasks.push(tokio::spawn(app::count_rate(
            metrics.clone(),
            stopped.clone(),
        )));
        let observer = Observer::new(system.handle())
            .with_remote(&remote)
            .with_cluster(cluster.clone())
            .with_store(store_stats);
        let (mounted, dashboard) =
            app::start_dashboard(&observer, config.dashboard, http, &mut tasks)
                .await
                .map_err(|(addr, e)| NodeError::Http(addr, e))?;
        let router = http::router(Shared {
            system: system.handle(),
            vehicles: Vehicles::Cluster(cluster.clone()),
            metrics: metrics.clone(),
            updates,
            stop: stopped.clone(),
            observer: observer.clone(),
            mount_dashboard: mounted,
            debug_faults: false,
        });
        tasks.push(app::serve_http(listener, router, stopped));
        Ok(Parts {
            name: config.name,
            http,
            cluster_addr,
            stop,
            tasks,
            remote,
            cluster,
            behind,
            metrics,
            observer,
            dashboard,
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where HTTP is served.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// Where other nodes reach this one.
    pub fn cluster_addr(&self) -> SocketAddr {
        self.cluster_addr
    }

    /// The cluster, as this node takes part in it.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The node's counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Where the runtime's dashboard is.
    pub fn dashboard_url(&self) -> String {
        app::dashboard_url(self.dashboard, self.http)
    }

    /// Leaves the cluster gracefully: stops taking positions and requests,
    /// hands every shard over (its vehicles' states flushed first), writes
    /// what is pending, then stops the actors.
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
        let _ = self.stop.send(true);
        self.observer.close();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        if let Err(e) = self.cluster.leave().await {
            tracing::warn!("leaving the cluster: {e}");
        }
        if let Err(e) = self.behind.flush().await {
            tracing::warn!("last flush of the vehicles' states failed: {e}");
        }
        self.remote.shutdown();
        let system = self.system;
        tokio::task::spawn_blocking(move || system.shutdown(Duration::from_secs(10)))
            .await
            .unwrap_or(Ok(()))
    }
}

/// A node but its actor system (which the caller holds, to stop it if
/// starting fails).
struct Parts {
    name: String,
    http: SocketAddr,
    cluster_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    remote: Remote,
    cluster: Cluster,
    behind: WriteBehind,
    metrics: Arc<Metrics>,
    observer: Observer,
    dashboard: SocketAddr,
}

impl Parts {
    fn into_node(self, system: ActorSystem) -> Node {
        Node {
            name: self.name,
            http: self.http,
            cluster_addr: self.cluster_addr,
            stop: self.stop,
            tasks: self.tasks,
            system,
            remote: self.remote,
            cluster: self.cluster,
            behind: self.behind,
            metrics: self.metrics,
            observer: self.observer,
            dashboard: self.dashboard,
        }
    }
}

fn read_tls(files: &TlsFiles) -> Result<TlsConfig, NodeError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| NodeError::Tls(format!("{}: {e}", path.display())))
    };
    TlsConfig::from_pem(&read(&files.cert)?, &read(&files.key)?, &read(&files.ca)?)
        .map_err(|e| NodeError::Tls(e.to_string()))
}
