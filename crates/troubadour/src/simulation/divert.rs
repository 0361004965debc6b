//! The seam between a sender and an actor's mailbox, for extension crates.
//!
//! A system built with a [`Divert`] (see
//! [`ActorSystemBuilder::divert`](crate::ActorSystemBuilder::divert)) hands
//! every `tell`, `ask` and graceful stop to it as an [`InFlight`] instead of
//! putting it in the mailbox. The divert owns the message from then on and
//! decides what becomes of it: deliver it now or later, in an order of its
//! choosing, inject a fault at its place, or lose it. The test kit's
//! simulated network is one divert ([`Outbox`], behind
//! `hold_messages` (with the `simulation` feature)); the remote
//! layer is the next.
//!
//! What it costs: nothing on a system without one. Every actor of a system
//! with a divert carries the `HELD` bit of its run state, which `tell`
//! already tests together with `CLOSED` (one load, one branch); only then
//! does a send take the rare path that builds an `InFlight`.
//!
//! What stays direct: control signals (stop, kill, links, monitors,
//! supervision) and the system messages they produce (`Down`, a trapped
//! `Exited`), and every send once the system is shutting down (nobody would
//! deliver them any more).

use crate::simulation::in_flight::InFlight;
use std::sync::Mutex;

/// Takes messages on their way to a system's actors. See the
/// [module docs](self).
///
/// ```
/// use std::sync::Mutex;
/// use troubadour::divert::Divert;
/// use troubadour::prelude::*;
/// use troubadour::InFlight;
///
/// /// Delivers everything at once, counting what went through.
/// #[derive(Default)]
/// struct Counting(Mutex<usize>);
/// impl Divert for Counting {
///     fn divert(&self, message: InFlight) {
///         *self.0.lock().unwrap() += 1;
///         message.deliver();
///     }
/// }
///
/// struct Echo;
/// impl Actor for Echo {}
/// struct Ping;
/// impl Message for Ping { type Reply = u8; }
/// impl Handler<Ping> for Echo {
///     fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> u8 { 7 }
/// }
///
/// let counting = std::sync::Arc::new(Counting::default());
/// let system = ActorSystem::builder().divert(counting.clone()).build();
/// let echo = system.spawn(Echo)?;
/// assert_eq!(echo.ask(Ping).wait()?, 7);
/// assert_eq!(*counting.0.lock().unwrap(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Divert: Send + Sync + 'static {
    /// Takes one message. Called on the sender's thread, in the order that
    /// sender sent; it must not block for long. Dropping `message` without
    /// delivering it counts it as a dead letter; [`InFlight::lose`] drops it
    /// silently, as a lossy network would.
    fn divert(&self, message: InFlight);
}

impl<D: Divert + ?Sized> Divert for std::sync::Arc<D> {
    fn divert(&self, message: InFlight) {
        (**self).divert(message)
    }
}

/// The divert behind
/// `hold_messages` (with the `simulation` feature): keeps every
/// message, in the order sent, until
/// `SystemHandle::take_in_flight`
/// takes them.
#[derive(Default)]
pub struct Outbox {
    held: Mutex<Vec<InFlight>>,
}

impl Outbox {
    /// Everything held since the last call, oldest first.
    pub fn take(&self) -> Vec<InFlight> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Divert for Outbox {
    fn divert(&self, message: InFlight) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }
}
