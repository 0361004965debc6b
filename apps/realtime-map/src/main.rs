//! `realtime-map`: the live bus map service in one process; with
//! `--cluster N` as N node processes on loopback; with `--node` as one
//! node of a cluster (as an operator starts it on each machine); or
//! (`simulate`) only the simulated feed, published to a broker for
//! another service to consume.

use clap::{Args, Parser, Subcommand};
use realtime_map::app::{self, Config, Dashboard, SimulatorConfig};
use realtime_map::ingest::Broker;
use realtime_map::launcher::{self, LocalCluster, LocalClusterConfig};
use realtime_map::node::{Node, NodeConfig, Seeds, StoreLocation, TlsFiles};
use realtime_map::simulator::Simulation;
use realtime_map::App;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::watch;
use troubadour_cluster::ShardCount;

#[derive(Parser)]
#[command(
    version,
    about = "A live bus map: one troubadour actor per vehicle, positions over MQTT, answers over HTTP"
)]
struct Cli {
    /// HTTP address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Subscribe to this broker (mqtt://host:port) instead of running the embedded one.
    #[arg(long, value_name = "URL")]
    mqtt: Option<Broker>,
    /// Where the embedded broker listens (ignored with --mqtt).
    #[arg(long, default_value = "127.0.0.1:1883")]
    broker_listen: SocketAddr,
    /// Do not publish simulated buses (for a real feed on --mqtt).
    #[arg(long)]
    no_simulator: bool,
    /// Number of simulated buses.
    #[arg(long, default_value_t = 2_000)]
    vehicles: usize,
    /// Seed of the simulation (same seed, same buses).
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Passivate a vehicle after this long without a position (e.g. 60s, 500ms, 5m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    idle: Duration,
    /// Actor system worker threads (default: half the cores, at least one).
    #[arg(long)]
    workers: Option<usize>,
    /// Serve the runtime's dashboard (and its /metrics) on this address
    /// instead of at /dashboard on --listen; keep it on loopback or a
    /// private network.
    #[arg(long, value_name = "ADDR")]
    dashboard_listen: Option<SocketAddr>,
    /// Serve POST /debug/panic?id=<vehicle>, which makes that vehicle's
    /// actor panic (its supervisor restarts it), to watch supervision on
    /// the dashboard. Never in production.
    #[arg(long, conflicts_with_all = ["cluster", "node"])]
    debug_faults: bool,
    /// Run a local cluster of this many node processes on 127.0.0.1,
    /// 127.0.0.2, …, each serving HTTP on the --listen port of its own
    /// address; prints `node <n> pid <pid> http://<addr>:<port>` per node.
    #[arg(long, value_name = "N", conflicts_with = "node")]
    cluster: Option<usize>,
    /// Keep the local cluster's certificates and stores here (default: a
    /// temporary directory, removed at the end).
    #[arg(long, value_name = "DIR", requires = "cluster")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    node: NodeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// One node of a cluster, as an operator starts it on each machine.
#[derive(Args, Clone)]
struct NodeArgs {
    /// Run as the cluster node of this name (unique in the cluster).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// The cluster's name; nodes of another cluster are refused.
    #[arg(long, default_value = "realtime-map")]
    cluster_name: String,
    /// Where the other nodes reach this one (mutual TLS).
    #[arg(long, default_value = "127.0.0.1:7355")]
    cluster_listen: SocketAddr,
    /// The address other nodes reach this one at, when --cluster-listen
    /// is every interface (0.0.0.0:7355 in a pod: give the pod's IP).
    #[arg(long, value_name = "ADDR")]
    cluster_advertise: Option<SocketAddr>,
    /// Nodes to join through (their --cluster-listen), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ADDR,…",
        conflicts_with = "seeds_dns"
    )]
    seeds: Vec<SocketAddr>,
    /// Find the nodes to join through in DNS: a name whose A/AAAA records
    /// are the nodes (a Kubernetes headless Service), and their port.
    #[arg(long, value_name = "NAME:PORT", value_parser = parse_dns_seeds)]
    seeds_dns: Option<(String, u16)>,
    /// Identify the nodes this one dials by the node name their
    /// certificate carries, not by the address dialled (pods, whose
    /// addresses no certificate names). The certificate must still come
    /// from the cluster's CA and name the node.
    #[arg(long)]
    tls_identify_by_node_name: bool,
    /// This node's certificate (PEM), signed by the cluster's CA.
    #[arg(long, value_name = "FILE", requires = "node")]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "node")]
    tls_key: Option<PathBuf>,
    /// The cluster's CA certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "node")]
    tls_ca: Option<PathBuf>,
    /// Where shard leases live: sqlite:<path> (the nodes of one machine)
    /// or postgres://user@host/db (across machines).
    #[arg(long, default_value = "sqlite:realtime-map-leases.db")]
    lease_store: StoreLocation,
    /// Where vehicles' states are flushed: sqlite:<path> or postgres://….
    #[arg(long, default_value = "sqlite:realtime-map-state.db")]
    state_store: StoreLocation,
    /// How often vehicles' states are flushed (e.g. 2s).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    flush_every: Duration,
    /// The node lease: a lost node's vehicles answer from others within
    /// about this (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    lease: Duration,
    /// Shards, the same on every node.
    #[arg(long, default_value_t = 1024)]
    shards: u32,
    /// How many nodes the cluster is expected to have (tunes failure
    /// detection).
    #[arg(long, default_value_t = 3)]
    expected_nodes: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Only publish the simulated buses to a broker, for another service to consume.
    Simulate {
        /// The broker to publish to.
        #[arg(long, value_name = "URL")]
        mqtt: Broker,
        /// Number of simulated buses.
        #[arg(long, default_value_t = 2_000)]
        vehicles: usize,
        /// Seed of the simulation.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Print the vehicle ids, one per line, and exit.
        #[arg(long)]
        print_ids: bool,
    },
}

/// `name:port`, as `--seeds-dns` takes it.
fn parse_dns_seeds(s: &str) -> Result<(String, u16), String> {
    let (name, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not NAME:PORT (for example realtime-map-peers:7355)"))?;
    let port = port
        .parse()
        .map_err(|_| format!("{port:?} in {s:?} is not a port number"))?;
    if name.is_empty() {
        return Err(format!("{s:?} has no name before the port"));
    }
    Ok((name.to_string(), port))
}

/// `60s`, `500ms`, `5m`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. 60s, 500ms, 5m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}`; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

/// A line on stdout for whoever started the process (a person, a script,
/// the local cluster's launcher). A server keeps serving when that reader
/// has gone: unlike `println!`, a closed stdout is no reason to die.
macro_rules! announce {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rumqttd=warn,rumqttc=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Simulate {
            mqtt,
            vehicles,
            seed,
            print_ids,
        }) => simulate_only(mqtt, vehicles, seed, print_ids).await,
        None if cli.cluster.is_some() => local_cluster(cli).await,
        None if cli.node.node.is_some() => serve_node(cli).await,
        None => serve(cli).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("realtime-map: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        listen: cli.listen,
        mqtt: cli.mqtt,
        broker_listen: cli.broker_listen,
        simulator: (!cli.no_simulator).then_some(SimulatorConfig {
            vehicles: cli.vehicles,
            seed: cli.seed,
            ..SimulatorConfig::default()
        }),
        idle: cli.idle,
        workers: cli.workers,
        dashboard: cli
            .dashboard_listen
            .map_or(Dashboard::Mounted, Dashboard::Listen),
        debug_faults: cli.debug_faults,
    };
    let app = App::start(config).await?;
    let sim = match app.vehicle_ids().len() {
        0 => "no simulator".to_string(),
        n => format!("{n} simulated buses"),
    };
    announce!(
        "realtime-map: {sim}, positions from {}\nopen http://{}/  (API: /vehicle?id=<oper>/<veh>, /vehicles?bbox=minlon,minlat,maxlon,maxlat, /metrics); Ctrl-C stops",
        app.broker(),
        app.http_addr()
    );
    announce!("dashboard {}", app.dashboard_url());
    tokio::signal::ctrl_c().await?;
    eprintln!("realtime-map: shutting down");
    app.shutdown().await?;
    Ok(())
}

/// Ctrl-C or SIGTERM (as an orchestrator or the local cluster stops a
/// node).
async fn stop_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

fn dashboard(cli: &Cli) -> Dashboard {
    cli.dashboard_listen
        .map_or(Dashboard::Mounted, Dashboard::Listen)
}

async fn serve_node(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let dashboard = dashboard(&cli);
    let args = cli.node;
    let name = args.node.expect("checked by the caller");
    let tls = match (args.tls_cert, args.tls_key, args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => TlsFiles { cert, key, ca },
        _ => {
            return Err(
                "a node needs --tls-cert, --tls-key and --tls-ca (PEM files from the cluster's CA); `--cluster N` makes them for a local cluster"
                    .into(),
            )
        }
    };
    let mqtt = cli
        .mqtt
        .ok_or("a node needs --mqtt mqtt://host:port: the broker all nodes share")?;
    let shards = ShardCount::new(args.shards)
        .ok_or_else(|| format!("--shards must be at least 1, not {}", args.shards))?;
    let config = NodeConfig {
        name,
        cluster: args.cluster_name,
        listen: cli.listen,
        cluster_listen: args.cluster_listen,
        cluster_advertise: args.cluster_advertise,
        seeds: match args.seeds_dns {
            Some((name, port)) => Seeds::Dns { name, port },
            None => Seeds::Static(args.seeds),
        },
        tls,
        tls_identify_by_node_name: args.tls_identify_by_node_name,
        lease_store: args.lease_store,
        state_store: args.state_store,
        mqtt,
        idle: cli.idle,
        flush_every: args.flush_every,
        lease: args.lease,
        shards,
        expected_nodes: args.expected_nodes,
        workers: cli.workers,
        dashboard,
    };
    let node = Node::start(config).await?;
    announce!(
        "{}",
        launcher::ready_line(node.name(), node.http_addr(), node.cluster_addr())
    );
    stop_signal().await?;
    eprintln!("realtime-map: node {} leaving the cluster", node.name());
    node.shutdown().await?;
    Ok(())
}

async fn local_cluster(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let nodes = cli.cluster.expect("checked by the caller");
    // The broker and the simulated feed live here, so a node can be
    // killed without stopping the feed.
    let broker = match cli.mqtt {
        Some(b) => b,
        None => {
            let listen = cli.broker_listen;
            let addr =
                tokio::task::spawn_blocking(move || realtime_map::broker::start(listen)).await??;
            Broker {
                host: addr.ip().to_string(),
                port: addr.port(),
            }
        }
    };
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    if !cli.no_simulator {
        let simulation = Simulation::new(cli.vehicles, cli.seed);
        tasks.extend(app::spawn_simulator(
            &broker,
            simulation,
            Duration::from_secs(1),
            &stopped,
        ));
    }
    let mut node_args = vec![
        "--idle".to_string(),
        format!("{}ms", cli.idle.as_millis()),
        "--flush-every".to_string(),
        format!("{}ms", cli.node.flush_every.as_millis()),
        "--lease".to_string(),
        format!("{}ms", cli.node.lease.as_millis()),
        "--shards".to_string(),
        cli.node.shards.to_string(),
        "--cluster-name".to_string(),
        cli.node.cluster_name.clone(),
    ];
    if let Some(w) = cli.workers {
        node_args.extend(["--workers".to_string(), w.to_string()]);
    }
    let config = LocalClusterConfig {
        nodes,
        http_port: cli.listen.port(),
        cluster_port: cli.node.cluster_listen.port(),
        data_dir: cli.data_dir,
        mqtt: broker.clone(),
        node_args,
    };
    let mut cluster = tokio::task::spawn_blocking(move || LocalCluster::start(&config)).await??;
    for node in &cluster.nodes {
        announce!(
            "node {} pid {} http://{}",
            node.number,
            node.child.id(),
            node.http
        );
    }
    announce!(
        "realtime-map: {nodes} nodes, positions from {broker}{}; Ctrl-C stops them all",
        if cli.no_simulator {
            String::new()
        } else {
            format!(" ({} simulated buses)", cli.vehicles)
        }
    );
    let stop_requested = stop_signal();
    tokio::pin!(stop_requested);
    let mut check = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            r = &mut stop_requested => { r?; break; }
            _ = check.tick() => {
                for node in cluster.newly_exited() {
                    let how = node.exited.map(|s| s.to_string()).unwrap_or_default();
                    announce!("node {} pid {} exited ({how})", node.number, node.child.id());
                }
            }
        }
    }
    eprintln!("realtime-map: stopping the cluster");
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    tokio::task::spawn_blocking(move || {
        cluster.stop(Duration::from_secs(20));
        drop(cluster);
    })
    .await?;
    Ok(())
}

async fn simulate_only(
    broker: Broker,
    vehicles: usize,
    seed: u64,
    print_ids: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let simulation = Simulation::new(vehicles, seed);
    if print_ids {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for id in simulation.ids() {
            // A reader that has seen enough (`| head`) closes the pipe.
            if writeln!(out, "{id}").is_err() {
                break;
            }
        }
        return Ok(());
    }
    let (stop, stopped) = watch::channel(false);
    let tasks = app::spawn_simulator(&broker, simulation, Duration::from_secs(1), &stopped);
    announce!("realtime-map: publishing {vehicles} simulated buses to {broker}; Ctrl-C stops");
    tokio::signal::ctrl_c().await?;
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 weeks").is_err());
    }
}
