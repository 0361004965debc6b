//! What travels on an established connection besides user messages: the
//! control messages (lookups, link and monitor requests, stops), the
//! ordered system frames (a remote actor's `Down` and link exits), and the
//! codes of a reply frame.
//!
//! Requests travel on the control lane, so they never wait behind user
//! messages. Notifications that an actor ended (`Down`, a link's exit)
//! travel on the user lane, in order with the messages: DESIGN.md promises
//! that a `Down` comes after every message the stopped actor sent before
//! it stopped, and a lane of their own would let them overtake.

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use troubadour::ExitReason;

use crate::codec::type_id;

/// The control frame's `code` for a [`Control`] payload (the handshake
/// uses 1 and 2).
pub(crate) const CONTROL: u64 = 16;

/// The type id of the ordered system frame that carries a `Down`:
/// `receiver` is the watch's number, the payload a [`DownFrame`].
pub(crate) const SYSTEM_DOWN: u64 = type_id("troubadour.system.Down");
/// The type id of the ordered system frame that carries a link's exit:
/// `receiver` is the local actor, the payload an [`ExitFrame`].
pub(crate) const SYSTEM_EXIT: u64 = type_id("troubadour.system.Exit");

/// Names the remote layer keeps for itself.
pub(crate) fn is_reserved(name: &str) -> bool {
    name.starts_with("troubadour.system.")
}

/// A control-lane message. Actor numbers are serials: a `from` or
/// `watch` of the sending node, a `to` or `target` of the receiving one.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Control {
    /// Which actor is exposed under `name`, and is it an `actor_type`?
    Lookup {
        request: u64,
        name: String,
        actor_type: String,
    },
    /// Answer to a lookup.
    Found { request: u64, serial: u64 },
    /// Answer to a lookup: nothing by that name, or of another type.
    NotFound { request: u64, reason: String },
    /// `from` links to `to`.
    Link { from: u64, to: u64 },
    /// `from` removes its link to `to`.
    Unlink { from: u64, to: u64 },
    /// Watch number `watch` of the sender monitors `target`.
    Monitor { watch: u64, target: u64 },
    /// Watch `watch` ends.
    Demonitor { watch: u64, target: u64 },
    /// `ActorRef::stop`.
    RequestStop { to: u64 },
    /// A stop for good with a reason.
    Stop { to: u64, reason: WireReason },
    /// `ActorRef::kill`.
    Kill { to: u64 },
    /// `ActorRef::stop_gracefully`.
    StopGracefully { to: u64 },
    /// Sent when a connection has been idle for a heartbeat interval.
    Heartbeat,
    /// First on every connection: where the sender listens, so that the
    /// other side can reconnect to it.
    Hello { listen: Option<String> },
    /// Bytes for the control channel whose name has id `channel`
    /// (`channel.rs`).
    Extension { channel: u64, payload: Vec<u8> },
}

/// A `Down` on the wire: `target` (an actor of the sending node) ended.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DownFrame {
    pub target: u64,
    pub reason: WireReason,
}

/// A link's exit on the wire: `from` (an actor of the sending node) ended.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ExitFrame {
    pub from: u64,
    pub reason: WireReason,
}

/// An [`ExitReason`] on the wire. A reason this version does not know
/// travels as its text.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireReason {
    Normal,
    Shutdown,
    Killed,
    Panicked(String),
    Failed(String),
    RestartLimit(Box<WireReason>),
    NoProc,
    NoConnection,
    Other(String),
}

impl From<&ExitReason> for WireReason {
    fn from(r: &ExitReason) -> Self {
        match r {
            ExitReason::Normal => WireReason::Normal,
            ExitReason::Shutdown => WireReason::Shutdown,
            ExitReason::Killed => WireReason::Killed,
            ExitReason::Panicked(m) => WireReason::Panicked(m.to_string()),
            ExitReason::Failed(m) => WireReason::Failed(m.to_string()),
            ExitReason::RestartLimit(r) => WireReason::RestartLimit(Box::new((&**r).into())),
            ExitReason::NoProc => WireReason::NoProc,
            ExitReason::NoConnection => WireReason::NoConnection,
            other => WireReason::Other(other.to_string()),
        }
    }
}

impl From<WireReason> for ExitReason {
    fn from(r: WireReason) -> Self {
        match r {
            WireReason::Normal => ExitReason::Normal,
            WireReason::Shutdown => ExitReason::Shutdown,
            WireReason::Killed => ExitReason::Killed,
            WireReason::Panicked(m) => ExitReason::Panicked(Arc::from(m)),
            WireReason::Failed(m) | WireReason::Other(m) => ExitReason::Failed(Arc::from(m)),
            WireReason::RestartLimit(r) => ExitReason::RestartLimit(Arc::new((*r).into())),
            WireReason::NoProc => ExitReason::NoProc,
            WireReason::NoConnection => ExitReason::NoConnection,
        }
    }
}

/// A reply frame's `code`: the reply, or why there is none.
pub(crate) mod reply {
    /// The payload is the reply.
    pub const OK: u64 = 0;
    /// No such actor here, or it had stopped.
    pub const STOPPED: u64 = 1;
    /// The actor stopped, restarted or panicked before replying.
    pub const NO_REPLY: u64 = 2;
    /// The actor did not reply within this node's limit for remote asks.
    pub const TIMEOUT: u64 = 3;
    /// Refused (unknown type, undecodable); the payload is the reason.
    pub const REFUSED: u64 = 4;
    /// The actor's bounded mailbox was full.
    pub const FULL: u64 = 5;
    /// The reply could not be encoded; the payload is the reason.
    pub const UNENCODABLE: u64 = 6;
}
