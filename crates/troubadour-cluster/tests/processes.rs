//! Tier 2 of DISTRIBUTION.md's scenarios: five real processes on
//! 127.0.0.1–127.0.0.5, mutual TLS, leases in a PostgreSQL server the test
//! starts, and the operating system's own faults: `kill -9` of a node
//! under load, and `SIGSTOP` of another for three times the lease before
//! `SIGCONT`; and partitions made by the transport's test-only fault
//! switch (`Remote::cut_links_to`, feature `faults`).
//!
//! The nodes are this test binary again (`node_process`, which does
//! nothing unless the parent starts it with `TROUBADOUR_TIER2_NODE` set),
//! driven a line at a time over stdin/stdout. Their counters are
//! event-sourced in PostgreSQL (troubadour-persistence), each activation
//! writing with the epoch at which its node owns the counter's shard
//! (`ClusterBuilder::entity_in_shard`): once a shard has moved, the store
//! refuses what a stale owner (a paused node, resumed) still tries to
//! write. Checkers: every command ends (so every ask did), each counter
//! ends between its acknowledged and its sent increments, and every
//! counter's journal is linear (numbered without a gap) with epochs that
//! never go down: no stale owner wrote after a newer one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_cluster::{
    with_cluster, Cluster, Entity, EntityMessages, PostgresLeaseStore, ShardCount,
};
use troubadour_persistence::{Event, EventSourced, Persistence, Persistent, PostgresStore};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteMessage, Security};

mod postgres;

mod common;
use common::{all, fast_membership};

const NODE_VAR: &str = "TROUBADOUR_TIER2_NODE";
const LEASE: Duration = Duration::from_secs(3);
const COUNTERS: u64 = 300;
const NAMES: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];

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

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// A node of the cluster, when the parent test starts this binary as one;
/// nothing otherwise.
#[test]
fn node_process() {
    let Ok(name) = std::env::var(NODE_VAR) else {
        return;
    };
    let dir = PathBuf::from(env("TROUBADOUR_TIER2_DIR"));
    let listen: SocketAddr = env("TROUBADOUR_TIER2_LISTEN").parse().unwrap();
    let store_url = env("TROUBADOUR_TIER2_STORE");
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
            .lease(LEASE, Duration::from_millis(300))
            .membership(fast_membership())
            .entity_in_shard::<Counter>(move |id, at| Counter {
                total: Persistent::new(&persistence, id, Total::default()).epoch(at.epoch),
            })
            .start(&system, &remote)
            .await
            .unwrap()
    });
    if let Ok(seed) = std::env::var("TROUBADOUR_TIER2_SEED") {
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

struct NodeProcess {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl NodeProcess {
    fn start(
        name: &'static str,
        ip: &str,
        dir: &Path,
        store: &str,
        seed: Option<SocketAddr>,
    ) -> NodeProcess {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "node_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(NODE_VAR, name)
        .env("TROUBADOUR_TIER2_DIR", dir)
        .env("TROUBADOUR_TIER2_LISTEN", format!("{ip}:0"))
        .env("TROUBADOUR_TIER2_STORE", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if let Some(seed) = seed {
            cmd.env("TROUBADOUR_TIER2_SEED", seed.to_string());
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

    fn send(&mut self, command: &str) {
        eprintln!(
            "[tier2] -> {}: {}",
            self.name,
            &command[..command.len().min(40)]
        );
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to the last command: every command ends.
    fn answer(&mut self) -> String {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "node {} ended without answering",
            self.name
        );
        eprintln!(
            "[tier2] <- {}: {}",
            self.name,
            &line.trim()[..line.trim().len().min(60)]
        );
        line.trim().to_string()
    }

    fn ask(&mut self, command: &str) -> String {
        self.send(command);
        self.answer()
    }

    fn signal(&self, signal: &str) {
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
#[derive(Default)]
struct Ledger {
    sent: BTreeMap<String, u64>,
    acked: BTreeMap<String, u64>,
    next: u64,
}

impl Ledger {
    /// The next `n` counters, round the ring of `COUNTERS`.
    fn ids(&mut self, n: u64) -> Vec<String> {
        (0..n)
            .map(|_| {
                // A 64-bit LCG (Knuth's MMIX constants), its high bits.
                self.next = self
                    .next
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                format!("c{}", (self.next >> 33) % COUNTERS)
            })
            .collect()
    }

    /// Sends node `i` an `add` of `per_node` counters; its answer is read
    /// by [`collect`](Self::collect).
    fn send(&mut self, nodes: &mut [Option<NodeProcess>], i: usize, per_node: u64) {
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
    fn collect(&mut self, nodes: &mut [Option<NodeProcess>], i: usize) {
        let answer = nodes[i].as_mut().unwrap().answer();
        let acked = answer
            .strip_prefix("acked")
            .unwrap_or_else(|| panic!("n{i} answered {answer:?} to an add"));
        for id in acked.split_whitespace() {
            *self.acked.entry(id.to_string()).or_default() += 1;
        }
    }

    /// Increments sent and acknowledged so far.
    fn totals(&self) -> (u64, u64) {
        (self.sent.values().sum(), self.acked.values().sum())
    }

    /// One `add` to each node in `to` at once, and every answer.
    fn round(&mut self, nodes: &mut [Option<NodeProcess>], to: &[usize], per_node: u64) {
        for &i in to {
            self.send(nodes, i, per_node);
        }
        for &i in to {
            self.collect(nodes, i);
        }
    }
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "hang guard: {what} never held");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// kill -9 of n4 under load, then n3 stopped between two rounds for three
/// leases (nothing of it in flight) and resumed: its shards moved, it
/// gives them up, and nothing it does afterwards is a second activation.
#[test]
fn five_processes_survive_kill_9_and_a_pause_past_the_lease() {
    five_processes(Pause::BetweenRounds);
}

/// The same with n3 stopped in the middle of a round: messages already in
/// its entities' mailboxes are handled when it resumes, before its region
/// sees that its lease ran out, by activations whose shards another node
/// now owns. Their writes carry the old epoch and the journal refuses
/// them once the new owner has recovered the counter (with CAS counters
/// that did not know the epoch, n3 wrote over the new owners' totals in
/// three runs of three).
#[test]
fn a_node_paused_in_the_middle_of_a_round_writes_nothing_stale_once_resumed() {
    five_processes(Pause::MidRound);
}

/// The cluster split 3|2 by the transport for four leases under load
/// (each side still reaching the lease store, so each keeps its shards and
/// asks across the cut end with their timeouts), then healed: the five
/// find each other again, every counter answers, and the same checkers
/// hold: nothing acknowledged lost, every journal linear, no stale epoch.
#[test]
fn five_processes_split_three_two_by_the_transport_lose_nothing_acknowledged() {
    five_processes(Pause::Partition);
}

#[derive(PartialEq)]
enum Pause {
    /// No pause, no kill: a 3|2 partition by the fault switch.
    Partition,
    BetweenRounds,
    MidRound,
}

/// One cluster of five processes at a time: two at once on a small
/// machine starve each other's failure detectors.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn five_processes(pause: Pause) {
    if std::env::var(NODE_VAR).is_ok() {
        return;
    }
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let pg = postgres::Server::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // The journal's schema, before five processes race to create it.
        drop(PostgresStore::connect(&pg.url()).await.unwrap());
        drop(client);
    });
    let dir = std::env::temp_dir().join(format!("troubadour-tier2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = DevCa::new("tier 2 test CA").unwrap();
    let ips: Vec<String> = (1..=5).map(|i| format!("127.0.0.{i}")).collect();
    for (name, ip) in NAMES.iter().zip(&ips) {
        ca.write_node_at(&dir, name, &[ip.parse().unwrap()])
            .unwrap();
    }
    let mut nodes: Vec<Option<NodeProcess>> = Vec::new();
    let first = NodeProcess::start(NAMES[0], &ips[0], &dir, &pg.url(), None);
    let seed = first.addr;
    nodes.push(Some(first));
    for i in 1..5 {
        nodes.push(Some(NodeProcess::start(
            NAMES[i],
            &ips[i],
            &dir,
            &pg.url(),
            Some(seed),
        )));
    }
    let settled = |nodes: &mut [Option<NodeProcess>], members: &str| {
        nodes
            .iter_mut()
            .flatten()
            .all(|n| n.ask("members") == members && n.ask("balanced") == "true")
    };
    wait_until("five settled nodes", Duration::from_secs(60), || {
        settled(&mut nodes, "5")
    });
    let mut ledger = Ledger::default();
    for _ in 0..3 {
        ledger.round(&mut nodes, &[0, 1, 2, 3, 4], 60);
    }
    if pause == Pause::Partition {
        let (majority, minority) = ([0, 1, 2], [3, 4]);
        for &i in &majority {
            nodes[i].as_mut().unwrap().ask("cut n3 n4");
        }
        for &i in &minority {
            nodes[i].as_mut().unwrap().ask("cut n0 n1 n2");
        }
        let cut = Instant::now();
        let before = ledger.totals();
        while cut.elapsed() < 4 * LEASE {
            ledger.round(&mut nodes, &[0, 1, 2, 3, 4], 60);
        }
        // The cut holds: about half the increments go to a counter whose
        // shard the other side owns, and none of those is acknowledged.
        let (sent, acked) = ledger.totals();
        let (sent, acked) = (sent - before.0, acked - before.1);
        eprintln!("[tier2] during the split: {acked} of {sent} increments acknowledged");
        assert!(
            acked * 10 < sent * 8,
            "{acked} of {sent} acknowledged across a split"
        );
        for n in nodes.iter_mut().flatten() {
            assert_eq!(n.ask("heal"), "healed");
        }
        wait_until(
            "five settled nodes after the heal",
            Duration::from_secs(60),
            || settled(&mut nodes, "5"),
        );
        for _ in 0..3 {
            ledger.round(&mut nodes, &[0, 1, 2, 3, 4], 60);
        }
        check(&pg, &runtime, &mut nodes, &ledger);
        drop(nodes);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }

    // kill -9 of n4 under load.
    nodes[4].as_ref().unwrap().signal("-KILL");
    nodes[4] = None;
    for _ in 0..6 {
        ledger.round(&mut nodes, &[0, 1, 2, 3], 60);
    }

    // n3 stopped for three leases, while the others go on; then resumed
    // (mid-round: with what it was doing still to do).
    let mid_round = pause == Pause::MidRound;
    if mid_round {
        for i in 0..4 {
            ledger.send(&mut nodes, i, 60);
        }
    }
    nodes[3].as_ref().unwrap().signal("-STOP");
    let stopped = Instant::now();
    if mid_round {
        for i in 0..3 {
            ledger.collect(&mut nodes, i);
        }
    }
    while stopped.elapsed() < 3 * LEASE {
        ledger.round(&mut nodes, &[0, 1, 2], 60);
    }
    nodes[3].as_ref().unwrap().signal("-CONT");
    if mid_round {
        ledger.collect(&mut nodes, 3);
    }
    for _ in 0..6 {
        ledger.round(&mut nodes, &[0, 1, 2, 3], 60);
    }
    wait_until("four settled nodes", Duration::from_secs(60), || {
        settled(&mut nodes, "4")
    });
    check(&pg, &runtime, &mut nodes, &ledger);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every counter holds what was acknowledged and no more than was sent;
/// every journal is linear, and no older epoch wrote after a newer one.
fn check(
    pg: &postgres::Server,
    runtime: &tokio::runtime::Runtime,
    nodes: &mut [Option<NodeProcess>],
    ledger: &Ledger,
) {
    let reader = nodes[0].as_mut().unwrap();
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
    let acked: u64 = ledger.acked.values().sum();
    let sent: u64 = ledger.sent.values().sum();
    eprintln!(
        "[tier2] {} counters, {sent} increments sent, {acked} acknowledged",
        ledger.sent.len()
    );
    assert!(acked > 0, "nothing was acknowledged");
    // Every journal is linear, and no older epoch wrote after a newer one.
    let broken: Vec<String> = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT persistence_id, sequence, epoch FROM troubadour_journal
                 ORDER BY persistence_id, sequence",
                &[],
            )
            .await
            .unwrap();
        let mut broken = vec![];
        let mut last: Option<(String, i64, i64)> = None;
        for r in rows {
            let (id, seq, epoch): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
            match &last {
                Some((l_id, l_seq, l_epoch)) if *l_id == id => {
                    if seq != l_seq + 1 || epoch < *l_epoch {
                        broken.push(format!(
                            "{id}: event {seq} at epoch {epoch} after {l_seq} at {l_epoch}"
                        ));
                    }
                }
                _ => {
                    if seq != 1 {
                        broken.push(format!("{id}: starts at {seq}"));
                    }
                }
            }
            last = Some((id, seq, epoch));
        }
        broken
    });
    assert!(broken.is_empty(), "{broken:#?}");
}
