//! Identity and exit reasons, and the messages that carry them to monitors
//! and to actors that trap exits.

use crate::actor::Message;
use std::fmt;
use std::sync::Arc;

/// A process-unique actor identity. Ids grow with spawn order, which is the
/// order rest-for-one supervision uses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub(crate) u64);

impl ActorId {
    /// The number behind the id.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}>", self.0)
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why an actor stopped, as in Erlang.
#[derive(Clone, PartialEq, Eq)]
pub enum ExitReason {
    /// It stopped itself (`ctx.stop()`) or was stopped (`actor.stop()`).
    Normal,
    /// Stopped by its parent or by the system shutting down.
    Shutdown,
    /// Killed (`actor.kill()`): cannot be trapped.
    Killed,
    /// A handler or hook panicked; the panic message.
    Panicked(Arc<str>),
    /// The actor failed itself with `ctx.fail(..)`.
    Failed(Arc<str>),
    /// A supervisor gave up: its children failed more often than its
    /// intensity allows. Carries the last child's reason.
    RestartLimit(Arc<ExitReason>),
    /// The actor was already gone when it was monitored or linked.
    NoProc,
}

impl ExitReason {
    /// `Normal` and `Shutdown` are the reasons a transient child is not
    /// restarted for, and the only ones a link does not propagate as a
    /// failure (Erlang: `normal`, `shutdown`).
    pub fn is_normal(&self) -> bool {
        matches!(self, ExitReason::Normal | ExitReason::Shutdown)
    }
}

impl fmt::Debug for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitReason::Normal => write!(f, "normal"),
            ExitReason::Shutdown => write!(f, "shutdown"),
            ExitReason::Killed => write!(f, "killed"),
            ExitReason::Panicked(m) => write!(f, "panicked: {m}"),
            ExitReason::Failed(m) => write!(f, "failed: {m}"),
            ExitReason::RestartLimit(r) => {
                write!(f, "restart intensity exceeded (last child exit: {r})")
            }
            ExitReason::NoProc => write!(f, "noproc (the actor was not running)"),
        }
    }
}

/// Sent to a monitoring actor when the monitored one stops
/// (see [`Context::monitor`](crate::Context::monitor)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    /// The actor that stopped.
    pub id: ActorId,
    /// Why it stopped.
    pub reason: ExitReason,
}

impl Message for Down {
    type Reply = ();
}

/// An exit signal from a linked actor, delivered as a message to an actor
/// that traps exits (see [`Context::trap_exits`](crate::Context::trap_exits)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    /// The linked actor that stopped.
    pub id: ActorId,
    /// Why it stopped.
    pub reason: ExitReason,
}

impl Message for Exited {
    type Reply = ();
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> Arc<str> {
    if let Some(s) = payload.downcast_ref::<&str>() {
        Arc::from(*s)
    } else if let Some(s) = payload.downcast_ref::<String>() {
        Arc::from(s.as_str())
    } else {
        Arc::from("non-string panic payload")
    }
}
