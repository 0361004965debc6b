//! Identity and exit reasons, and the messages that carry them to monitors
//! and to actors that trap exits.

use crate::api::node_id::{NodeId, MAX_SERIAL, SERIAL_BITS};
use std::fmt;
use std::sync::Arc;

/// An actor's identity: the node (system start) it lives on and its serial
/// number there. Unique in the process, across every system it runs: ids of
/// two systems never compare equal, even when both systems have the same
/// name. Within one system, ids grow with spawn order, which is the order
/// rest-for-one supervision uses; ids of different systems order by the
/// systems' start order.
///
/// `Copy` and one word: the node is an index into a process-wide table of
/// [`NodeId`]s (see [`node`](Self::node)).
///
/// Displayed as `<name.serial>`, e.g. `<orders.42>`, like Erlang's
/// `<node.serial.0>`: readable, and the same on every replay of a
/// simulation. Two systems given the same name print their actors alike;
/// give systems in one process distinct names to tell them apart in logs
/// (their ids still differ).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub(crate) u64);

impl ActorId {
    /// The id as one number, unique in the process: the node's index in the
    /// process-wide table in the high bits, the serial in the low ones.
    /// Meaningless in another process; use [`node`](Self::node) and
    /// [`serial`](Self::serial) to name an actor elsewhere.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The actor's number within its system: 1 for the first actor spawned,
    /// growing with spawn order.
    pub fn serial(self) -> u64 {
        self.0 & MAX_SERIAL
    }

    /// The node (system start) the actor belongs to.
    pub fn node(self) -> NodeId {
        NodeId::at((self.0 >> SERIAL_BITS) as u32)
    }

    /// The id of actor `serial` of `node`: how the remote layer names an
    /// actor of another process once it has entered the node with
    /// [`NodeId::remote`]. `None` for a serial no system hands out (0, or
    /// more than 44 bits), which only a hostile or broken peer sends.
    pub fn on(node: &NodeId, serial: u64) -> Option<ActorId> {
        if serial == 0 || serial > MAX_SERIAL {
            return None;
        }
        Some(ActorId(((node.index() as u64) << SERIAL_BITS) | serial))
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}.{}>", self.node().name(), self.serial())
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why an actor stopped, as in Erlang.
///
/// `#[non_exhaustive]`: later versions (the network layer first, with
/// reasons like a lost connection) will add reasons, so a `match` outside
/// this crate needs a `_` arm.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The actor was already gone when it was linked (Erlang's `noproc`).
    /// A monitor or `wait_stopped` of a stopped actor gets the reason it
    /// stopped for instead: that is remembered.
    NoProc,
    /// The connection to the actor's node was lost, or the node was
    /// declared down, so nothing more will be heard from it (Erlang's
    /// `noconnection`). The actor itself may still be running there. Like
    /// any abnormal reason it propagates along links.
    NoConnection,
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
            ExitReason::NoConnection => write!(
                f,
                "noconnection (the connection to the actor's node was lost)"
            ),
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

/// An exit signal from a linked actor, delivered as a message to an actor
/// that traps exits (see [`Context::trap_exits`](crate::Context::trap_exits)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    /// The linked actor that stopped.
    pub id: ActorId,
    /// Why it stopped.
    pub reason: ExitReason,
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
