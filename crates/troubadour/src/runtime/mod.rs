//! The runtime behind the API: actor cells and their lifecycle, the
//! system (guardian, builder, shutdown), spawning, the scheduler, timers
//! and the tokio runtime, control signals, message nodes, bounded-mailbox
//! room, names and dead letters, deadlines that stop actors
//! (`deadline`), values extension crates attach to a system (`extensions`), what observers see (`observation`), crash
//! reports, and the seam through which
//! a proxy's sends reach the remote layer (`remote`).
//!
//! It builds on the lock-free primitives (`crate::primitives`) and hands
//! sends to the divert seam (`crate::simulation`) when one is installed.

pub(crate) mod blocking;
pub(crate) mod busy_poll;
pub(crate) mod cell;
pub(crate) mod crash_report;
pub(crate) mod dead_letters;
pub(crate) mod deadline;
pub(crate) mod envelope;
pub(crate) mod extensions;
pub(crate) mod graceful;
pub(crate) mod mailbox_bound;
pub(crate) mod observation;
pub(crate) mod registry;
pub mod remote;
pub(crate) mod scheduler;
pub(crate) mod signal;
pub(crate) mod spawn;
pub(crate) mod system;
pub(crate) mod timer;
pub(crate) mod tokio_runtime;
