//! troubadour across processes: an actor on another node is an ordinary
//! `ActorRef`, reached over mutual TLS.
//!
//! [`Remote`] puts a system on the network: it listens (and advertises the
//! address peers reach it at), exposes local actors by name, looks up other
//! nodes' actors, and hands out `ActorRef`s and `Recipient`s whose `tell`,
//! `ask`, `monitor` and `link` work unchanged; references inside messages
//! travel too. Guarantees (per sender-receiver order, asks that always end,
//! monitors and links that fire with `NoConnection` when a node is lost)
//! are those of `DISTRIBUTION.md`.
//!
//! By layer:
//!
//! * [`frame`]: the 32-byte frame header, the three lanes (control, user,
//!   large) and their caps, checked before a payload is kept; a decoder
//!   that never panics on any input.
//! * [`codec`]: payloads as serde types encoded with postcard, decoded
//!   under a nesting limit, and only for types registered under a stable
//!   name (an allow-list: [`RemoteMessage`], [`RemoteActor`]).
//! * [`handshake`], [`connection`]: mutual TLS with certificates from the
//!   cluster's CA (revocation lists when given; a node's name must be one
//!   its certificate carries), then the handshake; plaintext only on
//!   loopback (`docs/decisions/0018-remote-connection.md`).
//! * The connections themselves (private): coalesced writes from the
//!   sending actor's thread, heartbeats, reconnection with backoff, nodes
//!   declared down; control channels for extension crates
//!   ([`Remote::control_channel`]; the cluster's membership uses one).
//! * [`Remote::peers`]: each other node's connection state and the bytes
//!   and frames both ways, with [`RemoteStats`] for what was refused.
//!
//! Which errors close a connection and which only dead-letter one message
//! is decided in `docs/decisions/0017-remote-wire-format.md`: a
//! [`frame::FrameError`] closes it; a [`codec::MessageError`] concerns one
//! message.
//!
//! Features: `macros` (on by default: `#[derive(RemoteMessage)]`,
//! `#[derive(RemoteActor)]`); `dev-certs` (a CA made on the spot, for tests
//! and examples only); `simulation` (socketless remotes driven by the test
//! kit's simulated network); `opentelemetry` (a message sent inside a
//! traced span carries its trace context, so the span tree crosses nodes:
//! `docs/decisions/0027-trace-context.md`).
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
pub use connection::{ConfigError, Security, TlsConfig};
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
