//! Wiring: the actor system, the broker (embedded or not), the MQTT
//! subscription, the simulator and the HTTP server, started and stopped
//! as one.

use crate::broker::{self, BrokerError};
use crate::fleet::Fleet;
use crate::http::{self, Shared};
use crate::ingest::{self, Broker};
use crate::metrics::Metrics;
use crate::simulator::{self, Simulation};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;
use troubadour::{ActorRef, ActorSystem, ShutdownError, SpawnError, SpawnOptions, SystemHandle};
use troubadour_observe::Observer;

/// The simulated feed.
#[derive(Clone, Debug)]
pub struct SimulatorConfig {
    /// How many buses.
    pub vehicles: usize,
    /// Places and moves the buses; the same seed gives the same buses.
    pub seed: u64,
    /// Each bus reports once per period.
    pub period: Duration,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            vehicles: 2_000,
            seed: 2026,
            period: Duration::from_secs(1),
        }
    }
}

/// Where the runtime's dashboard (and its own `/metrics`) is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dashboard {
    /// At `/dashboard` on the service's HTTP address.
    #[default]
    Mounted,
    /// On an address of its own (keep it on loopback or a private
    /// network), and not on the service's address.
    Listen(SocketAddr),
}

/// Everything the service can be told.
#[derive(Clone, Debug)]
pub struct Config {
    /// HTTP address. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// An external broker; `None` runs the embedded one on `broker_listen`.
    pub mqtt: Option<Broker>,
    /// Where the embedded broker listens. Port 0 picks a free port.
    pub broker_listen: SocketAddr,
    /// Publish simulated buses to the broker; `None` for real feeds only.
    pub simulator: Option<SimulatorConfig>,
    /// A vehicle without a position for this long is passivated.
    pub idle: Duration,
    /// Worker threads of the actor system; `None` for half the cores (at
    /// least one).
    pub workers: Option<usize>,
    /// Where the runtime's dashboard is served.
    pub dashboard: Dashboard,
    /// Serve `POST /debug/panic?id=`, which makes a vehicle's actor panic
    /// (its supervisor restarts it): for trying the dashboard and
    /// supervision out, never in production.
    pub debug_faults: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: ([127, 0, 0, 1], 8080).into(),
            mqtt: None,
            broker_listen: ([127, 0, 0, 1], 1883).into(),
            simulator: Some(SimulatorConfig::default()),
            idle: Duration::from_secs(60),
            workers: None,
            dashboard: Dashboard::Mounted,
            debug_faults: false,
        }
    }
}

/// Why the service did not start.
#[derive(Debug)]
pub enum StartError {
    /// The HTTP address could not be bound.
    Http(SocketAddr, std::io::Error),
    /// The actor system's threads could not be started.
    Actors(troubadour::BuildError),
    /// The fleet actor could not be spawned.
    Spawn(SpawnError),
    /// The embedded broker did not start.
    Broker(BrokerError),
    /// The subscription to the broker was not acknowledged in time.
    NotSubscribed(Broker),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Http(addr, e) => write!(
                f,
                "cannot serve HTTP on {addr}: {e}; pick another address with --listen"
            ),
            StartError::Actors(e) => write!(f, "cannot start the actor system: {e}"),
            StartError::Spawn(e) => write!(f, "cannot start the fleet actor: {e}"),
            StartError::Broker(e) => write!(f, "{e}"),
            StartError::NotSubscribed(b) => write!(
                f,
                "no subscription to vehicle positions on {b} within 10 s; is an MQTT broker running there?"
            ),
        }
    }
}

impl std::error::Error for StartError {}

/// The running service.
pub struct App {
    http: SocketAddr,
    broker: Broker,
    vehicle_ids: Vec<String>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    system: ActorSystem,
    fleet: ActorRef<Fleet>,
    metrics: Arc<Metrics>,
    observer: Observer,
    dashboard: SocketAddr,
}

impl App {
    /// Starts everything; returns once the service is subscribed to the
    /// broker and accepting HTTP connections. Call from a tokio runtime.
    pub async fn start(config: Config) -> Result<App, StartError> {
        let (listener, http) = bind_http(config.listen)
            .await
            .map_err(|e| StartError::Http(config.listen, e))?;
        let system = actor_system(None, config.workers).map_err(StartError::Actors)?;
        let metrics = Arc::new(Metrics::default());
        // Browsers that fall more than this many batches behind skip ahead.
        let (updates, _) = broadcast::channel(16);
        let fleet = {
            let (idle, metrics, updates) = (config.idle, metrics.clone(), updates.clone());
            system
                .spawn_factory_with_options(SpawnOptions::new().name("fleet"), move || {
                    Fleet::new(idle, metrics.clone(), updates.clone())
                })
                .map_err(StartError::Spawn)?
        };

        let broker = match config.mqtt.clone() {
            Some(b) => b,
            None => {
                let listen = config.broker_listen;
                let addr = tokio::task::spawn_blocking(move || broker::start(listen))
                    .await
                    .map_err(|e| StartError::Actors(std::io::Error::other(e).into()))?
                    .map_err(StartError::Broker)?;
                Broker {
                    host: addr.ip().to_string(),
                    port: addr.port(),
                }
            }
        };

        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let (subscribed, is_subscribed) = oneshot::channel();
        let (to, m) = (fleet.clone(), metrics.clone());
        tasks.push(tokio::spawn(ingest::run(
            broker.clone(),
            ingest::Subscription::All,
            move |p| ingest::to_fleet(&to, &m, p),
            metrics.clone(),
            subscribed,
            stopped.clone(),
        )));
        if tokio::time::timeout(Duration::from_secs(10), is_subscribed)
            .await
            .map_or(true, |r| r.is_err())
        {
            let _ = stop.send(true);
            system.shutdown(Duration::from_secs(5)).ok();
            return Err(StartError::NotSubscribed(broker));
        }

        let mut vehicle_ids = Vec::new();
        if let Some(sim) = &config.simulator {
            let simulation = Simulation::new(sim.vehicles, sim.seed);
            vehicle_ids = simulation.ids();
            tasks.extend(spawn_simulator(&broker, simulation, sim.period, &stopped));
        }
        tasks.push(tokio::spawn(count_rate(metrics.clone(), stopped.clone())));

        let observer = Observer::new(system.handle());
        let (mounted, dashboard) = start_dashboard(&observer, config.dashboard, http, &mut tasks)
            .await
            .map_err(|(addr, e)| StartError::Http(addr, e))?;
        let router = http::router(Shared {
            system: system.handle(),
            vehicles: http::Vehicles::Local(fleet.clone()),
            metrics: metrics.clone(),
            updates,
            stop: stopped.clone(),
            observer: observer.clone(),
            mount_dashboard: mounted,
            debug_faults: config.debug_faults,
        });
        tasks.push(serve_http(listener, router, stopped));

        Ok(App {
            http,
            broker,
            vehicle_ids,
            stop,
            tasks,
            system,
            fleet,
            metrics,
            observer,
            dashboard,
        })
    }

    /// Where the runtime's dashboard is (`/dashboard` on the HTTP address,
    /// or the root of its own address).
    pub fn dashboard_url(&self) -> String {
        dashboard_url(self.dashboard, self.http)
    }

    /// Where HTTP is served.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// The broker positions come from.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The ids of the simulated vehicles (empty without the simulator).
    pub fn vehicle_ids(&self) -> &[String] {
        &self.vehicle_ids
    }

    /// The service's counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The actor system, to look actors up.
    pub fn system(&self) -> SystemHandle {
        self.system.handle()
    }

    /// The fleet actor.
    pub fn fleet(&self) -> &ActorRef<Fleet> {
        &self.fleet
    }

    /// Stops taking positions and requests, lets open requests finish,
    /// then stops every actor (vehicles before the fleet).
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
        let _ = self.stop.send(true);
        // Open dashboards' live streams end, or the servers would wait.
        self.observer.close();
        for task in self.tasks {
            // Each task watches `stop`; the deadline covers a stuck client.
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let system = self.system;
        tokio::task::spawn_blocking(move || system.shutdown(Duration::from_secs(10)))
            .await
            .unwrap_or(Ok(()))
    }
}

/// Places the dashboard: mounted on the service's address (`http`), or
/// served on its own address. Returns whether to mount it, and where it
/// is.
pub(crate) async fn start_dashboard(
    observer: &Observer,
    place: Dashboard,
    http: SocketAddr,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<(bool, SocketAddr), (SocketAddr, std::io::Error)> {
    match place {
        Dashboard::Mounted => Ok((true, http)),
        Dashboard::Listen(addr) => {
            let (listener, bound) = bind_http(addr).await.map_err(|e| (addr, e))?;
            let serving = observer.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = serving.serve(listener).await {
                    tracing::error!("dashboard server stopped: {e}");
                }
            }));
            Ok((false, bound))
        }
    }
}

/// The dashboard's URL: under `/dashboard` when it shares the service's
/// address, else the root of its own.
pub(crate) fn dashboard_url(dashboard: SocketAddr, http: SocketAddr) -> String {
    if dashboard == http {
        format!("http://{http}/dashboard")
    } else {
        format!("http://{dashboard}/")
    }
}

/// Binds the HTTP address (port 0 picks one); the listener and where it is.
pub(crate) async fn bind_http(
    listen: SocketAddr,
) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// The service's actor system on the current tokio runtime, named `name`
/// in a cluster.
pub(crate) fn actor_system(
    name: Option<&str>,
    workers: Option<usize>,
) -> Result<ActorSystem, troubadour::BuildError> {
    // Vehicle actors do little per message; the HTTP runtime does most of
    // the work. On 2 cores, one actor worker served 72-80 k requests/s
    // against 63-67 k with two (three alternating 8 s wrk runs of the
    // benchmark's load): an idle worker searches for work briefly before
    // parking, and two searchers compete with the HTTP threads.
    let workers = workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    });
    // Observed, for the dashboard: one counter store per turn, nothing on
    // the message path (decision 0026).
    let mut builder = ActorSystem::builder()
        .tokio_handle(tokio::runtime::Handle::current())
        .worker_threads(workers)
        .observe();
    if let Some(name) = name {
        builder = builder.name(name);
    }
    builder.try_build()
}

/// Serves `router` on `listener` until `stopped` turns true, letting open
/// requests finish.
pub(crate) fn serve_http(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            let _ = stopped.wait_for(|s| *s).await;
        });
        if let Err(e) = serve.await {
            tracing::error!("HTTP server stopped: {e}");
        }
    })
}

/// Publishes `simulation` to `broker` once per `period` until `stopped`
/// turns true: the publishing task and the task that keeps its connection.
pub fn spawn_simulator(
    broker: &Broker,
    simulation: Simulation,
    period: Duration,
    stopped: &watch::Receiver<bool>,
) -> [JoinHandle<()>; 2] {
    let id = format!("realtime-map-simulator-{}", std::process::id());
    let (client, events) = ingest::client(broker, &id);
    let publisher = tokio::spawn(simulator::publish(
        client,
        simulation,
        period,
        stopped.clone(),
    ));
    let (broker, stop) = (broker.clone(), stopped.clone());
    let connection = tokio::spawn(async move {
        ingest::poll_until_stopped(events, &broker, "simulator", stop, |_| {}).await
    });
    [publisher, connection]
}

/// Samples positions handled per second into the metrics.
pub(crate) async fn count_rate(metrics: Arc<Metrics>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = metrics.positions_handled.load(Relaxed);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = metrics.positions_handled.load(Relaxed);
        metrics.positions_per_second.store(now - last, Relaxed);
        last = now;
    }
}
