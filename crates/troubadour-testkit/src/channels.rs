//! The messages a simulation holds in flight: one FIFO channel per
//! (sender, receiver) pair, because per-pair order is what the runtime
//! guarantees, so only a channel's head may be delivered next.
//!
//! Picking "the n-th deliverable head" happens once per simulated step, so
//! it must not scan every channel: the non-empty channels sit in a vector
//! (each knows its slot, so emptying one is a `swap_remove`), and only
//! while some head is delayed does a pick filter that vector. Every
//! operation depends only on the sequence of calls, never on hashing or
//! addresses, so a seed's choices mean the same thing on every run.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;
use troubadour::{ActorId, InFlight};

/// A channel's name: who sent (`None`: the test or a timer) to whom.
pub(crate) type Pair = (Option<ActorId>, ActorId);

/// A message in flight.
pub(crate) struct Pending {
    /// Its number in the trace.
    pub(crate) number: u64,
    pub(crate) message: InFlight,
    /// Not deliverable before this instant (a delay fault).
    pub(crate) not_before: Option<Instant>,
}

struct Channel {
    queue: VecDeque<Pending>,
    /// Its index in `Channels::open`.
    slot: usize,
}

#[derive(Default)]
pub(crate) struct Channels {
    by_pair: BTreeMap<Pair, Channel>,
    /// The non-empty channels, in an order that only the calls decide.
    open: Vec<Pair>,
    /// How many heads carry a `not_before`.
    delayed_heads: usize,
    len: usize,
}

impl Channels {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, pair: Pair, pending: Pending) {
        let open = &mut self.open;
        let channel = self.by_pair.entry(pair).or_insert_with(|| {
            open.push(pair);
            Channel {
                queue: VecDeque::new(),
                slot: open.len() - 1,
            }
        });
        channel.queue.push_back(pending);
        self.len += 1;
    }

    fn is_deliverable(&self, pair: &Pair, now: Instant) -> bool {
        self.by_pair
            .get(pair)
            .and_then(|c| c.queue.front())
            .is_some_and(|p| p.not_before.is_none_or(|t| t <= now))
    }

    /// The channels whose head may be delivered at `now`, as a count and a
    /// way to name the i-th of them.
    pub(crate) fn deliverable(&self, now: Instant) -> Deliverable {
        if self.delayed_heads == 0 {
            Deliverable::All(self.open.len())
        } else {
            Deliverable::Some(
                self.open
                    .iter()
                    .filter(|p| self.is_deliverable(p, now))
                    .copied()
                    .collect(),
            )
        }
    }

    pub(crate) fn nth(&self, which: &Deliverable, i: usize) -> Option<Pair> {
        match which {
            Deliverable::All(_) => self.open.get(i).copied(),
            Deliverable::Some(pairs) => pairs.get(i).copied(),
        }
    }

    pub(crate) fn head(&self, pair: &Pair) -> Option<&Pending> {
        self.by_pair.get(pair).and_then(|c| c.queue.front())
    }

    /// Holds the head of `pair` back until `until`.
    pub(crate) fn delay_head(&mut self, pair: &Pair, until: Instant) {
        if let Some(head) = self.by_pair.get_mut(pair).and_then(|c| c.queue.front_mut()) {
            if head.not_before.replace(until).is_none() {
                self.delayed_heads += 1;
            }
        }
    }

    pub(crate) fn pop(&mut self, pair: &Pair) -> Option<Pending> {
        let channel = self.by_pair.get_mut(pair)?;
        let pending = channel.queue.pop_front()?;
        self.len -= 1;
        if pending.not_before.is_some() {
            self.delayed_heads -= 1;
        }
        // A message behind a delayed one was never delayed itself.
        if channel.queue.is_empty() {
            let slot = channel.slot;
            self.by_pair.remove(pair);
            self.open.swap_remove(slot);
            if let Some(moved) = self.open.get(slot) {
                if let Some(c) = self.by_pair.get_mut(moved) {
                    c.slot = slot;
                }
            }
        }
        Some(pending)
    }

    /// When the earliest delayed head becomes deliverable.
    pub(crate) fn next_delayed_at(&self) -> Option<Instant> {
        if self.delayed_heads == 0 {
            return None;
        }
        self.open
            .iter()
            .filter_map(|p| self.head(p).and_then(|h| h.not_before))
            .min()
    }
}

/// The deliverable channels at one instant.
pub(crate) enum Deliverable {
    /// All open channels (no head is delayed): their number.
    All(usize),
    /// Only these.
    Some(Vec<Pair>),
}

impl Deliverable {
    pub(crate) fn len(&self) -> usize {
        match self {
            Deliverable::All(n) => *n,
            Deliverable::Some(pairs) => pairs.len(),
        }
    }
}
