//! Every error a user of persistence can meet, each saying what happened
//! and what to do.

use std::fmt;

/// A stored row that this build cannot turn back into a value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The row's type name or schema version is not one this build knows.
    UnknownVersion {
        /// The stored type name.
        type_name: String,
        /// The stored schema version.
        version: u32,
    },
    /// The row names a codec this build does not have.
    UnknownCodec {
        /// The stored type name.
        type_name: String,
        /// The stored codec.
        codec: String,
    },
    /// The bytes do not decode as the type.
    Malformed {
        /// The stored type name.
        type_name: String,
        /// The stored schema version.
        version: u32,
        /// The codec's complaint.
        reason: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnknownVersion { type_name, version } => write!(
                f,
                "stored `{type_name}` version {version} is not known to this build: \
                 decode it in `Event::upcast` (or deploy the build that wrote it)"
            ),
            DecodeError::UnknownCodec { type_name, codec } => write!(
                f,
                "stored `{type_name}` is in codec `{codec}`, which this build cannot read: \
                 deploy a build that has it"
            ),
            DecodeError::Malformed {
                type_name,
                version,
                reason,
            } => write!(
                f,
                "stored `{type_name}` version {version} does not decode ({reason}): the type \
                 changed without a new version; raise `Event::VERSION` and upcast the old shape"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a journal or snapshot store refused or failed an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalError {
    /// The store could not be reached or failed (I/O, a lost connection, a
    /// closed store). A write that failed this way may or may not have
    /// been stored; the actor stops and recovers the truth when started
    /// again. Check the store's health.
    Unavailable(String),
    /// The disk or database is full. Nothing of the failed write was
    /// stored; free space (or delete events after snapshots) and restart
    /// the actor.
    StorageFull(String),
    /// A newer writer holds this persistence id: another activation (on
    /// another node, with a newer shard epoch) recovered it. This one is
    /// stale and must stop; messages for the id go to the new owner.
    Fenced {
        /// The persistence id.
        persistence_id: String,
        /// The epoch this writer holds.
        epoch: u64,
        /// The newer epoch the store has seen.
        current: u64,
    },
    /// Another activation with the same epoch wrote this sequence number
    /// first: two live actors share one persistence id. The journal stays
    /// linear (the second write is refused); give each live actor its own
    /// id, or let the cluster host the id once.
    SequenceConflict {
        /// The persistence id.
        persistence_id: String,
        /// The sequence number this writer tried.
        attempted: u64,
        /// The highest sequence number stored.
        highest: u64,
    },
    /// The stored history is broken: a gap in the sequence numbers or a
    /// row that cannot be read. Restore the store from a backup; the
    /// actor will not run on a history it cannot trust.
    Corrupt {
        /// The persistence id.
        persistence_id: String,
        /// What is wrong.
        detail: String,
    },
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Unavailable(why) => write!(
                f,
                "the event store is unavailable ({why}): the write may or may not be stored; \
                 the actor stops and recovers when started again; check the store"
            ),
            JournalError::StorageFull(why) => write!(
                f,
                "the event store is full ({why}): nothing of this write was stored; free \
                 space or delete events after snapshots, then restart the actor"
            ),
            JournalError::Fenced {
                persistence_id,
                epoch,
                current,
            } => write!(
                f,
                "`{persistence_id}` was taken over by a newer writer (epoch {current}, this \
                 one holds {epoch}): this activation is stale and stops"
            ),
            JournalError::SequenceConflict {
                persistence_id,
                attempted,
                highest,
            } => write!(
                f,
                "`{persistence_id}` already has event {highest}, so event {attempted} from this \
                 actor is refused: two live actors share the persistence id; give each its \
                 own, or host the id once in the cluster"
            ),
            JournalError::Corrupt {
                persistence_id,
                detail,
            } => write!(
                f,
                "the history of `{persistence_id}` is broken ({detail}): restore the store \
                 from a backup; the actor will not run on it"
            ),
        }
    }
}

impl std::error::Error for JournalError {}

/// Why `persist` did not make an event durable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PersistError {
    /// The event could not be encoded; nothing was written and the actor
    /// goes on (Akka's rejection). Fix the event's serde implementation.
    Encode {
        /// The event's type name.
        type_name: &'static str,
        /// The codec's complaint.
        reason: String,
    },
    /// The store refused or failed the write. The actor fails after this
    /// handler returns (it cannot know its state is the stored one) and
    /// recovers when started again.
    Journal(JournalError),
    /// The actor persisted before it recovered: call
    /// [`Persistent::recover`](crate::Persistent::recover) from
    /// [`Actor::activate`](troubadour::Actor::activate).
    NotRecovered {
        /// The persistence id.
        persistence_id: String,
    },
}

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PersistError::Encode { type_name, reason } => write!(
                f,
                "event `{type_name}` could not be encoded ({reason}); nothing was stored"
            ),
            PersistError::Journal(e) => fmt::Display::fmt(e, f),
            PersistError::NotRecovered { persistence_id } => write!(
                f,
                "`{persistence_id}` persisted before recovering: return \
                 `Some(self.<state>.recover())` from `Actor::activate`"
            ),
        }
    }
}

impl std::error::Error for PersistError {}

impl From<JournalError> for PersistError {
    fn from(e: JournalError) -> Self {
        PersistError::Journal(e)
    }
}

/// Why an actor could not recover its state; it does not take messages.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The store refused or failed (see [`JournalError`]).
    Journal(JournalError),
    /// A stored event or snapshot does not decode.
    Decode {
        /// The persistence id.
        persistence_id: String,
        /// The event's sequence number (of the snapshot: the last event
        /// it covers).
        sequence: u64,
        /// Why.
        error: DecodeError,
    },
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Journal(e) => fmt::Display::fmt(e, f),
            RecoveryError::Decode {
                persistence_id,
                sequence,
                error,
            } => write!(
                f,
                "`{persistence_id}` cannot recover: its row at sequence {sequence}: {error}"
            ),
        }
    }
}

impl std::error::Error for RecoveryError {}

impl From<JournalError> for RecoveryError {
    fn from(e: JournalError) -> Self {
        RecoveryError::Journal(e)
    }
}

/// Why an actor could not set, cancel or list its own reminders through
/// its context ([`Remind`](crate::Remind)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReminderError {
    /// The actor has no identity beyond this activation, so there is
    /// nothing to keep its reminders under: reminders belong to virtual
    /// actors. Activate it through the cluster (`Cluster::entity`), or
    /// spawn it with `SpawnOptions::entity`.
    NotAnEntity {
        /// The actor that asked.
        actor: troubadour::ActorId,
    },
    /// No reminder service runs on the actor's system: start one with
    /// [`Reminders::start`](crate::Reminders::start) on that system.
    NoService,
    /// The reminder store refused or failed (see [`JournalError`]).
    Store(JournalError),
}

impl fmt::Display for ReminderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReminderError::NotAnEntity { actor } => write!(
                f,
                "actor {actor} has no entity identity to keep reminders under: activate it \
                 through the cluster, or spawn it with `SpawnOptions::entity`"
            ),
            ReminderError::NoService => write!(
                f,
                "no reminder service runs on this actor's system: start one with \
                 `Reminders::start` on that system"
            ),
            ReminderError::Store(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for ReminderError {}

impl From<JournalError> for ReminderError {
    fn from(e: JournalError) -> Self {
        ReminderError::Store(e)
    }
}
