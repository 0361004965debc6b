//! What tiers 2 and 3 of DISTRIBUTION.md's scenarios share: five real
//! node processes (this test binary again, started with
//! `TROUBADOUR_TIER_NODE` set and driven a line at a time over
//! stdin/stdout), mutual TLS, leases and event-sourced counters in a
//! PostgreSQL server the test starts, and the checkers.
//!
//! Each counter is event-sourced in PostgreSQL (troubadour-persistence),
//! each activation writing with the epoch at which its node owns the
//! counter's shard (`ClusterBuilder::entity_in_shard`): once a shard has
//! moved, the store refuses what a stale owner still tries to write.
//! Checkers: every command ends (so every ask did); each counter ends
//! between its acknowledged and its sent increments; every counter's
//! journal is linear (numbered without a gap) with epochs that never go
//! down; and the lease store never had two valid epochs of one shard at
//! one instant, replayed from a history of its rows that triggers the
//! test installs record (the lease store's own tables, as the nodes
//! wrote them).
#![allow(dead_code)]

use crate::common::{all, fast_membership};
use crate::postgres;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_cluster::{
    with_cluster, Cluster, Entity, EntityMessages, LeaseStore, PostgresLeaseStore, ShardCount,
};
use troubadour_persistence::{Event, EventSourced, Persistence, Persistent, PostgresStore};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage, Security};

const NODE_VAR: &str = "TROUBADOUR_TIER_NODE";
pub const LEASE: Duration = Duration::from_secs(3);
/// How long before its lease runs out by its own clock a node stops
/// hosting.
pub const MARGIN: Duration = Duration::from_millis(300);
const SHARDS: u32 = 64;
pub const NAMES: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];

// ---- the node process ----------------------------------------------------------

#[derive(Debug, Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = Result<u64, String>;
}
impl RemoteMessage for Add {
    const NAME: &'static str = "tier2.Add";
}

#[derive(Debug, Serialize, Deserialize)]
struct Get;
impl Message for Get {
    type Reply = Result<u64, String>;
}
impl RemoteMessage for Get {
    const NAME: &'static str = "tier2.Get";
}

#[derive(Serialize, Deserialize)]
struct Added(u64);
impl Event for Added {
    const TYPE: &'static str = "tier2.Added";
}

#[derive(Serialize, Deserialize, Default)]
struct Total(u64);
impl EventSourced for Total {
    type Event = Added;
    fn apply(&mut self, Added(n): &Added) {
        self.0 += n;
    }
}

struct Counter {
    total: Persistent<Total>,
}

impl Actor for Counter {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl std::future::Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.total.recovery())
    }
}

impl AsyncHandler<Add> for Counter {
    async fn handle(&mut self, Add(n): Add, ctx: &mut Context<Self>) -> Result<u64, String> {
        self.total
            .persist(Added(n), ctx)
            .await
            .map_err(|e| e.to_string())?;
        Ok(self.total.0)
    }
}

impl Handler<Get> for Counter {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Result<u64, String> {
        Ok(self.total.0)
    }
}

impl Entity for Counter {
    const KIND: &'static str = "tier2.counter";
    fn messages(m: &mut EntityMessages<Self>) {
        m.handle_async::<Add>().handle::<Get>();
    }
}

/// Whether this process is one of the nodes (the tests that start a
/// cluster do nothing then).
pub fn is_node() -> bool {
    std::env::var(NODE_VAR).is_ok()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// A node of the cluster, when the parent test starts this binary as one
/// (each test file that uses this module calls it from a test named
/// `node_process`); nothing otherwise.
pub fn node_process() {
    let Ok(name) = std::env::var(NODE_VAR) else {
        return;
    };
    let dir = PathBuf::from(env("TROUBADOUR_TIER_DIR"));
    let listen: SocketAddr = env("TROUBADOUR_TIER_LISTEN").parse().unwrap();
    let store_url = env("TROUBADOUR_TIER_STORE");
    let system = ActorSystem::builder().name(&name).build();
    let tls = troubadour_remote::dev_certs::read_node(&dir, &name).unwrap();
    let remote = system
        .block_on(
            with_cluster(Remote::builder("tier2", Security::Tls(tls)))
                .listen(listen)
                .start(&system),
        )
        .unwrap();
    let persistence = {
        let store = system.block_on(PostgresStore::connect(&store_url)).unwrap();
        Persistence::new(store.clone(), store)
    };
    let cluster = system.block_on(async {
        let store = PostgresLeaseStore::connect(&store_url).await.unwrap();
        Cluster::builder(Arc::new(store))
            .shards(ShardCount::new(64).unwrap())
            .lease(LEASE, MARGIN)
            .membership(fast_membership())
            .entity_in_shard::<Counter>(move |id, at| Counter {
                total: Persistent::new(&persistence, id, Total::default()).epoch(at.epoch),
            })
            .start(&system, &remote)
            .await
            .unwrap()
    });
    if let Ok(seed) = std::env::var("TROUBADOUR_TIER_SEED") {
        let seed: SocketAddr = seed.parse().unwrap();
        system.block_on(cluster.membership().join_addresses(&remote, &[seed]));
    }
    let mut out = std::io::stdout();
    writeln!(out, "READY {}", remote.local_addr().unwrap()).unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["members"] => cluster.membership().members().len().to_string(),
            ["wall"] => wall_now().to_string(),
            // This node's links to the nodes named closed, and kept closed.
            ["cut", names @ ..] => format!("cut {}", remote.cut_links_to(names)),
            ["heal"] => {
                remote.heal_links();
                "healed".to_string()
            }
            ["balanced"] => match system.block_on(cluster.status()) {
                Ok(s) => format!("{}", s.balanced && s.lease_valid),
                Err(e) => format!("false ({e})"),
            },
            // Adds one to each counter named, all at once; answers with the
            // ones acknowledged.
            ["add", ids @ ..] => {
                let asks: Vec<_> = ids
                    .iter()
                    .map(|id| {
                        Box::pin(
                            cluster
                                .entity::<Counter>(id.to_string())
                                .ask(Add(1))
                                .timeout(2 * LEASE),
                        )
                    })
                    .collect();
                let answers = system.block_on(all(asks));
                let acked: Vec<&str> = ids
                    .iter()
                    .zip(answers)
                    .filter(|(_, a)| matches!(a, Ok(Ok(_))))
                    .map(|(id, _)| *id)
                    .collect();
                format!("acked {}", acked.join(" "))
            }
            ["get", id] => match system.block_on(
                cluster
                    .entity::<Counter>(id.to_string())
                    .ask(Get)
                    .timeout(4 * LEASE),
            ) {
                Ok(Ok(total)) => format!("total {total}"),
                Ok(Err(e)) => format!("error {e}"),
                Err(e) => format!("error {e}"),
            },
            other => format!("error unknown command {other:?}"),
        };
        writeln!(out, "{}", answer.replace('\n', " ")).unwrap();
        out.flush().unwrap();
    }
}

// ---- the test that drives them -------------------------------------------------

pub struct NodeProcess {
    pub name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub addr: SocketAddr,
}

impl NodeProcess {
    /// Starts node `name` listening on `ip`, inside network namespace
    /// `netns` when one is given (`ip netns exec`, which keeps the pid, so
    /// signals reach the node itself).
    pub fn start(
        name: &'static str,
        host: &Host,
        dir: &Path,
        store: &str,
        seed: Option<SocketAddr>,
    ) -> NodeProcess {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match &host.netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        cmd.args([
            "node_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(NODE_VAR, name)
        .env("TROUBADOUR_TIER_DIR", dir)
        .env("TROUBADOUR_TIER_LISTEN", format!("{}:0", host.ip))
        .env("TROUBADOUR_TIER_STORE", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if let Some(seed) = seed {
            cmd.env("TROUBADOUR_TIER_SEED", seed.to_string());
        }
        if let Some(offset) = &host.wall_clock {
            // libfaketime moves the wall clock only (CLOCK_REALTIME), by
            // the offset in the file, read again every second; the
            // monotonic clock, by which the node keeps its lease, runs on.
            cmd.env("LD_PRELOAD", faketime_library())
                .env("FAKETIME_TIMESTAMP_FILE", offset)
                .env("FAKETIME_CACHE_DURATION", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "node {name} ended before it was ready"
            );
            // After the harness's "test node_process ... ", on its line.
            if let Some((_, addr)) = line.trim().split_once("READY ") {
                break addr.parse().unwrap();
            }
        };
        NodeProcess {
            name,
            child,
            stdin,
            stdout,
            addr,
        }
    }

    pub fn send(&mut self, command: &str) {
        eprintln!(
            "[tiers] -> {}: {}",
            self.name,
            &command[..command.len().min(40)]
        );
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to the last command: every command ends.
    pub fn answer(&mut self) -> String {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "node {} ended without answering",
            self.name
        );
        eprintln!(
            "[tiers] <- {}: {}",
            self.name,
            &line.trim()[..line.trim().len().min(60)]
        );
        line.trim().to_string()
    }

    pub fn ask(&mut self, command: &str) -> String {
        self.send(command);
        self.answer()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {}", self.name);
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the test sent and what was acknowledged, per counter.
pub struct Ledger {
    sent: BTreeMap<String, u64>,
    acked: BTreeMap<String, u64>,
    next: u64,
    counters: u64,
}

impl Ledger {
    pub fn new(counters: u64) -> Ledger {
        Ledger {
            sent: BTreeMap::new(),
            acked: BTreeMap::new(),
            next: 0,
            counters,
        }
    }

    /// The next `n` counters, round the ring of `counters`.
    fn ids(&mut self, n: u64) -> Vec<String> {
        (0..n)
            .map(|_| {
                // A 64-bit LCG (Knuth's MMIX constants), its high bits.
                self.next = self
                    .next
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                format!("c{}", (self.next >> 33) % self.counters)
            })
            .collect()
    }

    /// Sends node `i` an `add` of `per_node` counters; its answer is read
    /// by [`collect`](Self::collect).
    pub fn send(&mut self, nodes: &mut [Option<NodeProcess>], i: usize, per_node: u64) {
        let ids = self.ids(per_node);
        for id in &ids {
            *self.sent.entry(id.clone()).or_default() += 1;
        }
        nodes[i]
            .as_mut()
            .unwrap()
            .send(&format!("add {}", ids.join(" ")));
    }

    /// Reads node `i`'s answer to its `add`.
    pub fn collect(&mut self, nodes: &mut [Option<NodeProcess>], i: usize) {
        let answer = nodes[i].as_mut().unwrap().answer();
        let acked = answer
            .strip_prefix("acked")
            .unwrap_or_else(|| panic!("n{i} answered {answer:?} to an add"));
        for id in acked.split_whitespace() {
            *self.acked.entry(id.to_string()).or_default() += 1;
        }
    }

    /// Increments sent and acknowledged so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.sent.values().sum(), self.acked.values().sum())
    }

    /// One `add` to each node in `to` at once, and every answer.
    pub fn round(&mut self, nodes: &mut [Option<NodeProcess>], to: &[usize], per_node: u64) {
        for &i in to {
            self.send(nodes, i, per_node);
        }
        for &i in to {
            self.collect(nodes, i);
        }
    }
}

pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "hang guard: {what} never held");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where a node runs: the address it listens on, the network namespace
/// it runs in (tier 3), if any, and a file holding its wall clock's
/// offset (`+300`, `-300`: seconds) if the test moves that clock.
#[derive(Default)]
pub struct Host {
    pub ip: String,
    pub netns: Option<String>,
    pub wall_clock: Option<PathBuf>,
}

/// libfaketime's library for threaded programs (Debian's `libfaketime`).
fn faketime_library() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .expect(
            "libfaketime is not installed: `apt-get install libfaketime` (scripts/test does it)",
        )
}

/// Moves a node's wall clock to `offset` seconds from the real one
/// (`"+300"`, `"-300"`); the node reads it within a second.
pub fn set_wall_clock(host: &Host, offset: &str) {
    std::fs::write(host.wall_clock.as_ref().unwrap(), format!("{offset}\n")).unwrap();
}

/// The files holding the nodes' wall-clock offsets, in a directory of
/// their own that goes with this value.
pub struct WallClocks {
    dir: tempfile::TempDir,
}

impl WallClocks {
    pub fn new() -> WallClocks {
        WallClocks {
            dir: tempfile::Builder::new()
                .prefix("troubadour-clocks-")
                .tempdir()
                .unwrap(),
        }
    }

    /// Gives each host a wall clock of its own, at the real time for now.
    pub fn attach(&self, hosts: &mut [Host]) {
        for (i, host) in hosts.iter_mut().enumerate() {
            let file = self.dir.path().join(format!("n{i}"));
            std::fs::write(&file, "+0\n").unwrap();
            host.wall_clock = Some(file);
        }
    }
}

/// This process's wall clock, in seconds since the epoch.
fn wall_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Where a node is stopped in [`kill_then_pause`].
#[derive(Clone, Copy, PartialEq)]
pub enum Pause {
    /// Between two rounds: nothing of it in flight.
    BetweenRounds,
    /// In the middle of a round: increments in its entities' mailboxes.
    MidRound,
    /// In the middle of a round, with wall clocks jumped 300 s: n3's back
    /// while it is stopped, n1's back and n2's forward while they run
    /// (the hosts need [`WallClocks`]).
    MidRoundWithClockJumps,
}

/// The scenario tiers 2 and 3 share: `kill -9` of n4 under load, then n3
/// stopped for three leases while the others go on, and resumed; then the
/// checkers. A node keeps its lease by its monotonic clock, so the
/// resumed n3 gives up its shards (and what it still tries to write with
/// its old epoch is refused), whatever the wall clocks did.
pub fn kill_then_pause(five: &mut Five, hosts: &[Host], pause: Pause) {
    let jumps = pause == Pause::MidRoundWithClockJumps;
    five.nodes[4].as_ref().unwrap().signal("-KILL");
    five.nodes[4] = None;
    for _ in 0..6 {
        five.round(&[0, 1, 2, 3], 60);
    }

    let mid_round = pause != Pause::BetweenRounds;
    if mid_round {
        for i in 0..4 {
            five.ledger.send(&mut five.nodes, i, 60);
        }
    }
    five.nodes[3].as_ref().unwrap().signal("-STOP");
    let stopped = Instant::now();
    if jumps {
        set_wall_clock(&hosts[3], "-300");
        set_wall_clock(&hosts[1], "-300");
        set_wall_clock(&hosts[2], "+300");
    }
    if mid_round {
        for i in 0..3 {
            five.ledger.collect(&mut five.nodes, i);
        }
    }
    while stopped.elapsed() < 3 * LEASE {
        five.round(&[0, 1, 2], 60);
    }
    five.nodes[3].as_ref().unwrap().signal("-CONT");
    if mid_round {
        five.ledger.collect(&mut five.nodes, 3);
    }
    for _ in 0..6 {
        five.round(&[0, 1, 2, 3], 60);
    }
    five.wait_settled("four settled nodes", "4");
    if jumps {
        // The clocks did jump.
        let now = wall_now();
        for (i, offset) in [(1, -300), (2, 300), (3, -300), (0, 0)] {
            let wall: i64 = five.nodes[i].as_mut().unwrap().ask("wall").parse().unwrap();
            assert!(
                (wall - now - offset).abs() < 30,
                "n{i}'s wall clock is {} s from the real one, not {offset} s",
                wall - now
            );
        }
    }
    assert!(
        five.shards_taken_over() > 0,
        "no shard was taken over from a lost owner: the scenario proved nothing"
    );
    five.check();
}

/// One cluster of five processes at a time: two at once on a small
/// machine starve each other's failure detectors (and tier 3's would
/// share their namespaces' names and addresses).
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held by a test for as long as its cluster, and whatever it runs in,
/// exists.
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Five node processes, their PostgreSQL server, and what the test sent
/// them.
pub struct Five {
    pub nodes: Vec<Option<NodeProcess>>,
    pub ledger: Ledger,
    pg: postgres::Server,
    runtime: tokio::runtime::Runtime,
    dir: PathBuf,
}

impl Five {
    /// Starts `pg`'s schemas with the history triggers, then five nodes on
    /// `hosts` (the first one the others' seed), reaching the store at
    /// `store_url`; returns once all five see five members and balanced
    /// shards. The ledger spreads increments over `counters` counters.
    /// The caller holds [`one_cluster_at_a_time`].
    pub fn start(pg: postgres::Server, store_url: &str, hosts: &[Host], counters: u64) -> Five {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            // The journal's and the lease store's schemas, before five
            // processes race to create them, and the history of the lease
            // store's rows.
            drop(PostgresStore::connect(&pg.url()).await.unwrap());
            let store = PostgresLeaseStore::connect(&pg.url()).await.unwrap();
            store.join(ShardCount::new(SHARDS).unwrap()).await.unwrap();
        });
        let client = sql_client(&runtime, &pg);
        runtime.block_on(client.batch_execute(HISTORY)).unwrap();
        let dir = std::env::temp_dir().join(format!("troubadour-tiers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = DevCa::new("tiers test CA").unwrap();
        for (name, host) in NAMES.iter().zip(hosts) {
            ca.write_node_at(&dir, name, &[host.ip.parse().unwrap()])
                .unwrap();
        }
        let mut nodes: Vec<Option<NodeProcess>> = Vec::new();
        let first = NodeProcess::start(NAMES[0], &hosts[0], &dir, store_url, None);
        let seed = first.addr;
        nodes.push(Some(first));
        for (name, host) in NAMES.iter().zip(hosts).skip(1) {
            nodes.push(Some(NodeProcess::start(
                name,
                host,
                &dir,
                store_url,
                Some(seed),
            )));
        }
        let mut five = Five {
            nodes,
            ledger: Ledger::new(counters),
            pg,
            runtime,
            dir,
        };
        five.wait_settled("five settled nodes", "5");
        five
    }

    /// Whether every live node sees `members` members and holds a valid
    /// lease with balanced shards.
    pub fn settled(&mut self, members: &str) -> bool {
        self.nodes
            .iter_mut()
            .flatten()
            .all(|n| n.ask("members") == members && n.ask("balanced") == "true")
    }

    pub fn wait_settled(&mut self, what: &str, members: &str) {
        wait_until(what, Duration::from_secs(60), || self.settled(members));
    }

    /// One `add` of `per_node` increments to each node in `to` at once.
    pub fn round(&mut self, to: &[usize], per_node: u64) {
        self.ledger.round(&mut self.nodes, to, per_node);
    }

    /// Rounds to all five until `how_long` has passed; returns the
    /// increments sent and acknowledged meanwhile.
    pub fn rounds_for(&mut self, how_long: Duration, per_node: u64) -> (u64, u64) {
        let start = Instant::now();
        let before = self.ledger.totals();
        while start.elapsed() < how_long {
            self.round(&[0, 1, 2, 3, 4], per_node);
        }
        let after = self.ledger.totals();
        (after.0 - before.0, after.1 - before.1)
    }

    /// Every counter holds what was acknowledged and no more than was
    /// sent; every journal is linear, and no older epoch wrote after a
    /// newer one; the lease store never had two valid epochs of a shard.
    pub fn check(&mut self) {
        let ledger = &self.ledger;
        let reader = self.nodes.iter_mut().flatten().next().unwrap();
        let mut wrong = Vec::new();
        for (id, &sent) in &ledger.sent {
            let answer = reader.ask(&format!("get {id}"));
            let total: u64 = answer
                .strip_prefix("total ")
                .unwrap_or_else(|| panic!("{id}: {answer}"))
                .parse()
                .unwrap();
            let acked = ledger.acked.get(id).copied().unwrap_or(0);
            if total < acked || total > sent {
                wrong.push(format!("{id}: {total}, acknowledged {acked}, sent {sent}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        let (sent, acked) = ledger.totals();
        eprintln!(
            "[tiers] {} counters, {sent} increments sent, {acked} acknowledged",
            ledger.sent.len()
        );
        assert!(acked > 0, "nothing was acknowledged");
        let client = sql_client(&self.runtime, &self.pg);
        let (journals, history) = self.runtime.block_on(async {
            let journals = client
                .query(
                    "SELECT persistence_id, sequence, epoch FROM troubadour_journal
                     ORDER BY persistence_id, sequence",
                    &[],
                )
                .await
                .unwrap();
            let history = client
                .query(
                    "SELECT (extract(epoch FROM at) * 1000000)::bigint, what, name, incarnation,
                            ttl_ms, shard, epoch
                     FROM tiers_lease_history ORDER BY seq",
                    &[],
                )
                .await
                .unwrap();
            (journals, history)
        });
        let broken = broken_journals(
            journals
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        );
        assert!(broken.is_empty(), "{broken:#?}");
        let history: Vec<LeaseRow> = history
            .iter()
            .map(|r| LeaseRow {
                at_us: r.get(0),
                what: r.get(1),
                node: (r.get(2), r.get(3)),
                ttl_ms: r.get(4),
                shard: r.get(5),
                epoch: r.get(6),
            })
            .collect();
        let claims = history.iter().filter(|r| r.what == "claimed").count();
        eprintln!(
            "[tiers] the lease store's history: {} rows, {claims} claims",
            history.len()
        );
        if let Err(e) = two_valid_epochs(&history) {
            panic!("{e}");
        }
    }

    /// How many shards were claimed from an owner that had not released
    /// them (moved because their owner's lease ran out): for scenarios
    /// meant to move shards that way.
    pub fn shards_taken_over(&self) -> usize {
        let client = sql_client(&self.runtime, &self.pg);
        let row = self
            .runtime
            .block_on(client.query_one(
                "SELECT count(*) FROM tiers_lease_history WHERE what = 'taken over'",
                &[],
            ))
            .unwrap();
        row.get::<_, i64>(0) as usize
    }
}

/// A connection to the test's own PostgreSQL server, driven by `runtime`.
fn sql_client(runtime: &tokio::runtime::Runtime, pg: &postgres::Server) -> tokio_postgres::Client {
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    })
}

impl Drop for Five {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Triggers that keep every change to the lease store's rows, stamped
/// with the database's clock when written: renewals (a lease's counter
/// moving), leaves (its row deleted), claims (an assignment's epoch
/// moving; "taken over" when the previous owner had not released it) and
/// releases.
const HISTORY: &str = "
CREATE TABLE tiers_lease_history (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    what text NOT NULL,
    name text,
    incarnation bigint,
    ttl_ms bigint,
    shard int,
    epoch bigint
);
CREATE FUNCTION tiers_lease_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO tiers_lease_history (what, name, incarnation)
        VALUES ('left', OLD.name, OLD.incarnation);
    ELSE
        INSERT INTO tiers_lease_history (what, name, incarnation, ttl_ms)
        VALUES ('renewed', NEW.name, NEW.incarnation, NEW.ttl_ms);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER tiers_lease_changed AFTER INSERT OR UPDATE OR DELETE ON troubadour_leases
    FOR EACH ROW EXECUTE FUNCTION tiers_lease_changed();
CREATE FUNCTION tiers_shard_changed() RETURNS trigger AS $$
BEGIN
    IF NEW.epoch <> OLD.epoch THEN
        INSERT INTO tiers_lease_history (what, name, incarnation, shard, epoch)
        VALUES (CASE WHEN OLD.owner_name IS NOT NULL AND NOT OLD.released
                     THEN 'taken over' ELSE 'claimed' END,
                NEW.owner_name, NEW.owner_incarnation, NEW.shard, NEW.epoch);
    ELSIF NEW.released AND NOT OLD.released THEN
        INSERT INTO tiers_lease_history (what, name, incarnation, shard, epoch)
        VALUES ('released', NEW.owner_name, NEW.owner_incarnation, NEW.shard, NEW.epoch);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER tiers_shard_changed AFTER UPDATE ON troubadour_shards
    FOR EACH ROW EXECUTE FUNCTION tiers_shard_changed();
";

/// One row of the lease store's history.
struct LeaseRow {
    at_us: i64,
    what: String,
    node: (Option<String>, Option<i64>),
    ttl_ms: Option<i64>,
    shard: Option<i32>,
    epoch: Option<i64>,
}

/// Replays the lease store's history and finds a claim of a shard's new
/// epoch while the previous owner, which had not released it, could still
/// count itself its owner: by its own clock a node hosts until its last
/// renewal's time plus the time to live, less the margin, and it started
/// that count before the store wrote the renewal, so a claim written
/// before (renewal's write + time to live − margin) overlaps. The same
/// check as tier 1's, on the database's clock.
fn two_valid_epochs(history: &[LeaseRow]) -> Result<(), String> {
    type Node = (Option<String>, Option<i64>);
    let mut renewed: HashMap<Node, (i64, i64)> = HashMap::new();
    let mut shards: HashMap<i32, (Node, i64)> = HashMap::new();
    let margin_us = MARGIN.as_micros() as i64;
    for r in history {
        match r.what.as_str() {
            "renewed" => {
                renewed.insert(r.node.clone(), (r.at_us, r.ttl_ms.unwrap_or(0)));
            }
            "left" => {
                renewed.remove(&r.node);
            }
            "released" => {}
            "claimed" | "taken over" => {
                let shard = r.shard.unwrap();
                let epoch = r.epoch.unwrap();
                if let Some((owner, last_epoch)) = shards.get(&shard) {
                    if epoch != last_epoch + 1 {
                        return Err(format!(
                            "shard {shard}: epoch {epoch} follows epoch {last_epoch}"
                        ));
                    }
                    if r.what == "taken over" && *owner != r.node {
                        if let Some(&(at, ttl_ms)) = renewed.get(owner) {
                            let valid_until = at + ttl_ms * 1000 - margin_us;
                            if valid_until > r.at_us {
                                return Err(format!(
                                    "shard {shard}: epoch {epoch} claimed by {:?} while epoch \
                                     {last_epoch} of {owner:?} was valid for {} ms more",
                                    r.node,
                                    (valid_until - r.at_us) / 1000
                                ));
                            }
                        }
                    }
                }
                shards.insert(shard, (r.node.clone(), epoch));
            }
            other => return Err(format!("unknown history row {other}")),
        }
    }
    Ok(())
}

/// Journals (id, sequence, epoch in order) that are not numbered from 1
/// without a gap, or in which an older epoch wrote after a newer one.
fn broken_journals(rows: Vec<(String, i64, i64)>) -> Vec<String> {
    let mut broken = vec![];
    let mut last: Option<&(String, i64, i64)> = None;
    for row in &rows {
        let (id, seq, epoch) = row;
        match last {
            Some((l_id, l_seq, l_epoch)) if l_id == id => {
                if *seq != l_seq + 1 || epoch < l_epoch {
                    broken.push(format!(
                        "{id}: event {seq} at epoch {epoch} after {l_seq} at {l_epoch}"
                    ));
                }
            }
            _ => {
                if *seq != 1 {
                    broken.push(format!("{id}: starts at {seq}"));
                }
            }
        }
        last = Some(row);
    }
    broken
}
