//! Fault nodes: what a divert injects at a held message's place (see
//! [`InFlight::deliver_with_panic`](crate::InFlight::deliver_with_panic) and
//! [`InFlight::deliver_after_stop`](crate::InFlight::deliver_after_stop)).
//!
//! A fault node is a mailbox node like any message, with a vtable of its
//! own, so the fault happens exactly at its place in the actor's message
//! order, and the hot path (`runtime/envelope.rs`) knows nothing of it.

use crate::api::context::Context;
use crate::primitives::mailbox::Link;
use crate::runtime::envelope::{Envelope, EnvelopeVTable, Handled};

/// What a simulation makes an actor do when it reaches a point in its
/// mailbox (see `in_flight.rs`).
pub(crate) enum InjectedFault {
    /// Panic, as if the handler of the wrapped message had: the message is
    /// lost with the handler that never ran.
    Panic(String),
    /// Stop normally before the wrapped message, which becomes a dead
    /// letter.
    Stop,
}

/// A node that carries an injected fault instead of a message. It sits in
/// the mailbox like any message, so the fault happens exactly at its place
/// in the actor's message order.
#[repr(C)]
struct Injected<A: crate::Actor> {
    head: Envelope<A>,
    fault: InjectedFault,
    /// The message the fault was injected at (owned).
    victim: *mut Envelope<A>,
}

trait InjectedVTable: crate::Actor {
    const INJECTED: &'static EnvelopeVTable<Self>;
}

impl<A: crate::Actor> InjectedVTable for A {
    const INJECTED: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_injected::<A>,
        discard: discard_injected::<A>,
    };
}

/// Builds a fault node. `victim` (owned) is freed when the node is.
///
/// # Safety
/// `victim` is a live node built for `A`, owned by the caller, who gives it
/// up here.
pub(crate) unsafe fn injected<A: crate::Actor>(
    fault: InjectedFault,
    victim: *mut Envelope<A>,
) -> *mut Envelope<A> {
    let node = Box::new(Injected {
        head: Envelope {
            link: Link::new(),
            vtable: <A as InjectedVTable>::INJECTED,
        },
        fault,
        victim,
    });
    Box::into_raw(node) as *mut Envelope<A>
}

/// Frees a fault node and its victim; returns the victim's type name.
///
/// # Safety
/// `p` must come from [`injected`] and be owned by the caller.
unsafe fn take_injected<A: crate::Actor>(p: *mut Envelope<A>) -> (InjectedFault, &'static str) {
    // SAFETY: an `Injected<A>` from `Box::into_raw` (contract).
    let node = unsafe { Box::from_raw(p as *mut Injected<A>) };
    let Injected { fault, victim, .. } = *node;
    // SAFETY: the fault node owned its victim, a live node for `A`.
    (fault, unsafe { Envelope::discard(victim) })
}

/// The `handle` of a fault node's vtable.
///
/// # Safety
/// As for [`take_injected`].
unsafe fn handle_injected<A: crate::Actor>(
    p: *mut Envelope<A>,
    _actor: &mut A,
    ctx: &mut Context<A>,
) -> Handled {
    // SAFETY: contract.
    match unsafe { take_injected(p) } {
        // Unwinds to the turn's `catch_unwind`, the path of a real panic;
        // the message went down with it, as a real panic's would.
        (InjectedFault::Panic(message), _) => panic!("{message}"),
        // The message arrived after the stop: a dead letter.
        (InjectedFault::Stop, name) => {
            ctx.stop();
            ctx.dead_letter(name);
        }
    }
    Handled::Done
}

/// The `discard` of a fault node's vtable.
///
/// # Safety
/// As for [`take_injected`].
unsafe fn discard_injected<A: crate::Actor>(p: *mut Envelope<A>) -> &'static str {
    // SAFETY: contract.
    unsafe { take_injected(p).1 }
}
