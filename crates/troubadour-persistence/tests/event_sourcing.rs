//! Event sourcing as a user relies on it, on the in-memory store and on
//! SQLite: durable before the reply, recovered before the first message,
//! snapshots, fencing of stale writers, and what happens when the store
//! fails or the history is broken.

mod common;

use common::*;
use std::future::Future;
use std::sync::Arc;
use troubadour::prelude::*;
use troubadour_persistence::*;

/// Runs `test` on each store (SQLite twice, see below); `reopen` gives persistence over the same data,
/// through fresh connections for SQLite and PostgreSQL (as after a
/// process restart).
fn each_store(test: impl Fn(&dyn Fn() -> Persistence)) {
    let memory = MemoryStore::new();
    test(&|| Persistence::new(memory.clone(), memory.clone()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.db");
    test(&|| Persistence::sqlite(&path).unwrap());
    // Every batch moved at once into id order: histories read from that
    // part, not only from the recent one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("folded.db");
    let folding = SqliteOptions {
        fold_at: 1,
        ..SqliteOptions::default()
    };
    test(&|| {
        let store = SqliteStore::open_with(&path, folding.clone()).unwrap();
        Persistence::new(store.clone(), store)
    });
    let db = PgDatabase::new();
    test(&|| db.persistence());
}

fn add(counter: &ActorRef<Counter>, amounts: &[u64]) -> Result<u64, PersistError> {
    counter
        .ask(Add(amounts.to_vec()))
        .timeout(LIVENESS)
        .wait()
        .expect("the counter did not answer")
}

fn get(counter: &ActorRef<Counter>) -> (Total, u64) {
    counter.ask(Get).timeout(LIVENESS).wait().unwrap()
}

fn stop(system: &ActorSystem, counter: &ActorRef<Counter>) -> ExitReason {
    counter.stop();
    system.block_on(counter.wait_stopped())
}

fn all_events(persistence: &Persistence, id: &str) -> Vec<EventRecord> {
    let system = ActorSystem::new();
    system
        .block_on(persistence.journal().replay(id, 1, usize::MAX))
        .unwrap()
}

#[test]
fn state_survives_a_restart_of_the_actor_and_of_the_store() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let c = system.spawn(Counter::new(&reopen(), "c1")).unwrap();
        assert_eq!(add(&c, &[1]), Ok(1));
        assert_eq!(add(&c, &[2, 3]), Ok(6));
        assert_eq!(stop(&system, &c), ExitReason::Normal);

        let c = system.spawn(Counter::new(&reopen(), "c1")).unwrap();
        let (total, sequence) = get(&c);
        assert_eq!(total.amounts, vec![1, 2, 3]);
        assert_eq!(total.sum, 6);
        assert_eq!(sequence, 3);
        assert_eq!(add(&c, &[4]), Ok(10));
        // Another id has its own history.
        let other = system.spawn(Counter::new(&reopen(), "c2")).unwrap();
        assert_eq!(get(&other).1, 0);
    });
}

#[test]
fn messages_sent_during_recovery_wait_and_keep_their_order() {
    let system = ActorSystem::new();
    let store = GatedStore::new();
    // A history to recover: 1, 2.
    system
        .block_on(store.inner.append(Append {
            persistence_id: "c".into(),
            epoch: 0,
            first_sequence: 1,
            events: vec![
                StoredEvent::encode(&CounterEvent::Added(1)).unwrap(),
                StoredEvent::encode(&CounterEvent::Added(2)).unwrap(),
            ],
        }))
        .unwrap();
    let persistence = Persistence::new(store.clone(), store.inner.clone());
    let c = system.spawn(Counter::new(&persistence, "c")).unwrap();
    let asks: Vec<_> = (10..30).map(|n| c.ask(Add(vec![n]))).collect();
    store.open();
    let mut sum = 3;
    for (n, ask) in (10..30).zip(asks) {
        sum += n;
        assert_eq!(ask.timeout(LIVENESS).wait(), Ok(Ok(sum)));
    }
    let mut want = vec![1, 2];
    want.extend(10..30);
    assert_eq!(get(&c).0.amounts, want);
}

/// A journal whose appends wait until the test lets them through, and
/// that says when one is waiting.
#[derive(Clone)]
struct HeldAppends {
    inner: MemoryStore,
    entered: Arc<std::sync::Mutex<std::sync::mpsc::Sender<()>>>,
    release: tokio::sync::watch::Receiver<bool>,
}

impl Journal for HeldAppends {
    fn fence(&self, id: &str, epoch: u64) -> store::StoreFuture<'_, Fenced> {
        self.inner.fence(id, epoch)
    }
    fn append(&self, append: Append) -> store::StoreFuture<'_, ()> {
        let _ = self.entered.lock().unwrap().send(());
        let mut release = self.release.clone();
        Box::pin(async move {
            let _ = release.wait_for(|r| *r).await;
            self.inner.append(append).await
        })
    }
    fn replay(&self, id: &str, from: u64, max: usize) -> store::StoreFuture<'_, Vec<EventRecord>> {
        self.inner.replay(id, from, max)
    }
    fn delete_to(&self, id: &str, to: u64) -> store::StoreFuture<'_, ()> {
        self.inner.delete_to(id, to)
    }
}

#[test]
fn the_reply_goes_out_only_after_the_event_is_durable() {
    let system = ActorSystem::new();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let store = HeldAppends {
        inner: MemoryStore::new(),
        entered: Arc::new(std::sync::Mutex::new(entered_tx)),
        release,
    };
    let persistence = Persistence::new(store.clone(), store.inner.clone());
    let c = system.spawn(Counter::new(&persistence, "c")).unwrap();
    let mut ask = Box::pin(c.ask(Add(vec![7])));
    entered.recv_timeout(LIVENESS).unwrap();
    // The append is in the store and not yet durable: no reply, and the
    // event is not stored.
    let waker = std::task::Waker::noop();
    assert!(ask
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
        .is_pending());
    assert!(store.inner.events("c").is_empty());
    release_tx.send(true).unwrap();
    assert_eq!(system.block_on(ask), Ok(Ok(7)));
    assert_eq!(store.inner.events("c").len(), 1);
}

#[test]
fn snapshots_shorten_recovery_and_the_events_they_cover_can_be_deleted() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let policy = SnapshotPolicy::every(10).keep(1).delete_events(true);
        let spawn = |p: &Persistence| {
            let mut counter = Counter::new(p, "s");
            counter.total = Persistent::new(p, "s", Total::default()).snapshots(policy);
            system.spawn(counter).unwrap()
        };
        let c = spawn(&reopen());
        for n in 1..=25 {
            add(&c, &[n]).unwrap();
        }
        assert_eq!(stop(&system, &c), ExitReason::Normal);
        let persistence = reopen();
        // Snapshots at 10 and 20; keeping one, the events up to 20 are gone.
        let left: Vec<u64> = all_events(&persistence, "s")
            .iter()
            .map(|r| r.sequence)
            .collect();
        assert_eq!(left, (21..=25).collect::<Vec<_>>());
        let snapshot = system
            .block_on(persistence.snapshots().latest("s"))
            .unwrap()
            .unwrap();
        assert_eq!(snapshot.sequence, 20);

        let c = spawn(&persistence);
        let (total, sequence) = get(&c);
        assert_eq!(total.amounts, (1..=25).collect::<Vec<_>>());
        assert_eq!(sequence, 25);
        // Numbering goes on after the deleted events.
        add(&c, &[26]).unwrap();
        assert_eq!(all_events(&persistence, "s").last().unwrap().sequence, 26);
        // An on-demand snapshot.
        assert_eq!(c.ask(Snapshot).timeout(LIVENESS).wait(), Ok(Ok(())));
        let latest = system
            .block_on(persistence.snapshots().latest("s"))
            .unwrap()
            .unwrap();
        assert_eq!(latest.sequence, 26);
    });
}

#[test]
fn a_stale_writer_is_fenced_and_stops_and_the_journal_stays_linear() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let at = |epoch: u64| {
            let p = reopen();
            let mut counter = Counter::new(&p, "f");
            counter.total = Persistent::new(&p, "f", Total::default()).epoch(epoch);
            system.spawn(counter).unwrap()
        };
        let old = at(1);
        assert_eq!(add(&old, &[1]), Ok(1));
        // A new owner recovers at a newer epoch; the old one never heard.
        let new = at(2);
        assert_eq!(get(&new).0.amounts, vec![1]);
        match add(&old, &[100]) {
            Err(PersistError::Journal(JournalError::Fenced { epoch, current, .. })) => {
                assert_eq!((epoch, current), (1, 2));
            }
            other => panic!("a stale write was not fenced: {other:?}"),
        }
        match system.block_on(old.wait_stopped()) {
            ExitReason::Failed(why) => assert!(why.contains("newer writer"), "{why}"),
            other => panic!("the stale activation did not fail: {other}"),
        }
        assert_eq!(add(&new, &[2]), Ok(3));
        // A writer older than the newest cannot even recover.
        let older = at(1);
        assert!(matches!(
            system.block_on(older.wait_stopped()),
            ExitReason::Failed(_)
        ));
        assert_eq!(linear_history(&all_events(&reopen(), "f")), vec![1, 2]);
    });
}

#[test]
fn two_live_activations_of_one_id_never_fork_the_journal() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let a = system.spawn(Counter::new(&reopen(), "twin")).unwrap();
        let b = system.spawn(Counter::new(&reopen(), "twin")).unwrap();
        // Both have recovered the empty history.
        assert_eq!(get(&a).1, 0);
        assert_eq!(get(&b).1, 0);
        assert_eq!(add(&a, &[1]), Ok(1));
        // Same epoch, both recovered at 0: b's event 1 is refused.
        assert!(matches!(
            add(&b, &[2]),
            Err(PersistError::Journal(JournalError::SequenceConflict { .. }))
        ));
        assert!(matches!(
            system.block_on(b.wait_stopped()),
            ExitReason::Failed(_)
        ));
        assert_eq!(add(&a, &[3]), Ok(4));
        assert_eq!(linear_history(&all_events(&reopen(), "twin")), vec![1, 3]);
    });
}

#[test]
fn two_activations_racing_on_one_id_lose_nothing_acknowledged() {
    // Rounds of two writers on one id, each driven from its own thread; the
    // second recovers at a newer epoch while the first is writing. Checker:
    // the journal is linear with epochs never going down, holds every
    // acknowledged amount exactly once, and nothing that was refused.
    each_store(|reopen| {
        let system = ActorSystem::new();
        for round in 0..20u64 {
            let id = format!("race-{round}");
            let spawn = |epoch: u64| {
                let p = reopen();
                let mut counter = Counter::new(&p, &id);
                counter.total = Persistent::new(&p, &id, Total::default()).epoch(epoch);
                system.spawn(counter).unwrap()
            };
            let old = spawn(round * 2 + 1);
            let writer = |counter: ActorRef<Counter>, base: u64| {
                std::thread::spawn(move || {
                    let mut acked = vec![];
                    let mut refused = vec![];
                    for i in 0..40 {
                        let n = base + i;
                        match counter.ask(Add(vec![n])).timeout(LIVENESS).wait() {
                            Ok(Ok(_)) => acked.push(n),
                            Ok(Err(PersistError::Journal(_))) | Err(_) => refused.push(n),
                            Ok(Err(e)) => panic!("unexpected: {e}"),
                        }
                    }
                    (acked, refused)
                })
            };
            let first = writer(old.clone(), 1_000);
            let new = spawn(round * 2 + 2);
            let second = writer(new.clone(), 2_000);
            let (mut acked, mut refused) = first.join().unwrap();
            let (acked2, refused2) = second.join().unwrap();
            assert!(
                refused2.is_empty(),
                "the newest writer was refused: {refused2:?}"
            );
            acked.extend(acked2);
            refused.extend(refused2);
            let mut stored = linear_history(&all_events(&reopen(), &id));
            for n in &refused {
                assert!(!stored.contains(n), "refused amount {n} is stored");
            }
            stored.sort();
            acked.sort();
            assert_eq!(stored, acked, "acknowledged and stored differ");
        }
    });
}

#[test]
fn a_store_that_goes_away_fails_the_actor_and_loses_nothing_acknowledged() {
    let system = ActorSystem::new();
    let store = MemoryStore::new();
    let persistence = Persistence::new(store.clone(), store.clone());
    let c = system.spawn(Counter::new(&persistence, "u")).unwrap();
    assert_eq!(add(&c, &[1]), Ok(1));
    store.set_available(false);
    assert!(matches!(
        add(&c, &[2]),
        Err(PersistError::Journal(JournalError::Unavailable(_)))
    ));
    match system.block_on(c.wait_stopped()) {
        ExitReason::Failed(why) => assert!(why.contains("unavailable"), "{why}"),
        other => panic!("the actor ran on after a failed write: {other}"),
    }
    // While the store is away, an actor cannot recover: it takes no message.
    let blind = system.spawn(Counter::new(&persistence, "u")).unwrap();
    assert!(matches!(
        system.block_on(blind.wait_stopped()),
        ExitReason::Failed(_)
    ));
    store.set_available(true);
    let c = system.spawn(Counter::new(&persistence, "u")).unwrap();
    assert_eq!(get(&c).0.amounts, vec![1]);
}

#[test]
fn a_corrupt_or_gapped_journal_stops_recovery_with_the_reason() {
    let system = ActorSystem::new();
    let fill = |store: &MemoryStore, id: &str| {
        let p = Persistence::new(store.clone(), store.clone());
        let c = system.spawn(Counter::new(&p, id)).unwrap();
        add(&c, &[1]).unwrap();
        add(&c, &[2]).unwrap();
        add(&c, &[3]).unwrap();
        stop(&system, &c);
        p
    };
    let expect_failed = |p: &Persistence, id: &str, says: &str| {
        let c = system.spawn(Counter::new(p, id)).unwrap();
        let asked = c.ask(Get).timeout(LIVENESS).wait();
        match system.block_on(c.wait_stopped()) {
            ExitReason::Failed(why) => assert!(why.contains(says), "{why}"),
            other => panic!("recovered from a broken journal: {other}"),
        }
        assert!(asked.is_err(), "a message was handled on a broken state");
    };
    let store = MemoryStore::new();
    let p = fill(&store, "bad");
    store.tamper("bad", 2, Some(vec![0xff, 0xff, 0xff]));
    expect_failed(&p, "bad", "does not decode");

    let store = MemoryStore::new();
    let p = fill(&store, "gap");
    store.tamper("gap", 2, None);
    expect_failed(&p, "gap", "event 2 is missing");

    let store = MemoryStore::new();
    let p = fill(&store, "tail");
    store.tamper("tail", 3, None);
    expect_failed(&p, "tail", "only up to 2");
}

#[test]
fn events_of_an_older_version_are_upcast() {
    use serde::{Deserialize, Serialize};
    #[derive(Serialize, Deserialize)]
    struct AddedV1(u64);
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Added {
        amount: u64,
        by: String,
    }
    impl Event for Added {
        const TYPE: &'static str = "test.Added";
        const VERSION: u32 = 2;
        fn upcast(stored: &StoredEvent) -> Result<Self, DecodeError> {
            match (stored.type_name.as_str(), stored.version) {
                ("test.Added", 1) => {
                    let AddedV1(amount) = stored.decode_as()?;
                    Ok(Added {
                        amount,
                        by: "unknown".into(),
                    })
                }
                _ => Err(stored.unknown_version()),
            }
        }
    }
    let v1 = StoredEvent::encode_with("test.Added", 1, &AddedV1(5)).unwrap();
    assert_eq!(
        v1.decode::<Added>(),
        Ok(Added {
            amount: 5,
            by: "unknown".into()
        })
    );
    let v3 = StoredEvent::encode_with("test.Added", 3, &AddedV1(5)).unwrap();
    assert!(matches!(
        v3.decode::<Added>(),
        Err(DecodeError::UnknownVersion { version: 3, .. })
    ));
    let current = StoredEvent::encode(&Added {
        amount: 1,
        by: "me".into(),
    })
    .unwrap();
    assert_eq!(current.version, 2);
    assert_eq!(current.decode::<Added>().unwrap().by, "me");
}

#[test]
fn many_actors_persisting_at_once_on_sqlite_all_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.db");
    let system = ActorSystem::new();
    let persistence = Persistence::sqlite(&path).unwrap();
    let counters: Vec<_> = (0..100)
        .map(|i| {
            system
                .spawn(Counter::new(&persistence, &format!("m{i}")))
                .unwrap()
        })
        .collect();
    for round in 1..=10u64 {
        let asks: Vec<_> = counters.iter().map(|c| c.ask(Add(vec![round]))).collect();
        for ask in asks {
            ask.timeout(LIVENESS).wait().unwrap().unwrap();
        }
    }
    for c in &counters {
        stop(&system, c);
    }
    drop(persistence);
    let reopened = Persistence::sqlite(&path).unwrap();
    for i in 0..100 {
        let c = system
            .spawn(Counter::new(&reopened, &format!("m{i}")))
            .unwrap();
        assert_eq!(get(&c).0.amounts, (1..=10).collect::<Vec<_>>());
    }
}

#[test]
fn numbering_goes_on_when_a_snapshot_covers_every_event() {
    each_store(|reopen| {
        let system = ActorSystem::new();
        let spawn = |p: &Persistence| {
            let mut counter = Counter::new(p, "all");
            counter.total = Persistent::new(p, "all", Total::default())
                .snapshots(SnapshotPolicy::every(5).keep(1).delete_events(true));
            system.spawn(counter).unwrap()
        };
        let c = spawn(&reopen());
        for n in 1..=10 {
            add(&c, &[n]).unwrap();
        }
        stop(&system, &c);
        let persistence = reopen();
        assert!(all_events(&persistence, "all").is_empty());
        let c = spawn(&persistence);
        assert_eq!(get(&c).1, 10);
        add(&c, &[11]).unwrap();
        assert_eq!(all_events(&persistence, "all")[0].sequence, 11);
    });
}

#[test]
fn two_stores_on_one_sqlite_file_fence_each_other_as_two_processes_would() {
    // Each `SqliteStore` has its own connections and writer, as another
    // process on the same file would.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let system = ActorSystem::new();
    let at = |epoch: u64| {
        let p = Persistence::sqlite(&path).unwrap();
        let mut counter = Counter::new(&p, "x");
        counter.total = Persistent::new(&p, "x", Total::default()).epoch(epoch);
        system.spawn(counter).unwrap()
    };
    let old = at(1);
    assert_eq!(add(&old, &[1]), Ok(1));
    assert_eq!(add(&old, &[2]), Ok(3));
    let new = at(2);
    assert_eq!(get(&new).0.amounts, vec![1, 2]);
    assert!(matches!(
        add(&old, &[100]),
        Err(PersistError::Journal(JournalError::Fenced { .. }))
    ));
    assert_eq!(add(&new, &[3]), Ok(6));
    let p = Persistence::sqlite(&path).unwrap();
    assert_eq!(linear_history(&all_events(&p, "x")), vec![1, 2, 3]);
}

#[test]
fn a_full_store_refuses_with_a_typed_error_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let system = ActorSystem::new();
    let small = SqliteOptions {
        max_size: Some(96 * 1024),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, small).unwrap();
    let p = Persistence::new(store.clone(), store);
    let c = system.spawn(Counter::new(&p, "big")).unwrap();
    let mut acked = vec![];
    let full = loop {
        let batch: Vec<u64> = (0..100).map(|i| acked.len() as u64 * 100 + i).collect();
        match add(&c, &batch) {
            Ok(_) => acked.extend(batch),
            Err(e) => break e,
        }
        assert!(acked.len() < 1_000_000, "the store never filled up");
    };
    match &full {
        PersistError::Journal(JournalError::StorageFull(why)) => {
            assert!(full.to_string().contains("free space"), "{full}: {why}")
        }
        other => panic!("not a full store: {other:?}"),
    }
    // The actor stopped rather than running on a state the store lacks.
    assert!(matches!(
        system.block_on(c.wait_stopped()),
        ExitReason::Failed(_)
    ));
    drop(p);
    // With room again, everything acknowledged is there, nothing more.
    let p = Persistence::sqlite(&path).unwrap();
    let c = system.spawn(Counter::new(&p, "big")).unwrap();
    assert_eq!(get(&c).0.amounts, acked);
}
