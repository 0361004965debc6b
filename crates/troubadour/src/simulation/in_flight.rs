//! Messages held between send and delivery: what a [`Divert`] receives.
//!
//! On a system with a divert (`divert.rs`; `hold_messages` installs the
//! built-in outbox), every actor carries the `HELD` bit, so `tell` and `ask`
//! take their rare path: the message node is built as usual but, instead of
//! entering the mailbox, it becomes an [`InFlight`] handed to the divert,
//! which later delivers it, injects a fault at its place, or loses it.
//!
//! Systems without one never see this module: the check is folded into the
//! `CLOSED` test `tell` already makes, so the common path has no extra
//! instruction.
//!
//! The network layer plugs in here too: a remote message will be an
//! `InFlight` whose target is a connection instead of a cell, and the
//! faults a network adds (drop, duplicate, partition) are decisions about
//! `InFlight`s. Duplicating needs the message's bytes, so it will exist only
//! for remote messages.
//!
//! [`Divert`]: crate::simulation::divert::Divert

use crate::api::actor::Actor;
use crate::api::exit::ActorId;
use crate::runtime::cell::ActorCell;
use crate::runtime::envelope::Envelope;
#[cfg(feature = "simulation")]
use crate::simulation::faults::{injected, InjectedFault};
use std::fmt;
use std::sync::Arc;

/// A message on its way to an actor, held by a system built with
/// `hold_messages` (with the `simulation` feature) until someone
/// delivers it. Dropping it undelivered counts it as a dead letter (nothing
/// is lost silently); [`lose`](Self::lose) is the deliberate exception.
///
/// A graceful stop's marker ([`ActorRef::stop_gracefully`]) is held too,
/// so that it arrives after what its sender sent before it; it is a
/// [control](Self::is_control) item, not a message, and no fault applies to
/// it: injecting a panic or a stop at it, losing it or dropping it delivers
/// it as is. (Losing it would leave an actor that refuses every message
/// and never stops.)
///
/// [`ActorRef::stop_gracefully`]: crate::ActorRef::stop_gracefully
///
/// ```
/// use troubadour::prelude::*;
/// struct Echo;
/// impl Actor for Echo {}
/// struct Ping;
/// impl Message for Ping { type Reply = (); }
/// impl Handler<Ping> for Echo { fn handle(&mut self, _: Ping, _: &mut Context<Self>) {} }
///
/// let system = ActorSystem::builder().manual_scheduling().hold_messages().build();
/// let echo = system.spawn(Echo)?;
/// echo.tell(Ping)?;
/// let held = system.take_in_flight();
/// assert_eq!(held.len(), 1);
/// assert_eq!(held[0].to(), echo.id());
/// assert!(held[0].message_type().ends_with("Ping"));
/// for m in held { m.deliver(); }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct InFlight {
    from: Option<ActorId>,
    to: ActorId,
    message: &'static str,
    ask: bool,
    control: bool,
    target: Box<dyn Deliver>,
}

/// How a held message reaches its actor.
pub(crate) enum Delivery {
    Normal,
    #[cfg(feature = "simulation")]
    Panic(String),
    #[cfg(feature = "simulation")]
    StopFirst,
}

/// The type-erased half of an [`InFlight`]: the cell and the node.
pub(crate) trait Deliver: Send {
    fn deliver(self: Box<Self>, how: Delivery);
    fn lose(self: Box<Self>);
}

impl InFlight {
    /// # Safety
    /// `env` is a live node built for `A`, owned by the caller, who gives it
    /// up here.
    pub(crate) unsafe fn new<A: Actor>(
        from: Option<ActorId>,
        cell: Arc<ActorCell<A>>,
        env: *mut Envelope<A>,
        message: &'static str,
        ask: bool,
    ) -> Self {
        let control = message == crate::runtime::graceful::MARKER_NAME;
        InFlight {
            from,
            to: cell.id,
            message,
            ask,
            control,
            target: Box::new(Held { cell, env, control }),
        }
    }

    /// `true` for the runtime's own control items (a graceful stop's
    /// marker), which faults leave alone: see the type's docs.
    pub fn is_control(&self) -> bool {
        self.control
    }

    /// The actor whose turn sent it, when the system is manually scheduled;
    /// `None` when it was sent from outside any actor (a test, a timer, a
    /// thread of the program).
    pub fn from(&self) -> Option<ActorId> {
        self.from
    }

    /// The receiver.
    pub fn to(&self) -> ActorId {
        self.to
    }

    /// The message's type name (`std::any::type_name`).
    pub fn message_type(&self) -> &'static str {
        self.message
    }

    /// `true` for an `ask` (someone awaits a reply).
    pub fn is_ask(&self) -> bool {
        self.ask
    }

    /// Puts the message in its actor's mailbox, as an ordinary send would
    /// have. To a stopped actor it becomes a dead letter.
    pub fn deliver(self) {
        self.target.deliver(Delivery::Normal);
    }

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    /// Delivers it so that the actor panics when it reaches this message,
    /// exactly as if the handler had panicked with `message`: the message is
    /// lost (an `ask` for it fails with `NoReply`), the actor fails with
    /// [`ExitReason::Panicked`](crate::ExitReason::Panicked), and its
    /// supervisor decides.
    pub fn deliver_with_panic(self, message: impl Into<String>) {
        if self.control {
            return self.deliver();
        }
        self.target.deliver(Delivery::Panic(message.into()));
    }

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    /// Delivers it behind a stop: the actor stops normally (its hooks run)
    /// when it reaches this point, so this message and any later one go to
    /// dead letters.
    pub fn deliver_after_stop(self) {
        if self.control {
            return self.deliver();
        }
        self.target.deliver(Delivery::StopFirst);
    }

    /// Drops it without delivering or counting it, as a lossy network
    /// would. An `ask` for it fails with `NoReply` at once; a simulation
    /// that wants the asker to time out instead keeps the `InFlight` alive.
    pub fn lose(self) {
        if self.control {
            return self.deliver();
        }
        self.target.lose();
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("message", &self.message)
            .field("ask", &self.ask)
            .field("control", &self.control)
            .finish()
    }
}

struct Held<A: Actor> {
    cell: Arc<ActorCell<A>>,
    /// Owned; null once delivered or lost.
    env: *mut Envelope<A>,
    /// A control item: dropping it undelivered delivers it.
    control: bool,
}

// SAFETY: the node holds a `Send` message and is owned by this value alone
// until it is pushed or freed.
unsafe impl<A: Actor> Send for Held<A> {}

impl<A: Actor> Deliver for Held<A> {
    fn deliver(mut self: Box<Self>, how: Delivery) {
        let env = std::mem::replace(&mut self.env, std::ptr::null_mut());
        // SAFETY: `env` is the live node this value owned (null only after
        // a delivery or loss, which consume the value), and fault nodes
        // take ownership of it; each is given up to the mailbox once.
        unsafe {
            match how {
                Delivery::Normal => self.cell.enqueue(env),
                #[cfg(feature = "simulation")]
                Delivery::Panic(message) => {
                    self.cell
                        .enqueue(injected(InjectedFault::Panic(message), env));
                }
                // One node either way, so a bounded mailbox's permit (taken
                // at the send) is returned exactly once, when it is taken out.
                #[cfg(feature = "simulation")]
                Delivery::StopFirst => self.cell.enqueue(injected(InjectedFault::Stop, env)),
            }
        }
    }

    fn lose(mut self: Box<Self>) {
        let env = std::mem::replace(&mut self.env, std::ptr::null_mut());
        // SAFETY: we own the node (never pushed).
        unsafe { Envelope::discard(env) };
        self.return_permit();
    }
}

impl<A: Actor> Held<A> {
    /// A bounded mailbox's room was taken at the send; give it back for a
    /// message that will never enter the mailbox.
    fn return_permit(&self) {
        if let Some(bound) = self.cell.config.as_ref().and_then(|c| c.bound.as_ref()) {
            bound.free();
        }
    }
}

impl<A: Actor> Drop for Held<A> {
    fn drop(&mut self) {
        if self.control && !self.env.is_null() {
            let env = std::mem::replace(&mut self.env, std::ptr::null_mut());
            // SAFETY: the live node this value owned (not null, checked
            // above), given up to the mailbox once.
            unsafe { self.cell.enqueue(env) };
            return;
        }
        if !self.env.is_null() {
            // SAFETY: as in `lose`.
            let name = unsafe { Envelope::discard(self.env) };
            self.cell.system.dead_letters.record(
                self.cell.id,
                name,
                crate::runtime::dead_letters::DeadLetterReason::Lost,
            );
            self.return_permit();
        }
    }
}
