//! troubadour as a cluster: virtual actors that exist once in the whole
//! cluster, on shards whose ownership a lease store decides.
//!
//! This crate grows in layers; what is here today:
//!
//! * [`shard`]: entity ids to shards, the same on every node
//!   ([`ShardCount::shard_of`]);
//! * [`placement`]: where each shard should live (rendezvous hashing over
//!   the live members) and the rate-limited moves that get it there;
//! * [`lease`]: the [`LeaseStore`] trait, the single authority on
//!   ownership, with its rules (node leases, claims fenced by epoch) and
//!   the argument for why no shard is ever active on two nodes at once;
//!   [`MemoryLeaseStore`] implements it in memory;
//! * [`LocalLease`]: a node's half of that argument, its lease by its own
//!   monotonic clock;
//! * [`membership`]: who is up, from foca (SWIM) over the remote layer's
//!   control lane, driven by an actor on the system's clock;
//! * [`discovery`]: where a starting node finds others to join through (a
//!   static list, DNS, the Kubernetes API, or a source of the user's).
//!
//! Shard regions with virtual actors, handoff, passivation, the
//! PostgreSQL store (feature `postgres`, for clusters across machines) and
//! the SQLite store (feature `sqlite`, for node processes on one machine)
//! build on these; cluster-wide groups ([`Group`], like
//! Erlang's `pg`) use membership alone. For stateless kinds,
//! [`Cluster::best_effort`] runs without a lease store: shards are placed
//! by each node's own view of the members, so a failover is as quick as
//! membership, and an entity can be active twice while views differ.

#![warn(missing_docs)]

mod best_effort;
mod cluster;
pub mod discovery;
mod entity;
mod groups;
#[cfg(feature = "http")]
pub mod http;
pub mod lease;
mod local_lease;
pub mod membership;
mod memory_store;
pub mod placement;
#[cfg(feature = "postgres")]
mod postgres_store;
mod region;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod renewals;
mod routes;
pub mod shard;
#[cfg(feature = "sqlite")]
mod sqlite_store;
mod tasks;

pub use cluster::{
    with_cluster, Cluster, ClusterBuilder, ClusterError, ClusterStatus, EntityAsk, EntityRef,
    OwnerStatus, ShardStatus,
};
pub use entity::{Entity, EntityMessages};
pub use groups::{Group, GroupError};
pub use lease::{Assignment, LeaseError, LeaseInfo, LeaseStore, NodeKey, StoreFuture, StoreView};
pub use local_lease::{LeaseConfigError, LocalLease, Renewal};
pub use membership::{MemberEvent, Membership, MembershipConfig, MembershipError};
pub use memory_store::{MemoryLeaseStore, StoreChange, StoreClock, StoreRecord};
#[cfg(feature = "postgres")]
pub use postgres_store::PostgresLeaseStore;
pub use region::HostedShard;
pub use shard::{ShardCount, ShardId};
#[cfg(feature = "sqlite")]
pub use sqlite_store::SqliteLeaseStore;
