//! What an observer (a dashboard, a metrics exporter) can see of a running
//! system: the table of live actors with their counters, and the figures
//! of the system as a whole.
//!
//! Observation is switched on per system
//! ([`ActorSystemBuilder::observe`](crate::ActorSystemBuilder::observe)).
//! Off, an actor carries one empty pointer and a turn tests it once. On,
//! each spawned actor gets an [`ActorStats`] that its own turns write
//! (plain stores: only the thread holding the actor's consumer role
//! writes them, so no write contends) and observers read; the table that
//! lists them is split into shards, each behind its own mutex, taken once
//! at spawn and once at stop, never on the message path. A thread spawns
//! into its own shard, so spawning threads do not fight over one lock.
//!
//! Figures per kind (actor type) are summed when asked for: over the live
//! actors' counters, plus what stopped actors of the kind left behind
//! (folded into their shard at stop), so totals never go backwards when
//! actors stop.
//!
//! Mailbox depth is sampled, not counted: counting every push would put a
//! read-modify-write on every send. An observer's request bumps an epoch;
//! an actor that ends a turn in an older epoch walks its queue (at most
//! [`DEPTH_CAP`] nodes) and records the length. An actor that has not run
//! since keeps its last sample (an actor with queued messages is scheduled,
//! so a stale sample is one turn old, unless a handler is stuck).

use crate::api::exit::{ActorId, ExitReason};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Mailbox depth samples stop counting here (a walk of the queue costs
/// the actor's turn a cache miss per node).
pub const DEPTH_CAP: u32 = 100_000;

const SHARDS: usize = 64;

/// One actor's counters. Written by the actor's own turns, read by
/// observers.
pub(crate) struct ActorStats {
    id: ActorId,
    kind: TypeId,
    kind_name: &'static str,
    /// The supervisor's id; 0 (no actor's) for the guardian. Fields are
    /// kept narrow: an observed system may hold millions of these.
    parent: u64,
    /// Where it is in the table: its shard and its slot there.
    shard: u32,
    slot: u32,
    /// Milliseconds from the table's creation to the spawn.
    started_ms: u64,
    handled: AtomicU64,
    depth: AtomicU32,
    sampled_epoch: AtomicU32,
    restarts: AtomicU32,
    failures: AtomicU32,
    last_failure: Mutex<Option<Box<ExitReason>>>,
    /// Taken out of the table (its stop, or its cell's drop if it never
    /// finished one).
    gone: AtomicBool,
}

impl ActorStats {
    /// Adds the messages one turn handled. Only the actor's consumer
    /// writes, so a load and a store suffice (no locked instruction).
    #[inline]
    pub(crate) fn handled(&self, n: u32) {
        if n != 0 {
            let before = self.handled.load(Ordering::Relaxed);
            self.handled.store(before + u64::from(n), Ordering::Relaxed);
        }
    }

    /// Whether an observer asked for a fresh depth sample since this
    /// actor's last one.
    #[inline]
    pub(crate) fn wants_sample(&self, epoch: &AtomicU32) -> bool {
        self.sampled_epoch.load(Ordering::Relaxed) != epoch.load(Ordering::Relaxed)
    }

    pub(crate) fn record_depth(&self, depth: u32, epoch: &AtomicU32) {
        self.depth.store(depth, Ordering::Relaxed);
        self.sampled_epoch
            .store(epoch.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn has_depth(&self) -> bool {
        self.depth.load(Ordering::Relaxed) != 0
    }

    /// A drained actor queues nothing.
    pub(crate) fn clear_depth(&self) {
        self.depth.store(0, Ordering::Relaxed);
    }

    pub(crate) fn record_failure(&self, reason: &ExitReason) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_failure) = Some(Box::new(reason.clone()));
    }

    pub(crate) fn record_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// `now_ms`: milliseconds since the table's creation.
    fn sample(&self, now_ms: u64) -> ActorSample {
        ActorSample {
            id: self.id,
            kind: self.kind_name,
            parent: (self.parent != 0).then_some(ActorId(self.parent)),
            messages_handled: self.handled.load(Ordering::Relaxed),
            mailbox_depth: self.depth.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            age: Duration::from_millis(now_ms.saturating_sub(self.started_ms)),
        }
    }
}

/// One actor as an observer sees it at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActorSample {
    /// The actor.
    pub id: ActorId,
    /// Its type, as `std::any::type_name` spells it.
    pub kind: &'static str,
    /// Its supervisor; `None` for a top-level actor (supervised by the
    /// system's guardian).
    pub parent: Option<ActorId>,
    /// Messages its handlers have finished (or suspended on), across
    /// restarts; a turn's messages are added when the turn ends, so a
    /// reply sent from a handler can arrive before its message is counted.
    pub messages_handled: u64,
    /// Messages waiting in its mailbox at its latest sample (at most
    /// [`DEPTH_CAP`]).
    pub mailbox_depth: u32,
    /// Times its supervisor restarted it.
    pub restarts: u32,
    /// Times it failed or was killed (a panic, a failure it asked for, an
    /// exit signal from a link).
    pub failures: u32,
    /// Time since it was spawned.
    pub age: Duration,
}

/// One actor in more detail: see
/// [`SystemHandle::actor_details`](crate::SystemHandle::actor_details).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActorDetails {
    /// Its counters now.
    pub sample: ActorSample,
    /// Why it last failed or was killed, if it ever was.
    pub last_failure: Option<ExitReason>,
    /// The names it is registered under.
    pub names: Vec<String>,
}

/// Totals for one kind of actor (one Rust type).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindMetrics {
    /// The type, as `std::any::type_name` spells it.
    pub kind: &'static str,
    /// Actors of this kind alive now.
    pub alive: u64,
    /// Spawned since the system started.
    pub spawned: u64,
    /// Stopped since the system started.
    pub stopped: u64,
    /// Restarts by their supervisors.
    pub restarts: u64,
    /// Failures (panics, failures asked for, kills, exit signals).
    pub failures: u64,
    /// Messages handled, by live and stopped actors of the kind.
    pub messages_handled: u64,
    /// Messages queued for live actors of the kind at their latest samples.
    pub mailbox_depth: u64,
    /// The deepest of those mailboxes.
    pub max_mailbox_depth: u32,
}

/// Dead letters by why the message could not be handled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterCounts {
    /// Sent to an actor that had already stopped (or was stopping
    /// gracefully).
    pub recipient_stopped: u64,
    /// Waiting in a mailbox or stash when its actor stopped.
    pub discarded_at_stop: u64,
    /// Lost between sender and mailbox (a simulation's fault, a message
    /// dropped in flight).
    pub lost: u64,
    /// Timer ticks refused by a full bounded mailbox.
    pub mailbox_full: u64,
}

impl DeadLetterCounts {
    /// All dead letters.
    pub fn total(&self) -> u64 {
        self.recipient_stopped + self.discarded_at_stop + self.lost + self.mailbox_full
    }

    /// Each reason with its count, for a metric labelled by reason
    /// ([`DeadLetterReason::as_str`](crate::DeadLetterReason::as_str)).
    pub fn by_reason(&self) -> [(crate::DeadLetterReason, u64); 4] {
        use crate::DeadLetterReason as R;
        [
            (R::RecipientStopped, self.recipient_stopped),
            (R::DiscardedAtStop, self.discarded_at_stop),
            (R::Lost, self.lost),
            (R::MailboxFull, self.mailbox_full),
        ]
    }
}

/// What the scheduler's worker threads are doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerMetrics {
    /// Worker threads (not counting blocking actors' own threads).
    pub total: usize,
    /// Running actors, or about to.
    pub busy: usize,
    /// Looking for work in the other workers' queues.
    pub searching: usize,
    /// Parked, waiting to be woken.
    pub parked: usize,
    /// Actors taken from another worker's queue since the start.
    pub steals: u64,
}

/// A system's figures at one moment: see
/// [`SystemHandle::metrics`](crate::SystemHandle::metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeMetrics {
    /// Whether the system observes its actors
    /// ([`ActorSystemBuilder::observe`](crate::ActorSystemBuilder::observe));
    /// without it `kinds` is empty.
    pub observing: bool,
    /// Per kind of actor, sorted by kind.
    pub kinds: Vec<KindMetrics>,
    /// Dead letters since the start, by reason.
    pub dead_letters: DeadLetterCounts,
    /// The scheduler's workers.
    pub workers: WorkerMetrics,
    /// Timers armed and not yet fired or cancelled.
    pub timers_armed: usize,
    /// Time since the system started.
    pub uptime: Duration,
}

/// What one kind's stopped actors left behind, and how many started.
#[derive(Default)]
struct KindTotals {
    name: &'static str,
    spawned: u64,
    stopped: u64,
    handled: u64,
    restarts: u64,
    failures: u64,
}

#[derive(Default)]
struct Shard {
    slots: Vec<Option<std::sync::Arc<ActorStats>>>,
    free: Vec<u32>,
    kinds: HashMap<TypeId, KindTotals, BuildTypeIdHasher>,
}

/// A `TypeId` is a hash already: use its bits as they are instead of
/// hashing them again (a spawn looks its kind up once).
#[derive(Default, Clone, Copy)]
struct BuildTypeIdHasher;

#[derive(Default)]
struct TypeIdHasher(u64);

impl std::hash::BuildHasher for BuildTypeIdHasher {
    type Hasher = TypeIdHasher;
    fn build_hasher(&self) -> TypeIdHasher {
        TypeIdHasher(0)
    }
}

impl std::hash::Hasher for TypeIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64 ^ (n >> 64) as u64;
    }
}

thread_local! {
    /// This thread's shard: spawns from one thread (a worker running a
    /// supervisor) take a lock no other thread usually wants, on a line
    /// that stays in this core's cache.
    static HOME_SHARD: usize = {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) as usize % SHARDS
    };
}

/// The table of live actors of one observed system.
pub(crate) struct LiveActors {
    shards: Box<[Mutex<Shard>]>,
    /// Bumped by each observer's request for fresh depth samples.
    pub(crate) epoch: AtomicU32,
    created: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LiveActors {
    pub(crate) fn new() -> Self {
        LiveActors {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            epoch: AtomicU32::new(0),
            created: Instant::now(),
        }
    }

    /// Enters a newly spawned actor.
    pub(crate) fn insert<A: 'static>(
        &self,
        id: ActorId,
        parent: Option<ActorId>,
    ) -> std::sync::Arc<ActorStats> {
        let kind = TypeId::of::<A>();
        let kind_name = std::any::type_name::<A>();
        let home = HOME_SHARD.with(|h| *h);
        let mut shard = lock(&self.shards[home]);
        let slot = match shard.free.pop() {
            Some(slot) => slot,
            None => {
                shard.slots.push(None);
                (shard.slots.len() - 1) as u32
            }
        };
        let stats = std::sync::Arc::new(ActorStats {
            id,
            kind,
            kind_name,
            parent: parent.map_or(0, |p| p.0),
            shard: home as u32,
            slot,
            started_ms: self.now_ms(),
            handled: AtomicU64::new(0),
            depth: AtomicU32::new(0),
            sampled_epoch: AtomicU32::new(self.epoch.load(Ordering::Relaxed)),
            restarts: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            last_failure: Mutex::new(None),
            gone: AtomicBool::new(false),
        });
        shard.slots[slot as usize] = Some(stats.clone());
        let totals = shard.kinds.entry(kind).or_default();
        totals.name = kind_name;
        totals.spawned += 1;
        stats
    }

    /// Takes a stopped actor out, keeping what it counted in its kind's
    /// totals.
    pub(crate) fn remove(&self, stats: &ActorStats) {
        if stats.gone.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut shard = lock(&self.shards[stats.shard as usize]);
        let shard = &mut *shard;
        if let Some(entry) = shard.slots.get_mut(stats.slot as usize) {
            if entry.as_ref().is_some_and(|s| s.id == stats.id) {
                *entry = None;
                shard.free.push(stats.slot);
            }
        }
        let totals = shard.kinds.entry(stats.kind).or_default();
        totals.stopped += 1;
        totals.handled += stats.handled.load(Ordering::Relaxed);
        totals.restarts += u64::from(stats.restarts.load(Ordering::Relaxed));
        totals.failures += u64::from(stats.failures.load(Ordering::Relaxed));
    }

    fn now_ms(&self) -> u64 {
        self.created.elapsed().as_millis() as u64
    }

    /// Asks every actor for a fresh depth sample at the end of its next
    /// turn.
    pub(crate) fn request_samples(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls `f` with every live actor, shard by shard. Samples are copied
    /// out before `f` runs, so `f` may spawn or stop actors.
    pub(crate) fn for_each(&self, mut f: impl FnMut(ActorSample)) {
        let mut batch = Vec::new();
        for shard in self.shards.iter() {
            let now = self.now_ms();
            batch.extend(lock(shard).slots.iter().flatten().map(|s| s.sample(now)));
            batch.drain(..).for_each(&mut f);
        }
    }

    /// One actor's sample and its latest failure, if it is alive.
    pub(crate) fn find(&self, id: ActorId) -> Option<(ActorSample, Option<ExitReason>)> {
        self.shards.iter().find_map(|shard| {
            let shard = lock(shard);
            let stats = shard.slots.iter().flatten().find(|s| s.id == id)?;
            let failure = lock(&stats.last_failure).as_deref().cloned();
            Some((stats.sample(self.now_ms()), failure))
        })
    }

    /// Totals per kind, sorted by kind.
    pub(crate) fn kinds(&self) -> Vec<KindMetrics> {
        let mut by_kind: HashMap<TypeId, KindMetrics, BuildTypeIdHasher> = HashMap::default();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            for (kind, t) in &shard.kinds {
                let m = by_kind.entry(*kind).or_insert_with(|| empty(t.name));
                m.spawned += t.spawned;
                m.stopped += t.stopped;
                m.messages_handled += t.handled;
                m.restarts += t.restarts;
                m.failures += t.failures;
            }
            for s in shard.slots.iter().flatten() {
                let m = by_kind.entry(s.kind).or_insert_with(|| empty(s.kind_name));
                let depth = s.depth.load(Ordering::Relaxed);
                m.messages_handled += s.handled.load(Ordering::Relaxed);
                m.restarts += u64::from(s.restarts.load(Ordering::Relaxed));
                m.failures += u64::from(s.failures.load(Ordering::Relaxed));
                m.mailbox_depth += u64::from(depth);
                m.max_mailbox_depth = m.max_mailbox_depth.max(depth);
            }
        }
        let mut kinds: Vec<KindMetrics> = by_kind
            .into_values()
            .map(|mut m| {
                m.alive = m.spawned.saturating_sub(m.stopped);
                m
            })
            .collect();
        kinds.sort_by(|a, b| a.kind.cmp(b.kind));
        kinds
    }
}

fn empty(kind: &'static str) -> KindMetrics {
    KindMetrics {
        kind,
        alive: 0,
        spawned: 0,
        stopped: 0,
        restarts: 0,
        failures: 0,
        messages_handled: 0,
        mailbox_depth: 0,
        max_mailbox_depth: 0,
    }
}
