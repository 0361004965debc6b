//! Derives for troubadour, used through the crates that re-export them:
//! `troubadour::Message` (the core's default feature `macros`), and
//! `troubadour_remote::{Message, RemoteMessage, RemoteActor}`. Each
//! derive has the name of the trait it implements, so one `use` brings
//! both, as with serde.
//!
//! ```text
//! #[derive(Message)]                                     // Reply = ()
//! #[message(reply = u64)]                                // Reply = u64
//! #[message(reply = u64, remote = "counter.Add")]        // and RemoteMessage
//! #[derive(RemoteMessage)] #[message(remote = "counter.Reset")]  // `remote` required
//! #[derive(RemoteActor)]
//! #[remote(name = "counter.Counter", handle(Add, Reset), handle_async(Sync))]
//! ```
//!
//! The examples, compiled as doctests, are on the re-exports. The derives
//! hide no control flow: each expands to one `impl` per trait, spelled
//! out in the documentation of the derive, and the `Actor` and `Handler`
//! impls stay yours.
//!
//! Errors in the attributes are compile errors on the key or value at
//! fault, saying what to write instead.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attr;
mod message;
mod remote_actor;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Implements `Message` (the reply type from `#[message(reply = T)]`, `()`
/// without it) and, with `#[message(remote = "stable.name")]`, also
/// `RemoteMessage` under that name.
///
/// Keys of `#[message(..)]`, each at most once (several `#[message]`
/// attributes are read as one):
///
/// * `reply = Type`: what an `ask` of this message returns. Default `()`.
/// * `remote = "stable.name"`: the name this message has on the wire;
///   also implements `RemoteMessage`, so the type must implement serde's
///   `Serialize` and `Deserialize` (derive them) and so must the reply.
///   The name must not be empty and must not start with
///   `troubadour.system.` (reserved for the runtime).
/// * `crate = path` (or `crate = "path"`): where the traits are found.
///   By default the expansion names `::troubadour::Message` for a local
///   message, and `::troubadour_remote::{Message, RemoteMessage}` for a
///   remote one (so a crate that depends only on `troubadour-remote`
///   needs no key for remote messages). Write `crate = troubadour_remote`
///   for a local message in such a crate, or the path of your own
///   re-export.
///
/// What it expands to, for `#[message(reply = u64, remote = "counter.Add")]
/// struct Add(u64);`:
///
/// ```text
/// impl ::troubadour_remote::Message for Add { type Reply = u64; }
/// impl ::troubadour_remote::RemoteMessage for Add { const NAME: &'static str = "counter.Add"; }
/// ```
///
/// Generic parameters and where-clauses are carried through. A generic
/// type gets the bounds the traits need as where-clauses on `Self` (`Self:
/// Send + 'static`, and serde's traits for a remote one) instead of bounds
/// on each parameter, so `Wrapper<T>` is a message for exactly the `T`s
/// that make it one. All instantiations of a generic remote message share
/// its one name: register only one of them on a node (a second is refused
/// with `RemoteError::NameClash`).
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    message::expand(&input, message::Derive::Message)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `#[derive(Message)]` for a message that must cross the network: the
/// same `#[message(..)]` keys, with `remote = "stable.name"` required.
/// Implements both `Message` and `RemoteMessage`; derive one of
/// `Message` and `RemoteMessage`, not both.
#[proc_macro_derive(RemoteMessage, attributes(message))]
pub fn derive_remote_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    message::expand(&input, message::Derive::RemoteMessage)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Implements `troubadour_remote::RemoteActor`: the actor type's stable
/// name and the remote messages it accepts. The `Actor` and `Handler`
/// impls stay yours.
///
/// Keys of `#[remote(..)]`:
///
/// * `name = "stable.Name"` (required): the name `Remote::lookup` checks.
///   Not empty, not starting with `troubadour.system.`.
/// * `handle(A, B, ..)`: remote messages handled by a `Handler`.
/// * `handle_async(C, ..)`: remote messages handled by an `AsyncHandler`.
///   Both lists may be given more than once; a type may appear once in
///   all of them together.
/// * `crate = path`: where `RemoteActor` and `Accepts` are found; default
///   `::troubadour_remote`.
///
/// What it expands to, for `#[remote(name = "counter.Counter", handle(Add),
/// handle_async(Sync))] struct Counter;`:
///
/// ```text
/// impl ::troubadour_remote::RemoteActor for Counter {
///     const NAME: &'static str = "counter.Counter";
///     fn accepts(accepts: &mut ::troubadour_remote::Accepts<Self>) {
///         accepts.handle::<Add>().handle_async::<Sync>();
///     }
/// }
/// ```
///
/// Generic parameters and where-clauses are carried through; a generic
/// actor gets `Self: Actor`, and `M: RemoteMessage` and `Self: Handles<M,
/// _>` per listed message `M`, as where-clauses, so it is a `RemoteActor`
/// for the parameters that make it one. All its instantiations share one
/// name.
#[proc_macro_derive(RemoteActor, attributes(remote))]
pub fn derive_remote_actor(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    remote_actor::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
