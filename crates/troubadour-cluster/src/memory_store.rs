//! The lease store in memory: for a cluster of several systems in one
//! process (tests, simulations, an embedded single-process deployment).
//! One mutex makes every operation atomic. Its clock is a function, so a
//! simulation can put it on virtual time, and it keeps a history of every
//! change for checkers.

use crate::lease::{
    Assignment, LeaseError, LeaseInfo, LeaseStore, NodeKey, StoreFuture, StoreView,
};
use crate::shard::{ShardCount, ShardId};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The clock a store times leases by.
pub type StoreClock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// A [`LeaseStore`] in memory, for a cluster of several systems in one
/// process (tests, simulations, an embedded single-process deployment).
/// One mutex makes every operation atomic. Its clock is a function, so a
/// simulation can put it on virtual time, and it can keep a history of
/// every change for checkers ([`recording`](Self::recording)).
///
/// ```
/// use std::time::Duration;
/// use troubadour_cluster::{LeaseStore, MemoryLeaseStore, NodeKey, ShardCount, ShardId};
///
/// # tokio_like_block_on(async {
/// let store = MemoryLeaseStore::new();
/// let a = NodeKey::new("a", 1);
/// store.join(ShardCount::DEFAULT).await?;
/// store.renew(&a, Duration::from_secs(10)).await?;
/// let owned = store.claim(ShardId::new(3), &a, 0).await?;
/// assert_eq!((owned.owner, owned.epoch), (Some(a), 1));
/// # Ok::<(), troubadour_cluster::LeaseError>(())
/// # }).unwrap();
/// # fn tokio_like_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     // The in-memory store's futures are ready at once.
/// #     let mut f = std::pin::pin!(f);
/// #     match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
/// #         std::task::Poll::Ready(v) => v,
/// #         std::task::Poll::Pending => unreachable!(),
/// #     }
/// # }
/// ```
pub struct MemoryLeaseStore {
    clock: StoreClock,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Whether changes go into `history` (off by default: it only grows).
    recording: bool,
    shards: Option<ShardCount>,
    /// Each node's lease: until when, by the store's clock.
    leases: BTreeMap<NodeKey, Instant>,
    /// One per shard once the first node joined.
    assignments: Vec<Assignment>,
    history: Vec<StoreRecord>,
}

/// One change the store made, with when (by its clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRecord {
    /// When.
    pub at: Instant,
    /// What.
    pub change: StoreChange,
}

/// A change the store made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreChange {
    /// A node's lease was granted or extended until `until`.
    Leased {
        /// The node.
        node: NodeKey,
        /// Until when.
        until: Instant,
    },
    /// A node left: its lease ended and its shards were released.
    Left(NodeKey),
    /// A claim succeeded: the shard's new assignment.
    Claimed(Assignment),
    /// A release: the shard's assignment after it.
    Released(Assignment),
}

impl MemoryLeaseStore {
    /// A store timing leases by the monotonic clock.
    pub fn new() -> MemoryLeaseStore {
        MemoryLeaseStore::with_clock(Arc::new(Instant::now))
    }

    /// A store timing leases by `clock` (a simulation's virtual clock).
    pub fn with_clock(clock: StoreClock) -> MemoryLeaseStore {
        MemoryLeaseStore {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Keeps every change from now on, for [`history`](Self::history)
    /// (tests and simulations; the history only grows).
    pub fn recording(self) -> MemoryLeaseStore {
        self.lock().recording = true;
        self
    }

    /// Every change recorded, in order (empty unless
    /// [`recording`](Self::recording)).
    pub fn history(&self) -> Vec<StoreRecord> {
        self.lock().history.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn joined(state: &State) -> Result<ShardCount, LeaseError> {
        state.shards.ok_or_else(|| {
            LeaseError::Unavailable("no node has joined this store yet: call join first".into())
        })
    }

    fn assignment(state: &State, shard: ShardId) -> Result<Assignment, LeaseError> {
        Self::joined(state)?;
        state
            .assignments
            .get(shard.get() as usize)
            .cloned()
            .ok_or(LeaseError::NoSuchShard(shard))
    }

    fn is_leased(state: &State, node: &NodeKey, now: Instant) -> bool {
        state.leases.get(node).is_some_and(|until| now < *until)
    }

    fn do_join(&self, shards: ShardCount) -> Result<(), LeaseError> {
        let mut s = self.lock();
        match s.shards {
            Some(cluster) if cluster != shards => Err(LeaseError::ShardCountMismatch {
                cluster,
                ours: shards,
            }),
            Some(_) => Ok(()),
            None => {
                s.shards = Some(shards);
                s.assignments = shards.shards().map(Assignment::unowned).collect();
                Ok(())
            }
        }
    }

    fn do_renew(&self, node: &NodeKey, ttl: Duration) -> Result<(), LeaseError> {
        let now = (self.clock)();
        let mut s = self.lock();
        Self::joined(&s)?;
        let until = now + ttl;
        let lease = s.leases.entry(node.clone()).or_insert(until);
        *lease = (*lease).max(until);
        let until = *lease;
        s.record(StoreRecord {
            at: now,
            change: StoreChange::Leased {
                node: node.clone(),
                until,
            },
        });
        Ok(())
    }

    fn do_leave(&self, node: &NodeKey) -> Result<(), LeaseError> {
        let now = (self.clock)();
        let mut s = self.lock();
        Self::joined(&s)?;
        s.leases.remove(node);
        for a in &mut s.assignments {
            if a.owner.as_ref() == Some(node) {
                a.released = true;
            }
        }
        s.record(StoreRecord {
            at: now,
            change: StoreChange::Left(node.clone()),
        });
        Ok(())
    }

    fn do_view(&self) -> Result<StoreView, LeaseError> {
        let now = (self.clock)();
        let s = self.lock();
        let shards = Self::joined(&s)?;
        Ok(StoreView {
            shards,
            leases: s
                .leases
                .iter()
                .map(|(node, until)| LeaseInfo {
                    node: node.clone(),
                    remaining: until.saturating_duration_since(now),
                })
                .collect(),
            assignments: s.assignments.clone(),
        })
    }

    fn do_claim(&self, shard: ShardId, by: &NodeKey, seen: u64) -> Result<Assignment, LeaseError> {
        let now = (self.clock)();
        let mut s = self.lock();
        let current = Self::assignment(&s, shard)?;
        if !Self::is_leased(&s, by, now) {
            return Err(LeaseError::NotLeased(by.clone()));
        }
        let owner_gone = match &current.owner {
            None => true,
            Some(owner) => current.released || owner == by || !Self::is_leased(&s, owner, now),
        };
        if current.epoch != seen || !owner_gone {
            return Err(LeaseError::Conflict(current));
        }
        let claimed = Assignment {
            shard,
            owner: Some(by.clone()),
            epoch: seen + 1,
            released: false,
        };
        s.assignments[shard.get() as usize] = claimed.clone();
        s.record(StoreRecord {
            at: now,
            change: StoreChange::Claimed(claimed.clone()),
        });
        Ok(claimed)
    }

    fn do_release(
        &self,
        shard: ShardId,
        by: &NodeKey,
        epoch: u64,
    ) -> Result<Assignment, LeaseError> {
        let now = (self.clock)();
        let mut s = self.lock();
        let current = Self::assignment(&s, shard)?;
        if current.epoch != epoch || current.owner.as_ref() != Some(by) {
            return Err(LeaseError::Conflict(current));
        }
        let released = Assignment {
            released: true,
            ..current
        };
        s.assignments[shard.get() as usize] = released.clone();
        s.record(StoreRecord {
            at: now,
            change: StoreChange::Released(released.clone()),
        });
        Ok(released)
    }
}

impl State {
    fn record(&mut self, record: StoreRecord) {
        if self.recording {
            self.history.push(record);
        }
    }
}

impl Default for MemoryLeaseStore {
    fn default() -> Self {
        MemoryLeaseStore::new()
    }
}

impl fmt::Debug for MemoryLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("MemoryLeaseStore")
            .field("shards", &s.shards)
            .field("leases", &s.leases.len())
            .finish_non_exhaustive()
    }
}

fn ready<'a, T: Send + 'a>(result: Result<T, LeaseError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

impl LeaseStore for MemoryLeaseStore {
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()> {
        ready(self.do_join(shards))
    }

    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()> {
        ready(self.do_renew(node, ttl))
    }

    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()> {
        ready(self.do_leave(node))
    }

    fn view(&self) -> StoreFuture<'_, StoreView> {
        ready(self.do_view())
    }

    fn claim(&self, shard: ShardId, by: &NodeKey, seen_epoch: u64) -> StoreFuture<'_, Assignment> {
        ready(self.do_claim(shard, by, seen_epoch))
    }

    fn release(&self, shard: ShardId, by: &NodeKey, epoch: u64) -> StoreFuture<'_, Assignment> {
        ready(self.do_release(shard, by, epoch))
    }
}
