//! The SQLite lease store: the same rules as every store, checked with
//! separate clients of one file (each with its own connection, as the node
//! processes of a machine have), and the file surviving its clients.

use troubadour_cluster::{LeaseError, LeaseStore, NodeKey, ShardCount, ShardId, SqliteLeaseStore};

mod store_rules;
use store_rules::TTL;

/// A file in a directory of its own, removed with the returned guard.
fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("troubadour-sqlite-leases-{name}-"))
        .tempdir()
        .unwrap();
    let path = dir.path().join("leases.db");
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_of_the_lease_store_hold_in_sqlite() {
    let (_dir, path) = scratch("rules");
    let a = SqliteLeaseStore::open(&path).unwrap();
    let b = SqliteLeaseStore::open(&path).unwrap();
    store_rules::the_rules_hold(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_have_one_winner_per_epoch_in_sqlite() {
    let (_dir, path) = scratch("racing");
    store_rules::racing_claims_have_one_winner_per_epoch(|| {
        let path = path.clone();
        async move { SqliteLeaseStore::open(&path).unwrap() }
    })
    .await;
}

/// Ownership lives in the file, not in a client: a node that reopens it
/// (a restarted process) finds every assignment, and a client that joined
/// with another shard count is told what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignments_outlive_the_clients_that_made_them() {
    let (_dir, path) = scratch("reopen");
    let a = NodeKey::new("a", 1);
    {
        let store = SqliteLeaseStore::open(&path).unwrap();
        store.join(ShardCount::new(16).unwrap()).await.unwrap();
        store.renew(&a, TTL).await.unwrap();
        assert_eq!(store.claim(ShardId::new(5), &a, 0).await.unwrap().epoch, 1);
    }
    let again = SqliteLeaseStore::open(&path).unwrap();
    let view = again.view().await.unwrap();
    assert_eq!(view.shards, ShardCount::new(16).unwrap());
    assert_eq!(view.assignments[5].owner, Some(a));
    assert_eq!(view.assignments[5].epoch, 1);
    let refused = again.join(ShardCount::DEFAULT).await.unwrap_err();
    assert!(
        matches!(refused, LeaseError::ShardCountMismatch { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("give every node"), "{refused}");
}

#[test]
fn an_unopenable_file_is_a_typed_error_naming_it() {
    let e = SqliteLeaseStore::open("/nonexistent-dir/leases.db").unwrap_err();
    assert!(matches!(e, LeaseError::Unavailable(_)), "{e:?}");
    assert!(e.to_string().contains("/nonexistent-dir/leases.db"), "{e}");
}
