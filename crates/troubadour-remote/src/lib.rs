//! troubadour across processes: the wire format.
//!
//! What exists today is what a connection reads and writes, with no
//! sockets under it:
//!
//! * [`frame`]: the 32-byte frame header, the three lanes (control, user,
//!   large) and their caps, an encoder writing frames straight into a
//!   `Vec<u8>` or `BytesMut`, and an incremental decoder that takes bytes in
//!   pieces of any size, checks a frame's length against its lane's cap
//!   before keeping its payload, and never panics on any input.
//! * [`codec`]: payloads as serde types encoded with postcard, decoded
//!   under a nesting limit, and only for types registered under a stable
//!   name (an allow-list).
//! * [`handshake`]: the handshake frame's content (cluster name, protocol
//!   version, node name, incarnation).
//! * [`connection`]: establishing a connection over tokio TCP with rustls
//!   mutual TLS (certificates from the cluster's CA, both sides), then the
//!   handshake exchange, refusing another CA, no certificate, another
//!   cluster, another protocol version or an incarnation declared down,
//!   all within a timeout; plaintext only on loopback
//!   (`docs/decisions/0018-remote-connection.md`).
//!
//! Which errors close a connection and which only dead-letter one message
//! is decided in `docs/decisions/0017-remote-wire-format.md`: a
//! [`frame::FrameError`] closes it; a [`codec::MessageError`] concerns one
//! message.
//!
//! Next, in this crate (issue 14): message lanes on an established
//! connection (control before user, frames coalesced per write, a bounded
//! outbound queue per peer), heartbeats, reconnect with backoff, remote
//! `ActorRef`s and references inside messages, and remote links and
//! monitors over the control lane.
//!
//! Unlike Erlang's distribution, which trusts the peer once the cookie
//! matched and decodes any term it sends, this layer decodes only
//! registered types and caps every length and every nesting depth.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod arrivals;
mod channel;
pub mod codec;
pub mod connection;
#[cfg(feature = "dev-certs")]
pub mod dev_certs;
pub mod frame;
pub mod handshake;
mod inline_task;
mod link;
mod messages;
mod node;
mod peer;
mod peers;
#[cfg(feature = "simulation")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
pub mod sim;
mod trace_context;
mod wire;

pub use channel::{ChannelError, ControlChannel};
pub use connection::{Security, TlsConfig};
pub use messages::{Accepts, RemoteActor, RemoteMessage};
/// The core's [`Message`](trait@Message) trait, and with the feature
/// `macros` (on by default) its derive, so that a crate that uses only
/// this one needs no `troubadour` line for its messages.
pub use troubadour::Message;
/// `#[derive(RemoteActor)]`: an actor type's stable name and the remote
/// messages it accepts, in one attribute. The `Actor` and `Handler` impls
/// stay yours.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour::prelude::*;
/// use troubadour_remote::{RemoteActor, RemoteMessage};
///
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(reply = u64, remote = "counter.Add")]
/// struct Add(u64);
///
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(remote = "counter.Reset")]
/// struct Reset;
///
/// #[derive(RemoteActor)]
/// #[remote(name = "counter.Counter", handle(Add), handle_async(Reset))]
/// struct Counter(u64);
/// impl Actor for Counter {}
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
/// }
/// impl AsyncHandler<Reset> for Counter {
///     async fn handle(&mut self, _: Reset, _: &mut Context<Self>) { self.0 = 0; }
/// }
///
/// assert_eq!(<Counter as troubadour_remote::RemoteActor>::NAME, "counter.Counter");
/// ```
#[cfg(feature = "macros")]
pub use troubadour_macros::RemoteActor;
/// `#[derive(RemoteMessage)]`: a message for other nodes in one line,
/// `#[message(reply = T, remote = "stable.name")]`. It implements both
/// [`Message`](trait@Message) and [`RemoteMessage`](trait@RemoteMessage);
/// `#[derive(Message)]` with the same attribute does the same.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour_remote::RemoteMessage;
///
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(reply = u64, remote = "counter.Add")]
/// struct Add(u64);
///
/// assert_eq!(<Add as troubadour_remote::RemoteMessage>::NAME, "counter.Add");
/// ```
///
/// The name, not the Rust path, identifies the type on the wire: keep it
/// when the type is renamed or moved. An empty name, or one in the
/// runtime's namespace, does not compile:
///
/// ```compile_fail
/// # use serde::{Deserialize, Serialize};
/// # use troubadour_remote::RemoteMessage;
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(remote = "troubadour.system.Ping")]
/// struct Ping;
/// ```
#[cfg(feature = "macros")]
pub use troubadour_macros::RemoteMessage;

/// What the derives' expansions name; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use serde::de::DeserializeOwned;
    pub use serde::Serialize;
    pub use troubadour::{Actor, Awaiting, Handles, Immediate};
}
pub use node::{LookupError, NodeLookup, Remote, RemoteBuilder, RemoteError, RemoteStats};
pub use peers::{PeerState, PeerStatus, RemoteView};
