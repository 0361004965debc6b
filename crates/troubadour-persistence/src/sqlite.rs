//! The SQLite store, the embedded default: one database file holding the
//! journal, the writers' epochs and the snapshots.
//!
//! **Group commit.** Every write (appends, fences, snapshots, deletes) goes
//! to one writer thread. It takes whatever writes are waiting, up to
//! [`SqliteOptions::max_batch`], and runs them in one transaction, each in
//! a savepoint of its own (so one refused append does not undo the
//! others), then commits once: one fsync for all of them. Under load the
//! batch grows by itself, since writes queue up while the previous commit
//! is syncing; alone, a write is committed at once. Each write is answered
//! only after the commit, so `Ok` means durable.
//!
//! **Reads** (replay, snapshots) run on their own threads with their own
//! read-only connections: in WAL mode they never wait for the writer.
//!
//! **Durability.** WAL with `synchronous=FULL` by default: a commit is
//! synced before it is answered, so acknowledged events survive a power
//! loss. [`Synchronous::Normal`] survives a crash of the process but may
//! lose the last commits on a power loss.

use crate::error::JournalError;
use crate::event::StoredEvent;
use crate::store::{
    Append, EventRecord, Fenced, Journal, SnapshotRecord, SnapshotStore, StoreFuture,
};
use crossbeam_channel::{Receiver, Sender};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How SQLite syncs a commit (its `synchronous` pragma, in WAL mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is synced before it is answered: acknowledged events
    /// survive a power loss. The default.
    Full,
    /// Commits are synced at checkpoints only: acknowledged events survive
    /// a crash of the process, not a power loss.
    Normal,
}

/// Settings of a [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// How commits are synced. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// The most writes one transaction takes. Default 1,024.
    pub max_batch: usize,
    /// Threads (each with a connection) that serve reads. Default 2.
    pub readers: usize,
    /// How long a statement waits for a lock held by another process
    /// before failing. Default 5 s.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            max_batch: 1024,
            readers: 2,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS troubadour_journal (
    persistence_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    type_name TEXT NOT NULL,
    version INTEGER NOT NULL,
    codec TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (persistence_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS troubadour_writers (
    persistence_id TEXT PRIMARY KEY,
    highest INTEGER NOT NULL,
    epoch INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS troubadour_snapshots (
    persistence_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    type_name TEXT NOT NULL,
    version INTEGER NOT NULL,
    codec TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (persistence_id, sequence)
) WITHOUT ROWID;
";

/// The SQLite journal and snapshot store. Clones share the same threads;
/// they end when the last clone is dropped, after the writes already
/// queued.
///
/// ```
/// use troubadour_persistence::{Persistence, SqliteStore};
/// let dir = tempfile::tempdir().unwrap();
/// let store = SqliteStore::open(dir.path().join("events.db")).unwrap();
/// let persistence = Persistence::new(store.clone(), store);
/// # let _ = persistence;
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Channels>,
}

struct Channels {
    writes: Sender<Write>,
    reads: Sender<Read>,
    path: PathBuf,
}

type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

enum Write {
    Fence(String, u64, Reply<Fenced>),
    Append(Append, Reply<()>),
    DeleteTo(String, u64, Reply<()>),
    SaveSnapshot(String, SnapshotRecord, Reply<()>),
    DeleteSnapshots(String, u64, Reply<()>),
}

enum Read {
    Replay(String, u64, usize, Reply<Vec<EventRecord>>),
    Latest(String, Reply<Option<SnapshotRecord>>),
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` with the default
    /// options; creates the schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the database at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let writer = Connection::open(&path).map_err(|e| opening(&path, e))?;
        writer
            .busy_timeout(options.busy_timeout)
            .and_then(|_| writer.pragma_update(None, "journal_mode", "WAL"))
            .and_then(|_| {
                let sync = match options.synchronous {
                    Synchronous::Full => "FULL",
                    Synchronous::Normal => "NORMAL",
                };
                writer.pragma_update(None, "synchronous", sync)
            })
            .and_then(|_| writer.execute_batch(SCHEMA))
            .map_err(|e| opening(&path, e))?;
        let (writes, write_queue) = crossbeam_channel::unbounded();
        let (reads, read_queue) = crossbeam_channel::unbounded();
        let max_batch = options.max_batch.max(1);
        std::thread::Builder::new()
            .name("troubadour-sqlite-writer".into())
            .spawn(move || write_loop(writer, write_queue, max_batch))
            .map_err(|e| JournalError::Unavailable(format!("cannot start the writer: {e}")))?;
        for i in 0..options.readers.max(1) {
            let reader = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .and_then(|c| c.busy_timeout(options.busy_timeout).map(|_| c))
            .map_err(|e| opening(&path, e))?;
            let queue = read_queue.clone();
            std::thread::Builder::new()
                .name(format!("troubadour-sqlite-reader-{i}"))
                .spawn(move || read_loop(reader, queue))
                .map_err(|e| JournalError::Unavailable(format!("cannot start a reader: {e}")))?;
        }
        Ok(SqliteStore {
            inner: Arc::new(Channels {
                writes,
                reads,
                path,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn write<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> Write) -> StoreFuture<'_, T> {
        let (tx, rx) = oneshot::channel();
        let sent = self.inner.writes.send(make(tx)).is_ok();
        Box::pin(answer(sent, rx))
    }

    fn read<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> Read) -> StoreFuture<'_, T> {
        let (tx, rx) = oneshot::channel();
        let sent = self.inner.reads.send(make(tx)).is_ok();
        Box::pin(answer(sent, rx))
    }
}

async fn answer<T>(
    sent: bool,
    rx: oneshot::Receiver<Result<T, JournalError>>,
) -> Result<T, JournalError> {
    if !sent {
        return Err(JournalError::Unavailable(
            "the SQLite store's threads are gone".into(),
        ));
    }
    rx.await.unwrap_or_else(|_| {
        Err(JournalError::Unavailable(
            "the SQLite store's thread stopped before answering".into(),
        ))
    })
}

impl Journal for SqliteStore {
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
        let id = persistence_id.to_string();
        self.read(move |r| Read::Replay(id, from, max, r))
    }

    fn delete_to(&self, persistence_id: &str, to: u64) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::DeleteTo(id, to, r))
    }
}

impl SnapshotStore for SqliteStore {
    fn save(&self, persistence_id: &str, snapshot: SnapshotRecord) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::SaveSnapshot(id, snapshot, r))
    }

    fn latest(&self, persistence_id: &str) -> StoreFuture<'_, Option<SnapshotRecord>> {
        let id = persistence_id.to_string();
        self.read(move |r| Read::Latest(id, r))
    }

    fn delete_below(&self, persistence_id: &str, below: u64) -> StoreFuture<'_, ()> {
        let id = persistence_id.to_string();
        self.write(move |r| Write::DeleteSnapshots(id, below, r))
    }
}

/// An answer held until the transaction's commit decides it.
enum Pending {
    Fence(Reply<Fenced>, Result<Fenced, JournalError>),
    Unit(Reply<()>, Result<(), JournalError>),
}

impl Pending {
    fn is_ok(&self) -> bool {
        match self {
            Pending::Fence(_, r) => r.is_ok(),
            Pending::Unit(_, r) => r.is_ok(),
        }
    }

    /// Answers; a write that succeeded inside a transaction that did not
    /// commit gets `failed` instead.
    fn answer(self, failed: Option<&JournalError>) {
        match self {
            Pending::Fence(tx, r) => {
                let _ = tx.send(r.and_then(|v| failed.map_or(Ok(v), |e| Err(e.clone()))));
            }
            Pending::Unit(tx, r) => {
                let _ = tx.send(r.and_then(|v| failed.map_or(Ok(v), |e| Err(e.clone()))));
            }
        }
    }
}

fn write_loop(mut conn: Connection, queue: Receiver<Write>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let mut answers = Vec::with_capacity(batch.len());
        let outcome = (|| -> Result<(), JournalError> {
            let mut tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(store_error)?;
            for write in batch.drain(..) {
                let sp = tx.savepoint().map_err(store_error)?;
                let pending = apply(&sp, write);
                if pending.is_ok() {
                    sp.commit().map_err(store_error)?;
                } else {
                    // Rolled back to the savepoint: the others stand.
                    sp.finish().map_err(store_error)?;
                }
                answers.push(pending);
            }
            tx.commit().map_err(store_error)
        })();
        let failed = outcome.err();
        // Writes not reached before a failure are answered too.
        for write in batch.drain(..) {
            refuse(
                write,
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

fn refuse(write: Write, e: JournalError) {
    match write {
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

fn apply(conn: &Connection, write: Write) -> Pending {
    match write {
        Write::Fence(id, epoch, tx) => Pending::Fence(tx, fence(conn, &id, epoch)),
        Write::Append(append, tx) => Pending::Unit(tx, append_events(conn, append)),
        Write::DeleteTo(id, to, tx) => Pending::Unit(
            tx,
            conn.execute(
                "DELETE FROM troubadour_journal WHERE persistence_id = ?1 AND sequence <= ?2",
                params![id, to as i64],
            )
            .map(|_| ())
            .map_err(store_error),
        ),
        Write::SaveSnapshot(id, s, tx) => Pending::Unit(
            tx,
            conn.prepare_cached(
                "INSERT OR REPLACE INTO troubadour_snapshots
                 (persistence_id, sequence, type_name, version, codec, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    id,
                    s.sequence as i64,
                    s.state.type_name,
                    s.state.version,
                    s.state.codec,
                    s.state.payload
                ])
            })
            .map(|_| ())
            .map_err(store_error),
        ),
        Write::DeleteSnapshots(id, below, tx) => Pending::Unit(
            tx,
            conn.execute(
                "DELETE FROM troubadour_snapshots WHERE persistence_id = ?1 AND sequence < ?2",
                params![id, below as i64],
            )
            .map(|_| ())
            .map_err(store_error),
        ),
    }
}

/// The id's highest sequence number and epoch (0, 0 for a new id).
fn writer_row(conn: &Connection, id: &str) -> Result<(u64, u64), JournalError> {
    conn.prepare_cached("SELECT highest, epoch FROM troubadour_writers WHERE persistence_id = ?1")
        .and_then(|mut st| {
            st.query_row(params![id], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
            })
            .optional()
        })
        .map(|r| r.map_or((0, 0), |(h, e)| (h as u64, e as u64)))
        .map_err(store_error)
}

fn set_writer_row(
    conn: &Connection,
    id: &str,
    highest: u64,
    epoch: u64,
) -> Result<(), JournalError> {
    conn.prepare_cached(
        "INSERT INTO troubadour_writers (persistence_id, highest, epoch) VALUES (?1, ?2, ?3)
         ON CONFLICT (persistence_id) DO UPDATE SET highest = excluded.highest, epoch = excluded.epoch",
    )
    .and_then(|mut st| st.execute(params![id, highest as i64, epoch as i64]))
    .map(|_| ())
    .map_err(store_error)
}

fn fence(conn: &Connection, id: &str, epoch: u64) -> Result<Fenced, JournalError> {
    let (highest, current) = writer_row(conn, id)?;
    if current > epoch {
        return Err(JournalError::Fenced {
            persistence_id: id.to_string(),
            epoch,
            current,
        });
    }
    if current != epoch || highest == 0 {
        set_writer_row(conn, id, highest, epoch)?;
    }
    let lowest: Option<i64> = conn
        .prepare_cached("SELECT MIN(sequence) FROM troubadour_journal WHERE persistence_id = ?1")
        .and_then(|mut st| st.query_row(params![id], |row| row.get(0)))
        .map_err(store_error)?;
    Ok(Fenced {
        highest,
        lowest: lowest.map_or(highest + 1, |l| l as u64),
    })
}

fn append_events(conn: &Connection, append: Append) -> Result<(), JournalError> {
    let (highest, current) = writer_row(conn, &append.persistence_id)?;
    if current > append.epoch {
        return Err(JournalError::Fenced {
            persistence_id: append.persistence_id,
            epoch: append.epoch,
            current,
        });
    }
    if append.first_sequence != highest + 1 {
        return Err(JournalError::SequenceConflict {
            persistence_id: append.persistence_id,
            attempted: append.first_sequence,
            highest,
        });
    }
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO troubadour_journal
             (persistence_id, sequence, epoch, type_name, version, codec, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(store_error)?;
    let mut sequence = append.first_sequence;
    for e in &append.events {
        insert
            .execute(params![
                append.persistence_id,
                sequence as i64,
                append.epoch as i64,
                e.type_name,
                e.version,
                e.codec,
                e.payload
            ])
            .map_err(store_error)?;
        sequence += 1;
    }
    set_writer_row(conn, &append.persistence_id, sequence - 1, append.epoch)
}

fn read_loop(conn: Connection, queue: Receiver<Read>) {
    while let Ok(read) = queue.recv() {
        match read {
            Read::Replay(id, from, max, tx) => {
                let _ = tx.send(replay(&conn, &id, from, max));
            }
            Read::Latest(id, tx) => {
                let _ = tx.send(latest(&conn, &id));
            }
        }
    }
}

fn replay(
    conn: &Connection,
    id: &str,
    from: u64,
    max: usize,
) -> Result<Vec<EventRecord>, JournalError> {
    let mut st = conn
        .prepare_cached(
            "SELECT sequence, epoch, type_name, version, codec, payload FROM troubadour_journal
             WHERE persistence_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3",
        )
        .map_err(store_error)?;
    let rows = st
        .query_map(params![id, from as i64, max as i64], |row| {
            Ok(EventRecord {
                sequence: row.get::<_, i64>(0)? as u64,
                epoch: row.get::<_, i64>(1)? as u64,
                event: StoredEvent {
                    type_name: row.get(2)?,
                    version: row.get(3)?,
                    codec: row.get(4)?,
                    payload: row.get(5)?,
                },
            })
        })
        .map_err(store_error)?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(|e| corrupt_row(id, e))
}

fn latest(conn: &Connection, id: &str) -> Result<Option<SnapshotRecord>, JournalError> {
    conn.prepare_cached(
        "SELECT sequence, type_name, version, codec, payload FROM troubadour_snapshots
         WHERE persistence_id = ?1 ORDER BY sequence DESC LIMIT 1",
    )
    .map_err(store_error)?
    .query_row(params![id], |row| {
        Ok(SnapshotRecord {
            sequence: row.get::<_, i64>(0)? as u64,
            state: StoredEvent {
                type_name: row.get(1)?,
                version: row.get(2)?,
                codec: row.get(3)?,
                payload: row.get(4)?,
            },
        })
    })
    .optional()
    .map_err(|e| corrupt_row(id, e))
}

/// A row whose columns do not read as their types: a broken store, not
/// an unreachable one.
fn corrupt_row(id: &str, e: rusqlite::Error) -> JournalError {
    match e {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => JournalError::Corrupt {
            persistence_id: id.to_string(),
            detail: format!("a row does not read: {e}"),
        },
        other => store_error(other),
    }
}

fn store_error(e: rusqlite::Error) -> JournalError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => JournalError::StorageFull(e.to_string()),
        _ => JournalError::Unavailable(e.to_string()),
    }
}

fn opening(path: &Path, e: rusqlite::Error) -> JournalError {
    JournalError::Unavailable(format!("cannot open {}: {e}", path.display()))
}
