//! The sender's shortcut to a shard's owner: once this node's region has
//! settled where a shard's messages go (another node, with nothing of the
//! shard held or waiting here), an [`EntityRef`](crate::EntityRef) sends
//! straight to that node's region instead of through this node's, which
//! saves a mailbox hop and a turn of the region for most messages of a
//! cluster (decision 0039). The region stays the only one that decides: it
//! opens a shard's shortcut and closes every shortcut whenever what it
//! routes by (the store's view, members, the regions found, leaving)
//! changes.
//!
//! Why order holds (every sender's messages to an entity arrive in the
//! order sent, across moves):
//!
//! * A message sent through the region is counted (`via_region`) under the
//!   shard's lock before it is queued for the region, and uncounted by the
//!   region when it routes it. The region opens the shortcut only under
//!   that lock, with nothing counted, and only to the node its last
//!   message of the shard went to, with nothing of the shard held: so
//!   everything a sender sent before the shortcut has left this node down
//!   the very connection the shortcut uses, and a connection keeps order.
//! * A message sent by the shortcut is handed to the connection under the
//!   shard's lock. The region closes shortcuts under the same locks before
//!   it acts on a change (and so before it sends a flush down the old
//!   path): a message that went by the shortcut is queued on the old path
//!   before the flush, and every later one goes through the region, which
//!   holds it until the flush is answered, as it does its own.
//!
//! Shards whose owner is this node go through the region (it activates
//! entities); so does everything while a shard moves.

use crate::entity::{Answer, Routed};
use crate::region::{LocalRouted, Region};
use crate::shard::{ShardCount, ShardId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use troubadour::{ActorRef, Ask};

/// One shard's way out of this node.
#[derive(Default)]
struct Route {
    /// The owner's region, while the shortcut is open.
    direct: Option<ActorRef<Region>>,
    /// Messages of the shard queued for this node's region and not yet
    /// routed by it.
    via_region: u32,
}

/// Every shard's way out of this node: shared by the node's entity
/// references and its region.
pub(crate) struct ShardRoutes {
    shards: ShardCount,
    routes: Box<[Mutex<Route>]>,
    /// A bit per shard whose shortcut the region opened since it last
    /// closed them all, so that closing walks those alone (the region
    /// closes them at every claim, a few hundred as a node starts, and at
    /// every view of the store that routes differently). Written only by
    /// the region, in
    /// its turns, which are ordered: relaxed.
    opened: Box<[AtomicU64]>,
}

impl ShardRoutes {
    pub(crate) fn new(shards: ShardCount) -> ShardRoutes {
        ShardRoutes {
            shards,
            routes: (0..shards.get()).map(|_| Mutex::default()).collect(),
            opened: (0..shards.get().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn lock(&self, shard: ShardId) -> MutexGuard<'_, Route> {
        // A panic under this lock leaves a consistent route (each field is
        // written in one step).
        self.routes[shard.get() as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `routed` by the shard's shortcut if one is open, else through
    /// `region`. The message comes back if neither takes it (the node's
    /// region has stopped).
    pub(crate) fn tell(&self, routed: Routed, region: &ActorRef<Region>) -> Result<(), Routed> {
        let shard = self.shards.shard_of(&routed.id);
        let mut route = self.lock(shard);
        let routed = match &route.direct {
            Some(owner) => match owner.tell(routed) {
                Ok(()) => return Ok(()),
                // The connection is gone: the region knows what comes
                // next for the shard.
                Err(e) => {
                    route.direct = None;
                    e.into_message()
                }
            },
            None => routed,
        };
        route.via_region += 1;
        region.tell(LocalRouted { routed, shard }).map_err(|e| {
            route.via_region -= 1;
            e.into_message().routed
        })
    }

    /// Asks by the shard's shortcut if one is open to a node still
    /// connected, else through `region`.
    pub(crate) fn ask(&self, routed: Routed, region: &ActorRef<Region>) -> Ask<Answer> {
        let shard = self.shards.shard_of(&routed.id);
        let mut route = self.lock(shard);
        if let Some(owner) = &route.direct {
            if owner.is_alive() {
                return owner.ask(routed);
            }
            route.direct = None;
        }
        route.via_region += 1;
        // A region that stopped ends the ask with an error; nothing is
        // left counted that the region would wait for (it is gone).
        region.ask(LocalRouted { routed, shard })
    }

    /// The region took a message sent through it.
    pub(crate) fn routed_one(&self, shard: ShardId) {
        let mut route = self.lock(shard);
        route.via_region = route.via_region.saturating_sub(1);
    }

    /// Opens the shard's shortcut to `owner` unless a message of the shard
    /// is still on its way through the region. The region calls this only
    /// when its last message of the shard went to `owner` and it holds
    /// none of the shard.
    pub(crate) fn open(&self, shard: ShardId, owner: &ActorRef<Region>) {
        let mut route = self.lock(shard);
        if route.via_region == 0 && route.direct.is_none() {
            route.direct = Some(owner.clone());
            let i = shard.get() as usize;
            self.opened[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
    }

    /// Closes every shortcut: from now on, every message goes through the
    /// region until it opens them again.
    pub(crate) fn close_all(&self) {
        for (word, opened) in self.opened.iter().enumerate() {
            let mut bits = opened.swap(0, Ordering::Relaxed);
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let route = &self.routes[word * 64 + bit];
                route.lock().unwrap_or_else(|p| p.into_inner()).direct = None;
            }
        }
    }
}
