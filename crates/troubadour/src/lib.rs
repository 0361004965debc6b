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
//! * Control signals (stop, kill, exit signals, supervision) overtake queued
//!   user messages; [`ActorRef::stop_gracefully`] handles what is queued
//!   first.
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
// The loom build exposes internals to the models in tests/.
#![cfg_attr(loom, allow(missing_docs))]

mod actor;
mod actor_ref;
mod blocking;
mod cell;
mod context;
mod crash_report;
mod dead_letters;
mod direct;
mod envelope;
mod error;
mod exit;
mod fn_actor;
mod graceful;
mod in_flight;
mod inbox;
mod mailbox;
mod node_id;
mod nodes;
mod registry;
mod run_state;
mod scheduler;
mod signal;
mod spawn;
pub mod supervision;
mod sync;
mod system;
mod timer;

pub use actor::{Actor, AsyncHandler, Handler, Message};
pub use actor_ref::{ActorRef, Ask, Recipient};
pub use context::Context;
pub use crash_report::CrashReports;
pub use dead_letters::DeadLetter;
pub use direct::LocalActor;
pub use envelope::{Awaiting, Handles, Immediate};
#[doc(hidden)]
pub use envelope::{Envelope, EnvelopeVTable};
pub use error::{
    AskError, BuildError, RecvError, RegistryError, SendError, ShutdownError, SpawnError, TimeError,
};
pub use exit::{ActorId, Down, ExitReason, Exited};
pub use fn_actor::FnActor;
pub use in_flight::InFlight;
pub use inbox::{Inbox, Received, Recv, RecvTimeout, Responder};
pub use node_id::NodeId;
pub use scheduler::TurnRun;
pub use spawn::{Mailbox, SpawnOptions};
pub use supervision::{Restart, Strategy, SupervisorStrategy};
pub use system::{ActorSystem, ActorSystemBuilder, SystemHandle};
pub use timer::{Sleep, TimerRef};

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
    pub use crate::mailbox::{Link, Pop, Queue, SignalStack};
    pub use crate::nodes::SlabCount;
    pub use crate::run_state::{Notify, RunState, CLOSED, SCHEDULED};
    pub use crate::scheduler::{Idle, NextSlot};
}
