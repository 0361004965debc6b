//! Write-behind: an actor keeps its state in memory and the database sees
//! batches, not every change (the seed article's "write-behind cache").
//!
//! A [`Durable<S>`] holds an actor's state. [`update`](Durable::update)
//! changes it and hands the new value, encoded, to the node's
//! [`WriteBehind`], which keeps only the latest value per key and writes
//! everything pending in one transaction every period (and when asked:
//! [`WriteBehind::flush`], [`Durable::flushed`]).
//!
//! # What a crash loses
//!
//! A change is written by the first flush that *starts* after it was made.
//! Flushes start every period `T` (and at once when one is asked for), so
//! a crash loses at most the changes of the last `T` plus the time the
//! flush in progress takes; nothing older. A flush that fails keeps its
//! values pending (newer ones replace them) and is tried again at the next
//! tick, so a store that goes away loses nothing until the process does.
//! Per flush generation (see [`WriteBehind::generation`]) this is exact,
//! and `tests/write_behind.rs` checks it against `kill -9`.
//!
//! Before a state moves to another node (a cluster's handoff), await
//! [`Durable::flushed`], so that the next activation reads it.
//!
//! # Fenced by epoch
//!
//! In a cluster each state is written with the epoch of the shard its
//! actor was activated in ([`Durable::epoch`]). A store never replaces a
//! state with one of an older epoch: once the shard's new owner has
//! written, a node that lost the shard but has not noticed yet (paused,
//! cut off from the lease store, or flushing what it kept pending while
//! the store was away) cannot overwrite it. Its write is refused, its
//! [`Durable`] learns so ([`Durable::superseded_by`], and
//! [`Durable::flushed`] fails with [`JournalError::Fenced`]), and its
//! later changes are no longer queued.
//!
//! The new owner takes the key as it loads ([`StateStore::claim_state`]:
//! the read and the raise of the key's epoch are one step), so the old
//! owner is refused from that moment, not only once the new owner has
//! written. A flush the old owner reports as durable is therefore never
//! overwritten by a state that did not start from it: either it landed
//! before the claim, and the new owner loads it, or it is refused and the
//! old owner is told. A state of epoch 0 (outside a cluster) loads with a
//! plain read.

use crate::error::{JournalError, RecoveryError};
use crate::event::StoredEvent;
use crate::store::StoreFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use troubadour::ExitReason;

/// A key-value store of actors' states, written in batches.
pub trait StateStore: Send + Sync + 'static {
    /// Writes every state in one transaction, replacing what its key held,
    /// except where the key holds a state of a newer epoch: that state
    /// stays, and the key comes back in the answer with the epoch it holds.
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>>;

    /// The state stored under `key`.
    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>>;

    /// Takes `key` for a writer of `epoch` and reads its state, as one
    /// atomic step: from then on the store refuses writes of older epochs
    /// to the key, even where none has written it yet (the key is kept
    /// with no state). Fails with [`JournalError::Fenced`] if the key is
    /// already held at a newer epoch; a claim never lowers a key's epoch.
    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState>;
}

/// What [`StateStore::claim_state`] found under a key before the claim.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedState {
    /// The key's epoch before the claim: of its last writer or claimant
    /// (0 for a key never written or claimed).
    pub epoch: u64,
    /// The stored state, if one was ever written.
    pub state: Option<StoredEvent>,
}

/// The type name states are stored under.
const STATE: &str = "state";

/// One state for [`StateStore::write_states`].
#[derive(Clone, Debug, PartialEq)]
pub struct StateWrite {
    /// The key it is stored under.
    pub key: String,
    /// The epoch of its writer (0 outside a cluster).
    pub epoch: u64,
    /// The encoded state.
    pub state: StoredEvent,
}

/// A [`StateWrite`] a store refused because its key holds a state of a
/// newer epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superseded {
    /// The key.
    pub key: String,
    /// The newer epoch the key's state was written at.
    pub current: u64,
}

/// The node's write-behind flusher: collects the latest state of every
/// changed [`Durable`] and writes them in one transaction per period.
/// Cheap to clone; the flusher's task ends when the last clone is dropped
/// (after [`close`](WriteBehind::close), to write what is pending).
#[derive(Clone)]
pub struct WriteBehind {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn StateStore>,
    pending: Mutex<Pending>,
    /// One flush at a time: generations complete in order, and an older
    /// value never lands after a newer one.
    flushing: tokio::sync::Mutex<()>,
    /// Flush generations completed (watchers wait on it).
    completed: watch::Sender<u64>,
    /// Wakes the flusher before its period ends (shared with its task,
    /// which holds the rest only weakly).
    now: Arc<Notify>,
}

#[derive(Default)]
struct Pending {
    /// Each key's latest state and the epoch it was written at.
    states: HashMap<String, (u64, StoredEvent)>,
    /// Flushes started; a change made now goes out with flush
    /// `started + 1`.
    started: u64,
    /// Keys whose write a store refused, with the newer epoch it holds:
    /// activations here at an older epoch are stale.
    superseded: HashMap<String, u64>,
}

impl Pending {
    /// A store holds `key` at `current` (or newer, if already known).
    fn supersede(&mut self, key: String, current: u64) {
        let held = self.superseded.entry(key).or_insert(current);
        *held = (*held).max(current);
    }
}

impl WriteBehind {
    /// Starts a flusher on `runtime` (an actor system's
    /// [`tokio_handle`](troubadour::SystemHandle::tokio_handle)) that
    /// writes to `store` every `every`.
    pub fn start(
        store: impl StateStore,
        every: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let (completed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            pending: Mutex::new(Pending::default()),
            flushing: tokio::sync::Mutex::new(()),
            completed,
            now: Arc::new(Notify::new()),
        });
        runtime.spawn(flush_loop(
            Arc::downgrade(&shared),
            shared.now.clone(),
            every,
        ));
        WriteBehind { shared }
    }

    /// The generation of the next flush to start: a change made now is
    /// written by it (or a later one, if it fails).
    pub fn generation(&self) -> u64 {
        self.shared.pending.lock().unwrap().started + 1
    }

    /// Flush generations completed so far.
    pub fn completed(&self) -> watch::Receiver<u64> {
        self.shared.completed.subscribe()
    }

    /// Writes everything pending now and waits until it is durable.
    pub async fn flush(&self) -> Result<(), JournalError> {
        flush_once(&self.shared).await
    }

    /// Asks for a flush now rather than at the end of the period, without
    /// waiting for it (from a `stopped` hook, say: a passivated actor's
    /// last state goes to the store at once). Requests made while one is
    /// pending are one flush.
    pub fn flush_soon(&self) {
        self.shared.now.notify_one();
    }

    /// Writes what is pending; the flusher stops once the last clone is
    /// dropped. Call before the process exits on purpose.
    pub async fn close(self) -> Result<(), JournalError> {
        self.flush().await
    }

    /// Queues `state` for the next flush (its generation), unless a store
    /// already refused this key for a newer epoch (`Err` with that epoch).
    fn queue(&self, key: &str, epoch: u64, state: StoredEvent) -> Result<u64, u64> {
        let mut pending = self.shared.pending.lock().unwrap();
        if let Some(&current) = pending.superseded.get(key).filter(|&&c| c > epoch) {
            return Err(current);
        }
        pending.states.insert(key.to_string(), (epoch, state));
        Ok(pending.started + 1)
    }

    /// The state queued for `key` on this node, with its epoch.
    fn pending_state(&self, key: &str) -> Option<(u64, StoredEvent)> {
        let pending = self.shared.pending.lock().unwrap();
        pending.states.get(key).cloned()
    }

    /// Remembers that a store holds `key` at `current`.
    fn note_superseded(&self, key: &str, current: u64) {
        self.shared
            .pending
            .lock()
            .unwrap()
            .supersede(key.to_string(), current);
    }

    /// The newer epoch a store holds for `key`, if it refused a write of
    /// `epoch` or older.
    fn superseded(&self, key: &str, epoch: u64) -> Option<u64> {
        let pending = self.shared.pending.lock().unwrap();
        pending.superseded.get(key).copied().filter(|&c| c > epoch)
    }
}

async fn flush_loop(shared: Weak<Shared>, now: Arc<Notify>, every: Duration) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = now.notified() => {}
        }
        let Some(s) = shared.upgrade() else { return };
        if let Err(e) = flush_once(&s).await {
            tracing::warn!(error = %e, "write-behind flush failed; its states stay pending");
        }
    }
}

/// One flush: takes what is pending, writes it, and on failure puts back
/// what no newer change replaced meanwhile.
async fn flush_once(shared: &Shared) -> Result<(), JournalError> {
    let _one = shared.flushing.lock().await;
    let (batch, generation) = {
        let mut pending = shared.pending.lock().unwrap();
        pending.started += 1;
        (std::mem::take(&mut pending.states), pending.started)
    };
    let result = if batch.is_empty() {
        Ok(Vec::new())
    } else {
        let states = batch
            .iter()
            .map(|(key, (epoch, state))| StateWrite {
                key: key.clone(),
                epoch: *epoch,
                state: state.clone(),
            })
            .collect();
        shared.store.write_states(states).await
    };
    match result {
        Ok(superseded) => {
            if !superseded.is_empty() {
                tracing::warn!(
                    states = superseded.len(),
                    "write-behind states refused: their keys hold states of newer epochs \
                     (their shards moved to other nodes); these activations are stale"
                );
                let mut pending = shared.pending.lock().unwrap();
                for Superseded { key, current } in superseded {
                    // A change queued since, by this stale activation, is
                    // refused too.
                    if pending.states.get(&key).is_some_and(|(e, _)| *e < current) {
                        pending.states.remove(&key);
                    }
                    pending.supersede(key, current);
                }
            }
            shared.completed.send_replace(generation);
            Ok(())
        }
        Err(e) => {
            let mut pending = shared.pending.lock().unwrap();
            for (k, v) in batch {
                pending.states.entry(k).or_insert(v);
            }
            Err(e)
        }
    }
}

/// An actor's state kept by write-behind: read through `Deref`, changed
/// with [`update`](Durable::update), loaded with [`load`](Durable::load)
/// from [`Actor::activate`](troubadour::Actor::activate).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use std::future::Future;
/// use std::time::Duration;
/// use troubadour::prelude::*;
/// use troubadour_persistence::{Durable, MemoryStore, WriteBehind};
///
/// #[derive(Serialize, Deserialize, Default)]
/// struct Position { lat: f64, lon: f64 }
///
/// struct Vehicle { position: Durable<Position> }
/// impl Actor for Vehicle {
///     fn activate(
///         &mut self,
///         _: &mut Context<Self>,
///     ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
///         Some(self.position.loading())
///     }
/// }
///
/// struct Moved(f64, f64);
/// impl Message for Moved { type Reply = (); }
/// impl Handler<Moved> for Vehicle {
///     fn handle(&mut self, Moved(lat, lon): Moved, _: &mut Context<Self>) {
///         self.position.update(|p| { p.lat = lat; p.lon = lon; });
///     }
/// }
///
/// let system = ActorSystem::new();
/// let behind = WriteBehind::start(MemoryStore::new(), Duration::from_secs(5), system.tokio_handle());
/// let bus = system
///     .spawn(Vehicle { position: Durable::new(&behind, "vehicle/1", Position::default()) })
///     .unwrap();
/// bus.tell(Moved(60.17, 24.94)).unwrap();
/// # system.shutdown(Duration::from_secs(5)).unwrap();
/// ```
pub struct Durable<S> {
    key: String,
    state: S,
    behind: WriteBehind,
    /// The writer's epoch (see the module's "Fenced by epoch").
    epoch: u64,
    /// The flush generation that writes the last change.
    queued_for: u64,
}

impl<S: Serialize + DeserializeOwned + Send + 'static> Durable<S> {
    /// The state stored under `key`, `initial` until loaded (and when
    /// nothing is stored).
    pub fn new(behind: &WriteBehind, key: impl Into<String>, initial: S) -> Self {
        Durable {
            key: key.into(),
            state: initial,
            behind: behind.clone(),
            epoch: 0,
            queued_for: 0,
        }
    }

    /// The writer's epoch: in a cluster, the epoch of the shard that hosts
    /// the actor (`troubadour-cluster`'s `entity_in_shard` tells the
    /// factory). Stores keep the state of the newest epoch that wrote a
    /// key: once a newer owner has written, this one's writes are refused.
    /// 0 (the default) outside a cluster.
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The newer epoch whose state a store kept when it refused this
    /// activation's write, if one did: the actor's shard has moved, its
    /// changes are no longer written, and it should stop (its next
    /// activation, on the shard's owner, reads the newer state).
    pub fn superseded_by(&self) -> Option<u64> {
        self.behind.superseded(&self.key, self.epoch)
    }

    fn fenced(&self, current: u64) -> JournalError {
        JournalError::Fenced {
            persistence_id: self.key.clone(),
            epoch: self.epoch,
            current,
        }
    }

    /// Loads the latest state: one still waiting to be flushed on this
    /// node, else the stored one, else keeps the initial state. At an
    /// epoch above 0 it claims the key first ([`StateStore::claim_state`]),
    /// so older epochs can no longer write it, and fails with
    /// [`JournalError::Fenced`] if a newer epoch holds it; a state queued
    /// here is used only if no other writer's epoch has held the key since.
    pub async fn load(&mut self) -> Result<(), RecoveryError> {
        if let Some(current) = self.superseded_by() {
            return Err(self.fenced(current).into());
        }
        let pending = self.behind.pending_state(&self.key);
        let store = &self.behind.shared.store;
        let stored = if self.epoch == 0 {
            match pending {
                Some((_, state)) => Some(state),
                None => store.read_state(&self.key).await?,
            }
        } else {
            match store.claim_state(&self.key, self.epoch).await {
                Ok(claimed) => match pending {
                    Some((queued_at, state)) if queued_at >= claimed.epoch => Some(state),
                    _ => claimed.state,
                },
                Err(JournalError::Fenced { current, .. }) => {
                    self.behind.note_superseded(&self.key, current);
                    return Err(self.fenced(current).into());
                }
                Err(e) => return Err(e.into()),
            }
        };
        if let Some(stored) = stored {
            self.state = stored.decode_as().map_err(|error| RecoveryError::Decode {
                persistence_id: self.key.clone(),
                sequence: 0,
                error,
            })?;
        }
        Ok(())
    }

    /// [`load`](Durable::load) as [`Actor::activate`](troubadour::Actor::activate)
    /// wants it.
    pub async fn loading(&mut self) -> Result<(), ExitReason> {
        self.load()
            .await
            .map_err(|e| ExitReason::Failed(e.to_string().into()))
    }

    /// Changes the state and queues it for the next flush. The state is
    /// encoded now (a state that fails to encode is kept in memory, not
    /// queued, and logged). Once [superseded](Durable::superseded_by), the
    /// change is kept in memory only.
    pub fn update<R>(&mut self, change: impl FnOnce(&mut S) -> R) -> R {
        let out = change(&mut self.state);
        match StoredEvent::encode_with(STATE, 1, &self.state) {
            Ok(stored) => match self.behind.queue(&self.key, self.epoch, stored) {
                Ok(generation) => self.queued_for = generation,
                Err(current) => tracing::debug!(
                    key = %self.key, epoch = self.epoch, current,
                    "a superseded write-behind state is not queued"
                ),
            },
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "a write-behind state did not encode; not queued")
            }
        }
        out
    }

    /// Waits until the last change is durable, asking for a flush now
    /// rather than at the end of the period. Await it before the state
    /// moves to another node. Fails with [`JournalError::Fenced`] once a
    /// store has refused this activation's state for a newer epoch's.
    pub async fn flushed(&self) -> Result<(), JournalError> {
        let mut completed = self.behind.completed();
        if *completed.borrow() < self.queued_for {
            self.behind.flush_soon();
            completed
                .wait_for(|c| *c >= self.queued_for)
                .await
                .map_err(|_| {
                    JournalError::Unavailable("the write-behind flusher stopped".into())
                })?;
        }
        match self.superseded_by() {
            Some(current) => Err(self.fenced(current)),
            None => Ok(()),
        }
    }
}

impl<S> std::ops::Deref for Durable<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.state
    }
}
