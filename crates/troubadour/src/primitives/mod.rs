//! Lock-free building blocks, each with its invariants and proof sketch
//! next to the code and a loom model in `tests/loom_mailbox.rs`: the
//! mailbox queue and signal stack, slabs of message nodes, an actor's run
//! state (who may run it), a barrier on every thread of the process for
//! the workers' sleep handshake, and the facade that swaps `std` atomics for
//! loom's. They know nothing of actors.

pub(crate) mod mailbox;
pub(crate) mod nodes;
pub(crate) mod process_barrier;
pub(crate) mod run_state;
#[cfg(all(unix, not(miri), not(loom)))]
mod slab_source;
pub(crate) mod sync;
