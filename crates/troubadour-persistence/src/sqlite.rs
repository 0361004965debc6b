//! The SQLite store, the embedded default: one database file holding the
//! journal, the writers' epochs and the snapshots.
//!
//! **Group commit.** Every write (appends, fences, snapshots, deletes) goes
//! to one writer thread. It takes whatever writes are waiting, up to
//! [`SqliteOptions::max_batch`], and runs them in one transaction, then
//! commits once: one fsync for all of them. A write refused by the
//! journal's rules (fenced, out of sequence) is refused before it changes
//! anything, so the others stand; a store error fails the whole batch. Under load the
//! batch grows by itself, since writes queue up while the previous commit
//! is syncing; alone, a write is committed at once. Each write is answered
//! only after the commit, so `Ok` means durable.
//!
//! **Reads** (replay, snapshots) run on their own threads with their own
//! read-only connections: in WAL mode they never wait for the writer.
//!
//! **Durability.** [`Synchronous::Full`] by default: a commit is synced
//! before it is answered, so acknowledged events survive a power loss.
//! The sync runs on a thread of its own (the syncer) while the writer
//! builds the next batch, so the disk's sync time and the writer's work
//! overlap instead of adding up. [`Synchronous::Normal`] survives a crash
//! of the process but may lose the last commits on a power loss.

use crate::batch::{events_kept, is_refusal, refusals, Pending, Reply};
use crate::error::JournalError;
use crate::event::StoredEvent;
use crate::sqlite_batch::{self, BatchError, BatchRow, Directory};
use crate::stats::StoreStats;
use crate::store::{
    Append, EventRecord, Fenced, Journal, SnapshotRecord, SnapshotStore, StoreFuture,
};
use crate::write_behind::{ClaimedState, StateWrite, Superseded};
use crossbeam_channel::{Receiver, Sender};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How SQLite syncs a commit (its `synchronous` pragma, in WAL mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is synced before it is answered: acknowledged events
    /// survive a power loss. The default. (The store's own thread syncs
    /// the WAL file after SQLite has written the commit to it, overlapping
    /// the writer's next batch; a commit is visible to this store's reads
    /// from the moment it is written, and answered once synced.)
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
    /// The writer's page cache, in KiB. Default 64 MiB.
    pub cache_kib: u32,
    /// The most the database file may grow to, in bytes (`None`: as far
    /// as the disk allows). A write past it fails with
    /// [`JournalError::StorageFull`], as on a full disk.
    pub max_size: Option<u64>,
    /// How long the write-ahead log may grow, in bytes, before the writer
    /// checkpoints it between two batches so that it starts over from its
    /// beginning (and the file is cut back to this length). Without it, a
    /// writer that is never idle would grow the log for as long as the
    /// load lasts. Each such restart holds the writer for a checkpoint of
    /// the last few batches and two syncs (5–9 ms on the machine of
    /// BENCHMARKS.md), so a smaller limit saves disk at the cost of
    /// latency under sustained load. The log may pass it by one
    /// transaction: a batch, or a step of a move of
    /// [`fold_at`](Self::fold_at) events (about a MiB). Default 256 MiB
    /// (PostgreSQL's `max_wal_size` is 1 GB).
    pub wal_limit: u64,
    /// How many events the writer appends to the journal's recent part
    /// before it moves them into the part kept in id order (in eight
    /// steps, one between each two batches; also after 256 group
    /// commits, whatever their size). A group commit's events are one row
    /// of the recent part, where each actor's next event in id order
    /// would dirty a page of its own; the move writes each id's events
    /// together. A larger value moves more events per id at once but
    /// holds the writer longer at each step, and gives replays more rows
    /// of the recent part to look through. Default 16,384.
    pub fold_at: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            max_batch: 1024,
            readers: 2,
            busy_timeout: Duration::from_secs(5),
            cache_kib: 64 * 1024,
            max_size: None,
            wal_limit: 256 << 20,
            fold_at: 16_384,
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
CREATE TABLE IF NOT EXISTS troubadour_journal_batches (
    batch INTEGER PRIMARY KEY AUTOINCREMENT,
    directory BLOB NOT NULL,
    events BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS troubadour_journal_move (
    only INTEGER PRIMARY KEY CHECK (only = 0),
    through INTEGER NOT NULL,
    moved_to TEXT
);
CREATE TABLE IF NOT EXISTS troubadour_writers (
    persistence_id TEXT PRIMARY KEY,
    highest INTEGER NOT NULL,
    epoch INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS troubadour_states (
    key TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL DEFAULT 0,
    type_name TEXT NOT NULL,
    version INTEGER NOT NULL,
    codec TEXT NOT NULL,
    payload BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS troubadour_reminders (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    name TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    period_ms INTEGER,
    PRIMARY KEY (kind, id, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS troubadour_reminders_due ON troubadour_reminders (due_ms);
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
    /// Dropped with the last clone: the checkpointer stops.
    _checkpoints: Sender<()>,
    path: PathBuf,
    stats: Arc<StoreStats>,
}

enum Write {
    Fence(String, u64, Reply<Fenced>),
    Append(Append, Reply<()>),
    DeleteTo(String, u64, Reply<()>),
    SaveSnapshot(String, SnapshotRecord, Reply<()>),
    DeleteSnapshots(String, u64, Reply<()>),
    States(Vec<StateWrite>, Reply<Vec<Superseded>>),
    Claim(String, u64, Reply<ClaimedState>),
    /// Other crate modules' writes (reminders), in the same batches.
    Exec(WriteWork, Reply<i64>),
}

/// A write another module runs on the writer's transaction.
pub(crate) type WriteWork = Box<dyn FnOnce(&Connection) -> Result<i64, JournalError> + Send>;
/// A read another module runs on a reader's connection.
pub(crate) type ReadWork = Box<
    dyn FnOnce(&Connection) -> Result<Vec<crate::reminders::ReminderRecord>, JournalError> + Send,
>;

enum Read {
    Replay(String, u64, usize, Reply<Vec<EventRecord>>),
    Latest(String, Reply<Option<SnapshotRecord>>),
    State(String, Reply<Option<StoredEvent>>),
    Exec(ReadWork, Reply<Vec<crate::reminders::ReminderRecord>>),
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` with the default
    /// options; creates the schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the database at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, JournalError> {
        Self::open_syncing(path.as_ref(), options, |wal| {
            Box::new(move || wal.sync_data())
        })
    }

    /// Opens the database; `sync` makes the syncer's action from the WAL
    /// file (tests hold or fail it).
    fn open_syncing(
        path: &Path,
        options: SqliteOptions,
        sync: impl FnOnce(std::fs::File) -> SyncWal,
    ) -> Result<Self, JournalError> {
        let path = path.to_path_buf();
        let writer = Connection::open(&path).map_err(|e| opening(&path, e))?;
        writer
            .busy_timeout(options.busy_timeout)
            .and_then(|_| writer.pragma_update(None, "journal_mode", "WAL"))
            // The writer's pages stay cached between batches instead of
            // being read back from the file (SQLite's default is 2 MiB).
            .and_then(|_| writer.pragma_update(None, "cache_size", -(options.cache_kib as i64)))
            // Checkpoints run on their own thread (below), not inside the
            // writer's commits.
            .and_then(|_| writer.pragma_update(None, "wal_autocheckpoint", 0))
            // When the log starts over, its file is cut back to the limit.
            .and_then(|_| {
                writer.pragma_update(
                    None,
                    "journal_size_limit",
                    options.wal_limit.min(i64::MAX as u64) as i64,
                )
            })
            .and_then(|_| writer.execute_batch(SCHEMA))
            .and_then(|_| add_state_epochs(&writer))
            .and_then(|_| add_deleted_marks(&writer))
            .and_then(|_| match options.max_size {
                Some(bytes) => {
                    let page: i64 = writer.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                    let pages = (bytes as i64 / page.max(1)).max(1);
                    writer.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                }
                None => Ok(()),
            })
            .map_err(|e| opening(&path, e))?;
        let stats = Arc::new(StoreStats::new("sqlite"));
        let sync = match options.synchronous {
            Synchronous::Full => wal_syncer(&writer, &path, stats.clone(), sync)?,
            Synchronous::Normal => None,
        };
        // With a syncer, the commit only writes the WAL and the syncer
        // makes it durable; without one (`Normal`, or no WAL file to
        // sync), SQLite's own setting decides.
        let synchronous = match (options.synchronous, &sync) {
            (Synchronous::Full, None) => "FULL",
            _ => "NORMAL",
        };
        writer
            .pragma_update(None, "synchronous", synchronous)
            .map_err(|e| opening(&path, e))?;
        let checkpointer = Connection::open(&path)
            .and_then(|c| c.busy_timeout(options.busy_timeout).map(|_| c))
            .map_err(|e| opening(&path, e))?;
        let (checkpoints, stop) = crossbeam_channel::bounded::<()>(0);
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        let runs = Arc::new(CheckpointRuns::default());
        let counted_runs = runs.clone();
        std::thread::Builder::new()
            .name("troubadour-sqlite-checkpointer".into())
            .spawn(move || checkpoint_loop(checkpointer, stop, woken, &counted_runs))
            .map_err(|e| {
                JournalError::Unavailable(format!("cannot start the checkpointer: {e}"))
            })?;
        let wal_bound = WalBound::new(&writer, &path, options.wal_limit, wake, runs)?;
        // Events a crash left in the recent part go into id order first, so
        // recovery after a restart reads one part.
        let mut writer = writer;
        fold_all(&mut writer);
        let folding = Folding::new(options.fold_at);
        let (writes, write_queue) = crossbeam_channel::unbounded();
        let (reads, read_queue) = crossbeam_channel::unbounded();
        let max_batch = options.max_batch.max(1);
        let counted = stats.clone();
        std::thread::Builder::new()
            .name("troubadour-sqlite-writer".into())
            .spawn(move || {
                write_loop(
                    writer,
                    write_queue,
                    max_batch,
                    &counted,
                    sync,
                    wal_bound,
                    folding,
                )
            })
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
                _checkpoints: checkpoints,
                path,
                stats,
            }),
        })
    }

    /// The writer's counters: events, group commits and their sizes, how
    /// long writes wait to be durable.
    pub fn stats(&self) -> Arc<StoreStats> {
        self.inner.stats.clone()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn exec_write(&self, work: WriteWork) -> StoreFuture<'_, i64> {
        self.write(move |r| Write::Exec(work, r))
    }

    pub(crate) fn exec_read(
        &self,
        work: ReadWork,
    ) -> StoreFuture<'_, Vec<crate::reminders::ReminderRecord>> {
        self.read(move |r| Read::Exec(work, r))
    }

    fn write<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> Write) -> StoreFuture<'_, T> {
        let (tx, rx) = oneshot::channel();
        let asked = std::time::Instant::now();
        let sent = self.inner.writes.send(make(tx)).is_ok();
        let stats = self.inner.stats.clone();
        Box::pin(async move {
            let answered = answer(sent, rx).await;
            stats.answered(asked.elapsed());
            answered
        })
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

/// Events each write of the batch carries.
fn events_in(batch: &[Write]) -> Vec<u64> {
    batch
        .iter()
        .map(|w| match w {
            Write::Append(a, _) => a.events.len() as u64,
            _ => 0,
        })
        .collect()
}

fn write_loop(
    mut conn: Connection,
    queue: Receiver<Write>,
    max_batch: usize,
    stats: &StoreStats,
    sync: Option<WalSyncer>,
    mut wal_bound: Option<WalBound>,
    mut folding: Folding,
) {
    let mut batch = Vec::with_capacity(max_batch);
    let mut known = Known::default();
    let mut row = BatchRow::default();
    while let Ok(first) = queue.recv() {
        if let Some(bound) = &mut wal_bound {
            bound.keep(&conn);
        }
        batch.push(first);
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        if let Some(broken) = sync.as_ref().and_then(|s| s.broken.get()) {
            for write in batch.drain(..) {
                refuse(write, broken.clone());
            }
            continue;
        }
        let mut answers = Vec::with_capacity(batch.len());
        let (writes, events) = (batch.len(), events_in(&batch));
        let mut rows = 0;
        let outcome = (|| -> Result<(), JournalError> {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(store_error)?;
            let version = known.check(&tx)?;
            for write in batch.drain(..) {
                let pending = apply(&tx, &mut known, &mut row, write);
                // A refusal is decided before the write changes anything,
                // so the others stand; any other error may have left part
                // of the write behind, so the whole transaction goes.
                let fatal = pending.error().filter(|e| !is_refusal(e)).cloned();
                answers.push(pending);
                if let Some(e) = fatal {
                    return Err(e);
                }
            }
            if !row.is_empty() {
                let (directory, events) = row.take();
                tx.prepare_cached(
                    "INSERT INTO troubadour_journal_batches (directory, events) VALUES (?1, ?2)",
                )
                .and_then(|mut st| st.execute(params![directory, events]))
                .map_err(store_error)?;
                rows += 1;
            }
            tx.commit().map_err(store_error)?;
            known.committed(version);
            Ok(())
        })();
        let failed = outcome.err();
        if failed.is_some() {
            // What the cache learnt from the batch was rolled back.
            known.forget();
            row = BatchRow::default();
        }
        // Writes not reached before a failure are answered too.
        for write in batch.drain(..) {
            refuse(
                write,
                failed
                    .clone()
                    .unwrap_or_else(|| JournalError::Unavailable("not run".into())),
            );
        }
        if failed.is_none() {
            folding.appended += events.iter().sum::<u64>();
            folding.rows += rows;
        }
        let decided = Decided {
            answers,
            failed,
            writes,
            events,
        };
        match &sync {
            // The syncer answers once the commit is on disk, while this
            // thread goes on with the next batch.
            Some(s) => {
                if let Err(e) = s.queue.send(decided) {
                    e.into_inner().answer(stats);
                }
            }
            None => decided.answer(stats),
        }
        // After the batch is handed on, so that its sync (and answers)
        // overlap the step.
        folding.step(&mut conn);
    }
    // What is left goes into id order too, so a store reopened later (or
    // an older version of this crate) reads it from there.
    fold_all(&mut conn);
}

/// **The journal in two parts.** Workload 14's actors each append one
/// event at a time, so a batch holds one event each of up to a thousand
/// ids. Kept in id order (the `troubadour_journal` table, clustered on
/// `(persistence_id, sequence)`), each id's next event lands on a page of
/// its own: a batch dirtied about one 4 KiB page per event, each a WAL
/// frame written at commit and synced. So a group commit's events go
/// into the recent part as **one row** (`troubadour_journal_batches`: a
/// directory of the ids' runs and their events, in
/// [`crate::sqlite_batch`]'s format): one insert of a few overflow pages,
/// not one B-tree insert per event. Every [`SqliteOptions::fold_at`]
/// events, or [`FOLD_ROWS`] rows, the recent rows there are then moved
/// into id order, in steps between two batches, each step one
/// transaction taking **whole ids, in id order**, an eighth of the move
/// (or `fold_at / FOLD_STEPS` runs when that is less; [`step_bound`]
/// picks where a step ends): so each id's events since the last move
/// are written to its page together, and a step dirties the pages of the
/// ids it moves only (moving the oldest rows whole instead, every id at
/// each step, a first version spent 27 % of the writer's time writing
/// WAL frames, against 13 % with decision 0045's tables). A one-row table
/// (`troubadour_journal_move`) holds the move under way: the last row it
/// takes and the last id moved; the last step deletes those rows and the
/// move's row. Decisions 0045 and 0046 have the measurements.
///
/// Invariants, which replay, fencing and numbering rely on:
/// - Under a move `(through, moved_to)`, an id's runs in rows up to
///   `through` are in id order if the id is at most `moved_to`, else in
///   the recent rows only: a step moves whole ids and records the last
///   one in the same transaction. Replays skip those runs; any store on
///   the file carries on a move another began.
/// - An id's events in id order are older than its events in the recent
///   part that are not moved: a move takes rows from the oldest to
///   `through`, and each row's events of an id follow those of every
///   older row. So a replay reads the part in id order, then the recent
///   rows in their order.
/// - `delete_to` deletes in id order and raises the id's `deleted_to`
///   mark; events at or below it are skipped by replays, by the lowest
///   number and by moves (a row's events are never rewritten).
struct Folding {
    /// Runs per step at most, in a move of more than [`FOLD_STEPS`] times
    /// as many.
    per_step: u64,
    fold_at: u64,
    /// Events appended, and rows written, since the last move began.
    appended: u64,
    rows: u64,
    /// The rows of the move under way (this store's or another's), as
    /// this writer read them; `None` between moves.
    under_way: Option<MoveRows>,
}

/// The rows a move takes (they never change until its last step deletes
/// them, and their numbers are never used again, so they are read once),
/// and the steps this writer has left to take of it.
struct MoveRows {
    through: i64,
    rows: Vec<MoveRow>,
    steps_left: u64,
}

/// A recent row's number, directory and length of its events.
struct MoveRow {
    batch: i64,
    directory: Vec<u8>,
    events_len: usize,
}

/// Steps per move.
const FOLD_STEPS: u64 = 8;

/// Recent rows after which a move begins whatever their events: replays
/// look through each row's directory.
const FOLD_ROWS: u64 = 256;

impl Folding {
    fn new(fold_at: usize) -> Self {
        let fold_at = fold_at.max(1) as u64;
        Folding {
            per_step: (fold_at / FOLD_STEPS).max(1),
            fold_at,
            appended: 0,
            rows: 0,
            under_way: None,
        }
    }

    /// Between two batches: the next step of the move under way, or the
    /// start of one once enough has been appended.
    fn step(&mut self, conn: &mut Connection) {
        if self.under_way.is_none() {
            if self.appended < self.fold_at && self.rows < FOLD_ROWS {
                return;
            }
            self.appended = 0;
            self.rows = 0;
        }
        let step = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error)
            .and_then(|tx| {
                self.next_step(&tx)?;
                tx.commit().map_err(store_error)
            });
        if let Err(e) = step {
            // Carried on at the next move.
            self.under_way = None;
            warn_unmoved(&e);
        }
    }

    /// In the caller's transaction: the next step of the move under way
    /// (begun over the rows there now if there is none); `under_way` is
    /// left `None` once the move is over.
    fn next_step(&mut self, tx: &Connection) -> Result<(), JournalError> {
        let Some(m) = move_under_way(tx)?.map_or_else(|| begin_move(tx), |m| Ok(Some(m)))? else {
            self.under_way = None;
            return Ok(());
        };
        if self
            .under_way
            .as_ref()
            .is_none_or(|r| r.through != m.through)
        {
            self.under_way = Some(MoveRows {
                through: m.through,
                rows: move_rows(tx, m.through)?,
                steps_left: 0,
            });
        }
        let rows = self.under_way.as_mut().expect("read above");
        let bound = step_bound(rows, &m, self.per_step)?;
        if !move_range(tx, &m, &rows.rows, bound.as_deref())? {
            self.under_way = None;
        }
        Ok(())
    }
}

/// The move under way: the last recent row it takes, and the last id it
/// has moved.
struct Move {
    through: i64,
    moved_to: Option<String>,
}

fn move_under_way(conn: &Connection) -> Result<Option<Move>, JournalError> {
    conn.prepare_cached("SELECT through, moved_to FROM troubadour_journal_move")
        .and_then(|mut st| {
            st.query_row([], |r| {
                Ok(Move {
                    through: r.get(0)?,
                    moved_to: r.get(1)?,
                })
            })
            .optional()
        })
        .map_err(store_error)
}

/// Whether the move `m` (if any) has already put the run of `id` in row
/// `batch` into id order.
fn moved(m: &Option<Move>, batch: i64, id: &str) -> bool {
    m.as_ref()
        .is_some_and(|m| batch <= m.through && m.moved_to.as_deref().is_some_and(|to| id <= to))
}

/// Begins a move over the recent rows there now (`None`: there are none).
fn begin_move(tx: &Connection) -> Result<Option<Move>, JournalError> {
    let through: Option<i64> = tx
        .query_row(
            "SELECT MAX(batch) FROM troubadour_journal_batches",
            [],
            |r| r.get(0),
        )
        .map_err(store_error)?;
    let Some(through) = through else {
        return Ok(None);
    };
    tx.execute(
        "INSERT INTO troubadour_journal_move (only, through, moved_to) VALUES (0, ?1, NULL)",
        params![through],
    )
    .map_err(store_error)?;
    Ok(Some(Move {
        through,
        moved_to: None,
    }))
}

/// The recent rows up to `through`, in order.
fn move_rows(tx: &Connection, through: i64) -> Result<Vec<MoveRow>, JournalError> {
    tx.prepare_cached(
        "SELECT batch, directory, length(events) FROM troubadour_journal_batches
         WHERE batch <= ?1 ORDER BY batch",
    )
    .and_then(|mut st| {
        st.query_map(params![through], |r| {
            Ok(MoveRow {
                batch: r.get(0)?,
                directory: r.get(1)?,
                events_len: r.get::<_, i64>(2)? as usize,
            })
        })?
        .collect()
    })
    .map_err(store_error)
}

/// The last id the next step of move `m` takes (`None`: all that is
/// left). A move is cut into [`FOLD_STEPS`] steps, or more of about
/// `per_step` runs each when it is larger. Each row offers the id that
/// ends its own share of the step (its runs left over the steps left);
/// the bound is the median of those, each weighted by its row's runs
/// left. So no step sorts the move's ids (planning the steps by sorting
/// every id cost as much as a step), and rows written by the same actors
/// give steps of about their share each; rows of unlike ids give uneven
/// steps, never a wrong one.
fn step_bound(
    rows: &mut MoveRows,
    m: &Move,
    per_step: u64,
) -> Result<Option<String>, JournalError> {
    let mut offers: Vec<(&str, u64)> = Vec::new();
    let mut left_in_all = 0;
    let mut directories = Vec::with_capacity(rows.rows.len());
    for row in &rows.rows {
        let directory = Directory::parse(&row.directory, row.events_len)
            .map_err(|e| corrupt_batch(row.batch, e))?;
        let first = directory
            .first_after(m.moved_to.as_deref())
            .map_err(|e| corrupt_batch(row.batch, e))?;
        let left = (directory.len() - first) as u64;
        left_in_all += left;
        directories.push((row.batch, directory, first, left));
    }
    if rows.steps_left == 0 {
        rows.steps_left = FOLD_STEPS.max(left_in_all.div_ceil(per_step.max(1)));
    }
    let steps_left = rows.steps_left;
    rows.steps_left = steps_left.saturating_sub(1).max(1);
    if steps_left <= 1 {
        return Ok(None);
    }
    for (batch, directory, first, left) in &directories {
        if *left == 0 {
            continue;
        }
        let share = left.div_ceil(steps_left) as usize;
        let run = directory
            .run(first + share - 1)
            .map_err(|e| corrupt_batch(*batch, e))?;
        offers.push((run.persistence_id, *left));
    }
    if offers.is_empty() {
        return Ok(None);
    }
    offers.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut weight = 0;
    for (id, w) in &offers {
        weight += w;
        if 2 * weight >= left_in_all {
            return Ok(Some(id.to_string()));
        }
    }
    Ok(None)
}

/// In the caller's transaction: moves the ids after the move's last one
/// up to `bound` (to the end when `None`) from its rows into id order.
/// Returns whether the move goes on; its last step deletes its rows and
/// itself.
fn move_range(
    tx: &Connection,
    m: &Move,
    rows: &[MoveRow],
    bound: Option<&str>,
) -> Result<bool, JournalError> {
    // Each row's runs in the range, and the one range of bytes they take
    // (a row's events are in its directory's order).
    struct Span<'r> {
        runs: Vec<sqlite_batch::Run<'r>>,
        batch: i64,
        start: usize,
        bytes: Vec<u8>,
    }
    let mut spans = Vec::new();
    for MoveRow {
        batch,
        directory,
        events_len,
    } in rows
    {
        let runs = Directory::parse(directory, *events_len)
            .and_then(|d| d.runs_between(m.moved_to.as_deref(), bound))
            .map_err(|e| corrupt_batch(*batch, e))?;
        let (Some(start), Some(end)) = (
            runs.iter().map(|r| r.offset as usize).min(),
            runs.iter()
                .map(|r| r.offset as usize + r.len as usize)
                .max(),
        ) else {
            continue;
        };
        let mut bytes = vec![0; end - start];
        tx.blob_open(
            rusqlite::MAIN_DB,
            "troubadour_journal_batches",
            "events",
            *batch,
            true,
        )
        .and_then(|blob| blob.read_at_exact(&mut bytes, start))
        .map_err(store_error)?;
        spans.push(Span {
            runs,
            batch: *batch,
            start,
            bytes,
        });
    }
    // By id; an id's runs keep their rows' order (the sort is stable).
    let mut runs: Vec<(&sqlite_batch::Run<'_>, &Span<'_>)> = spans
        .iter()
        .flat_map(|span| span.runs.iter().map(move |run| (run, span)))
        .collect();
    runs.sort_by(|a, b| a.0.persistence_id.cmp(b.0.persistence_id));
    let deleted = deleted_marks(tx)?;
    // Decoded in place (borrowing the rows' bytes), then inserted
    // `INSERT_ROWS` to a statement: one step of SQLite's program per row
    // cost more than the insert itself.
    let mut events = Vec::new();
    for (run, span) in runs {
        let below = deleted.get(run.persistence_id).copied().unwrap_or(0);
        if run.last() <= below {
            continue;
        }
        let at = run.offset as usize - span.start;
        let bytes = &span.bytes[at..at + run.len as usize];
        sqlite_batch::visit_events(run, bytes, |e| {
            if e.sequence > below {
                events.push((run, e));
            }
            Ok::<_, BatchError>(())
        })
        .map_err(|e| corrupt_batch(span.batch, e))?;
    }
    let mut chunks = events.chunks_exact(INSERT_ROWS);
    let mut insert_many = tx
        .prepare_cached(&insert_rows(INSERT_ROWS))
        .map_err(store_error)?;
    for chunk in &mut chunks {
        bind_events(&mut insert_many, chunk)
            .and_then(|_| insert_many.raw_execute())
            .map_err(store_error)?;
    }
    drop(insert_many);
    let mut insert_one = tx.prepare_cached(&insert_rows(1)).map_err(store_error)?;
    for event in chunks.remainder() {
        bind_events(&mut insert_one, std::slice::from_ref(event))
            .and_then(|_| insert_one.raw_execute())
            .map_err(store_error)?;
    }
    drop(insert_one);
    match bound {
        Some(bound) => {
            tx.prepare_cached("UPDATE troubadour_journal_move SET moved_to = ?1")
                .and_then(|mut st| st.execute(params![bound]))
                .map_err(store_error)?;
            Ok(true)
        }
        None => {
            // Every id moved: the rows and the move go.
            tx.prepare_cached("DELETE FROM troubadour_journal_batches WHERE batch <= ?1")
                .and_then(|mut st| st.execute(params![m.through]))
                .and_then(|_| tx.prepare_cached("DELETE FROM troubadour_journal_move"))
                .and_then(|mut st| st.execute([]))
                .map_err(store_error)?;
            Ok(false)
        }
    }
}

/// Rows per insert of a move.
const INSERT_ROWS: usize = 32;

/// `INSERT INTO troubadour_journal … VALUES (…), (…)` for `rows` rows.
fn insert_rows(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let p = 7 * r;
            format!(
                "(?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6,
                p + 7
            )
        })
        .collect();
    format!(
        "INSERT INTO troubadour_journal
         (persistence_id, sequence, epoch, type_name, version, codec, payload)
         VALUES {}",
        values.join(", ")
    )
}

fn bind_events(
    st: &mut rusqlite::CachedStatement<'_>,
    events: &[(&sqlite_batch::Run<'_>, sqlite_batch::EventRef<'_>)],
) -> rusqlite::Result<()> {
    for (r, (run, e)) in events.iter().enumerate() {
        let p = 7 * r;
        st.raw_bind_parameter(p + 1, run.persistence_id)?;
        st.raw_bind_parameter(p + 2, e.sequence as i64)?;
        st.raw_bind_parameter(p + 3, run.epoch as i64)?;
        st.raw_bind_parameter(p + 4, e.type_name)?;
        st.raw_bind_parameter(p + 5, e.version)?;
        st.raw_bind_parameter(p + 6, e.codec)?;
        st.raw_bind_parameter(p + 7, e.payload)?;
    }
    Ok(())
}

/// A recent row that does not read: no id can be blamed, so the error
/// names the row.
fn corrupt_batch(batch: i64, e: BatchError) -> JournalError {
    JournalError::Corrupt {
        persistence_id: String::new(),
        detail: format!("the journal's recent row {batch} does not read: {e}"),
    }
}

/// Ids with events deleted, and up to which number.
fn deleted_marks(conn: &Connection) -> Result<HashMap<String, u64>, JournalError> {
    conn.prepare_cached(
        "SELECT persistence_id, deleted_to FROM troubadour_writers WHERE deleted_to > 0",
    )
    .and_then(|mut st| {
        st.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })?
        .collect()
    })
    .map_err(store_error)
}

/// Moves every recent row into id order, in one transaction (at open and
/// when the writer stops); at open, also the recent tables of the
/// version before this one (decision 0045's two tables), which it then
/// drops. Safe whatever other stores on the file are doing: each row is
/// moved and deleted under the same lock.
fn fold_all(conn: &mut Connection) {
    let done = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(store_error)
        .and_then(|tx| {
            move_two_table_journal(&tx).map_err(store_error)?;
            // The move under way (if any) to its end, then one of every
            // row left.
            if let Some(m) = move_under_way(&tx)? {
                move_range(&tx, &m, &move_rows(&tx, m.through)?, None)?;
            }
            if let Some(m) = begin_move(&tx)? {
                move_range(&tx, &m, &move_rows(&tx, m.through)?, None)?;
            }
            tx.commit().map_err(store_error)
        });
    if let Err(e) = done {
        warn_unmoved(&e);
    }
}

/// The two recent tables of the version before (decision 0045), if this
/// file has them: their rows go into id order (a row in both places is
/// the same event, kept once), then the tables go.
fn move_two_table_journal(tx: &Connection) -> rusqlite::Result<()> {
    let columns = "persistence_id, sequence, epoch, type_name, version, codec, payload";
    for table in ["troubadour_journal_recent_0", "troubadour_journal_recent_1"] {
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            params![table],
            |r| r.get(0),
        )?;
        if exists {
            tx.execute_batch(&format!(
                "INSERT OR IGNORE INTO troubadour_journal ({columns})
                 SELECT {columns} FROM {table} ORDER BY persistence_id, sequence;
                 DROP TABLE {table};"
            ))?;
        }
    }
    tx.execute_batch("DROP TABLE IF EXISTS troubadour_journal_parts")
}

fn warn_unmoved(e: &JournalError) {
    tracing::warn!(error = %e, "could not move the journal's recent events into id order; they are read where they are until the next move");
}

/// **A bounded WAL.** SQLite starts its log over from the beginning only
/// when a write transaction begins with every frame already copied into
/// the database. The checkpointer copies frames in the background, but a
/// writer whose queue never empties begins each transaction right after
/// its last commit, before any checkpoint can have caught up with it, so
/// the log would grow for as long as the load lasts (at hundreds of MB a
/// second under workload 14). Past the limit, the writer first wakes the
/// checkpointer and goes on writing while it copies the bulk of the log
/// and syncs the database; once that run is over, the writer checkpoints
/// between two batches itself, copying only the frames of the few batches
/// written meanwhile. Nothing is written during its checkpoint, so it
/// copies every frame, the next transaction starts the log over, and
/// `journal_size_limit` cuts the file back to the limit. (Checkpointing
/// everything in the writer at once held it for 6–11 ms each time.)
///
/// A checkpoint syncs the log before copying and the database after (the
/// writer's `synchronous=NORMAL`), so the frames the new log overwrites
/// are durable in the database first. A checkpoint that finds the
/// checkpointer's own run under way is tried again at the next batch (or,
/// once the log is past twice its limit, as soon as that run ends, the
/// writer waiting); one that cannot copy everything (a reader holding an
/// older snapshot) is tried again once the log has grown by another limit.
struct WalBound {
    wal: std::fs::File,
    limit: u64,
    /// The length past which the writer next checkpoints.
    next: u64,
    wake: Sender<()>,
    runs: Arc<CheckpointRuns>,
    /// The checkpointer's runs begun when the writer woke it; a run
    /// finished beyond that count began after the wake.
    woke_at: Option<u64>,
}

/// The checkpointer's runs, begun and finished.
#[derive(Default)]
struct CheckpointRuns {
    begun: std::sync::atomic::AtomicU64,
    finished: std::sync::atomic::AtomicU64,
}

impl WalBound {
    /// `None` where there is no WAL (another journal mode).
    fn new(
        writer: &Connection,
        path: &Path,
        limit: u64,
        wake: Sender<()>,
        runs: Arc<CheckpointRuns>,
    ) -> Result<Option<Self>, JournalError> {
        if !in_wal_mode(writer, path)? {
            return Ok(None);
        }
        match std::fs::File::open(wal_path(path)) {
            Ok(wal) => Ok(Some(WalBound {
                wal,
                limit,
                next: limit,
                wake,
                runs,
                woke_at: None,
            })),
            Err(e) => {
                tracing::warn!(path = ?wal_path(path), error = %e, "cannot open the SQLite WAL to watch its size; it is checkpointed in the background only");
                Ok(None)
            }
        }
    }

    /// Between two batches: starts the log over if it is past its limit.
    fn keep(&mut self, conn: &Connection) {
        use std::sync::atomic::Ordering::Acquire;
        let Ok(length) = self.wal.metadata().map(|m| m.len()) else {
            return;
        };
        if length <= self.next {
            return;
        }
        match self.woke_at {
            None => {
                self.woke_at = Some(self.runs.begun.load(Acquire));
                let _ = self.wake.try_send(());
                return;
            }
            // Still copying, and the log has not outgrown another limit
            // meanwhile (a checkpointer stuck on a slow disk).
            Some(begun)
                if self.runs.finished.load(Acquire) <= begun
                    && length <= self.next.saturating_add(self.limit) =>
            {
                return;
            }
            Some(_) => {}
        }
        // Past twice the limit the writer waits for the checkpoint
        // rather than write on: the log's length is bounded, not only
        // usually short.
        let overgrown = length > self.next.saturating_add(self.limit);
        // (busy, frames in the log, frames copied): busy when the
        // checkpointer's own run holds the checkpoint, which ends soon,
        // so the next batch tries again.
        let checkpoint = loop {
            let checkpoint = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)? != 0,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            });
            match checkpoint {
                Ok((true, _, _)) if overgrown => std::thread::sleep(Duration::from_millis(1)),
                _ => break checkpoint,
            }
        };
        match checkpoint {
            Ok((true, _, _)) => return,
            Ok((false, log, copied)) if log == copied => self.next = self.limit,
            Ok(_) => self.next = length.saturating_add(self.limit),
            Err(e) => {
                tracing::warn!(error = %e, "SQLite checkpoint failed; the WAL grows until one succeeds");
                self.next = length.saturating_add(self.limit);
            }
        }
        self.woke_at = None;
    }
}

fn in_wal_mode(conn: &Connection, path: &Path) -> Result<bool, JournalError> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(|e| opening(path, e))?;
    Ok(mode.eq_ignore_ascii_case("wal"))
}

/// SQLite's name for the database's write-ahead log.
fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// A batch whose transaction has ended, to be answered.
struct Decided {
    answers: Vec<Pending>,
    /// Why the transaction did not commit, if it did not.
    failed: Option<JournalError>,
    writes: usize,
    events: Vec<u64>,
}

impl Decided {
    fn answer(self, stats: &StoreStats) {
        stats.transaction(
            self.writes,
            events_kept(&self.events, &self.answers),
            refusals(&self.answers),
            self.failed.is_none(),
        );
        for pending in self.answers {
            pending.answer(self.failed.as_ref());
        }
    }
}

/// **Pipelined sync.** With `synchronous=FULL` SQLite syncs the WAL inside
/// each commit, and the writer thread waits: on a disk whose sync of a
/// group commit takes as long as building the next one, half the writer's
/// time is spent waiting. Instead the writer commits with
/// `synchronous=NORMAL` (the commit's frames are written to the WAL, not
/// synced; SQLite keeps the database consistent in that mode) and hands
/// the batch to this thread, which syncs the WAL file and only then
/// answers, while the writer builds the next batch. Invariants:
/// - A write is answered `Ok` only after an `fdatasync` of the WAL that
///   began after its commit had written its frames, so an acknowledged
///   write is as durable as with `FULL`.
/// - The WAL is one file written in order and SQLite's recovery keeps the
///   frames up to the first one whose running checksum fails, so a crash
///   between commit and sync loses a suffix of unacknowledged commits,
///   never a commit before an acknowledged one.
/// - After a failed sync the kernel may have dropped the dirty pages and a
///   later sync may succeed without them (fsync's error is reported once),
///   so nothing written since can be trusted as durable: that batch and
///   every later one are answered with the error, and the store refuses
///   all further writes until it is reopened.
///
/// A commit is visible to this store's readers from the moment it is
/// written, a sync before it is acknowledged; only a power loss, which
/// takes the readers with it, can undo it.
struct WalSyncer {
    queue: Sender<Decided>,
    broken: Arc<std::sync::OnceLock<JournalError>>,
}

/// What the syncer does to make the WAL durable.
type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// Starts the syncer of the writer's WAL, or `None` where there is no WAL
/// file to sync (the journal mode is not WAL), and SQLite syncs its
/// commits itself.
fn wal_syncer(
    writer: &Connection,
    path: &Path,
    stats: Arc<StoreStats>,
    sync: impl FnOnce(std::fs::File) -> SyncWal,
) -> Result<Option<WalSyncer>, JournalError> {
    if !in_wal_mode(writer, path)? {
        return Ok(None);
    }
    // The WAL exists once the schema has been read, and stays the same
    // file while this store's connections are open: SQLite removes it
    // only when the last connection to the database closes.
    let wal_path = wal_path(path);
    let wal = match std::fs::OpenOptions::new().write(true).open(&wal_path) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(path = ?wal_path, error = %e, "cannot open the SQLite WAL to sync it; commits sync inside the writer");
            return Ok(None);
        }
    };
    let sync = sync(wal);
    let (queue, decided) = crossbeam_channel::unbounded();
    let broken = Arc::new(std::sync::OnceLock::new());
    let seen = broken.clone();
    let shown = wal_path;
    std::thread::Builder::new()
        .name("troubadour-sqlite-syncer".into())
        .spawn(move || sync_loop(sync, &shown, decided, &stats, &seen))
        .map_err(|e| JournalError::Unavailable(format!("cannot start the syncer: {e}")))?;
    Ok(Some(WalSyncer { queue, broken }))
}

fn sync_loop(
    mut sync: SyncWal,
    path: &Path,
    queue: Receiver<Decided>,
    stats: &StoreStats,
    broken: &std::sync::OnceLock<JournalError>,
) {
    let mut group = Vec::new();
    while let Ok(first) = queue.recv() {
        group.push(first);
        // Batches committed while the last sync ran share this one.
        group.extend(queue.try_iter());
        let committed = group.iter().any(|d| d.failed.is_none());
        let synced = match broken.get() {
            Some(e) => Err(e.clone()),
            None if committed => sync().map_err(|e| {
                let e = JournalError::Unavailable(format!(
                    "the disk failed to sync the journal ({}: {e}); the write may not be \
                     durable and the store refuses every later write: check the disk, then \
                     reopen the store",
                    path.display()
                ));
                let _ = broken.set(e.clone());
                e
            }),
            None => Ok(()),
        };
        for mut decided in group.drain(..) {
            if let Err(e) = &synced {
                decided.failed.get_or_insert_with(|| e.clone());
            }
            decided.answer(stats);
        }
    }
}

/// Where each id's history stands, as the writer last wrote it, so that
/// an append is one insert per event instead of a read and an update as
/// well. Valid while no other connection (another process on the same
/// file) has committed: SQLite's `data_version` tells, and the cache is
/// dropped when it moved.
#[derive(Default)]
struct Known {
    ids: HashMap<String, Standing, foldhash::fast::RandomState>,
    data_version: Option<i64>,
}

#[derive(Clone, Copy)]
struct Standing {
    highest: u64,
    epoch: u64,
}

/// Ids remembered at most; past it the cache starts again.
const KNOWN_IDS: usize = 100_000;

impl Known {
    /// At the start of a transaction (the write lock held): drops the
    /// cache if another connection committed since our last commit.
    /// Returns the version read, for `committed`.
    fn check(&mut self, conn: &Connection) -> Result<i64, JournalError> {
        let now = data_version(conn)?;
        if self.data_version != Some(now) {
            self.ids.clear();
        }
        Ok(now)
    }

    /// After our commit: `version`, as `check` read it
    /// under the transaction's lock. Our own commit does not change a
    /// connection's `data_version`, and no other connection committed
    /// while we held the lock, so that is the version the cache is valid
    /// for. Read again after the commit instead, it could include another
    /// store's commit made between our commit and the read (a newer
    /// writer's fence); the next check would then keep the cache, and an
    /// append at the old epoch would pass the cached check after the
    /// fence (the likely cause, inferred, of the event-sourcing test of
    /// two activations racing on one id failing once under load).
    fn committed(&mut self, version: i64) {
        self.data_version = Some(version);
        if self.ids.len() > KNOWN_IDS {
            self.ids.clear();
        }
    }

    fn forget(&mut self) {
        self.ids.clear();
        self.data_version = None;
    }

    /// The id's standing: from the cache, or read (the writers' row holds
    /// the epoch and the highest as of the last fence or delete; the
    /// journal holds anything appended since).
    fn standing(&mut self, conn: &Connection, id: &str) -> Result<Standing, JournalError> {
        if let Some(s) = self.ids.get(id) {
            return Ok(*s);
        }
        let (row_highest, epoch) = writer_row(conn, id)?;
        let appended = highest_stored(conn, id)?;
        let s = Standing {
            highest: row_highest.max(appended.unwrap_or(0)),
            epoch,
        };
        self.ids.insert(id.to_string(), s);
        Ok(s)
    }
}

/// The id's highest stored sequence number in either part of the journal
/// (`None` when it has none).
fn highest_stored(conn: &Connection, id: &str) -> Result<Option<u64>, JournalError> {
    let mut highest: Option<u64> = conn
        .prepare_cached("SELECT MAX(sequence) FROM troubadour_journal WHERE persistence_id = ?1")
        .and_then(|mut st| st.query_row(params![id], |row| row.get::<_, Option<i64>>(0)))
        .map_err(store_error)?
        .map(|n| n as u64);
    each_recent_run(conn, id, |run, _| {
        highest = Some(highest.unwrap_or(0).max(run.last()));
        Ok(())
    })?;
    Ok(highest)
}

/// The id's lowest sequence number still stored, deleted events not
/// counted (`None` when it has none).
fn lowest_stored(conn: &Connection, id: &str) -> Result<Option<u64>, JournalError> {
    // Deleted events are gone from the part in id order, and every event
    // there is older than any in the recent part.
    let in_order: Option<i64> = conn
        .prepare_cached("SELECT MIN(sequence) FROM troubadour_journal WHERE persistence_id = ?1")
        .and_then(|mut st| st.query_row(params![id], |row| row.get(0)))
        .map_err(store_error)?;
    if let Some(n) = in_order {
        return Ok(Some(n as u64));
    }
    let below = deleted_mark(conn, id)?;
    let mut lowest = None;
    each_recent_run(conn, id, |run, _| {
        if lowest.is_none() && run.last() > below {
            lowest = Some(run.first.max(below + 1));
        }
        Ok(())
    })?;
    Ok(lowest)
}

/// Up to which number the id's events were deleted (0: none).
fn deleted_mark(conn: &Connection, id: &str) -> Result<u64, JournalError> {
    conn.prepare_cached("SELECT deleted_to FROM troubadour_writers WHERE persistence_id = ?1")
        .and_then(|mut st| {
            st.query_row(params![id], |row| row.get::<_, i64>(0))
                .optional()
        })
        .map(|d| d.unwrap_or(0) as u64)
        .map_err(store_error)
}

/// Calls `f` with each of the id's runs in the recent rows, oldest first,
/// and the row's number: the directories are searched in place, the
/// events not read.
fn each_recent_run(
    conn: &Connection,
    id: &str,
    mut f: impl FnMut(&sqlite_batch::Run<'_>, i64) -> Result<(), JournalError>,
) -> Result<(), JournalError> {
    let batches: Vec<i64> = conn
        .prepare_cached("SELECT batch FROM troubadour_journal_batches ORDER BY batch")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(store_error)?;
    DIRECTORIES.with(|cache| {
        let cache = &mut *cache.borrow_mut();
        // A thread that reads another file than last time starts over.
        if cache.file.as_deref() != conn.path() {
            *cache = RecentDirectories {
                file: conn.path().map(str::to_string),
                ..RecentDirectories::default()
            };
        }
        let gone: Vec<i64> = cache
            .rows
            .keys()
            .filter(|b| batches.binary_search(b).is_err())
            .copied()
            .collect();
        for batch in gone {
            cache.forget(batch);
        }
        for &batch in &batches {
            if cache.rows.contains_key(&batch) {
                continue;
            }
            let (bytes, events_len): (Vec<u8>, i64) = conn
                .prepare_cached(
                    "SELECT directory, length(events) FROM troubadour_journal_batches
                     WHERE batch = ?1",
                )
                .and_then(|mut st| st.query_row(params![batch], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(|e| corrupt_row(id, e))?;
            // Read whole and checked once; found by id from then on.
            let runs = Directory::parse(&bytes, events_len as usize)
                .and_then(|d| d.runs())
                .map_err(|e| corrupt_batch(batch, e))?
                .iter()
                .map(RunOfRow::from)
                .collect();
            cache.remember(batch, runs);
        }
        let Some(found) = cache.by_id.get(id) else {
            return Ok(());
        };
        let mut found = found.clone();
        found.sort_unstable();
        for (batch, i) in found {
            f(&cache.rows[&batch][i as usize].as_run(), batch)?;
        }
        Ok(())
    })
}

/// The recent rows' directories a thread has read, of which file, and
/// where each id has runs.
#[derive(Default)]
struct RecentDirectories {
    file: Option<String>,
    rows: HashMap<i64, Vec<RunOfRow>>,
    /// Each id's runs: the row and the run's place in it.
    by_id: HashMap<Box<str>, Vec<(i64, u32)>>,
}

impl RecentDirectories {
    fn remember(&mut self, batch: i64, runs: Vec<RunOfRow>) {
        for (i, run) in runs.iter().enumerate() {
            self.by_id
                .entry(run.persistence_id.clone())
                .or_default()
                .push((batch, i as u32));
        }
        self.rows.insert(batch, runs);
    }

    fn forget(&mut self, batch: i64) {
        for run in self.rows.remove(&batch).into_iter().flatten() {
            if let Some(runs) = self.by_id.get_mut(&run.persistence_id) {
                runs.retain(|(b, _)| *b != batch);
                if runs.is_empty() {
                    self.by_id.remove(&run.persistence_id);
                }
            }
        }
    }
}

/// A run of a recent row, as kept by [`DIRECTORIES`].
struct RunOfRow {
    persistence_id: Box<str>,
    first: u64,
    count: u32,
    epoch: u64,
    offset: u32,
    len: u32,
}

impl From<&sqlite_batch::Run<'_>> for RunOfRow {
    fn from(r: &sqlite_batch::Run<'_>) -> Self {
        RunOfRow {
            persistence_id: r.persistence_id.into(),
            first: r.first,
            count: r.count,
            epoch: r.epoch,
            offset: r.offset,
            len: r.len,
        }
    }
}

impl RunOfRow {
    fn as_run(&self) -> sqlite_batch::Run<'_> {
        sqlite_batch::Run {
            persistence_id: &self.persistence_id,
            first: self.first,
            count: self.count,
            epoch: self.epoch,
            offset: self.offset,
            len: self.len,
        }
    }
}

thread_local! {
    /// The recent rows' directories this thread has read (each store's
    /// writer and readers are threads of their own), of which file, by
    /// row: a row never
    /// changes and its number is never used again (`AUTOINCREMENT`), so
    /// an entry holds for as long as its row exists; entries of rows gone
    /// are dropped at the next look.
    static DIRECTORIES: std::cell::RefCell<RecentDirectories> =
        std::cell::RefCell::new(RecentDirectories::default());
}

/// A database made before states carried their writer's epoch gets the
/// column; its states count as epoch 0, which any writer may replace.
fn add_state_epochs(conn: &Connection) -> rusqlite::Result<()> {
    let has: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('troubadour_states') WHERE name = 'epoch'",
        [],
        |row| row.get(0),
    )?;
    if has == 0 {
        conn.execute_batch(
            "ALTER TABLE troubadour_states ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",
        )?;
    }
    Ok(())
}

/// A database made before recent events were kept as one row per group
/// commit gets the mark of how far each id's events were deleted.
fn add_deleted_marks(conn: &Connection) -> rusqlite::Result<()> {
    let has: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('troubadour_writers') WHERE name = 'deleted_to'",
        [],
        |row| row.get(0),
    )?;
    if has == 0 {
        conn.execute_batch(
            "ALTER TABLE troubadour_writers ADD COLUMN deleted_to INTEGER NOT NULL DEFAULT 0",
        )?;
    }
    Ok(())
}

fn data_version(conn: &Connection) -> Result<i64, JournalError> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
        .map_err(store_error)
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
        Write::States(_, tx) => {
            let _ = tx.send(Err(e));
        }
        Write::Claim(_, _, tx) => {
            let _ = tx.send(Err(e));
        }
        Write::Exec(_, tx) => {
            let _ = tx.send(Err(e));
        }
    }
}

/// `row`: the group commit's row of the recent part, which appends go to.
fn apply(conn: &Connection, known: &mut Known, row: &mut BatchRow, write: Write) -> Pending {
    match write {
        Write::Fence(id, epoch, tx) => Pending::Fence(tx, fence(conn, known, &id, epoch)),
        Write::Append(append, tx) => Pending::Unit(tx, append_events(conn, known, row, append)),
        Write::DeleteTo(id, to, tx) => Pending::Unit(tx, delete_to(conn, known, &id, to)),
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
        Write::States(states, tx) => Pending::States(tx, write_states(conn, &states)),
        Write::Claim(key, epoch, tx) => Pending::Claim(tx, claim_state(conn, &key, epoch)),
        Write::Exec(work, tx) => Pending::Count(tx, work(conn)),
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

fn fence(
    conn: &Connection,
    known: &mut Known,
    id: &str,
    epoch: u64,
) -> Result<Fenced, JournalError> {
    let standing = known.standing(conn, id)?;
    if standing.epoch > epoch {
        return Err(JournalError::Fenced {
            persistence_id: id.to_string(),
            epoch,
            current: standing.epoch,
        });
    }
    set_writer_row(conn, id, standing.highest, epoch)?;
    known.ids.insert(
        id.to_string(),
        Standing {
            highest: standing.highest,
            epoch,
        },
    );
    let lowest = lowest_stored(conn, id)?;
    Ok(Fenced {
        highest: standing.highest,
        lowest: lowest.unwrap_or(standing.highest + 1),
    })
}

fn append_events(
    conn: &Connection,
    known: &mut Known,
    row: &mut BatchRow,
    append: Append,
) -> Result<(), JournalError> {
    if append.events.is_empty() {
        return Ok(());
    }
    let standing = known.standing(conn, &append.persistence_id)?;
    crate::store::check_append(&append, standing.highest, standing.epoch)?;
    let last = standing.highest + append.events.len() as u64;
    if append.epoch > standing.epoch {
        // A writer that never fenced (or a newer epoch): remember it, so
        // that older writers are refused from now on.
        set_writer_row(conn, &append.persistence_id, standing.highest, append.epoch)?;
    }
    row.push(&append)
        .map_err(|e| JournalError::Unavailable(format!("could not write the batch: {e}")))?;
    known.ids.insert(
        append.persistence_id,
        Standing {
            highest: last,
            epoch: append.epoch.max(standing.epoch),
        },
    );
    Ok(())
}

/// Deletes events up to `to`, first writing the id's highest into its
/// row, so that numbering goes on after the deleted events even when
/// none is left.
fn delete_to(conn: &Connection, known: &mut Known, id: &str, to: u64) -> Result<(), JournalError> {
    let standing = known.standing(conn, id)?;
    set_writer_row(conn, id, standing.highest, standing.epoch)?;
    // Events in the recent part stay in their rows until moved; the mark
    // hides them.
    conn.prepare_cached(
        "UPDATE troubadour_writers SET deleted_to = MAX(deleted_to, ?2) WHERE persistence_id = ?1",
    )
    .and_then(|mut st| st.execute(params![id, to as i64]))
    .and_then(|_| {
        conn.prepare_cached(
            "DELETE FROM troubadour_journal WHERE persistence_id = ?1 AND sequence <= ?2",
        )
    })
    .and_then(|mut st| st.execute(params![id, to as i64]))
    .map(|_| ())
    .map_err(store_error)
}

/// How often the WAL is copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// Copies the WAL into the database file every [`CHECKPOINT_EVERY`]
/// (SQLite's passive checkpoint: it never blocks the writer or the
/// readers), and at once when the writer finds the log past its limit
/// (see [`WalBound`]), so the writer copies at most the last few batches
/// itself; a final one when the store is dropped.
fn checkpoint_loop(
    conn: Connection,
    stop: Receiver<()>,
    mut woken: Receiver<()>,
    runs: &CheckpointRuns,
) {
    use std::sync::atomic::Ordering::Release;
    loop {
        // Every so often, and at once when the writer finds the log past
        // its limit.
        let (stopping, writer_gone) = crossbeam_channel::select! {
            recv(stop) -> r => (r.is_err(), false),
            recv(woken) -> r => (false, r.is_err()),
            default(CHECKPOINT_EVERY) => (false, false),
        };
        if writer_gone {
            // No bound (no WAL file), or the writer has stopped.
            woken = crossbeam_channel::never();
            continue;
        }
        runs.begun.fetch_add(1, Release);
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "SQLite checkpoint failed; the WAL grows until one succeeds");
        }
        runs.finished.fetch_add(1, Release);
        if stopping {
            return;
        }
    }
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
            Read::State(key, tx) => {
                let _ = tx.send(read_state(&conn, &key));
            }
            Read::Exec(work, tx) => {
                let _ = tx.send(work(&conn));
            }
        }
    }
}

/// Reads the id's events from both parts of the journal, in one read
/// transaction (so one snapshot: a move under way cannot hide any or show
/// any twice): those in id order first, then those of the recent rows,
/// oldest row first, each row's run of the id read from its events blob
/// alone. Stops after `max`. (No `LIMIT ?`: a bound limit makes SQLite
/// prepare the statement again at every use.)
fn replay(
    conn: &Connection,
    id: &str,
    from: u64,
    max: usize,
) -> Result<Vec<EventRecord>, JournalError> {
    let tx = conn.unchecked_transaction().map_err(store_error)?;
    let from = from.max(deleted_mark(&tx, id)? + 1);
    let mut out = {
        let mut st = tx
            .prepare_cached(&format!(
                "SELECT {REPLAYED} FROM troubadour_journal
                 WHERE persistence_id = ?1 AND sequence >= ?2 ORDER BY sequence"
            ))
            .map_err(store_error)?;
        let rows = st
            .query_map(params![id, from as i64], |row| {
                Ok(EventRecord {
                    sequence: row.get::<_, i64>(0)? as u64,
                    epoch: row.get::<_, i64>(1)? as u64,
                    event: stored_event(row, 2)?,
                })
            })
            .map_err(store_error)?;
        rows.take(max)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| corrupt_row(id, e))?
    };
    if out.len() < max {
        let mut bytes = Vec::new();
        let mut blob: Option<rusqlite::blob::Blob<'_>> = None;
        let m = move_under_way(&tx)?;
        each_recent_run(&tx, id, |run, batch| {
            if out.len() >= max || run.last() < from || moved(&m, batch, id) {
                return Ok(());
            }
            // One handle for the replay, moved from row to row: opening
            // one compiles a statement.
            let blob = match &mut blob {
                Some(blob) => {
                    blob.reopen(batch).map_err(store_error)?;
                    blob
                }
                None => blob.insert(
                    tx.blob_open(
                        rusqlite::MAIN_DB,
                        "troubadour_journal_batches",
                        "events",
                        batch,
                        true,
                    )
                    .map_err(store_error)?,
                ),
            };
            bytes.resize(run.len as usize, 0);
            blob.read_at_exact(&mut bytes, run.offset as usize)
                .map_err(store_error)?;
            let events =
                sqlite_batch::events_of(run, &bytes).map_err(|e| corrupt_batch(batch, e))?;
            let room = max - out.len();
            out.extend(events.into_iter().filter(|e| e.sequence >= from).take(room));
            Ok(())
        })?;
    }
    Ok(out)
}

/// The columns a replay reads.
const REPLAYED: &str = "sequence, epoch, type_name, version, codec, payload";

fn latest(conn: &Connection, id: &str) -> Result<Option<SnapshotRecord>, JournalError> {
    conn.prepare_cached(
        "SELECT sequence, type_name, version, codec, payload FROM troubadour_snapshots
         WHERE persistence_id = ?1 ORDER BY sequence DESC LIMIT 1",
    )
    .map_err(store_error)?
    .query_row(params![id], |row| {
        Ok(SnapshotRecord {
            sequence: row.get::<_, i64>(0)? as u64,
            state: stored_event(row, 1)?,
        })
    })
    .optional()
    .map_err(|e| corrupt_row(id, e))
}

/// Each state replaces its key's unless the key holds a newer epoch's
/// (those come back).
fn write_states(conn: &Connection, states: &[StateWrite]) -> Result<Vec<Superseded>, JournalError> {
    let mut upsert = conn
        .prepare_cached(
            "INSERT INTO troubadour_states (key, epoch, type_name, version, codec, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (key) DO UPDATE SET epoch = excluded.epoch,
               type_name = excluded.type_name, version = excluded.version,
               codec = excluded.codec, payload = excluded.payload
             WHERE excluded.epoch >= troubadour_states.epoch",
        )
        .map_err(store_error)?;
    let mut superseded = Vec::new();
    for w in states {
        let s = &w.state;
        let written = upsert
            .execute(params![
                w.key,
                w.epoch as i64,
                s.type_name,
                s.version,
                s.codec,
                s.payload
            ])
            .map_err(store_error)?;
        if written == 0 {
            let current: i64 = conn
                .prepare_cached("SELECT epoch FROM troubadour_states WHERE key = ?1")
                .and_then(|mut st| st.query_row(params![w.key], |row| row.get(0)))
                .map_err(store_error)?;
            superseded.push(Superseded {
                key: w.key.clone(),
                current: current as u64,
            });
        }
    }
    Ok(superseded)
}

/// Takes `key` for `epoch` (see [`StateStore::claim_state`]); a key with
/// no state yet is kept as a row with an empty type name, which reads as
/// no state.
fn claim_state(conn: &Connection, key: &str, epoch: u64) -> Result<ClaimedState, JournalError> {
    let held = conn
        .prepare_cached(
            "SELECT epoch, type_name, version, codec, payload FROM troubadour_states
             WHERE key = ?1",
        )
        .map_err(store_error)?
        .query_row(params![key], |row| {
            let epoch = row.get::<_, i64>(0)? as u64;
            let type_name: String = row.get(1)?;
            let state = if type_name.is_empty() {
                None
            } else {
                Some(stored_event(row, 1)?)
            };
            Ok(ClaimedState { epoch, state })
        })
        .optional()
        .map_err(|e| corrupt_row(key, e))?;
    match held {
        Some(held) if held.epoch > epoch => Err(JournalError::Fenced {
            persistence_id: key.to_string(),
            epoch,
            current: held.epoch,
        }),
        Some(held) => {
            if held.epoch < epoch {
                conn.prepare_cached("UPDATE troubadour_states SET epoch = ?2 WHERE key = ?1")
                    .and_then(|mut st| st.execute(params![key, epoch as i64]))
                    .map_err(store_error)?;
            }
            Ok(held)
        }
        None => {
            conn.prepare_cached(
                "INSERT INTO troubadour_states (key, epoch, type_name, version, codec, payload)
                 VALUES (?1, ?2, '', 0, '', x'')",
            )
            .and_then(|mut st| st.execute(params![key, epoch as i64]))
            .map_err(store_error)?;
            Ok(ClaimedState {
                epoch: 0,
                state: None,
            })
        }
    }
}

fn read_state(conn: &Connection, key: &str) -> Result<Option<StoredEvent>, JournalError> {
    conn.prepare_cached(
        "SELECT type_name, version, codec, payload FROM troubadour_states
         WHERE key = ?1 AND type_name <> ''",
    )
    .map_err(store_error)?
    .query_row(params![key], |row| stored_event(row, 0))
    .optional()
    .map_err(|e| corrupt_row(key, e))
}

/// The four columns (type name, version, codec, payload) from `first` on.
fn stored_event(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent {
        type_name: row.get(first)?,
        version: row.get(first + 1)?,
        codec: row.get(first + 2)?,
        payload: row.get(first + 3)?,
    })
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

impl crate::write_behind::StateStore for SqliteStore {
    fn write_states(&self, states: Vec<StateWrite>) -> StoreFuture<'_, Vec<Superseded>> {
        self.write(move |r| Write::States(states, r))
    }

    fn read_state(&self, key: &str) -> StoreFuture<'_, Option<StoredEvent>> {
        let key = key.to_string();
        self.read(move |r| Read::State(key, r))
    }

    fn claim_state(&self, key: &str, epoch: u64) -> StoreFuture<'_, ClaimedState> {
        let key = key.to_string();
        self.write(move |r| Write::Claim(key, epoch, r))
    }
}

fn reminder_rows(
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<crate::reminders::ReminderRecord>, JournalError> {
    let mut st = conn.prepare_cached(sql).map_err(store_error)?;
    let rows = st
        .query_map(args, |row| {
            Ok(crate::reminders::ReminderRecord {
                kind: row.get(0)?,
                id: row.get(1)?,
                name: row.get(2)?,
                due_ms: row.get(3)?,
                period_ms: row.get(4)?,
            })
        })
        .map_err(store_error)?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(|e| corrupt_row("troubadour_reminders", e))
}

impl crate::reminders::ReminderStore for SqliteStore {
    fn put_reminder(&self, r: crate::reminders::ReminderRecord) -> StoreFuture<'_, ()> {
        let work = self.exec_write(Box::new(move |conn| {
            conn.execute(
                "INSERT OR REPLACE INTO troubadour_reminders (kind, id, name, due_ms, period_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![r.kind, r.id, r.name, r.due_ms, r.period_ms],
            )
            .map(|n| n as i64)
            .map_err(store_error)
        }));
        Box::pin(async move { work.await.map(|_| ()) })
    }

    fn cancel_reminder(&self, kind: &str, id: &str, name: &str) -> StoreFuture<'_, bool> {
        let (kind, id, name) = (kind.to_string(), id.to_string(), name.to_string());
        let work = self.exec_write(Box::new(move |conn| {
            conn.execute(
                "DELETE FROM troubadour_reminders WHERE kind = ?1 AND id = ?2 AND name = ?3",
                params![kind, id, name],
            )
            .map(|n| n as i64)
            .map_err(store_error)
        }));
        Box::pin(async move { work.await.map(|n| n > 0) })
    }

    fn reminders_of(
        &self,
        kind: &str,
        id: &str,
    ) -> StoreFuture<'_, Vec<crate::reminders::ReminderRecord>> {
        let (kind, id) = (kind.to_string(), id.to_string());
        self.exec_read(Box::new(move |conn| {
            reminder_rows(
                conn,
                "SELECT kind, id, name, due_ms, period_ms FROM troubadour_reminders
                 WHERE kind = ?1 AND id = ?2 ORDER BY name",
                &[&kind, &id],
            )
        }))
    }

    fn due_reminders(
        &self,
        now_ms: i64,
        max: usize,
    ) -> StoreFuture<'_, Vec<crate::reminders::ReminderRecord>> {
        let max = max.min(i64::MAX as usize) as i64;
        self.exec_read(Box::new(move |conn| {
            reminder_rows(
                conn,
                "SELECT kind, id, name, due_ms, period_ms FROM troubadour_reminders
                 WHERE due_ms <= ?1 ORDER BY due_ms LIMIT ?2",
                &[&now_ms, &max],
            )
        }))
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
        let work = self.exec_write(Box::new(move |conn| {
            let n = match next_ms {
                Some(next) => conn.execute(
                    "UPDATE troubadour_reminders SET due_ms = ?5
                     WHERE kind = ?1 AND id = ?2 AND name = ?3 AND due_ms = ?4",
                    params![kind, id, name, seen_ms, next],
                ),
                None => conn.execute(
                    "DELETE FROM troubadour_reminders
                     WHERE kind = ?1 AND id = ?2 AND name = ?3 AND due_ms = ?4",
                    params![kind, id, name, seen_ms],
                ),
            };
            n.map(|n| n as i64).map_err(store_error)
        }));
        Box::pin(async move { work.await.map(|n| n == 1) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::StoredEvent;
    use std::sync::mpsc;
    use std::time::Duration;

    const LIVENESS: Duration = Duration::from_secs(30);

    fn append(id: &str, first: u64) -> Append {
        Append {
            persistence_id: id.to_string(),
            epoch: 0,
            first_sequence: first,
            events: vec![StoredEvent {
                type_name: "test.Event".into(),
                version: 1,
                codec: "postcard".into(),
                payload: vec![first as u8],
            }],
        }
    }

    /// A move's rows, as `step_bound` sees them: row `r` holds one event
    /// of each id `ids(r)` returns.
    fn move_of(rows: u64, ids: impl Fn(u64) -> Vec<String>) -> MoveRows {
        MoveRows {
            through: rows as i64,
            rows: (1..=rows)
                .map(|r| {
                    let mut row = sqlite_batch::BatchRow::default();
                    for id in ids(r) {
                        row.push(&append(&id, r)).unwrap();
                    }
                    let (directory, events) = row.take();
                    MoveRow {
                        batch: r as i64,
                        directory,
                        events_len: events.len(),
                    }
                })
                .collect(),
            steps_left: 0,
        }
    }

    /// Takes every step of a move over `rows` (as the store would, each
    /// step starting after the last id the one before took) and returns
    /// the runs each step took.
    fn steps_of(mut rows: MoveRows, per_step: u64) -> Vec<u64> {
        let mut m = Move {
            through: rows.through,
            moved_to: None,
        };
        let mut steps = Vec::new();
        loop {
            let bound = step_bound(&mut rows, &m, per_step).unwrap();
            let taken: u64 = rows
                .rows
                .iter()
                .map(|row| {
                    let d = Directory::parse(&row.directory, row.events_len).unwrap();
                    d.runs_between(m.moved_to.as_deref(), bound.as_deref())
                        .unwrap()
                        .len() as u64
                })
                .sum();
            steps.push(taken);
            match bound {
                Some(b) => {
                    assert!(
                        m.moved_to.as_ref().is_none_or(|to| *to < b),
                        "a step must move on past {:?}, it stopped at {b:?}",
                        m.moved_to
                    );
                    m.moved_to = Some(b);
                }
                None => return steps,
            }
            assert!(steps.len() <= 10_000, "the move never ends: {steps:?}");
        }
    }

    #[test]
    fn a_move_of_rows_written_by_the_same_ids_takes_even_steps() {
        // 16 group commits of 1,000 actors' next events: workload 14.
        let rows = move_of(16, |_| (0..1000).map(|i| format!("actor-{i}")).collect());
        let steps = steps_of(rows, 2048);
        assert_eq!(steps.iter().sum::<u64>(), 16_000, "every run is moved once");
        assert_eq!(steps.len() as u64, FOLD_STEPS, "{steps:?}");
        for s in &steps {
            // An eighth is 2,000; whole ids of 16 runs each.
            assert!((1_500..=2_500).contains(s), "uneven steps: {steps:?}");
        }
    }

    #[test]
    fn a_move_larger_than_its_steps_takes_more_of_them() {
        // 64,000 runs at 2,048 a step: 32 steps, not 8 of 8,000.
        let rows = move_of(64, |_| (0..1000).map(|i| format!("actor-{i}")).collect());
        let steps = steps_of(rows, 2048);
        assert_eq!(steps.iter().sum::<u64>(), 64_000);
        assert_eq!(steps.len(), 32, "{steps:?}");
        assert!(steps.iter().all(|s| *s <= 3_000), "{steps:?}");
    }

    #[test]
    fn a_move_of_rows_of_unlike_ids_ends_having_moved_every_run() {
        // Each row its own ids, a row with one id, rows of very different
        // sizes: the steps may be uneven, but each moves on and the move
        // ends with every run moved once.
        let rows = move_of(9, |r| match r {
            1 => vec!["only".to_string()],
            r if r % 2 == 0 => (0..50 * r).map(|i| format!("even-{r}-{i:05}")).collect(),
            r => (0..3).map(|i| format!("a-{r}-{i}")).collect(),
        });
        let total: u64 = 1
            + (2..=9)
                .map(|r| if r % 2 == 0 { 50 * r } else { 3 })
                .sum::<u64>();
        let steps = steps_of(rows, 100);
        assert_eq!(steps.iter().sum::<u64>(), total, "{steps:?}");
    }

    /// Every event stored, in either part of the journal.
    fn events_stored(conn: &Connection) -> u64 {
        let in_order: i64 = conn
            .query_row("SELECT COUNT(*) FROM troubadour_journal", [], |r| r.get(0))
            .unwrap();
        let mut st = conn
            .prepare("SELECT directory, length(events) FROM troubadour_journal_batches")
            .unwrap();
        let recent: u64 = st
            .query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?)))
            .unwrap()
            .map(|row| {
                let (directory, len) = row.unwrap();
                let d = Directory::parse(&directory, len as usize).unwrap();
                d.runs()
                    .unwrap()
                    .iter()
                    .map(|r| u64::from(r.count))
                    .sum::<u64>()
            })
            .sum();
        in_order as u64 + recent
    }

    fn rows_in(path: &Path, table: &str) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    fn recent_rows(path: &Path) -> i64 {
        rows_in(path, "troubadour_journal_batches")
    }

    fn sequences(records: &[EventRecord]) -> Vec<u64> {
        records.iter().map(|r| r.sequence).collect()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_commit_is_answered_only_after_its_wal_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (release_tx, release) = mpsc::channel::<()>();
        let release = std::sync::Mutex::new(release);
        let store = SqliteStore::open_syncing(
            &dir.path().join("held.db"),
            SqliteOptions::default(),
            move |wal| {
                Box::new(move || {
                    entered_tx.send(()).unwrap();
                    release.lock().unwrap().recv().unwrap();
                    wal.sync_data()
                })
            },
        )
        .unwrap();
        let rt = runtime();
        let mut write = store.append(append("a", 1));
        entered.recv_timeout(LIVENESS).unwrap();
        // Committed (the writer went on) and not yet synced: unanswered.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(write.as_mut().poll(&mut cx).is_pending());
        // The writer is not held by the sync: a second write commits (a
        // reader sees it) while the first one's sync is still held.
        let second = store.append(append("b", 1));
        let deadline = std::time::Instant::now() + LIVENESS;
        while rt.block_on(store.replay("b", 1, 10)).unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer waited for the sync"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        release_tx.send(()).unwrap();
        assert_eq!(rt.block_on(write), Ok(()));
        entered.recv_timeout(LIVENESS).unwrap();
        release_tx.send(()).unwrap();
        assert_eq!(rt.block_on(second), Ok(()));
    }

    #[test]
    fn a_failed_sync_fails_its_writes_and_every_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let failing = std::sync::atomic::AtomicBool::new(false);
        let failing = Arc::new(failing);
        let set = failing.clone();
        let store = SqliteStore::open_syncing(
            &dir.path().join("failing.db"),
            SqliteOptions::default(),
            move |wal| {
                Box::new(move || {
                    if set.load(std::sync::atomic::Ordering::SeqCst) {
                        Err(std::io::Error::other("injected EIO"))
                    } else {
                        wal.sync_data()
                    }
                })
            },
        )
        .unwrap();
        let rt = runtime();
        assert_eq!(rt.block_on(store.append(append("a", 1))), Ok(()));
        failing.store(true, std::sync::atomic::Ordering::SeqCst);
        let failed = rt.block_on(store.append(append("a", 2))).unwrap_err();
        let JournalError::Unavailable(why) = &failed else {
            panic!("not Unavailable: {failed:?}")
        };
        assert!(
            why.contains("injected EIO") && why.contains("reopen"),
            "{why}"
        );
        // The disk may have dropped what it was asked to sync; a later
        // sync that succeeds proves nothing about it, so the store refuses
        // from now on, whatever the disk says.
        failing.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            rt.block_on(store.append(append("b", 1))),
            Err(failed.clone())
        );
        assert_eq!(rt.block_on(store.fence("c", 1)).map(|_| ()), Err(failed));
    }

    /// Under writes that never pause (thousands queued at once, so the
    /// writer begins each transaction as soon as the last one committed),
    /// the WAL still starts over and stays near its limit instead of
    /// growing with everything ever written.
    #[test]
    fn the_wal_stays_near_its_limit_under_writes_that_never_pause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let limit: u64 = 1 << 20;
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                max_batch: 50,
                wal_limit: limit,
                // Moves only every 256 group commits, each in eight
                // steps: the bound is the limit plus one transaction, a
                // batch of 50 writes or a step of about 1,600 events.
                fold_at: usize::MAX,
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let wal = wal_path(&path);
        let rt = runtime();
        let (ids, rounds) = (500, 40);
        let mut writes = Vec::with_capacity(ids * rounds);
        // Every id's next event is queued before the last one is
        // answered: the writer's queue never runs dry.
        for sequence in 1..=rounds as u64 {
            for id in 0..ids {
                let mut append = append(&format!("account-{id}"), sequence);
                append.events[0].payload = vec![sequence as u8; 200];
                writes.push(store.append(append));
            }
        }
        let mut largest = 0;
        for write in writes {
            assert_eq!(rt.block_on(write), Ok(()));
            largest = largest.max(std::fs::metadata(&wal).unwrap().len());
        }
        // Past the limit the log starts over at the next batch, or a few
        // batches later while the background checkpoint holds the lock;
        // without that it reaches about 100 times the limit here.
        assert!(
            largest <= 4 * limit,
            "the WAL reached {largest} bytes with a limit of {limit}"
        );
        // Nothing was lost by starting the log over.
        for id in [0, ids / 2, ids - 1] {
            let events = rt
                .block_on(store.replay(&format!("account-{id}"), 1, usize::MAX))
                .unwrap();
            assert_eq!(events.len(), rounds, "account-{id}");
        }
    }

    /// A reader holding an old snapshot keeps the log from starting over;
    /// the writer goes on (the log grows meanwhile) instead of waiting for
    /// a checkpoint that cannot finish.
    #[test]
    fn a_reader_holding_an_old_snapshot_does_not_hold_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held-snapshot.db");
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                wal_limit: 64 << 10,
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let rt = runtime();
        assert_eq!(rt.block_on(store.append(append("first", 1))), Ok(()));
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        assert_eq!(events_stored(&reader), 1);
        let (done_tx, done) = mpsc::channel();
        // Each batch writes more than the limit, so the log is past twice
        // its limit at every check.
        let writer = store.clone();
        std::thread::spawn(move || {
            let writes: Vec<_> = (0..2_000)
                .map(|i| {
                    let mut append = append(&format!("account-{i}"), 1);
                    append.events[0].payload = vec![7; 1024];
                    writer.append(append)
                })
                .collect();
            let rt = runtime();
            for write in writes {
                assert_eq!(rt.block_on(write), Ok(()));
            }
            done_tx.send(()).unwrap();
        });
        done.recv_timeout(LIVENESS)
            .expect("the writer waited for a checkpoint the reader's snapshot blocks");
        // The reader still sees its snapshot.
        assert_eq!(events_stored(&reader), 1);
        reader.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn a_history_split_between_the_two_parts_reads_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("split.db");
        let options = SqliteOptions {
            fold_at: 50,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, options.clone()).unwrap();
        let rt = runtime();
        let ids: Vec<String> = (0..10).map(|i| format!("account-{i}")).collect();
        // One event per id at a time, as actors awaiting each persist do.
        for seq in 1..=137 {
            for id in &ids {
                assert_eq!(rt.block_on(store.append(append(id, seq))), Ok(()));
            }
        }
        // Both parts hold events, or this test would not test the split.
        assert!(rows_in(&path, "troubadour_journal") > 0);
        assert!(recent_rows(&path) > 0);
        let all: Vec<u64> = (1..=137).collect();
        for id in &ids {
            let events = rt.block_on(store.replay(id, 1, usize::MAX)).unwrap();
            assert_eq!(sequences(&events), all, "{id}");
            assert!(events.iter().all(|e| e.event.payload == [e.sequence as u8]));
            // A page of the replay that starts in one part and ends in the
            // other.
            let page = rt.block_on(store.replay(id, 60, 50)).unwrap();
            assert_eq!(sequences(&page), (60..110).collect::<Vec<_>>(), "{id}");
        }
        let id = ids[0].as_str();
        assert_eq!(rt.block_on(store.delete_to(id, 100)), Ok(()));
        let left = rt.block_on(store.replay(id, 1, usize::MAX)).unwrap();
        assert_eq!(sequences(&left), (101..=137).collect::<Vec<_>>());
        let fenced = rt.block_on(store.fence(id, 1)).unwrap();
        assert_eq!((fenced.lowest, fenced.highest), (101, 137));
        // Numbering goes on from the highest, wherever it is stored.
        assert!(rt.block_on(store.append(append(id, 137))).is_err());
        let mut next = append(id, 138);
        next.epoch = 1;
        assert_eq!(rt.block_on(store.append(next)), Ok(()));
        drop(store);

        // Reopened, the same histories, and nothing left in the recent part.
        let store = SqliteStore::open_with(&path, options).unwrap();
        assert_eq!(recent_rows(&path), 0);
        let events = rt.block_on(store.replay(id, 1, usize::MAX)).unwrap();
        assert_eq!(sequences(&events), (101..=138).collect::<Vec<_>>());
        for id in &ids[1..] {
            let events = rt.block_on(store.replay(id, 1, usize::MAX)).unwrap();
            assert_eq!(sequences(&events), all, "{id}");
        }
    }

    #[test]
    fn a_replay_racing_the_moves_sees_every_acknowledged_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("racing.db");
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                fold_at: 3,
                readers: 2,
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let acknowledged = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = {
            let (store, acknowledged) = (store.clone(), acknowledged.clone());
            std::thread::spawn(move || {
                let rt = runtime();
                for seq in 1..=3_000 {
                    // Another id's event in the same batches, so that moves
                    // carry more than one history; after "racer" in id
                    // order, so that "racer" is moved at a step before the
                    // last, and read while its rows are still there.
                    let other = store.append(append("z-other", seq));
                    assert_eq!(rt.block_on(store.append(append("racer", seq))), Ok(()));
                    assert_eq!(rt.block_on(other), Ok(()));
                    acknowledged.store(seq, std::sync::atomic::Ordering::Release);
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, acknowledged) = (store.clone(), acknowledged.clone());
                std::thread::spawn(move || {
                    let rt = runtime();
                    let mut replays = 0;
                    loop {
                        let before = acknowledged.load(std::sync::atomic::Ordering::Acquire);
                        let events = rt.block_on(store.replay("racer", 1, usize::MAX)).unwrap();
                        let seen = sequences(&events);
                        // A gap-free prefix holding at least every event
                        // acknowledged before the replay began.
                        assert_eq!(seen, (1..=seen.len() as u64).collect::<Vec<_>>());
                        assert!(
                            seen.len() as u64 >= before,
                            "replay {replays} saw {} events, {before} were acknowledged before it",
                            seen.len()
                        );
                        replays += 1;
                        if before == 3_000 {
                            return replays;
                        }
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for reader in readers {
            assert!(reader.join().unwrap() > 1);
        }
        assert!(rows_in(&path, "troubadour_journal") > 0);
    }

    /// Two stores on one file (as two processes would be) each move the
    /// recent rows into id order, interleaved: no event is lost or
    /// repeated, whichever store moves a row.
    #[test]
    fn two_stores_moving_the_same_recent_part_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let options = SqliteOptions {
            fold_at: 16,
            ..SqliteOptions::default()
        };
        let stores: Vec<_> = (0..2)
            .map(|_| SqliteStore::open_with(&path, options.clone()).unwrap())
            .collect();
        let events = 400;
        let writers: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(s, store)| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let rt = runtime();
                    for seq in 1..=events {
                        // Several ids per store, answered together, so
                        // batches and copies hold more than one id.
                        let writes: Vec<_> = (0..4)
                            .map(|i| store.append(append(&format!("s{s}-{i}"), seq)))
                            .collect();
                        for write in writes {
                            assert_eq!(rt.block_on(write), Ok(()));
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let rt = runtime();
        let all: Vec<u64> = (1..=events).collect();
        let check = |store: &SqliteStore| {
            for s in 0..2 {
                for i in 0..4 {
                    let id = format!("s{s}-{i}");
                    let read = rt.block_on(store.replay(&id, 1, usize::MAX)).unwrap();
                    assert_eq!(sequences(&read), all, "{id}");
                }
            }
        };
        check(&stores[0]);
        // Moves happened while both wrote.
        assert!(rows_in(&path, "troubadour_journal") > 0);
        drop(stores);
        check(&SqliteStore::open_with(&path, options).unwrap());
    }

    /// Events deleted while still in the recent part stay deleted: replays
    /// and the lowest number skip them, and the move into id order drops
    /// them.
    #[test]
    fn events_deleted_in_the_recent_part_stay_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deleted.db");
        let options = SqliteOptions {
            fold_at: usize::MAX,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&path, options.clone()).unwrap();
        let rt = runtime();
        for seq in 1..=20 {
            assert_eq!(rt.block_on(store.append(append("cart", seq))), Ok(()));
        }
        assert_eq!(rows_in(&path, "troubadour_journal"), 0);
        assert_eq!(rt.block_on(store.delete_to("cart", 12)), Ok(()));
        let left = rt.block_on(store.replay("cart", 1, usize::MAX)).unwrap();
        assert_eq!(sequences(&left), (13..=20).collect::<Vec<_>>());
        let page = rt.block_on(store.replay("cart", 5, 3)).unwrap();
        assert_eq!(sequences(&page), [13, 14, 15]);
        let fenced = rt.block_on(store.fence("cart", 1)).unwrap();
        assert_eq!((fenced.lowest, fenced.highest), (13, 20));
        drop(store);
        // Moved by the time it is open again: only what was not deleted.
        let store = SqliteStore::open_with(&path, options).unwrap();
        assert_eq!(recent_rows(&path), 0);
        assert_eq!(rows_in(&path, "troubadour_journal"), 8);
        let left = rt.block_on(store.replay("cart", 1, usize::MAX)).unwrap();
        assert_eq!(sequences(&left), (13..=20).collect::<Vec<_>>());
        // Everything deleted: the lowest is past the highest.
        assert_eq!(rt.block_on(store.delete_to("cart", 20)), Ok(()));
        let fenced = rt.block_on(store.fence("cart", 1)).unwrap();
        assert_eq!((fenced.lowest, fenced.highest), (21, 20));
    }

    /// A file written by the version with two recent tables (decision
    /// 0045) opens with every event, in order, and without those tables.
    #[test]
    fn a_journal_with_two_recent_tables_opens_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("two-tables.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            for table in ["troubadour_journal_recent_0", "troubadour_journal_recent_1"] {
                conn.execute_batch(&format!(
                    "CREATE TABLE {table} (
                         persistence_id TEXT NOT NULL, sequence INTEGER NOT NULL,
                         epoch INTEGER NOT NULL, type_name TEXT NOT NULL,
                         version INTEGER NOT NULL, codec TEXT NOT NULL,
                         payload BLOB NOT NULL);
                     CREATE UNIQUE INDEX {table}_by_id ON {table} (persistence_id, sequence);"
                ))
                .unwrap();
            }
            conn.execute_batch(
                "CREATE TABLE troubadour_journal_parts (only INTEGER PRIMARY KEY,
                     appending INTEGER NOT NULL, switches INTEGER NOT NULL);
                 INSERT INTO troubadour_journal_parts VALUES (0, 1, 1);",
            )
            .unwrap();
            let insert = |table: &str, seq: i64| {
                conn.execute(
                    &format!(
                        "INSERT INTO {table} VALUES ('old', ?1, 1, 'test.Added', 1, 'postcard', ?2)"
                    ),
                    params![seq, vec![seq as u8]],
                )
                .unwrap();
            };
            // In id order 1–3, in the table being emptied 3–5 (3 copied
            // and not yet deleted), in the table taking appends 6–7.
            for seq in 1..=3 {
                insert("troubadour_journal", seq);
            }
            for seq in 3..=5 {
                insert("troubadour_journal_recent_0", seq);
            }
            for seq in 6..=7 {
                insert("troubadour_journal_recent_1", seq);
            }
        }
        let store = SqliteStore::open(&path).unwrap();
        let rt = runtime();
        let events = rt.block_on(store.replay("old", 1, usize::MAX)).unwrap();
        assert_eq!(sequences(&events), (1..=7).collect::<Vec<_>>());
        assert!(events.iter().all(|e| e.event.payload == [e.sequence as u8]));
        assert_eq!(rt.block_on(store.append(append("old", 8))), Ok(()));
        let tables: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'troubadour_journal_recent%'
                 OR name = 'troubadour_journal_parts'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0);
    }
}
