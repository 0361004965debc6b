//! The lease store in a SQLite file (feature `sqlite`): the authority for
//! a cluster whose nodes are processes on one machine, such as a local
//! three-node cluster on loopback, with no database server to run.
//!
//! Every node process opens the same file. SQLite's file locks make each
//! operation one transaction (`BEGIN IMMEDIATE`: one writer at a time, the
//! others wait up to the busy timeout), and WAL lets views read while a
//! node writes. Leases are timed exactly as in PostgreSQL, by renewal
//! counters each client watches on its own monotonic clock
//! (`renewals.rs`), so no clock is stored and none is trusted. A file on a
//! network filesystem is not a safe place for it: SQLite's locks do not
//! hold there; use PostgreSQL across machines.

use crate::lease::{
    Assignment, LeaseError, LeaseInfo, LeaseStore, NodeKey, StoreFuture, StoreView,
};
use crate::renewals::SeenRenewals;
use crate::shard::{ShardCount, ShardId};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A [`LeaseStore`] in a SQLite file shared by the node processes of one
/// machine. See the [module docs](crate::lease) for the rules.
///
/// ```no_run
/// use std::sync::Arc;
/// use troubadour_cluster::{Cluster, SqliteLeaseStore};
/// let store = SqliteLeaseStore::open("/var/lib/realtime-map/leases.db")?;
/// let builder = Cluster::builder(Arc::new(store));
/// # Ok::<(), troubadour_cluster::LeaseError>(())
/// ```
#[derive(Clone)]
pub struct SqliteLeaseStore {
    /// Operations, run one at a time by the store's thread (SQLite calls
    /// block; a node's scheduler must not).
    jobs: mpsc::Sender<Job>,
    seen: SeenRenewals,
    path: PathBuf,
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// How long an operation waits for another process's transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS troubadour_cluster (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    shards INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS troubadour_leases (
    name TEXT NOT NULL,
    incarnation INTEGER NOT NULL,
    counter INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL,
    PRIMARY KEY (name, incarnation)
);
CREATE TABLE IF NOT EXISTS troubadour_shards (
    shard INTEGER PRIMARY KEY,
    owner_name TEXT,
    owner_incarnation INTEGER,
    epoch INTEGER NOT NULL,
    released INTEGER NOT NULL
);
";

impl SqliteLeaseStore {
    /// Opens (creating if missing) the store in the file at `path`. Every
    /// node of the cluster opens the same file.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteLeaseStore, LeaseError> {
        let path = path.as_ref().to_path_buf();
        let opened = Connection::open(&path)
            .and_then(|c| c.busy_timeout(BUSY_TIMEOUT).map(|_| c))
            .and_then(|c| c.pragma_update(None, "journal_mode", "WAL").map(|_| c))
            .and_then(|mut c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute_batch(SCHEMA)?;
                tx.commit()?;
                Ok(c)
            });
        let mut connection = opened.map_err(|e| {
            LeaseError::Unavailable(format!(
                "cannot open the SQLite lease store {}: {e}; check the path and its permissions",
                path.display()
            ))
        })?;
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("troubadour-sqlite-leases".into())
            .spawn(move || {
                // Ends once every clone of the store is gone.
                for job in queue {
                    job(&mut connection);
                }
            })
            .map_err(|e| {
                LeaseError::Unavailable(format!("cannot start the store's thread: {e}"))
            })?;
        Ok(SqliteLeaseStore {
            jobs,
            seen: SeenRenewals::default(),
            path,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the store's thread.
    fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, LeaseError> + Send + 'static,
    ) -> StoreFuture<'static, T> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let sent = self.jobs.send(Box::new(move |c: &mut Connection| {
            let _ = answer.send(work(c));
        }));
        Box::pin(async move {
            if sent.is_err() {
                return Err(LeaseError::Unavailable("the store's thread stopped".into()));
            }
            answered.await.unwrap_or_else(|_| {
                Err(LeaseError::Unavailable("the store's thread stopped".into()))
            })
        })
    }
}

fn unavailable(e: rusqlite::Error) -> LeaseError {
    LeaseError::Unavailable(format!("SQLite: {e}"))
}

const SHARD_COLUMNS: &str = "shard, owner_name, owner_incarnation, epoch, released";

fn shard_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Assignment> {
    let shard: u32 = row.get(0)?;
    let name: Option<String> = row.get(1)?;
    let incarnation: Option<i64> = row.get(2)?;
    let epoch: i64 = row.get(3)?;
    Ok(Assignment {
        shard: ShardId::new(shard),
        owner: name
            .zip(incarnation)
            .map(|(name, inc)| NodeKey::new(name, inc as u64)),
        epoch: epoch as u64,
        released: row.get(4)?,
    })
}

fn assignment_now(c: &Connection, shard: ShardId) -> Result<Assignment, LeaseError> {
    c.query_row(
        &format!("SELECT {SHARD_COLUMNS} FROM troubadour_shards WHERE shard = ?1"),
        [shard.get()],
        shard_row,
    )
    .optional()
    .map_err(unavailable)?
    .ok_or(LeaseError::NoSuchShard(shard))
}

/// The owner's lease counter and time to live, if it has a lease row.
fn lease_of(c: &Connection, node: &NodeKey) -> Result<Option<(i64, Duration)>, LeaseError> {
    c.query_row(
        "SELECT counter, ttl_ms FROM troubadour_leases WHERE name = ?1 AND incarnation = ?2",
        params![node.name, node.incarnation as i64],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
    )
    .optional()
    .map_err(unavailable)
    .map(|l| l.map(|(counter, ttl)| (counter, Duration::from_millis(ttl.max(0) as u64))))
}

impl LeaseStore for SqliteLeaseStore {
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()> {
        self.run(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let n = shards.get();
            tx.execute(
                "INSERT INTO troubadour_cluster (id, shards) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
                [n],
            )
            .map_err(unavailable)?;
            let cluster: u32 = tx
                .query_row("SELECT shards FROM troubadour_cluster WHERE id = 1", [], |r| r.get(0))
                .map_err(unavailable)?;
            if cluster != n {
                return Err(LeaseError::ShardCountMismatch {
                    cluster: ShardCount::new(cluster).unwrap_or(ShardCount::DEFAULT),
                    ours: shards,
                });
            }
            {
                let mut insert = tx
                    .prepare(
                        "INSERT INTO troubadour_shards (shard, epoch, released) VALUES (?1, 0, 0)
                         ON CONFLICT (shard) DO NOTHING",
                    )
                    .map_err(unavailable)?;
                for s in 0..n {
                    insert.execute([s]).map_err(unavailable)?;
                }
            }
            tx.commit().map_err(unavailable)
        })
    }

    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()> {
        let node = node.clone();
        let ttl_ms = ttl.as_millis().min(i64::MAX as u128) as i64;
        self.run(move |c| {
            c.execute(
                "INSERT INTO troubadour_leases (name, incarnation, counter, ttl_ms)
                 VALUES (?1, ?2, 1, ?3)
                 ON CONFLICT (name, incarnation)
                 DO UPDATE SET counter = counter + 1, ttl_ms = excluded.ttl_ms",
                params![node.name, node.incarnation as i64, ttl_ms],
            )
            .map_err(unavailable)?;
            Ok(())
        })
    }

    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()> {
        let node = node.clone();
        self.run(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let key = params![node.name, node.incarnation as i64];
            tx.execute(
                "UPDATE troubadour_shards SET released = 1
                 WHERE owner_name = ?1 AND owner_incarnation = ?2",
                key,
            )
            .map_err(unavailable)?;
            tx.execute(
                "DELETE FROM troubadour_leases WHERE name = ?1 AND incarnation = ?2",
                key,
            )
            .map_err(unavailable)?;
            tx.commit().map_err(unavailable)
        })
    }

    fn view(&self) -> StoreFuture<'_, StoreView> {
        let seen = self.seen.clone();
        self.run(move |c| {
            // One read transaction: leases and shards as of one instant.
            let tx = c.transaction().map_err(unavailable)?;
            let count: u32 = tx
                .query_row(
                    "SELECT shards FROM troubadour_cluster WHERE id = 1",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(unavailable)?
                .ok_or_else(|| {
                    LeaseError::Unavailable(
                        "no node has joined this store yet: call join first".into(),
                    )
                })?;
            let shards = ShardCount::new(count).unwrap_or(ShardCount::DEFAULT);
            let now = Instant::now();
            let leases = tx
                .prepare(
                    "SELECT name, incarnation, counter, ttl_ms FROM troubadour_leases
                     ORDER BY name, incarnation",
                )
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        let node = NodeKey::new(r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64);
                        let ttl = Duration::from_millis(r.get::<_, i64>(3)?.max(0) as u64);
                        let remaining = seen.observe(&node, r.get(2)?, ttl, now);
                        Ok(LeaseInfo { node, remaining })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(unavailable)?;
            let assignments = tx
                .prepare(&format!(
                    "SELECT {SHARD_COLUMNS} FROM troubadour_shards ORDER BY shard"
                ))
                .and_then(|mut s| {
                    s.query_map([], shard_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(unavailable)?;
            tx.commit().map_err(unavailable)?;
            Ok(StoreView {
                shards,
                leases,
                assignments,
            })
        })
    }

    fn claim(&self, shard: ShardId, by: &NodeKey, seen_epoch: u64) -> StoreFuture<'_, Assignment> {
        let by = by.clone();
        let seen = self.seen.clone();
        self.run(move |c| {
            // Immediate: nobody writes between the checks and the update.
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let current = assignment_now(&tx, shard)?;
            if current.epoch != seen_epoch {
                return Err(LeaseError::Conflict(current));
            }
            // The owner must be gone: no lease row, or its counter watched
            // unchanged for its whole time to live by this client.
            if let Some(owner) = &current.owner {
                if !current.released && *owner != by {
                    if let Some((counter, ttl)) = lease_of(&tx, owner)? {
                        if !seen.expired_at(owner, counter, ttl) {
                            return Err(LeaseError::Conflict(current));
                        }
                    }
                }
            }
            if lease_of(&tx, &by)?.is_none() {
                return Err(LeaseError::NotLeased(by));
            }
            tx.execute(
                "UPDATE troubadour_shards
                 SET owner_name = ?2, owner_incarnation = ?3, epoch = epoch + 1, released = 0
                 WHERE shard = ?1",
                params![shard.get(), by.name, by.incarnation as i64],
            )
            .map_err(unavailable)?;
            let got = assignment_now(&tx, shard)?;
            tx.commit().map_err(unavailable)?;
            Ok(got)
        })
    }

    fn release(&self, shard: ShardId, by: &NodeKey, epoch: u64) -> StoreFuture<'_, Assignment> {
        let by = by.clone();
        self.run(move |c| {
            let updated = c
                .query_row(
                    &format!(
                        "UPDATE troubadour_shards SET released = 1
                         WHERE shard = ?1 AND epoch = ?2 AND owner_name = ?3 AND owner_incarnation = ?4
                         RETURNING {SHARD_COLUMNS}"
                    ),
                    params![shard.get(), epoch as i64, by.name, by.incarnation as i64],
                    shard_row,
                )
                .optional()
                .map_err(unavailable)?;
            match updated {
                Some(a) => Ok(a),
                None => Err(LeaseError::Conflict(assignment_now(c, shard)?)),
            }
        })
    }
}

impl fmt::Debug for SqliteLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLeaseStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
