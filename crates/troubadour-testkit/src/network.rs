//! A simulated network: several actor systems in one process, each with
//! the real remote layer (`troubadour-remote`) but no sockets, whose
//! connections carry their bytes through this network: held, delayed,
//! cut by partitions (both ways or one way), lost with a crashed node, all
//! on virtual time and decided by a seeded PRNG, so that a seed replays a
//! run event for event.
//!
//! What the network does to bytes is what TCP lets happen: within one
//! connection, bytes arrive in order or not at all (a connection never
//! reorders, duplicates or drops a frame and goes on); what varies is when
//! they arrive, how connections interleave, and when a connection breaks.
//! A direction cut by a partition delivers nothing; once it has been cut
//! for the heartbeat timeout both ends count the connection lost, as the
//! real heartbeats would. A crashed node's connections are lost at once on
//! the other side.
//!
//! A lost connection is not the end of a node: the next send to it makes
//! the remote layer dial again (after its backoff), and the network
//! connects the dial if both directions between the two nodes are open and
//! the node is up, or fails it. Dials that fail for the remote layer's
//! `node_down_after` of virtual time declare the node down for good. A
//! crashed node can be [restarted](SimNetwork::restart): a new incarnation
//! under the same name, which the other nodes' dials find, as a real
//! handshake would, and take for a new node.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use troubadour::prelude::*;
//! use troubadour_remote::{Accepts, RemoteActor, RemoteMessage};
//! use troubadour_testkit::SimNetwork;
//!
//! #[derive(Serialize, Deserialize)]
//! struct Add(u64);
//! impl Message for Add { type Reply = u64; }
//! impl RemoteMessage for Add { const NAME: &'static str = "doc.Add"; }
//!
//! #[derive(Default)]
//! struct Counter(u64);
//! impl Actor for Counter {}
//! impl Handler<Add> for Counter {
//!     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
//! }
//! impl RemoteActor for Counter {
//!     const NAME: &'static str = "doc.Counter";
//!     fn accepts(a: &mut Accepts<Self>) { a.handle::<Add>(); }
//! }
//!
//! let mut net = SimNetwork::new(7);
//! let a = net.node("a", |b| b.register::<Add>());
//! let b = net.node("b", |b| b.register::<Add>());
//! let counter = net.system(b).spawn(Counter::default())?;
//! net.remote(b).expose("counter", &counter)?;
//! let remote = net.lookup::<Counter>(a, b, "counter")?;
//! remote.tell(Add(1))?;
//! assert_eq!(net.block_on(remote.ask(Add(2)))?, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::rng::Rng;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use troubadour::{ActorRef, ActorSystem};
use troubadour_remote::sim::{SimConnection, SimDial};
use troubadour_remote::{LookupError, Remote, RemoteActor, RemoteBuilder, Security};

/// The cluster name every simulated node uses.
const CLUSTER: &str = "simulated";

/// Which simulated node: the index [`SimNetwork::node`] returned.
pub type NodeIndex = usize;

struct SimNode {
    system: ActorSystem,
    remote: Remote,
    crashed: bool,
    /// Stopped (SIGSTOP, a paused VM, a long GC) since then: it runs
    /// nothing and reads nothing until resumed.
    paused_since: Option<Instant>,
}

/// One direction of a connection: its end that sends, and the chunks of
/// bytes on their way with the virtual time each arrives.
struct Direction {
    from: NodeIndex,
    to: NodeIndex,
    in_flight: VecDeque<(Instant, bytes::Bytes)>,
}

/// A connection a node wants, attempted at `at`.
struct PendingDial {
    from: NodeIndex,
    at: Instant,
    dial: SimDial,
}

struct SimConn {
    /// `ends[i]` belongs to `dirs[i].from`.
    ends: [SimConnection; 2],
    dirs: [Direction; 2],
    lost: bool,
}

/// Something the network did, for the trace a failing seed prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetEvent {
    /// An actor turn on a node.
    Turn(NodeIndex),
    /// `bytes` left `from` for `to`, to arrive after `delay`.
    Sent {
        /// Sending node.
        from: NodeIndex,
        /// Receiving node.
        to: NodeIndex,
        /// How many bytes.
        bytes: usize,
        /// Their delay.
        delay: Duration,
    },
    /// Bytes arrived.
    Arrived {
        /// Sending node.
        from: NodeIndex,
        /// Receiving node.
        to: NodeIndex,
        /// How many bytes.
        bytes: usize,
    },
    /// Bytes were dropped by a partition.
    Cut {
        /// Sending node.
        from: NodeIndex,
        /// Receiving node.
        to: NodeIndex,
        /// How many bytes.
        bytes: usize,
    },
    /// A connection was lost at both ends.
    Lost(NodeIndex, NodeIndex),
    /// A node crashed.
    Crashed(NodeIndex),
    /// A crashed node started again as a new incarnation.
    Restarted(NodeIndex),
    /// A node was paused.
    Paused(NodeIndex),
    /// A paused node runs again.
    Resumed(NodeIndex),
    /// A dial connected.
    Dialled {
        /// Dialling node.
        from: NodeIndex,
        /// Node dialled.
        to: NodeIndex,
    },
    /// A dial failed or was refused.
    DialFailed {
        /// Dialling node.
        from: NodeIndex,
        /// Node dialled, if it exists.
        to: Option<NodeIndex>,
        /// Why.
        reason: String,
    },
    /// The virtual clock moved to this offset from the start.
    Clock(Duration),
}

/// A simulated network of actor systems: several systems in one process
/// with the real remote layer and no sockets, their connections' bytes
/// held, delayed, cut and lost as the seed and the test decide (see the
/// crate's README for the faults and what TCP rules out).
pub struct SimNetwork {
    seed: u64,
    rng: Rng,
    nodes: Vec<SimNode>,
    conns: Vec<SimConn>,
    /// Directions cut by a partition, and since when.
    cuts: BTreeMap<(NodeIndex, NodeIndex), Instant>,
    dials: Vec<PendingDial>,
    /// Systems started so far (restarts included).
    starts: u64,
    /// The common virtual clock: every node's system is kept at it.
    now: Instant,
    /// The same, for code outside the network (a simulated lease store).
    shared_now: Arc<std::sync::Mutex<Instant>>,
    start: Instant,
    max_delay: Duration,
    heartbeat_timeout: Duration,
    reset_per_million: u32,
    trace: Vec<NetEvent>,
}

impl SimNetwork {
    /// An empty network whose choices come from `seed`. Chunks of bytes
    /// are delayed up to 5 ms each; a cut direction is lost after 1 s.
    pub fn new(seed: u64) -> SimNetwork {
        let now = Instant::now();
        SimNetwork {
            seed,
            rng: Rng(seed),
            nodes: Vec::new(),
            conns: Vec::new(),
            cuts: BTreeMap::new(),
            dials: Vec::new(),
            starts: 0,
            now,
            shared_now: Arc::new(std::sync::Mutex::new(now)),
            start: now,
            max_delay: Duration::from_millis(5),
            heartbeat_timeout: Duration::from_secs(1),
            reset_per_million: 0,
            trace: Vec::new(),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The network's virtual clock, for what runs beside the nodes (a
    /// simulated lease store times its leases by it).
    pub fn clock(&self) -> Arc<dyn Fn() -> Instant + Send + Sync> {
        let now = self.shared_now.clone();
        Arc::new(move || *now.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The virtual time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Sets the largest delay of one chunk of bytes (0: none).
    pub fn set_max_delay(&mut self, max: Duration) {
        self.max_delay = max;
    }

    /// Sets how long a cut direction takes to count as a lost connection.
    pub fn set_heartbeat_timeout(&mut self, timeout: Duration) {
        self.heartbeat_timeout = timeout;
    }

    /// Adds a node named `name` (a manually scheduled system on virtual
    /// time, with its remote layer configured by `configure`: register
    /// the messages and actor types there) and connects it to every node
    /// already in the network.
    pub fn node(
        &mut self,
        name: &str,
        configure: impl FnOnce(RemoteBuilder) -> RemoteBuilder,
    ) -> NodeIndex {
        let node = self.start_node(name, configure);
        let index = self.nodes.len();
        self.nodes.push(node);
        self.connect_to_all(index);
        index
    }

    /// Starts crashed node `n` again: a new system under the same name, so
    /// a new incarnation (as a restarted process is), connected to every
    /// node it can reach. References to the old incarnation's actors stay
    /// dead: the first dial that finds the new one declares the old one
    /// down.
    ///
    /// # Panics
    /// If node `n` has not crashed.
    pub fn restart(
        &mut self,
        n: NodeIndex,
        configure: impl FnOnce(RemoteBuilder) -> RemoteBuilder,
    ) {
        assert!(self.nodes[n].crashed, "only a crashed node can restart");
        let name = self.nodes[n].system.node().name().to_string();
        let node = self.start_node(&name, configure);
        // The old system is gone with its process.
        let old = std::mem::replace(&mut self.nodes[n], node);
        old.remote.shutdown();
        drop(old);
        self.trace.push(NetEvent::Restarted(n));
        self.connect_to_all(n);
    }

    fn start_node(
        &mut self,
        name: &str,
        configure: impl FnOnce(RemoteBuilder) -> RemoteBuilder,
    ) -> SimNode {
        // Incarnations from the seed, so what carries them replays too,
        // and from the test's thread name: tests running at once in one
        // process with the same seeds and node names must not make the
        // same node twice (the process has one table of nodes).
        self.starts += 1;
        let incarnation = crate::rng::Rng(
            self.seed ^ self.starts.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ thread_discriminator(),
        )
        .next();
        let system = ActorSystem::builder()
            .name(name)
            .manual_scheduling()
            .virtual_time_from(self.now)
            .incarnation(incarnation)
            .build();
        let remote = configure(Remote::builder(CLUSTER, Security::PlaintextLoopbackOnly))
            .start_simulated(&system)
            .expect("the simulated node's remote layer starts");
        SimNode {
            system,
            remote,
            crashed: false,
            paused_since: None,
        }
    }

    /// Connects node `index` to every other node that is up and not cut
    /// from it.
    fn connect_to_all(&mut self, index: NodeIndex) {
        for other in 0..self.nodes.len() {
            if other == index || self.nodes[other].crashed || self.is_cut(index, other) {
                continue;
            }
            let (mine, theirs) = self.nodes[index]
                .remote
                .connect_simulated(&self.nodes[other].remote);
            self.add_conn(index, other, mine, theirs);
        }
    }

    fn add_conn(&mut self, a: NodeIndex, b: NodeIndex, mine: SimConnection, theirs: SimConnection) {
        self.conns.push(SimConn {
            ends: [mine, theirs],
            dirs: [
                Direction {
                    from: a,
                    to: b,
                    in_flight: VecDeque::new(),
                },
                Direction {
                    from: b,
                    to: a,
                    in_flight: VecDeque::new(),
                },
            ],
            lost: false,
        });
    }

    /// Whether either direction between `a` and `b` is cut (a TCP
    /// connection needs both to be set up).
    fn is_cut(&self, a: NodeIndex, b: NodeIndex) -> bool {
        self.cuts.contains_key(&(a, b)) || self.cuts.contains_key(&(b, a))
    }

    /// Node `i`'s system: spawn on it, send from it (from the test's
    /// thread).
    pub fn system(&self, i: NodeIndex) -> &ActorSystem {
        &self.nodes[i].system
    }

    /// Node `i`'s remote layer: expose its actors there.
    pub fn remote(&self, i: NodeIndex) -> &Remote {
        &self.nodes[i].remote
    }

    /// The actor node `to` exposes as `name`, as an `ActorRef` on node
    /// `from`.
    pub fn lookup<A: RemoteActor>(
        &self,
        from: NodeIndex,
        to: NodeIndex,
        name: &str,
    ) -> Result<ActorRef<A>, LookupError> {
        self.nodes[from]
            .remote
            .lookup_simulated::<A>(&self.nodes[to].remote, name)
    }

    /// Cuts both directions between `a` and `b`.
    pub fn partition(&mut self, a: NodeIndex, b: NodeIndex) {
        self.partition_one_way(a, b);
        self.partition_one_way(b, a);
    }

    /// Cuts the direction `from` → `to` only.
    pub fn partition_one_way(&mut self, from: NodeIndex, to: NodeIndex) {
        let now = self.now;
        self.cuts.entry((from, to)).or_insert(now);
    }

    /// Heals every cut between `a` and `b`. A connection already lost
    /// stays lost; the next send between them dials a new one.
    pub fn heal(&mut self, a: NodeIndex, b: NodeIndex) {
        self.cuts.remove(&(a, b));
        self.cuts.remove(&(b, a));
    }

    /// Heals every cut.
    pub fn heal_all(&mut self) {
        self.cuts.clear();
    }

    /// Resets the connection between `a` and `b` now, as a broken TCP
    /// connection: what is in flight is dropped, both ends count it lost.
    pub fn reset(&mut self, a: NodeIndex, b: NodeIndex) {
        for c in 0..self.conns.len() {
            let d = &self.conns[c].dirs[0];
            if (d.from, d.to) == (a, b) || (d.from, d.to) == (b, a) {
                self.lose(c, "connection reset");
            }
        }
    }

    /// Makes every delivery of bytes reset its connection instead, with
    /// probability `per_million` / 1,000,000 (a flaky network: the TCP
    /// form of a dropped packet that never gets through).
    pub fn set_reset_rate(&mut self, per_million: u32) {
        self.reset_per_million = per_million;
    }

    /// Crashes node `n`: it runs nothing more, and its connections are lost
    /// at the other ends at once (the operating system closes its sockets).
    pub fn crash(&mut self, n: NodeIndex) {
        self.nodes[n].crashed = true;
        self.trace.push(NetEvent::Crashed(n));
        // Its own dials die with it.
        self.dials.retain(|d| d.from != n);
        let _ = self.nodes[n].remote.take_simulated_dials();
        for c in 0..self.conns.len() {
            if self.conns[c].dirs.iter().any(|d| d.from == n) {
                self.lose(c, &format!("node {n} crashed"));
            }
        }
    }

    /// Pauses node `n`, as SIGSTOP or a frozen VM does: its actors and
    /// timers do not run and it reads and writes nothing, while the clock
    /// goes on for everyone. Bytes sent to it wait (the kernel buffers
    /// them), dials to it time out, and once it has been silent for the
    /// heartbeat timeout its peers count its connections lost. On
    /// [`resume`](Self::resume) everything that came due meanwhile is ready
    /// at once, in the order the seed picks.
    pub fn pause(&mut self, n: NodeIndex) {
        if self.nodes[n].paused_since.is_none() {
            self.nodes[n].paused_since = Some(self.now);
            self.trace.push(NetEvent::Paused(n));
        }
    }

    /// Resumes paused node `n`.
    pub fn resume(&mut self, n: NodeIndex) {
        if self.nodes[n].paused_since.take().is_some() {
            self.trace.push(NetEvent::Resumed(n));
        }
    }

    /// Whether node `n` can run now (neither crashed nor paused).
    fn runs(&self, n: NodeIndex) -> bool {
        !self.nodes[n].crashed && self.nodes[n].paused_since.is_none()
    }

    fn lose(&mut self, c: usize, reason: &str) {
        let conn = &mut self.conns[c];
        if conn.lost {
            return;
        }
        conn.lost = true;
        for d in &mut conn.dirs {
            d.in_flight.clear();
        }
        let (a, b) = (conn.dirs[0].from, conn.dirs[0].to);
        // The crashed side's end is lost too: nothing of it runs again.
        for end in &conn.ends {
            end.lose(reason);
        }
        self.trace.push(NetEvent::Lost(a, b));
    }

    /// What happened so far.
    pub fn trace(&self) -> &[NetEvent] {
        &self.trace
    }

    /// Takes one step if one can be taken now: runs one ready actor, sends
    /// a connection's queued bytes, or delivers bytes that have arrived,
    /// chosen by the PRNG. `false` when nothing can happen before the
    /// clock moves.
    pub fn step(&mut self) -> bool {
        self.poll_answers();
        self.expire_cuts();
        self.collect_dials();
        // The choices, in a fixed order so a seed replays.
        let mut choices: Vec<Choice> = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if self.runs(i) && n.system.ready_actors() > 0 {
                choices.push(Choice::Run(i));
            }
        }
        for (c, conn) in self.conns.iter().enumerate() {
            if conn.lost {
                continue;
            }
            for d in 0..2 {
                if self.runs(conn.dirs[d].from) {
                    choices.push(Choice::Send(c, d));
                }
                if self.nodes[conn.dirs[d].to].paused_since.is_none()
                    && conn.dirs[d]
                        .in_flight
                        .front()
                        .is_some_and(|(at, _)| *at <= self.now)
                {
                    choices.push(Choice::Deliver(c, d));
                }
            }
        }
        for (k, d) in self.dials.iter().enumerate() {
            if d.at <= self.now && self.nodes[d.from].paused_since.is_none() {
                choices.push(Choice::Dial(k));
            }
        }
        // Sending is taken only when there is something to send; try the
        // choices from a random start until one does something.
        if choices.is_empty() {
            return false;
        }
        let first = self.rng.below(choices.len() as u64) as usize;
        for k in 0..choices.len() {
            if self.take(choices[(first + k) % choices.len()]) {
                return true;
            }
        }
        false
    }

    fn take(&mut self, choice: Choice) -> bool {
        match choice {
            Choice::Run(i) => {
                let budget = 1 + self.rng.below(8) as u32;
                let mut pick = |ready: usize| ((self.rng.below(ready as u64)) as usize, budget);
                let ran = self.nodes[i].system.run_one(&mut pick).is_some();
                if ran {
                    self.trace.push(NetEvent::Turn(i));
                }
                ran
            }
            Choice::Send(c, d) => {
                let Some(bytes) = self.conns[c].ends[d].take_outbound() else {
                    return false;
                };
                let delay = if self.max_delay.is_zero() {
                    Duration::ZERO
                } else {
                    Duration::from_nanos(self.rng.below(self.max_delay.as_nanos() as u64 + 1))
                };
                let dir = &mut self.conns[c].dirs[d];
                // One connection is one ordered stream: a later chunk never
                // arrives before an earlier one.
                let after = dir.in_flight.back().map_or(self.now, |(at, _)| *at);
                let at = (self.now + delay).max(after);
                let (from, to, len) = (dir.from, dir.to, bytes.len());
                if self.cuts.contains_key(&(from, to)) {
                    self.trace.push(NetEvent::Cut {
                        from,
                        to,
                        bytes: len,
                    });
                } else {
                    dir.in_flight.push_back((at, bytes));
                    self.trace.push(NetEvent::Sent {
                        from,
                        to,
                        bytes: len,
                        delay,
                    });
                }
                true
            }
            Choice::Deliver(c, d) => {
                if self.reset_per_million > 0
                    && self.rng.below(1_000_000) < u64::from(self.reset_per_million)
                {
                    self.lose(c, "connection reset by the flaky network");
                    return true;
                }
                let Some((_, bytes)) = self.conns[c].dirs[d].in_flight.pop_front() else {
                    return false;
                };
                let (from, to) = (self.conns[c].dirs[d].from, self.conns[c].dirs[d].to);
                if self.cuts.contains_key(&(from, to)) {
                    self.trace.push(NetEvent::Cut {
                        from,
                        to,
                        bytes: bytes.len(),
                    });
                } else {
                    // Direction d's bytes arrive at the other end.
                    self.conns[c].ends[1 - d].deliver(&bytes);
                    self.trace.push(NetEvent::Arrived {
                        from,
                        to,
                        bytes: bytes.len(),
                    });
                }
                true
            }
            Choice::Dial(k) => {
                let PendingDial { from, dial, .. } = self.dials.remove(k);
                self.attempt(from, dial);
                true
            }
        }
    }

    /// Takes the dials every live node wants, each due after its backoff
    /// plus a connect time of up to one delay.
    fn collect_dials(&mut self) {
        for from in 0..self.nodes.len() {
            if self.nodes[from].crashed {
                continue;
            }
            for dial in self.nodes[from].remote.take_simulated_dials() {
                let connect = if self.max_delay.is_zero() {
                    Duration::ZERO
                } else {
                    Duration::from_nanos(self.rng.below(self.max_delay.as_nanos() as u64 + 1))
                };
                let at = self.now + dial.backoff() + connect;
                self.dials.push(PendingDial { from, at, dial });
            }
        }
    }

    /// One dial: connected if the node it names is up and reachable both
    /// ways, failed otherwise (the remote layer counts the failure).
    fn attempt(&mut self, from: NodeIndex, dial: SimDial) {
        let target = dial.target();
        let to = self
            .nodes
            .iter()
            .position(|n| n.system.node().name() == target.name());
        let refused = match to {
            None => Some("no node has that name".to_string()),
            Some(to) if self.nodes[to].crashed => {
                Some("connection refused: the node is down".into())
            }
            Some(to) if self.is_cut(from, to) => {
                Some("timed out: the nodes are partitioned".into())
            }
            Some(to) if self.nodes[to].paused_since.is_some() => {
                Some("timed out: the node does not answer (paused)".into())
            }
            Some(_) => None,
        };
        if let Some(reason) = refused {
            dial.fail(&reason);
            self.trace.push(NetEvent::DialFailed { from, to, reason });
            return;
        }
        let to = to.expect("found above");
        match dial.connect(&self.nodes[to].remote) {
            Ok((mine, theirs)) => {
                self.add_conn(from, to, mine, theirs);
                self.trace.push(NetEvent::Dialled { from, to });
            }
            Err(refusal) => self.trace.push(NetEvent::DialFailed {
                from,
                to: Some(to),
                reason: format!("{refusal:?}"),
            }),
        }
    }

    /// A direction cut, or a node paused, for the heartbeat timeout loses
    /// its connection.
    fn expire_cuts(&mut self) {
        for c in 0..self.conns.len() {
            let expired = self.conns[c].dirs.iter().any(|d| {
                self.silent_since(d)
                    .is_some_and(|since| self.now.duration_since(since) >= self.heartbeat_timeout)
            });
            if expired && !self.conns[c].lost {
                self.lose(c, "partitioned past the heartbeat timeout");
            }
        }
    }

    /// Since when direction `d` carries nothing: cut, or its sender paused.
    fn silent_since(&self, d: &Direction) -> Option<Instant> {
        let cut = self.cuts.get(&(d.from, d.to)).copied();
        let paused = self.nodes[d.from].paused_since;
        cut.into_iter().chain(paused).min()
    }

    fn poll_answers(&mut self) {
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = TaskContext::from_waker(&waker);
        for conn in &self.conns {
            for (end, dir) in conn.ends.iter().zip(&conn.dirs) {
                if self.nodes[dir.from].paused_since.is_none() {
                    end.poll_answers(&mut cx);
                }
            }
        }
    }

    /// Steps until nothing can happen without the clock moving.
    pub fn run_until_idle(&mut self) -> usize {
        let mut steps = 0;
        while self.step() {
            steps += 1;
        }
        steps
    }

    /// When something next becomes possible: a timer of some node, bytes
    /// arriving, a cut expiring.
    fn next_event_at(&self) -> Option<Instant> {
        let timers = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| self.runs(*i))
            .filter_map(|(_, n)| n.system.next_timer_at());
        let arrivals = self
            .conns
            .iter()
            .filter(|c| !c.lost)
            .flat_map(|c| c.dirs.iter())
            .filter(|d| self.nodes[d.to].paused_since.is_none())
            .filter_map(|d| d.in_flight.front().map(|(at, _)| *at));
        let cuts = self
            .conns
            .iter()
            .filter(|c| !c.lost)
            .flat_map(|c| c.dirs.iter())
            .filter_map(|d| self.silent_since(d))
            .map(|since| since + self.heartbeat_timeout);
        let dials = self
            .dials
            .iter()
            .filter(|d| self.nodes[d.from].paused_since.is_none())
            .map(|d| d.at);
        timers.chain(arrivals).chain(cuts).chain(dials).min()
    }

    fn advance_to(&mut self, at: Instant) {
        if at <= self.now {
            return;
        }
        let by = at - self.now;
        self.now = at;
        *self.shared_now.lock().unwrap_or_else(|p| p.into_inner()) = at;
        for n in &self.nodes {
            let _ = n.system.advance_time(by);
        }
        self.trace.push(NetEvent::Clock(self.now - self.start));
    }

    /// Runs for `duration` of virtual time.
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        loop {
            self.run_until_idle();
            match self.next_event_at() {
                Some(at) if at <= end => self.advance_to(at),
                _ => break,
            }
        }
        self.advance_to(end);
        self.run_until_idle();
    }

    /// Runs the network until `fut` completes, moving the clock whenever
    /// nothing else can happen.
    ///
    /// # Panics
    /// If nothing can happen any more and `fut` is still pending: a hang,
    /// reported with the seed and the last events.
    pub fn block_on<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = TaskContext::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
            if self.step() {
                continue;
            }
            match self.next_event_at() {
                Some(at) => self.advance_to(at),
                None => {
                    let tail: Vec<_> = self.trace.iter().rev().take(20).rev().collect();
                    panic!(
                        "simulated network (seed {}) is idle but the future is pending: a hang. \
                         Last events: {tail:?}",
                        self.seed
                    );
                }
            }
        }
    }
}

/// Runs `body` on a fresh [`SimNetwork`] for each seed; on a failure,
/// prints the seed, the command that replays only it (the
/// [`SEED_VAR`](crate::SEED_VAR) variable) and the last events, and fails.
/// Seeds come from [`seeds`](crate::seeds) as for [`simulate`](crate::simulate).
pub fn simulate_network(
    seeds: impl IntoIterator<Item = u64>,
    mut body: impl FnMut(&mut SimNetwork),
) {
    for seed in seeds {
        let mut net = SimNetwork::new(seed);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut net)));
        write_trace(&net);
        let Err(payload) = outcome else {
            continue;
        };
        let tail: Vec<String> = net
            .trace
            .iter()
            .rev()
            .take(40)
            .rev()
            .map(|e| format!("{e:?}"))
            .collect();
        eprintln!(
            "\nsimulated network failed with seed {seed}\nreplay only this seed:  {}={seed} cargo test\nlast {} of {} events:\n{}",
            crate::SEED_VAR,
            tail.len(),
            net.trace.len(),
            tail.join("\n")
        );
        std::panic::resume_unwind(payload);
    }
}

/// Writes `net`'s trace to [`TRACE_DIR_VAR`](crate::TRACE_DIR_VAR)'s
/// directory when it is set: the file is named after the test (the
/// harness's thread name) and the seed.
fn write_trace(net: &SimNetwork) {
    let Some(dir) = std::env::var_os(crate::TRACE_DIR_VAR) else {
        return;
    };
    let thread = std::thread::current();
    let test: String = thread
        .name()
        .unwrap_or("unnamed")
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let path = std::path::Path::new(&dir).join(format!("{test}-seed-{}.trace", net.seed));
    let mut text = String::new();
    for e in &net.trace {
        text.push_str(&format!("{e:?}\n"));
    }
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("could not write the trace to {}: {e}", path.display());
    }
}

/// The calling thread's name, hashed (FNV-1a): the test harness names each
/// test's thread after the test, the same on every run.
fn thread_discriminator() -> u64 {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("unnamed");
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Clone, Copy)]
enum Choice {
    Run(NodeIndex),
    Send(usize, usize),
    Deliver(usize, usize),
    Dial(usize),
}

struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}
