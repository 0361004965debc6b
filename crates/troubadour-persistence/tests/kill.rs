//! kill -9 with real processes: a child process persists under load to a
//! SQLite file, or to a PostgreSQL server, and is killed with SIGKILL
//! mid-write, three times over. After each kill every acknowledged event
//! is there, and no append of several events is half there.
//!
//! The child is this test binary again (`child_writer` does nothing unless
//! `TROUBADOUR_PERSIST_CHILD` names the store: `sqlite:<path>` or
//! `postgres:<url>`).

mod common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use troubadour::prelude::*;
use troubadour_persistence::*;

const CHILD_ENV: &str = "TROUBADOUR_PERSIST_CHILD";
const COUNTERS: usize = 20;

/// In the child: every counter appends pairs `[n, n]` (one atomic append
/// of two events) as fast as they are acknowledged, and prints
/// `ack <counter> <n>` after each. Runs until killed.
#[test]
fn child_writer() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u64 = std::env::var("TROUBADOUR_PERSIST_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let system = ActorSystem::new();
    let persistence = open(&system, &db);
    let counters: Vec<_> = (0..COUNTERS)
        .map(|i| {
            system
                .spawn(Counter::new(&persistence, &format!("k{i}")))
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = counters
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            std::thread::spawn(move || {
                let mut n = round * 1_000_000;
                loop {
                    n += 1;
                    match c.ask(Add(vec![n, n])).timeout(LIVENESS).wait() {
                        Ok(Ok(_)) => println!("ack {i} {n}"),
                        other => panic!("counter {i} failed: {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// The store a child names: `sqlite:<path>` or `postgres:<url>`.
fn open(system: &ActorSystem, store: &str) -> Persistence {
    match store.split_once(':') {
        Some(("sqlite", path)) => Persistence::sqlite(path).unwrap(),
        Some(("postgres", url)) => {
            let store = system.block_on(PostgresStore::connect(url)).unwrap();
            Persistence::new(store.clone(), store)
        }
        _ => panic!("unknown store {store}"),
    }
}

#[test]
fn on_sqlite_acknowledged_events_survive_kill_9_and_no_append_is_half_stored() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(&format!("sqlite:{}", dir.path().join("kill.db").display()));
}

#[test]
fn on_postgres_acknowledged_events_survive_kill_9_and_no_append_is_half_stored() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let db = PgDatabase::new();
    kill_rounds(&format!("postgres:{}", db.url));
}

fn kill_rounds(db: &str) {
    let mut acked: HashMap<usize, Vec<u64>> = HashMap::new();
    for round in 1..=3u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, db)
            .env("TROUBADOUR_PERSIST_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut this_round = 0;
        for line in stdout.lines() {
            let line = line.unwrap();
            let Some(rest) = line.strip_prefix("ack ") else {
                continue;
            };
            let (i, n) = rest.split_once(' ').unwrap();
            acked
                .entry(i.parse().unwrap())
                .or_default()
                .push(n.parse().unwrap());
            this_round += 1;
            if this_round == 1_500 {
                // SIGKILL while the other counters' writes are in flight.
                child.kill().unwrap();
                break;
            }
        }
        let _ = child.wait();
        assert_eq!(this_round, 1_500, "the child stopped acknowledging early");

        // Recover every counter from the file the killed process left.
        let system = ActorSystem::new();
        let persistence = open(&system, db);
        for i in 0..COUNTERS {
            let c = system
                .spawn(Counter::new(&persistence, &format!("k{i}")))
                .unwrap();
            let (total, sequence) = c.ask(Get).timeout(LIVENESS).wait().unwrap();
            assert_eq!(sequence as usize, total.amounts.len());
            let pairs: Vec<u64> = total
                .amounts
                .chunks(2)
                .map(|p| {
                    assert!(
                        p.len() == 2 && p[0] == p[1],
                        "counter {i}: an append is half stored: {p:?}"
                    );
                    p[0]
                })
                .collect();
            let stored: HashSet<u64> = pairs.iter().copied().collect();
            assert_eq!(stored.len(), pairs.len(), "counter {i}: a duplicate");
            for n in acked.get(&i).into_iter().flatten() {
                assert!(stored.contains(n), "counter {i}: acknowledged {n} is lost");
            }
            // In order: each round's numbers ascend, rounds follow each other.
            assert!(
                pairs.windows(2).all(|w| w[0] < w[1]),
                "counter {i}: out of order"
            );
        }
        drop(persistence);
        system.shutdown(LIVENESS).unwrap();
    }
}
