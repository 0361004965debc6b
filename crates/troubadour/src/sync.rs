//! Atomics used by the lock-free parts, swapped for loom's under `--cfg loom`
//! so the model checker explores the real code rather than a copy of it.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
