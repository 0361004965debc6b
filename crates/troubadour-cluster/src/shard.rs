//! Shards: the unit of ownership. Every entity id falls into one shard,
//! computed the same way on every node, so any node can tell where an
//! entity lives by asking who owns its shard.

use std::fmt;
use xxhash_rust::xxh3::xxh3_64;

/// How many shards a cluster has. Fixed for the cluster's life: a node
/// that joins with another count is refused, since it would put entities
/// in other shards than the nodes already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardCount(u32);

impl ShardCount {
    /// The default, 1024: enough to spread over a few hundred nodes, few
    /// enough that the whole assignment table is one small read.
    pub const DEFAULT: ShardCount = ShardCount(1024);

    /// The largest count accepted: shard numbers fit in 16 bits on the
    /// wire and in the stores.
    pub const MAX: u32 = 65_536;

    /// `count` shards, if `1 <= count <= 65,536`.
    ///
    /// ```
    /// use troubadour_cluster::ShardCount;
    /// assert_eq!(ShardCount::new(1024), Some(ShardCount::DEFAULT));
    /// assert_eq!(ShardCount::new(0), None);
    /// ```
    pub const fn new(count: u32) -> Option<ShardCount> {
        if count >= 1 && count <= Self::MAX {
            Some(ShardCount(count))
        } else {
            None
        }
    }

    /// The number of shards.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Every shard, in order.
    pub fn shards(self) -> impl Iterator<Item = ShardId> {
        (0..self.0).map(ShardId)
    }

    /// The shard of the entity named `id` (of any kind: kinds share the
    /// shards, so the table has one row per shard, not per kind).
    ///
    /// The mapping is part of the cluster's protocol and never changes:
    /// the XXH3 64-bit hash of the id's UTF-8 bytes (seed 0), mapped onto
    /// `0..count` by multiply-and-shift (`hash * count >> 64`), which
    /// keeps every shard's share within 2^-32 of the others'.
    ///
    /// ```
    /// use troubadour_cluster::ShardCount;
    /// let shards = ShardCount::DEFAULT;
    /// let shard = shards.shard_of("0012.01214");
    /// assert!(shard.get() < 1024);
    /// assert_eq!(shard, shards.shard_of("0012.01214"), "the same on every call and node");
    /// ```
    pub fn shard_of(self, id: &str) -> ShardId {
        let hash = xxh3_64(id.as_bytes());
        ShardId(((u128::from(hash) * u128::from(self.0)) >> 64) as u32)
    }
}

impl Default for ShardCount {
    fn default() -> Self {
        ShardCount::DEFAULT
    }
}

impl fmt::Display for ShardCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} shards", self.0)
    }
}

/// One shard: a number below the cluster's [`ShardCount`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(u32);

impl ShardId {
    /// Shard number `n`. Whether it is below the cluster's count is the
    /// caller's to check (a store refuses one that is not).
    pub const fn new(n: u32) -> ShardId {
        ShardId(n)
    }

    /// The shard's number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping is protocol: these values must never change, or nodes
    /// of two builds would disagree on where an entity lives.
    #[test]
    fn the_mapping_is_fixed() {
        let shards = ShardCount::DEFAULT;
        let got: Vec<u32> = ["", "a", "user1", "0012.01214", "vehicle/42"]
            .iter()
            .map(|id| shards.shard_of(id).get())
            .collect();
        let expected: Vec<u32> = ["", "a", "user1", "0012.01214", "vehicle/42"]
            .iter()
            .map(|id| ((u128::from(xxh3_64(id.as_bytes())) * 1024) >> 64) as u32)
            .collect();
        assert_eq!(got, expected);
        // XXH3-64 of the empty input with seed 0 is published in the
        // specification's test vectors.
        assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
    }

    #[test]
    fn ids_spread_evenly_over_the_shards() {
        let shards = ShardCount::new(64).unwrap();
        let mut counts = [0u32; 64];
        for i in 0..64_000 {
            counts[shards.shard_of(&format!("vehicle-{i}")).get() as usize] += 1;
        }
        // 1,000 expected per shard; a fair hash stays well within ±20 %.
        assert!(
            counts.iter().all(|&c| (800..=1200).contains(&c)),
            "{counts:?}"
        );
    }
}
