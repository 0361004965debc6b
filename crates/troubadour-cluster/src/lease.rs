//! The lease store: the one authority on who owns which shard.
//!
//! Membership (gossip, failure detection) is fast but can be wrong: a
//! partitioned or paused node looks dead to the others while it still
//! runs. Systems that let membership decide ownership have shipped double
//! activations. Here it never does. A store every node reaches decides,
//! with two rules it applies atomically:
//!
//! * **Node leases.** A node holds a lease it renews every third of its
//!   time to live. The store times leases on its own clock.
//! * **Fenced claims.** Each shard has an owner and an epoch. A claim
//!   names the epoch the claimant saw and succeeds only if that is still
//!   the epoch, the claimant's own lease is valid, and the current owner
//!   is gone: it has no valid lease, or it released the shard (a
//!   graceful handoff), or there is none. A successful claim makes the
//!   claimant the owner at the next epoch. Two nodes that saw the same
//!   epoch can never both win, and no claim takes a shard from a node
//!   whose lease is valid.
//!
//! The other half of the argument is on the node ([`LocalLease`]): it
//! hosts its shards only while its lease is valid by its *own* monotonic
//! clock, counted from when it *sent* the renewal, less a margin. The
//! store counts the same lease from when it *received* the renewal, which
//! is later, so the node always stops first; the margin covers the two
//! clocks running at slightly different rates. Wall clocks are never read,
//! so a wall clock jumping by minutes changes nothing.
//!
//! The epoch a node owns a shard at also fences what the shard's entities
//! write (persistence refuses a write carrying an older epoch), which is
//! the last guard against a node that was suspended past its lease without
//! its monotonic clock noticing (a paused virtual machine).
//!
//! [`LocalLease`]: crate::LocalLease

use crate::shard::{ShardCount, ShardId};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A node as the store knows it: its name and the incarnation of the
/// process (a restarted process is another incarnation, so another node).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    /// The node's name (its actor system's name).
    pub name: String,
    /// The process's incarnation.
    pub incarnation: u64,
}

impl NodeKey {
    /// The node `name`, incarnation `incarnation`.
    pub fn new(name: impl Into<String>, incarnation: u64) -> NodeKey {
        NodeKey {
            name: name.into(),
            incarnation,
        }
    }
}

impl fmt::Display for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (incarnation {:#x})", self.name, self.incarnation)
    }
}

/// Who owns a shard, at which epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The shard.
    pub shard: ShardId,
    /// Its owner; `None` if it never had one.
    pub owner: Option<NodeKey>,
    /// Grows by one with every successful claim; 0 before the first.
    pub epoch: u64,
    /// The owner let go of it (a handoff or a leave): it may be claimed
    /// although the owner's lease is valid.
    pub released: bool,
}

impl Assignment {
    /// A shard no node ever owned.
    pub fn unowned(shard: ShardId) -> Assignment {
        Assignment {
            shard,
            owner: None,
            epoch: 0,
            released: false,
        }
    }
}

/// A node's lease as the store saw it when it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The node.
    pub node: NodeKey,
    /// How long the lease had left by the store's clock (zero: expired).
    pub remaining: Duration,
}

/// Everything a node needs to plan: the leases and the assignments, read
/// at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreView {
    /// The cluster's shard count, as fixed by the first node.
    pub shards: ShardCount,
    /// Every lease not yet forgotten, valid or expired.
    pub leases: Vec<LeaseInfo>,
    /// One per shard, in shard order.
    pub assignments: Vec<Assignment>,
}

impl StoreView {
    /// Whether `node` held a valid lease when the view was read.
    pub fn is_leased(&self, node: &NodeKey) -> bool {
        self.leases
            .iter()
            .any(|l| &l.node == node && !l.remaining.is_zero())
    }
}

/// What a store operation returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LeaseError>> + Send + 'a>>;

/// A lease store: the authority on node leases and shard ownership. See
/// the [module docs](self) for the rules every implementation must apply,
/// each operation atomically.
///
/// Implementations: [`MemoryLeaseStore`](crate::MemoryLeaseStore) (one
/// process, tests and simulations); `PostgresLeaseStore` (feature
/// `postgres`, across machines); `SqliteLeaseStore` (feature `sqlite`,
/// node processes on one machine).
pub trait LeaseStore: Send + Sync + 'static {
    /// Joins the cluster's store: the first node fixes the shard count,
    /// later ones must bring the same ([`LeaseError::ShardCountMismatch`]).
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()>;

    /// Grants `node` a lease of `ttl` from the store's now, or extends its
    /// lease to that. A node whose lease expired gets a new one: the shards
    /// it owned stay its only as long as no other node claimed them.
    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()>;

    /// Ends `node`'s lease and releases every shard it owns (a graceful
    /// leave, after the node stopped its entities).
    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()>;

    /// The leases and every shard's assignment.
    fn view(&self) -> StoreFuture<'_, StoreView>;

    /// Makes `by` the owner of `shard` at `seen_epoch + 1`, if the epoch is
    /// still `seen_epoch`, `by` holds a valid lease, and the owner is gone
    /// or released the shard (or is `by` itself).
    fn claim(&self, shard: ShardId, by: &NodeKey, seen_epoch: u64) -> StoreFuture<'_, Assignment>;

    /// Lets go of `shard`, which `by` owns at `epoch`: another node may
    /// claim it from now on. `by` must have stopped the shard's entities.
    fn release(&self, shard: ShardId, by: &NodeKey, epoch: u64) -> StoreFuture<'_, Assignment>;
}

/// Why a lease store refused or failed an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// The store could not be reached or failed. A node that cannot renew
    /// stops its shards when its lease runs out; retry, and check the
    /// store's health.
    Unavailable(String),
    /// The store's cluster has another shard count. Every node of a cluster
    /// must be configured with the same count (it cannot change while the
    /// cluster has data), or join another cluster's store.
    ShardCountMismatch {
        /// The count the cluster was created with.
        cluster: ShardCount,
        /// This node's.
        ours: ShardCount,
    },
    /// The shard is past the cluster's count.
    NoSuchShard(ShardId),
    /// The node has no valid lease: renew before claiming.
    NotLeased(NodeKey),
    /// The claim or release lost: the shard is at another epoch or owned by
    /// another node whose lease is valid. Read the view again and replan.
    Conflict(Assignment),
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Unavailable(why) => write!(
                f,
                "the lease store is unavailable ({why}): this node stops its shards when its lease runs out; check the store"
            ),
            LeaseError::ShardCountMismatch { cluster, ours } => write!(
                f,
                "the cluster has {cluster} and this node is configured with {ours}: give every node the cluster's count"
            ),
            LeaseError::NoSuchShard(shard) => {
                write!(f, "{shard} is past the cluster's shard count")
            }
            LeaseError::NotLeased(node) => write!(
                f,
                "node {node} holds no valid lease: renew it before claiming shards"
            ),
            LeaseError::Conflict(now) => match &now.owner {
                Some(owner) => write!(
                    f,
                    "{} is at epoch {} owned by {owner}{}: read the store again and replan",
                    now.shard,
                    now.epoch,
                    if now.released { " (released)" } else { "" }
                ),
                None => write!(
                    f,
                    "{} is at epoch {} with no owner: read the store again and replan",
                    now.shard, now.epoch
                ),
            },
        }
    }
}

impl std::error::Error for LeaseError {}
