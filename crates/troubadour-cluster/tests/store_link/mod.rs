//! One node's way to a shared lease store, which a test can cut: every
//! operation then fails as it does when the store is out of reach (the
//! node is on the wrong side of a partition, the store's host is down).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troubadour_cluster::{
    Assignment, LeaseError, LeaseStore, MemoryLeaseStore, NodeKey, ShardCount, ShardId,
    StoreFuture, StoreView,
};

pub struct StoreLink {
    store: Arc<MemoryLeaseStore>,
    cut: Arc<AtomicBool>,
}

impl StoreLink {
    /// A link to `store`, and the switch that cuts it.
    pub fn new(store: &Arc<MemoryLeaseStore>) -> (Arc<StoreLink>, Arc<AtomicBool>) {
        let cut = Arc::new(AtomicBool::new(false));
        let link = StoreLink {
            store: store.clone(),
            cut: cut.clone(),
        };
        (Arc::new(link), cut)
    }

    fn through<'a, T: Send + 'a>(
        &'a self,
        op: impl FnOnce(&'a MemoryLeaseStore) -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        if self.cut.load(Ordering::SeqCst) {
            Box::pin(std::future::ready(Err(LeaseError::Unavailable(
                "cut off by the test".into(),
            ))))
        } else {
            op(&self.store)
        }
    }
}

impl LeaseStore for StoreLink {
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()> {
        self.through(|s| s.join(shards))
    }
    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()> {
        self.through(|s| s.renew(node, ttl))
    }
    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()> {
        self.through(|s| s.leave(node))
    }
    fn view(&self) -> StoreFuture<'_, StoreView> {
        self.through(|s| s.view())
    }
    fn claim(&self, shard: ShardId, by: &NodeKey, seen: u64) -> StoreFuture<'_, Assignment> {
        self.through(|s| s.claim(shard, by, seen))
    }
    fn release(&self, shard: ShardId, by: &NodeKey, epoch: u64) -> StoreFuture<'_, Assignment> {
        self.through(|s| s.release(shard, by, epoch))
    }
}
