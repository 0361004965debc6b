//! An event-sourced actor's state: [`Persistent`] holds it, changes it
//! only by applying events that are durable, recovers it (latest
//! snapshot, then later events) and takes snapshots by policy.
//!
//! The actor that owns a `Persistent` recovers it from
//! [`Actor::activate`], so that no message is handled before the state is
//! back (messages wait in the mailbox), and persists from
//! [`AsyncHandler`](troubadour::AsyncHandler)s, so that the reply to an
//! `ask` goes out only once its events are durable.

use crate::error::{JournalError, PersistError, RecoveryError};
use crate::event::{Event, StoredEvent};
use crate::store::{Append, Journal, SnapshotRecord, SnapshotStore};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;
use troubadour::{Actor, Context, ExitReason};

/// The state of an event-sourced actor: it changes only by
/// [`apply`](EventSourced::apply)ing its events, and it is what a
/// snapshot stores.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour_persistence::{Event, EventSourced};
///
/// #[derive(Serialize, Deserialize)]
/// enum AccountEvent { Deposited(u64), Withdrawn(u64) }
/// impl Event for AccountEvent { const TYPE: &'static str = "bank.AccountEvent"; }
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct Balance { cents: u64 }
/// impl EventSourced for Balance {
///     type Event = AccountEvent;
///     fn apply(&mut self, event: &AccountEvent) {
///         match event {
///             AccountEvent::Deposited(c) => self.cents += c,
///             AccountEvent::Withdrawn(c) => self.cents -= c,
///         }
///     }
/// }
/// ```
pub trait EventSourced: Serialize + DeserializeOwned + Send + 'static {
    /// The events this state changes by.
    type Event: Event;
    /// The schema version of this state as a snapshot. Raise it when the
    /// state's shape changes and decode the older one in
    /// [`upcast_snapshot`](EventSourced::upcast_snapshot).
    const SNAPSHOT_VERSION: u32 = 1;

    /// Applies one durable event. Must not fail and must not do I/O: it
    /// also runs on recovery, for every stored event.
    fn apply(&mut self, event: &Self::Event);

    /// Decodes a snapshot written under another version. The default
    /// refuses, and recovery stops with the reason.
    fn upcast_snapshot(stored: &StoredEvent) -> Result<Self, crate::DecodeError> {
        Err(stored.unknown_version())
    }
}

/// The stores a [`Persistent`] writes to. Cheap to clone; share one per
/// process.
#[derive(Clone)]
pub struct Persistence {
    journal: Arc<dyn Journal>,
    snapshots: Arc<dyn SnapshotStore>,
}

impl Persistence {
    /// Persistence over a journal and a snapshot store (often one value
    /// that is both, cloned).
    pub fn new(journal: impl Journal, snapshots: impl SnapshotStore) -> Self {
        Persistence {
            journal: Arc::new(journal),
            snapshots: Arc::new(snapshots),
        }
    }

    /// Persistence in memory (a fresh [`MemoryStore`](crate::MemoryStore)):
    /// for tests.
    pub fn in_memory() -> Self {
        let store = crate::MemoryStore::new();
        Self::new(store.clone(), store)
    }

    /// Persistence in a SQLite database file (created if missing), with the
    /// default options (see [`SqliteStore`](crate::SqliteStore)).
    pub fn sqlite(path: impl AsRef<std::path::Path>) -> Result<Self, JournalError> {
        let store = crate::SqliteStore::open(path)?;
        Ok(Self::new(store.clone(), store))
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    /// The snapshot store.
    pub fn snapshots(&self) -> &Arc<dyn SnapshotStore> {
        &self.snapshots
    }
}

/// When a [`Persistent`] takes snapshots and what it deletes after one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// A snapshot after every this many events (`None`: only on demand,
    /// [`Persistent::snapshot`]).
    pub every: Option<u64>,
    /// How many snapshots to keep (at least 1); older ones are deleted.
    pub keep: usize,
    /// Whether to delete the events the oldest kept snapshot covers.
    pub delete_events: bool,
}

impl Default for SnapshotPolicy {
    /// Snapshots only on demand; keep two; delete no events.
    fn default() -> Self {
        SnapshotPolicy {
            every: None,
            keep: 2,
            delete_events: false,
        }
    }
}

impl SnapshotPolicy {
    /// A snapshot every `n` events, keeping two, deleting no events.
    pub fn every(n: u64) -> Self {
        SnapshotPolicy {
            every: Some(n.max(1)),
            ..Self::default()
        }
    }

    /// Keep `n` snapshots (at least 1).
    pub fn keep(mut self, n: usize) -> Self {
        self.keep = n.max(1);
        self
    }

    /// Delete the events covered by the oldest kept snapshot.
    pub fn delete_events(mut self, on: bool) -> Self {
        self.delete_events = on;
        self
    }
}

/// How many events recovery reads per store round trip.
const REPLAY_PAGE: usize = 4096;

/// The persistent state of one actor: `S`, its persistence id, and where
/// its history stands. Reads go through `Deref`; changes only through
/// [`persist`](Persistent::persist).
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use troubadour_persistence::{Event, EventSourced};
/// # #[derive(Serialize, Deserialize)]
/// # enum AccountEvent { Deposited(u64) }
/// # impl Event for AccountEvent { const TYPE: &'static str = "bank.AccountEvent"; }
/// # #[derive(Default, Serialize, Deserialize)]
/// # struct Balance { cents: u64 }
/// # impl EventSourced for Balance {
/// #     type Event = AccountEvent;
/// #     fn apply(&mut self, AccountEvent::Deposited(c): &AccountEvent) { self.cents += c }
/// # }
/// use std::future::Future;
/// use troubadour::prelude::*;
/// use troubadour_persistence::{PersistError, Persistence, Persistent};
///
/// struct Account { balance: Persistent<Balance> }
///
/// impl Actor for Account {
///     fn activate(
///         &mut self,
///         _: &mut Context<Self>,
///     ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
///         Some(self.balance.recovery())
///     }
/// }
///
/// struct Deposit(u64);
/// impl Message for Deposit { type Reply = Result<u64, PersistError>; }
///
/// impl AsyncHandler<Deposit> for Account {
///     async fn handle(&mut self, Deposit(c): Deposit, ctx: &mut Context<Self>) -> Result<u64, PersistError> {
///         self.balance.persist(AccountEvent::Deposited(c), ctx).await?;
///         Ok(self.balance.cents)
///     }
/// }
///
/// let persistence = Persistence::in_memory();
/// let system = ActorSystem::new();
/// let account = system
///     .spawn(Account { balance: Persistent::new(&persistence, "account-1", Balance::default()) })
///     .unwrap();
/// assert_eq!(system.block_on(account.ask(Deposit(250))).unwrap(), Ok(250));
/// # system.shutdown(std::time::Duration::from_secs(5)).unwrap();
/// ```
pub struct Persistent<S: EventSourced> {
    id: String,
    state: S,
    persistence: Persistence,
    epoch: u64,
    sequence: u64,
    policy: SnapshotPolicy,
    since_snapshot: u64,
    /// Sequence numbers of the snapshots known to exist, oldest first.
    kept: VecDeque<u64>,
    phase: Phase,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    New,
    Recovered,
    /// A write failed: nothing more is written by this activation.
    Broken(JournalError),
}

impl<S: EventSourced> Persistent<S> {
    /// The state of `persistence_id`, starting from `initial` until it is
    /// recovered. Epoch 0 (not clustered), snapshots on demand only.
    pub fn new(persistence: &Persistence, persistence_id: impl Into<String>, initial: S) -> Self {
        Persistent {
            id: persistence_id.into(),
            state: initial,
            persistence: persistence.clone(),
            epoch: 0,
            sequence: 0,
            policy: SnapshotPolicy::default(),
            since_snapshot: 0,
            kept: VecDeque::new(),
            phase: Phase::New,
        }
    }

    /// The writer's epoch: in a cluster, the epoch of the shard that hosts
    /// the actor, so that a stale owner's writes are refused.
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// When to take snapshots and what to delete after one.
    pub fn snapshots(mut self, policy: SnapshotPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The persistence id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The sequence number of the last event applied (0 for none).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// Recovers the state: claims the id for this epoch (fencing older
    /// writers), loads the latest snapshot, then applies every later
    /// event. Checks that the history is whole: no gap, nothing missing
    /// at the end.
    pub async fn recover(&mut self) -> Result<(), RecoveryError> {
        let fenced = self.persistence.journal.fence(&self.id, self.epoch).await?;
        let mut next = 1;
        self.kept.clear();
        if let Some(snapshot) = self.persistence.snapshots.latest(&self.id).await? {
            if snapshot.sequence > fenced.highest {
                return Err(self.corrupt(format!(
                    "a snapshot covers event {} but the journal's highest is {}",
                    snapshot.sequence, fenced.highest
                )));
            }
            self.state =
                decode_snapshot::<S>(&snapshot.state).map_err(|error| RecoveryError::Decode {
                    persistence_id: self.id.clone(),
                    sequence: snapshot.sequence,
                    error,
                })?;
            next = snapshot.sequence + 1;
            self.kept.push_back(snapshot.sequence);
        }
        if next < fenced.lowest {
            return Err(self.corrupt(format!(
                "events {next} to {} were deleted but no snapshot covers them",
                fenced.lowest - 1
            )));
        }
        // Up to the highest number the fence reported: no round trip to
        // learn that nothing follows.
        while next <= fenced.highest {
            let page = self
                .persistence
                .journal
                .replay(&self.id, next, REPLAY_PAGE)
                .await?;
            if page.is_empty() {
                break;
            }
            for record in page {
                if record.sequence != next {
                    return Err(self.corrupt(format!(
                        "event {next} is missing (the next stored is {})",
                        record.sequence
                    )));
                }
                let event =
                    record
                        .event
                        .decode::<S::Event>()
                        .map_err(|error| RecoveryError::Decode {
                            persistence_id: self.id.clone(),
                            sequence: record.sequence,
                            error,
                        })?;
                self.state.apply(&event);
                next += 1;
            }
        }
        if next - 1 != fenced.highest {
            return Err(self.corrupt(format!(
                "events up to {} were written but only up to {} are stored",
                fenced.highest,
                next - 1
            )));
        }
        self.sequence = fenced.highest;
        self.since_snapshot = self.sequence - self.kept.back().copied().unwrap_or(0);
        self.phase = Phase::Recovered;
        Ok(())
    }

    /// [`recover`](Persistent::recover) as [`Actor::activate`] wants it: a
    /// failed recovery fails the actor with the error's message.
    pub async fn recovery(&mut self) -> Result<(), ExitReason> {
        self.recover().await.map_err(|e| {
            tracing::warn!(persistence_id = %self.id, error = %e, "recovery failed");
            ExitReason::Failed(e.to_string().into())
        })
    }

    /// Makes `event` durable, then applies it. On `Ok` the event is
    /// stored and the state reflects it; reply only after this returns.
    ///
    /// If the store refuses or fails the write, the actor fails after the
    /// current handler (its supervisor decides; a restart recovers what is
    /// really stored) and this returns the error; later persists of this
    /// activation return it too and write nothing.
    pub async fn persist<A: Actor>(
        &mut self,
        event: S::Event,
        ctx: &mut Context<A>,
    ) -> Result<(), PersistError> {
        self.persist_all(vec![event], ctx).await
    }

    /// Makes `events` durable atomically (all or none), then applies them
    /// in order. As [`persist`](Persistent::persist) otherwise.
    pub async fn persist_all<A: Actor>(
        &mut self,
        events: Vec<S::Event>,
        ctx: &mut Context<A>,
    ) -> Result<(), PersistError> {
        match &self.phase {
            Phase::Recovered => {}
            Phase::New => {
                return Err(PersistError::NotRecovered {
                    persistence_id: self.id.clone(),
                })
            }
            Phase::Broken(e) => return Err(PersistError::Journal(e.clone())),
        }
        if events.is_empty() {
            return Ok(());
        }
        let mut stored = Vec::with_capacity(events.len());
        for event in &events {
            stored.push(
                StoredEvent::encode(event).map_err(|e| PersistError::Encode {
                    type_name: <S::Event as Event>::TYPE,
                    reason: e.to_string(),
                })?,
            );
        }
        let count = events.len() as u64;
        let append = Append {
            persistence_id: self.id.clone(),
            epoch: self.epoch,
            first_sequence: self.sequence + 1,
            events: stored,
        };
        if let Err(e) = self.persistence.journal.append(append).await {
            tracing::warn!(persistence_id = %self.id, error = %e, "persist failed; the actor stops");
            ctx.fail(e.to_string());
            self.phase = Phase::Broken(e.clone());
            return Err(PersistError::Journal(e));
        }
        for event in &events {
            self.state.apply(event);
        }
        self.sequence += count;
        self.since_snapshot += count;
        if self.policy.every.is_some_and(|n| self.since_snapshot >= n) {
            // The events are durable: a failed snapshot costs only a longer
            // recovery, so it is reported, not fatal.
            if let Err(e) = self.snapshot().await {
                tracing::warn!(persistence_id = %self.id, error = %e, "snapshot failed");
            }
        }
        Ok(())
    }

    /// Stores a snapshot of the state now, then applies the policy's
    /// retention (older snapshots, and events if asked).
    pub async fn snapshot(&mut self) -> Result<(), JournalError> {
        if self.phase != Phase::Recovered {
            return Ok(());
        }
        let state = StoredEvent::encode_with("snapshot", S::SNAPSHOT_VERSION, &self.state)
            .map_err(|e| JournalError::Unavailable(format!("the snapshot did not encode: {e}")))?;
        let sequence = self.sequence;
        self.persistence
            .snapshots
            .save(&self.id, SnapshotRecord { sequence, state })
            .await?;
        self.since_snapshot = 0;
        if self.kept.back() != Some(&sequence) {
            self.kept.push_back(sequence);
        }
        if self.kept.len() > self.policy.keep {
            while self.kept.len() > self.policy.keep {
                self.kept.pop_front();
            }
            let oldest = self.kept[0];
            self.persistence
                .snapshots
                .delete_below(&self.id, oldest)
                .await?;
        }
        if self.policy.delete_events {
            let oldest = self.kept[0];
            self.persistence.journal.delete_to(&self.id, oldest).await?;
        }
        Ok(())
    }

    fn corrupt(&self, detail: String) -> RecoveryError {
        RecoveryError::Journal(JournalError::Corrupt {
            persistence_id: self.id.clone(),
            detail,
        })
    }
}

impl<S: EventSourced> std::ops::Deref for Persistent<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.state
    }
}

fn decode_snapshot<S: EventSourced>(stored: &StoredEvent) -> Result<S, crate::DecodeError> {
    if stored.type_name == "snapshot" && stored.version == S::SNAPSHOT_VERSION {
        stored.decode_as()
    } else {
        S::upcast_snapshot(stored)
    }
}
