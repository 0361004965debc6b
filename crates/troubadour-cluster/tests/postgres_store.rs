//! The PostgreSQL lease store against a real server (Debian's PostgreSQL,
//! which `scripts/test` installs), started by the tests themselves in a
//! temporary directory on a free loopback port: the same rules as the
//! in-memory store, claims racing from many clients, and a server restart.

use std::time::Duration;
use troubadour_cluster::{
    LeaseError, LeaseStore, NodeKey, PostgresLeaseStore, ShardCount, ShardId,
};

mod postgres;
use postgres::Server;
mod store_rules;
use store_rules::TTL;

fn shard(n: u32) -> ShardId {
    ShardId::new(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_of_the_lease_store_hold_in_postgresql() {
    let server = Server::start();
    let a = PostgresLeaseStore::connect(&server.url()).await.unwrap();
    let b = PostgresLeaseStore::connect(&server.url()).await.unwrap();
    store_rules::the_rules_hold(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_have_one_winner_per_epoch_in_postgresql() {
    let server = Server::start();
    let url = server.url();
    store_rules::racing_claims_have_one_winner_per_epoch(|| {
        let url = url.clone();
        async move { PostgresLeaseStore::connect(&url).await.unwrap() }
    })
    .await;
}

/// While the server is down every operation fails as unavailable (a node
/// then stops its shards when its lease runs out); after the restart the
/// same store works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_is_survived() {
    let server = Server::start();
    let store = PostgresLeaseStore::connect(&server.url()).await.unwrap();
    let a = NodeKey::new("a", 1);
    store.join(ShardCount::new(4).unwrap()).await.unwrap();
    store.renew(&a, TTL).await.unwrap();
    store.claim(shard(1), &a, 0).await.unwrap();
    server.down();
    let down = store.renew(&a, TTL).await.unwrap_err();
    assert!(matches!(down, LeaseError::Unavailable(_)), "{down:?}");
    assert!(down.to_string().contains("stops its shards"), "{down}");
    server.up();
    let mut back = false;
    for _ in 0..100 {
        if store.renew(&a, TTL).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "the store did not reconnect after the restart");
    let view = store.view().await.unwrap();
    assert_eq!(view.assignments[1].owner, Some(a));
}
