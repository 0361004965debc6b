//! The PostgreSQL store (feature `postgres`), for production: the journal,
//! the writers' epochs and the snapshots in three tables, created by
//! [`PostgresStore::connect`] if missing, shared by every process (every
//! node of a cluster) that writes there.
//!
//! **Group commit, set-based.** Writes go to one writer task per store. It
//! takes whatever is waiting (up to 1,024 writes) and runs them in one
//! transaction with a fixed number of round trips, whatever the batch's
//! size: lock the rows of every id the batch touches (`SELECT … FOR
//! UPDATE`, creating missing ones first), decide each write in queue order
//! against them (refusals change nothing), insert every event of the batch
//! in one `INSERT … SELECT FROM unnest(…)`, move the rows in one `UPDATE …
//! FROM unnest(…)`, commit. The row lock makes the rules hold between
//! processes: a fence or append from another node waits for the lock and
//! then sees this commit.
//!
//! **Reads** for recovery (replay, latest snapshot) are batched the same
//! way: one reader task gathers what is waiting and answers a batch with
//! one query per kind (`… CROSS JOIN LATERAL (… LIMIT …)` over the ids,
//! `DISTINCT ON` for snapshots), up to four batches at once on pooled
//! connections.

use crate::batch::{events_kept, refusals, Pending, Reply};
use crate::error::JournalError;
use crate::event::StoredEvent;
use crate::stats::StoreStats;
use crate::store::{
    Append, EventRecord, Fenced, Journal, SnapshotRecord, SnapshotStore, StoreFuture,
};
use crate::write_behind::{ClaimedState, StateWrite, Superseded};
use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS troubadour_journal (
    persistence_id text NOT NULL,
    sequence bigint NOT NULL,
    epoch bigint NOT NULL,
    type_name text NOT NULL,
    version integer NOT NULL,
    codec text NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (persistence_id, sequence)
);
CREATE TABLE IF NOT EXISTS troubadour_writers (
    persistence_id text PRIMARY KEY,
    highest bigint NOT NULL,
    epoch bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS troubadour_states (
    key text PRIMARY KEY,
    epoch bigint NOT NULL DEFAULT 0,
    type_name text NOT NULL,
    version integer NOT NULL,
    codec text NOT NULL,
    payload bytea NOT NULL
);
-- Databases made before states carried their writer's epoch.
ALTER TABLE troubadour_states ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS troubadour_reminders (
    kind text NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    due_ms bigint NOT NULL,
    period_ms bigint,
    PRIMARY KEY (kind, id, name)
);
CREATE INDEX IF NOT EXISTS troubadour_reminders_due ON troubadour_reminders (due_ms);
CREATE TABLE IF NOT EXISTS troubadour_snapshots (
    persistence_id text NOT NULL,
    sequence bigint NOT NULL,
    type_name text NOT NULL,
    version integer NOT NULL,
    codec text NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (persistence_id, sequence)
);
";

/// The most writes one transaction takes.
const MAX_BATCH: usize = 1024;

/// The PostgreSQL journal and snapshot store. Clones share the pool and the
/// writer task, which ends when the last clone is dropped.
///
/// ```no_run
/// # async fn run() -> Result<(), troubadour_persistence::JournalError> {
/// use troubadour_persistence::{Persistence, PostgresStore};
/// let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
/// let persistence = Persistence::new(store.clone(), store);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    runtime: tokio::runtime::Handle,
    writes: mpsc::UnboundedSender<Write>,
    reads: mpsc::UnboundedSender<(Read, Reply<Answer>)>,
    stats: Arc<StoreStats>,
}

/// A recovery read, batched with the others waiting (1,000 actors
/// recovering at once make a handful of queries, not 2,000).
enum Read {
    Replay(String, u64, i64),
    Latest(String),
}

enum Answer {
    Events(Vec<EventRecord>),
    Snapshot(Option<SnapshotRecord>),
}

/// Batches of recovery reads running at once.
const READ_BATCHES: usize = 4;

/// The most reads one query takes.
const MAX_READ_BATCH: usize = 256;

enum Write {
    Fence(String, u64, Reply<Fenced>),
    Append(Append, Reply<()>),
    DeleteTo(String, u64, Reply<()>),
    SaveSnapshot(String, SnapshotRecord, Reply<()>),
    DeleteSnapshots(String, u64, Reply<()>),
}

impl Write {
    fn refuse(self, e: JournalError) {
        match self {
            Write::Fence(_, _, tx) => {
                let _ = tx.send(Err(e));
            }
            Write::Append(_, tx)
            | Write::DeleteTo(_, _, tx)
            | Write::SaveSnapshot(_, _, tx)
            | Write::DeleteSnapshots(_, _, tx) => {
                let _ = tx.send(Err(e));
            }
        }
    }

    fn id(&self) -> &str {
        match self {
            Write::Fence(id, ..)
            | Write::DeleteTo(id, ..)
            | Write::SaveSnapshot(id, ..)
            | Write::DeleteSnapshots(id, ..) => id,
            Write::Append(a, _) => &a.persistence_id,
        }
    }
}

impl PostgresStore {
    /// A store on the database at `url` (`postgres://user:password@host:port/db`;
    /// TLS with `?sslmode=verify-full&sslrootcert=<CA file>`, see
    /// `troubadour-postgres`), with a pool of connections that reconnects after a server restart;
    /// creates the schema if missing. Call from within a tokio runtime (an
    /// actor system's `block_on`): the connections and the writer run there.
    pub async fn connect(url: &str) -> Result<PostgresStore, JournalError> {
        let pool =
            troubadour_postgres::pool(url).map_err(|e| JournalError::Unavailable(e.to_string()))?;
        let mut client = pool.get().await.map_err(no_connection)?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // One process at a time creates the schema.
        tx.batch_execute("SELECT pg_advisory_xact_lock(7262661747)")
            .await
            .map_err(pg_error)?;
        tx.batch_execute(SCHEMA).await.map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        drop(client);
        let runtime = tokio::runtime::Handle::current();
        let (writes, queue) = mpsc::unbounded_channel();
        let stats = Arc::new(StoreStats::new("postgres"));
        runtime.spawn(write_loop(pool.clone(), queue, stats.clone()));
        let (reads, read_queue) = mpsc::unbounded_channel();
        runtime.spawn(read_loop(pool.clone(), read_queue));
        Ok(PostgresStore {
            pool,
            runtime,
            writes,
            reads,
            stats,
        })
    }

    /// The writer's counters: events, group commits and their sizes, how
    /// long writes wait to be durable.
    pub fn stats(&self) -> Arc<StoreStats> {
        self.stats.clone()
    }

    fn write<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> Write) -> StoreFuture<'_, T> {
        let (tx, rx) = oneshot::channel();
        let asked = std::time::Instant::now();
        let sent = self.writes.send(make(tx)).is_ok();
        let stats = self.stats.clone();
        Box::pin(async move {
            if !sent {
                return Err(JournalError::Unavailable(
                    "the PostgreSQL store's writer is gone".into(),
                ));
            }
            let answered = rx.await.unwrap_or_else(|_| {
                Err(JournalError::Unavailable(
                    "the PostgreSQL store's writer stopped before answering".into(),
                ))
            });
            stats.answered(asked.elapsed());
            answered
        })
    }

    fn batched<T: Send + 'static>(
        &self,
        read: Read,
        pick: impl FnOnce(Answer) -> T + Send + 'static,
    ) -> StoreFuture<'_, T> {
        let (tx, rx) = oneshot::channel();
        let sent = self.reads.send((read, tx)).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(JournalError::Unavailable(
                    "the PostgreSQL store's reader is gone".into(),
                ));
            }
            match rx.await {
                Ok(answer) => answer.map(pick),
                Err(_) => Err(JournalError::Unavailable(
                    "the PostgreSQL store's reader stopped before answering".into(),
                )),
            }
        })
    }

    /// Runs work with a pooled connection on the store's runtime (so
    /// whoever polls the returned future needs no runtime of its own):
    /// reads, and the write-behind batches.
    fn read<T, F, W>(&self, work: W) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        W: FnOnce(deadpool_postgres::Object) -> F + Send + 'static,
        F: Future<Output = Result<T, JournalError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        let task = self.runtime.spawn(async move {
            let client = pool.get().await.map_err(no_connection)?;
            work(client).await
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(JournalError::Unavailable(format!(
                    "the store's task ended: {e}"
                )))
            })
        })
    }
}

impl Journal for PostgresStore {
    fn fence(&self, persistence_id: &str, epoch: u64) -> StoreFuture<'_, Fenced> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::Fence(id, epoch, r))
    }

    fn append(&self, append: Append) -> StoreFuture<'_, ()> {
        self.write(move |r| Write::Append(append, r))
    }

    fn replay(
        &self,
        persistence_id: &str,
        from: u64,
        max: usize,
    ) -> StoreFuture<'_, Vec<EventRecord>> {
        let read = Read::Replay(
            persistence_id.to_string(),
            from,
            max.min(i64::MAX as usize) as i64,
        );
        self.batched(read, |answer| match answer {
            Answer::Events(events) => events,
            Answer::Snapshot(_) => Vec::new(),
        })
    }

    fn delete_to(&self, persistence_id: &str, to: u64) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::DeleteTo(id, to, r))
    }
}

impl SnapshotStore for PostgresStore {
    fn save(&self, persistence_id: &str, snapshot: SnapshotRecord) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::SaveSnapshot(id, snapshot, r))
    }

    fn latest(&self, persistence_id: &str) -> StoreFuture<'_, Option<SnapshotRecord>> {
        self.batched(
            Read::Latest(persistence_id.to_string()),
            |answer| match answer {
                Answer::Snapshot(snapshot) => snapshot,
                Answer::Events(_) => None,
            },
        )
    }

    fn delete_below(&self, persistence_id: &str, below: u64) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::DeleteSnapshots(id, below, r))
    }
}

/// An id's row, as locked by the batch and moved by its writes.
#[derive(Clone, Copy)]
struct Standing {
    highest: u64,
    epoch: u64,
    changed: bool,
}

async fn read_loop(pool: Pool, mut queue: mpsc::UnboundedReceiver<(Read, Reply<Answer>)>) {
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(READ_BATCHES));
    let mut batch = Vec::with_capacity(MAX_READ_BATCH);
    while queue.recv_many(&mut batch, MAX_READ_BATCH).await > 0 {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        // What queued while waiting for a permit joins this batch.
        while batch.len() < MAX_READ_BATCH {
            match queue.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let reads = std::mem::take(&mut batch);
        let pool = pool.clone();
        tokio::spawn(async move {
            let _permit = permit;
            read_batch(&pool, reads).await;
        });
    }
}

async fn read_batch(pool: &Pool, reads: Vec<(Read, Reply<Answer>)>) {
    let mut replays = Vec::new();
    let mut latest = Vec::new();
    for (read, reply) in reads {
        match read {
            Read::Replay(id, from, max) => replays.push((id, from, max, reply)),
            Read::Latest(id) => latest.push((id, reply)),
        }
    }
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            let e = no_connection(e);
            for (.., reply) in replays {
                let _ = reply.send(Err(e.clone()));
            }
            for (_, reply) in latest {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
    };
    if !replays.is_empty() {
        let ids: Vec<&str> = replays.iter().map(|r| r.0.as_str()).collect();
        let froms: Vec<i64> = replays.iter().map(|r| r.1 as i64).collect();
        let maxes: Vec<i64> = replays.iter().map(|r| r.2).collect();
        let rows = client
            .query(
                "SELECT q.i, j.sequence, j.epoch, j.type_name, j.version, j.codec, j.payload
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS q(id, from_seq, lim, i)
                 CROSS JOIN LATERAL (
                     SELECT sequence, epoch, type_name, version, codec, payload
                     FROM troubadour_journal
                     WHERE persistence_id = q.id AND sequence >= q.from_seq
                     ORDER BY sequence LIMIT q.lim
                 ) AS j",
                &[&ids, &froms, &maxes],
            )
            .await;
        match rows {
            Ok(rows) => {
                let mut per: Vec<Vec<EventRecord>> =
                    (0..replays.len()).map(|_| Vec::new()).collect();
                for row in rows {
                    let i = row.get::<_, i64>(0) as usize - 1;
                    per[i].push(EventRecord {
                        sequence: row.get::<_, i64>(1) as u64,
                        epoch: row.get::<_, i64>(2) as u64,
                        event: stored_event(&row, 3),
                    });
                }
                for ((.., reply), mut events) in replays.into_iter().zip(per) {
                    // In order as read, so checking is all this costs: an
                    // order for the whole result would make the server
                    // sort every row of the batch first.
                    if !events.is_sorted_by_key(|e| e.sequence) {
                        events.sort_unstable_by_key(|e| e.sequence);
                    }
                    let _ = reply.send(Ok(Answer::Events(events)));
                }
            }
            Err(e) => {
                let e = pg_error(e);
                for (.., reply) in replays {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
    if !latest.is_empty() {
        let ids: Vec<&str> = latest.iter().map(|r| r.0.as_str()).collect();
        let rows = client
            .query(
                "SELECT DISTINCT ON (persistence_id)
                        persistence_id, sequence, type_name, version, codec, payload
                 FROM troubadour_snapshots WHERE persistence_id = ANY($1)
                 ORDER BY persistence_id, sequence DESC",
                &[&ids],
            )
            .await;
        match rows {
            Ok(rows) => {
                let found: HashMap<String, SnapshotRecord> = rows
                    .iter()
                    .map(|row| {
                        (
                            row.get::<_, String>(0),
                            SnapshotRecord {
                                sequence: row.get::<_, i64>(1) as u64,
                                state: stored_event(row, 2),
                            },
                        )
                    })
                    .collect();
                for (id, reply) in latest {
                    let _ = reply.send(Ok(Answer::Snapshot(found.get(&id).cloned())));
                }
            }
            Err(e) => {
                let e = pg_error(e);
                for (_, reply) in latest {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

async fn write_loop(pool: Pool, mut queue: mpsc::UnboundedReceiver<Write>, stats: Arc<StoreStats>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut answers = Vec::with_capacity(batch.len());
        let writes = batch.len();
        let events: Vec<u64> = batch
            .iter()
            .map(|w| match w {
                Write::Append(a, _) => a.events.len() as u64,
                _ => 0,
            })
            .collect();
        let outcome = run_batch(&pool, &mut batch, &mut answers).await;
        let failed = outcome.err();
        stats.transaction(
            writes,
            events_kept(&events, &answers),
            refusals(&answers),
            failed.is_none(),
        );
        for write in batch.drain(..) {
            write.refuse(
                failed
                    .clone()
                    .unwrap_or_else(|| JournalError::Unavailable("not run".into())),
            );
        }
        for pending in answers {
            pending.answer(failed.as_ref());
        }
    }
}

async fn run_batch(
    pool: &Pool,
    batch: &mut Vec<Write>,
    answers: &mut Vec<Pending>,
) -> Result<(), JournalError> {
    let mut client = pool.get().await.map_err(no_connection)?;
    let tx = client.transaction().await.map_err(pg_error)?;
    // Lock every id the batch touches, in a fixed order (no deadlock with
    // another process's batch), creating rows for new ids.
    let mut ids: Vec<String> = batch.iter().map(|w| w.id().to_string()).collect();
    ids.sort();
    ids.dedup();
    tx.execute(
        "INSERT INTO troubadour_writers (persistence_id, highest, epoch)
         SELECT id, 0, 0 FROM unnest($1::text[]) AS id ORDER BY id
         ON CONFLICT (persistence_id) DO NOTHING",
        &[&ids],
    )
    .await
    .map_err(pg_error)?;
    let rows = tx
        .query(
            "SELECT persistence_id, highest, epoch FROM troubadour_writers
             WHERE persistence_id = ANY($1) ORDER BY persistence_id FOR UPDATE",
            &[&ids],
        )
        .await
        .map_err(pg_error)?;
    let mut standing: HashMap<String, Standing> = rows
        .iter()
        .map(|row| {
            (
                row.get::<_, String>(0),
                Standing {
                    highest: row.get::<_, i64>(1) as u64,
                    epoch: row.get::<_, i64>(2) as u64,
                    changed: false,
                },
            )
        })
        .collect();
    // The lowest stored event of each id that is fenced (recovery needs it).
    let fenced_ids: Vec<String> = batch
        .iter()
        .filter_map(|w| match w {
            Write::Fence(id, ..) => Some(id.clone()),
            _ => None,
        })
        .collect();
    let mut lowest: HashMap<String, u64> = HashMap::new();
    if !fenced_ids.is_empty() {
        for row in tx
            .query(
                "SELECT q.id, j.sequence FROM unnest($1::text[]) AS q(id)
                 CROSS JOIN LATERAL (
                     SELECT sequence FROM troubadour_journal
                     WHERE persistence_id = q.id ORDER BY sequence LIMIT 1
                 ) AS j",
                &[&fenced_ids],
            )
            .await
            .map_err(pg_error)?
        {
            lowest.insert(row.get(0), row.get::<_, i64>(1) as u64);
        }
    }

    // Decide each write in queue order; collect the events to insert.
    let mut ev_ids: Vec<&str> = vec![];
    let mut ev_seq: Vec<i64> = vec![];
    let mut ev_epoch: Vec<i64> = vec![];
    let mut ev_type: Vec<&str> = vec![];
    let mut ev_version: Vec<i32> = vec![];
    let mut ev_codec: Vec<&str> = vec![];
    let mut ev_payload: Vec<&[u8]> = vec![];
    let mut deletes: Vec<(String, u64)> = vec![];
    let mut snapshots: Vec<(String, SnapshotRecord)> = vec![];
    let mut snapshot_deletes: Vec<(String, u64)> = vec![];
    let writes = std::mem::take(batch);
    let mut appends: Vec<Append> = vec![];
    for write in writes {
        let Some(s) = standing.get_mut(write.id()) else {
            write.refuse(JournalError::Unavailable("the id's row vanished".into()));
            continue;
        };
        match write {
            Write::Fence(id, epoch, reply) => {
                let result = if s.epoch > epoch {
                    Err(JournalError::Fenced {
                        persistence_id: id.clone(),
                        epoch,
                        current: s.epoch,
                    })
                } else {
                    s.epoch = epoch;
                    s.changed = true;
                    Ok(Fenced {
                        highest: s.highest,
                        lowest: lowest
                            .get(&id)
                            .copied()
                            .filter(|l| *l <= s.highest)
                            .unwrap_or(s.highest + 1),
                    })
                };
                answers.push(Pending::Fence(reply, result));
            }
            Write::Append(append, reply) => {
                let result = crate::store::check_append(&append, s.highest, s.epoch);
                if result.is_ok() {
                    s.highest += append.events.len() as u64;
                    s.epoch = append.epoch;
                    s.changed = true;
                    appends.push(append);
                }
                answers.push(Pending::Unit(reply, result));
            }
            Write::DeleteTo(id, to, reply) => {
                deletes.push((id, to));
                answers.push(Pending::Unit(reply, Ok(())));
            }
            Write::SaveSnapshot(id, snapshot, reply) => {
                snapshots.push((id, snapshot));
                answers.push(Pending::Unit(reply, Ok(())));
            }
            Write::DeleteSnapshots(id, below, reply) => {
                snapshot_deletes.push((id, below));
                answers.push(Pending::Unit(reply, Ok(())));
            }
        }
    }
    for a in &appends {
        for (sequence, e) in (a.first_sequence..).zip(&a.events) {
            ev_ids.push(&a.persistence_id);
            ev_seq.push(sequence as i64);
            ev_epoch.push(a.epoch as i64);
            ev_type.push(&e.type_name);
            ev_version.push(e.version as i32);
            ev_codec.push(&e.codec);
            ev_payload.push(&e.payload);
        }
    }
    if !ev_ids.is_empty() {
        tx.execute(
            "INSERT INTO troubadour_journal
             (persistence_id, sequence, epoch, type_name, version, codec, payload)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[],
                                  $5::integer[], $6::text[], $7::bytea[])",
            &[
                &ev_ids,
                &ev_seq,
                &ev_epoch,
                &ev_type,
                &ev_version,
                &ev_codec,
                &ev_payload,
            ],
        )
        .await
        .map_err(pg_error)?;
    }
    let (moved_ids, moved_highest, moved_epoch): (Vec<&str>, Vec<i64>, Vec<i64>) = standing
        .iter()
        .filter(|(_, s)| s.changed)
        .map(|(id, s)| (id.as_str(), s.highest as i64, s.epoch as i64))
        .fold((vec![], vec![], vec![]), |mut acc, (i, h, e)| {
            acc.0.push(i);
            acc.1.push(h);
            acc.2.push(e);
            acc
        });
    if !moved_ids.is_empty() {
        tx.execute(
            "UPDATE troubadour_writers AS w SET highest = v.highest, epoch = v.epoch
             FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS v(id, highest, epoch)
             WHERE w.persistence_id = v.id",
            &[&moved_ids, &moved_highest, &moved_epoch],
        )
        .await
        .map_err(pg_error)?;
    }
    for (id, snapshot) in &snapshots {
        tx.execute(
            "INSERT INTO troubadour_snapshots (persistence_id, sequence, type_name, version, codec, payload)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (persistence_id, sequence) DO UPDATE SET type_name = excluded.type_name,
               version = excluded.version, codec = excluded.codec, payload = excluded.payload",
            &[
                id,
                &(snapshot.sequence as i64),
                &snapshot.state.type_name,
                &(snapshot.state.version as i32),
                &snapshot.state.codec,
                &snapshot.state.payload,
            ],
        )
        .await
        .map_err(pg_error)?;
    }
    for (id, below) in &snapshot_deletes {
        tx.execute(
            "DELETE FROM troubadour_snapshots WHERE persistence_id = $1 AND sequence < $2",
            &[id, &(*below as i64)],
        )
        .await
        .map_err(pg_error)?;
    }
    for (id, to) in &deletes {
        tx.execute(
            "DELETE FROM troubadour_journal WHERE persistence_id = $1 AND sequence <= $2",
            &[id, &(*to as i64)],
        )
        .await
        .map_err(pg_error)?;
    }
    tx.commit().await.map_err(pg_error)
}

/// The four columns (type name, version, codec, payload) from `first` on.
fn stored_event(row: &tokio_postgres::Row, first: usize) -> StoredEvent {
    StoredEvent {
        type_name: row.get(first),
        version: row.get::<_, i32>(first + 1) as u32,
        codec: row.get(first + 2),
        payload: row.get(first + 3),
    }
}

fn no_connection(e: deadpool_postgres::PoolError) -> JournalError {
    JournalError::Unavailable(format!(
        "no connection to PostgreSQL: {}",
        troubadour_postgres::describe(&e)
    ))
}

fn pg_error(e: tokio_postgres::Error) -> JournalError {
    match e.code() {
        Some(c) if *c == SqlState::DISK_FULL || *c == SqlState::OUT_OF_MEMORY => {
            JournalError::StorageFull(format!("PostgreSQL: {}", troubadour_postgres::describe(&e)))
        }
        _ => {
            JournalError::Unavailable(format!("PostgreSQL: {}", troubadour_postgres::describe(&e)))
        }
    }
}

impl crate::write_behind::StateStore for PostgresStore {
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>> {
        // A batch of its own (the flusher already batches), in one
        // statement; keys sorted so that two nodes' batches lock rows in
        // the same order. A row of a newer epoch keeps its state (the
        // `WHERE` of the update); those keys come back from the second
        // statement, which sees the rows the first one locked.
        self.read(move |mut client| async move {
            let mut states = states;
            states.sort_by(|a, b| a.key.cmp(&b.key));
            states.dedup_by(|a, b| a.key == b.key);
            let keys: Vec<&str> = states.iter().map(|w| w.key.as_str()).collect();
            let epochs: Vec<i64> = states.iter().map(|w| w.epoch as i64).collect();
            let types: Vec<&str> = states.iter().map(|w| w.state.type_name.as_str()).collect();
            let versions: Vec<i32> = states.iter().map(|w| w.state.version as i32).collect();
            let codecs: Vec<&str> = states.iter().map(|w| w.state.codec.as_str()).collect();
            let payloads: Vec<&[u8]> = states.iter().map(|w| w.state.payload.as_slice()).collect();
            let tx = client.transaction().await.map_err(pg_error)?;
            tx.execute(
                "INSERT INTO troubadour_states (key, epoch, type_name, version, codec, payload)
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[],
                                      $5::text[], $6::bytea[])
                 ON CONFLICT (key) DO UPDATE SET epoch = excluded.epoch,
                   type_name = excluded.type_name, version = excluded.version,
                   codec = excluded.codec, payload = excluded.payload
                 WHERE troubadour_states.epoch <= excluded.epoch",
                &[&keys, &epochs, &types, &versions, &codecs, &payloads],
            )
            .await
            .map_err(pg_error)?;
            let refused = tx
                .query(
                    "SELECT s.key, s.epoch FROM troubadour_states s
                     JOIN unnest($1::text[], $2::bigint[]) AS w(key, epoch) ON s.key = w.key
                     WHERE s.epoch > w.epoch",
                    &[&keys, &epochs],
                )
                .await
                .map_err(pg_error)?;
            tx.commit().await.map_err(pg_error)?;
            Ok(refused
                .iter()
                .map(|row| Superseded {
                    key: row.get(0),
                    current: row.get::<_, i64>(1) as u64,
                })
                .collect())
        })
    }

    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>> {
        let key = key.to_string();
        self.read(move |client| async move {
            let row = client
                .query_opt(
                    "SELECT type_name, version, codec, payload FROM troubadour_states
                     WHERE key = $1 AND type_name <> ''",
                    &[&key],
                )
                .await
                .map_err(pg_error)?;
            Ok(row.map(|row| stored_event(&row, 0)))
        })
    }

    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState> {
        // A key with no state yet is kept as a row with an empty type
        // name (it reads as no state). The insert makes sure a row exists
        // (waiting for a concurrent claimant's insert to commit), so the
        // row lock that follows orders every claim and write of the key.
        let key = key.to_string();
        self.read(move |mut client| async move {
            let tx = client.transaction().await.map_err(pg_error)?;
            let created = tx
                .execute(
                    "INSERT INTO troubadour_states (key, epoch, type_name, version, codec, payload)
                     VALUES ($1, $2, '', 0, '', '') ON CONFLICT (key) DO NOTHING",
                    &[&key, &(epoch as i64)],
                )
                .await
                .map_err(pg_error)?;
            if created == 1 {
                tx.commit().await.map_err(pg_error)?;
                return Ok(ClaimedState {
                    epoch: 0,
                    state: None,
                });
            }
            let row = tx
                .query_one(
                    "SELECT epoch, type_name, version, codec, payload FROM troubadour_states
                     WHERE key = $1 FOR UPDATE",
                    &[&key],
                )
                .await
                .map_err(pg_error)?;
            let held = row.get::<_, i64>(0) as u64;
            if held > epoch {
                return Err(JournalError::Fenced {
                    persistence_id: key,
                    epoch,
                    current: held,
                });
            }
            if held < epoch {
                tx.execute(
                    "UPDATE troubadour_states SET epoch = $2 WHERE key = $1",
                    &[&key, &(epoch as i64)],
                )
                .await
                .map_err(pg_error)?;
            }
            tx.commit().await.map_err(pg_error)?;
            let stored = stored_event(&row, 1);
            Ok(ClaimedState {
                epoch: held,
                state: (!stored.type_name.is_empty()).then_some(stored),
            })
        })
    }
}

fn reminder_row(row: &tokio_postgres::Row) -> crate::reminders::ReminderRecord {
    crate::reminders::ReminderRecord {
        kind: row.get(0),
        id: row.get(1),
        name: row.get(2),
        due_ms: row.get(3),
        period_ms: row.get(4),
    }
}

impl crate::reminders::ReminderStore for PostgresStore {
    fn put_reminder(&self, r: crate::reminders::ReminderRecord) -> StoreFuture<'_, ()> {
        self.read(move |client| async move {
            client
                .execute(
                    "INSERT INTO troubadour_reminders (kind, id, name, due_ms, period_ms)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (kind, id, name) DO UPDATE SET due_ms = excluded.due_ms,
                       period_ms = excluded.period_ms",
                    &[&r.kind, &r.id, &r.name, &r.due_ms, &r.period_ms],
                )
                .await
                .map(|_| ())
                .map_err(pg_error)
        })
    }

    fn cancel_reminder(&self, kind: &str, id: &str, name: &str) -> StoreFuture<'_, bool> {
        let (kind, id, name) = (kind.to_string(), id.to_string(), name.to_string());
        self.read(move |client| async move {
            client
                .execute(
                    "DELETE FROM troubadour_reminders WHERE kind = $1 AND id = $2 AND name = $3",
                    &[&kind, &id, &name],
                )
                .await
                .map(|n| n > 0)
                .map_err(pg_error)
        })
    }

    fn reminders_of(
        &self,
        kind: &str,
        id: &str,
    ) -> StoreFuture<'_, Vec<crate::reminders::ReminderRecord>> {
        let (kind, id) = (kind.to_string(), id.to_string());
        self.read(move |client| async move {
            Ok(client
                .query(
                    "SELECT kind, id, name, due_ms, period_ms FROM troubadour_reminders
                     WHERE kind = $1 AND id = $2 ORDER BY name",
                    &[&kind, &id],
                )
                .await
                .map_err(pg_error)?
                .iter()
                .map(reminder_row)
                .collect())
        })
    }

    fn due_reminders(
        &self,
        now_ms: i64,
        max: usize,
    ) -> StoreFuture<'_, Vec<crate::reminders::ReminderRecord>> {
        let max = max.min(i64::MAX as usize) as i64;
        self.read(move |client| async move {
            Ok(client
                .query(
                    "SELECT kind, id, name, due_ms, period_ms FROM troubadour_reminders
                     WHERE due_ms <= $1 ORDER BY due_ms LIMIT $2",
                    &[&now_ms, &max],
                )
                .await
                .map_err(pg_error)?
                .iter()
                .map(reminder_row)
                .collect())
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
        let (kind, id, name) = (kind.to_string(), id.to_string(), name.to_string());
        self.read(move |client| async move {
            let n = match next_ms {
                Some(next) => {
                    client
                        .execute(
                            "UPDATE troubadour_reminders SET due_ms = $5
                             WHERE kind = $1 AND id = $2 AND name = $3 AND due_ms = $4",
                            &[&kind, &id, &name, &seen_ms, &next],
                        )
                        .await
                }
                None => {
                    client
                        .execute(
                            "DELETE FROM troubadour_reminders
                             WHERE kind = $1 AND id = $2 AND name = $3 AND due_ms = $4",
                            &[&kind, &id, &name, &seen_ms],
                        )
                        .await
                }
            };
            n.map(|n| n == 1).map_err(pg_error)
        })
    }
}
