//! The in-memory store: both traits over one mutex, for tests and for
//! actors whose history need not outlive the process. It applies every
//! rule of the [`store`](crate::store) module, and it can be switched off
//! to test what an actor does when its store goes away.

use crate::error::JournalError;
use crate::event::StoredEvent;
use crate::reminders::{ReminderRecord, ReminderStore};
use crate::store::{
    Append, EventRecord, Fenced, Journal, SnapshotRecord, SnapshotStore, StoreFuture,
};
use crate::write_behind::{ClaimedState, StateStore, StateWrite, Superseded};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// An in-memory journal and snapshot store. Clones share the same data.
///
/// ```
/// use troubadour_persistence::{MemoryStore, Persistence};
/// let store = MemoryStore::new();
/// let persistence = Persistence::new(store.clone(), store);
/// # let _ = persistence;
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    ids: Mutex<HashMap<String, History>>,
    /// Each key's epoch (of its last writer or claimant) and its state
    /// (`None` while only claimed).
    states: Mutex<HashMap<String, (u64, Option<StoredEvent>)>>,
    reminders: Mutex<BTreeMap<(String, String, String), ReminderRecord>>,
    unavailable: AtomicBool,
}

#[derive(Default)]
struct History {
    highest: u64,
    epoch: u64,
    events: BTreeMap<u64, EventRecord>,
    snapshots: BTreeMap<u64, SnapshotRecord>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every operation fail with [`JournalError::Unavailable`] (as a
    /// database that went away) until switched back on; for tests.
    pub fn set_available(&self, available: bool) {
        self.inner.unavailable.store(!available, Ordering::SeqCst);
    }

    /// Every stored event of `persistence_id`, in order; for checkers.
    pub fn events(&self, persistence_id: &str) -> Vec<EventRecord> {
        let ids = self.inner.ids.lock().unwrap();
        ids.get(persistence_id)
            .map(|h| h.events.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Replaces a stored event's bytes, or removes it (`None`): a corrupt
    /// or gapped journal, for tests of what recovery does with one.
    pub fn tamper(&self, persistence_id: &str, sequence: u64, payload: Option<Vec<u8>>) {
        let mut ids = self.inner.ids.lock().unwrap();
        if let Some(h) = ids.get_mut(persistence_id) {
            match payload {
                Some(bytes) => {
                    if let Some(r) = h.events.get_mut(&sequence) {
                        r.event.payload = bytes;
                    }
                }
                None => {
                    h.events.remove(&sequence);
                }
            }
        }
    }

    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut HashMap<String, History>) -> Result<T, JournalError>,
    ) -> StoreFuture<'static, T> {
        let result = if self.inner.unavailable.load(Ordering::SeqCst) {
            Err(JournalError::Unavailable(
                "the in-memory store is switched off".into(),
            ))
        } else {
            f(&mut self.inner.ids.lock().unwrap())
        };
        Box::pin(std::future::ready(result))
    }
}

impl Journal for MemoryStore {
    fn fence(&self, persistence_id: &str, epoch: u64) -> StoreFuture<'_, Fenced> {
        self.with(|ids| {
            let h = ids.entry(persistence_id.to_string()).or_default();
            if h.epoch > epoch {
                return Err(JournalError::Fenced {
                    persistence_id: persistence_id.to_string(),
                    epoch,
                    current: h.epoch,
                });
            }
            h.epoch = epoch;
            Ok(Fenced {
                highest: h.highest,
                lowest: h.events.keys().next().copied().unwrap_or(h.highest + 1),
            })
        })
    }

    fn append(&self, append: Append) -> StoreFuture<'_, ()> {
        self.with(move |ids| {
            let h = ids.entry(append.persistence_id.clone()).or_default();
            crate::store::check_append(&append, h.highest, h.epoch)?;
            h.epoch = append.epoch;
            for (i, event) in append.events.into_iter().enumerate() {
                let sequence = append.first_sequence + i as u64;
                h.events.insert(
                    sequence,
                    EventRecord {
                        sequence,
                        epoch: append.epoch,
                        event,
                    },
                );
                h.highest = sequence;
            }
            Ok(())
        })
    }

    fn replay(
        &self,
        persistence_id: &str,
        from: u64,
        max: usize,
    ) -> StoreFuture<'_, Vec<EventRecord>> {
        self.with(|ids| {
            Ok(ids
                .get(persistence_id)
                .map(|h| {
                    h.events
                        .range(from..)
                        .take(max)
                        .map(|(_, r)| r.clone())
                        .collect()
                })
                .unwrap_or_default())
        })
    }

    fn delete_to(&self, persistence_id: &str, to: u64) -> StoreFuture<'_, ()> {
        self.with(|ids| {
            if let Some(h) = ids.get_mut(persistence_id) {
                h.events = h.events.split_off(&(to + 1));
            }
            Ok(())
        })
    }
}

impl SnapshotStore for MemoryStore {
    fn save(&self, persistence_id: &str, snapshot: SnapshotRecord) -> StoreFuture<'_, ()> {
        self.with(|ids| {
            let h = ids.entry(persistence_id.to_string()).or_default();
            h.snapshots.insert(snapshot.sequence, snapshot);
            Ok(())
        })
    }

    fn latest(&self, persistence_id: &str) -> StoreFuture<'_, Option<SnapshotRecord>> {
        self.with(|ids| {
            Ok(ids
                .get(persistence_id)
                .and_then(|h| h.snapshots.values().next_back().cloned()))
        })
    }

    fn delete_below(&self, persistence_id: &str, below: u64) -> StoreFuture<'_, ()> {
        self.with(|ids| {
            if let Some(h) = ids.get_mut(persistence_id) {
                h.snapshots = h.snapshots.split_off(&below);
            }
            Ok(())
        })
    }
}

impl StateStore for MemoryStore {
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>> {
        let inner = self.inner.clone();
        self.with(move |_| {
            let mut stored = inner.states.lock().unwrap();
            let mut superseded = Vec::new();
            for w in states {
                match stored.get(&w.key) {
                    Some(&(current, _)) if current > w.epoch => superseded.push(Superseded {
                        key: w.key,
                        current,
                    }),
                    _ => {
                        stored.insert(w.key, (w.epoch, Some(w.state)));
                    }
                }
            }
            Ok(superseded)
        })
    }

    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>> {
        let inner = self.inner.clone();
        let key = key.to_string();
        self.with(move |_| {
            Ok(inner
                .states
                .lock()
                .unwrap()
                .get(&key)
                .and_then(|(_, s)| s.clone()))
        })
    }

    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState> {
        let inner = self.inner.clone();
        let key = key.to_string();
        self.with(move |_| {
            let mut stored = inner.states.lock().unwrap();
            let (held, state) = stored.entry(key.clone()).or_insert((0, None));
            if *held > epoch {
                return Err(JournalError::Fenced {
                    persistence_id: key,
                    epoch,
                    current: *held,
                });
            }
            let claimed = ClaimedState {
                epoch: *held,
                state: state.clone(),
            };
            *held = epoch;
            Ok(claimed)
        })
    }
}

impl ReminderStore for MemoryStore {
    fn put_reminder(&self, r: ReminderRecord) -> StoreFuture<'_, ()> {
        let inner = self.inner.clone();
        self.with(move |_| {
            let key = (r.kind.clone(), r.id.clone(), r.name.clone());
            inner.reminders.lock().unwrap().insert(key, r);
            Ok(())
        })
    }

    fn cancel_reminder(&self, kind: &str, id: &str, name: &str) -> StoreFuture<'_, bool> {
        let inner = self.inner.clone();
        let key = (kind.to_string(), id.to_string(), name.to_string());
        self.with(move |_| Ok(inner.reminders.lock().unwrap().remove(&key).is_some()))
    }

    fn reminders_of(&self, kind: &str, id: &str) -> StoreFuture<'_, Vec<ReminderRecord>> {
        let inner = self.inner.clone();
        let (kind, id) = (kind.to_string(), id.to_string());
        self.with(move |_| {
            Ok(inner
                .reminders
                .lock()
                .unwrap()
                .values()
                .filter(|r| r.kind == kind && r.id == id)
                .cloned()
                .collect())
        })
    }

    fn due_reminders(&self, now_ms: i64, max: usize) -> StoreFuture<'_, Vec<ReminderRecord>> {
        let inner = self.inner.clone();
        self.with(move |_| {
            let mut due: Vec<ReminderRecord> = inner
                .reminders
                .lock()
                .unwrap()
                .values()
                .filter(|r| r.due_ms <= now_ms)
                .cloned()
                .collect();
            due.sort_by_key(|r| r.due_ms);
            due.truncate(max);
            Ok(due)
        })
    }

    fn advance_reminder(
        &self,
        kind: &str,
        id: &str,
        name: &str,
        seen_ms: i64,
        next_ms: Option<i64>,
    ) -> StoreFuture<'_, bool> {
        let inner = self.inner.clone();
        let key = (kind.to_string(), id.to_string(), name.to_string());
        self.with(move |_| {
            let mut reminders = inner.reminders.lock().unwrap();
            match reminders.get_mut(&key) {
                Some(r) if r.due_ms == seen_ms => {
                    match next_ms {
                        Some(next) => r.due_ms = next,
                        None => {
                            reminders.remove(&key);
                        }
                    }
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
    }
}
