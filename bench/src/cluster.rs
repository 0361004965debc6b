//! Workloads 12 (`cluster-virtual`) and 13 (`failover`): troubadour's
//! virtual actors on three processes, on 127.0.0.1, .2 and .3, following
//! the contract in `bench/peers/README.md` ("Cluster workloads").
//!
//! `troubadour-bench cluster-virtual --impl troubadour [--quick] [--json]
//! [--plaintext]` and `troubadour-bench failover --impl troubadour [--mode
//! kill|leave] ...` run node A here; A starts a PostgreSQL server for the
//! run (Debian's, as the tests do: the lease store of a cluster of
//! processes), certificates from a CA made for the run, and nodes B and C
//! (this binary again, `__cluster-node`). A drives B and C over their
//! stdin/stdout: `activate`, `messages`, `leave`, each answered with one
//! line. The cluster runs with its defaults (10 s leases, 1024 shards,
//! SWIM's defaults).

use crate::remote::security;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_cluster::{with_cluster, Cluster, Entity, EntityMessages, PostgresLeaseStore};
use troubadour_remote::{Remote, RemoteMessage};

use crate::postgres;

/// Clients in flight per node, for activation and the final check.
const IN_FLIGHT: usize = 100;

// ---- the entity ------------------------------------------------------------

/// Adds `n`; told, or asked for the new count.
#[derive(Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = Value;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "bench.cluster.Add";
}

/// Asks for the count.
#[derive(Serialize, Deserialize)]
struct Get;
impl Message for Get {
    type Reply = Value;
}
impl RemoteMessage for Get {
    const NAME: &'static str = "bench.cluster.Get";
}

/// A counter's answer: its count, and which activation on which node gave it.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Value {
    count: u64,
    node: String,
    activation: u64,
}

struct Counter {
    count: u64,
    activation: u64,
}
impl Actor for Counter {}
impl Counter {
    fn value(&self, ctx: &Context<Self>) -> Value {
        Value {
            count: self.count,
            node: ctx.system().node().name().to_string(),
            activation: self.activation,
        }
    }
}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, ctx: &mut Context<Self>) -> Value {
        self.count += n;
        self.value(ctx)
    }
}
impl Handler<Get> for Counter {
    fn handle(&mut self, _: Get, ctx: &mut Context<Self>) -> Value {
        self.value(ctx)
    }
}
impl Entity for Counter {
    const KIND: &'static str = "bench.counter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Add>().handle::<Get>();
    }
}

/// A fresh random number per activation (splitmix64 over the clock, the
/// process and a counter: distinct across activations and processes).
fn activation_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ NEXT
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    splitmix(&mut z)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn identity(i: usize) -> String {
    format!("counter-{i}")
}

// ---- clients ---------------------------------------------------------------

/// One client of a node: runs one job at a time, in its own handler, so
/// that a node's clients ask concurrently and each asks in sequence.
struct Client {
    cluster: Cluster,
}
impl Actor for Client {}

/// Asks `Add(1)` (or `Get`, `read_only`) of each identity in turn.
struct AskEach {
    ids: Vec<usize>,
    read_only: bool,
}
impl Message for AskEach {
    type Reply = Result<Vec<(usize, Value)>, String>;
}

/// The messaging phase's rounds: 9 tells and one timed ask to a random
/// identity per round.
struct Rounds {
    rounds: usize,
    identities: usize,
    seed: u64,
}
impl Message for Rounds {
    type Reply = Result<Vec<u32>, String>;
}

/// Failover's prober: asks `Add(1)` of one identity until `stop`.
struct ProbeUntil {
    id: usize,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Ack>>>,
    failed: Arc<AtomicU64>,
}
impl Message for ProbeUntil {
    type Reply = ();
}

/// An acknowledged `Add` while probing (millions of them: kept small).
#[derive(Clone, Debug)]
struct Ack {
    id: u32,
    /// Index of the answering node in `NODES`.
    node: u8,
    at: Instant,
    activation: u64,
}

impl AsyncHandler<AskEach> for Client {
    async fn handle(
        &mut self,
        job: AskEach,
        _: &mut Context<Self>,
    ) -> Result<Vec<(usize, Value)>, String> {
        let mut out = Vec::with_capacity(job.ids.len());
        for i in job.ids {
            let counter = self.cluster.entity::<Counter>(identity(i));
            let asked = if job.read_only {
                counter.ask(Get).timeout(Duration::from_secs(5)).await
            } else {
                counter.ask(Add(1)).timeout(Duration::from_secs(5)).await
            };
            out.push((
                i,
                asked.map_err(|e| format!("ask of {}: {e}", identity(i)))?,
            ));
        }
        Ok(out)
    }
}

impl AsyncHandler<Rounds> for Client {
    async fn handle(&mut self, job: Rounds, _: &mut Context<Self>) -> Result<Vec<u32>, String> {
        let mut rng = job.seed;
        let mut latencies = Vec::with_capacity(job.rounds);
        for _ in 0..job.rounds {
            let i = (splitmix(&mut rng) % job.identities as u64) as usize;
            let counter = self.cluster.entity::<Counter>(identity(i));
            for _ in 0..9 {
                counter
                    .tell(Add(1))
                    .map_err(|e| format!("tell to {}: {e}", identity(i)))?;
            }
            let t = Instant::now();
            counter
                .ask(Add(1))
                .timeout(Duration::from_secs(5))
                .await
                .map_err(|e| format!("ask of {}: {e}", identity(i)))?;
            latencies.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        }
        Ok(latencies)
    }
}

impl AsyncHandler<ProbeUntil> for Client {
    async fn handle(&mut self, job: ProbeUntil, ctx: &mut Context<Self>) {
        let counter = self.cluster.entity::<Counter>(identity(job.id));
        let system = ctx.system();
        while !job.stop.load(Ordering::Relaxed) {
            match counter.ask(Add(1)).timeout(Duration::from_secs(1)).await {
                Ok(value) => job.acks.lock().unwrap().push(Ack {
                    id: job.id as u32,
                    node: NODES.iter().position(|n| *n == value.node).unwrap_or(9) as u8,
                    at: Instant::now(),
                    activation: value.activation,
                }),
                Err(_) => {
                    job.failed.fetch_add(1, Ordering::Relaxed);
                    system.sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// Spawns `n` clients of `cluster` on `system`.
fn clients(
    system: &ActorSystem,
    cluster: &Cluster,
    n: usize,
) -> Result<Vec<ActorRef<Client>>, String> {
    (0..n)
        .map(|_| {
            system
                .spawn(Client {
                    cluster: cluster.clone(),
                })
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Asks each identity of `ids` once, `IN_FLIGHT` at a time.
fn ask_each(
    system: &ActorSystem,
    cluster: &Cluster,
    ids: Vec<usize>,
    read_only: bool,
) -> Result<Vec<(usize, Value)>, String> {
    let clients = clients(system, cluster, IN_FLIGHT)?;
    let mut shares: Vec<Vec<usize>> = vec![Vec::new(); IN_FLIGHT];
    for (k, i) in ids.into_iter().enumerate() {
        shares[k % IN_FLIGHT].push(i);
    }
    let asks: Vec<_> = clients
        .iter()
        .zip(shares)
        .map(|(c, ids)| {
            c.ask(AskEach { ids, read_only })
                .timeout(Duration::from_secs(900))
        })
        .collect();
    let mut out = Vec::new();
    for a in asks {
        out.extend(a.wait().map_err(|e| e.to_string())??);
    }
    for c in clients {
        c.stop();
    }
    Ok(out)
}

/// The messaging phase of one node: `clients` clients, `rounds` each.
fn run_rounds(
    system: &ActorSystem,
    cluster: &Cluster,
    sizes: &Sizes,
    node_index: u64,
) -> Result<Vec<u32>, String> {
    let clients = clients(system, cluster, sizes.clients)?;
    let asks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(k, c)| {
            c.ask(Rounds {
                rounds: sizes.rounds,
                identities: sizes.identities,
                seed: (node_index << 32) | k as u64,
            })
            .timeout(Duration::from_secs(900))
        })
        .collect();
    let mut latencies = Vec::new();
    for a in asks {
        latencies.extend(a.wait().map_err(|e| e.to_string())??);
    }
    for c in clients {
        c.stop();
    }
    Ok(latencies)
}

// ---- sizes and arguments ---------------------------------------------------

struct Sizes {
    identities: usize,
    clients: usize,
    rounds: usize,
}

fn sizes(workload: &str, quick: bool) -> Sizes {
    match (workload, quick) {
        ("failover", false) => Sizes {
            identities: 3_000,
            clients: 0,
            rounds: 0,
        },
        ("failover", true) => Sizes {
            identities: 300,
            clients: 0,
            rounds: 0,
        },
        (_, false) => Sizes {
            identities: 100_000,
            clients: 100,
            rounds: 200,
        },
        (_, true) => Sizes {
            identities: 10_000,
            clients: 10,
            rounds: 20,
        },
    }
}

struct Args {
    workload: String,
    quick: bool,
    plaintext: bool,
    leave: bool,
    // Nodes B and C only.
    name: Option<String>,
    listen: Option<SocketAddr>,
    seed: Option<SocketAddr>,
    dir: Option<PathBuf>,
    store: Option<String>,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        workload: String::new(),
        quick: false,
        plaintext: false,
        leave: false,
        name: None,
        listen: None,
        seed: None,
        dir: None,
        store: None,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--impl" => {
                let i = value("--impl")?;
                if i != "troubadour" {
                    return Err(format!(
                        "the cluster workloads run only --impl troubadour here; peers are under bench/peers ({i})"
                    ));
                }
            }
            "--quick" => a.quick = true,
            "--json" => {}
            "--plaintext" => a.plaintext = true,
            "--mode" => match value("--mode")?.as_str() {
                "kill" => a.leave = false,
                "leave" => a.leave = true,
                m => return Err(format!("--mode is kill or leave, not {m}")),
            },
            "--threads" | "--timeout-s" => {
                value(arg)?;
            }
            "--name" => a.name = Some(value("--name")?),
            "--listen" => {
                a.listen = Some(
                    value("--listen")?
                        .parse()
                        .map_err(|_| "--listen needs an address")?,
                )
            }
            "--seed" => {
                a.seed = Some(
                    value("--seed")?
                        .parse()
                        .map_err(|_| "--seed needs an address")?,
                )
            }
            "--dir" => a.dir = Some(value("--dir")?.into()),
            "--store" => a.store = Some(value("--store")?),
            w if !w.starts_with('-') && a.workload.is_empty() => a.workload = w.to_string(),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    Ok(a)
}

// ---- one node ----------------------------------------------------------------

const NODES: [&str; 3] = ["A", "B", "C"];
/// What decides how soon a lost node's entities answer elsewhere.
const FAILURE_DETECTION: &str = "a dead node's shards are claimed when its lease runs out by the claimant's clock: lease 10 s, renewed every 3.3 s, the store read every 1.1 s; on a graceful leave each shard is released once its entities have stopped; SWIM (foca) defaults for membership";

/// Node C's index: the one killed, or leaving.
const C: u8 = 2;
const IPS: [&str; 3] = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];

struct Node {
    system: ActorSystem,
    remote: Remote,
    cluster: Cluster,
}

fn start_node(
    name: &str,
    listen: SocketAddr,
    plaintext: bool,
    dir: &Path,
    store_url: &str,
) -> Result<Node, String> {
    let system = ActorSystem::builder().name(name).build();
    let remote = system
        .block_on(
            with_cluster(Remote::builder(
                "troubadour-bench",
                security(plaintext, dir, name)?,
            ))
            .outbound_queue_bytes(64 * 1024 * 1024)
            .listen(listen)
            .start(&system),
        )
        .map_err(|e| format!("node {name}: {e}"))?;
    let cluster = system.block_on(async {
        let store = PostgresLeaseStore::connect(store_url)
            .await
            .map_err(|e| format!("node {name}: {e}"))?;
        Cluster::builder(Arc::new(store))
            .entity::<Counter>(|_id| Counter {
                count: 0,
                activation: activation_id(),
            })
            .start(&system, &remote)
            .await
            .map_err(|e| format!("node {name}: {e}"))
    })?;
    Ok(Node {
        system,
        remote,
        cluster,
    })
}

/// Waits until this node sees `members` members and owns what placement
/// gives it.
fn wait_settled(node: &Node, members: usize, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let status = node.system.block_on(node.cluster.status());
        if let Ok(s) = &status {
            if s.members.len() == members && s.members_with_lease.len() + 1 == members && s.balanced
            {
                return Ok(());
            }
        }
        if start.elapsed() > limit {
            let seen =
                match status {
                    Ok(s) => format!(
                    "members {:?}, with a lease {:?}, lease valid {}, {} shards here, balanced {}",
                    s.members, s.members_with_lease, s.lease_valid, s.shards.len(), s.balanced
                ),
                    Err(e) => e.to_string(),
                };
            return Err(format!(
                "node {} saw no settled cluster of {members} within {limit:?}: {seen}",
                node.system.node().name()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nodes B and C: join, report ready, then do what A asks, a line at a time.
fn node_main(args: Args) -> Result<(), String> {
    let name = args.name.clone().ok_or("--name missing")?;
    let dir = args.dir.clone().ok_or("--dir missing")?;
    let listen = args.listen.ok_or("--listen missing")?;
    let seed = args.seed.ok_or("--seed missing")?;
    let store = args.store.clone().ok_or("--store missing")?;
    let node = start_node(&name, listen, args.plaintext, &dir, &store)?;
    node.system.block_on(
        node.cluster
            .membership()
            .join_addresses(&node.remote, &[seed]),
    );
    let index = NODES
        .iter()
        .position(|n| *n == name)
        .ok_or("unknown node name")? as u64;
    let sizes = sizes(&args.workload, args.quick);
    let mut out = std::io::stdout();
    writeln!(out, "READY").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let answer = match line.trim() {
            "settled" => {
                wait_settled(&node, 3, Duration::from_secs(120)).map(|()| "ok".to_string())
            }
            "activate" => {
                let ids = (0..sizes.identities)
                    .filter(|i| *i as u64 % 3 == index)
                    .collect();
                ask_each(&node.system, &node.cluster, ids, false).map(|v| v.len().to_string())
            }
            "messages" => run_rounds(&node.system, &node.cluster, &sizes, index)
                .map(|l| l.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
            "leave" => node
                .system
                .block_on(node.cluster.leave())
                .map(|()| "left".to_string())
                .map_err(|e| e.to_string()),
            other => Err(format!("unknown command {other:?}")),
        };
        let reply = match answer {
            Ok(s) => format!("OK {s}"),
            Err(e) => format!("ERR {}", e.replace('\n', " ")),
        };
        writeln!(out, "{reply}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Node B or C as seen from A; killed when dropped.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn start(
        args: &Args,
        name: &str,
        ip: &str,
        seed: SocketAddr,
        dir: &Path,
        store: &str,
    ) -> Result<Peer, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.arg("__cluster-node")
            .arg(&args.workload)
            .args(["--name", name])
            .args(["--listen", &format!("{ip}:0")])
            .args(["--seed", &seed.to_string()])
            .args(["--dir", &dir.display().to_string()])
            .args(["--store", store]);
        if args.quick {
            cmd.arg("--quick");
        }
        if args.plaintext {
            cmd.arg("--plaintext");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start node {name}: {e}"))?;
        if let Ok(file) = std::env::var("PEER_PIDFILE") {
            if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(file) {
                let _ = writeln!(f, "{}", child.id());
            }
        }
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut peer = Peer {
            child,
            stdin,
            stdout,
        };
        let ready = peer.read_line()?;
        if ready != "READY" {
            return Err(format!("node {name} did not start: {ready:?}"));
        }
        Ok(peer)
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the node's process ended".into()),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn send(&mut self, command: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{command}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())
    }

    fn answer(&mut self) -> Result<String, String> {
        let line = self.read_line()?;
        match line.split_once(' ') {
            Some(("OK", rest)) => Ok(rest.to_string()),
            _ if line == "OK" => Ok(String::new()),
            _ => Err(line.strip_prefix("ERR ").unwrap_or(&line).to_string()),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Cluster3 {
    a: Node,
    peers: Vec<Peer>,
    join: Duration,
    // Kept for the run: the lease store and the certificates.
    _server: postgres::Server,
}

fn start_cluster(args: &Args, dir: &Path) -> Result<Cluster3, String> {
    if !args.plaintext {
        let ca = troubadour_remote::dev_certs::DevCa::new("troubadour-bench CA (this run only)")
            .map_err(|e| e.to_string())?;
        for (node, ip) in NODES.iter().zip(IPS) {
            let ip: std::net::IpAddr = ip.parse().expect("an address");
            ca.write_node_at(dir, node, &[ip])
                .map_err(|e| e.to_string())?;
        }
    }
    let server = std::panic::catch_unwind(postgres::Server::start)
        .map_err(|_| "could not start PostgreSQL (apt-get install postgresql)".to_string())?;
    let url = server.url();
    let start = Instant::now();
    let listen = format!("{}:0", IPS[0]).parse().expect("an address");
    let a = start_node(NODES[0], listen, args.plaintext, dir, &url)?;
    let seed = a.remote.local_addr().ok_or("A listens nowhere")?;
    let mut peers = Vec::new();
    for (name, ip) in NODES.iter().zip(IPS).skip(1) {
        peers.push(Peer::start(args, name, ip, seed, dir, &url)?);
    }
    for p in &mut peers {
        p.send("settled")?;
    }
    wait_settled(&a, 3, Duration::from_secs(120))?;
    for p in &mut peers {
        p.answer()?;
    }
    Ok(Cluster3 {
        a,
        peers,
        join: start.elapsed(),
        _server: server,
    })
}

/// The nearest-rank percentile of sorted `v`.
fn percentile<T: Copy>(v: &[T], p: f64) -> T {
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

// ---- 12: cluster-virtual -------------------------------------------------------

fn cluster_virtual(args: &Args, dir: &Path) -> Result<String, String> {
    let sizes = sizes("cluster-virtual", args.quick);
    let mut c = start_cluster(args, dir)?;

    // Activation: every node asks Add(1) of its third of the identities.
    let start = Instant::now();
    for p in &mut c.peers {
        p.send("activate")?;
    }
    let mine = (0..sizes.identities).filter(|i| i % 3 == 0).collect();
    let activated = ask_each(&c.a.system, &c.a.cluster, mine, false)?.len();
    let mut total = activated;
    for p in &mut c.peers {
        total += p.answer()?.parse::<usize>().map_err(|e| e.to_string())?;
    }
    let activation = start.elapsed();
    if total != sizes.identities {
        return Err(format!("{total} activations of {}", sizes.identities));
    }

    // Messaging.
    let start = Instant::now();
    for p in &mut c.peers {
        p.send("messages")?;
    }
    let mut latencies = run_rounds(&c.a.system, &c.a.cluster, &sizes, 0)?;
    for p in &mut c.peers {
        let line = p.answer()?;
        for s in line.split(',').filter(|s| !s.is_empty()) {
            latencies.push(s.parse().map_err(|_| format!("bad latency {s:?}"))?);
        }
    }
    let elapsed = start.elapsed();
    let messages = (3 * sizes.clients * sizes.rounds * 10) as u64;
    if latencies.len() != 3 * sizes.clients * sizes.rounds {
        return Err(format!(
            "{} ask latencies, expected {}",
            latencies.len(),
            3 * sizes.clients * sizes.rounds
        ));
    }
    latencies.sort_unstable();

    // Check: every Add counted exactly once.
    let values = ask_each(
        &c.a.system,
        &c.a.cluster,
        (0..sizes.identities).collect(),
        true,
    )?;
    let sum: u64 = values.iter().map(|(_, v)| v.count).sum();
    let expected = sizes.identities as u64 + messages;
    if sum != expected {
        return Err(format!("sum {sum}, expected {expected}"));
    }
    Ok(format!(
        "\"ok\":true,\"elapsed_ms\":{:.3},\"msgs_per_sec\":{:.3},\"activation_ms\":{:.3},\"activations_per_sec\":{:.3},\"ask_p50_us\":{},\"ask_p99_us\":{},\"ask_samples\":{},\"identities\":{},\"nodes\":3,\"join_ms\":{:.3},\"messages\":{messages}",
        elapsed.as_secs_f64() * 1e3,
        messages as f64 / elapsed.as_secs_f64(),
        activation.as_secs_f64() * 1e3,
        sizes.identities as f64 / activation.as_secs_f64(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.len(),
        sizes.identities,
        c.join.as_secs_f64() * 1e3,
    ))
}

// ---- 13: failover --------------------------------------------------------------

fn failover(args: &Args, dir: &Path) -> Result<String, String> {
    let sizes = sizes("failover", args.quick);
    let mut c = start_cluster(args, dir)?;
    let all: Vec<usize> = (0..sizes.identities).collect();
    let placed = ask_each(&c.a.system, &c.a.cluster, all.clone(), false)?;
    let affected: Vec<usize> = placed
        .iter()
        .filter(|(_, v)| v.node == "C")
        .map(|(i, _)| *i)
        .collect();
    if affected.is_empty() {
        return Err("no identity was placed on C".into());
    }

    // Probing: one prober per identity.
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let probers = clients(&c.a.system, &c.a.cluster, sizes.identities)?;
    let probing: Vec<_> = probers
        .iter()
        .zip(&all)
        .map(|(p, &id)| {
            p.ask(ProbeUntil {
                id,
                stop: stop.clone(),
                acks: acks.clone(),
                failed: failed.clone(),
            })
            .timeout(Duration::from_secs(600))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let t0 = Instant::now();
    let victim = &mut c.peers[1];
    if args.leave {
        victim.send("leave")?;
    } else {
        victim
            .child
            .kill()
            .map_err(|e| format!("kill -9 of C: {e}"))?;
    }
    // Until every affected identity has answered from another node, plus 2 s.
    let is_affected: Vec<bool> = {
        let mut v = vec![false; sizes.identities];
        for &i in &affected {
            v[i] = true;
        }
        v
    };
    let first_after = |acks: &[Ack]| {
        let mut first: Vec<Option<Duration>> = vec![None; sizes.identities];
        for a in acks {
            let id = a.id as usize;
            if is_affected[id] && a.at > t0 && a.node != C {
                let d = a.at - t0;
                if first[id].is_none_or(|f| d < f) {
                    first[id] = Some(d);
                }
            }
        }
        first
    };
    let limit = Duration::from_secs(180);
    loop {
        let first = first_after(&acks.lock().unwrap());
        if affected.iter().all(|&i| first[i].is_some()) || t0.elapsed() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for p in probing {
        p.wait().map_err(|e| format!("a prober did not end: {e}"))?;
    }
    if args.leave {
        // C's answer to `leave`.
        victim.answer().map_err(|e| format!("C's leave: {e}"))?;
    }
    let acks = std::mem::take(&mut *acks.lock().unwrap());
    let first = first_after(&acks);
    let mut times: Vec<Duration> = affected.iter().filter_map(|&i| first[i]).collect();
    let dark = affected.len() - times.len();
    times.sort_unstable();

    // Check: acknowledged writes by survivors' activations kept.
    let finals = ask_each(&c.a.system, &c.a.cluster, all, true)?;
    let mut final_activation = vec![0u64; sizes.identities];
    for (i, v) in &finals {
        final_activation[*i] = v.activation;
    }
    let lost = acks
        .iter()
        .filter(|a| a.node != C && a.activation != final_activation[a.id as usize])
        .count();
    let ms = |d: Option<&Duration>| {
        d.map_or("null".to_string(), |d| {
            format!("{:.3}", d.as_secs_f64() * 1e3)
        })
    };
    let ok = dark == 0 && lost == 0;
    let mut line = format!(
        "\"ok\":{ok},\"mode\":\"{}\",\"elapsed_ms\":{},\"msgs_per_sec\":null,\"failover_p50_ms\":{},\"failover_p99_ms\":{},\"failover_max_ms\":{},\"affected\":{},\"dark\":{dark},\"lost_acknowledged\":{lost},\"failed_asks\":{},\"acknowledged\":{},\"identities\":{},\"nodes\":3,\"join_ms\":{:.3},\"failure_detection\":\"{}\"",
        if args.leave { "leave" } else { "kill" },
        ms(times.last()),
        ms((!times.is_empty()).then(|| percentile(&times, 0.50)).as_ref()),
        ms((!times.is_empty()).then(|| percentile(&times, 0.99)).as_ref()),
        ms(times.last()),
        affected.len(),
        failed.load(Ordering::Relaxed),
        acks.len(),
        sizes.identities,
        c.join.as_secs_f64() * 1e3,
        FAILURE_DETECTION,
    );
    if !ok {
        line.push_str(&format!(
            ",\"error\":\"{dark} identities still dark after {limit:?}; {lost} acknowledged writes lost\""
        ));
    }
    Ok(line)
}

/// Entry point for `cluster-virtual`, `failover` and `__cluster-node`.
pub fn main(argv: Vec<String>) -> ExitCode {
    let node_side = argv.first().map(String::as_str) == Some("__cluster-node");
    let args = match parse(if node_side { &argv[1..] } else { &argv }) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if node_side {
        return match node_main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cluster node: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let dir = std::env::temp_dir().join(format!("troubadour-bench-cluster-{}", std::process::id()));
    let result = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| match args.workload.as_str() {
            "cluster-virtual" => cluster_virtual(&args, &dir),
            "failover" => failover(&args, &dir),
            other => Err(format!("unknown cluster workload {other}")),
        });
    let _ = std::fs::remove_dir_all(&dir);
    let peak = crate::measure::peak_rss_bytes().map_or("null".into(), |b| b.to_string());
    let tls = !args.plaintext;
    let transport = if tls {
        "troubadour-remote: TCP + rustls mutual TLS 1.3, postcard; leases in PostgreSQL"
    } else {
        "troubadour-remote: TCP plaintext (loopback opt-in), postcard; leases in PostgreSQL"
    };
    let head = format!(
        "\"workload\":\"{}\",\"impl\":\"troubadour\",\"tls\":{tls},\"transport\":\"{transport}\",\"settings\":\"defaults: 1024 shards, rendezvous placement, lease 10 s\",\"peak_rss_bytes\":{peak},\"bytes_per_actor\":null",
        args.workload
    );
    let (ok, line) = match result {
        Ok(body) => (
            body.starts_with("\"ok\":true"),
            format!("{{{head},{body}}}"),
        ),
        Err(e) => (
            false,
            format!(
                "{{{head},\"ok\":false,\"elapsed_ms\":null,\"msgs_per_sec\":null,\"error\":{}}}",
                crate::json_string(&e)
            ),
        ),
    };
    println!("{line}");
    std::process::exit(if ok { 0 } else { 1 });
}
