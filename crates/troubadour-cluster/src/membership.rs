//! Membership and failure detection: foca (SWIM with its infection-style
//! dissemination and suspicion extensions), driven by one actor per node.
//!
//! foca is a state machine with no clock, socket or thread of its own: it
//! says "send these bytes to member M" and "wake me after T". Here the
//! bytes travel on the remote layer's control channel
//! `troubadour.cluster.membership` (mutually authenticated, ahead of user
//! messages), and the wake-ups are the actor's timers, on the system's
//! clock, so a simulation on virtual time replays membership too.
//!
//! A member is a node's name and incarnation (a restarted process is a new
//! member, and the old one is declared down when it stops answering),
//! plus a counter foca bumps to rejoin at once after being wrongly
//! declared down. Membership says who is up; it never decides who owns a
//! shard (see [`lease`](crate::lease)), so when it is wrong, shards move
//! late or early, never twice.

use foca::{
    Config, Foca, Identity, NoCustomBroadcast, Notification, PostcardCodec, Runtime, Timer,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::{NodeId, Recipient, SystemHandle};
use troubadour_remote::{ControlChannel, NodeLookup, Remote, RemoteError};

/// The control channel membership travels on.
pub const CHANNEL: &str = "troubadour.cluster.membership";

/// A member as foca knows it (its wire form is part of the protocol).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemberId {
    name: String,
    incarnation: u64,
    addr: Option<SocketAddr>,
    /// Bumped by foca to rejoin after a wrong `down`.
    bump: u16,
}

impl MemberId {
    fn of(node: &NodeId, addr: Option<SocketAddr>) -> MemberId {
        MemberId {
            name: node.name().to_string(),
            incarnation: node.incarnation(),
            addr: addr.or(node.address()),
            bump: 0,
        }
    }

    fn node(&self) -> Option<NodeId> {
        NodeId::remote(&self.name, self.addr, self.incarnation).ok()
    }
}

impl Identity for MemberId {
    type Addr = (String, u64);

    fn renew(&self) -> Option<Self> {
        Some(MemberId {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> (String, u64) {
        (self.name.clone(), self.incarnation)
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        // Serial-number order, so the newer bump wins across a wrap.
        (self.bump.wrapping_sub(adversary.bump) as i16) > 0
    }
}

/// A change of membership, as [`Membership::subscribe`] delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// The node became a member (or came back after being declared down
    /// wrongly).
    Up(NodeId),
    /// The node was declared down (it stopped answering probes for the
    /// suspicion time) or left.
    Down(NodeId),
}

impl Message for MemberEvent {
    type Reply = ();
}

/// Timing of failure detection. The defaults are foca's (memberlist's) LAN
/// settings for a cluster of about five: a probe a second, an answer
/// expected within half a second, a suspect declared down after about
/// three seconds (longer for larger clusters, see
/// [`expected_size`](Self::expected_size)).
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    config: Config,
    seed: Option<u64>,
    rejoin_every: Duration,
}

impl MembershipConfig {
    /// The LAN settings for about `size` members.
    pub fn expected_size(size: u32) -> MembershipConfig {
        let mut config = Config::new_lan(NonZeroU32::new(size.max(1)).expect("at least 1"));
        // The control lane is a TCP stream, not a UDP datagram: larger
        // messages carry more updates at once.
        config.max_packet_size = NonZeroUsize::new(16 * 1024).expect("not zero");
        // Both sides of a healed partition hold each other down; each side
        // announces itself to members it holds down, and foca's default
        // (every 65 s) would leave a healed cluster split for a minute.
        config.periodic_announce_to_down_members = Some(foca::PeriodicParams {
            frequency: Duration::from_secs(5),
            num_members: NonZeroUsize::new(2).expect("not zero"),
        });
        MembershipConfig {
            config,
            seed: None,
            rejoin_every: Duration::from_secs(2),
        }
    }

    /// How often a member probes another (default 1 s).
    pub fn probe_period(mut self, period: Duration) -> MembershipConfig {
        self.config.probe_period = period;
        self
    }

    /// How long a probe waits for its answer before asking others to probe
    /// (default 500 ms; below the probe period).
    pub fn probe_rtt(mut self, rtt: Duration) -> MembershipConfig {
        self.config.probe_rtt = rtt;
        self
    }

    /// How long a suspected member has to refute the suspicion before it
    /// is declared down.
    pub fn suspect_to_down_after(mut self, after: Duration) -> MembershipConfig {
        self.config.suspect_to_down_after = after;
        self
    }

    /// How often a node that knows no member up (it has not joined yet,
    /// or a partition left it alone) announces itself again to the seeds
    /// it was given and the members it knew, a few at a time (default
    /// 2 s). foca itself announces only while it has members: two nodes
    /// that each hold the other down after a partition would otherwise
    /// never meet again.
    pub fn rejoin_every(mut self, every: Duration) -> MembershipConfig {
        self.rejoin_every = every;
        self
    }

    /// Seeds the random choices (which member to probe, whom to gossip
    /// to), for a replayable simulation. Unseeded, they come from the
    /// operating system.
    pub fn seed(mut self, seed: u64) -> MembershipConfig {
        self.seed = Some(seed);
        self
    }
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig::expected_size(5)
    }
}

/// Why membership could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum MembershipError {
    /// The remote layer refused the control channel (membership was
    /// started twice on this node).
    Channel(RemoteError),
    /// The actor could not be spawned (the system is shutting down).
    Spawn(String),
}

impl fmt::Display for MembershipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MembershipError::Channel(e) => write!(
                f,
                "membership could not open its control channel ({e}): start it once per node"
            ),
            MembershipError::Spawn(e) => write!(f, "membership could not start its actor: {e}"),
        }
    }
}

impl std::error::Error for MembershipError {}

/// What everyone may read without asking the actor.
struct View {
    members: RwLock<BTreeMap<(String, u64), NodeId>>,
    active: AtomicBool,
    rejected: AtomicU64,
}

impl View {
    /// The other members up now.
    fn others(&self) -> Vec<NodeId> {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// This node's membership: who is up, as foca sees it. See the [module
/// docs](self).
#[derive(Clone)]
pub struct Membership {
    actor: ActorRef<MembershipActor>,
    view: Arc<View>,
    myself: NodeId,
}

impl Membership {
    /// Starts membership for `system`, on `remote`'s control lane. The node
    /// is alone until [`join`](Self::join) reaches a member.
    ///
    /// Build `remote` with
    /// [`node_down_only_when_replaced`](troubadour_remote::RemoteBuilder::node_down_only_when_replaced)
    /// ([`with_cluster`](crate::with_cluster) does): otherwise the remote
    /// layer gives up for good on a member silent for 30 s, and a longer
    /// partition never heals.
    pub fn start(
        system: &SystemHandle,
        remote: &Remote,
        config: MembershipConfig,
    ) -> Result<Membership, MembershipError> {
        let myself = system.node();
        let identity = MemberId::of(&myself, remote.advertised_addr());
        let rng = match config.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        let view = Arc::new(View {
            members: RwLock::new(BTreeMap::new()),
            active: AtomicBool::new(false),
            rejected: AtomicU64::new(0),
        });
        let channel = Arc::new(OnceLock::new());
        let actor = system
            .spawn(MembershipActor {
                foca: Foca::new(identity, config.config, rng, PostcardCodec),
                channel: channel.clone(),
                view: view.clone(),
                subscribers: Vec::new(),
                known: BTreeMap::new(),
                me: (myself.name().to_string(), myself.incarnation()),
                rejoin: Rejoin {
                    every: config.rejoin_every,
                    armed: false,
                    next: 0,
                },
                left: false,
            })
            .map_err(|e| MembershipError::Spawn(e.to_string()))?;
        let to_actor = actor.clone();
        let opened = remote
            .control_channel(CHANNEL, move |_, bytes| {
                // Over the actor's bound, like any message a full mailbox
                // refuses: gossip is lossy by design and foca tolerates it.
                let _ = to_actor.tell(Gossip(bytes.to_vec()));
            })
            .map_err(MembershipError::Channel)?;
        let _ = channel.set(opened);
        Ok(Membership {
            actor,
            view,
            myself,
        })
    }

    /// Announces this node to `seeds` (nodes already in the cluster, or
    /// starting with it); each one that answers brings the cluster's
    /// members. Seeds that are this node are skipped.
    pub fn join(&self, seeds: impl IntoIterator<Item = NodeId>) {
        let seeds: Vec<NodeId> = seeds.into_iter().filter(|s| *s != self.myself).collect();
        let _ = self.actor.tell(Announce(seeds));
    }

    /// Connects to each address (a seed list, a DNS answer) and announces
    /// this node to the nodes found there; returns how many answered.
    pub async fn join_addresses(&self, remote: &Remote, seeds: &[SocketAddr]) -> usize {
        self.join_at(&remote.node_lookup(), seeds).await
    }

    /// [`join_addresses`](Self::join_addresses) through a handle on the
    /// remote layer (what an actor keeps).
    pub async fn join_at(&self, lookup: &NodeLookup, seeds: &[SocketAddr]) -> usize {
        let mut found = Vec::new();
        for addr in seeds {
            if let Ok(node) = lookup.connect(*addr).await {
                found.push(node);
            }
        }
        let n = found.len();
        self.join(found);
        n
    }

    /// The members up now, this node among them once it has joined (or
    /// alone), by name.
    pub fn members(&self) -> Vec<NodeId> {
        let mut all = self.view.others();
        all.push(self.myself.clone());
        all.sort_by(|a, b| (a.name(), a.incarnation()).cmp(&(b.name(), b.incarnation())));
        all
    }

    /// Whether `node` is a member up now (this node always is).
    pub fn is_up(&self, node: &NodeId) -> bool {
        *node == self.myself
            || self
                .view
                .members
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&(node.name().to_string(), node.incarnation()))
    }

    /// Whether some other member knows this node (it has joined).
    pub fn is_active(&self) -> bool {
        self.view.active.load(Ordering::Acquire)
    }

    /// Membership messages from other nodes that foca refused (malformed,
    /// from another cluster's identity): a count, for operators.
    pub fn rejected(&self) -> u64 {
        self.view.rejected.load(Ordering::Relaxed)
    }

    /// Sends every later [`MemberEvent`] to `to`, starting with an `Up`
    /// for each member up now.
    pub fn subscribe(&self, to: Recipient<MemberEvent>) {
        let _ = self.actor.tell(Subscribe(to));
    }

    /// Leaves the cluster: the other members hear it at once (no
    /// suspicion time) and this node stops taking part.
    pub fn leave(&self) {
        let _ = self.actor.tell(Leave);
    }

    /// This node.
    pub fn myself(&self) -> &NodeId {
        &self.myself
    }
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("myself", &self.myself)
            .field("members", &self.members().len())
            .finish_non_exhaustive()
    }
}

// ---- the actor ------------------------------------------------------------

struct MembershipActor {
    foca: Foca<MemberId, PostcardCodec, StdRng, NoCustomBroadcast>,
    channel: Arc<OnceLock<ControlChannel>>,
    view: Arc<View>,
    subscribers: Vec<Recipient<MemberEvent>>,
    /// Every seed given and every member seen up, down ones included
    /// (the older incarnations of a restarted node dropped): whom a node
    /// alone announces itself to.
    known: BTreeMap<(String, u64), MemberId>,
    /// This node's name and incarnation (foca's address of it).
    me: (String, u64),
    rejoin: Rejoin,
    left: bool,
}

/// The rounds of announcements of a node alone.
struct Rejoin {
    every: Duration,
    armed: bool,
    /// Where the next round starts in `known`, so every known node is
    /// tried in turn.
    next: usize,
}

/// How many nodes one round of a node alone announces itself to.
const REJOIN_FANOUT: usize = 3;

impl Actor for MembershipActor {}

/// Announce this node again if it is still alone.
struct RejoinRound;
impl Message for RejoinRound {
    type Reply = ();
}

struct Gossip(Vec<u8>);
impl Message for Gossip {
    type Reply = ();
}

struct Tick(Timer<MemberId>);
impl Message for Tick {
    type Reply = ();
}

struct Announce(Vec<NodeId>);
impl Message for Announce {
    type Reply = ();
}

struct Subscribe(Recipient<MemberEvent>);
impl Message for Subscribe {
    type Reply = ();
}

struct Leave;
impl Message for Leave {
    type Reply = ();
}

/// What foca asked for during one call, done after it returns.
enum Change {
    Up(MemberId),
    Down(MemberId),
    Active(bool),
}

struct Effects<'a> {
    channel: Option<&'a ControlChannel>,
    /// This node's name and incarnation.
    me: &'a (String, u64),
    timers: Vec<(Timer<MemberId>, Duration)>,
    changes: Vec<Change>,
}

impl Runtime<MemberId> for Effects<'_> {
    fn notify(&mut self, notification: Notification<'_, MemberId>) {
        match notification {
            Notification::MemberUp(id) => self.changes.push(Change::Up(id.clone())),
            Notification::MemberDown(id) => self.changes.push(Change::Down(id.clone())),
            Notification::Active => self.changes.push(Change::Active(true)),
            // A renewed identity (after being declared down) is not a
            // member until another answers it: foca stops its timers until
            // then, so the node announces itself as one alone does.
            Notification::Rejoin(_) | Notification::Idle | Notification::Defunct => {
                self.changes.push(Change::Active(false))
            }
            // Same name and incarnation, a newer bump: the same node.
            _ => {}
        }
    }

    fn send_to(&mut self, to: MemberId, data: &[u8]) {
        // foca may hold an older identity of this very node (gossip said
        // it was down before it renewed) and announce to it: a node never
        // dials itself.
        if to.addr() == *self.me {
            return;
        }
        // A node that cannot be reached is a lost packet to SWIM, which
        // probes, suspects and declares down from exactly that.
        if let (Some(channel), Some(node)) = (self.channel, to.node()) {
            let _ = channel.send_at(&node, to.addr, data);
        }
    }

    fn submit_after(&mut self, event: Timer<MemberId>, after: Duration) {
        self.timers.push((event, after));
    }
}

impl MembershipActor {
    /// Runs one foca call and does what it asked.
    fn drive(
        &mut self,
        ctx: &mut Context<Self>,
        call: impl FnOnce(
            &mut Foca<MemberId, PostcardCodec, StdRng, NoCustomBroadcast>,
            &mut Effects<'_>,
        ) -> Result<(), foca::Error>,
    ) {
        let mut effects = Effects {
            channel: self.channel.get(),
            me: &self.me,
            timers: Vec::new(),
            changes: Vec::new(),
        };
        if call(&mut self.foca, &mut effects).is_err() {
            self.view.rejected.fetch_add(1, Ordering::Relaxed);
        }
        let Effects {
            timers, changes, ..
        } = effects;
        for (timer, after) in timers {
            ctx.send_after(after, Tick(timer));
        }
        for change in changes {
            self.apply(change, ctx);
        }
    }

    fn apply(&mut self, change: Change, ctx: &mut Context<Self>) {
        let event = match change {
            Change::Active(active) => {
                self.view.active.store(active, Ordering::Release);
                if !active {
                    self.arm_rejoin(ctx);
                }
                return;
            }
            Change::Up(id) => {
                let Some(node) = id.node() else { return };
                self.known.retain(|(name, incarnation), _| {
                    *name != id.name || *incarnation == id.incarnation
                });
                self.known.insert(id.addr(), id.clone());
                let fresh = self
                    .view
                    .members
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.addr(), node.clone())
                    .is_none();
                if !fresh {
                    return;
                }
                tracing::info!(target: "troubadour::cluster", member = %node, "member up");
                MemberEvent::Up(node)
            }
            Change::Down(id) => {
                let removed = self
                    .view
                    .members
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id.addr());
                let Some(node) = removed else { return };
                tracing::info!(target: "troubadour::cluster", member = %node, "member down");
                MemberEvent::Down(node)
            }
        };
        // Subscribers that stopped drop out.
        self.subscribers.retain(|s| s.tell(event.clone()).is_ok());
    }
}

impl Handler<Gossip> for MembershipActor {
    fn handle(&mut self, Gossip(bytes): Gossip, ctx: &mut Context<Self>) {
        self.drive(ctx, |foca, fx| foca.handle_data(&bytes, fx));
    }
}

impl Handler<Tick> for MembershipActor {
    fn handle(&mut self, Tick(timer): Tick, ctx: &mut Context<Self>) {
        self.drive(ctx, |foca, fx| foca.handle_timer(timer, fx));
    }
}

impl Handler<Announce> for MembershipActor {
    fn handle(&mut self, Announce(seeds): Announce, ctx: &mut Context<Self>) {
        for seed in seeds {
            let id = MemberId::of(&seed, None);
            self.known.entry(id.addr()).or_insert_with(|| id.clone());
            self.drive(ctx, |foca, fx| foca.announce(id, fx));
        }
        // A seed not listening yet, or down: try again until one answers.
        self.arm_rejoin(ctx);
    }
}

impl MembershipActor {
    fn arm_rejoin(&mut self, ctx: &mut Context<Self>) {
        if !self.rejoin.armed && !self.left {
            self.rejoin.armed = true;
            ctx.send_after(self.rejoin.every, RejoinRound);
        }
    }
}

impl Handler<RejoinRound> for MembershipActor {
    fn handle(&mut self, _: RejoinRound, ctx: &mut Context<Self>) {
        self.rejoin.armed = false;
        if self.left || self.view.active.load(Ordering::Acquire) {
            return;
        }
        let others: Vec<MemberId> = self
            .known
            .iter()
            .filter(|(addr, _)| **addr != self.me)
            .map(|(_, id)| id.clone())
            .collect();
        if others.is_empty() {
            return;
        }
        for k in 0..REJOIN_FANOUT.min(others.len()) {
            let id = others[(self.rejoin.next + k) % others.len()].clone();
            self.drive(ctx, |foca, fx| foca.announce(id, fx));
        }
        self.rejoin.next = (self.rejoin.next + REJOIN_FANOUT) % others.len();
        self.arm_rejoin(ctx);
    }
}

impl Handler<Subscribe> for MembershipActor {
    fn handle(&mut self, Subscribe(to): Subscribe, _: &mut Context<Self>) {
        for node in self.view.others() {
            if to.tell(MemberEvent::Up(node)).is_err() {
                return;
            }
        }
        self.subscribers.push(to);
    }
}

impl Handler<Leave> for MembershipActor {
    fn handle(&mut self, _: Leave, ctx: &mut Context<Self>) {
        self.left = true;
        self.drive(ctx, |foca, fx| foca.leave_cluster(fx));
    }
}
