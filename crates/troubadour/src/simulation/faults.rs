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
        free: free_injected::<A>,
        kind: std::any::TypeId::of::<Injected<A>>,
        left: None,
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

/// Takes the fault out of a fault node and frees its victim, and the node
/// itself unless `keep` (the mailbox still links it and frees it later with
/// [`free_injected`]); returns the victim's type name.
///
/// # Safety
/// `p` must come from [`injected`] and be owned by the caller; after a
/// `keep` it is only passed to `free_injected`, once.
unsafe fn take_injected<A: crate::Actor>(
    p: *mut Envelope<A>,
    keep: bool,
) -> (InjectedFault, &'static str) {
    let node = p as *mut Injected<A>;
    // SAFETY: a live `Injected<A>` (contract); each field is read once, and
    // the node's memory is freed without dropping them again.
    let (fault, victim) = unsafe {
        (
            std::ptr::addr_of!((*node).fault).read(),
            std::ptr::addr_of!((*node).victim).read(),
        )
    };
    if !keep {
        // SAFETY: as above.
        unsafe { free_injected(p) };
    }
    // SAFETY: the fault node owned its victim, a live node for `A`.
    (fault, unsafe { Envelope::discard(victim) })
}

/// Frees a fault node's memory, its fields already taken out.
///
/// # Safety
/// `p` must come from [`injected`], be owned by the caller, have had its
/// fields taken by [`take_injected`], and not be used afterwards.
unsafe fn free_injected<A: crate::Actor>(p: *mut Envelope<A>) {
    // SAFETY: a box from `injected` (contract); `ManuallyDrop` has the same
    // layout and drops nothing, so only the memory is given back.
    drop(unsafe { Box::from_raw(p as *mut std::mem::ManuallyDrop<Injected<A>>) });
}

/// The `handle` of a fault node's vtable.
///
/// # Safety
/// As for [`take_injected`].
unsafe fn handle_injected<A: crate::Actor>(
    p: *mut Envelope<A>,
    _actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    // SAFETY: contract.
    match unsafe { take_injected(p, keep) } {
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
unsafe fn discard_injected<A: crate::Actor>(p: *mut Envelope<A>, keep: bool) -> &'static str {
    // SAFETY: contract.
    unsafe { take_injected(p, keep).1 }
}
