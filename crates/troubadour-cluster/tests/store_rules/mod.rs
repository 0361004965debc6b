//! The rules every shared lease store must apply (crate::lease's module
//! docs), checked the same way against each one: two clients of one store,
//! and many clients racing for the same shards.

use std::future::Future;
use std::time::Duration;
use troubadour_cluster::{LeaseError, LeaseStore, NodeKey, ShardCount, ShardId};

fn shard(n: u32) -> ShardId {
    ShardId::new(n)
}

/// The time to live the rules are checked with.
pub const TTL: Duration = Duration::from_millis(600);

/// Two clients of one store (as two nodes would be) check every rule:
/// join with one shard count, no claim without a lease, none from a live
/// owner, a renewal the claimant did not see defeats its claim, a stale
/// epoch loses, release and leave.
pub async fn the_rules_hold<S: LeaseStore>(a_store: S, b_store: S) {
    let (a, b) = (NodeKey::new("a", 1), NodeKey::new("b", 2));
    a_store.join(ShardCount::new(8).unwrap()).await.unwrap();
    b_store.join(ShardCount::new(8).unwrap()).await.unwrap();
    let refused = b_store.join(ShardCount::DEFAULT).await.unwrap_err();
    assert!(
        matches!(refused, LeaseError::ShardCountMismatch { .. }),
        "{refused:?}"
    );
    // No claim without a lease.
    assert_eq!(
        a_store.claim(shard(0), &a, 0).await,
        Err(LeaseError::NotLeased(a.clone()))
    );
    a_store.renew(&a, TTL).await.unwrap();
    b_store.renew(&b, TTL).await.unwrap();
    let got = a_store.claim(shard(0), &a, 0).await.unwrap();
    assert_eq!((got.owner.clone(), got.epoch), (Some(a.clone()), 1));
    // b sees a's lease fresh: no claim while it is valid.
    let view = b_store.view().await.unwrap();
    assert!(view.is_leased(&a));
    assert!(matches!(
        b_store.claim(shard(0), &b, 1).await,
        Err(LeaseError::Conflict(_))
    ));
    // A renewal b did not see makes b's claim fail, however long b has
    // watched the old counter.
    b_store.view().await.unwrap();
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    a_store.renew(&a, TTL).await.unwrap();
    b_store.renew(&b, TTL).await.unwrap();
    assert!(matches!(
        b_store.claim(shard(0), &b, 1).await,
        Err(LeaseError::Conflict(_))
    ));
    // a stops renewing: once b has seen its counter unchanged for the
    // time to live, b's claim wins, at the next epoch.
    b_store.view().await.unwrap();
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    b_store.renew(&b, TTL).await.unwrap();
    let view = b_store.view().await.unwrap();
    assert!(!view.is_leased(&a));
    let got = b_store.claim(shard(0), &b, 1).await.unwrap();
    assert_eq!((got.owner.clone(), got.epoch), (Some(b.clone()), 2));
    // A stale epoch loses.
    assert!(matches!(
        a_store.claim(shard(0), &a, 1).await,
        Err(LeaseError::Conflict(_))
    ));
    // Only the owner at its epoch releases; a released shard is claimable.
    assert!(matches!(
        a_store.release(shard(0), &a, 2).await,
        Err(LeaseError::Conflict(_))
    ));
    assert!(b_store.release(shard(0), &b, 2).await.unwrap().released);
    a_store.renew(&a, TTL).await.unwrap();
    assert_eq!(a_store.claim(shard(0), &a, 2).await.unwrap().epoch, 3);
    // A leave releases everything of the node and ends its lease.
    a_store.leave(&a).await.unwrap();
    let view = b_store.view().await.unwrap();
    assert!(view.assignments[0].released && !view.is_leased(&a));
    assert_eq!(b_store.claim(shard(0), &b, 3).await.unwrap().epoch, 4);
    assert_eq!(
        a_store.claim(shard(9), &a, 0).await,
        Err(LeaseError::NoSuchShard(shard(9)))
    );
}

/// Eight clients (from `connect`) race to claim four shards from the
/// epochs they read, and hand each shard back when they hold it: every
/// (shard, epoch) has one winner and the epochs have no gap.
pub async fn racing_claims_have_one_winner_per_epoch<S, F, C>(connect: C)
where
    S: LeaseStore,
    F: Future<Output = S> + Send + 'static,
    C: Fn() -> F,
{
    let first = connect().await;
    first.join(ShardCount::new(4).unwrap()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let store = connect();
        tasks.push(tokio::spawn(async move {
            let store = store.await;
            let me = NodeKey::new(format!("n{i}"), i);
            store.renew(&me, Duration::from_secs(3600)).await.unwrap();
            let mut won = Vec::new();
            for round in 0..40u32 {
                let s = shard(round % 4);
                let view = store.view().await.unwrap();
                let seen = view.assignments[s.get() as usize].clone();
                if seen.owner.as_ref() == Some(&me) && !seen.released {
                    let _ = store.release(s, &me, seen.epoch).await;
                    continue;
                }
                if let Ok(got) = store.claim(s, &me, seen.epoch).await {
                    won.push((s.get(), got.epoch));
                }
            }
            won
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let total = all.len();
    all.dedup();
    assert_eq!(all.len(), total, "two clients won one epoch of a shard");
    let view = first.view().await.unwrap();
    for s in 0..4u32 {
        let epochs: Vec<u64> = all
            .iter()
            .filter(|(sh, _)| *sh == s)
            .map(|(_, e)| *e)
            .collect();
        let last = view.assignments[s as usize].epoch;
        assert_eq!(epochs, (1..=last).collect::<Vec<_>>(), "shard {s}");
    }
}
