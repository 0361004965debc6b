//! Workload 14 (`persist`): events per second that are really on disk.
//!
//! `troubadour-bench persist --impl troubadour --store sqlite|postgres
//! [--quick] [--json] [--dir D]`: 1,000 event-sourced actors each persist
//! events as fast as they are acknowledged (one `persist` awaited, then the
//! next), on SQLite (a file in WAL mode, `synchronous=FULL`: acknowledged
//! means synced) or on a PostgreSQL server the run starts (Debian's, with
//! `fsync=on`, on the same disk). Reports acknowledged events/s and the
//! persist p99; then stops every actor, reopens the store and recovers
//! them all, reporting recovered events/s. The floor, measured in the same
//! run on the same disk: one insert per transaction with the same driver
//! and settings (what group commit must beat). The answer is checked:
//! every actor recovers exactly the events it was acknowledged.

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_persistence::{
    Event, EventSourced, PersistError, Persistence, Persistent, PostgresStore,
};

const ACTORS: usize = 1_000;

#[derive(Serialize, Deserialize)]
struct Added(u64);
impl Event for Added {
    const TYPE: &'static str = "bench.Added";
}

#[derive(Serialize, Deserialize, Default)]
struct Tally {
    sum: u64,
    count: u64,
}
impl EventSourced for Tally {
    type Event = Added;
    fn apply(&mut self, Added(n): &Added) {
        self.sum += n;
        self.count += 1;
    }
}

struct Writer {
    tally: Persistent<Tally>,
}

impl Actor for Writer {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.tally.recovery())
    }
}

/// Persists `events` events back to back; replies with each persist's
/// latency in microseconds.
struct Run {
    events: u64,
}
impl Message for Run {
    type Reply = Result<Vec<u32>, PersistError>;
}
impl AsyncHandler<Run> for Writer {
    async fn handle(
        &mut self,
        run: Run,
        ctx: &mut Context<Self>,
    ) -> Result<Vec<u32>, PersistError> {
        let mut latencies = Vec::with_capacity(run.events as usize);
        for i in 1..=run.events {
            let start = Instant::now();
            self.tally.persist(Added(i), ctx).await?;
            latencies.push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
        Ok(latencies)
    }
}

struct Read;
impl Message for Read {
    type Reply = (u64, u64);
}
impl Handler<Read> for Writer {
    fn handle(&mut self, _: Read, _: &mut Context<Self>) -> (u64, u64) {
        (self.tally.count, self.tally.sum)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Store {
    Sqlite,
    Postgres,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
        }
    }
}

struct Args {
    quick: bool,
    json: bool,
    dir: Option<PathBuf>,
    store: Store,
    /// Run the peer: Pekko Persistence with its JDBC plugin (PostgreSQL).
    pekko: bool,
    /// Measure replays from SQLite's recent part instead ([`run_replay`]).
    replay_recent: bool,
}

pub fn main(all: Vec<String>) -> ExitCode {
    let mut args = Args {
        quick: false,
        json: false,
        dir: None,
        store: Store::Sqlite,
        pekko: false,
        replay_recent: false,
    };
    let mut it = all.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--json" => args.json = true,
            "--replay-recent" => args.replay_recent = true,
            "--dir" => args.dir = it.next().map(PathBuf::from),
            "--impl" => match it.next().as_deref() {
                Some("troubadour") => args.pekko = false,
                Some("pekko") => args.pekko = true,
                _ => {
                    eprintln!("persist: --impl troubadour|pekko");
                    return ExitCode::from(2);
                }
            },
            "--store" => {
                args.store = match it.next().as_deref() {
                    Some("sqlite") => Store::Sqlite,
                    Some("postgres") => Store::Postgres,
                    _ => {
                        eprintln!("persist: --store sqlite|postgres");
                        return ExitCode::from(2);
                    }
                }
            }
            other => {
                eprintln!("persist: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    if args.pekko && args.store != Store::Postgres {
        eprintln!("persist: the Pekko peer runs on --store postgres");
        return ExitCode::from(2);
    }
    if args.replay_recent && (args.pekko || args.store != Store::Sqlite) {
        eprintln!("persist: --replay-recent measures troubadour's --store sqlite");
        return ExitCode::from(2);
    }
    let result = if args.replay_recent {
        run_replay(&args)
    } else if args.pekko {
        run_pekko(&args)
    } else {
        run(&args)
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            if args.json {
                println!(
                    "{{\"workload\":\"persist\",\"impl\":\"troubadour\",\"ok\":false,\"error\":{:?}}}",
                    e
                );
            } else {
                eprintln!("persist: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<String, String> {
    let scratch = match &args.dir {
        Some(d) => tempdir_in(d)?,
        None => tempdir_in(&std::env::temp_dir())?,
    };
    let per_actor: u64 = if args.quick { 5 } else { 100 };
    let floor_inserts: u64 = if args.quick { 200 } else { 2_000 };

    let system = ActorSystem::new();
    let server = match args.store {
        Store::Sqlite => None,
        Store::Postgres => Some(
            std::panic::catch_unwind(crate::postgres::Server::start_durable).map_err(|_| {
                "could not start PostgreSQL (apt-get install postgresql)".to_string()
            })?,
        ),
    };
    let path = scratch.join("events.db");
    let open = || -> Result<Persistence, String> {
        match &server {
            None => Persistence::sqlite(&path).map_err(|e| e.to_string()),
            Some(server) => {
                let store = system
                    .block_on(PostgresStore::connect(&server.url()))
                    .map_err(|e| e.to_string())?;
                Ok(Persistence::new(store.clone(), store))
            }
        }
    };
    let floor = match &server {
        None => floor_events_per_sec(&scratch.join("floor.db"), floor_inserts)?,
        Some(server) => system.block_on(postgres_floor(&server.url(), floor_inserts))?,
    };

    let persistence = open()?;
    let writers: Vec<ActorRef<Writer>> = (0..ACTORS)
        .map(|i| spawn_writer(&system, &persistence, i))
        .collect::<Result<_, _>>()?;
    // Recovered (empty) before the clock starts.
    for w in &writers {
        w.ask(Read)
            .timeout(Duration::from_secs(60))
            .wait()
            .map_err(|e| e.to_string())?;
    }
    let start = Instant::now();
    let asks: Vec<_> = writers
        .iter()
        .map(|w| w.ask(Run { events: per_actor }))
        .collect();
    let mut latencies = Vec::with_capacity(ACTORS * per_actor as usize);
    for ask in asks {
        let l = ask
            .timeout(Duration::from_secs(600))
            .wait()
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        latencies.extend(l);
    }
    let elapsed = start.elapsed();
    let total = ACTORS as u64 * per_actor;
    latencies.sort_unstable();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    for w in &writers {
        w.stop();
    }
    for w in &writers {
        system.block_on(w.wait_stopped());
    }
    drop(persistence);

    // Recovery from a reopened store.
    let persistence = open()?;
    let start = Instant::now();
    let writers: Vec<ActorRef<Writer>> = (0..ACTORS)
        .map(|i| spawn_writer(&system, &persistence, i))
        .collect::<Result<_, _>>()?;
    let reads: Vec<_> = writers.iter().map(|w| w.ask(Read)).collect();
    let want_sum = per_actor * (per_actor + 1) / 2;
    for (i, r) in reads.into_iter().enumerate() {
        let (count, sum) = r
            .timeout(Duration::from_secs(600))
            .wait()
            .map_err(|e| e.to_string())?;
        if count != per_actor || sum != want_sum {
            return Err(format!(
                "actor {i} recovered {count} events summing {sum}, want {per_actor} summing {want_sum}"
            ));
        }
    }
    let recovery = start.elapsed();
    drop(persistence);
    let _ = system.shutdown(Duration::from_secs(10));
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);

    let events_per_sec = total as f64 / elapsed.as_secs_f64();
    let recovery_per_sec = total as f64 / recovery.as_secs_f64();
    Ok(if args.json {
        format!(
            "{{\"workload\":\"persist\",\"impl\":\"troubadour\",\"ok\":true,\"store\":\"{}\",\
             \"events\":{total},\"elapsed_ms\":{:.3},\"events_per_sec\":{:.1},\"persist_p99_us\":{p99},\
             \"recovery_events_per_sec\":{:.1},\"floor_events_per_sec\":{:.1}}}",
            args.store.name(),
            elapsed.as_secs_f64() * 1e3,
            events_per_sec,
            recovery_per_sec,
            floor
        )
    } else {
        format!(
            "persist {}: {total} events in {:.0} ms, {:.0} events/s ({:.1}x the floor of {:.0}), \
             persist p99 {p99} us, recovery {:.0} events/s",
            args.store.name(),
            elapsed.as_secs_f64() * 1e3,
            events_per_sec,
            events_per_sec / floor,
            floor,
            recovery_per_sec
        )
    })
}

fn spawn_writer(
    system: &ActorSystem,
    p: &Persistence,
    i: usize,
) -> Result<ActorRef<Writer>, String> {
    system
        .spawn(Writer {
            tally: Persistent::new(p, format!("writer-{i}"), Tally::default()),
        })
        .map_err(|e| e.to_string())
}

/// One insert per transaction, synced, with the same driver and settings:
/// what the store would do without group commit.
fn floor_events_per_sec(path: &Path, inserts: u64) -> Result<f64, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .and_then(|_| conn.pragma_update(None, "synchronous", "FULL"))
        .and_then(|_| {
            conn.execute_batch(
                "CREATE TABLE journal (persistence_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                 payload BLOB NOT NULL, PRIMARY KEY (persistence_id, sequence)) WITHOUT ROWID",
            )
        })
        .map_err(|e| e.to_string())?;
    let payload = postcard_like_payload();
    let start = Instant::now();
    for i in 1..=inserts {
        conn.execute(
            "INSERT INTO journal (persistence_id, sequence, payload) VALUES (?1, ?2, ?3)",
            rusqlite::params!["floor", i as i64, payload],
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(inserts as f64 / start.elapsed().as_secs_f64())
}

/// The peer: Pekko Persistence (typed `EventSourcedBehavior`) with its
/// JDBC plugin, the same 1,000 actors and events, on a server started the
/// same way, with the floor measured on it beside (bench/peers/pekko,
/// `Persist.java`). The JVM does the workload once with other ids first,
/// unmeasured, to compile what it runs (a cold JVM here spends more than
/// half of its first 20 s in the JIT).
fn run_pekko(args: &Args) -> Result<String, String> {
    let per_actor: u64 = if args.quick { 5 } else { 100 };
    let floor_inserts: u64 = if args.quick { 200 } else { 2_000 };
    let system = ActorSystem::new();
    let server = std::panic::catch_unwind(crate::postgres::Server::start_durable)
        .map_err(|_| "could not start PostgreSQL (apt-get install postgresql)".to_string())?;
    let floor = system.block_on(postgres_floor(&server.url(), floor_inserts))?;
    system.block_on(async {
        let (client, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        client
            .batch_execute("CREATE DATABASE pekko")
            .await
            .map_err(|e| e.to_string())
    })?;
    let jdbc = server
        .url()
        .replace("postgres://postgres@", "jdbc:postgresql://")
        .replace("/postgres", "/pekko");
    let peer = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/pekko");
    let built = std::process::Command::new(peer.join("build"))
        .status()
        .map_err(|e| format!("building the Pekko peer: {e}"))?;
    if !built.success() {
        return Err("the Pekko peer did not build".into());
    }
    let classpath = std::fs::read_to_string(peer.join("target/classpath.txt"))
        .map_err(|e| format!("the Pekko peer's classpath: {e}"))?;
    let out = std::process::Command::new("java")
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            peer.join("target/classes").display(),
            classpath.trim()
        ))
        .args(["troubadour.peer.Main", "__persist", &jdbc])
        .arg(ACTORS.to_string())
        .arg(per_actor.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running the Pekko peer: {e}"))?;
    let _ = system.shutdown(Duration::from_secs(10));
    drop(server);
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(str::to_string)
        .ok_or("the Pekko peer printed no result")?;
    let field = |name: &str| -> Option<f64> {
        let at = line.find(&format!("\"{name}\":"))? + name.len() + 3;
        line[at..].split([',', '}']).next()?.parse().ok()
    };
    if !line.contains("\"ok\":true") {
        return Err(format!("the Pekko peer failed: {line}"));
    }
    let (eps, p99, rec) = (
        field("events_per_sec").ok_or("no events_per_sec")?,
        field("persist_p99_us").ok_or("no persist_p99_us")?,
        field("recovery_events_per_sec").ok_or("no recovery_events_per_sec")?,
    );
    let total = ACTORS as u64 * per_actor;
    Ok(if args.json {
        format!(
            "{{\"workload\":\"persist\",\"impl\":\"pekko\",\"ok\":true,\"store\":\"postgres\",\
             \"events\":{total},\"events_per_sec\":{eps:.1},\"persist_p99_us\":{p99:.0},\
             \"recovery_events_per_sec\":{rec:.1},\"floor_events_per_sec\":{floor:.1}}}"
        )
    } else {
        format!(
            "persist postgres (pekko-persistence-jdbc): {total} events, {eps:.0} events/s \
             ({:.1}x the floor of {floor:.0}), persist p99 {p99:.0} us, recovery {rec:.0} events/s",
            eps / floor
        )
    })
}

/// The PostgreSQL floor: one insert per transaction (autocommit), one
/// connection, the same driver, on the same server.
async fn postgres_floor(url: &str, inserts: u64) -> Result<f64, String> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    client
        .batch_execute(
            "CREATE TABLE floor (persistence_id text NOT NULL, sequence bigint NOT NULL,
             payload bytea NOT NULL, PRIMARY KEY (persistence_id, sequence))",
        )
        .await
        .map_err(|e| e.to_string())?;
    let insert = client
        .prepare("INSERT INTO floor (persistence_id, sequence, payload) VALUES ($1, $2, $3)")
        .await
        .map_err(|e| e.to_string())?;
    let payload = postcard_like_payload();
    let start = Instant::now();
    for i in 1..=inserts {
        client
            .execute(&insert, &[&"floor", &(i as i64), &payload])
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(inserts as f64 / start.elapsed().as_secs_f64())
}

/// Replays while the events are still in SQLite's recent part (one row
/// per group commit, decision 0046), against the same replays once they
/// are in id order: what an actor passivated and woken again soon after
/// pays. For N in 1, 16 and 100: N group commits of one event for each of
/// 1,000 ids, then 1,000 replays of whole histories (ids in a scattered
/// order) from the running store with nothing moved yet; then the store is
/// closed (which moves everything into id order), reopened, and the same
/// replays timed again. Every replay is checked (count and numbers).
fn run_replay(args: &Args) -> Result<String, String> {
    use troubadour_persistence::store::{Append, Journal};
    use troubadour_persistence::{SqliteOptions, SqliteStore, StoredEvent};
    let scratch = match &args.dir {
        Some(d) => tempdir_in(d)?,
        None => tempdir_in(&std::env::temp_dir())?,
    };
    let ids = if args.quick { 100 } else { 1_000 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let replays = |store: &SqliteStore, rows: u64| -> Result<f64, String> {
        let start = Instant::now();
        for i in 0..ids {
            let id = format!("actor-{}", (i * 7) % ids);
            let events = rt
                .block_on(store.replay(&id, 1, usize::MAX))
                .map_err(|e| e.to_string())?;
            let numbers: Vec<u64> = events.iter().map(|e| e.sequence).collect();
            if numbers != (1..=rows).collect::<Vec<_>>() {
                return Err(format!("{id} replayed {numbers:?}, not 1..={rows}"));
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / ids as f64)
    };
    let mut cases = Vec::new();
    for rows in [1u64, 16, 100] {
        let path = scratch.join(format!("replay-{rows}.db"));
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                // Nothing moved while the replays from the recent part run.
                fold_at: usize::MAX,
                ..SqliteOptions::default()
            },
        )
        .map_err(|e| e.to_string())?;
        for sequence in 1..=rows {
            let group: Vec<_> = (0..ids)
                .map(|i| {
                    store.append(Append {
                        persistence_id: format!("actor-{i}"),
                        epoch: 0,
                        first_sequence: sequence,
                        events: vec![StoredEvent {
                            type_name: Added::TYPE.into(),
                            version: 1,
                            codec: "postcard".into(),
                            payload: postcard_like_payload(),
                        }],
                    })
                })
                .collect();
            for append in group {
                rt.block_on(append).map_err(|e| e.to_string())?;
            }
        }
        let recent = replays(&store, rows)?;
        drop(store);
        let store = SqliteStore::open(&path).map_err(|e| e.to_string())?;
        let ordered = replays(&store, rows)?;
        cases.push((rows, recent, ordered));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if args.json {
        let fields: Vec<String> = cases
            .iter()
            .map(|(rows, recent, ordered)| {
                format!("\"recent_{rows}_us\":{recent:.1},\"ordered_{rows}_us\":{ordered:.1}")
            })
            .collect();
        Ok(format!(
            "{{\"workload\":\"persist-replay\",\"impl\":\"troubadour\",\"store\":\"sqlite\",\"ok\":true,\"ids\":{ids},{}}}",
            fields.join(",")
        ))
    } else {
        Ok(cases
            .iter()
            .map(|(rows, recent, ordered)| {
                format!(
                    "{rows} events per id: a replay takes {recent:.1} us from the recent part, {ordered:.1} us from id order"
                )
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

/// The size of an `Added` event as stored.
fn postcard_like_payload() -> Vec<u8> {
    vec![0x2a; 2]
}

fn tempdir_in(parent: &Path) -> Result<PathBuf, String> {
    let dir = parent.join(format!("troubadour-persist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}
