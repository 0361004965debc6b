//! Workloads 9 (remote pingpong) and 11 (remote pi): troubadour actors in
//! two processes on 127.0.0.1, talking through `troubadour-remote`.
//!
//! `troubadour-bench remote-pingpong --impl troubadour [--quick] [--json]
//! [--pairs N] [--size BYTES] [--plaintext]` and `remote-pi` run the
//! measuring side here and start this same binary as the second process
//! (`__remote-peer`), which hosts the echo actors or the workers. With TLS
//! (the default) both use certificates from a CA made for this run alone
//! (rcgen, in a temporary directory removed afterwards).
//!
//! Pingpong, phase 1: per pair, a client here and an echo there; pings
//! carrying the client's reference (the echo answers whoever it names) and
//! `--size` bytes in batches of 100 (the next batch once all 100 pongs are
//! back), 200,000 echoes per pair (5,000 quick); `msgs_per_sec` counts
//! pings and pongs. Phase 2: one client asks one echo 20,000 times in a row
//! (1,000 quick), the first 10 % discarded; `rtt_p50_us`/`rtt_p99_us`.
//! `--rtt-only` skips phase 1 (to profile a round trip: `perf stat -e
//! context-switches` over both processes counts its thread hand-offs).
//!
//! Pi: workload 8 with the workers (one per core) in the second process:
//! every item is an `ask` in flight at once; the sum is checked against the
//! plain loop.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_remote::{Accepts, Remote, RemoteActor, RemoteMessage, Security};

use crate::workload::leibniz;

const BATCH: u64 = 100;

// ---- messages ------------------------------------------------------------

/// Carries its client's reference, as every peer's ping carries its
/// client's address (bench/peers/README.md): the echo answers whoever is
/// named in the ping.
#[derive(Serialize, Deserialize)]
struct Ping {
    seq: u64,
    reply_to: ActorRef<Client>,
    payload: serde_bytes::ByteBuf,
}
impl Message for Ping {
    type Reply = ();
}
impl RemoteMessage for Ping {
    const NAME: &'static str = "bench.Ping";
}

#[derive(Serialize, Deserialize)]
struct Pong {
    seq: u64,
    payload: serde_bytes::ByteBuf,
}
impl Message for Pong {
    type Reply = ();
}
impl RemoteMessage for Pong {
    const NAME: &'static str = "bench.Pong";
}

/// The latency phase's request: answered with the payload.
#[derive(Serialize, Deserialize)]
struct Rtt(serde_bytes::ByteBuf);
impl Message for Rtt {
    type Reply = serde_bytes::ByteBuf;
}
impl RemoteMessage for Rtt {
    const NAME: &'static str = "bench.Rtt";
}

#[derive(Serialize, Deserialize)]
struct Work {
    item: u64,
    terms: u64,
}
impl Message for Work {
    type Reply = f64;
}
impl RemoteMessage for Work {
    const NAME: &'static str = "bench.Work";
}

// ---- actors --------------------------------------------------------------

/// Pingpong's client: sends a batch, counts the pongs, sends the next.
struct Client {
    echo: Option<ActorRef<Echo>>,
    payload: serde_bytes::ByteBuf,
    target: u64,
    sent: u64,
    received: u64,
    done: Option<mpsc::Sender<u64>>,
}
impl Actor for Client {}

struct Start {
    echo: ActorRef<Echo>,
    target: u64,
    done: mpsc::Sender<u64>,
}
impl Message for Start {
    type Reply = ();
}

impl Client {
    fn send_batch(&mut self, me: &ActorRef<Client>) {
        let echo = self.echo.as_ref().expect("started");
        let end = (self.sent + BATCH).min(self.target);
        while self.sent < end {
            let mut ping = Ping {
                seq: self.sent,
                reply_to: me.clone(),
                payload: self.payload.clone(),
            };
            // A full outbound queue hands the ping back: try again.
            loop {
                match echo.tell(ping) {
                    Ok(()) => break,
                    Err(SendError::Full(p)) => {
                        ping = p;
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("ping refused: {e}"),
                }
            }
            self.sent += 1;
        }
    }
}

impl Handler<Start> for Client {
    fn handle(&mut self, s: Start, ctx: &mut Context<Self>) {
        self.echo = Some(s.echo);
        self.target = s.target;
        self.done = Some(s.done);
        self.send_batch(&ctx.myself());
    }
}

impl Handler<Pong> for Client {
    fn handle(&mut self, pong: Pong, ctx: &mut Context<Self>) {
        assert_eq!(pong.seq, self.received, "pongs arrive in order");
        assert_eq!(pong.payload.len(), self.payload.len());
        self.received += 1;
        if self.received == self.target {
            if let Some(done) = self.done.take() {
                let _ = done.send(self.received);
            }
        } else if self.received == self.sent {
            self.send_batch(&ctx.myself());
        }
    }
}

impl RemoteActor for Client {
    const NAME: &'static str = "bench.Client";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Pong>();
    }
}

/// Pingpong's echo: answers each ping to the client it names.
struct Echo;
impl Actor for Echo {}
impl Handler<Ping> for Echo {
    fn handle(&mut self, ping: Ping, _: &mut Context<Self>) {
        let Ping {
            seq,
            reply_to,
            payload,
        } = ping;
        let mut pong = Pong { seq, payload };
        loop {
            match reply_to.tell(pong) {
                Ok(()) => break,
                Err(SendError::Full(p)) => {
                    pong = p;
                    std::thread::yield_now();
                }
                Err(e) => panic!("pong refused: {e}"),
            }
        }
    }
}
impl Handler<Rtt> for Echo {
    fn handle(&mut self, Rtt(payload): Rtt, _: &mut Context<Self>) -> serde_bytes::ByteBuf {
        payload
    }
}
impl RemoteActor for Echo {
    const NAME: &'static str = "bench.Echo";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Ping>().handle::<Rtt>();
    }
}

/// Pi's worker.
struct Worker;
impl Actor for Worker {}
impl Handler<Work> for Worker {
    fn handle(&mut self, w: Work, _: &mut Context<Self>) -> f64 {
        leibniz(w.item * w.terms, w.terms)
    }
}
impl RemoteActor for Worker {
    const NAME: &'static str = "bench.Worker";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Work>();
    }
}

// ---- arguments -----------------------------------------------------------

struct Args {
    workload: String,
    quick: bool,
    json: bool,
    pairs: usize,
    size: usize,
    plaintext: bool,
    /// Phase 2 only (round trips), for profiling a round trip's cost.
    rtt_only: bool,
    threads: usize,
    // The second process only.
    dir: Option<PathBuf>,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        workload: String::new(),
        quick: false,
        json: false,
        pairs: 1,
        size: 16,
        plaintext: false,
        rtt_only: false,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        dir: None,
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
                        "the remote workloads run only --impl troubadour here; peers are under bench/peers ({i})"
                    ));
                }
            }
            "--quick" => a.quick = true,
            "--json" => a.json = true,
            "--plaintext" => a.plaintext = true,
            "--rtt-only" => a.rtt_only = true,
            "--pairs" => {
                a.pairs = value("--pairs")?
                    .parse()
                    .map_err(|_| "--pairs needs a number")?
            }
            "--size" => {
                a.size = value("--size")?
                    .parse()
                    .map_err(|_| "--size needs a number")?
            }
            "--threads" => {
                a.threads = value("--threads")?
                    .parse()
                    .map_err(|_| "--threads needs a number")?
            }
            "--timeout-s" => {
                value("--timeout-s")?;
            }
            "--dir" => a.dir = Some(value("--dir")?.into()),
            w if !w.starts_with('-') && a.workload.is_empty() => a.workload = w.to_string(),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    if a.pairs == 0 {
        return Err("--pairs must be at least 1".into());
    }
    Ok(a)
}

// ---- certificates --------------------------------------------------------

/// A CA for this run and one certificate for 127.0.0.1, in `dir`.
fn make_certificates(dir: &Path) -> Result<(), String> {
    let ca = troubadour_remote::dev_certs::DevCa::new("troubadour-bench CA (this run only)")
        .map_err(|e| e.to_string())?;
    for node in NODES {
        ca.write_node(dir, node).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The processes' node names (pingpong's, pi's, the second process's); each
/// one's certificate is issued for its name.
const NODES: [&str; 3] = ["bench-client", "bench-coordinator", "bench-peer"];

/// Node `node`'s security: plaintext on loopback, or mutual TLS from the
/// PEM files `make_certificates` (or the cluster workloads) wrote in `dir`.
pub(crate) fn security(plaintext: bool, dir: &Path, node: &str) -> Result<Security, String> {
    if plaintext {
        return Ok(Security::PlaintextLoopbackOnly);
    }
    let tls = troubadour_remote::dev_certs::read_node(dir, node)
        .map_err(|e| format!("node {node}'s certificates in {}: {e}", dir.display()))?;
    Ok(Security::Tls(tls))
}

fn start_remote(system: &ActorSystem, args: &Args, dir: &Path) -> Result<Remote, String> {
    let node = system.node();
    let builder = Remote::builder(
        "troubadour-bench",
        security(args.plaintext, dir, node.name())?,
    )
    .register::<Ping>()
    .register::<Pong>()
    .register::<Rtt>()
    .register::<Work>()
    // Pings carry a client's reference.
    .actor::<Client>()
    .outbound_queue_bytes(64 * 1024 * 1024)
    .listen("127.0.0.1:0".parse().expect("an address"));
    system
        .block_on(builder.start(system))
        .map_err(|e| e.to_string())
}

// ---- the second process --------------------------------------------------

fn peer_main(args: Args) -> Result<(), String> {
    let dir = args.dir.clone().ok_or("--dir missing")?;
    let system = ActorSystem::builder()
        .name("bench-peer")
        .worker_threads(args.threads)
        .build();
    let remote = start_remote(&system, &args, &dir)?;
    if args.workload == "remote-pingpong" {
        for i in 0..args.pairs {
            let echo = system.spawn(Echo).map_err(|e| e.to_string())?;
            remote
                .expose(&format!("echo-{i}"), &echo)
                .map_err(|e| e.to_string())?;
        }
    } else {
        for i in 0..args.threads {
            let w = system.spawn(Worker).map_err(|e| e.to_string())?;
            remote
                .expose(&format!("worker-{i}"), &w)
                .map_err(|e| e.to_string())?;
        }
    }
    let addr = remote.local_addr().ok_or("not listening")?;
    println!("READY {addr}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Until the measuring process closes our stdin (or dies).
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}

/// The second process, killed when dropped.
struct PeerProcess(Child);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_peer(args: &Args, dir: &Path) -> Result<(PeerProcess, SocketAddr), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("__remote-peer")
        .arg(&args.workload)
        .args(["--dir", &dir.display().to_string()])
        .args(["--pairs", &args.pairs.to_string()])
        .args(["--threads", &args.threads.to_string()]);
    if args.plaintext {
        cmd.arg("--plaintext");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start the second process: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let child = PeerProcess(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let addr = line
        .trim()
        .strip_prefix("READY ")
        .ok_or_else(|| format!("the second process did not start: {line:?}"))?
        .parse()
        .map_err(|_| format!("bad address from the second process: {line:?}"))?;
    Ok((child, addr))
}

// ---- the measuring side --------------------------------------------------

struct PingPongFigures {
    elapsed: Duration,
    messages: u64,
    p50_us: f64,
    p99_us: f64,
}

fn pingpong(args: &Args, dir: &Path) -> Result<PingPongFigures, String> {
    let system = ActorSystem::builder()
        .name("bench-client")
        .worker_threads(args.threads)
        .build();
    let remote = start_remote(&system, args, dir)?;
    let payload = serde_bytes::ByteBuf::from(vec![0x5a; args.size]);
    let clients: Vec<ActorRef<Client>> = (0..args.pairs)
        .map(|_| {
            let c = system
                .spawn(Client {
                    echo: None,
                    payload: payload.clone(),
                    target: 0,
                    sent: 0,
                    received: 0,
                    done: None,
                })
                .map_err(|e| e.to_string())?;
            Ok(c)
        })
        .collect::<Result<_, String>>()?;
    let (_peer, addr) = start_peer(args, dir)?;
    let echoes: Vec<ActorRef<Echo>> = (0..args.pairs)
        .map(|i| {
            system
                .block_on(remote.lookup::<Echo>(addr, &format!("echo-{i}")))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, String>>()?;
    if !args.plaintext && remote.is_tls(addr) != Some(true) {
        return Err("the connection is not TLS".into());
    }

    // Phase 1: throughput.
    let echoes_per_pair: u64 = if args.quick { 5_000 } else { 200_000 };
    let pairs_measured = if args.rtt_only { 0 } else { args.pairs };
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    for (c, e) in clients.iter().zip(&echoes).take(pairs_measured) {
        c.tell(Start {
            echo: e.clone(),
            target: echoes_per_pair,
            done: tx.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    for _ in 0..pairs_measured {
        let got = rx
            .recv_timeout(Duration::from_secs(600))
            .map_err(|_| "a pair did not finish")?;
        if got != echoes_per_pair {
            return Err(format!("a pair got {got} echoes of {echoes_per_pair}"));
        }
    }
    let elapsed = start.elapsed();

    // Phase 2: latency of one request-reply at a time, asked from an actor
    // as the peers' harnesses ask from theirs (an Erlang process, a Pekko or
    // Hollywood actor).
    let rounds: usize = if args.quick { 1_000 } else { 20_000 };
    let probe = system.spawn(RttProbe).map_err(|e| e.to_string())?;
    let mut rtts = probe
        .ask(Probe {
            echo: echoes[0].clone(),
            payload: payload.clone(),
            rounds,
        })
        .timeout(Duration::from_secs(600))
        .wait()
        .map_err(|e| e.to_string())??;
    rtts.drain(..rounds / 10);
    rtts.sort();
    let pct = |p: f64| {
        let i = ((rtts.len() as f64 * p).ceil() as usize).clamp(1, rtts.len()) - 1;
        rtts[i].as_secs_f64() * 1e6
    };
    Ok(PingPongFigures {
        elapsed,
        messages: 2 * echoes_per_pair * pairs_measured as u64,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    })
}

/// Asks an echo `rounds` times, one at a time, timing each round trip.
struct RttProbe;
impl Actor for RttProbe {}

struct Probe {
    echo: ActorRef<Echo>,
    payload: serde_bytes::ByteBuf,
    rounds: usize,
}
impl Message for Probe {
    type Reply = Result<Vec<Duration>, String>;
}
impl AsyncHandler<Probe> for RttProbe {
    async fn handle(&mut self, p: Probe, _: &mut Context<Self>) -> Result<Vec<Duration>, String> {
        let mut rtts = Vec::with_capacity(p.rounds);
        for _ in 0..p.rounds {
            let t = Instant::now();
            let back = p
                .echo
                .ask(Rtt(p.payload.clone()))
                .timeout(Duration::from_secs(30))
                .await
                .map_err(|e| e.to_string())?;
            rtts.push(t.elapsed());
            if back.len() != p.payload.len() {
                return Err("the echo answered another payload".to_string());
            }
        }
        Ok(rtts)
    }
}

fn pi(args: &Args, dir: &Path) -> Result<(Duration, u64, f64), String> {
    let system = ActorSystem::builder()
        .name("bench-coordinator")
        .worker_threads(args.threads)
        .build();
    let remote = start_remote(&system, args, dir)?;
    let (_peer, addr) = start_peer(args, dir)?;
    let workers: Vec<ActorRef<Worker>> = (0..args.threads)
        .map(|i| {
            system
                .block_on(remote.lookup::<Worker>(addr, &format!("worker-{i}")))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, String>>()?;
    let (items, terms): (u64, u64) = if args.quick {
        (100, 1_000)
    } else {
        (1_000, 10_000)
    };
    let start = Instant::now();
    let sum = system.block_on(async {
        let asks: Vec<_> = (0..items)
            .map(|item| {
                workers[item as usize % workers.len()]
                    .ask(Work { item, terms })
                    .timeout(Duration::from_secs(300))
            })
            .collect();
        let mut sum = 0.0;
        for a in asks {
            sum += a.await.map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(sum)
    })?;
    let elapsed = start.elapsed();
    let reference = leibniz(0, items * terms);
    if (sum - reference).abs() > 1e-9 {
        return Err(format!(
            "sum {sum} differs from the plain loop's {reference}"
        ));
    }
    Ok((elapsed, 2 * items, sum))
}

/// Entry point for `remote-pingpong`, `remote-pi` and `__remote-peer`.
pub fn main(argv: Vec<String>) -> ExitCode {
    let peer_side = argv.first().map(String::as_str) == Some("__remote-peer");
    let args = match parse(if peer_side { &argv[1..] } else { &argv }) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if peer_side {
        return match peer_main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("remote peer: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let dir = std::env::temp_dir().join(format!("troubadour-bench-{}", std::process::id()));
    let result = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| if args.plaintext { Ok(()) } else { make_certificates(&dir) })
        .and_then(|()| match args.workload.as_str() {
            "remote-pingpong" => pingpong(&args, &dir).map(|f| {
                let rate = match f.messages {
                    0 => "null".to_string(), // --rtt-only
                    m => format!("{:.3}", m as f64 / f.elapsed.as_secs_f64()),
                };
                format!(
                    "\"ok\":true,\"elapsed_ms\":{:.3},\"msgs_per_sec\":{rate},\"rtt_p50_us\":{:.3},\"rtt_p99_us\":{:.3},\"pairs\":{},\"size_bytes\":{},\"messages\":{}",
                    f.elapsed.as_secs_f64() * 1e3,
                    f.p50_us,
                    f.p99_us,
                    args.pairs,
                    args.size,
                    f.messages
                )
            }),
            "remote-pi" => pi(&args, &dir).map(|(elapsed, messages, sum)| {
                format!(
                    "\"ok\":true,\"elapsed_ms\":{:.3},\"msgs_per_sec\":{:.3},\"sum\":{sum},\"workers\":{}",
                    elapsed.as_secs_f64() * 1e3,
                    messages as f64 / elapsed.as_secs_f64(),
                    args.threads
                )
            }),
            other => Err(format!("unknown remote workload {other}")),
        });
    let _ = std::fs::remove_dir_all(&dir);
    let peak = crate::measure::peak_rss_bytes().map_or("null".into(), |b| b.to_string());
    let tls = !args.plaintext;
    let transport = if tls {
        "troubadour-remote: TCP + rustls mutual TLS 1.3, postcard"
    } else {
        "troubadour-remote: TCP plaintext (loopback opt-in), postcard"
    };
    let head = format!(
        "\"workload\":\"{}\",\"impl\":\"troubadour\",\"tls\":{tls},\"transport\":\"{transport}\",\"peak_rss_bytes\":{peak}",
        args.workload
    );
    let ok = result.is_ok();
    let line = match result {
        Ok(body) => format!("{{{head},{body}}}"),
        Err(e) => format!(
            "{{{head},\"ok\":false,\"elapsed_ms\":null,\"msgs_per_sec\":null,\"error\":{}}}",
            crate::json_string(&e)
        ),
    };
    // One JSON line with or without `--json`: these workloads have no
    // text form.
    let _ = args.json;
    println!("{line}");
    std::process::exit(if ok { 0 } else { 1 });
}
