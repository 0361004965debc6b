//! Durable reminders: fired at their time and period, surviving a full
//! restart, missed ticks fired once, never one tick on two nodes, only by
//! the node that hosts the actor.

mod common;

use common::{PgDatabase, LIVENESS};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use troubadour::prelude::*;
use troubadour_persistence::*;

const POLL: Duration = Duration::from_millis(20);
const HOUR: Duration = Duration::from_secs(3600);

/// Records the reminders it gets.
struct Alarm {
    log: Arc<Mutex<Vec<Reminder>>>,
}
impl Actor for Alarm {}
impl Handler<Reminder> for Alarm {
    fn handle(&mut self, r: Reminder, _: &mut Context<Self>) {
        self.log.lock().unwrap().push(r);
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIVENESS, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A reminder service on `store` delivering kind "alarm" to one actor.
fn service(
    system: &ActorSystem,
    store: impl ReminderStore,
) -> (Reminders, Arc<Mutex<Vec<Reminder>>>) {
    let log = Arc::new(Mutex::new(vec![]));
    let alarm = system.spawn(Alarm { log: log.clone() }).unwrap();
    let reminders = Reminders::start(system, store, POLL);
    reminders.deliver("alarm", move |_, r| {
        let _ = alarm.tell(r);
    });
    (reminders, log)
}

fn each_store(
    test: impl Fn(&dyn Fn() -> Box<dyn Fn(&ActorSystem) -> (Reminders, Arc<Mutex<Vec<Reminder>>>)>),
) {
    let memory = MemoryStore::new();
    test(&|| {
        let m = memory.clone();
        Box::new(move |system: &ActorSystem| service(system, m.clone()))
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reminders.db");
    test(&|| {
        let path = path.clone();
        Box::new(move |system: &ActorSystem| service(system, SqliteStore::open(&path).unwrap()))
    });
    let db = Arc::new(PgDatabase::new());
    test(&|| {
        let db = db.clone();
        Box::new(move |system: &ActorSystem| {
            let store = db
                .runtime
                .block_on(PostgresStore::connect(&db.url))
                .unwrap();
            service(system, store)
        })
    });
}

#[test]
fn a_reminder_fires_at_its_time_then_every_period() {
    each_store(|node| {
        let system = ActorSystem::new();
        let (reminders, log) = node()(&system);
        let first = SystemTime::now();
        system
            .block_on(reminders.remind(
                "alarm",
                "a",
                "tick",
                first,
                Some(Duration::from_millis(50)),
            ))
            .unwrap();
        wait_until("three ticks", || log.lock().unwrap().len() >= 3);
        let ticks: Vec<SystemTime> = log.lock().unwrap().iter().map(|r| r.due).collect();
        for pair in ticks.windows(2) {
            let gap = pair[1].duration_since(pair[0]).unwrap();
            assert!(
                gap >= Duration::from_millis(50) && gap.as_millis() % 50 == 0,
                "ticks {pair:?} are not whole periods apart"
            );
        }
        assert!(log.lock().unwrap().iter().all(|r| r.name == "tick"));
        // Cancelled: listed no more.
        assert!(system
            .block_on(reminders.cancel("alarm", "a", "tick"))
            .unwrap());
        assert!(system
            .block_on(reminders.list("alarm", "a"))
            .unwrap()
            .is_empty());
    });
}

#[test]
fn a_reminder_survives_a_full_restart() {
    each_store(|node| {
        let make = node();
        {
            // The first run registers it, due in a moment, and stops
            // before it fires.
            let system = ActorSystem::new();
            let (reminders, _) = make(&system);
            let soon = SystemTime::now() + Duration::from_millis(300);
            system
                .block_on(reminders.remind("alarm", "r", "wake", soon, None))
                .unwrap();
            drop(reminders);
            system.shutdown(LIVENESS).unwrap();
        }
        let system = ActorSystem::new();
        let (_reminders, log) = make(&system);
        wait_until("the reminder after the restart", || {
            log.lock().unwrap().iter().any(|r| r.name == "wake")
        });
    });
}

#[test]
fn ticks_missed_while_down_fire_once() {
    let system = ActorSystem::new();
    let (reminders, log) = service(&system, MemoryStore::new());
    // Due ten hours ago, hourly: ten ticks were missed.
    let long_ago = SystemTime::now() - 10 * HOUR;
    system
        .block_on(reminders.remind("alarm", "m", "hourly", long_ago, Some(HOUR)))
        .unwrap();
    wait_until("the missed tick", || !log.lock().unwrap().is_empty());
    let polls = reminders.polls();
    wait_until("three more polls", || reminders.polls() >= polls + 3);
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "missed ticks fired more than once"
    );
    let listed = system.block_on(reminders.list("alarm", "m")).unwrap();
    let next = SystemTime::UNIX_EPOCH + Duration::from_millis(listed[0].due_ms as u64);
    assert!(next > SystemTime::now() && next <= SystemTime::now() + HOUR);
}

#[test]
fn two_nodes_never_fire_one_tick_twice() {
    // Two services over one store, both believing they host every actor
    // (as two nodes during a partition would).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let db = PgDatabase::new();
    let stores: Vec<(Box<dyn ReminderStore>, Box<dyn ReminderStore>)> = vec![
        (
            Box::new(SqliteStore::open(&path).unwrap()),
            Box::new(SqliteStore::open(&path).unwrap()),
        ),
        (
            Box::new(
                db.runtime
                    .block_on(PostgresStore::connect(&db.url))
                    .unwrap(),
            ),
            Box::new(
                db.runtime
                    .block_on(PostgresStore::connect(&db.url))
                    .unwrap(),
            ),
        ),
    ];
    for (a, b) in stores {
        let system = ActorSystem::new();
        // Every delivery, by either node, as (actor id, tick).
        let fired: Arc<Mutex<Vec<(String, SystemTime)>>> = Arc::default();
        let node = |store: Box<dyn ReminderStore>| {
            let reminders = Reminders::start(&system, Boxed(store), POLL);
            let fired = fired.clone();
            reminders.deliver("alarm", move |id, r| {
                fired.lock().unwrap().push((id.to_string(), r.due));
            });
            reminders
        };
        let (one, two) = (node(a), node(b));
        let now = SystemTime::now();
        for i in 0..20 {
            system
                .block_on(one.remind(
                    "alarm",
                    &format!("x{i}"),
                    "tick",
                    now,
                    Some(Duration::from_millis(40)),
                ))
                .unwrap();
        }
        wait_until("200 ticks", || one.fired() + two.fired() >= 200);
        drop((one, two));
        let fired = fired.lock().unwrap();
        let distinct: HashSet<&(String, SystemTime)> = fired.iter().collect();
        assert_eq!(
            distinct.len(),
            fired.len(),
            "a tick of one actor was fired twice"
        );
    }
}

/// A boxed store as a store.
struct Boxed(Box<dyn ReminderStore>);
impl ReminderStore for Boxed {
    fn put_reminder(&self, r: ReminderRecord) -> store::StoreFuture<'_, ()> {
        self.0.put_reminder(r)
    }
    fn cancel_reminder(&self, kind: &str, id: &str, name: &str) -> store::StoreFuture<'_, bool> {
        self.0.cancel_reminder(kind, id, name)
    }
    fn reminders_of(&self, kind: &str, id: &str) -> store::StoreFuture<'_, Vec<ReminderRecord>> {
        self.0.reminders_of(kind, id)
    }
    fn due_reminders(
        &self,
        now_ms: i64,
        max: usize,
    ) -> store::StoreFuture<'_, Vec<ReminderRecord>> {
        self.0.due_reminders(now_ms, max)
    }
    fn advance_reminder(
        &self,
        kind: &str,
        id: &str,
        name: &str,
        seen_ms: i64,
        next_ms: Option<i64>,
    ) -> store::StoreFuture<'_, bool> {
        self.0.advance_reminder(kind, id, name, seen_ms, next_ms)
    }
}

#[test]
fn a_node_fires_only_the_reminders_of_actors_it_hosts() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let (reminders, log) = service(&system, store.clone());
    reminders.owned_by(|_, id| id == "mine");
    let now = SystemTime::now();
    system
        .block_on(reminders.remind("alarm", "mine", "a", now, None))
        .unwrap();
    system
        .block_on(reminders.remind("alarm", "theirs", "b", now, None))
        .unwrap();
    wait_until("its own reminder", || !log.lock().unwrap().is_empty());
    let polls = reminders.polls();
    wait_until("three more polls", || reminders.polls() >= polls + 3);
    let names: Vec<String> = log.lock().unwrap().iter().map(|r| r.name.clone()).collect();
    assert_eq!(names, vec!["a".to_string()]);
    // The other node's reminder waits for its owner.
    assert_eq!(
        system
            .block_on(reminders.list("alarm", "theirs"))
            .unwrap()
            .len(),
        1
    );
}

// An `Alarm` spawned as a virtual actor manages its own reminders
// through its context.

struct Arm {
    name: &'static str,
    every: Duration,
}
impl Message for Arm {
    type Reply = Result<(), ReminderError>;
}
impl AsyncHandler<Arm> for Alarm {
    async fn handle(&mut self, a: Arm, ctx: &mut Context<Self>) -> Result<(), ReminderError> {
        ctx.remind(a.name, SystemTime::now(), Some(a.every)).await
    }
}

struct Disarm(&'static str);
impl Message for Disarm {
    type Reply = Result<bool, ReminderError>;
}
impl AsyncHandler<Disarm> for Alarm {
    async fn handle(&mut self, d: Disarm, ctx: &mut Context<Self>) -> Result<bool, ReminderError> {
        ctx.cancel_reminder(d.0).await
    }
}

struct Armed;
impl Message for Armed {
    type Reply = Result<Vec<String>, ReminderError>;
}
impl AsyncHandler<Armed> for Alarm {
    async fn handle(
        &mut self,
        _: Armed,
        ctx: &mut Context<Self>,
    ) -> Result<Vec<String>, ReminderError> {
        let set = ctx.list_reminders().await?;
        Ok(set.into_iter().map(|r| r.name).collect())
    }
}

fn spawn_alarm(
    system: &ActorSystem,
    options: SpawnOptions,
) -> (ActorRef<Alarm>, Arc<Mutex<Vec<Reminder>>>) {
    let ticks = Arc::new(Mutex::new(vec![]));
    let s = system
        .spawn_with_options(options, Alarm { log: ticks.clone() })
        .unwrap();
    (s, ticks)
}

#[test]
fn an_actor_sets_lists_and_cancels_its_own_reminders_from_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let system = ActorSystem::new();
    let store = SqliteStore::open(dir.path().join("reminders.db")).unwrap();
    let reminders = Reminders::start(&system, store, POLL);
    // Delivered by the entity's id, as a cluster's deliverer does.
    let to = system.handle();
    reminders.deliver("sentinel", move |id, r| {
        if let Some(s) = to.whereis::<Alarm>(id) {
            let _ = s.tell(r);
        }
    });
    let (north, ticks) = spawn_alarm(
        &system,
        SpawnOptions::new()
            .name("north")
            .entity(troubadour::EntityId::new("sentinel", "north")),
    );
    // Another entity of the kind, whose reminders are its own.
    let (south, _) = spawn_alarm(
        &system,
        SpawnOptions::new()
            .name("south")
            .entity(troubadour::EntityId::new("sentinel", "south")),
    );

    north
        .ask(Arm {
            name: "patrol",
            every: Duration::from_millis(50),
        })
        .wait()
        .unwrap()
        .unwrap();
    south
        .ask(Arm {
            name: "rest",
            every: HOUR,
        })
        .wait()
        .unwrap()
        .unwrap();
    // Kept under the actor's entity, as the service's own calls see it.
    let stored = system
        .block_on(reminders.list("sentinel", "north"))
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].name, "patrol");
    assert_eq!(stored[0].period_ms, Some(50));
    assert_eq!(north.ask(Armed).wait().unwrap().unwrap(), ["patrol"]);
    assert_eq!(south.ask(Armed).wait().unwrap().unwrap(), ["rest"]);

    wait_until("the actor's own reminder ticks twice", || {
        ticks.lock().unwrap().len() >= 2
    });
    assert!(ticks.lock().unwrap().iter().all(|r| r.name == "patrol"));

    assert!(north.ask(Disarm("patrol")).wait().unwrap().unwrap());
    assert!(!north.ask(Disarm("patrol")).wait().unwrap().unwrap());
    assert!(north.ask(Armed).wait().unwrap().unwrap().is_empty());
    // The other entity's reminder is untouched.
    assert_eq!(south.ask(Armed).wait().unwrap().unwrap(), ["rest"]);
    system.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn an_actor_without_an_entity_or_without_a_service_gets_a_typed_error() {
    let system = ActorSystem::new();
    // No service on this system yet.
    let (entity, _) = spawn_alarm(
        &system,
        SpawnOptions::new().entity(troubadour::EntityId::new("sentinel", "east")),
    );
    let patrol = || Arm {
        name: "patrol",
        every: Duration::from_millis(50),
    };
    let e = entity.ask(patrol()).wait().unwrap().unwrap_err();
    assert_eq!(e, ReminderError::NoService);
    assert!(e.to_string().contains("Reminders::start"), "{e}");

    let reminders = Reminders::start(&system, MemoryStore::new(), POLL);
    // An ordinary actor has no identity to keep reminders under.
    let (plain, _) = spawn_alarm(&system, SpawnOptions::new());
    let e = plain.ask(patrol()).wait().unwrap().unwrap_err();
    assert_eq!(e, ReminderError::NotAnEntity { actor: plain.id() });
    assert!(e.to_string().contains("SpawnOptions::entity"), "{e}");
    assert_eq!(
        plain.ask(Armed).wait().unwrap().unwrap_err(),
        ReminderError::NotAnEntity { actor: plain.id() }
    );
    // The entity now finds the service started after it.
    entity.ask(patrol()).wait().unwrap().unwrap();
    assert_eq!(
        system.block_on(reminders.list("sentinel", "east")).unwrap()[0].name,
        "patrol"
    );
    system.shutdown(Duration::from_secs(5)).unwrap();
}
