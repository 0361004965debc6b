//! Workload 13 (`failover`, bench/peers/README.md "Cluster workloads") on
//! tellus's cluster: three member processes on 127.0.0.1, .2 and .3, node C
//! killed (`--mode kill`) or leaving gracefully (`--mode leave`, tellus's
//! `cluster::leave`), and how long C's identities stay unanswered.
//!
//! tellus 0.5 has membership, failure detection (phi accrual), downing
//! (keep-majority, 10 s by default), a receptionist and remote asks, but no
//! sharding or virtual actors. So the placement is this peer's, built the way
//! a tellus user would on what tellus offers: every node registers one host
//! actor with the receptionist under its own key, the host keeps the
//! `Counter` entities it was asked for (activated on their first message),
//! and node A (the only client) sends each identity to the live host with the
//! highest rendezvous score. A host is live while the receptionist lists it:
//! tellus drops a member's registrations once the member is Left or Down, so
//! after a kill the identities move when tellus's failure detection and
//! downing give C up, and after a leave when the leave is gossiped. Those are
//! tellus's documented defaults, unchanged.

use crate::{CertificateAuthority, SETUP_TIMEOUT, join_cluster, ms, record_pid, start_endpoint};
use anyhow::{Context as _, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::{
    collections::HashMap,
    convert::Infallible,
    env, fs,
    hash::{BuildHasher, RandomState},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    process::Stdio,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tellus::{
    Actor, ActorContext, ActorRef, ActorSystem, Control, Incoming, ReplyTo, Untimed,
    cluster::{self, Key, Manifest, downing::KeepMajority, failure::PhiAccrual, receptionist},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, ChildStdout, Command},
    sync::Semaphore,
    time::{sleep, timeout},
};

pub const NODE_ARG: &str = "__failover-node";
const NAMES: [&str; 3] = ["A", "B", "C"];
/// The contract's ask timeout in workload 13.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// Asks in flight while activating and checking.
const IN_FLIGHT: usize = 100;
/// Probing before t0, and after the last affected identity answered.
const SETTLE: Duration = Duration::from_secs(2);
/// The contract's limit after t0: identities still unanswered then are dark.
const DARK_AFTER: Duration = Duration::from_secs(180);

// ---- the entity --------------------------------------------------------------

#[derive(Serialize, Deserialize)]
pub enum CounterMessage {
    /// `Add{n}` asked: the reply is the count after it.
    Add {
        id: u32,
        n: u64,
        reply_to: ReplyTo<Counted>,
    },
    Get {
        id: u32,
        reply_to: ReplyTo<Counted>,
    },
}

impl Manifest for CounterMessage {
    const MANIFEST: &'static str = "bench-counter";
}

/// `Added{count, node, activation}` and `Value{…}` alike.
#[derive(Serialize, Deserialize, Clone, Copy, Debug)]
pub struct Counted {
    count: u64,
    node: u8,
    activation: u64,
}

/// One node's host of `Counter` entities: an entity is activated (count 0,
/// a fresh random activation number) by its first message here.
struct Host {
    node: u8,
    random: RandomState,
}

impl Actor for Host {
    type Message = CounterMessage;
    type Timers = Untimed;
    type State = HashMap<u32, (u64, u64)>;
    type Error = Infallible;

    fn init(&self, _: &ActorContext<CounterMessage>) -> Result<Self::State, Infallible> {
        Ok(HashMap::new())
    }

    fn receive(
        &self,
        _: &ActorContext<CounterMessage>,
        incoming: Incoming<CounterMessage>,
        mut entities: Self::State,
    ) -> Result<Control<Self::State>, Infallible> {
        let Incoming::Message(message) = incoming else {
            return Ok(Control::Continue(entities));
        };
        let (id, n, reply_to) = match message {
            CounterMessage::Add { id, n, reply_to } => (id, n, reply_to),
            CounterMessage::Get { id, reply_to } => (id, 0, reply_to),
        };
        let entity = entities
            .entry(id)
            .or_insert_with(|| (0, self.random.hash_one((id, Instant::now()))));
        entity.0 += n;
        reply_to.reply(Counted {
            count: entity.0,
            node: self.node,
            activation: entity.1,
        });
        Ok(Control::Continue(entities))
    }
}

fn key(node: usize) -> Key<CounterMessage> {
    Key::new(format!("counter-host-{}", NAMES[node]))
}

fn ip(node: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, node as u8 + 1))
}

/// Starts this node's host and registers it under the node's key.
fn serve(node: usize) -> anyhow::Result<ActorSystem<CounterMessage>> {
    let system = ActorSystem::new(Host {
        node: node as u8,
        random: RandomState::new(),
    });
    cluster::register(&key(node), system.root()).context("registering the host")?;
    Ok(system)
}

// ---- nodes B and C -------------------------------------------------------------

/// `__failover-node <index> <seed> <PEM directory>`: joins the cluster through
/// the seed, serves its host, prints `ready`; on the line `leave` leaves the
/// cluster (tellus's graceful way) and prints `left`; ends when stdin closes.
pub async fn node(args: &[String]) -> anyhow::Result<()> {
    let [index, seed, dir] = args else {
        bail!("usage: {NODE_ARG} <index> <seed address> <PEM directory>");
    };
    let index: usize = index.parse().context("node index")?;
    let seed: SocketAddr = seed.parse().context("seed address")?;
    join_cluster(SocketAddr::new(ip(index), 0), seed, Path::new(dir)).await?;
    let _system = serve(index)?;
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim() == "leave" {
            let departure = cluster::leave().await.context("leaving the cluster")?;
            stdout
                .write_all(format!("left {}\n", departure.is_acknowledged()).as_bytes())
                .await?;
            stdout.flush().await?;
        }
    }
    Ok(())
}

/// Node B or C as node A holds it: killed when dropped.
struct Member {
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

// ---- node A ----------------------------------------------------------------------

/// Node A's view of the live hosts, kept by watching the receptionist.
type Hosts = Arc<RwLock<[Option<ActorRef<CounterMessage>>; 3]>>;

fn watch_hosts() -> anyhow::Result<Hosts> {
    let hosts: Hosts = Arc::new(RwLock::new([None, None, None]));
    for node in 0..3 {
        let mut subscription = receptionist::subscribe(&key(node))?;
        let hosts = hosts.clone();
        tokio::spawn(async move {
            loop {
                let current = subscription
                    .current()
                    .ok()
                    .and_then(|h| h.into_iter().next());
                hosts.write().unwrap()[node] = current;
                subscription.changed().await;
            }
        });
    }
    Ok(hosts)
}

/// The live host with the highest rendezvous score for the identity.
fn route(hosts: &Hosts, id: u32) -> Option<ActorRef<CounterMessage>> {
    let hosts = hosts.read().unwrap();
    (0..3)
        .filter(|&n| hosts[n].is_some())
        .max_by_key(|&n| score(id, n))
        .and_then(|n| hosts[n].clone())
}

fn score(id: u32, node: usize) -> u64 {
    // splitmix64 of the pair: a fixed hash, so the placement is the same run to run.
    let mut z = (u64::from(id) << 2 | node as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn ask(hosts: &Hosts, id: u32, add: bool) -> Option<Counted> {
    let host = route(hosts, id)?;
    let asked = host
        .ask(ASK_TIMEOUT, |reply_to| {
            if add {
                CounterMessage::Add { id, n: 1, reply_to }
            } else {
                CounterMessage::Get { id, reply_to }
            }
        })
        .await;
    asked.ok()
}

/// One acknowledged `Add`: when (since the run's start), where, which activation.
#[derive(Clone, Copy)]
struct Ack {
    at: Duration,
    node: u8,
    activation: u64,
}

/// Asks every identity once, `IN_FLIGHT` at a time; `None` where an ask failed.
async fn ask_all(hosts: &Hosts, identities: u32, add: bool) -> Vec<Option<Counted>> {
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::with_capacity(identities as usize);
    for id in 0..identities {
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let hosts = hosts.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            ask(&hosts, id, add).await
        }));
    }
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(task.await.ok().flatten());
    }
    answers
}

fn nearest_rank(sorted: &[Duration], p: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    ms(sorted[k - 1])
}

pub async fn run(quick: bool, mode: &str, line: &mut Map<String, Value>) -> anyhow::Result<()> {
    ensure!(
        mode == "kill" || mode == "leave",
        "--mode is kill or leave, not {mode}"
    );
    let identities: u32 = if quick { 300 } else { 3_000 };
    line.insert("mode".into(), json!(mode));
    line.insert("identities".into(), json!(identities));
    line.insert("nodes".into(), json!(3));
    line.insert(
        "failure_detection".into(),
        json!(format!(
            "tellus defaults: heartbeat every 1 s, phi accrual (threshold {}, acceptable pause {} s), \
             KeepMajority downing after {} s unreachable",
            PhiAccrual::DEFAULT_THRESHOLD,
            PhiAccrual::DEFAULT_ACCEPTABLE_PAUSE.as_secs(),
            KeepMajority::DEFAULT_AFTER.as_secs()
        )),
    );
    line.insert(
        "settings".into(),
        json!(
            "tellus has no sharding: one host actor per node found through the receptionist, \
               rendezvous placement over the hosts it lists (the peer's own)"
        ),
    );
    for k in [
        "failover_p50_ms",
        "failover_p99_ms",
        "failover_max_ms",
        "affected",
        "dark",
        "lost_acknowledged",
        "failed_asks",
        "join_ms",
    ] {
        line.insert(k.into(), Value::Null);
    }

    // Join: A forms the cluster, B and C join through it.
    let start = Instant::now();
    let ca = CertificateAuthority::new()?;
    let seed = start_endpoint(ca.node_a_transport(SocketAddr::new(ip(0), 0))?)?;
    cluster::form().context("forming the cluster")?;
    let _host = serve(0)?;
    let hosts = watch_hosts()?;

    let pem = tempfile::tempdir().context("a directory for the PEM files")?;
    let mut members = Vec::new();
    for (index, name) in NAMES.iter().enumerate().skip(1) {
        let dir = pem.path().join(name);
        fs::create_dir(&dir)?;
        ca.write_pem(&dir)?;
        let mut child = Command::new(env::current_exe()?)
            .arg(NODE_ARG)
            .arg(index.to_string())
            .arg(seed.to_string())
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting node {name}"))?;
        record_pid(&child)?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
        members.push(Member {
            child,
            stdin,
            stdout,
        });
    }
    for (member, name) in members.iter_mut().zip(["B", "C"]) {
        let ready = timeout(SETUP_TIMEOUT, member.stdout.next_line())
            .await
            .with_context(|| format!("node {name} not ready within {SETUP_TIMEOUT:?}"))??;
        ensure!(
            ready.as_deref() == Some("ready"),
            "node {name} ended before joining"
        );
    }
    let joined = async {
        while hosts.read().unwrap().iter().any(Option::is_none) {
            sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(SETUP_TIMEOUT, joined)
        .await
        .context("the three hosts not listed by the receptionist in time")?;
    line.insert("join_ms".into(), ms(start.elapsed()));

    // Activation: every identity once; its reply says where it lives.
    let clock = Instant::now();
    let acks: Arc<Vec<Mutex<Vec<Ack>>>> =
        Arc::new((0..identities).map(|_| Mutex::new(Vec::new())).collect());
    let first = ask_all(&hosts, identities, true).await;
    let mut affected = Vec::new();
    for (id, answer) in first.iter().enumerate() {
        let answer = answer.with_context(|| format!("the first Add of counter-{id} failed"))?;
        acks[id].lock().unwrap().push(Ack {
            at: clock.elapsed(),
            node: answer.node,
            activation: answer.activation,
        });
        if answer.node == 2 {
            affected.push(id as u32);
        }
    }
    ensure!(!affected.is_empty(), "no identity on node C");
    line.insert("affected".into(), json!(affected.len()));

    // Probing: one sequential prober per identity.
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let mut probers = Vec::with_capacity(identities as usize);
    for id in 0..identities {
        let (hosts, acks, stop, failed) =
            (hosts.clone(), acks.clone(), stop.clone(), failed.clone());
        probers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match ask(&hosts, id, true).await {
                    Some(v) => acks[id as usize].lock().unwrap().push(Ack {
                        at: clock.elapsed(),
                        node: v.node,
                        activation: v.activation,
                    }),
                    None => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    sleep(SETTLE).await;

    // t0: C is killed, or told to leave.
    let mut c = members.pop().expect("node C");
    let t0 = clock.elapsed();
    if mode == "kill" {
        c.child.start_kill().context("killing node C")?;
    } else {
        c.stdin.write_all(b"leave\n").await?;
        c.stdin.flush().await?;
    }
    // Every affected identity answered by A or B after t0, then SETTLE more.
    let moved = |id: u32| -> Option<Duration> {
        acks[id as usize]
            .lock()
            .unwrap()
            .iter()
            .find(|a| a.at >= t0 && a.node != 2)
            .map(|a| a.at - t0)
    };
    let deadline = t0 + DARK_AFTER;
    loop {
        if affected.iter().all(|&id| moved(id).is_some()) {
            sleep(SETTLE).await;
            break;
        }
        if clock.elapsed() >= deadline {
            break;
        }
        sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for prober in probers {
        let _ = prober.await;
    }
    let mut failovers: Vec<Duration> = affected.iter().filter_map(|&id| moved(id)).collect();
    let dark = affected.len() - failovers.len();
    failovers.sort();
    line.insert("failover_p50_ms".into(), nearest_rank(&failovers, 0.50));
    line.insert("failover_p99_ms".into(), nearest_rank(&failovers, 0.99));
    line.insert("failover_max_ms".into(), nearest_rank(&failovers, 1.0));
    line.insert("elapsed_ms".into(), nearest_rank(&failovers, 1.0));
    line.insert("dark".into(), json!(dark));
    line.insert("failed_asks".into(), json!(failed.load(Ordering::Relaxed)));

    // Check: the final Get of every identity; an acknowledged Add on A or B
    // by another activation than the one answering it was lost.
    let last = ask_all(&hosts, identities, false).await;
    let mut lost = 0u64;
    let mut unanswered = 0;
    for (id, answer) in last.iter().enumerate() {
        let Some(answer) = answer else {
            unanswered += 1;
            continue;
        };
        lost += acks[id]
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.node != 2 && a.activation != answer.activation)
            .count() as u64;
    }
    line.insert("lost_acknowledged".into(), json!(lost));
    drop(c);
    drop(members);
    ensure!(
        dark == 0,
        "{dark} of {} affected identities still dark {DARK_AFTER:?} after t0",
        affected.len()
    );
    ensure!(unanswered == 0, "{unanswered} final Gets failed");
    ensure!(lost == 0, "{lost} acknowledged Adds lost");
    line.insert("ok".into(), json!(true));
    line.insert("msgs_per_sec".into(), Value::Null);
    Ok(())
}
