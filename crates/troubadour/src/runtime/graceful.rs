//! The graceful stop's marker: a node in the mailbox, behind every message
//! queued when [`ActorRef::stop_gracefully`](crate::ActorRef::stop_gracefully)
//! was called, that stops the actor when its turn reaches it.
//!
//! It is a mailbox node rather than a control signal because signals
//! overtake user messages and this must not: the point is to handle what is
//! queued first (Akka's `PoisonPill`, kameo's `stop_gracefully`). Reaching
//! it, the actor queues a stop signal to itself, so from there on a
//! graceful stop is the stop of [`ActorRef::stop`](crate::ActorRef::stop):
//! `stopping`, children, `stopped`, the same exit reason. It is a stop for
//! good, though, whatever the restart type: the mailbox is sealed from the
//! call on, so a restarted instance could take no message (Akka does not
//! restart after a `PoisonPill` either). Ordinary messages never see any of
//! this: their vtables, and the turn, are unchanged.

use crate::api::actor::Actor;
use crate::api::context::Context;
use crate::api::exit::ExitReason;
use crate::primitives::mailbox::Link;
use crate::runtime::envelope::{Envelope, EnvelopeVTable, Handled};
use crate::runtime::signal::Signal;

/// How the marker shows in dead letters (when the actor stopped some other
/// way before reaching it, as Akka counts an undelivered `PoisonPill`) and
/// in a simulation's [`InFlight`](crate::InFlight)s.
pub(crate) const MARKER_NAME: &str = "troubadour::GracefulStop";

/// The node: only the common head. Boxed, never from a slab, so it is
/// freed the same way wherever it ends (handled, drained, discarded).
#[repr(C)]
struct Marker<A: Actor> {
    head: Envelope<A>,
}

trait MarkerVTable: Actor {
    const MARKER: &'static EnvelopeVTable<Self>;
}

impl<A: Actor> MarkerVTable for A {
    const MARKER: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_marker::<A>,
        discard: discard_marker::<A>,
        free: free_marker::<A>,
        kind: std::any::TypeId::of::<Marker<A>>,
        left: None,
    };
}

/// A new marker node, owned by the caller until pushed.
pub(crate) fn marker<A: Actor>() -> *mut Envelope<A> {
    let node = Box::new(Marker {
        head: Envelope {
            link: Link::new(),
            vtable: <A as MarkerVTable>::MARKER,
        },
    });
    Box::into_raw(node) as *mut Envelope<A>
}

/// # Safety
/// `p` must come from [`marker`] for the same `A`, and be owned by the
/// caller (it is freed here unless `keep`: then the mailbox still links it
/// and frees it later with [`free_marker`]).
unsafe fn handle_marker<A: Actor>(
    p: *mut Envelope<A>,
    _actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    if !keep {
        // SAFETY: as in `free_marker`.
        unsafe { free_marker(p) };
    }
    // Everything queued before the marker has been handled. The signal is
    // processed before the next message (which, if any, was sent after the
    // graceful stop and goes to dead letters with the rest of the mailbox).
    ctx.signal_self(Signal::Stop(ExitReason::Normal));
    Handled::Done
}

/// # Safety
/// As for [`handle_marker`].
unsafe fn discard_marker<A: Actor>(p: *mut Envelope<A>, keep: bool) -> &'static str {
    if !keep {
        // SAFETY: as in `free_marker`.
        unsafe { free_marker(p) };
    }
    MARKER_NAME
}

/// # Safety
/// `p` must come from [`marker`] for the same `A`, be owned by the caller
/// and not be used afterwards.
unsafe fn free_marker<A: Actor>(p: *mut Envelope<A>) {
    // SAFETY: by this function's contract `p` is a boxed `Marker<A>` we own.
    drop(unsafe { Box::from_raw(p as *mut Marker<A>) });
}
