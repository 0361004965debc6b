//! Write-behind: states kept in memory, written in batches; what a crash
//! may lose is bounded by the flush generations, checked against kill -9.

mod common;

use common::{PgDatabase, LIVENESS};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_persistence::store::StoreFuture;
use troubadour_persistence::*;

/// Long enough that only the flushes a test asks for happen.
const NEVER: Duration = Duration::from_secs(3600);

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
struct Reading {
    value: u64,
    changes: u64,
}

struct Sensor {
    reading: Durable<Reading>,
}

impl Actor for Sensor {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.reading.loading())
    }
}

struct Set(u64);
impl Message for Set {
    type Reply = u64;
}
impl Handler<Set> for Sensor {
    fn handle(&mut self, Set(v): Set, _: &mut Context<Self>) -> u64 {
        self.reading.update(|r| {
            r.value = v;
            r.changes += 1;
            r.changes
        })
    }
}

struct Read;
impl Message for Read {
    type Reply = Reading;
}
impl Handler<Read> for Sensor {
    fn handle(&mut self, _: Read, _: &mut Context<Self>) -> Reading {
        (*self.reading).clone()
    }
}

/// Waits until the sensor's last change is durable.
struct Flushed;
impl Message for Flushed {
    type Reply = Result<(), JournalError>;
}
impl AsyncHandler<Flushed> for Sensor {
    async fn handle(&mut self, _: Flushed, _: &mut Context<Self>) -> Result<(), JournalError> {
        self.reading.flushed().await
    }
}

fn sensor(system: &ActorSystem, behind: &WriteBehind, key: &str) -> ActorRef<Sensor> {
    sensor_at(system, behind, key, 0)
}

/// A sensor activated in a cluster's shard at `epoch`.
fn sensor_at(
    system: &ActorSystem,
    behind: &WriteBehind,
    key: &str,
    epoch: u64,
) -> ActorRef<Sensor> {
    system
        .spawn(Sensor {
            reading: Durable::new(behind, key, Reading::default()).epoch(epoch),
        })
        .unwrap()
}

/// The newer epoch that superseded the sensor's state, if any.
struct Superseding;
impl Message for Superseding {
    type Reply = Option<u64>;
}
impl Handler<Superseding> for Sensor {
    fn handle(&mut self, _: Superseding, _: &mut Context<Self>) -> Option<u64> {
        self.reading.superseded_by()
    }
}

/// A state store that counts the batches it is given.
#[derive(Clone)]
struct Counted {
    inner: Arc<dyn StateStore>,
    batches: Arc<Mutex<Vec<usize>>>,
}
impl StateStore for Counted {
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>> {
        self.batches.lock().unwrap().push(states.len());
        self.inner.write_states(states)
    }
    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>> {
        self.inner.read_state(key)
    }
    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState> {
        self.inner.claim_state(key, epoch)
    }
}

/// Runs `test` with a state store of each kind; `reopen` gives a store over
/// the same data through new connections.
fn each_store(test: impl Fn(&dyn Fn() -> Arc<dyn StateStore>)) {
    let memory = MemoryStore::new();
    test(&|| Arc::new(memory.clone()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("states.db");
    test(&|| Arc::new(SqliteStore::open(&path).unwrap()));
    let db = PgDatabase::new();
    test(&|| {
        Arc::new(
            db.runtime
                .block_on(PostgresStore::connect(&db.url))
                .unwrap(),
        )
    });
}

#[test]
fn many_changes_reach_the_store_as_one_batch_and_a_new_activation_reads_them() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let batches = Arc::new(Mutex::new(vec![]));
        let store = Counted {
            inner: reopen(),
            batches: batches.clone(),
        };
        let behind = WriteBehind::start(store, NEVER, system.tokio_handle());
        let sensors: Vec<_> = (0..50)
            .map(|i| sensor(&system, &behind, &format!("sensor/{i}")))
            .collect();
        for round in 1..=20 {
            for s in &sensors {
                s.tell(Set(round)).unwrap();
            }
        }
        for s in &sensors {
            assert_eq!(s.ask(Read).timeout(LIVENESS).wait().unwrap().changes, 20);
        }
        system.block_on(behind.flush()).unwrap();
        // 1,000 changes, one write of 50 states.
        assert_eq!(*batches.lock().unwrap(), vec![50]);

        // Another node (a fresh store and flusher) reads what was written.
        let elsewhere = WriteBehind::start(
            Counted {
                inner: reopen(),
                batches: Arc::default(),
            },
            NEVER,
            system.tokio_handle(),
        );
        for i in 0..50 {
            let s = sensor(&system, &elsewhere, &format!("sensor/{i}"));
            assert_eq!(
                s.ask(Read).timeout(LIVENESS).wait().unwrap(),
                Reading {
                    value: 20,
                    changes: 20
                }
            );
        }
    });
}

/// The split brain write-behind must survive: node A hosted the bus at
/// epoch 1 and lost the shard without noticing; node B owns it at epoch 2
/// and has written. What A still writes is refused, B's state stays, A
/// learns it is stale, and the shard coming back to A at a newer epoch
/// writes again.
#[test]
fn a_stale_owner_cannot_overwrite_the_state_of_a_newer_epoch() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let node_a = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let node_b = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let stored = |key: &str| -> u64 {
            let store = reopen();
            let state = system.block_on(store.read_state(key)).unwrap().unwrap();
            state.decode_as::<Reading>().unwrap().value
        };

        let on_a = sensor_at(&system, &node_a, "bus", 1);
        on_a.ask(Set(1)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_a.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));

        let on_b = sensor_at(&system, &node_b, "bus", 2);
        assert_eq!(on_b.ask(Read).timeout(LIVENESS).wait().unwrap().value, 1);
        on_b.ask(Set(2)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_b.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));

        // A, stale, changes the bus again and flushes: refused.
        on_a.ask(Set(99)).timeout(LIVENESS).wait().unwrap();
        match on_a.ask(Flushed).timeout(LIVENESS).wait().unwrap() {
            Err(JournalError::Fenced {
                persistence_id,
                epoch: 1,
                current: 2,
            }) => assert_eq!(persistence_id, "bus"),
            other => panic!("the stale owner's flush should be fenced, got {other:?}"),
        }
        assert_eq!(stored("bus"), 2);
        assert_eq!(
            on_a.ask(Superseding).timeout(LIVENESS).wait().unwrap(),
            Some(2)
        );
        assert_eq!(
            on_b.ask(Superseding).timeout(LIVENESS).wait().unwrap(),
            None
        );
        // Its later changes are not queued: a flush of A writes nothing.
        on_a.ask(Set(100)).timeout(LIVENESS).wait().unwrap();
        system.block_on(node_a.flush()).unwrap();
        assert_eq!(stored("bus"), 2);
        // A stale activation started on A at the old epoch fails to load.
        let late = sensor_at(&system, &node_a, "bus", 1);
        system.block_on(late.wait_stopped());

        // B goes on writing.
        on_b.ask(Set(3)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_b.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        assert_eq!(stored("bus"), 3);

        // The shard comes back to A at epoch 3: its new activation reads
        // B's state and writes over it.
        on_a.stop();
        on_b.stop();
        let back = sensor_at(&system, &node_a, "bus", 3);
        assert_eq!(back.ask(Read).timeout(LIVENESS).wait().unwrap().value, 3);
        back.ask(Set(4)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(back.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        assert_eq!(stored("bus"), 4);
    });
}

/// The new owner fences the old one when it loads, not only once it has
/// written: a flush the old owner makes after that is refused and it is
/// told, so it never believes durable a state the new owner will
/// overwrite without having seen it. Also for a key nobody wrote yet.
#[test]
fn a_new_owner_fences_the_old_one_as_it_loads() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let node_a = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let node_b = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let stored = |key: &str| -> Option<u64> {
            let store = reopen();
            let state = system.block_on(store.read_state(key)).unwrap()?;
            Some(state.decode_as::<Reading>().unwrap().value)
        };

        // A owns the shard at epoch 1, writes 1, then changes it to 5
        // without flushing yet; it also starts a sensor never written.
        let on_a = sensor_at(&system, &node_a, "bus", 1);
        on_a.ask(Set(1)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_a.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        on_a.ask(Set(5)).timeout(LIVENESS).wait().unwrap();
        let fresh_on_a = sensor_at(&system, &node_a, "fresh", 1);
        fresh_on_a.ask(Set(7)).timeout(LIVENESS).wait().unwrap();

        // The shard moves to B at epoch 2; B's activations load (1, and
        // nothing) but write nothing yet.
        let on_b = sensor_at(&system, &node_b, "bus", 2);
        assert_eq!(on_b.ask(Read).timeout(LIVENESS).wait().unwrap().value, 1);
        let fresh_on_b = sensor_at(&system, &node_b, "fresh", 2);
        assert_eq!(
            fresh_on_b.ask(Read).timeout(LIVENESS).wait().unwrap(),
            Reading::default()
        );

        // A's late flush is refused for both keys, and A is told.
        for (sensor, key) in [(&on_a, "bus"), (&fresh_on_a, "fresh")] {
            match sensor.ask(Flushed).timeout(LIVENESS).wait().unwrap() {
                Err(JournalError::Fenced {
                    persistence_id,
                    epoch: 1,
                    current: 2,
                }) => assert_eq!(persistence_id, key),
                other => {
                    panic!("A's flush of {key} after B loaded it should be fenced, got {other:?}")
                }
            }
        }
        assert_eq!(stored("bus"), Some(1));
        assert_eq!(stored("fresh"), None, "a claim alone stores no state");

        // A node that never heard of B (a fresh write-behind) cannot start
        // an activation at the old epoch either: the store refuses it.
        let node_c = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let late = sensor_at(&system, &node_c, "bus", 1);
        system.block_on(late.wait_stopped());

        // B's writes go on; a claim never lowers a key's epoch, so B's
        // re-activation at epoch 2 after C's refused one still writes.
        on_b.ask(Set(2)).timeout(LIVENESS).wait().unwrap();
        fresh_on_b.ask(Set(3)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_b.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        assert_eq!(fresh_on_b.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        assert_eq!(stored("bus"), Some(2));
        assert_eq!(stored("fresh"), Some(3));
    });
}

/// A state queued on a node is loaded by the node's next activation only
/// if no other epoch held the key since: when the shard went away and came
/// back, the other owner's state wins over what this node never flushed.
#[test]
fn a_returning_owner_loads_the_other_owners_state_not_its_own_unflushed_one() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let node_a = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());
        let node_b = WriteBehind::start(SharedStore(reopen()), NEVER, system.tokio_handle());

        let on_a = sensor_at(&system, &node_a, "bus", 1);
        on_a.ask(Set(1)).timeout(LIVENESS).wait().unwrap();
        on_a.stop();
        system.block_on(on_a.wait_stopped());
        // Same node, same epoch: the queued state is the newest.
        let again = sensor_at(&system, &node_a, "bus", 1);
        assert_eq!(again.ask(Read).timeout(LIVENESS).wait().unwrap().value, 1);
        again.stop();
        system.block_on(again.wait_stopped());

        // B takes the shard (epoch 2) before A flushed, writes 2.
        let on_b = sensor_at(&system, &node_b, "bus", 2);
        assert_eq!(on_b.ask(Read).timeout(LIVENESS).wait().unwrap().value, 0);
        on_b.ask(Set(2)).timeout(LIVENESS).wait().unwrap();
        assert_eq!(on_b.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
        on_b.stop();
        system.block_on(on_b.wait_stopped());

        // Back on A at epoch 3: B's state, not A's unflushed 1.
        let back = sensor_at(&system, &node_a, "bus", 3);
        let read = back.ask(Read).timeout(LIVENESS).wait().unwrap();
        assert_eq!((read.value, read.changes), (2, 1));
    });
}

/// One store shared by two write-behinds (two nodes' connections).
struct SharedStore(Arc<dyn StateStore>);
impl StateStore for SharedStore {
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>> {
        self.0.write_states(states)
    }
    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>> {
        self.0.read_state(key)
    }
    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState> {
        self.0.claim_state(key, epoch)
    }
}

/// A SQLite database written before states carried an epoch opens, keeps
/// its states, and takes fenced writes.
#[test]
fn a_database_from_before_epochs_keeps_its_states() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let old = StoredEvent::encode_with(
        "state",
        1,
        &Reading {
            value: 7,
            changes: 7,
        },
    )
    .unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE troubadour_states (
                key TEXT PRIMARY KEY, type_name TEXT NOT NULL, version INTEGER NOT NULL,
                codec TEXT NOT NULL, payload BLOB NOT NULL
            ) WITHOUT ROWID;",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO troubadour_states VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params!["old", old.type_name, old.version, old.codec, old.payload],
        )
        .unwrap();
    }
    let system = ActorSystem::new();
    let store = SqliteStore::open(&path).unwrap();
    let behind = WriteBehind::start(store.clone(), NEVER, system.tokio_handle());
    let s = sensor_at(&system, &behind, "old", 5);
    assert_eq!(s.ask(Read).timeout(LIVENESS).wait().unwrap().value, 7);
    s.ask(Set(8)).timeout(LIVENESS).wait().unwrap();
    assert_eq!(s.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
    let stale = system.block_on(store.write_states(vec![StateWrite {
        key: "old".into(),
        epoch: 4,
        state: old,
    }]));
    assert_eq!(
        stale.unwrap(),
        vec![Superseded {
            key: "old".into(),
            current: 5
        }]
    );
}

#[test]
fn an_activation_on_the_same_node_reads_a_state_not_yet_flushed() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let behind = WriteBehind::start(store.clone(), NEVER, system.tokio_handle());
    let s = sensor(&system, &behind, "k");
    s.ask(Set(7)).timeout(LIVENESS).wait().unwrap();
    s.stop();
    system.block_on(s.wait_stopped());
    assert_eq!(system.block_on(store.read_state("k")).unwrap(), None);
    let again = sensor(&system, &behind, "k");
    assert_eq!(again.ask(Read).timeout(LIVENESS).wait().unwrap().value, 7);
}

#[test]
fn a_failed_flush_keeps_its_states_for_the_next_one() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let behind = WriteBehind::start(store.clone(), NEVER, system.tokio_handle());
    let a = sensor(&system, &behind, "a");
    let b = sensor(&system, &behind, "b");
    a.ask(Set(1)).timeout(LIVENESS).wait().unwrap();
    b.ask(Set(1)).timeout(LIVENESS).wait().unwrap();
    store.set_available(false);
    assert!(system.block_on(behind.flush()).is_err());
    // A newer change of `a` while the store is away replaces the kept one.
    a.ask(Set(2)).timeout(LIVENESS).wait().unwrap();
    store.set_available(true);
    system.block_on(behind.flush()).unwrap();
    let read = |k: &str| -> Reading {
        system
            .block_on(store.read_state(k))
            .unwrap()
            .unwrap()
            .decode_as()
            .unwrap()
    };
    assert_eq!(read("a").value, 2);
    assert_eq!(read("b").value, 1);
}

#[test]
fn flushed_returns_once_the_last_change_is_durable() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let behind = WriteBehind::start(store.clone(), NEVER, system.tokio_handle());
    let s = sensor(&system, &behind, "f");
    s.ask(Set(5)).timeout(LIVENESS).wait().unwrap();
    // The period is an hour: only the flush `flushed` asks for writes it.
    assert_eq!(s.ask(Flushed).timeout(LIVENESS).wait(), Ok(Ok(())));
    let stored: Reading = system
        .block_on(store.read_state("f"))
        .unwrap()
        .unwrap()
        .decode_as()
        .unwrap();
    assert_eq!(stored.value, 5);
}

/// A passivating actor's last state need not wait for the period:
/// `flush_soon` (from its `stopped` hook) starts a flush at once.
#[test]
fn flush_soon_writes_without_waiting_for_the_period() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let behind = WriteBehind::start(store.clone(), NEVER, system.tokio_handle());
    let s = sensor(&system, &behind, "soon");
    s.ask(Set(9)).timeout(LIVENESS).wait().unwrap();
    let wanted = behind.generation();
    let mut completed = behind.completed();
    behind.flush_soon();
    system
        .block_on(async {
            tokio::time::timeout(LIVENESS, completed.wait_for(|c| *c >= wanted)).await
        })
        .expect("a flush started within the liveness bound, not after the hour's period")
        .unwrap();
    let stored: Reading = system
        .block_on(store.read_state("soon"))
        .unwrap()
        .unwrap()
        .decode_as()
        .unwrap();
    assert_eq!(stored.value, 9);
}

// ---- kill -9: the crash bound -------------------------------------------------

const CHILD_ENV: &str = "TROUBADOUR_WRITE_BEHIND_CHILD";
const SENSORS: u64 = 10;

/// In the child: sensors' values rise as fast as they are acknowledged,
/// flushed every 20 ms. Prints `set <sensor> <value> <generation>` after
/// each change (the flush generation that will write it) and `flushed <g>`
/// when flush `g` is durable. Runs until killed.
#[test]
fn child_sensors() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let system = ActorSystem::new();
    let store = SqliteStore::open(&db).unwrap();
    let behind = WriteBehind::start(store, Duration::from_millis(20), system.tokio_handle());
    let mut completed = behind.completed();
    system.tokio_handle().spawn(async move {
        while completed.changed().await.is_ok() {
            let g = *completed.borrow_and_update();
            println!("flushed {g}");
        }
    });
    let threads: Vec<_> = (0..SENSORS)
        .map(|i| {
            let s = sensor(&system, &behind, &format!("s{i}"));
            let behind = behind.clone();
            std::thread::spawn(move || {
                let mut v = s.ask(Read).timeout(LIVENESS).wait().unwrap().value;
                loop {
                    v += 1;
                    s.ask(Set(v)).timeout(LIVENESS).wait().unwrap();
                    // Read after the change: the change goes out with this
                    // generation or an earlier one.
                    println!("set {i} {v} {}", behind.generation());
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn a_crash_loses_only_changes_no_completed_flush_had_started_after() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_sensors",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Per sensor: (value, generation) of every acknowledged change.
    let mut sets: Vec<Vec<(u64, u64)>> = vec![vec![]; SENSORS as usize];
    let mut flushed = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["set", i, v, g] => {
                sets[i.parse::<usize>().unwrap()].push((v.parse().unwrap(), g.parse().unwrap()))
            }
            ["flushed", g] => {
                flushed = g.parse().unwrap();
                if flushed >= 30 {
                    child.kill().unwrap();
                    break;
                }
            }
            _ => {}
        }
    }
    let _ = child.wait();
    assert!(flushed >= 30, "the child stopped early");
    let system = ActorSystem::new();
    let store = SqliteStore::open(&db).unwrap();
    for (i, sets) in sets.iter().enumerate() {
        let stored: u64 = system
            .block_on(store.read_state(&format!("s{i}")))
            .unwrap()
            .map(|s| s.decode_as::<Reading>().unwrap().value)
            .unwrap_or(0);
        // Every change written by a completed flush is there.
        let must: u64 = sets
            .iter()
            .filter(|(_, g)| *g <= flushed)
            .map(|(v, _)| *v)
            .max()
            .unwrap_or(0);
        assert!(
            stored >= must,
            "sensor {i}: stored {stored}, but flush {flushed} had written {must}"
        );
    }
}
