//! The two stores behind persistence: the journal (events) and the
//! snapshot store. Each rule below is applied by every implementation,
//! atomically, so that the actor above can trust what it recovers.
//!
//! # The journal's rules
//!
//! * **Linear and gap-free.** Events of one persistence id are numbered
//!   1, 2, 3, …; an append must start right after the highest stored
//!   number (not after the highest *left*, once old events are deleted),
//!   or it is refused with [`JournalError::SequenceConflict`]. An append of
//!   several events stores all or none.
//! * **Fenced.** Every writer holds an epoch (the cluster's shard epoch,
//!   a constant when not clustered). The journal remembers the highest
//!   epoch each id has seen, from [`fence`](Journal::fence) (a recovery)
//!   and from appends; a write with a lower epoch is refused with
//!   [`JournalError::Fenced`]. So once a new owner has recovered an id, the
//!   old owner cannot add to its history, even if it never learnt that it
//!   lost the shard.
//! * **Durable when answered.** An append's `Ok` means the events survive
//!   a crash of the process (and, for SQLite with its default
//!   `synchronous=FULL`, of the machine).

use crate::error::JournalError;
use crate::event::StoredEvent;
use std::future::Future;
use std::pin::Pin;

/// What a store operation returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, JournalError>> + Send + 'a>>;

/// One stored event of a persistence id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Its place in the id's history, from 1.
    pub sequence: u64,
    /// The epoch of the writer that stored it.
    pub epoch: u64,
    /// The event.
    pub event: StoredEvent,
}

/// Events to append to one persistence id, atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    /// The persistence id.
    pub persistence_id: String,
    /// The writer's epoch.
    pub epoch: u64,
    /// The sequence number of the first event: the highest stored plus one.
    pub first_sequence: u64,
    /// The events, numbered from `first_sequence` on.
    pub events: Vec<StoredEvent>,
}

/// Where a persistence id's history stands, as a recovering writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fenced {
    /// The highest sequence number ever stored (0 for none), deleted events
    /// included.
    pub highest: u64,
    /// The lowest sequence number still stored (`highest + 1` for none):
    /// events below it were deleted after a snapshot.
    pub lowest: u64,
}

/// The event journal. See the [module docs](self) for the rules.
pub trait Journal: Send + Sync + 'static {
    /// Claims `persistence_id` for a writer at `epoch`: from now on writes
    /// with a lower epoch are refused. Refused itself
    /// ([`JournalError::Fenced`]) if a higher epoch has been seen. Returns
    /// where the history stands.
    fn fence(&self, persistence_id: &str, epoch: u64) -> StoreFuture<'_, Fenced>;

    /// Appends events atomically, under the rules in the module docs.
    fn append(&self, append: Append) -> StoreFuture<'_, ()>;

    /// Up to `max` stored events of `persistence_id` with sequence numbers
    /// from `from` on, in order.
    fn replay(
        &self,
        persistence_id: &str,
        from: u64,
        max: usize,
    ) -> StoreFuture<'_, Vec<EventRecord>>;

    /// Deletes the events of `persistence_id` up to and including `to`
    /// (after a snapshot covers them). The highest sequence number stays,
    /// so numbering goes on where it was.
    fn delete_to(&self, persistence_id: &str, to: u64) -> StoreFuture<'_, ()>;
}

/// A snapshot: an actor's state after the event at `sequence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The last event it covers.
    pub sequence: u64,
    /// The state.
    pub state: StoredEvent,
}

/// The snapshot store.
pub trait SnapshotStore: Send + Sync + 'static {
    /// Stores a snapshot of `persistence_id` (replacing one at the same
    /// sequence number).
    fn save(&self, persistence_id: &str, snapshot: SnapshotRecord) -> StoreFuture<'_, ()>;

    /// The snapshot of `persistence_id` with the highest sequence number.
    fn latest(&self, persistence_id: &str) -> StoreFuture<'_, Option<SnapshotRecord>>;

    /// Deletes the snapshots of `persistence_id` with sequence numbers
    /// below `below`.
    fn delete_below(&self, persistence_id: &str, below: u64) -> StoreFuture<'_, ()>;
}

/// The journal's rules for an append, given where the id stands (its
/// highest sequence number and the highest epoch seen): refused with
/// [`JournalError::Fenced`] from an older epoch, with
/// [`JournalError::SequenceConflict`] unless it starts right after the
/// highest. Every store decides with this, before writing anything.
pub fn check_append(append: &Append, highest: u64, epoch: u64) -> Result<(), JournalError> {
    if epoch > append.epoch {
        return Err(JournalError::Fenced {
            persistence_id: append.persistence_id.clone(),
            epoch: append.epoch,
            current: epoch,
        });
    }
    if append.first_sequence != highest + 1 {
        return Err(JournalError::SequenceConflict {
            persistence_id: append.persistence_id.clone(),
            attempted: append.first_sequence,
            highest,
        });
    }
    Ok(())
}
