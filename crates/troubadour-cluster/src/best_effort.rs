//! Best-effort mode: ownership from this node's membership view and
//! rendezvous hashing alone, with no lease store.
//!
//! Each node places every shard on the live member that
//! [`placement::owner`] picks from the members *it* sees up, and hosts the
//! shards it places on itself. While every node sees the same members,
//! every node places a shard on the same owner, so an entity has one
//! activation and every message for it goes there. While views differ
//! (a node joining or going down, before membership has told everyone; a
//! partition, where each side sees only itself) two nodes can each place
//! a shard on themselves, or on different owners, and an entity can be
//! active on two nodes at once: **duplicates during churn** are this
//! mode's documented price. A shard placed elsewhere is handed over (its
//! entities finish what they were sent and stop) rather than dropped.
//!
//! What it buys: no store to run, and a failover as fast as membership
//! declares a node down, with no lease to wait out. It suits stateless
//! kinds (caches of something authoritative elsewhere, fan-out workers,
//! presence) that would rather answer twice than not at all. A kind whose
//! activations must never overlap, or whose state must be fenced, needs
//! the leased mode: epochs here are always 0, so persistence does not
//! fence one activation against another (its journals stay linear: the
//! second writer of a sequence number is refused).
//!
//! The view a region reads is made here, from the members the region
//! hands over on every membership change ([`BestEffortPlacement::set_members`]);
//! claims succeed for the owner placement picks, so the region's own logic
//! (claim what is placed here, give up what the view gives another node)
//! runs unchanged.

use crate::lease::{
    Assignment, LeaseError, LeaseInfo, LeaseStore, NodeKey, StoreFuture, StoreView,
};
use crate::placement;
use crate::shard::{ShardCount, ShardId};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

/// One node's placement in best-effort mode, in the place of a lease
/// store: never shared between nodes.
pub(crate) struct BestEffortPlacement {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    shards: Option<ShardCount>,
    /// This node, once its region has renewed (it always succeeds here).
    me: Option<NodeKey>,
    /// The other members this node sees up.
    others: BTreeSet<NodeKey>,
    /// This node left: it places nothing on itself any more.
    left: bool,
    ttl: Duration,
}

impl State {
    fn live(&self) -> Vec<NodeKey> {
        let mut live: Vec<NodeKey> = self.others.iter().cloned().collect();
        if let Some(me) = self.me.as_ref().filter(|_| !self.left) {
            live.push(me.clone());
        }
        live.sort();
        live.dedup();
        live
    }

    /// Where placement puts `shard` among `live`.
    fn owner(shard: ShardId, live: &[NodeKey], names: &[&str]) -> Option<NodeKey> {
        let name = placement::owner(shard, names)?;
        live.iter().find(|k| k.name == *name).cloned()
    }

    fn assignment(&self, shard: ShardId) -> Assignment {
        let live = self.live();
        let names: Vec<&str> = live.iter().map(|k| k.name.as_str()).collect();
        Assignment {
            shard,
            owner: State::owner(shard, &live, &names),
            epoch: 0,
            released: false,
        }
    }
}

impl BestEffortPlacement {
    pub(crate) fn new() -> BestEffortPlacement {
        BestEffortPlacement {
            state: Mutex::new(State::default()),
        }
    }

    /// The other members this node sees up now.
    pub(crate) fn set_members<'a>(&self, up: impl IntoIterator<Item = &'a NodeKey>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.others = up.into_iter().cloned().collect();
    }

    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, LeaseError>,
    ) -> StoreFuture<'_, T> {
        let result = f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        Box::pin(std::future::ready(result))
    }
}

/// Renewed by a node other than the one this placement belongs to: the
/// placement was shared, which this mode cannot work with.
fn shared(me: &NodeKey, other: &NodeKey) -> LeaseError {
    LeaseError::Unavailable(format!(
        "a best-effort placement belongs to one node ({me}) but {other} used it too: \
         give each node its own (Cluster::best_effort on each)"
    ))
}

impl LeaseStore for BestEffortPlacement {
    fn join(&self, shards: ShardCount) -> StoreFuture<'_, ()> {
        self.with(|s| {
            s.shards = Some(shards);
            Ok(())
        })
    }

    fn renew(&self, node: &NodeKey, ttl: Duration) -> StoreFuture<'_, ()> {
        self.with(|s| {
            match &s.me {
                Some(me) if me != node => return Err(shared(me, node)),
                _ => s.me = Some(node.clone()),
            }
            s.ttl = ttl;
            Ok(())
        })
    }

    fn leave(&self, node: &NodeKey) -> StoreFuture<'_, ()> {
        self.with(|s| {
            if s.me.as_ref() == Some(node) {
                s.left = true;
            }
            Ok(())
        })
    }

    fn view(&self) -> StoreFuture<'_, StoreView> {
        self.with(|s| {
            let shards = s.shards.ok_or_else(|| {
                LeaseError::Unavailable("the node has not joined yet".to_string())
            })?;
            let live = s.live();
            let names: Vec<&str> = live.iter().map(|k| k.name.as_str()).collect();
            Ok(StoreView {
                shards,
                leases: live
                    .iter()
                    .map(|node| LeaseInfo {
                        node: node.clone(),
                        remaining: s.ttl,
                    })
                    .collect(),
                assignments: shards
                    .shards()
                    .map(|shard| Assignment {
                        shard,
                        owner: State::owner(shard, &live, &names),
                        epoch: 0,
                        released: false,
                    })
                    .collect(),
            })
        })
    }

    fn claim(&self, shard: ShardId, by: &NodeKey, _seen_epoch: u64) -> StoreFuture<'_, Assignment> {
        self.with(|s| {
            let now = s.assignment(shard);
            if now.owner.as_ref() == Some(by) {
                Ok(now)
            } else {
                Err(LeaseError::Conflict(now))
            }
        })
    }

    fn release(&self, shard: ShardId, _by: &NodeKey, _epoch: u64) -> StoreFuture<'_, Assignment> {
        self.with(|s| Ok(s.assignment(shard)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> NodeKey {
        NodeKey::new(name, 1)
    }

    fn owners(p: &BestEffortPlacement) -> Vec<Option<String>> {
        let view = now(p.view()).unwrap();
        view.assignments
            .into_iter()
            .map(|a| a.owner.map(|o| o.name))
            .collect()
    }

    /// The answer of one of this placement's futures, which are ready at
    /// once.
    fn now<T>(mut f: StoreFuture<'_, T>) -> Result<T, LeaseError> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => unreachable!("a best-effort placement answers at once"),
        }
    }

    #[test]
    fn two_nodes_that_see_the_same_members_place_every_shard_alike() {
        let shards = ShardCount::new(64).unwrap();
        let a = BestEffortPlacement::new();
        let b = BestEffortPlacement::new();
        for (p, me, other) in [(&a, "a", "b"), (&b, "b", "a")] {
            now(p.join(shards)).unwrap();
            now(p.renew(&key(me), Duration::from_secs(3))).unwrap();
            p.set_members([&key(other)]);
        }
        let placed = owners(&a);
        assert_eq!(placed, owners(&b));
        assert!(placed.iter().all(|o| o.is_some()));
        // Both nodes get shards (64 shards, two members).
        assert!(placed.iter().any(|o| o.as_deref() == Some("a")));
        assert!(placed.iter().any(|o| o.as_deref() == Some("b")));
        // Each claims exactly what it places on itself.
        for shard in shards.shards() {
            let mine = placed[shard.get() as usize].as_deref() == Some("a");
            assert_eq!(now(a.claim(shard, &key("a"), 0)).is_ok(), mine);
        }
        // With b gone from a's view, a places everything on itself.
        a.set_members([]);
        assert!(owners(&a).iter().all(|o| o.as_deref() == Some("a")));
        // After leaving, a places nothing on itself.
        now(a.leave(&key("a"))).unwrap();
        a.set_members([&key("b")]);
        assert!(owners(&a).iter().all(|o| o.as_deref() == Some("b")));
    }

    #[test]
    fn a_placement_shared_by_two_nodes_is_refused_with_the_fix() {
        let p = BestEffortPlacement::new();
        now(p.renew(&key("a"), Duration::from_secs(3))).unwrap();
        let e = now(p.renew(&key("b"), Duration::from_secs(3))).unwrap_err();
        assert!(e.to_string().contains("give each node its own"), "{e}");
    }
}
