//! # troubadour
//!
//! An actor runtime: isolated units of state that talk only by messages,
//! cheap enough to have millions of, that fail alone and are restarted by
//! their supervisors.
//!
//! ```
//! use troubadour::prelude::*;
//! use std::time::Duration;
//!
//! struct Counter { total: u64 }
//! impl Actor for Counter {}
//!
//! struct Add(u64);
//! struct GetAndReset;
//! impl Message for Add { type Reply = (); }
//! impl Message for GetAndReset { type Reply = u64; }
//!
//! impl Handler<Add> for Counter {
//!     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) { self.total += n; }
//! }
//! impl Handler<GetAndReset> for Counter {
//!     fn handle(&mut self, _: GetAndReset, _: &mut Context<Self>) -> u64 {
//!         std::mem::take(&mut self.total)
//!     }
//! }
//!
//! let system = ActorSystem::new();
//! let counter = system.spawn(Counter { total: 0 })?;
//! counter.tell(Add(100))?;
//! let total = counter.ask(GetAndReset).timeout(Duration::from_secs(1)).wait()?;
//! assert_eq!(total, 100);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! In async code, `.await` the [`Ask`] instead of calling `wait`.
//!
//! ## What you can rely on
//!
//! * One message at a time per actor; its state is never touched
//!   concurrently, also across `.await`s in an [`AsyncHandler`].
//! * Messages from one sender to one receiver arrive in the order sent.
//! * At most once delivery. A message to a stopped actor goes to dead letters
//!   ([`SystemHandle::dead_letter_count`],
//!   [`SystemHandle::subscribe_dead_letters`]); `tell` returns it in
//!   [`SendError::Stopped`].
//! * [`ActorRef::ask`] always ends: with the reply, a timeout, or
//!   [`AskError::NoReply`] as soon as the actor stops or fails.
//! * A panic fails only its actor; its supervisor restarts it or escalates
//!   ([`supervision`]).
//! * Control signals (stop, kill, untrapped exit signals, supervision)
//!   overtake queued user messages; [`ActorRef::stop_gracefully`] handles
//!   what is queued first. What a monitor or a trapped link delivers as a
//!   message ([`Down`], [`Exited`]) keeps per-pair order: it comes after the
//!   messages the stopped actor sent before it stopped, and a bounded
//!   mailbox never refuses it.
//!
//! ## Map
//!
//! [`Actor`], [`Message`], [`Handler`], [`AsyncHandler`] are what you
//! implement; [`ActorSystem`] and [`SystemHandle`] spawn and look up;
//! [`ActorRef`] and [`Recipient`] send; [`Context`] is what a handler can do
//! (spawn children, stop, link, monitor, timers, stash); [`LocalActor`]
//! drives an actor by direct calls. A closure with its state is an actor
//! too ([`SystemHandle::spawn_fn`], [`FnActor`]), and code that is not an
//! actor gets an address with an [`Inbox`].
#![warn(missing_docs)]
// The unsafe kernel's discipline: an `unsafe fn`'s body is not one big
// unsafe block, and every unsafe block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
// The loom build exposes internals to the models in tests/.
#![cfg_attr(loom, allow(missing_docs))]

// Layers, imports running downwards: what users hold and implement
// (`api`), the runtime behind it, the lock-free primitives it builds on,
// and the divert seam for simulations and the network. See ARCHITECTURE.md.
mod api;
mod primitives;
mod runtime;
mod simulation;

pub use api::supervision;
pub use runtime::remote;
pub use simulation::divert;

pub use api::actor::{Actor, AsyncHandler, Handler, Message};
pub use api::actor_ref::{ActorRef, Ask, Recipient};
pub use api::context::{Context, DeferredReply};
pub use api::direct::LocalActor;
pub use api::entity_id::EntityId;
pub use api::error::{
    AskError, BuildError, RecvError, RegistryError, SendError, ShutdownError, SpawnError,
    TerminateError, TimeError,
};
pub use api::exit::{ActorId, Down, ExitReason, Exited};
pub use api::fn_actor::FnActor;
pub use api::handle_here::handle_here;
pub use api::inbox::{Inbox, Received, Recv, RecvTimeout, Responder};
pub use api::node_id::NodeId;
pub use api::supervision::{Restart, Strategy, SupervisorStrategy};
pub use runtime::crash_report::CrashReports;
pub use runtime::dead_letters::{DeadLetter, DeadLetterReason};
pub use runtime::deadline::Deadline;
#[doc(hidden)]
pub use runtime::envelope::{Answered, Envelope, EnvelopeVTable, HandleNow};
pub use runtime::envelope::{Awaiting, Handles, Immediate};
pub use runtime::observation::{
    ActorDetails, ActorSample, DeadLetterCounts, KindMetrics, RuntimeMetrics, WorkerMetrics,
    DEPTH_CAP,
};
pub use runtime::scheduler::TurnRun;
pub use runtime::spawn::{Mailbox, SpawnOptions};
pub use runtime::system::{ActorSystem, ActorSystemBuilder, SystemHandle};
pub use runtime::timer::{Sleep, TimerRef};
pub use simulation::in_flight::InFlight;
/// `#[derive(Message)]`: the [`Message`](trait@Message) trait in one line,
/// with the reply type in `#[message(reply = T)]` (`()` without it). The
/// derive and the trait share the name, so one `use` brings both.
///
/// ```
/// use troubadour::prelude::*;
/// use std::time::Duration;
///
/// #[derive(Message)]
/// struct Add(u64);                      // Reply = ()
///
/// #[derive(Message)]
/// #[message(reply = u64)]
/// struct GetAndReset;
///
/// struct Counter { total: u64 }
/// impl Actor for Counter {}
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) { self.total += n; }
/// }
/// impl Handler<GetAndReset> for Counter {
///     fn handle(&mut self, _: GetAndReset, _: &mut Context<Self>) -> u64 {
///         std::mem::take(&mut self.total)
///     }
/// }
///
/// let system = ActorSystem::new();
/// let counter = system.spawn(Counter { total: 0 })?;
/// counter.tell(Add(2))?;
/// assert_eq!(counter.ask(GetAndReset).timeout(Duration::from_secs(1)).wait()?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Generic messages keep their parameters and where-clauses; the derive
/// asks for `Self: Send + 'static` instead of bounds on each parameter:
///
/// ```
/// use troubadour::Message;
///
/// #[derive(Message)]
/// #[message(reply = Option<T>)]
/// struct Take<T>(std::marker::PhantomData<T>);
///
/// fn reply_of<M: Message>() -> &'static str { std::any::type_name::<M::Reply>() }
/// assert_eq!(reply_of::<Take<u8>>(), "core::option::Option<u8>");
/// ```
///
/// A message for other nodes is derived the same way with
/// `#[message(remote = "stable.name")]`, through `troubadour_remote`
/// (see `troubadour_remote::RemoteMessage`). Turn the default feature
/// `macros` off to build the core without the derive (and without syn).
#[cfg(feature = "macros")]
pub use troubadour_macros::Message;

/// Everything a typical actor program uses.
pub mod prelude {
    pub use crate::{
        Actor, ActorId, ActorRef, ActorSystem, AskError, AsyncHandler, Context, Down, ExitReason,
        Exited, FnActor, Handler, Inbox, LocalActor, Mailbox, Message, Recipient, RecvError,
        Restart, SendError, SpawnOptions, Strategy, SupervisorStrategy, SystemHandle,
    };
}

/// The README's code, compiled and run as a doctest so that what a new
/// user pastes works.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;

#[cfg(loom)]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod loom_support {
    //! The lock-free structures, exposed for the loom models in `tests/`.
    pub use crate::primitives::mailbox::{Link, Pop, Queue, Release, RunCount, SignalStack};
    pub use crate::primitives::nodes::SlabCount;
    pub use crate::runtime::scheduler::{
        next_slot_become_thief, next_slot_stop_thieving, Idle, NextSlot,
    };
}
