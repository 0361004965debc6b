//! Durable reminders (Orleans' reminders, Cloudflare Durable Object
//! alarms): "tell actor `kind`/`id` `name` at this time, then every
//! period", kept in a store so they survive crashes and full restarts.
//!
//! Each node runs a [`Reminders`] service over the shared store. It looks
//! for due reminders every poll period, and for each one it may fire (its
//! `owns` check says this node hosts the actor: in a cluster, the owner of
//! the actor's shard) it first moves the reminder's due time on in the
//! store with a compare-and-set on the due time it read, and only if that
//! succeeds delivers a [`Reminder`] through the kind's deliverer (which
//! activates the actor if needed: a cluster's `entity(..).tell(..)`). So
//! one tick is delivered by at most one node, whatever two nodes believe
//! about ownership. A crash between the store's move and the delivery
//! loses that tick (the next fires as usual); the due times are wall-clock
//! times, since they must outlive the process.
//!
//! Ticks missed while no node was up fire **once** when a node sees the
//! reminder again, and the next due time is the first tick after now.
//!
//! An actor sets its own reminders through its context ([`Remind`]:
//! `ctx.remind(name, first, every)`): the service is attached to its
//! system (`SystemHandle::set_extension`), and the actor is named by the
//! identity its activator gave it (`Context::entity`: the cluster gives
//! every entity its kind and id).

use crate::error::{JournalError, ReminderError};
use crate::store::StoreFuture;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use troubadour::{Actor, Context, Message, SystemHandle};

/// A reminder as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReminderRecord {
    /// The actor's kind (the deliverer it goes through).
    pub kind: String,
    /// The actor's id within its kind.
    pub id: String,
    /// The reminder's name, unique per actor.
    pub name: String,
    /// When it is due next, in milliseconds since the Unix epoch.
    pub due_ms: i64,
    /// Its period in milliseconds (`None`: fires once).
    pub period_ms: Option<i64>,
}

/// Where reminders are kept. Implemented by the in-memory, SQLite and
/// PostgreSQL stores.
pub trait ReminderStore: Send + Sync + 'static {
    /// Registers or replaces a reminder.
    fn put_reminder(&self, reminder: ReminderRecord) -> StoreFuture<'_, ()>;

    /// Removes a reminder; `true` if there was one.
    fn cancel_reminder(&self, kind: &str, id: &str, name: &str) -> StoreFuture<'_, bool>;

    /// The reminders of one actor.
    fn reminders_of(&self, kind: &str, id: &str) -> StoreFuture<'_, Vec<ReminderRecord>>;

    /// Up to `max` reminders due at `now_ms` or before.
    fn due_reminders(&self, now_ms: i64, max: usize) -> StoreFuture<'_, Vec<ReminderRecord>>;

    /// Moves a reminder whose due time is still `seen_ms` to `next_ms`
    /// (removes it when `None`); `true` if this call moved it.
    fn advance_reminder(
        &self,
        kind: &str,
        id: &str,
        name: &str,
        seen_ms: i64,
        next_ms: Option<i64>,
    ) -> StoreFuture<'_, bool>;
}

/// What an actor receives when one of its reminders is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reminder {
    /// The reminder's name.
    pub name: String,
    /// The tick being fired.
    pub due: SystemTime,
}

impl Message for Reminder {
    type Reply = ();
}

type Deliver = Arc<dyn Fn(&str, Reminder) + Send + Sync>;
type Owns = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// The node's reminder service. Cheap to clone; its task ends when the
/// last clone is dropped, and its system holds one until it shuts down
/// (so that the system's actors find it).
#[derive(Clone)]
pub struct Reminders {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn ReminderStore>,
    kinds: RwLock<HashMap<String, Deliver>>,
    owns: RwLock<Owns>,
    polls: AtomicU64,
    fired: AtomicU64,
}

/// How many due reminders one poll takes.
const POLL_MAX: usize = 1000;

fn millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_millis().min(i64::MAX as u128) as i64),
    }
}

fn time_of(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// The first tick after `now` of a reminder due at `due` every `period`
/// (`None` for a one-shot one).
fn next_tick(due: i64, period: Option<i64>, now: i64) -> Option<i64> {
    let p = period?.max(1);
    let behind = now.saturating_sub(due).max(0);
    Some(due.saturating_add((behind / p + 1).saturating_mul(p)))
}

impl Reminders {
    /// Starts the service for `system`, looking for due reminders every
    /// `poll`, and attaches it to the system, where the system's actors
    /// find it ([`Remind`]; a later `start` on the same system takes its
    /// place there). It fires reminders of every actor; in a cluster, give
    /// [`owned_by`](Reminders::owned_by) the cluster's ownership check.
    pub fn start(system: &SystemHandle, store: impl ReminderStore, poll: Duration) -> Self {
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            kinds: RwLock::new(HashMap::new()),
            owns: RwLock::new(Arc::new(|_, _| true)),
            polls: AtomicU64::new(0),
            fired: AtomicU64::new(0),
        });
        system
            .tokio_handle()
            .spawn(poll_loop(Arc::downgrade(&shared), poll));
        let reminders = Reminders { shared };
        system.set_extension(reminders.clone());
        reminders
    }

    /// Fires only reminders of actors `owns(kind, id)` says this node
    /// hosts (in a cluster: the owner of the actor's shard). Set it before
    /// registering kinds; until then every actor counts as hosted here.
    pub fn owned_by(&self, owns: impl Fn(&str, &str) -> bool + Send + Sync + 'static) {
        *self.shared.owns.write().unwrap() = Arc::new(owns);
    }

    /// Delivers reminders of kind `kind` with `deliver(id, reminder)`:
    /// find or activate the actor and tell it.
    pub fn deliver(&self, kind: &str, deliver: impl Fn(&str, Reminder) + Send + Sync + 'static) {
        self.shared
            .kinds
            .write()
            .unwrap()
            .insert(kind.to_string(), Arc::new(deliver));
    }

    /// Reminds actor `kind`/`id` with `name` at `first`, then every
    /// `every` (once if `None`). Replaces a reminder of the same name.
    pub async fn remind(
        &self,
        kind: &str,
        id: &str,
        name: &str,
        first: SystemTime,
        every: Option<Duration>,
    ) -> Result<(), JournalError> {
        self.shared
            .store
            .put_reminder(ReminderRecord {
                kind: kind.to_string(),
                id: id.to_string(),
                name: name.to_string(),
                due_ms: millis(first),
                period_ms: every.map(|p| (p.as_millis().min(i64::MAX as u128) as i64).max(1)),
            })
            .await
    }

    /// Cancels a reminder; `true` if there was one.
    pub async fn cancel(&self, kind: &str, id: &str, name: &str) -> Result<bool, JournalError> {
        self.shared.store.cancel_reminder(kind, id, name).await
    }

    /// The reminders of an actor.
    pub async fn list(&self, kind: &str, id: &str) -> Result<Vec<ReminderRecord>, JournalError> {
        self.shared.store.reminders_of(kind, id).await
    }

    /// The reminders of one actor, as a handle the actor keeps: what
    /// Orleans' `RegisterOrUpdateReminder` is to a grain.
    ///
    /// ```
    /// # use std::time::{Duration, SystemTime};
    /// # use troubadour::prelude::*;
    /// # use troubadour_persistence::{MemoryStore, Reminders};
    /// let system = ActorSystem::new();
    /// let reminders = Reminders::start(&system, MemoryStore::new(), Duration::from_secs(1));
    /// let mine = reminders.of("vehicle", "0012.01214");
    /// system.block_on(mine.remind("report", SystemTime::now(), Some(Duration::from_secs(60)))).unwrap();
    /// assert_eq!(system.block_on(mine.list()).unwrap()[0].name, "report");
    /// # system.shutdown(Duration::from_secs(5)).unwrap();
    /// ```
    pub fn of(&self, kind: &str, id: &str) -> ActorReminders {
        ActorReminders {
            reminders: self.clone(),
            kind: kind.to_string(),
            id: id.to_string(),
        }
    }

    /// Polls done so far (each looks for due reminders once).
    pub fn polls(&self) -> u64 {
        self.shared.polls.load(Ordering::SeqCst)
    }

    /// Reminders this node has fired.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

/// One actor's reminders ([`Reminders::of`]).
#[derive(Clone)]
pub struct ActorReminders {
    reminders: Reminders,
    kind: String,
    id: String,
}

impl ActorReminders {
    /// Reminds this actor with `name` at `first`, then every `every` (once
    /// if `None`); replaces a reminder of the same name.
    pub async fn remind(
        &self,
        name: &str,
        first: SystemTime,
        every: Option<Duration>,
    ) -> Result<(), JournalError> {
        self.reminders
            .remind(&self.kind, &self.id, name, first, every)
            .await
    }

    /// Cancels this actor's reminder `name`; `true` if there was one.
    pub async fn cancel(&self, name: &str) -> Result<bool, JournalError> {
        self.reminders.cancel(&self.kind, &self.id, name).await
    }

    /// This actor's reminders.
    pub async fn list(&self) -> Result<Vec<ReminderRecord>, JournalError> {
        self.reminders.list(&self.kind, &self.id).await
    }
}

/// An actor's own reminders, from its context: Orleans'
/// `RegisterOrUpdateReminder` from within a grain. The actor must be a
/// virtual actor (a cluster's entity, or spawned with
/// [`SpawnOptions::entity`](troubadour::SpawnOptions::entity)), whose kind
/// and id key its reminders, and its system must run a [`Reminders`]
/// service; its reminders then reach it through the deliverer of its kind
/// ([`Reminders::deliver`]), activating it if it was passivated.
///
/// The futures hold nothing of the context, so a synchronous handler may
/// also hand them to a task.
///
/// ```
/// # use std::time::{Duration, SystemTime};
/// use troubadour::prelude::*;
/// use troubadour::EntityId;
/// use troubadour_persistence::{MemoryStore, Remind, Reminder, ReminderError, Reminders};
///
/// struct Vehicle { reports: u32 }
/// impl Actor for Vehicle {}
///
/// struct StartReporting;
/// impl Message for StartReporting { type Reply = Result<(), ReminderError>; }
/// impl AsyncHandler<StartReporting> for Vehicle {
///     async fn handle(&mut self, _: StartReporting, ctx: &mut Context<Self>) -> Result<(), ReminderError> {
///         ctx.remind("report", SystemTime::now(), Some(Duration::from_secs(60))).await
///     }
/// }
/// impl Handler<Reminder> for Vehicle {
///     fn handle(&mut self, _: Reminder, _: &mut Context<Self>) { self.reports += 1; }
/// }
///
/// let system = ActorSystem::new();
/// let reminders = Reminders::start(&system, MemoryStore::new(), Duration::from_secs(1));
/// // How a vehicle's reminder reaches it (in a cluster: `cluster.entity(id).tell(r)`).
/// let to = system.handle();
/// reminders.deliver("vehicle", move |id, r| {
///     if let Some(v) = to.whereis::<Vehicle>(id) {
///         let _ = v.tell(r);
///     }
/// });
/// let id = EntityId::new("vehicle", "0012.01214");
/// let options = SpawnOptions::new().name("0012.01214").entity(id);
/// let v = system.spawn_with_options(options, Vehicle { reports: 0 }).unwrap();
/// v.ask(StartReporting).wait().unwrap().unwrap();
/// let set = system.block_on(reminders.of("vehicle", "0012.01214").list()).unwrap();
/// assert_eq!(set[0].name, "report");
/// # system.shutdown(Duration::from_secs(5)).unwrap();
/// ```
pub trait Remind {
    /// This actor's reminders, as a handle to keep or to move into a
    /// task.
    fn reminders(&self) -> Result<ActorReminders, ReminderError>;

    /// Reminds this actor with `name` at `first`, then every `every` (once
    /// if `None`); replaces its reminder of the same name. Done once the
    /// store has it.
    fn remind(
        &self,
        name: &str,
        first: SystemTime,
        every: Option<Duration>,
    ) -> impl Future<Output = Result<(), ReminderError>> + Send + 'static {
        let (reminders, name) = (self.reminders(), name.to_string());
        async move { Ok(reminders?.remind(&name, first, every).await?) }
    }

    /// Cancels this actor's reminder `name`; `true` if there was one.
    fn cancel_reminder(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<bool, ReminderError>> + Send + 'static {
        let (reminders, name) = (self.reminders(), name.to_string());
        async move { Ok(reminders?.cancel(&name).await?) }
    }

    /// This actor's reminders as stored.
    fn list_reminders(
        &self,
    ) -> impl Future<Output = Result<Vec<ReminderRecord>, ReminderError>> + Send + 'static {
        let reminders = self.reminders();
        async move { Ok(reminders?.list().await?) }
    }
}

impl<A: Actor> Remind for Context<A> {
    fn reminders(&self) -> Result<ActorReminders, ReminderError> {
        let entity = self
            .entity()
            .ok_or(ReminderError::NotAnEntity { actor: self.id() })?;
        let service = self
            .system()
            .extension::<Reminders>()
            .ok_or(ReminderError::NoService)?;
        Ok(service.of(entity.kind(), entity.id()))
    }
}

async fn poll_loop(shared: Weak<Shared>, poll: Duration) {
    loop {
        tokio::time::sleep(poll).await;
        let Some(s) = shared.upgrade() else { return };
        if let Err(e) = poll_once(&s).await {
            tracing::warn!(error = %e, "reminders: a poll failed; trying again");
        }
        s.polls.fetch_add(1, Ordering::SeqCst);
    }
}

async fn poll_once(s: &Shared) -> Result<(), JournalError> {
    let now = millis(SystemTime::now());
    for r in s.store.due_reminders(now, POLL_MAX).await? {
        let owns = s.owns.read().unwrap().clone();
        if !owns(&r.kind, &r.id) {
            continue;
        }
        let Some(deliver) = s.kinds.read().unwrap().get(&r.kind).cloned() else {
            continue;
        };
        let next = next_tick(r.due_ms, r.period_ms, now);
        if s.store
            .advance_reminder(&r.kind, &r.id, &r.name, r.due_ms, next)
            .await?
        {
            s.fired.fetch_add(1, Ordering::SeqCst);
            deliver(
                &r.id,
                Reminder {
                    name: r.name.clone(),
                    due: time_of(r.due_ms),
                },
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::next_tick;

    #[test]
    fn missed_ticks_collapse_into_one_and_the_next_is_after_now() {
        // Due at 1,000 every 100; now 1,950: ticks 1,000 … 1,900 missed.
        assert_eq!(next_tick(1_000, Some(100), 1_950), Some(2_000));
        // On time.
        assert_eq!(next_tick(1_000, Some(100), 1_000), Some(1_100));
        // Exactly on a later tick: the next is after it.
        assert_eq!(next_tick(1_000, Some(100), 1_200), Some(1_300));
        assert_eq!(next_tick(1_000, None, 5_000), None);
    }
}
