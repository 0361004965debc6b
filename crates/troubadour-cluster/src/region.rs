//! The region: one actor per node that hosts the shards this node owns and
//! routes every entity message to the region of its shard's owner.
//!
//! Each tick (a third of the lease's time to live, and again when a lease
//! it waits on runs out) the region renews its node's lease and reads the
//! store, then:
//!
//! * drops every shard the store no longer gives it, and all of them if its
//!   own lease ran out by its local clock ([`LocalLease`]);
//! * claims, at the epoch it read, the shards placement puts here whose
//!   owner is gone (no valid lease, not a member, or released);
//! * releases, at most `rebalance_limit` per tick, shards it owns that
//!   placement puts on another live member, after stopping their entities.
//!
//! A message for a shard hosted here goes to its entity, made from the
//! kind's factory on its first message; for a shard owned by another live
//! member, to that node's region (looked up once per node, on the control
//! lane); for a shard with no live owner yet, into a bounded queue per
//! shard that drains, in order, as soon as an owner is known. Asks keep
//! their reply: the entity's answer comes back through the regions.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour::{Deadline, DeferredReply, NodeId};
use troubadour_remote::{Accepts, LookupError, NodeLookup, RemoteActor};

use crate::best_effort::BestEffortPlacement;
use crate::entity::{
    departure_codecs, flush_codec, Answer, AnyEntity, Deliverers, Departed, Departing, Flush,
    MessageCodec, Reply, Routed, Undelivered, WireAskError, ENTITY_ASK_LIMIT,
};
use crate::lease::{Assignment, LeaseError, LeaseStore, NodeKey, StoreView};
use crate::local_lease::{LocalLease, Renewal};
use crate::membership::MemberEvent;
use crate::placement;
use crate::routes::ShardRoutes;
use crate::shard::{ShardCount, ShardId};
use crate::tasks::{Poll, Task, Tasks};

/// The name every node's region is exposed under.
pub(crate) const REGION: &str = "troubadour.cluster.region";

/// Makes an entity of one kind, as a child of the region.
/// Every entity is spawned with the node's lease as its deadline
/// ([`LocalLease::deadline`]).
pub(crate) type MakeEntity = Arc<
    dyn Fn(&mut Context<Region>, &str, HostedShard, &Arc<Deadline>) -> Result<AnyEntity, String>
        + Send
        + Sync,
>;

/// One kind the node can host.
pub(crate) struct Kind {
    pub make: MakeEntity,
    pub deliver: BTreeMap<&'static str, Deliverers>,
    /// A cluster singleton: one entity, id [`singleton_id`], started as
    /// soon as its shard is hosted (no message needed), never passivated.
    pub singleton: bool,
}

/// The id of kind `kind`'s singleton: its kind name, so that different
/// singletons land on different shards (and so, usually, nodes).
pub(crate) fn singleton_id(kind: &str) -> &str {
    kind
}

/// What the region needs, fixed at start.
pub(crate) struct RegionSetup {
    pub me: NodeId,
    pub shards: ShardCount,
    pub lease: LocalLease,
    pub rebalance_limit: usize,
    pub buffer_limit: usize,
    pub passivate_after: Option<Duration>,
    pub max_active: Option<usize>,
    pub store: Arc<dyn LeaseStore>,
    /// Few, with short names: a search tree finds one faster than
    /// hashing its name.
    pub kinds: BTreeMap<&'static str, Kind>,
    pub lookup: NodeLookup,
    /// Where the region publishes the shards it hosts, for readers off its
    /// thread (`Cluster::hosts`).
    pub hosting: Hosting,
    /// Run after a handoff's entities stopped and before the shards are
    /// released (`ClusterBuilder::before_handoff`).
    pub before_handoff: Option<BeforeHandoff>,
    /// Best-effort mode: `store` is this placement, told every change of
    /// members (see [`best_effort`](crate::best_effort)).
    pub best_effort: Option<Arc<BestEffortPlacement>>,
    /// The senders' shortcuts to shards' owners, which this region opens
    /// and closes (see [`routes`](crate::routes)).
    pub routes: Arc<ShardRoutes>,
}

/// Whether two views of the store send every shard's messages the same
/// way: the same owners, released or not, and the same nodes leased.
fn same_routes(a: &StoreView, b: &StoreView) -> bool {
    let leased = |v: &StoreView| -> BTreeSet<NodeKey> {
        v.leases
            .iter()
            .filter(|l| !l.remaining.is_zero())
            .map(|l| l.node.clone())
            .collect()
    };
    a.assignments.len() == b.assignments.len()
        && a.assignments
            .iter()
            .zip(&b.assignments)
            .all(|(x, y)| x.owner == y.owner && x.released == y.released)
        && leased(a) == leased(b)
}

/// Work to finish before shards go to another node (a write-behind flush).
pub(crate) type BeforeHandoff =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The shards a region hosts and their epochs, shared with readers off
/// the region's thread. The region's own map decides; this follows it.
#[derive(Clone, Default)]
pub(crate) struct Hosting(Arc<std::sync::RwLock<BTreeMap<ShardId, u64>>>);

impl Hosting {
    pub(crate) fn get(&self, shard: ShardId) -> Option<HostedShard> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(&shard).map(|&epoch| HostedShard { shard, epoch })
    }

    fn set(&self, shard: ShardId, epoch: Option<u64>) {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        match epoch {
            Some(e) => map.insert(shard, e),
            None => map.remove(&shard),
        };
    }
}

/// A message waiting to be routed, with the reply of its ask.
struct Pending {
    routed: Routed,
    reply: Option<DeferredReply<Answer>>,
    /// Sent by this node's own code (not forwarded by another region):
    /// this region is the one that keeps its order across a move.
    local: bool,
}

impl Pending {
    fn fail(self, why: WireAskError) {
        if let Some(reply) = self.reply {
            let _ = reply.send(Answer(Err(why)));
        }
    }
}

/// Where an entity is activated: its shard and the epoch at which this
/// node owns it. The epoch rises every time the shard changes owner, so a
/// store that refuses writes from an epoch lower than the highest it has
/// seen refuses a stale owner's: give it to `Persistent::epoch` (crate
/// troubadour-persistence) through [`ClusterBuilder::entity_in_shard`](crate::ClusterBuilder::entity_in_shard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostedShard {
    /// The entity's shard.
    pub shard: ShardId,
    /// The epoch at which this node owns it.
    pub epoch: u64,
}

/// A shard hosted here.
struct Hosted {
    epoch: u64,
    /// Hashed: a message finds its entity in about one cache miss, where a
    /// search tree compared the id with several others in cold memory
    /// (decision 0039). Whatever walks them sorts them first, so stops
    /// happen in the same order on every run (a seed replays a
    /// simulation).
    entities: HashMap<EntityKey, Slot>,
}

impl Hosted {
    /// The entities, in key order.
    fn into_sorted(self) -> Vec<(EntityKey, Slot)> {
        let mut all: Vec<_> = self.entities.into_iter().collect();
        all.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        all
    }
}

/// An entity by kind and id: the kind as registered, the id shared with
/// the messages that name it, so making a key copies no string.
type EntityKey = (&'static str, Arc<str>);

/// One entity of a hosted shard.
enum Slot {
    Active {
        entity: AnyEntity,
        /// When it was last sent something, for passivation.
        last_used: Instant,
    },
    /// Passivating: it finishes what it has and stops; what arrives
    /// meanwhile waits here for the next activation, in order.
    Stopping(VecDeque<Pending>),
}

/// Another node's region, as this one reaches it.
enum Peer {
    /// Being looked up: what is for it waits, in order.
    Resolving(VecDeque<Pending>),
    Ready(ActorRef<Region>),
}

/// What a task of the region ends with.
pub(crate) enum Event {
    Renewed {
        sent_at: Instant,
        renewed: Result<(), LeaseError>,
        read: u64,
        view: Result<StoreView, LeaseError>,
    },
    /// A read of the store alone (between renewals).
    Viewed {
        read: u64,
        view: Result<StoreView, LeaseError>,
    },
    /// A claim's answer; `true` if it took the shard from a lost node.
    Claimed(ShardId, bool, Result<Assignment, LeaseError>),
    Released(ShardId),
    Found(NodeKey, Result<ActorRef<Region>, LookupError>),
    Answered(DeferredReply<Answer>, Answer),
    /// A passivated entity has stopped.
    Passivated(ShardId, EntityKey),
    /// Every shard was handed off and the store let the node go.
    Left(Result<(), LeaseError>),
    /// The old path of a shard's messages, to the node named, has been
    /// flushed, is gone, or its flush was given up.
    Flushed(ShardId, NodeKey, FlushEnd),
}

/// How the flush of an old path ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushEnd {
    /// The node at the end of the path answered: what went down the path
    /// before it has been passed on.
    Answered,
    /// The connection to the node was lost, or it refused the flush:
    /// nothing more comes down the path.
    PathGone,
    /// Not answered within [`FLUSH_LIMIT`].
    GivenUp,
}

/// The region actor. See the [module docs](self).
pub(crate) struct Region {
    setup: RegionSetup,
    key: NodeKey,
    members: BTreeMap<NodeKey, NodeId>,
    view: Option<StoreView>,
    hosted: BTreeMap<ShardId, Hosted>,
    /// Shards with a claim or a release on its way to the store.
    in_flight: BTreeSet<ShardId>,
    waiting: BTreeMap<ShardId, VecDeque<Pending>>,
    waiting_len: usize,
    peers: BTreeMap<NodeKey, Peer>,
    tasks: Tasks<Event>,
    renewing: bool,
    /// A read of the store alone is on its way.
    viewing: bool,
    /// Reads of the store started so far, and the latest one applied: a
    /// view that comes back after a later one is dropped.
    reads: u64,
    applied_read: u64,
    recheck_armed: bool,
    /// Leaving: claims nothing more; those waiting are answered once the
    /// store let go (`left`), after which the lease is not renewed.
    leaving: bool,
    leave_waiters: Vec<DeferredReply<Result<(), LeaseError>>>,
    left: bool,
    /// The last view needed no move to or from this node.
    balanced: bool,
    /// Shards the last view's placement gives this node that it does not
    /// hold yet; `None` until a view was read with a valid lease.
    awaited: Option<usize>,
    /// Shards taken over from lost nodes.
    failovers: u64,
    /// Counters for operators (`ClusterStatus`).
    counts: RegionCounts,
    /// Where this region last sent each shard's messages, with an entity
    /// of the shard (a flush down that path is routed by its id).
    sent_to: BTreeMap<ShardId, (Target, Arc<str>)>,
    /// Once the store let the node go: what it waits for before its leave
    /// is done.
    departure: Option<Departure>,
    /// Nodes that announced their leave ([`Departing`]) and are not down
    /// yet: their paths still forward, so flushes down them are awaited.
    leaving_nodes: BTreeSet<NodeKey>,
    /// Shards whose old path is being flushed: what is sent meanwhile
    /// waits here, in order.
    moving: BTreeMap<ShardId, VecDeque<Pending>>,
    flush: &'static MessageCodec,
    departing: &'static MessageCodec,
    departed: &'static MessageCodec,
}

/// A node that left the store is still the path of what other regions
/// sent it before they learnt of the move (it forwards that to the new
/// owners). Its leave is done, and its process may end, only when every
/// member answered [`Departing`] (so sends it nothing more: the answer
/// comes down the same path, after everything sent before it), nothing
/// here waits for an owner, and a flush down each path it forwarded on has
/// come back (what it forwarded is with the new owners, ahead of what the
/// senders now send them directly). A member that is down or silent past
/// [`DEPARTURE_LIMIT`] is not waited for.
struct Departure {
    /// Members that have not answered yet.
    unanswered: BTreeSet<NodeKey>,
    /// Shards whose forwarding path is being flushed; `None` until the
    /// flushes start.
    flushing: Option<BTreeSet<ShardId>>,
    gave_up: bool,
}

/// Where a region sends a shard's messages.
#[derive(Clone, PartialEq, Eq)]
enum Target {
    Here,
    Node(NodeKey),
}

/// Renew the lease and read the store now.
#[derive(Clone)]
pub(crate) struct Tick;

/// The lease's local end as a renewal last set it: stop hosting now
/// unless a later renewal moved the end.
struct LeaseEnds;
impl Message for LeaseEnds {
    type Reply = ();
}

/// Read the store now (between renewals).
#[derive(Clone)]
struct Refresh;
impl Message for Refresh {
    type Reply = ();
}

/// Passivate the idle entities now.
#[derive(Clone)]
struct Sweep;
impl Message for Sweep {
    type Reply = ();
}

/// Hand off every shard and leave the store.
pub(crate) struct LeaveCluster;
impl Message for LeaveCluster {
    type Reply = Result<(), LeaseError>;
}

/// What the region is doing now.
pub(crate) struct Status;
impl Message for Status {
    type Reply = RegionStatus;
}

/// A node's part of the cluster, as its region sees it now.
#[derive(Clone, Debug)]
pub(crate) struct RegionStatus {
    pub node: NodeKey,
    pub lease_valid: bool,
    pub lease_left: Option<Duration>,
    pub leaving: bool,
    pub members: Vec<NodeKey>,
    pub shards: Vec<(ShardId, u64)>,
    pub entities: usize,
    pub waiting: usize,
    pub balanced: bool,
    pub awaited: Option<usize>,
    pub failovers: u64,
    /// From the latest store view: each owner with its shard count and
    /// whether its lease was valid.
    pub owners: Vec<(NodeKey, usize, bool)>,
    pub counts: RegionCounts,
}

/// What a region counts for operators, since it started.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RegionCounts {
    /// Entities started (first message, or again after passivation).
    pub activations: u64,
    /// Entities stopped for being idle (or to make room).
    pub passivations: u64,
    /// Flushes of a moved shard's old path not answered within
    /// [`FLUSH_LIMIT`]: the messages held for them went on regardless.
    pub flushes_given_up: u64,
    /// Lease renewals the store accepted, and refused or failed.
    pub renewals: u64,
    pub renewal_failures: u64,
    /// Time from sending each renewal to its answer (with the view read
    /// after it), summed, and the latest, in microseconds on the system's
    /// clock.
    pub renewal_micros_total: u64,
    pub last_renewal_micros: Option<u64>,
}

/// Read the store again for the shards messages wait on.
struct Recheck;
impl Message for Recheck {
    type Reply = ();
}

/// How long a region holds a moved shard's messages for the old path's
/// flush before sending them on regardless: a live region answers in
/// milliseconds; a dead one may not answer at all (a crashed node whose
/// connection has not been seen to break), and failover must not wait.
const FLUSH_LIMIT: Duration = Duration::from_secs(1);

/// How long a leaving node waits for members to answer its departure.
const DEPARTURE_LIMIT: Duration = Duration::from_secs(10);

/// How soon the store is read again while messages wait for an owner.
const RECHECK_WAITING: Duration = Duration::from_millis(200);
impl Message for Tick {
    type Reply = ();
}

impl Region {
    pub(crate) fn new(setup: RegionSetup) -> Region {
        let key = NodeKey::new(setup.me.name(), setup.me.incarnation());
        let (departing, departed) = departure_codecs();
        Region {
            setup,
            key,
            members: BTreeMap::new(),
            view: None,
            hosted: BTreeMap::new(),
            in_flight: BTreeSet::new(),
            waiting: BTreeMap::new(),
            waiting_len: 0,
            peers: BTreeMap::new(),
            tasks: Tasks::default(),
            renewing: false,
            viewing: false,
            reads: 0,
            applied_read: 0,
            recheck_armed: false,
            leaving: false,
            leave_waiters: Vec::new(),
            left: false,
            balanced: false,
            awaited: None,
            failovers: 0,
            counts: RegionCounts::default(),
            sent_to: BTreeMap::new(),
            departure: None,
            leaving_nodes: BTreeSet::new(),
            moving: BTreeMap::new(),
            flush: flush_codec(),
            departing,
            departed,
        }
    }

    fn start_task(&mut self, task: Task<Event>, ctx: &mut Context<Self>) {
        if let Some(event) = self.tasks.start(&ctx.myself(), task) {
            self.on_event(event, ctx);
        }
    }

    fn lease_valid(&self, ctx: &Context<Self>) -> bool {
        self.setup.lease.is_valid(ctx.now())
    }

    // ---- the store --------------------------------------------------------

    fn renew(&mut self, ctx: &mut Context<Self>) {
        if self.renewing {
            return;
        }
        self.renewing = true;
        let store = self.setup.store.clone();
        let key = self.key.clone();
        let ttl = self.setup.lease.ttl();
        let sent_at = ctx.now();
        let left = self.left;
        self.reads += 1;
        let read = self.reads;
        self.start_task(
            Box::pin(async move {
                let renewed = if left {
                    Err(LeaseError::NotLeased(key.clone()))
                } else {
                    store.renew(&key, ttl).await
                };
                let view = store.view().await;
                Event::Renewed {
                    sent_at,
                    renewed,
                    read,
                    view,
                }
            }),
            ctx,
        );
    }

    /// Reads the store between renewals. A store sees a lease run out on
    /// its reader's clock from when the reader first saw its last renewal
    /// (`lease`), so the more often it is read the sooner a dead node's
    /// shards are claimed: read every third of a renewal, a dead node's
    /// shards move at most `ttl + ttl / 9` after its last renewal (plus
    /// the claim), rather than `ttl + ttl / 3`.
    fn read_view(&mut self, ctx: &mut Context<Self>) {
        if self.viewing || self.renewing {
            return;
        }
        self.viewing = true;
        let store = self.setup.store.clone();
        self.reads += 1;
        let read = self.reads;
        self.start_task(
            Box::pin(async move {
                let view = store.view().await;
                Event::Viewed { read, view }
            }),
            ctx,
        );
    }

    /// Applies a view unless a later read was applied already.
    fn on_view(&mut self, read: u64, view: Result<StoreView, LeaseError>, ctx: &mut Context<Self>) {
        self.check_lease(ctx);
        if let Ok(view) = view {
            if read > self.applied_read {
                self.applied_read = read;
                if self
                    .view
                    .as_ref()
                    .is_none_or(|old| !same_routes(old, &view))
                {
                    self.close_shortcuts();
                }
                self.view = Some(view);
                self.reconcile(ctx);
            }
        }
    }

    fn on_renewed(
        &mut self,
        sent_at: Instant,
        renewed: Result<(), LeaseError>,
        read: u64,
        view: Result<StoreView, LeaseError>,
        ctx: &mut Context<Self>,
    ) {
        self.renewing = false;
        let now = ctx.now();
        let took = now.saturating_duration_since(sent_at).as_micros() as u64;
        self.counts.renewal_micros_total += took;
        self.counts.last_renewal_micros = Some(took);
        if renewed.is_ok() {
            self.counts.renewals += 1;
        } else {
            self.counts.renewal_failures += 1;
        }
        match renewed {
            Ok(()) => {
                if self.setup.lease.renewed(sent_at, now) == Renewal::Started {
                    // Whatever was held before the lease ran out is void.
                    self.drop_all();
                }
                // Stop hosting the moment the lease ends here unless renewed
                // again by then: the store lets another node claim only a
                // margin later, and a check at the next tick (a third of a
                // lease away) or the next message would come too late.
                if let Some(until) = self.setup.lease.valid_until() {
                    ctx.send_after(until.saturating_duration_since(now), LeaseEnds);
                }
            }
            Err(LeaseError::NotLeased(_)) => self.setup.lease.lost(),
            // Unreachable store: the lease runs out by itself.
            Err(e) => {
                tracing::warn!(target: "troubadour::cluster", error = %e, "lease renewal failed");
            }
        }
        self.on_view(read, view, ctx);
    }

    /// Stops hosting everything if the lease ran out.
    fn check_lease(&mut self, ctx: &mut Context<Self>) {
        self.check_lease_at(ctx.now());
    }

    fn check_lease_at(&mut self, now: Instant) {
        if !self.hosted.is_empty() && !self.setup.lease.is_valid(now) {
            tracing::warn!(
                target: "troubadour::cluster",
                shards = self.hosted.len(),
                "the node's lease ran out before a renewal: stopping every shard it hosts"
            );
            self.drop_all();
        }
    }

    fn drop_all(&mut self) {
        let shards: Vec<ShardId> = self.hosted.keys().copied().collect();
        for shard in shards {
            self.stop_shard(shard);
        }
    }

    /// The shard is no longer this node's: its entities stop after their
    /// current message.
    fn stop_shard(&mut self, shard: ShardId) {
        self.setup.hosting.set(shard, None);
        if let Some(hosted) = self.hosted.remove(&shard) {
            for (_, slot) in hosted.into_sorted() {
                match slot {
                    Slot::Active { entity, .. } => entity.stop_now(),
                    // Its messages go to the shard's next owner.
                    Slot::Stopping(queue) => self.requeue(shard, queue),
                }
            }
        }
    }

    /// Stops hosting `shard` for a handoff: its entities finish what they
    /// were sent and stop (the futures resolve then); what waited on a
    /// passivating one waits for the next owner.
    fn hand_over(&mut self, shard: ShardId) -> Vec<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let mut stopped = Vec::new();
        self.setup.hosting.set(shard, None);
        let Some(hosted) = self.hosted.remove(&shard) else {
            return stopped;
        };
        for (_, slot) in hosted.into_sorted() {
            match slot {
                Slot::Active { entity, .. } => {
                    entity.stop_after_queued();
                    stopped.push(entity.stopped());
                }
                Slot::Stopping(queue) => self.requeue(shard, queue),
            }
        }
        stopped
    }

    /// Messages that were waiting on an entity go back to wait for the
    /// shard's owner, ahead of anything that came later.
    fn requeue(&mut self, shard: ShardId, queue: VecDeque<Pending>) {
        if queue.is_empty() {
            return;
        }
        self.waiting_len += queue.len();
        let waiting = self.waiting.entry(shard).or_default();
        for p in queue.into_iter().rev() {
            waiting.push_front(p);
        }
    }

    /// Acts on the last view: drop what is lost, claim orphans placed
    /// here, release what placement moves away.
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        let Some(view) = &self.view else { return };
        let view = view.clone();
        // Shards the store gives to another node (or another epoch).
        let lost: Vec<ShardId> = self
            .hosted
            .iter()
            .filter(|(shard, h)| {
                let a = &view.assignments[shard.get() as usize];
                a.owner.as_ref() != Some(&self.key) || a.epoch != h.epoch
            })
            .map(|(s, _)| *s)
            .collect();
        for shard in lost {
            if self.setup.best_effort.is_some() {
                // Placed elsewhere by a change of members: its entities
                // finish what they were sent (the next owner may already
                // run beside them: this mode's documented duplicates).
                tracing::info!(target: "troubadour::cluster", shard = shard.get(), "shard placed on another member: handed over");
                drop(self.hand_over(shard));
            } else {
                tracing::warn!(target: "troubadour::cluster", shard = shard.get(), "shard lost: the store gives it to another node or epoch");
                self.stop_shard(shard);
            }
        }
        if !self.lease_valid(ctx) {
            self.schedule_next(&view, ctx);
            self.drain_waiting(ctx);
            return;
        }
        let live = self.live_members(&view);
        let current: Vec<Option<String>> = view
            .assignments
            .iter()
            .map(|a| {
                a.owner
                    .as_ref()
                    .filter(|o| !a.released && live.contains(o))
                    .map(|o| o.name.clone())
            })
            .collect();
        let names: Vec<String> = live.iter().map(|k| k.name.clone()).collect();
        // Every move placement wants; the limit is applied below, to
        // shards with active entities only: handing over an empty shard
        // stops nothing, so a cluster that is starting (every shard claimed
        // by the first node up) spreads out in one round.
        let mut busy_releases = 0;
        let moves = placement::plan(self.setup.shards, &current, &names, usize::MAX);
        self.balanced = !moves
            .iter()
            .any(|m| m.to == self.key.name || m.from.as_deref() == Some(self.key.name.as_str()));
        self.awaited = Some(moves.iter().filter(|m| m.to == self.key.name).count());
        let mut moving = vec![false; view.assignments.len()];
        for m in moves {
            moving[m.shard.get() as usize] = true;
            if self.in_flight.contains(&m.shard) {
                continue;
            }
            let a = &view.assignments[m.shard.get() as usize];
            if m.to == self.key.name && m.from.is_none() && !self.leaving {
                // An owner that neither released the shard nor holds a
                // lease: a lost node, whose shard this claim takes over.
                // (An owner merely not yet seen up by membership, as when
                // this node has just joined, still holds its lease.)
                let failover = !a.released
                    && a.owner
                        .as_ref()
                        .is_some_and(|o| *o != self.key && !view.is_leased(o));
                self.claim(m.shard, a.epoch, failover, ctx);
            } else if m.from.as_deref() == Some(self.key.name.as_str()) {
                // (A shard the store gives this node but that it does not
                // host is released at once: nothing runs to stop.)
                if self
                    .hosted
                    .get(&m.shard)
                    .is_some_and(|h| !h.entities.is_empty())
                {
                    if busy_releases == self.setup.rebalance_limit {
                        continue;
                    }
                    busy_releases += 1;
                }
                self.release(m.shard, a.epoch, ctx);
            }
        }
        // A shard the store gives this node that it does not host (its
        // claim came back after the lease ran out, or its entities were
        // stopped on a view read before the claim): placement keeps it
        // here, so claim it again, at the next epoch, before serving it.
        if !self.leaving {
            for (i, a) in view.assignments.iter().enumerate() {
                let shard = a.shard;
                if a.owner.as_ref() == Some(&self.key)
                    && !a.released
                    && !moving[i]
                    && !self.hosted.contains_key(&shard)
                    && !self.in_flight.contains(&shard)
                {
                    self.claim(shard, a.epoch, false, ctx);
                }
            }
        }
        self.schedule_next(&view, ctx);
        self.start_singletons(ctx);
        self.drain_waiting(ctx);
    }

    /// Starts every singleton whose shard is hosted here and that is not
    /// running (first claim, a move here, or it stopped by itself: it runs
    /// again by the next read of the store).
    fn start_singletons(&mut self, ctx: &mut Context<Self>) {
        if self.leaving || !self.lease_valid(ctx) {
            return;
        }
        let mut singletons: Vec<(&'static str, MakeEntity)> = self
            .setup
            .kinds
            .iter()
            .filter(|(_, k)| k.singleton)
            .map(|(name, k)| (*name, k.make.clone()))
            .collect();
        // By name, not in a hash map's order: a seed replays a simulation.
        singletons.sort_unstable_by_key(|(name, _)| *name);
        for (kind, make) in singletons {
            let id = singleton_id(kind);
            let shard = self.setup.shards.shard_of(id);
            let key: EntityKey = (kind, Arc::from(id));
            let Some(hosted) = self.hosted.get_mut(&shard) else {
                continue;
            };
            match hosted.entities.get(&key) {
                // (Stopping: it is being handed off or passivated.)
                Some(Slot::Stopping(_)) => continue,
                Some(Slot::Active { entity, .. }) if entity.is_alive() => continue,
                // Stopped by itself: started again.
                Some(Slot::Active { .. }) => {
                    hosted.entities.remove(&key);
                }
                None => {}
            }
            let at = HostedShard {
                shard,
                epoch: hosted.epoch,
            };
            match make(ctx, id, at, self.setup.lease.deadline()) {
                Ok(entity) => {
                    self.counts.activations += 1;
                    tracing::info!(target: "troubadour::cluster", kind, shard = shard.get(), "singleton started");
                    let now = ctx.now();
                    if let Some(hosted) = self.hosted.get_mut(&shard) {
                        hosted.entities.insert(
                            key,
                            Slot::Active {
                                entity,
                                last_used: now,
                            },
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "troubadour::cluster", kind, error = %e, "a singleton could not be started; trying again at the next read of the store");
                }
            }
        }
    }

    /// Members whose lease is valid, this node among them.
    fn live_members(&self, view: &StoreView) -> Vec<NodeKey> {
        let mut live: Vec<NodeKey> = self
            .members
            .keys()
            .filter(|k| view.is_leased(k))
            .cloned()
            .collect();
        if self.setup.lease.valid_until().is_some() {
            live.push(self.key.clone());
        }
        live.sort();
        live.dedup();
        live
    }

    /// Ticks again when the first lease of an owner that is not a live
    /// member runs out, so its shards are claimed then, not a third of a
    /// lease later.
    fn schedule_next(&self, view: &StoreView, ctx: &mut Context<Self>) {
        let waiting_on = view
            .assignments
            .iter()
            .filter_map(|a| a.owner.as_ref())
            .filter(|o| **o != self.key && !self.members.contains_key(o))
            .filter_map(|o| view.leases.iter().find(|l| l.node == *o))
            .map(|l| l.remaining)
            .filter(|r| !r.is_zero())
            .min();
        if let Some(remaining) = waiting_on {
            ctx.send_after(remaining + Duration::from_millis(1), Tick);
        }
    }

    /// Claims `shard` from epoch `seen`; `failover` when it takes the
    /// shard from a lost node.
    fn claim(&mut self, shard: ShardId, seen: u64, failover: bool, ctx: &mut Context<Self>) {
        self.in_flight.insert(shard);
        let store = self.setup.store.clone();
        let key = self.key.clone();
        self.start_task(
            Box::pin(async move {
                Event::Claimed(shard, failover, store.claim(shard, &key, seen).await)
            }),
            ctx,
        );
    }

    fn on_claimed(
        &mut self,
        shard: ShardId,
        failover: bool,
        result: Result<Assignment, LeaseError>,
        ctx: &mut Context<Self>,
    ) {
        self.in_flight.remove(&shard);
        self.close_shortcuts();
        // A read of the store that started before this claim was answered
        // may show the shard as it was before: drop it.
        self.applied_read = self.reads;
        match result {
            Ok(a) if self.lease_valid(ctx) => {
                tracing::info!(target: "troubadour::cluster", shard = shard.get(), epoch = a.epoch, failover, "shard claimed");
                self.failovers += u64::from(failover);
                if let Some(view) = &mut self.view {
                    view.assignments[shard.get() as usize] = a.clone();
                }
                self.hosted.insert(
                    shard,
                    Hosted {
                        epoch: a.epoch,
                        entities: HashMap::new(),
                    },
                );
                self.setup.hosting.set(shard, Some(a.epoch));
                self.start_singletons(ctx);
                self.drain_waiting(ctx);
            }
            // The lease ran out while the claim was on its way: the shard
            // is ours in the store but must not be served; the next renewal
            // claims it again at the next epoch.
            Ok(_) => {}
            Err(_) => {}
        }
    }

    /// Hands the shard over: its entities finish what they were sent and
    /// stop; once every one has stopped the shard is released, so the
    /// next owner's entities never run beside these. What arrives for the
    /// shard meanwhile waits for the next owner.
    fn release(&mut self, shard: ShardId, epoch: u64, ctx: &mut Context<Self>) {
        let stopped = self.hand_over(shard);
        self.in_flight.insert(shard);
        let store = self.setup.store.clone();
        let key = self.key.clone();
        let before = self.setup.before_handoff.clone();
        self.start_task(
            Box::pin(async move {
                for s in stopped {
                    s.await;
                }
                if let Some(before) = before {
                    before().await;
                }
                let _ = store.release(shard, &key, epoch).await;
                Event::Released(shard)
            }),
            ctx,
        );
    }

    // ---- routing ---------------------------------------------------------

    fn route(&mut self, p: Pending, ctx: &mut Context<Self>) {
        self.route_at(p, ctx.now(), ctx);
    }

    /// [`route`](Self::route) at `now`, read once for the message (the
    /// lease's check and the entity's last use).
    fn route_at(&mut self, p: Pending, now: Instant, ctx: &mut Context<Self>) {
        let shard = self.setup.shards.shard_of(&p.routed.id);
        let here = self.hosted.contains_key(&shard) && self.setup.lease.is_valid(now);
        // What another region forwards to the shard's owner is in the order
        // that region keeps (it flushed its own old path first): deliver
        // it, even while this region holds its own senders' messages.
        if here && !p.local {
            return self.deliver(shard, p, now, ctx);
        }
        if self.moving.contains_key(&shard) {
            if self.comes_from_old_path(shard, &p) {
                return self.pass_on(shard, p, ctx);
            }
            self.moving
                .get_mut(&shard)
                .expect("checked above")
                .push_back(p);
            return;
        }
        // Nothing overtakes what already waits for the shard's owner.
        if self.waiting.contains_key(&shard) {
            return self.wait(shard, p, ctx);
        }
        let (target, elsewhere) = if here {
            (Target::Here, None)
        } else {
            match self.owner_elsewhere(shard) {
                Some(_) if self.setup.best_effort.is_some() && !p.local => {
                    // Best-effort mode: the sender's view put the shard
                    // here, this node's puts it on another (a change of
                    // members not known everywhere yet). Sent on at once,
                    // it could bounce between two nodes as fast as the
                    // network goes until they agree; it waits for this
                    // node's next read instead, and goes on from here then,
                    // in this node's order.
                    let mut p = p;
                    p.local = true;
                    return self.wait(shard, p, ctx);
                }
                Some((key, node)) => (Target::Node(key.clone()), Some((key, node))),
                None => return self.wait(shard, p, ctx),
            }
        };
        // The shard moved since this region last sent it something: what
        // went down the old path must arrive first. Flush it, and hold
        // what comes meanwhile.
        // (Also when the old node is no longer a member: one that left
        // gracefully still forwards what reached it; for one that died the
        // flush ends with the connection, or at its time limit.)
        if let Some((Target::Node(old), _)) = self.sent_to.get(&shard) {
            if Target::Node(old.clone()) != target {
                let old = old.clone();
                let id = p.routed.id.clone();
                if self.comes_from_old_path(shard, &p) {
                    self.moving.insert(shard, VecDeque::new());
                    self.flush_old_path(shard, old, id, ctx);
                    return match elsewhere {
                        Some((key, node)) => self.forward(key, node, p, ctx),
                        None => self.deliver(shard, p, now, ctx),
                    };
                }
                self.moving.insert(shard, VecDeque::from([p]));
                self.flush_old_path(shard, old, id, ctx);
                return;
            }
        }
        match self.sent_to.get_mut(&shard) {
            Some((last, _)) if *last == target => {}
            // A new path: the only time the id is copied.
            _ => {
                self.sent_to.insert(shard, (target, p.routed.id.clone()));
            }
        }
        match elsewhere {
            None => self.deliver(shard, p, now, ctx),
            Some((key, node)) => self.forward(key, node, p, ctx),
        }
    }

    /// Whether `p`, a message for `shard`, which this region is moving
    /// (or about to move) off its old path, came from the node that path
    /// leads to. This region never sent such a message down that path
    /// (short of a bounce between two stale views), so the path's flush
    /// guards nothing of it: it goes on at once instead of being held.
    /// Held, it could deadlock: two regions whose old paths lead to each
    /// other (a shard that moved from one to the other and on, each having
    /// sent it messages only through the other) flush each other's path,
    /// and each flush, arriving from the other's old path, would wait for
    /// the other's, both until [`FLUSH_LIMIT`], after which the held
    /// messages go on unordered. Passing it on keeps its sender's order:
    /// everything that node sent here before it arrived before it, and
    /// was passed on before it the same way (or delivered).
    fn comes_from_old_path(&self, shard: ShardId, p: &Pending) -> bool {
        !p.local
            && self.setup.best_effort.is_none()
            && matches!(
                self.sent_to.get(&shard),
                Some((Target::Node(old), _)) if old.incarnation == p.routed.from
            )
    }

    /// Sends `p` on to the shard's owner without waiting for this
    /// region's flush (see [`comes_from_old_path`](Self::comes_from_old_path)).
    fn pass_on(&mut self, shard: ShardId, p: Pending, ctx: &mut Context<Self>) {
        if self.waiting.contains_key(&shard) {
            return self.wait(shard, p, ctx);
        }
        match self.owner_elsewhere(shard) {
            Some((key, node)) => self.forward(key, node, p, ctx),
            None => self.wait(shard, p, ctx),
        }
    }

    /// Sends a flush for `shard` down the path to `old` (see [`Flush`]).
    fn flush_old_path(
        &mut self,
        shard: ShardId,
        old: NodeKey,
        id: Arc<str>,
        ctx: &mut Context<Self>,
    ) {
        let flush = Pending {
            routed: Routed {
                kind: Cow::Borrowed(""),
                id,
                codec: self.flush,
                body: Box::new(Flush),
                from: self.key.incarnation,
            },
            reply: None,
            local: true,
        };
        // Down the path the messages took: the region found for that node
        // (with what still waits for it to be found, if it is being looked
        // up). Without one, nothing went down that path any more.
        match self.peers.get(&old) {
            Some(_) => {
                let node = NodeId::remote(&old.name, None, old.incarnation);
                match node {
                    Ok(node) => self.forward(old, node, flush, ctx),
                    Err(_) => self.on_flushed(shard, ctx),
                }
            }
            None => self.on_flushed(shard, ctx),
        }
    }

    /// A flush down the path to `node` came back unanswered. If `node` is
    /// no longer a member (it left, or membership has it down), it has
    /// ended: a node that leaves ends only once everything sent to it was
    /// passed on, and its process closed its connections as it exited.
    /// Its region is forgotten, so the next moved shard whose old path
    /// leads there goes on at once. Kept, every such flush would dial the
    /// node again and wait out the link's reconnect backoff, which grows
    /// to seconds: past [`FLUSH_LIMIT`], each held its shard's messages for
    /// a second once nodes had left for good.
    fn forget_ended_path(&mut self, node: &NodeKey) {
        if !self.members.contains_key(node) && matches!(self.peers.get(node), Some(Peer::Ready(_)))
        {
            self.peers.remove(node);
        }
    }

    /// The old path is flushed: what was held goes on, in order.
    fn on_flushed(&mut self, shard: ShardId, ctx: &mut Context<Self>) {
        self.sent_to.remove(&shard);
        let held = self.moving.remove(&shard).unwrap_or_default();
        for p in held {
            self.route(p, ctx);
        }
        if let Some(flushing) = self.departure.as_mut().and_then(|d| d.flushing.as_mut()) {
            if flushing.remove(&shard) {
                self.check_departure(ctx);
            }
        }
    }

    // ---- leaving ----------------------------------------------------------

    /// The store let the node go: tell every member (see [`Departure`]).
    fn depart(&mut self, ctx: &mut Context<Self>) {
        let members: Vec<(NodeKey, NodeId)> = self
            .members
            .iter()
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        self.departure = Some(Departure {
            unanswered: members.iter().map(|(k, _)| k.clone()).collect(),
            flushing: None,
            gave_up: false,
        });
        for (key, node) in members {
            let marker = self.marker(
                self.departing,
                Departing {
                    name: self.key.name.clone(),
                    incarnation: self.key.incarnation,
                },
            );
            self.forward(key, node, marker, ctx);
        }
        ctx.send_after(DEPARTURE_LIMIT, GiveUpDeparture);
        self.check_departure(ctx);
    }

    fn marker(&self, codec: &'static MessageCodec, body: impl Send + 'static) -> Pending {
        Pending {
            routed: Routed {
                kind: Cow::Borrowed(""),
                id: Arc::from(""),
                codec,
                body: Box::new(body),
                from: self.key.incarnation,
            },
            reply: None,
            local: true,
        }
    }

    /// A member's region says a node left: send it nothing more, answer
    /// down the path everything else went.
    fn on_departing(&mut self, departing: Departing, ctx: &mut Context<Self>) {
        let key = NodeKey::new(departing.name, departing.incarnation);
        self.close_shortcuts();
        self.members.remove(&key);
        self.leaving_nodes.insert(key.clone());
        let Ok(node) = NodeId::remote(&key.name, None, key.incarnation) else {
            return;
        };
        let answer = self.marker(
            self.departed,
            Departed {
                name: self.key.name.clone(),
                incarnation: self.key.incarnation,
            },
        );
        self.forward(key, node, answer, ctx);
        // Where its shards went is in the store.
        self.renew(ctx);
    }

    fn on_departed(&mut self, key: &NodeKey, ctx: &mut Context<Self>) {
        if let Some(d) = self.departure.as_mut() {
            if d.unanswered.remove(key) {
                self.check_departure(ctx);
            }
        }
    }

    /// Ends the leave once nothing more is owed (see [`Departure`]).
    fn check_departure(&mut self, ctx: &mut Context<Self>) {
        let Some(d) = self.departure.as_mut() else {
            return;
        };
        if d.flushing.is_none() {
            let settled = d.gave_up
                || (d.unanswered.is_empty() && self.waiting.is_empty() && self.moving.is_empty());
            if !settled {
                return;
            }
            let paths: Vec<(ShardId, NodeKey, Arc<str>)> = self
                .sent_to
                .iter()
                .filter_map(|(shard, (target, id))| match target {
                    Target::Node(k) => Some((*shard, k.clone(), id.clone())),
                    Target::Here => None,
                })
                .collect();
            d.flushing = Some(paths.iter().map(|(s, _, _)| *s).collect());
            for (shard, to, id) in paths {
                self.moving.entry(shard).or_default();
                self.flush_old_path(shard, to, id, ctx);
            }
        }
        let done = self
            .departure
            .as_ref()
            .and_then(|d| d.flushing.as_ref())
            .is_some_and(|f| f.is_empty());
        if done {
            self.departure = None;
            for reply in std::mem::take(&mut self.leave_waiters) {
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// What waited for a region that was never reached: nothing of it was
    /// sent, so it waits for its shards again (their owner, perhaps another
    /// by then); a flush of this node's old path is done.
    fn wait_again(&mut self, queue: VecDeque<Pending>, ctx: &mut Context<Self>) {
        for p in queue {
            let shard = self.setup.shards.shard_of(&p.routed.id);
            if self.is_own_flush(&p) {
                self.on_flushed(shard, ctx);
            } else {
                self.wait(shard, p, ctx);
            }
        }
    }

    fn is_own_flush(&self, p: &Pending) -> bool {
        std::ptr::eq(p.routed.codec, self.flush) && p.reply.is_none()
    }

    /// The live member that owns `shard`, if it is not this node.
    fn owner_elsewhere(&self, shard: ShardId) -> Option<(NodeKey, NodeId)> {
        let view = self.view.as_ref()?;
        let a = &view.assignments[shard.get() as usize];
        let owner = a.owner.as_ref().filter(|_| !a.released)?;
        if *owner == self.key || !view.is_leased(owner) {
            return None;
        }
        // An owner membership does not list is taken for dead (its shards
        // are claimed once its lease runs out), unless this node is
        // leaving: its membership no longer lists anyone, and what reaches
        // it goes on to the owners the store names (the remote layer knows
        // them by name and incarnation, having met them).
        let node = match self.members.get(owner) {
            Some(node) => node.clone(),
            None if self.leaving => NodeId::remote(&owner.name, None, owner.incarnation).ok()?,
            None => return None,
        };
        Some((owner.clone(), node))
    }

    fn wait(&mut self, shard: ShardId, p: Pending, ctx: &mut Context<Self>) {
        if self.waiting_len >= self.setup.buffer_limit {
            p.fail(WireAskError::Unreachable(format!(
                "{shard} has no owner yet and {} messages already wait for owners",
                self.setup.buffer_limit
            )));
            return;
        }
        self.waiting_len += 1;
        self.waiting.entry(shard).or_default().push_back(p);
        self.arm_recheck(ctx);
    }

    /// Messages wait for an owner another node is about to claim: read
    /// the store again soon rather than a third of a lease later.
    fn arm_recheck(&mut self, ctx: &mut Context<Self>) {
        if !self.waiting.is_empty() && !self.recheck_armed {
            self.recheck_armed = true;
            ctx.send_after(RECHECK_WAITING, Recheck);
        }
    }

    /// Routes again, in order, what waits for shards that now have an
    /// owner.
    fn drain_waiting(&mut self, ctx: &mut Context<Self>) {
        let ready: Vec<ShardId> = self
            .waiting
            .keys()
            .copied()
            .filter(|s| {
                (self.hosted.contains_key(s) && self.lease_valid(ctx))
                    || self.owner_elsewhere(*s).is_some()
            })
            .collect();
        for shard in ready {
            let queue = self.waiting.remove(&shard).unwrap_or_default();
            self.waiting_len -= queue.len();
            let mut queue = queue.into_iter();
            while let Some(p) = queue.next() {
                self.route(p, ctx);
                // Routing can make the shard wait again (a flush of its
                // old path): the rest waits behind, in order.
                if self.waiting.contains_key(&shard) || self.moving.contains_key(&shard) {
                    for rest in queue.by_ref() {
                        match self.moving.get_mut(&shard) {
                            Some(held) => held.push_back(rest),
                            None => self.wait(shard, rest, ctx),
                        }
                    }
                }
            }
        }
        self.arm_recheck(ctx);
    }

    fn deliver(&mut self, shard: ShardId, p: Pending, now: Instant, ctx: &mut Context<Self>) {
        if std::ptr::eq(p.routed.codec, self.flush) {
            // Everything sent before it is in the entities' mailboxes.
            match p.reply {
                Some(reply) => {
                    let _ = reply.send(Answer(Ok(Reply {
                        codec: self.flush,
                        body: Box::new(()),
                    })));
                }
                None => self.on_flushed(shard, ctx),
            }
            return;
        }
        let Some((&kind_name, kind)) = self.setup.kinds.get_key_value(&*p.routed.kind) else {
            let why = WireAskError::UnknownKind(p.routed.kind.to_string());
            return p.fail(why);
        };
        let Some(deliver) = kind.deliver.get(p.routed.codec.name).copied() else {
            let why = WireAskError::Other(format!(
                "entities of kind {:?} do not take {}: list it in their `Entity::messages`",
                p.routed.kind, p.routed.codec.name
            ));
            return p.fail(why);
        };
        let key = (kind_name, p.routed.id.clone());
        let hosted = self.hosted.get_mut(&shard).expect("checked by route");
        // One search of the shard's entities for an active one (the usual
        // case); activation searches again.
        let entity = match hosted.entities.get_mut(&key) {
            Some(Slot::Stopping(queue)) => {
                queue.push_back(p);
                return;
            }
            Some(Slot::Active { entity, last_used }) => {
                *last_used = now;
                entity
            }
            None => {
                let make = kind.make.clone();
                let at = HostedShard {
                    shard,
                    epoch: hosted.epoch,
                };
                self.make_room(ctx);
                match make(ctx, &p.routed.id, at, self.setup.lease.deadline()) {
                    Ok(entity) => {
                        self.counts.activations += 1;
                        let hosted = self.hosted.get_mut(&shard).expect("checked by route");
                        hosted.entities.insert(
                            key.clone(),
                            Slot::Active {
                                entity,
                                last_used: now,
                            },
                        );
                    }
                    Err(why) => return p.fail(WireAskError::NotActivated(why)),
                }
                let hosted = self.hosted.get_mut(&shard).expect("checked by route");
                let Some(Slot::Active { entity, .. }) = hosted.entities.get_mut(&key) else {
                    unreachable!("made active above");
                };
                entity
            }
        };
        let Pending {
            routed,
            reply,
            local,
        } = p;
        let (codec, from) = (routed.codec, routed.from);
        let refused = match reply {
            None => match (deliver.tell)(entity, routed.body) {
                Ok(()) | Err(Undelivered::Full) => None,
                Err(Undelivered::Stopped(body)) => Some((body, None)),
            },
            Some(reply) => match (deliver.ask)(entity, routed.body) {
                Ok(answer) => {
                    let task: Task<Event> = Box::pin(async move {
                        let answer = match answer.await {
                            Ok(body) => Answer(Ok(Reply { codec, body })),
                            Err(e) => Answer(Err(e.into())),
                        };
                        Event::Answered(reply, answer)
                    });
                    self.start_task(task, ctx);
                    None
                }
                Err(Undelivered::Full) => {
                    let _ = reply.send(Answer(Err(WireAskError::Full)));
                    None
                }
                Err(Undelivered::Stopped(body)) => Some((body, Some(reply))),
            },
        };
        // The entity stopped by itself: the message goes to its next
        // activation (made now), not to the dead letters.
        if let Some((body, reply)) = refused {
            let hosted = self.hosted.get_mut(&shard).expect("checked by route");
            hosted.entities.remove(&key);
            let routed = Routed {
                kind: routed.kind,
                id: routed.id,
                codec,
                body,
                from,
            };
            self.deliver(
                shard,
                Pending {
                    routed,
                    reply,
                    local,
                },
                now,
                ctx,
            );
        }
    }

    /// Passivates every entity idle for `passivate_after`: it finishes
    /// what it has and stops; what arrives meanwhile waits for its next
    /// activation.
    fn passivate_idle(&mut self, idle: Duration, ctx: &mut Context<Self>) {
        let now = ctx.now();
        let mut idle: Vec<(ShardId, EntityKey)> = self
            .active_entities()
            .filter(|(_, _, last_used)| now.saturating_duration_since(*last_used) >= idle)
            .map(|(shard, key, _)| (shard, key.clone()))
            .collect();
        idle.sort_unstable();
        for (shard, key) in idle {
            self.passivate(shard, key, ctx);
        }
    }

    /// Every active entity but the singletons (never passivated), with
    /// when it was last sent something.
    fn active_entities(&self) -> impl Iterator<Item = (ShardId, &EntityKey, Instant)> {
        let kinds = &self.setup.kinds;
        self.hosted.iter().flat_map(move |(shard, hosted)| {
            hosted
                .entities
                .iter()
                .filter_map(move |(key, slot)| match slot {
                    Slot::Active { last_used, .. }
                        if !kinds.get(key.0).is_some_and(|k| k.singleton) =>
                    {
                        Some((*shard, key, *last_used))
                    }
                    _ => None,
                })
        })
    }

    /// With a limit on active entities reached, passivates the one sent
    /// nothing for longest, to make room for a new one.
    fn make_room(&mut self, ctx: &mut Context<Self>) {
        let Some(limit) = self.setup.max_active else {
            return;
        };
        if self.active_entities().count() < limit {
            return;
        }
        // Ties broken by key, not by the hash maps' order.
        let oldest = self
            .active_entities()
            .min_by(|(s1, k1, t1), (s2, k2, t2)| (t1, s1, k1).cmp(&(t2, s2, k2)))
            .map(|(shard, key, _)| (shard, key.clone()));
        if let Some((shard, key)) = oldest {
            self.passivate(shard, key, ctx);
        }
    }

    /// Stops an entity after what it was sent; what arrives meanwhile
    /// waits in its slot for its next activation.
    fn passivate(&mut self, shard: ShardId, key: EntityKey, ctx: &mut Context<Self>) {
        let Some(hosted) = self.hosted.get_mut(&shard) else {
            return;
        };
        let Some(slot) = hosted.entities.get_mut(&key) else {
            return;
        };
        let Slot::Active { entity, .. } = slot else {
            return;
        };
        entity.stop_after_queued();
        let stopped = entity.stopped();
        *slot = Slot::Stopping(VecDeque::new());
        self.start_task(
            Box::pin(async move {
                stopped.await;
                Event::Passivated(shard, key)
            }),
            ctx,
        );
    }

    fn on_passivated(&mut self, shard: ShardId, key: EntityKey, ctx: &mut Context<Self>) {
        let Some(hosted) = self.hosted.get_mut(&shard) else {
            return;
        };
        if !matches!(hosted.entities.get(&key), Some(Slot::Stopping(_))) {
            return;
        }
        let Some(Slot::Stopping(queue)) = hosted.entities.remove(&key) else {
            return;
        };
        self.counts.passivations += 1;
        // What waited makes the next activation, in order.
        for p in queue {
            self.route(p, ctx);
        }
    }

    /// Hands off every shard, then lets the store and membership go.
    fn leave(&mut self, ctx: &mut Context<Self>) {
        let shards: Vec<ShardId> = self.hosted.keys().copied().collect();
        let stopped: Vec<_> = shards.into_iter().flat_map(|s| self.hand_over(s)).collect();
        let store = self.setup.store.clone();
        let key = self.key.clone();
        let before = self.setup.before_handoff.clone();
        self.start_task(
            Box::pin(async move {
                for s in stopped {
                    s.await;
                }
                if let Some(before) = before {
                    before().await;
                }
                Event::Left(store.leave(&key).await)
            }),
            ctx,
        );
    }

    fn status(&self, ctx: &Context<Self>) -> RegionStatus {
        let now = ctx.now();
        RegionStatus {
            node: self.key.clone(),
            lease_valid: self.setup.lease.is_valid(now),
            lease_left: self
                .setup
                .lease
                .valid_until()
                .map(|u| u.saturating_duration_since(now)),
            leaving: self.leaving,
            members: self.members.keys().cloned().collect(),
            shards: self.hosted.iter().map(|(s, h)| (*s, h.epoch)).collect(),
            entities: self.hosted.values().map(|h| h.entities.len()).sum(),
            waiting: self.waiting_len,
            balanced: self.balanced && self.in_flight.is_empty(),
            awaited: self.awaited,
            failovers: self.failovers,
            counts: self.counts,
            owners: self.view.as_ref().map_or_else(Vec::new, |view| {
                let mut owners: BTreeMap<&NodeKey, usize> = BTreeMap::new();
                for owner in view.assignments.iter().filter_map(|a| a.owner.as_ref()) {
                    *owners.entry(owner).or_default() += 1;
                }
                owners
                    .into_iter()
                    .map(|(node, shards)| (node.clone(), shards, view.is_leased(node)))
                    .collect()
            }),
        }
    }

    /// Lets this node's senders send the shard's messages straight to its
    /// owner's region, if this region's last message of the shard went
    /// there and it holds none of the shard (see [`routes`](crate::routes)
    /// for why order then holds).
    fn open_shortcut(&self, shard: ShardId) {
        if self.leaving || self.moving.contains_key(&shard) || self.waiting.contains_key(&shard) {
            return;
        }
        let Some((Target::Node(owner), _)) = self.sent_to.get(&shard) else {
            return;
        };
        if let Some(Peer::Ready(region)) = self.peers.get(owner) {
            self.setup.routes.open(shard, region);
        }
    }

    /// What the region routes by is about to change: every message goes
    /// through it again until it opens shortcuts anew.
    fn close_shortcuts(&self) {
        self.setup.routes.close_all();
    }

    fn forward(&mut self, key: NodeKey, node: NodeId, p: Pending, ctx: &mut Context<Self>) {
        match self.peers.get_mut(&key) {
            Some(Peer::Ready(region)) => {
                let region = region.clone();
                self.send_to(&key, &region, p, ctx);
            }
            Some(Peer::Resolving(queue)) => queue.push_back(p),
            None => {
                self.peers
                    .insert(key.clone(), Peer::Resolving(VecDeque::from([p])));
                let lookup = self.setup.lookup.clone();
                self.start_task(
                    Box::pin(async move {
                        let found = lookup.lookup::<Region>(&node, REGION).await;
                        Event::Found(key, found)
                    }),
                    ctx,
                );
            }
        }
    }

    fn send_to(
        &mut self,
        key: &NodeKey,
        region: &ActorRef<Region>,
        p: Pending,
        ctx: &mut Context<Self>,
    ) {
        if self.is_own_flush(&p) {
            let shard = self.setup.shards.shard_of(&p.routed.id);
            let asked = region.ask(p.routed).timeout(FLUSH_LIMIT);
            let node = key.clone();
            // Answered, or the path is gone (the connection was lost):
            // either way nothing more will come down it. Past the limit
            // (two moves of one shard in opposite directions at once can
            // hold each other's flush) the held messages go on anyway:
            // order may then break, nothing hangs.
            self.start_task(
                Box::pin(async move {
                    let end = match asked.await {
                        Ok(_) => FlushEnd::Answered,
                        Err(AskError::Timeout(_)) => FlushEnd::GivenUp,
                        Err(_) => FlushEnd::PathGone,
                    };
                    Event::Flushed(shard, node, end)
                }),
                ctx,
            );
            return;
        }
        let Pending {
            mut routed, reply, ..
        } = p;
        // From here on it comes from this node.
        routed.from = self.key.incarnation;
        match reply {
            None => {
                // Lost with the connection if it breaks: at most once.
                let _ = region.tell(routed);
            }
            Some(reply) => {
                let asked = region.ask(routed).timeout(ENTITY_ASK_LIMIT);
                self.start_task(
                    Box::pin(async move {
                        let answer = match asked.await {
                            Ok(answer) => answer,
                            Err(e) => Answer(Err(e.into())),
                        };
                        Event::Answered(reply, answer)
                    }),
                    ctx,
                );
            }
        }
    }

    fn on_found(
        &mut self,
        key: NodeKey,
        found: Result<ActorRef<Region>, LookupError>,
        ctx: &mut Context<Self>,
    ) {
        // Only the lookup awaited: one that comes back after another found
        // the region must not remove what that one made ready.
        if !matches!(self.peers.get(&key), Some(Peer::Resolving(_))) {
            return;
        }
        let Some(Peer::Resolving(queue)) = self.peers.remove(&key) else {
            return;
        };
        match found {
            Ok(region) => {
                self.peers.insert(key.clone(), Peer::Ready(region.clone()));
                for p in queue {
                    self.send_to(&key, &region, p, ctx);
                }
            }
            // The owner is a member, but this node cannot reach its
            // region now (a link cut between the two, while both reach
            // the store). Nothing was sent: the messages wait for their
            // shards again and go on at the next read or recheck, by then
            // perhaps to another owner; asks end with their timeouts
            // meanwhile, and the buffer limit bounds what waits.
            Err(e) => {
                self.close_shortcuts();
                tracing::debug!(target: "troubadour::cluster", node = %key, error = %e, "the owner's region was not found; its messages wait");
                self.wait_again(queue, ctx);
            }
        }
    }

    fn on_event(&mut self, event: Event, ctx: &mut Context<Self>) {
        match event {
            Event::Renewed {
                sent_at,
                renewed,
                read,
                view,
            } => self.on_renewed(sent_at, renewed, read, view, ctx),
            Event::Viewed { read, view } => {
                self.viewing = false;
                self.on_view(read, view, ctx);
            }
            Event::Claimed(shard, failover, result) => {
                self.on_claimed(shard, failover, result, ctx)
            }
            Event::Released(shard) => {
                tracing::info!(target: "troubadour::cluster", shard = shard.get(), "shard handed off");
                self.in_flight.remove(&shard);
                self.applied_read = self.reads;
            }
            Event::Found(key, found) => self.on_found(key, found, ctx),
            Event::Answered(reply, answer) => {
                let _ = reply.send(answer);
            }
            Event::Passivated(shard, key) => self.on_passivated(shard, key, ctx),
            Event::Flushed(shard, node, end) => {
                if end == FlushEnd::GivenUp {
                    self.counts.flushes_given_up += 1;
                    tracing::warn!(target: "troubadour::cluster", shard = shard.get(), node = %node, "the old path's flush was not answered in time: held messages go on (their order may break)");
                }
                if end != FlushEnd::Answered {
                    self.forget_ended_path(&node);
                }
                self.on_flushed(shard, ctx)
            }
            Event::Left(result) => {
                // Read the store on: what waits here goes to the new owners.
                self.renew(ctx);
                if result.is_ok() {
                    self.left = true;
                    self.setup.lease.lost();
                    self.depart(ctx);
                } else {
                    // Try again at the next leave; keep the lease meanwhile.
                    self.close_shortcuts();
                    self.leaving = false;
                    for reply in std::mem::take(&mut self.leave_waiters) {
                        let _ = reply.send(result.clone());
                    }
                }
            }
        }
    }
}

impl Actor for Region {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.renew(ctx);
        ctx.send_interval(self.setup.lease.renew_every(), Tick);
        ctx.send_interval(self.setup.lease.renew_every() / 3, Refresh);
        if let Some(idle) = self.setup.passivate_after {
            // An idle entity is passivated between `idle` and 1.25 × `idle`
            // after its last message.
            ctx.send_interval((idle / 4).max(Duration::from_millis(100)), Sweep);
        }
    }
}

impl Handler<Sweep> for Region {
    fn handle(&mut self, _: Sweep, ctx: &mut Context<Self>) {
        if let Some(idle) = self.setup.passivate_after {
            self.passivate_idle(idle, ctx);
        }
    }
}

impl Handler<LeaveCluster> for Region {
    fn handle(&mut self, _: LeaveCluster, ctx: &mut Context<Self>) -> Result<(), LeaseError> {
        if self.left {
            return Ok(());
        }
        if let Some(reply) = ctx.defer_reply::<LeaveCluster>() {
            self.leave_waiters.push(reply);
        }
        if !self.leaving {
            self.leaving = true;
            self.close_shortcuts();
            self.leave(ctx);
        }
        Ok(())
    }
}

impl Handler<Status> for Region {
    fn handle(&mut self, _: Status, ctx: &mut Context<Self>) -> RegionStatus {
        self.status(ctx)
    }
}

impl Handler<Tick> for Region {
    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        self.check_lease(ctx);
        self.renew(ctx);
    }
}

impl Handler<LeaseEnds> for Region {
    fn handle(&mut self, _: LeaseEnds, ctx: &mut Context<Self>) {
        self.check_lease(ctx);
    }
}

impl Handler<Refresh> for Region {
    fn handle(&mut self, _: Refresh, ctx: &mut Context<Self>) {
        self.read_view(ctx);
    }
}

impl Handler<Recheck> for Region {
    fn handle(&mut self, _: Recheck, ctx: &mut Context<Self>) {
        self.recheck_armed = false;
        if !self.waiting.is_empty() {
            self.renew(ctx);
        }
    }
}

impl Handler<Poll> for Region {
    fn handle(&mut self, Poll(key): Poll, ctx: &mut Context<Self>) {
        if let Some(event) = self.tasks.poll(&ctx.myself(), key) {
            self.on_event(event, ctx);
        }
    }
}

/// An entity message from this node's own code (`EntityRef`), counted in
/// its shard's route until routed here.
pub(crate) struct LocalRouted {
    pub routed: Routed,
    pub shard: ShardId,
}
impl Message for LocalRouted {
    type Reply = Answer;
}

impl Handler<LocalRouted> for Region {
    fn handle(
        &mut self,
        LocalRouted { routed, shard }: LocalRouted,
        ctx: &mut Context<Self>,
    ) -> Answer {
        self.setup.routes.routed_one(shard);
        let reply = ctx.defer_reply::<LocalRouted>();
        let now = ctx.now();
        self.check_lease_at(now);
        self.route_at(
            Pending {
                routed,
                reply,
                local: true,
            },
            now,
            ctx,
        );
        self.open_shortcut(shard);
        // Never sent (the reply was deferred): a variant that allocates
        // nothing.
        Answer(Err(WireAskError::NoReply))
    }
}

/// Stop waiting for members that did not answer a departure.
struct GiveUpDeparture;
impl Message for GiveUpDeparture {
    type Reply = ();
}

impl Handler<GiveUpDeparture> for Region {
    fn handle(&mut self, _: GiveUpDeparture, ctx: &mut Context<Self>) {
        if let Some(d) = self.departure.as_mut() {
            d.gave_up = true;
            self.check_departure(ctx);
        }
    }
}

impl Handler<Routed> for Region {
    fn handle(&mut self, routed: Routed, ctx: &mut Context<Self>) -> Answer {
        if std::ptr::eq(routed.codec, self.departing) {
            if let Ok(d) = routed.body.downcast::<Departing>() {
                self.on_departing(*d, ctx);
            }
            return Answer(Err(WireAskError::NoReply));
        }
        if std::ptr::eq(routed.codec, self.departed) {
            if let Ok(d) = routed.body.downcast::<Departed>() {
                self.on_departed(&NodeKey::new(d.name, d.incarnation), ctx);
            }
            return Answer(Err(WireAskError::NoReply));
        }
        let reply = ctx.defer_reply::<Routed>();
        let now = ctx.now();
        self.check_lease_at(now);
        self.route_at(
            Pending {
                routed,
                reply,
                local: false,
            },
            now,
            ctx,
        );
        // The reply, if this was an ask, went with the deferred reply.
        // Never sent (the reply was deferred): a variant that allocates
        // nothing.
        Answer(Err(WireAskError::NoReply))
    }
}

impl Handler<MemberEvent> for Region {
    fn handle(&mut self, event: MemberEvent, ctx: &mut Context<Self>) {
        self.close_shortcuts();
        match event {
            MemberEvent::Up(node) => {
                let key = NodeKey::new(node.name(), node.incarnation());
                self.members.insert(key, node);
            }
            MemberEvent::Down(node) => {
                let key = NodeKey::new(node.name(), node.incarnation());
                self.members.remove(&key);
                self.on_departed(&key, ctx);
                // A node that left gracefully still answers the flush of
                // what was sent to it, so its region stays. One that went
                // down without leaving has stopped its shards (they move
                // only once its lease has run out): nothing sent down its
                // path will be handled there any more, so its path is
                // forgotten and the moved shards' messages go straight to
                // their new owners, not after a flush that cannot answer.
                let left_gracefully = self.leaving_nodes.remove(&key);
                match self.peers.get(&key) {
                    Some(Peer::Resolving(_)) => {
                        if let Some(Peer::Resolving(queue)) = self.peers.remove(&key) {
                            // Never sent, so never handled: they wait for
                            // their shards' next owners (claimed once the
                            // lost node's lease has run out) rather than
                            // fail, as what is sent after them does.
                            self.wait_again(queue, ctx);
                        }
                    }
                    Some(_) if !left_gracefully => {
                        self.peers.remove(&key);
                    }
                    _ => {}
                }
            }
        }
        if let Some(placement) = &self.setup.best_effort {
            placement.set_members(self.members.keys());
        }
        // A change of members changes placement: read the store now.
        self.renew(ctx);
    }
}

impl RemoteActor for Region {
    const NAME: &'static str = "troubadour.cluster.Region";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Routed>();
    }
}
