//! The cluster as a user holds it: [`Cluster::builder`] to start a node's
//! part (membership, the region, the kinds it can host), and
//! [`Cluster::entity`] for a reference to a virtual actor, usable at once
//! from any node.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::{Ask, AskError, Deadline, EntityId, Handles, SystemHandle};
use troubadour_remote::{Remote, RemoteBuilder, RemoteError, RemoteMessage};

use crate::best_effort::BestEffortPlacement;
use crate::discovery::{Discoverer, Discovery};
use crate::entity::{codec_of, Answer, AnyEntity, Entity, EntityMessages, Routed};
use crate::groups::{register_group_message, Group, GroupUpdate, Groups, GROUPS};
use crate::lease::{LeaseError, LeaseStore};
use crate::local_lease::{LeaseConfigError, LocalLease};
use crate::membership::{Membership, MembershipConfig, MembershipError};
use crate::region::{
    singleton_id, BeforeHandoff, HostedShard, Hosting, Kind, LeaveCluster, Region, RegionSetup,
    Status, REGION,
};
use crate::routes::ShardRoutes;
use crate::shard::ShardCount;

/// How long `Cluster::leave` waits for the region to finish it.
const LEAVE_LIMIT: Duration = Duration::from_secs(120);

/// How often a node alone asks its discovery again, by default.
const DISCOVERY_EVERY: Duration = Duration::from_secs(5);

/// Registers what the cluster sends between nodes with the remote layer,
/// and leaves the verdict on who is up to membership (a node is declared
/// down by the remote layer only when it restarted, so one cut off by a
/// partition of any length comes back once the network heals): call it on
/// the [`RemoteBuilder`] of every node of a cluster.
///
/// ```no_run
/// # use troubadour_remote::{Remote, Security};
/// # fn tls() -> troubadour_remote::TlsConfig { unimplemented!() }
/// let builder = troubadour_cluster::with_cluster(Remote::builder("prod", Security::Tls(tls())));
/// ```
pub fn with_cluster(builder: RemoteBuilder) -> RemoteBuilder {
    builder
        // Membership decides who is up; a node cut off for longer than
        // the remote layer's patience must still come back once healed.
        .node_down_only_when_replaced()
        .register::<Routed>()
        .actor::<Region>()
        .register::<GroupUpdate>()
        .actor::<Groups>()
}

/// Starts a node's part of a cluster. See [`Cluster::builder`].
pub struct ClusterBuilder {
    store: Arc<dyn LeaseStore>,
    shards: ShardCount,
    lease_ttl: Duration,
    lease_margin: Duration,
    rebalance_limit: usize,
    buffer_limit: usize,
    passivate_after: Option<Duration>,
    max_active: Option<usize>,
    membership: MembershipConfig,
    discovery: Option<(Arc<dyn Discovery>, Duration)>,
    kinds: BTreeMap<&'static str, Kind>,
    before_handoff: Option<BeforeHandoff>,
    best_effort: Option<Arc<BestEffortPlacement>>,
    errors: Vec<String>,
    /// Each group message type, with the check that the node's remote
    /// layer can send it.
    group_messages: Vec<(&'static str, SendableBy)>,
}

impl ClusterBuilder {
    /// The cluster's shard count (default 1024; the same on every node).
    pub fn shards(mut self, shards: ShardCount) -> Self {
        self.shards = shards;
        self
    }

    /// The node lease's time to live and the margin the node gives up at
    /// its end (default 10 s and 1 s): a failed node's shards move within
    /// about the time to live.
    pub fn lease(mut self, ttl: Duration, margin: Duration) -> Self {
        self.lease_ttl = ttl;
        self.lease_margin = margin;
        self
    }

    /// At most this many shards with active entities move away from a
    /// live node per tick when membership changes (default 16); shards
    /// with none, and shards of a lost node, move at once.
    pub fn rebalance_limit(mut self, k: usize) -> Self {
        self.rebalance_limit = k.max(1);
        self
    }

    /// How many messages may wait, on this node, for shards with no owner
    /// yet (default 100,000); past it, sends are refused and asks end with
    /// an error.
    pub fn buffer_limit(mut self, n: usize) -> Self {
        self.buffer_limit = n;
        self
    }

    /// Stops an entity sent nothing for `idle` (default 2 minutes; `None`:
    /// never). It finishes what it was sent first; what arrives while it
    /// stops waits and makes its next activation, so nothing sent to it is
    /// lost. Save what must outlive it in its `stopped` hook.
    pub fn passivate_after(mut self, idle: Option<Duration>) -> Self {
        self.passivate_after = idle;
        self
    }

    /// At most `n` entities active on this node (default: no limit): a new
    /// activation past it first passivates the entity sent nothing for
    /// longest, as an idle one is (what arrives for it meanwhile goes to its
    /// next activation).
    pub fn max_active_entities(mut self, n: Option<usize>) -> Self {
        self.max_active = n.map(|n| n.max(1));
        self
    }

    /// Lets this node's actors join groups whose members take `M`, and
    /// decode the other nodes' members of them (see [`Cluster::group`]).
    /// Register every group message type on every node, here and on the
    /// node's `RemoteBuilder` (`register::<M>()`): members travel as
    /// `Recipient<M>`s, which the remote layer sends only for registered
    /// messages; [`start`](Self::start) fails with
    /// [`ClusterError::GroupMessage`] when the remote layer lacks one.
    pub fn group<M: RemoteMessage>(mut self) -> Self {
        if let Err(e) = register_group_message::<M>() {
            self.errors.push(e);
        }
        self.group_messages
            .push((M::NAME, |remote: &Remote| remote.is_registered::<M>()));
        self
    }

    /// Work to finish after a handoff's entities have stopped and before
    /// their shards go to another node (a rebalance, a graceful leave):
    /// typically a write-behind flush, so that the next owner reads the
    /// states the stopped entities left (troubadour-persistence's
    /// `WriteBehind::flush`). A failover after a crash has no handoff: what
    /// was not flushed is lost within the write-behind's bound.
    ///
    /// ```ignore
    /// builder.before_handoff(move || {
    ///     let behind = behind.clone();
    ///     Box::pin(async move { let _ = behind.flush().await; })
    /// })
    /// ```
    pub fn before_handoff(
        mut self,
        work: impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.before_handoff = Some(Arc::new(work));
        self
    }

    /// Failure detection's timing (default: LAN settings).
    pub fn membership(mut self, config: MembershipConfig) -> Self {
        self.membership = config;
        self
    }

    /// Lets this node host entities of kind `A`, made by `factory` from
    /// their id on their first message. Register every kind on every node
    /// (a shard of any kind can land anywhere).
    ///
    /// An entity that fails (a handler panics or calls `ctx.fail`, its
    /// activation returns an error) stops; it is not restarted in place.
    /// Asks waiting in its mailbox end with an error, and its next message
    /// activates it afresh from `factory` (and its store). However many
    /// entities fail, their region keeps serving the others.
    ///
    /// Each activation carries the entity's identity (its kind and id,
    /// [`Context::entity`](troubadour::Context::entity)), which per-entity
    /// services key its state by: an entity sets its own durable
    /// reminders with troubadour-persistence's `ctx.remind(..)`.
    pub fn entity<A: Entity>(self, factory: impl Fn(&str) -> A + Send + Sync + 'static) -> Self {
        self.kind::<A>(move |id, _| factory(id), false)
    }

    /// As [`entity`](ClusterBuilder::entity), with the factory told where
    /// the entity is activated: its shard and the epoch at which this node
    /// owns it. A persistent entity writes with that epoch, so that once
    /// its shard has moved, the store refuses what a stale owner (a paused
    /// or cut-off node that has not noticed yet) still tries to write:
    ///
    /// ```ignore
    /// builder.entity_in_shard::<Account>(move |id, at| Account {
    ///     balance: Persistent::new(&persistence, id, Balance::default()).epoch(at.epoch),
    /// })
    /// ```
    pub fn entity_in_shard<A: Entity>(
        self,
        factory: impl Fn(&str, HostedShard) -> A + Send + Sync + 'static,
    ) -> Self {
        self.kind::<A>(factory, false)
    }

    /// Lets this node run kind `A`'s cluster singleton: one actor of the
    /// kind in the whole cluster, on the node that owns its shard, started
    /// as soon as that node hosts the shard (no message needed), never
    /// passivated, started again on another node when its node leaves or
    /// dies (after the lease, as any shard), and when it stops by itself.
    /// Its mailbox keeps what is sent during a move, as an entity's does.
    /// Register it on every node (any node may have to run it); reach it
    /// with [`Cluster::singleton`].
    pub fn singleton<A: Entity>(self, factory: impl Fn() -> A + Send + Sync + 'static) -> Self {
        self.kind::<A>(move |_, _| factory(), true)
    }

    fn kind<A: Entity>(
        mut self,
        factory: impl Fn(&str, HostedShard) -> A + Send + Sync + 'static,
        singleton: bool,
    ) -> Self {
        let messages = EntityMessages::<A>::collect();
        self.errors.extend(messages.errors);
        crate::entity::register_kind(A::KIND);
        let factory = Arc::new(factory);
        let make = Arc::new(
            move |ctx: &mut Context<Region>, id: &str, at: HostedShard, lease: &Arc<Deadline>| {
                // Temporary, as Akka's sharding does it: an entity that fails
                // (a panic, `ctx.fail`, a failed activation) stops alone,
                // and the next message activates it afresh. Restarted under
                // its region, a failing activation would loop, and enough
                // failures among thousands of entities would exceed the
                // region's intensity and take every entity of the node down.
                // Its identity: what it reads with `ctx.entity()` and what
                // per-entity state (durable reminders) is keyed by.
                let (factory, id) = (factory.clone(), id.to_string());
                ctx.spawn_factory_with_options(
                    SpawnOptions::new()
                        .restart(Restart::Temporary)
                        .deadline(lease.clone())
                        .entity(EntityId::new(A::KIND, id.clone())),
                    move || factory(&id, at),
                )
                .map(|r| Box::new(r) as AnyEntity)
                .map_err(|e| e.to_string())
            },
        );
        if self
            .kinds
            .insert(
                A::KIND,
                Kind {
                    make,
                    deliver: messages.deliver,
                    singleton,
                },
            )
            .is_some()
        {
            self.errors
                .push(format!("the entity kind {:?} is registered twice", A::KIND));
        }
        self
    }

    /// Finds nodes to join through with `discovery`
    /// ([`StaticSeeds`](crate::discovery::StaticSeeds), `DnsSeeds` with
    /// feature `dns`, `KubernetesSeeds` with feature `kubernetes`, or your
    /// own): at start, and again every 5 s (see
    /// [`discovery_every`](Self::discovery_every)) for as long as this node
    /// sees no other member. Without it, call [`Membership::join`] or
    /// [`Membership::join_addresses`] yourself.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// use troubadour_cluster::{discovery::StaticSeeds, Cluster, MemoryLeaseStore};
    /// let seeds = StaticSeeds::new(["10.0.0.1:7100".parse().unwrap(), "10.0.0.2:7100".parse().unwrap()]);
    /// let builder = Cluster::builder(Arc::new(MemoryLeaseStore::new())).discovery(seeds);
    /// ```
    pub fn discovery(mut self, discovery: impl Discovery) -> Self {
        let every = self.discovery.take().map_or(DISCOVERY_EVERY, |(_, e)| e);
        self.discovery = Some((Arc::new(discovery), every));
        self
    }

    /// How often a node that sees no other member asks its
    /// [`discovery`](Self::discovery) again (default 5 s).
    pub fn discovery_every(mut self, every: Duration) -> Self {
        if let Some((_, e)) = self.discovery.as_mut() {
            *e = every;
        } else {
            self.errors.push(
                "discovery_every is set before any discovery: call discovery(..) first".into(),
            );
        }
        self
    }

    /// Starts membership and the region on `system`, exposed on `remote`
    /// (built with [`with_cluster`]), and joins the lease store. The node
    /// is alone until [`Membership::join`] (through
    /// [`Cluster::membership`]). The future borrows nothing: what needs
    /// `system` and `remote` is done before it is returned.
    pub fn start(
        self,
        system: &SystemHandle,
        remote: &Remote,
    ) -> impl Future<Output = Result<Cluster, ClusterError>> + Send + 'static {
        let started = self.start_now(system, remote);
        async move {
            let (cluster, store, shards) = started?;
            if let Err(e) = store.join(shards).await {
                cluster.inner.region.stop();
                cluster.inner.membership.leave();
                return Err(ClusterError::Store(e));
            }
            Ok(cluster)
        }
    }

    #[allow(clippy::type_complexity)]
    fn start_now(
        self,
        system: &SystemHandle,
        remote: &Remote,
    ) -> Result<(Cluster, Arc<dyn LeaseStore>, ShardCount), ClusterError> {
        if let Some(e) = self.errors.into_iter().next() {
            return Err(ClusterError::Entity(e));
        }
        if let Some((name, _)) = self.group_messages.iter().find(|(_, ok)| !ok(remote)) {
            return Err(ClusterError::GroupMessage(name));
        }
        let lease =
            LocalLease::new(self.lease_ttl, self.lease_margin).map_err(ClusterError::Lease)?;
        let membership =
            Membership::start(system, remote, self.membership).map_err(ClusterError::Membership)?;
        let me = system.node();
        let hosting = Hosting::default();
        let routes = Arc::new(ShardRoutes::new(self.shards));
        let region = system
            .spawn(Region::new(RegionSetup {
                me,
                shards: self.shards,
                lease,
                rebalance_limit: self.rebalance_limit,
                buffer_limit: self.buffer_limit,
                passivate_after: self.passivate_after,
                max_active: self.max_active,
                store: self.store.clone(),
                kinds: self.kinds,
                lookup: remote.node_lookup(),
                hosting: hosting.clone(),
                before_handoff: self.before_handoff,
                best_effort: self.best_effort,
                routes: routes.clone(),
            }))
            .map_err(|e| ClusterError::Spawn(e.to_string()))?;
        remote
            .expose(REGION, &region)
            .map_err(ClusterError::Remote)?;
        membership.subscribe(region.recipient());
        let groups = system
            .spawn(Groups::new(system.node(), remote.node_lookup()))
            .map_err(|e| ClusterError::Spawn(e.to_string()))?;
        remote
            .expose(GROUPS, &groups)
            .map_err(ClusterError::Remote)?;
        membership.subscribe(groups.recipient());
        if let Some((discovery, every)) = self.discovery {
            system
                .spawn(Discoverer {
                    discovery,
                    membership: membership.clone(),
                    lookup: remote.node_lookup(),
                    every,
                })
                .map_err(|e| ClusterError::Spawn(e.to_string()))?;
        }
        let cluster = Cluster {
            inner: Arc::new(Inner {
                region,
                routes,
                hosting,
                groups,
                membership,
                shards: self.shards,
                incarnation: system.node().incarnation(),
            }),
        };
        Ok((cluster, self.store, self.shards))
    }
}

/// Whether a node's remote layer can send a group message type.
type SendableBy = fn(&Remote) -> bool;

/// Why a node could not start its part of the cluster.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClusterError {
    /// The lease store refused the node (another shard count) or could not
    /// be reached.
    Store(LeaseError),
    /// The lease settings are impossible.
    Lease(LeaseConfigError),
    /// Membership could not start.
    Membership(MembershipError),
    /// An entity kind is registered wrongly (twice, or two message types
    /// share a name).
    Entity(String),
    /// The region could not be exposed: build the node's `Remote` with
    /// [`with_cluster`].
    Remote(RemoteError),
    /// The region could not be spawned (the system is shutting down).
    Spawn(String),
    /// A group message type (named) is not registered with the node's
    /// remote layer, so no member could reach another node.
    GroupMessage(&'static str),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Store(e) => write!(f, "the cluster's lease store refused this node: {e}"),
            ClusterError::Lease(e) => write!(f, "{e}"),
            ClusterError::Membership(e) => write!(f, "{e}"),
            ClusterError::Entity(e) => write!(f, "{e}"),
            ClusterError::Remote(e) => write!(
                f,
                "the cluster's region could not be exposed ({e}): build the node's Remote with troubadour_cluster::with_cluster"
            ),
            ClusterError::Spawn(e) => write!(f, "the cluster's region could not start: {e}"),
            ClusterError::GroupMessage(name) => write!(
                f,
                "the group message {name:?} is not registered with this node's remote layer, \
                 so its group members could not be sent to other nodes: add \
                 .register::<M>() for it to the node's RemoteBuilder"
            ),
        }
    }
}

impl std::error::Error for ClusterError {}

struct Inner {
    region: ActorRef<Region>,
    routes: Arc<ShardRoutes>,
    hosting: Hosting,
    membership: Membership,
    shards: ShardCount,
    groups: ActorRef<Groups>,
    /// This node's incarnation, which its messages carry (`Routed::from`).
    incarnation: u64,
}

/// A node's part of a cluster. See the [crate docs](crate).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl Cluster {
    /// Starts building a node's part of the cluster whose ownership
    /// `store` decides.
    pub fn builder(store: Arc<dyn LeaseStore>) -> ClusterBuilder {
        ClusterBuilder {
            store,
            shards: ShardCount::DEFAULT,
            lease_ttl: Duration::from_secs(10),
            lease_margin: Duration::from_secs(1),
            rebalance_limit: 16,
            buffer_limit: 100_000,
            passivate_after: Some(Duration::from_secs(120)),
            max_active: None,
            membership: MembershipConfig::default(),
            discovery: None,
            kinds: BTreeMap::new(),
            before_handoff: None,
            best_effort: None,
            errors: Vec::new(),
            group_messages: Vec::new(),
        }
    }

    /// Starts building a node's part of a cluster in **best-effort mode**:
    /// no lease store; each node places shards by rendezvous hashing over
    /// the members it sees up, and hosts what it places on itself.
    ///
    /// A failover takes as long as membership takes to declare a node down
    /// (no lease to wait out), and there is nothing to run beside the
    /// nodes. The price: while nodes see different members (a join or a
    /// loss not yet known everywhere, a partition), an entity can be
    /// active on two nodes at once, and epochs are always 0, so
    /// persistence does not fence one activation against the other. For
    /// stateless kinds; anything whose activations must never overlap
    /// needs [`Cluster::builder`] with a lease store. Every node must be
    /// configured with the same shard count (no store checks it here).
    pub fn best_effort() -> ClusterBuilder {
        let placement = Arc::new(BestEffortPlacement::new());
        let mut builder = Cluster::builder(placement.clone());
        builder.best_effort = Some(placement);
        builder
    }

    /// The entity of kind `A` named `id`, wherever in the cluster it lives
    /// or will: usable at once, before, during and after its activation.
    pub fn entity<A: Entity>(&self, id: impl Into<String>) -> EntityRef<A> {
        EntityRef {
            cluster: self.clone(),
            id: id.into().into(),
            _kind: PhantomData,
        }
    }

    /// The cluster-wide group `name` of actors that take `M`, like a
    /// process group of Erlang's `pg`: an actor of this node joins it here,
    /// every node learns of it, and [`Group::broadcast`] reaches every
    /// member wherever it runs. Members leave when they ask, when they
    /// stop, or when their node goes down. Register `M` on every node with
    /// [`ClusterBuilder::group`] and on its `RemoteBuilder`.
    ///
    /// ```no_run
    /// # use serde::{Deserialize, Serialize};
    /// # use troubadour::prelude::*;
    /// # use troubadour_remote::RemoteMessage;
    /// #[derive(Clone, Serialize, Deserialize)]
    /// struct Said(String);
    /// impl Message for Said { type Reply = (); }
    /// impl RemoteMessage for Said { const NAME: &'static str = "chat.Said"; }
    ///
    /// struct Listener;
    /// impl Actor for Listener {}
    /// impl Handler<Said> for Listener {
    ///     fn handle(&mut self, Said(text): Said, _: &mut Context<Self>) { println!("{text}"); }
    /// }
    ///
    /// # fn run(system: &ActorSystem, cluster: &troubadour_cluster::Cluster) -> Result<(), Box<dyn std::error::Error>> {
    /// let room = cluster.group::<Said>("room-42");
    /// room.join(&system.spawn(Listener)?)?;
    /// room.broadcast(Said("hello, everyone".into()))?;
    /// # Ok(()) }
    /// ```
    pub fn group<M: RemoteMessage>(&self, name: impl Into<String>) -> Group<M> {
        Group::new(
            name.into(),
            self.inner.groups.clone(),
            self.inner.groups.id().node(),
        )
    }

    /// Kind `A`'s cluster singleton (see [`ClusterBuilder::singleton`]),
    /// wherever it runs now or will: an [`EntityRef`], usable at once.
    pub fn singleton<A: Entity>(&self) -> EntityRef<A> {
        self.entity::<A>(singleton_id(A::KIND))
    }

    /// This node's membership.
    pub fn membership(&self) -> &Membership {
        &self.inner.membership
    }

    /// The cluster's shard count.
    pub fn shards(&self) -> ShardCount {
        self.inner.shards
    }

    /// Whether this node hosts entity `id`'s shard now, and at which
    /// epoch: a local read of what the node's region last decided, no
    /// store call. For work only the owner should do, such as firing a
    /// durable reminder (troubadour-persistence's `Reminders::owned_by`);
    /// a decision that must hold against a stale owner still needs a
    /// fenced write, since ownership can move the moment after this reads.
    pub fn hosts(&self, id: &str) -> Option<HostedShard> {
        self.inner.hosting.get(self.inner.shards.shard_of(id))
    }

    /// Leaves the cluster gracefully: every shard's entities finish what
    /// they were sent and stop, the store releases the node's shards and
    /// lease (other nodes claim them at once, with no lease to wait out),
    /// and membership tells the others. Messages for those shards that
    /// reach this node meanwhile go on to their new owners. It returns once
    /// every member has said it sends this node nothing more (or is down,
    /// or silent for 10 s) and what this node forwarded has arrived: the
    /// process may end then.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        // The leave bounds itself (entities stop, the store lets go, members
        // answer within DEPARTURE_LIMIT); under load the region's mailbox
        // may hold seconds of messages ahead of it.
        let left = self
            .inner
            .region
            .ask(LeaveCluster)
            .timeout(LEAVE_LIMIT)
            .await
            .map_err(|e| {
                ClusterError::Spawn(format!("the region did not finish the leave: {e}"))
            })?;
        left.map_err(ClusterError::Store)?;
        self.inner.membership.leave();
        Ok(())
    }

    /// What this node's part of the cluster is doing: for operators and
    /// dashboards (serializes to JSON with serde).
    pub async fn status(&self) -> Result<ClusterStatus, AskError> {
        let s = self.inner.region.ask(Status).await?;
        Ok(ClusterStatus {
            node: s.node.name.clone(),
            incarnation: s.node.incarnation,
            lease_valid: s.lease_valid,
            lease_left_ms: s.lease_left.map(|d| d.as_millis() as u64),
            leaving: s.leaving,
            members: self
                .inner
                .membership
                .members()
                .iter()
                .map(|m| m.name().to_string())
                .collect(),
            members_with_lease: s.members.iter().map(|m| m.name.clone()).collect(),
            shards: s
                .shards
                .iter()
                .map(|(shard, epoch)| ShardStatus {
                    shard: shard.get(),
                    epoch: *epoch,
                })
                .collect(),
            entities: s.entities,
            waiting: s.waiting,
            balanced: s.balanced,
            shards_awaited: s.awaited,
            failovers: s.failovers,
            activations: s.counts.activations,
            passivations: s.counts.passivations,
            flushes_given_up: s.counts.flushes_given_up,
            lease_renewals: s.counts.renewals,
            lease_renewal_failures: s.counts.renewal_failures,
            lease_renewal_micros_total: s.counts.renewal_micros_total,
            last_lease_renewal_micros: s.counts.last_renewal_micros,
            owners: s
                .owners
                .into_iter()
                .map(|(node, shards, leased)| OwnerStatus {
                    node: node.name,
                    incarnation: node.incarnation,
                    shards,
                    lease_valid: leased,
                })
                .collect(),
        })
    }
}

/// A node's part of the cluster, now. See [`Cluster::status`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClusterStatus {
    /// This node's name.
    pub node: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Whether its lease is valid by its own clock (it hosts shards only
    /// then).
    pub lease_valid: bool,
    /// How long the lease has left, in milliseconds, if it was granted.
    pub lease_left_ms: Option<u64>,
    /// Whether it is leaving the cluster.
    pub leaving: bool,
    /// The members membership sees up, this node among them.
    pub members: Vec<String>,
    /// The other members the region places shards on.
    pub members_with_lease: Vec<String>,
    /// The shards it hosts, with the epoch it owns each at.
    pub shards: Vec<ShardStatus>,
    /// Entities active (or passivating) on it.
    pub entities: usize,
    /// Messages waiting for a shard's owner to be known.
    pub waiting: usize,
    /// Whether the shards this node owns are the ones placement gives it
    /// over the live members (no shard to claim or hand over): a cluster
    /// whose nodes are all balanced has settled.
    pub balanced: bool,
    /// Shards placement gives this node that it does not host yet (being
    /// claimed, or handed over by their owner); `None` until the node has
    /// read the lease store with a valid lease. A node serving its share
    /// has 0: what a readiness probe waits for (`http::router`'s `/ready`).
    pub shards_awaited: Option<usize>,
    /// Shards this node took over from lost nodes (owners that neither
    /// handed them over nor stayed live) since it started: each is a
    /// failover.
    pub failovers: u64,
    /// Entities started here since the node started (a first message, or
    /// one after a passivation or a move).
    pub activations: u64,
    /// Entities stopped here for being idle (or to make room).
    pub passivations: u64,
    /// Moves whose old path this node flushed without an answer within a
    /// second (the region there did not answer, or was itself waiting):
    /// the messages held for the flush then went on, and their order may
    /// have broken. 0 in a healthy cluster.
    pub flushes_given_up: u64,
    /// Lease renewals the store accepted.
    pub lease_renewals: u64,
    /// Lease renewals refused (lease lost) or failed (store unreachable).
    pub lease_renewal_failures: u64,
    /// Time from sending each renewal to its answer (with the store read
    /// that follows it), summed, in microseconds: with `lease_renewals`
    /// and `lease_renewal_failures`, the mean.
    pub lease_renewal_micros_total: u64,
    /// The latest renewal's time, in microseconds.
    pub last_lease_renewal_micros: Option<u64>,
    /// Every node that owns shards, as the lease store said at this
    /// node's latest read (so at most a lease-check interval old): the
    /// cluster's shards per node, seen from any node.
    pub owners: Vec<OwnerStatus>,
}

/// A node that owns shards. See [`ClusterStatus::owners`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OwnerStatus {
    /// The node's name.
    pub node: String,
    /// Its incarnation (a restarted node is a new owner).
    pub incarnation: u64,
    /// Shards it owns.
    pub shards: usize,
    /// Whether its lease was valid at that read: a dead node keeps its
    /// shards until another node claims them.
    pub lease_valid: bool,
}

/// A hosted shard. See [`ClusterStatus`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShardStatus {
    /// The shard's number.
    pub shard: u32,
    /// The epoch this node owns it at.
    pub epoch: u64,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("node", self.inner.membership.myself())
            .field("shards", &self.inner.shards)
            .finish_non_exhaustive()
    }
}

/// A reference to a virtual actor. See [`Cluster::entity`].
pub struct EntityRef<A> {
    cluster: Cluster,
    id: Arc<str>,
    _kind: PhantomData<fn() -> A>,
}

impl<A> Clone for EntityRef<A> {
    fn clone(&self) -> Self {
        EntityRef {
            cluster: self.cluster.clone(),
            id: self.id.clone(),
            _kind: PhantomData,
        }
    }
}

impl<A: Entity> EntityRef<A> {
    /// The entity's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn routed<M: RemoteMessage>(&self, msg: M) -> Result<Routed, M> {
        match codec_of::<M>() {
            Some(codec) => Ok(Routed {
                kind: Cow::Borrowed(A::KIND),
                id: self.id.clone(),
                codec,
                body: Box::new(msg),
                from: self.cluster.inner.incarnation,
            }),
            None => Err(msg),
        }
    }

    /// Sends `msg` to the entity, wherever it lives; at most once, in
    /// order per sender. `Unregistered` if the kind does not list `M` in
    /// [`Entity::messages`].
    pub fn tell<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: RemoteMessage,
        A: Handles<M, K>,
    {
        let routed = self.routed(msg).map_err(SendError::Unregistered)?;
        let inner = &self.cluster.inner;
        inner.routes.tell(routed, &inner.region).map_err(|routed| {
            SendError::Stopped(*routed.body.downcast::<M>().expect("the body sent"))
        })
    }

    /// Asks the entity; the reply comes from wherever it lives. Ends with
    /// the reply or an error, never hangs past its
    /// [`timeout`](EntityAsk::timeout).
    pub fn ask<M, K>(&self, msg: M) -> EntityAsk<M::Reply>
    where
        M: RemoteMessage,
        A: Handles<M, K>,
    {
        match self.routed(msg) {
            Ok(routed) => EntityAsk {
                inner: Some({
                    let inner = &self.cluster.inner;
                    inner.routes.ask(routed, &inner.region)
                }),
                _reply: PhantomData,
            },
            Err(_) => EntityAsk {
                inner: None,
                _reply: PhantomData,
            },
        }
    }
}

impl<A> fmt::Debug for EntityRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntityRef({})", self.id)
    }
}

/// An ask to an entity: a future of its reply. See [`EntityRef::ask`].
pub struct EntityAsk<R> {
    /// `None`: the message is not registered, so it was never sent.
    inner: Option<Ask<Answer>>,
    _reply: PhantomData<fn() -> R>,
}

impl<R: Send + 'static> EntityAsk<R> {
    /// Ends the ask with `Timeout` if no reply comes within `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.inner = self.inner.map(|a| a.timeout(timeout));
        self
    }

    /// Blocks the calling thread until the reply (not in an actor's
    /// handler: await it there).
    pub fn wait(self) -> Result<R, AskError> {
        match self.inner {
            Some(ask) => unpack(ask.wait()),
            None => Err(AskError::Unregistered),
        }
    }
}

fn unpack<R: 'static>(answer: Result<Answer, AskError>) -> Result<R, AskError> {
    match answer?.0 {
        Ok(reply) => reply
            .body
            .downcast::<R>()
            .map(|r| *r)
            .map_err(|_| AskError::Unencodable("the entity answered another type".into())),
        Err(e) => Err(e.into()),
    }
}

impl<R: Send + 'static> Future for EntityAsk<R> {
    type Output = Result<R, AskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.inner.as_mut() {
            None => Poll::Ready(Err(AskError::Unregistered)),
            Some(ask) => Pin::new(ask).poll(cx).map(unpack),
        }
    }
}
