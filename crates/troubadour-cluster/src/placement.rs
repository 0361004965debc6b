//! Where each shard should live: rendezvous (highest random weight)
//! hashing of shards over the live members, and the moves that get the
//! cluster there, orphans first and rebalancing rate-limited.
//!
//! Rendezvous hashing gives each (shard, member) pair a score and puts the
//! shard on the member with the highest. Its properties are why it is
//! used here: every node computes the same placement from the same member
//! list with no coordination; when a member leaves, only its shards move
//! (each to the member with its next-highest score); when one joins, only
//! the shards it now wins move, about `1/n` of them. Members are scored by
//! name, not incarnation, so a restarted node wins back the shards it had.
//!
//! Placement only says where shards *should* be. Who owns a shard is the
//! lease store's to say, and a move happens only by a claim it accepts
//! (see [`lease`](crate::lease)).

use crate::shard::{ShardCount, ShardId};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The member `shard` should live on: the one with the highest score,
/// ties (all but impossible) broken by the smaller name. `None` when there
/// are no members.
///
/// ```
/// use troubadour_cluster::{placement, ShardId};
/// let members = ["node-a", "node-b", "node-c"];
/// let home = placement::owner(ShardId::new(7), &members).unwrap();
/// assert!(members.contains(&home));
/// // Every node computes the same answer from the same members, in any order.
/// assert_eq!(placement::owner(ShardId::new(7), &["node-c", "node-a", "node-b"]), Some(home));
/// ```
pub fn owner<'a, M: AsRef<str> + ?Sized>(shard: ShardId, members: &'a [&'a M]) -> Option<&'a M> {
    members
        .iter()
        .map(|m| (score(shard, m.as_ref()), *m))
        .max_by(|(a, ma), (b, mb)| a.cmp(b).then_with(|| mb.as_ref().cmp(ma.as_ref())))
        .map(|(_, m)| m)
}

/// The score of `member` for `shard`: part of the cluster's protocol, the
/// XXH3 64-bit hash of the member's name seeded with the shard number.
fn score(shard: ShardId, member: &str) -> u64 {
    xxh3_64_with_seed(member.as_bytes(), u64::from(shard.get()))
}

/// One shard to move: from its current owner (`None`: it has none, or its
/// owner is not among the live members) to `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The shard.
    pub shard: ShardId,
    /// Its owner now, if that owner is live.
    pub from: Option<String>,
    /// Where placement wants it.
    pub to: String,
}

impl Move {
    /// Whether the shard has no live owner, so nothing serves it until the
    /// move is made.
    pub fn is_orphan(&self) -> bool {
        self.from.is_none()
    }
}

/// The moves that bring `current` (each shard's owner, by shard number;
/// shards past its end have none) towards placement over `live`:
///
/// * every shard without a live owner goes to its place at once (nothing
///   serves it, so waiting only loses time);
/// * at most `rebalance_limit` shards whose live owner is not their place
///   move, lowest shard numbers first, so a join or a rolling restart
///   moves the cluster over in rounds instead of stopping everything at
///   once.
///
/// An empty `live` gives no moves.
///
/// ```
/// use troubadour_cluster::{placement, ShardCount};
/// let shards = ShardCount::new(16).unwrap();
/// // Nothing is owned yet: every shard is an orphan and moves at once.
/// let nothing_owned: [Option<&str>; 0] = [];
/// let moves = placement::plan(shards, &nothing_owned, &["a", "b"], 2);
/// assert_eq!(moves.len(), 16);
/// assert!(moves.iter().all(|m| m.is_orphan()));
/// ```
pub fn plan<O: AsRef<str>, M: AsRef<str>>(
    shards: ShardCount,
    current: &[Option<O>],
    live: &[M],
    rebalance_limit: usize,
) -> Vec<Move> {
    let members: Vec<&str> = live.iter().map(AsRef::as_ref).collect();
    if members.is_empty() {
        return Vec::new();
    }
    let mut orphans = Vec::new();
    let mut rebalances = Vec::new();
    for shard in shards.shards() {
        let place = owner(shard, &members).expect("members is not empty");
        let now = current
            .get(shard.get() as usize)
            .and_then(|o| o.as_ref())
            .map(AsRef::as_ref)
            .filter(|o| members.contains(o));
        match now {
            None => orphans.push(Move {
                shard,
                from: None,
                to: place.to_string(),
            }),
            Some(o) if o != place => rebalances.push(Move {
                shard,
                from: Some(o.to_string()),
                to: place.to_string(),
            }),
            Some(_) => {}
        }
    }
    rebalances.truncate(rebalance_limit);
    orphans.extend(rebalances);
    orphans
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn placement(shards: ShardCount, members: &[String]) -> Vec<String> {
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        shards
            .shards()
            .map(|s| owner(s, &refs).unwrap().to_string())
            .collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    #[test]
    fn shards_spread_evenly_over_the_members() {
        let shards = ShardCount::DEFAULT;
        for n in [2, 3, 5, 8] {
            let members = names(n);
            let placed = placement(shards, &members);
            for m in &members {
                let share = placed.iter().filter(|p| *p == m).count();
                let fair = 1024 / n;
                // Rendezvous hashing is a balls-into-bins draw: within
                // ±35 % of the fair share for these sizes.
                assert!(
                    share * 100 >= fair * 65 && share * 100 <= fair * 135,
                    "{m} got {share} of 1024 with {n} members"
                );
            }
        }
    }

    proptest! {
        /// A member leaving moves only its own shards.
        #[test]
        fn a_leave_moves_only_the_leavers_shards(n in 2usize..9, leaver in 0usize..9) {
            let leaver = leaver % n;
            let members = names(n);
            let before = placement(ShardCount::DEFAULT, &members);
            let mut rest = members.clone();
            let gone = rest.remove(leaver);
            let after = placement(ShardCount::DEFAULT, &rest);
            for (b, a) in before.iter().zip(&after) {
                if *b != gone {
                    prop_assert_eq!(b, a);
                }
            }
        }

        /// A member joining takes shards only for itself.
        #[test]
        fn a_join_moves_shards_only_to_the_joiner(n in 1usize..9) {
            let members = names(n);
            let before = placement(ShardCount::DEFAULT, &members);
            let mut more = members.clone();
            more.push("joiner".to_string());
            let after = placement(ShardCount::DEFAULT, &more);
            for (b, a) in before.iter().zip(&after) {
                prop_assert!(a == b || a == "joiner");
            }
        }

        /// The plan moves every orphan, at most the limit of the others,
        /// and applying plans round after round reaches the placement.
        #[test]
        fn plans_converge_within_the_limit(
            n in 1usize..6,
            owned in proptest::collection::vec(proptest::option::of(0usize..8), 0..64),
            limit in 1usize..8,
        ) {
            let shards = ShardCount::new(64).unwrap();
            let members = names(n);
            // Owners among the members and some that are gone (index >= n).
            let mut current: Vec<Option<String>> =
                owned.iter().map(|o| o.map(|i| format!("node-{i}"))).collect();
            let target = placement(shards, &members);
            for _round in 0..64 {
                let moves = plan(shards, &current, &members, limit);
                let rebalances = moves.iter().filter(|m| !m.is_orphan()).count();
                prop_assert!(rebalances <= limit);
                for m in &moves {
                    prop_assert_eq!(&m.to, &target[m.shard.get() as usize]);
                }
                if moves.is_empty() {
                    break;
                }
                current.resize(64, None);
                for m in moves {
                    current[m.shard.get() as usize] = Some(m.to);
                }
                // After the first round no shard is without a live owner.
                prop_assert!(current.iter().all(|o| o.as_ref().is_some_and(|o| members.contains(o))));
            }
            let reached: Vec<String> = current.into_iter().map(|o| o.unwrap()).collect();
            prop_assert_eq!(reached, target);
        }
    }
}
