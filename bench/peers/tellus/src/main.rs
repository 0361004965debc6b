//! The tellus peer of the benchmark suite (bench/peers/README.md): workloads 9
//! (`remote-pingpong`) and 11 (`remote-pi`) on tellus's `cluster` feature,
//! and workload 13 (`failover`, in `failover.rs`).
//!
//! `tellus-peer <workload> [--quick] [--pairs N] [--size BYTES]` is node A,
//! which measures and prints one JSON line. It starts this binary again as
//! node B (`__node-b`), as tellus's clustered examples start their second
//! node. Both are cluster members over tellus's QUIC transport with mutual TLS
//! (its production configuration): A makes a certificate authority for the run
//! and a certificate for each node, as the how-to `secure_with_mutual_tls`
//! does, and B reads its PEM files through a `QuicConfig`. A forms the
//! cluster, B joins it through A's address and registers its actors with the
//! receptionist, and A finds them there. Every other reference travels inside
//! messages: a ping carries `reply_to: ActorRef<Pong>`, a pi item a
//! `ReplyTo<f64>`. B ends when its stdin closes, i.e. when A is gone.

use anyhow::{Context as _, anyhow, bail, ensure};
use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::{
    RootCertStore,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use serde_json::{Map, Value, json};
use std::{
    convert::Infallible,
    env, fs, io,
    io::Write as _,
    net::{Ipv4Addr, SocketAddr},
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};
use tellus::{
    Actor, ActorContext, ActorRef, ActorSystem, Control, Incoming, Nothing, ReplyTo, Untimed,
    cluster::{
        self, EndpointConfig, Key, Manifest, RegisterError, receptionist,
        transport::{QuicConfig, QuicTransport},
    },
};
use tokio::{
    process::{Child, ChildStdin, Command},
    sync::mpsc,
    time::timeout,
};
use tracing_subscriber::EnvFilter;

mod failover;

const IMPL: &str = "tellus";
const TELLUS_VERSION: &str = "0.5.3";
const TRANSPORT: &str = "tellus cluster: QUIC (quinn 0.11) with rustls mutual TLS 1.3, postcard";
const NODE_B_ARG: &str = "__node-b";
const SERVER_NAME: &str = "tellus";
const ECHO_KEY: &str = "echo";
const PI_WORKER_KEY: &str = "pi-worker";
const BATCH: u64 = 100;
/// Joining and finding B's actors; generous, since the machine may be loaded.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// The suite's limit for one phase (as the Go peers' `remoteWait`).
const PHASE_TIMEOUT: Duration = Duration::from_secs(600);
const ASK_TIMEOUT: Duration = Duration::from_secs(30);

// ---- messages --------------------------------------------------------------

/// What an echo receives: phase 1's pings are told, phase 2's round trips asked.
#[derive(Serialize, Deserialize)]
enum EchoMessage {
    Ping {
        payload: ByteBuf,
        reply_to: ActorRef<Pong>,
    },
    RoundTrip {
        payload: ByteBuf,
        reply_to: ReplyTo<ByteBuf>,
    },
}

impl Manifest for EchoMessage {
    const MANIFEST: &'static str = "bench-echo";
}

#[derive(Serialize, Deserialize)]
struct Pong {
    payload: ByteBuf,
}

/// One pi item: the sum of `terms` terms from `start`.
#[derive(Serialize, Deserialize)]
struct PiWork {
    start: u64,
    terms: u64,
    reply_to: ReplyTo<f64>,
}

impl Manifest for PiWork {
    const MANIFEST: &'static str = "bench-pi-work";
}

// ---- node B's actors -------------------------------------------------------

/// Node B's root: spawns the echoes or the pi workers and registers each with
/// the receptionist, where node A looks them up.
enum Serve {
    Echoes(usize),
    PiWorkers(usize),
}

impl Actor for Serve {
    type Message = Nothing;
    type Timers = Untimed;
    type State = ();
    type Error = RegisterError;

    fn init(&self, context: &ActorContext<Nothing>) -> Result<(), RegisterError> {
        match *self {
            Serve::Echoes(n) => {
                let key = Key::new(ECHO_KEY);
                for _ in 0..n {
                    cluster::register(&key, &context.spawn(Echo))?;
                }
            }
            Serve::PiWorkers(n) => {
                let key = Key::new(PI_WORKER_KEY);
                for _ in 0..n {
                    cluster::register(&key, &context.spawn(PiWorker))?;
                }
            }
        }
        Ok(())
    }

    fn receive(
        &self,
        _: &ActorContext<Nothing>,
        incoming: Incoming<Nothing>,
        state: (),
    ) -> Result<Control<()>, RegisterError> {
        match incoming {
            Incoming::Message(nothing) => match nothing {},
            Incoming::Terminated(_) => Ok(Control::Continue(state)),
        }
    }
}

struct Echo;

impl Actor for Echo {
    type Message = EchoMessage;
    type Timers = Untimed;
    type State = ();
    type Error = Infallible;

    fn init(&self, _: &ActorContext<EchoMessage>) -> Result<(), Infallible> {
        Ok(())
    }

    fn receive(
        &self,
        _: &ActorContext<EchoMessage>,
        incoming: Incoming<EchoMessage>,
        state: (),
    ) -> Result<Control<()>, Infallible> {
        match incoming {
            Incoming::Message(EchoMessage::Ping { payload, reply_to }) => {
                reply_to.tell(Pong { payload });
            }
            Incoming::Message(EchoMessage::RoundTrip { payload, reply_to }) => {
                reply_to.reply(payload);
            }
            Incoming::Terminated(_) => {}
        }
        Ok(Control::Continue(state))
    }
}

struct PiWorker;

impl Actor for PiWorker {
    type Message = PiWork;
    type Timers = Untimed;
    type State = ();
    type Error = Infallible;

    fn init(&self, _: &ActorContext<PiWork>) -> Result<(), Infallible> {
        Ok(())
    }

    fn receive(
        &self,
        _: &ActorContext<PiWork>,
        incoming: Incoming<PiWork>,
        state: (),
    ) -> Result<Control<()>, Infallible> {
        if let Incoming::Message(PiWork {
            start,
            terms,
            reply_to,
        }) = incoming
        {
            reply_to.reply(leibniz(start, terms));
        }
        Ok(Control::Continue(state))
    }
}

// ---- node A's actors -------------------------------------------------------

/// Node A's root for phase 1: one client per pair, each with its own echo.
struct Clients {
    echoes: Vec<ActorRef<EchoMessage>>,
    payload: ByteBuf,
    per_pair: u64,
    done: mpsc::UnboundedSender<u64>,
}

impl Actor for Clients {
    type Message = Nothing;
    type Timers = Untimed;
    type State = ();
    type Error = Infallible;

    fn init(&self, context: &ActorContext<Nothing>) -> Result<(), Infallible> {
        for echo in &self.echoes {
            context.spawn(Client {
                echo: echo.clone(),
                payload: self.payload.clone(),
                per_pair: self.per_pair,
                done: self.done.clone(),
            });
        }
        Ok(())
    }

    fn receive(
        &self,
        _: &ActorContext<Nothing>,
        incoming: Incoming<Nothing>,
        state: (),
    ) -> Result<Control<()>, Infallible> {
        match incoming {
            Incoming::Message(nothing) => match nothing {},
            Incoming::Terminated(_) => Ok(Control::Continue(state)),
        }
    }
}

/// Sends a batch of pings, and the next one when all its pongs are back;
/// reports how many pongs came back with the whole payload, then stops.
struct Client {
    echo: ActorRef<EchoMessage>,
    payload: ByteBuf,
    per_pair: u64,
    done: mpsc::UnboundedSender<u64>,
}

struct Pinging {
    sent: u64,
    received: u64,
    intact: u64,
}

impl Client {
    /// Sends the next batch; returns how many pings are sent in all.
    fn send_batch(&self, context: &ActorContext<Pong>, sent: u64) -> u64 {
        let end = (sent + BATCH).min(self.per_pair);
        for _ in sent..end {
            self.echo.tell(EchoMessage::Ping {
                payload: self.payload.clone(),
                reply_to: context.self_ref().clone(),
            });
        }
        end
    }
}

impl Actor for Client {
    type Message = Pong;
    type Timers = Untimed;
    type State = Pinging;
    type Error = Infallible;

    fn init(&self, context: &ActorContext<Pong>) -> Result<Pinging, Infallible> {
        Ok(Pinging {
            sent: self.send_batch(context, 0),
            received: 0,
            intact: 0,
        })
    }

    fn receive(
        &self,
        context: &ActorContext<Pong>,
        incoming: Incoming<Pong>,
        state: Pinging,
    ) -> Result<Control<Pinging>, Infallible> {
        let Incoming::Message(Pong { payload }) = incoming else {
            return Ok(Control::Continue(state));
        };
        let received = state.received + 1;
        let intact = state.intact + u64::from(payload.len() == self.payload.len());
        if received == self.per_pair {
            let _ = self.done.send(intact);
            return Ok(Control::Stop);
        }
        let sent = if received == state.sent {
            self.send_batch(context, state.sent)
        } else {
            state.sent
        };
        Ok(Control::Continue(Pinging {
            sent,
            received,
            intact,
        }))
    }
}

/// Remote pi's coordinator: hands every item to a worker on node B (round
/// robin) and sums the replies, which come back into its own mailbox.
struct Coordinator {
    workers: Vec<ActorRef<PiWork>>,
    items: u64,
    terms: u64,
}

enum CoordinatorMessage {
    Start(ReplyTo<f64>),
    Part(f64),
}

enum Summing {
    Idle,
    Running {
        reply_to: ReplyTo<f64>,
        got: u64,
        sum: f64,
    },
}

impl Actor for Coordinator {
    type Message = CoordinatorMessage;
    type Timers = Untimed;
    type State = Summing;
    type Error = Infallible;

    fn init(&self, _: &ActorContext<CoordinatorMessage>) -> Result<Summing, Infallible> {
        Ok(Summing::Idle)
    }

    fn receive(
        &self,
        context: &ActorContext<CoordinatorMessage>,
        incoming: Incoming<CoordinatorMessage>,
        state: Summing,
    ) -> Result<Control<Summing>, Infallible> {
        match (incoming, state) {
            (Incoming::Message(CoordinatorMessage::Start(reply_to)), Summing::Idle) => {
                for (item, worker) in (0..self.items).zip(self.workers.iter().cycle()) {
                    worker.tell(PiWork {
                        start: item * self.terms,
                        terms: self.terms,
                        reply_to: context.reply_to(CoordinatorMessage::Part),
                    });
                }
                Ok(Control::Continue(Summing::Running {
                    reply_to,
                    got: 0,
                    sum: 0.0,
                }))
            }
            (
                Incoming::Message(CoordinatorMessage::Part(part)),
                Summing::Running { reply_to, got, sum },
            ) => {
                let (got, sum) = (got + 1, sum + part);
                if got == self.items {
                    reply_to.reply(sum);
                    Ok(Control::Stop)
                } else {
                    Ok(Control::Continue(Summing::Running { reply_to, got, sum }))
                }
            }
            (_, state) => Ok(Control::Continue(state)),
        }
    }
}

// ---- the cluster -------------------------------------------------------------

/// The run's certificate authority (as in tellus's how-to
/// `secure_with_mutual_tls`). Node certificates carry the DNS name both nodes
/// validate against and an IP SAN for 127.0.0.1: the ports are chosen by the
/// OS, so the address check goes by IP SAN rather than a `tellus://` URI SAN.
struct CertificateAuthority {
    cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    fn new() -> anyhow::Result<Self> {
        let key = KeyPair::generate().context("generating the CA key")?;
        let mut params = CertificateParams::new(Vec::new()).context("CA parameters")?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).context("signing the CA")?;
        Ok(Self {
            cert,
            issuer: Issuer::new(params, key),
        })
    }

    fn issue(&self) -> anyhow::Result<(Certificate, KeyPair)> {
        let key = KeyPair::generate().context("generating a node key")?;
        // 127.0.0.2 and .3 for the failover workload's nodes B and C.
        let params = CertificateParams::new(vec![
            SERVER_NAME.to_string(),
            Ipv4Addr::LOCALHOST.to_string(),
            "127.0.0.2".to_string(),
            "127.0.0.3".to_string(),
        ])
        .context("node parameters")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a node certificate")?;
        Ok((cert, key))
    }
}

impl CertificateAuthority {
    /// Node A's transport: its certificate in memory, as a node made in
    /// code would hold it.
    fn node_a_transport(&self, bind: SocketAddr) -> anyhow::Result<QuicTransport> {
        let (cert, key) = self.issue()?;
        let mut roots = RootCertStore::empty();
        roots.add(self.cert.der().clone()).context("adding the CA")?;
        let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(key.serialize_der()));
        QuicTransport::mutual_tls(bind, vec![cert.der().clone()], key, roots, SERVER_NAME)
            .context("mutual TLS transport")
    }

    /// A certificate for a node that node A starts, with the CA, as the PEM
    /// files it reads (see `join_cluster`).
    fn write_pem(&self, dir: &Path) -> anyhow::Result<()> {
        let (cert, key) = self.issue()?;
        fs::write(dir.join("roots.pem"), self.cert.pem())?;
        fs::write(dir.join("cert.pem"), cert.pem())?;
        fs::write(dir.join("key.pem"), key.serialize_pem())?;
        Ok(())
    }
}

/// Appends a started node's pid to `$PEER_PIDFILE`, where the runner finds
/// the processes to clean up.
fn record_pid(child: &Child) -> anyhow::Result<()> {
    if let (Ok(file), Some(pid)) = (env::var("PEER_PIDFILE"), child.id()) {
        let mut f = fs::OpenOptions::new().create(true).append(true).open(file)?;
        writeln!(f, "{pid}")?;
    }
    Ok(())
}

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// Starts this process's endpoint on the transport, advertising the port the
/// OS gave it.
fn start_endpoint(transport: QuicTransport) -> anyhow::Result<SocketAddr> {
    let addr = transport.local_addr().context("local transport address")?;
    cluster::start_endpoint(EndpointConfig::new(addr), transport).context("remoting endpoint")?;
    Ok(addr)
}

/// Node B as node A holds it: killed when dropped. B ends by itself when its
/// stdin closes, so A keeps that pipe here (tokio's `Child::wait` would close
/// a pipe left in the `Child`). The PEM files go with the directory.
struct NodeB {
    child: Child,
    _stdin: ChildStdin,
    _pem: tempfile::TempDir,
}

/// Node A's side of the set-up: forms the cluster and starts node B, which
/// joins it and serves `count` actors.
async fn start_cluster(workload: &str, count: usize) -> anyhow::Result<NodeB> {
    let ca = CertificateAuthority::new()?;
    let seed = start_endpoint(ca.node_a_transport(loopback())?)?;
    cluster::form().context("forming the cluster")?;

    let dir = tempfile::tempdir().context("a directory for node B's PEM files")?;
    ca.write_pem(dir.path())?;

    let mut child = Command::new(env::current_exe()?)
        .arg(NODE_B_ARG)
        .arg(workload)
        .arg(count.to_string())
        .arg(seed.to_string())
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting node B")?;
    record_pid(&child)?;
    let stdin = child.stdin.take().context("node B's stdin")?;
    Ok(NodeB {
        child,
        _stdin: stdin,
        _pem: dir,
    })
}

/// Waits until the receptionist knows `count` actors under the key (B's
/// registrations are replicated here once it has joined).
async fn find<M>(name: &str, count: usize, node_b: &mut NodeB) -> anyhow::Result<Vec<ActorRef<M>>>
where
    M: Manifest + Serialize + Send + 'static,
{
    let mut subscription = receptionist::subscribe(&Key::<M>::new(name))?;
    let wait = async {
        loop {
            let found = subscription.current()?;
            if found.len() >= count {
                return anyhow::Ok(found);
            }
            tokio::select! {
                () = subscription.changed() => {}
                status = node_b.child.wait() => bail!("node B exited ({}) before registering its actors", status?),
            }
        }
    };
    timeout(SETUP_TIMEOUT, wait)
        .await
        .with_context(|| format!("{count} actors under {name:?} not found within {SETUP_TIMEOUT:?}"))?
}

/// A node that node A started: binds `bind`, reads its certificates from
/// `dir` the way a deployed node does (tellus's `QuicConfig`) and joins A's
/// cluster through `seed`.
async fn join_cluster(bind: SocketAddr, seed: SocketAddr, dir: &Path) -> anyhow::Result<()> {
    let transport = QuicTransport::from_config(&QuicConfig {
        bind_addr: bind,
        cert_chain: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        roots: dir.join("roots.pem"),
        server_name: SERVER_NAME.to_string(),
    })
    .context("mutual TLS transport")?;
    start_endpoint(transport)?;
    timeout(SETUP_TIMEOUT, cluster::join(&[seed]))
        .await
        .context("no cluster to join within the timeout")?
        .context("joining node A's cluster")?;
    Ok(())
}

/// Node B: `__node-b <workload> <count> <seed> <pem dir>`.
async fn node_b(args: &[String]) -> anyhow::Result<()> {
    let [workload, count, seed, dir] = args else {
        bail!("usage: {NODE_B_ARG} <workload> <count> <seed address> <PEM directory>");
    };
    let count: usize = count.parse().context("count")?;
    let seed: SocketAddr = seed.parse().context("seed address")?;
    join_cluster(loopback(), seed, Path::new(dir)).await?;
    let _system = ActorSystem::new(match workload.as_str() {
        "remote-pingpong" => Serve::Echoes(count),
        "remote-pi" => Serve::PiWorkers(count),
        other => bail!("unknown workload {other}"),
    });
    // Until node A closes our stdin, or is gone.
    tokio::io::copy(&mut tokio::io::stdin(), &mut tokio::io::sink()).await?;
    Ok(())
}

// ---- the workloads (node A) -------------------------------------------------

struct Args {
    workload: String,
    quick: bool,
    pairs: usize,
    size: usize,
    mode: String,
}

fn parse_args(argv: &[String]) -> anyhow::Result<Args> {
    let mut args = Args {
        workload: String::new(),
        quick: false,
        pairs: 1,
        size: 16,
        mode: "kill".into(),
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--pairs" => args.pairs = it.next().context("--pairs N")?.parse()?,
            "--size" => args.size = it.next().context("--size BYTES")?.parse()?,
            "--mode" => args.mode = it.next().context("--mode kill|leave")?.clone(),
            w if !w.starts_with('-') && args.workload.is_empty() => args.workload = w.into(),
            other => bail!("unexpected argument {other}"),
        }
    }
    ensure!(args.pairs > 0, "--pairs must be at least 1");
    Ok(args)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

async fn remote_pingpong(args: &Args, line: &mut Map<String, Value>) -> anyhow::Result<()> {
    let per_pair: u64 = if args.quick { 5_000 } else { 200_000 };
    let rounds: usize = if args.quick { 1_000 } else { 20_000 };
    line.insert("pairs".into(), json!(args.pairs));
    line.insert("size_bytes".into(), json!(args.size));
    line.insert("echoes_per_pair".into(), json!(per_pair));

    let mut node_b = start_cluster(&args.workload, args.pairs).await?;
    let echoes = find::<EchoMessage>(ECHO_KEY, args.pairs, &mut node_b).await?;
    let payload = ByteBuf::from(vec![0xa5; args.size]);

    // Phase 1: throughput, batches of 100 per pair.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    let _clients = ActorSystem::new(Clients {
        echoes: echoes.clone(),
        payload: payload.clone(),
        per_pair,
        done: done_tx,
    });
    let mut counts = Vec::new();
    let all = async {
        while counts.len() < args.pairs {
            counts.push(done_rx.recv().await.context("a client is gone")?);
        }
        anyhow::Ok(())
    };
    timeout(PHASE_TIMEOUT, all)
        .await
        .map_err(|_| anyhow!("phase 1 did not finish within {PHASE_TIMEOUT:?}"))??;
    let elapsed = start.elapsed();
    ensure!(
        counts.iter().all(|&n| n == per_pair),
        "intact pongs per pair {counts:?}, expected {per_pair} each"
    );

    // Phase 2: sequential round trips, each an ask from outside the actors.
    let echo = &echoes[0];
    let mut rtts = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let back = echo
            .ask(ASK_TIMEOUT, |reply_to| EchoMessage::RoundTrip {
                payload: payload.clone(),
                reply_to,
            })
            .await
            .context("round trip")?;
        rtts.push(t.elapsed());
        ensure!(back.len() == args.size, "a round trip came back with another payload");
    }
    rtts.drain(..rounds / 10);
    rtts.sort();
    // Nearest rank: the ⌈p·n⌉-th smallest.
    let rank = |p: f64| {
        let k = ((p * rtts.len() as f64).ceil() as usize).clamp(1, rtts.len());
        rtts[k - 1].as_secs_f64() * 1e6
    };

    let messages = 2 * per_pair * args.pairs as u64;
    line.insert("ok".into(), json!(true));
    line.insert("elapsed_ms".into(), ms(elapsed));
    line.insert("msgs_per_sec".into(), round3(messages as f64 / elapsed.as_secs_f64()));
    line.insert("rtt_p50_us".into(), round3(rank(0.50)));
    line.insert("rtt_p99_us".into(), round3(rank(0.99)));
    line.insert("rtt_samples".into(), json!(rtts.len()));
    Ok(())
}

async fn remote_pi(args: &Args, line: &mut Map<String, Value>) -> anyhow::Result<()> {
    let (items, terms): (u64, u64) = if args.quick { (100, 1_000) } else { (1_000, 10_000) };
    // Node B runs one worker per core of this machine.
    let workers = cores();
    line.insert("workers".into(), json!(workers));
    line.insert("items".into(), json!(items));
    line.insert("terms".into(), json!(terms));

    let mut node_b = start_cluster(&args.workload, workers).await?;
    let workers = find::<PiWork>(PI_WORKER_KEY, workers, &mut node_b).await?;
    let coordinator = ActorSystem::new(Coordinator {
        workers,
        items,
        terms,
    });

    let start = Instant::now();
    let sum = coordinator
        .root()
        .ask(PHASE_TIMEOUT, CoordinatorMessage::Start)
        .await
        .context("no complete sum")?;
    let elapsed = start.elapsed();
    let t = Instant::now();
    let reference = leibniz(0, items * terms);
    line.insert("plain_loop_ms".into(), ms(t.elapsed()));
    ensure!(
        (sum - reference).abs() <= 1e-9,
        "sum {sum:.15}, single loop {reference:.15}"
    );
    line.insert("ok".into(), json!(true));
    line.insert("elapsed_ms".into(), ms(elapsed));
    line.insert("msgs_per_sec".into(), round3(2.0 * items as f64 / elapsed.as_secs_f64()));
    Ok(())
}

// ---- helpers -----------------------------------------------------------------

/// Terms `start .. start + terms` of 4 (−1)^k / (2k + 1), as every peer sums them.
fn leibniz(start: u64, terms: u64) -> f64 {
    let mut sum = 0.0;
    for k in start..start + terms {
        let term = 4.0 / (2 * k + 1) as f64;
        sum += if k % 2 == 0 { term } else { -term };
    }
    sum
}

fn round3(v: f64) -> Value {
    json!((v * 1e3).round() / 1e3)
}

fn ms(d: Duration) -> Value {
    round3(d.as_secs_f64() * 1e3)
}

/// `VmHWM` of /proc/self/status, in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

fn init_tracing() {
    // Warnings by default, so that dead letters show on stderr; RUST_LOG overrides.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .init();
}

#[tokio::main]
async fn main() {
    init_tracing();
    let argv: Vec<String> = env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some(failover::NODE_ARG) {
        let code = match failover::node(&argv[1..]).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tellus peer, failover node: {e:#}");
                1
            }
        };
        std::process::exit(code);
    }
    if argv.first().map(String::as_str) == Some(NODE_B_ARG) {
        let code = match node_b(&argv[1..]).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tellus peer, node B: {e:#}");
                1
            }
        };
        // Not waiting for the runtime's tasks (the endpoint's loops never end).
        std::process::exit(code);
    }

    let args = parse_args(&argv);
    let workload = args.as_ref().map_or("?", |a| a.workload.as_str()).to_string();
    let mut line = Map::new();
    line.insert("workload".into(), json!(workload));
    line.insert("impl".into(), json!(IMPL));
    line.insert("ok".into(), json!(false));
    line.insert("elapsed_ms".into(), Value::Null);
    line.insert("msgs_per_sec".into(), Value::Null);
    line.insert("peak_rss_bytes".into(), Value::Null);
    line.insert("bytes_per_actor".into(), Value::Null);
    let outcome = match &args {
        Ok(args) if workload == "remote-pingpong" => remote_pingpong(args, &mut line).await,
        Ok(args) if workload == "remote-pi" => remote_pi(args, &mut line).await,
        Ok(args) if workload == "failover" => failover::run(args.quick, &args.mode, &mut line).await,
        Ok(_) => Err(anyhow!(
            "unsupported: the tellus peer implements only remote-pingpong, remote-pi and failover"
        )),
        Err(e) => Err(anyhow!("{e:#}")),
    };
    line.insert("peak_rss_bytes".into(), json!(peak_rss_bytes()));
    if let Err(e) = &outcome {
        line.insert("ok".into(), json!(false));
        line.insert("error".into(), json!(format!("{e:#}")));
    }
    line.insert("tls".into(), json!(true));
    line.insert("transport".into(), json!(TRANSPORT));
    line.insert("worker_threads".into(), json!(cores()));
    line.insert("tellus_version".into(), json!(TELLUS_VERSION));
    println!("{}", Value::Object(line));
    let _ = io::stdout().flush();
    // Node B is killed with its handle (kill_on_drop), already dropped here;
    // the endpoint's tasks would keep the runtime alive, so exit directly.
    std::process::exit(i32::from(outcome.is_err()));
}
