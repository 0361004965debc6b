//! The lease store in PostgreSQL (feature `postgres`): the production
//! authority on ownership, shared by every node of a cluster.
//!
//! PostgreSQL's clocks are wall clocks, and a lease timed by one would run
//! out early when it jumps forward, letting a claim through while its
//! owner still serves. So no time is stored: leases are renewal counters
//! that each client times by its own monotonic clock (`renewals.rs` has
//! the argument), and a claim names the counter value it saw expire.
//!
//! Tables (created by [`LeaseStore::join`] if missing): `troubadour_cluster`
//! (the shard count), `troubadour_leases` (node, incarnation, counter,
//! time to live), `troubadour_shards` (shard, owner, epoch, released).
//!
//! [`LocalLease`]: crate::LocalLease

use crate::lease::{
    Assignment, LeaseError, LeaseInfo, LeaseStore, NodeKey, StoreFuture, StoreView,
};
use crate::renewals::SeenRenewals;
use crate::shard::{ShardCount, ShardId};
use deadpool_postgres::Pool;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// A [`LeaseStore`] in PostgreSQL. See the [module docs](crate::lease) for
/// the rules, and this module's source docs for how it keeps them without
/// trusting the server's clock.
///
/// ```no_run
/// # async fn run() -> Result<(), troubadour_cluster::LeaseError> {
/// use std::sync::Arc;
/// use troubadour_cluster::{Cluster, PostgresLeaseStore};
/// let store = PostgresLeaseStore::connect("postgres://cluster@db.internal/cluster").await?;
/// let builder = Cluster::builder(Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresLeaseStore {
    pool: Pool,
    runtime: tokio::runtime::Handle,
    seen: SeenRenewals,
}

impl PostgresLeaseStore {
    /// A store on the database at `url` (`postgres://user:password@host:port/db`;
    /// TLS with `?sslmode=verify-full&sslrootcert=<CA file>`, see
    /// `troubadour-postgres`), with a pool of connections that reconnects after a server restart.
    /// Call from within a tokio runtime (an actor system's `block_on`): its
    /// connections run there.
    pub async fn connect(url: &str) -> Result<PostgresLeaseStore, LeaseError> {
        let pool =
            troubadour_postgres::pool(url).map_err(|e| LeaseError::Unavailable(e.to_string()))?;
        let store = PostgresLeaseStore {
            pool,
            runtime: tokio::runtime::Handle::current(),
            seen: SeenRenewals::default(),
        };
        // Reach the server once now, so a wrong address fails here.
        store
            .run(|client| async move {
                client.simple_query("SELECT 1").await.map_err(unavailable)?;
                Ok(())
            })
            .await?;
        Ok(store)
    }

    /// Runs `work` with a pooled connection on the store's runtime (so
    /// whoever polls the returned future needs no runtime of its own).
    fn run<T, F, W>(&self, work: W) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        W: FnOnce(deadpool_postgres::Object) -> F + Send + 'static,
        F: Future<Output = Result<T, LeaseError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        let task = self.runtime.spawn(async move {
            let client = pool.get().await.map_err(|e| {
                LeaseError::Unavailable(format!(
                    "no connection to PostgreSQL: {}",
                    troubadour_postgres::describe(&e)
                ))
            })?;
            work(client).await
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(LeaseError::Unavailable(format!(
                    "the store's task ended: {e}"
                )))
            })
        })
    }
}

fn unavailable(e: tokio_postgres::Error) -> LeaseError {
    LeaseError::Unavailable(format!("PostgreSQL: {}", troubadour_postgres::describe(&e)))
}

fn shard_row(row: &tokio_postgres::Row) -> Assignment {
    let shard: i32 = row.get("shard");
    let name: Option<String> = row.get("owner_name");
    let incarnation: Option<i64> = row.get("owner_incarnation");
    let epoch: i64 = row.get("epoch");
    Assignment {
        shard: ShardId::new(shard as u32),
        owner: name
            .zip(incarnation)
            .map(|(name, inc)| NodeKey::new(name, inc as u64)),
        epoch: epoch as u64,
        released: row.get("released"),
    }
}

/// The shard's assignment as it is now (after an update that lost).
async fn assignment_now(
    client: &tokio_postgres::Client,
    shard: ShardId,
) -> Result<Assignment, LeaseError> {
    let row = client
        .query_opt(
            "SELECT shard, owner_name, owner_incarnation, epoch, released
             FROM troubadour_shards WHERE shard = $1",
            &[&(shard.get() as i32)],
        )
        .await
        .map_err(unavailable)?
        .ok_or(LeaseError::NoSuchShard(shard))?;
    Ok(shard_row(&row))
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS troubadour_cluster (
    id int PRIMARY KEY CHECK (id = 1),
    shards int NOT NULL
);
CREATE TABLE IF NOT EXISTS troubadour_leases (
    name text NOT NULL,
    incarnation bigint NOT NULL,
    counter bigint NOT NULL,
    ttl_ms bigint NOT NULL,
    PRIMARY KEY (name, incarnation)
);
CREATE TABLE IF NOT EXISTS troubadour_shards (
    shard int PRIMARY KEY,
    owner_name text,
    owner_incarnation bigint,
    epoch bigint NOT NULL,
    released boolean NOT NULL
);
";

impl LeaseStore for PostgresLeaseStore {
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()> {
        self.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(unavailable)?;
            // One joiner at a time creates the schema and the rows.
            tx.batch_execute("SELECT pg_advisory_xact_lock(7262661746)")
                .await
                .map_err(unavailable)?;
            tx.batch_execute(SCHEMA).await.map_err(unavailable)?;
            let n = shards.get() as i32;
            tx.execute(
                "INSERT INTO troubadour_cluster (id, shards) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                &[&n],
            )
            .await
            .map_err(unavailable)?;
            let row = tx
                .query_one("SELECT shards FROM troubadour_cluster WHERE id = 1", &[])
                .await
                .map_err(unavailable)?;
            let cluster: i32 = row.get(0);
            if cluster != n {
                return Err(LeaseError::ShardCountMismatch {
                    cluster: ShardCount::new(cluster as u32).unwrap_or(ShardCount::DEFAULT),
                    ours: shards,
                });
            }
            tx.execute(
                "INSERT INTO troubadour_shards (shard, epoch, released)
                 SELECT s, 0, false FROM generate_series(0, $1 - 1) AS s
                 ON CONFLICT (shard) DO NOTHING",
                &[&n],
            )
            .await
            .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)
        })
    }

    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()> {
        let node = node.clone();
        let ttl_ms = ttl.as_millis().min(i64::MAX as u128) as i64;
        self.run(move |client| async move {
            client
                .execute(
                    "INSERT INTO troubadour_leases (name, incarnation, counter, ttl_ms)
                     VALUES ($1, $2, 1, $3)
                     ON CONFLICT (name, incarnation)
                     DO UPDATE SET counter = troubadour_leases.counter + 1, ttl_ms = $3",
                    &[&node.name, &(node.incarnation as i64), &ttl_ms],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()> {
        let node = node.clone();
        self.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(unavailable)?;
            let inc = node.incarnation as i64;
            tx.execute(
                "UPDATE troubadour_shards SET released = true
                 WHERE owner_name = $1 AND owner_incarnation = $2",
                &[&node.name, &inc],
            )
            .await
            .map_err(unavailable)?;
            tx.execute(
                "DELETE FROM troubadour_leases WHERE name = $1 AND incarnation = $2",
                &[&node.name, &inc],
            )
            .await
            .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)
        })
    }

    fn view(&self) -> StoreFuture<'_, StoreView> {
        let me = self.clone();
        self.run(move |mut client| async move {
            // One snapshot: leases and shards as of one instant.
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(unavailable)?;
            let count = tx
                .query_opt("SELECT shards FROM troubadour_cluster WHERE id = 1", &[])
                .await
                .map_err(unavailable)?
                .ok_or_else(|| {
                    LeaseError::Unavailable("no node has joined this store yet: call join first".into())
                })?;
            let shards = ShardCount::new(count.get::<_, i32>(0) as u32).unwrap_or(ShardCount::DEFAULT);
            let leases = tx
                .query("SELECT name, incarnation, counter, ttl_ms FROM troubadour_leases ORDER BY name, incarnation", &[])
                .await
                .map_err(unavailable)?;
            let assignments = tx
                .query(
                    "SELECT shard, owner_name, owner_incarnation, epoch, released
                     FROM troubadour_shards ORDER BY shard",
                    &[],
                )
                .await
                .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)?;
            let now = Instant::now();
            let leases = leases
                .iter()
                .map(|row| {
                    let node = NodeKey::new(row.get::<_, String>(0), row.get::<_, i64>(1) as u64);
                    let ttl = Duration::from_millis(row.get::<_, i64>(3).max(0) as u64);
                    let remaining = me.seen.observe(&node, row.get(2), ttl, now);
                    LeaseInfo { node, remaining }
                })
                .collect();
            Ok(StoreView {
                shards,
                leases,
                assignments: assignments.iter().map(shard_row).collect(),
            })
        })
    }

    fn claim(&self, shard: ShardId, by: &NodeKey, seen_epoch: u64) -> StoreFuture<'_, Assignment> {
        let me = self.clone();
        let by = by.clone();
        self.run(move |client| async move {
            let current = client
                .query_opt(
                    "SELECT s.shard, s.owner_name, s.owner_incarnation, s.epoch, s.released, l.counter
                     FROM troubadour_shards s
                     LEFT JOIN troubadour_leases l
                       ON l.name = s.owner_name AND l.incarnation = s.owner_incarnation
                     WHERE s.shard = $1",
                    &[&(shard.get() as i32)],
                )
                .await
                .map_err(unavailable)?
                .ok_or(LeaseError::NoSuchShard(shard))?;
            let assignment = shard_row(&current);
            let owner_counter: Option<i64> = current.get("counter");
            // The owner must be gone by this client's clock: its counter
            // seen unchanged for its whole time to live.
            let stale = match (&assignment.owner, owner_counter) {
                (Some(owner), Some(counter)) if !assignment.released && *owner != by => {
                    let ttl_row = client
                        .query_one(
                            "SELECT ttl_ms FROM troubadour_leases WHERE name = $1 AND incarnation = $2",
                            &[&owner.name, &(owner.incarnation as i64)],
                        )
                        .await
                        .map_err(unavailable)?;
                    let ttl = Duration::from_millis(ttl_row.get::<_, i64>(0).max(0) as u64);
                    if !me.seen.expired_at(owner, counter, ttl) {
                        return Err(LeaseError::Conflict(assignment));
                    }
                    counter
                }
                _ => -1,
            };
            let by_inc = by.incarnation as i64;
            let updated = client
                .query_opt(
                    "UPDATE troubadour_shards s
                     SET owner_name = $2, owner_incarnation = $3, epoch = s.epoch + 1, released = false
                     WHERE s.shard = $1 AND s.epoch = $4
                       AND EXISTS (SELECT 1 FROM troubadour_leases WHERE name = $2 AND incarnation = $3)
                       AND (s.owner_name IS NULL OR s.released
                            OR (s.owner_name = $2 AND s.owner_incarnation = $3)
                            OR NOT EXISTS (SELECT 1 FROM troubadour_leases l
                                           WHERE l.name = s.owner_name AND l.incarnation = s.owner_incarnation)
                            OR (SELECT l.counter FROM troubadour_leases l
                                WHERE l.name = s.owner_name AND l.incarnation = s.owner_incarnation) = $5)
                     RETURNING s.shard, s.owner_name, s.owner_incarnation, s.epoch, s.released",
                    &[&(shard.get() as i32), &by.name, &by_inc, &(seen_epoch as i64), &stale],
                )
                .await
                .map_err(unavailable)?;
            if let Some(row) = updated {
                return Ok(shard_row(&row));
            }
            let leased = client
                .query_opt(
                    "SELECT 1 FROM troubadour_leases WHERE name = $1 AND incarnation = $2",
                    &[&by.name, &by_inc],
                )
                .await
                .map_err(unavailable)?;
            if leased.is_none() {
                return Err(LeaseError::NotLeased(by));
            }
            Err(LeaseError::Conflict(assignment_now(&client, shard).await?))
        })
    }

    fn release(&self, shard: ShardId, by: &NodeKey, epoch: u64) -> StoreFuture<'_, Assignment> {
        let by = by.clone();
        self.run(move |client| async move {
            let updated = client
                .query_opt(
                    "UPDATE troubadour_shards SET released = true
                     WHERE shard = $1 AND epoch = $2 AND owner_name = $3 AND owner_incarnation = $4
                     RETURNING shard, owner_name, owner_incarnation, epoch, released",
                    &[
                        &(shard.get() as i32),
                        &(epoch as i64),
                        &by.name,
                        &(by.incarnation as i64),
                    ],
                )
                .await
                .map_err(unavailable)?;
            if let Some(row) = updated {
                return Ok(shard_row(&row));
            }
            Err(LeaseError::Conflict(assignment_now(&client, shard).await?))
        })
    }
}

impl fmt::Debug for PostgresLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLeaseStore").finish_non_exhaustive()
    }
}
