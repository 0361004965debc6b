//! A message in a mailbox: one node holding the intrusive link, a pointer
//! to a static table of functions for its `(actor, message)` pair, the
//! message itself and, for an `ask` only, the reply channel (a `tell`'s
//! node has no room for one: its own table reads it back as none). One allocation per
//! message, carved from the sending thread's slab (`nodes.rs`); no
//! `Box<dyn>` inside a box.
//!
//! [`Handles`] ties a message type to an actor whether the actor implements
//! the synchronous [`Handler`] or the [`AsyncHandler`]: the second type
//! parameter is a marker the compiler infers, so callers just write
//! `actor.tell(msg)`.

use crate::api::actor::{AsyncHandler, Handler, Message};
use crate::api::context::Context;
use crate::primitives::mailbox::Link;
use crate::primitives::nodes::{self, Placement};
use std::alloc::Layout;
use std::any::TypeId;
use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::Poll;
use tokio::sync::oneshot;

/// The reply channel of an `ask`.
pub(crate) type ReplyTo<R> = oneshot::Sender<R>;

/// A future suspended in an actor: the rest of an async handler.
pub(crate) type Suspended = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the cell does after a dispatch.
pub(crate) enum Handled {
    Done,
    Suspended(Suspended),
}

/// Functions of one `(actor, message)` pair. `handle` and `discard` take
/// the message out of the node; with `keep` set they leave the node's
/// memory to the mailbox, which still links it (`mailbox.rs`, invariant 2)
/// and later gives it to `free`.
pub struct EnvelopeVTable<A: crate::Actor> {
    pub(crate) handle: unsafe fn(*mut Envelope<A>, &mut A, &mut Context<A>, bool) -> Handled,
    pub(crate) discard: unsafe fn(*mut Envelope<A>, bool) -> &'static str,
    pub(crate) free: unsafe fn(*mut Envelope<A>),
}

/// The type-erased head of every message node.
#[repr(C)]
pub struct Envelope<A: crate::Actor> {
    pub(crate) link: Link,
    pub(crate) vtable: &'static EnvelopeVTable<A>,
}

/// A node: `R` is [`ReplyTo`] for an `ask` and [`NoReply`] for a `tell`, so
/// a tell's node has no room for a channel it never has. (As
/// `Option<ReplyTo<_>>` the slot took 16 bytes in every node: the sender is
/// itself an `Option<Arc<_>>`, so the outer `Option` has no niche left. A
/// `tell` of a `u64` was a 40-byte node, now 24; decision 0032.)
#[repr(C)]
struct Typed<A: crate::Actor, M: Message, R> {
    head: Envelope<A>,
    msg: M,
    reply: R,
    sender: SenderSpan,
}

/// The reply slot of a `tell`'s node: none.
struct NoReply;

/// What a node's reply slot holds, read back as the `Option` the handlers
/// take.
trait ReplySlotOf<Reply>: Sized {
    fn into_reply(self) -> Option<ReplyTo<Reply>>;
}

impl<Reply> ReplySlotOf<Reply> for NoReply {
    #[inline(always)]
    fn into_reply(self) -> Option<ReplyTo<Reply>> {
        None
    }
}

impl<Reply> ReplySlotOf<Reply> for ReplyTo<Reply> {
    #[inline(always)]
    fn into_reply(self) -> Option<ReplyTo<Reply>> {
        Some(self)
    }
}

/// The span current where a message was sent (feature `tracing`): the
/// span of its handling is that span's child, so one request's spans form
/// one tree across the actors it goes through, and across nodes where the
/// remote layer carries the trace context. Without the feature it takes no
/// room in the node.
#[cfg(feature = "tracing")]
type SenderSpan = tracing::Span;
#[cfg(not(feature = "tracing"))]
struct SenderSpan;

/// Enters the handling's span, or the sender's where the handling's is
/// filtered out (per-message spans are `trace`-level): a trace then still
/// flows through the actor to what it sends, across nodes too.
#[cfg(feature = "tracing")]
fn enter_handling(handling: tracing::Span, sender: tracing::Span) -> tracing::span::EnteredSpan {
    if handling.is_disabled() {
        sender.entered()
    } else {
        handling.entered()
    }
}

#[inline(always)]
fn sender_span() -> SenderSpan {
    #[cfg(feature = "tracing")]
    return tracing::Span::current();
    #[cfg(not(feature = "tracing"))]
    SenderSpan
}

/// The span of a message's handling: a child of the sender's span, or of
/// whatever span is current here when the sender had none.
#[cfg(feature = "tracing")]
macro_rules! handling_span {
    ($sender:expr, $name:literal, $ctx:expr, $msg:ty) => {
        if $sender.is_none() {
            tracing::trace_span!($name, actor = %$ctx.id(), message = std::any::type_name::<$msg>())
        } else {
            tracing::trace_span!(parent: &$sender, $name, actor = %$ctx.id(), message = std::any::type_name::<$msg>())
        }
    };
}

/// Marker: handled by a synchronous [`Handler`].
pub enum Immediate {}
/// Marker: handled by an [`AsyncHandler`].
pub enum Awaiting {}

/// Implemented for every actor that handles `M`, through [`Handler`] or
/// [`AsyncHandler`]. It is what `tell`, `ask` and `recipient` require.
///
/// Sealed: only the two blanket impls in this crate exist. Its consts pick
/// the code that reads a message node back as a typed message, so an impl
/// written by hand could make a node of one message type be read as
/// another, undefined behaviour from safe code. Implement [`Handler`] or
/// [`AsyncHandler`] instead; an impl of your own does not compile:
///
/// ```compile_fail,E0277
/// use troubadour::prelude::*;
/// use troubadour::{EnvelopeVTable, Handles, Immediate};
///
/// struct A;
/// impl Actor for A {}
/// struct Big([u8; 4096]);
/// impl Message for Big { type Reply = (); }
/// impl Handler<Big> for A {
///     fn handle(&mut self, _: Big, _: &mut Context<Self>) {}
/// }
/// struct Small;
/// impl Message for Small { type Reply = (); }
///
/// // Would make `tell(Small)` run `Big`'s handler on a `Small` node.
/// enum Evil {}
/// impl Handles<Small, Evil> for A {
///     const VTABLE: &'static EnvelopeVTable<A> = <A as Handles<Big, Immediate>>::VTABLE;
///     const VTABLE_ALONE: &'static EnvelopeVTable<A> =
///         <A as Handles<Big, Immediate>>::VTABLE_ALONE;
///     const VTABLE_ASK: &'static EnvelopeVTable<A> = <A as Handles<Big, Immediate>>::VTABLE_ASK;
///     const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> =
///         <A as Handles<Big, Immediate>>::VTABLE_ASK_ALONE;
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle `{M}`",
    note = "implement `Handler<{M}>` (or `AsyncHandler<{M}>`) for `{Self}`"
)]
pub trait Handles<M: Message, K>: crate::Actor + sealed::Sealed<M, K> {
    /// For a `tell`'s node.
    #[doc(hidden)]
    const VTABLE: &'static EnvelopeVTable<Self>;
    /// For a `tell`'s node allocated alone (a stashed message).
    #[doc(hidden)]
    const VTABLE_ALONE: &'static EnvelopeVTable<Self>;
    /// For an `ask`'s node.
    #[doc(hidden)]
    const VTABLE_ASK: &'static EnvelopeVTable<Self>;
    /// For an `ask`'s node allocated alone.
    #[doc(hidden)]
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<Self>;
}

/// The seal of [`Handles`]: a public trait in a private module, so no
/// crate outside this one can name it, let alone implement it.
mod sealed {
    pub trait Sealed<M, K> {}
}

impl<A: Handler<M>, M: Message> sealed::Sealed<M, Immediate> for A {}
impl<A: AsyncHandler<M>, M: Message> sealed::Sealed<M, Awaiting> for A {}

impl<A: Handler<M>, M: Message> Handles<M, Immediate> for A {
    const VTABLE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, NoReply, false>,
        discard: discard::<A, M, NoReply, false>,
        free: free::<A, M, NoReply, false>,
    };
    const VTABLE_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, NoReply, true>,
        discard: discard::<A, M, NoReply, true>,
        free: free::<A, M, NoReply, true>,
    };
    const VTABLE_ASK: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, ReplyTo<M::Reply>, false>,
        discard: discard::<A, M, ReplyTo<M::Reply>, false>,
        free: free::<A, M, ReplyTo<M::Reply>, false>,
    };
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, ReplyTo<M::Reply>, true>,
        discard: discard::<A, M, ReplyTo<M::Reply>, true>,
        free: free::<A, M, ReplyTo<M::Reply>, true>,
    };
}

impl<A: AsyncHandler<M>, M: Message> Handles<M, Awaiting> for A {
    const VTABLE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, NoReply, false>,
        discard: discard::<A, M, NoReply, false>,
        free: free::<A, M, NoReply, false>,
    };
    const VTABLE_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, NoReply, true>,
        discard: discard::<A, M, NoReply, true>,
        free: free::<A, M, NoReply, true>,
    };
    const VTABLE_ASK: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, ReplyTo<M::Reply>, false>,
        discard: discard::<A, M, ReplyTo<M::Reply>, false>,
        free: free::<A, M, ReplyTo<M::Reply>, false>,
    };
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, ReplyTo<M::Reply>, true>,
        discard: discard::<A, M, ReplyTo<M::Reply>, true>,
        free: free::<A, M, ReplyTo<M::Reply>, true>,
    };
}

/// Where a node of this type lives. `alone` is part of the node's vtable,
/// so the free side knows it without a flag in the node.
const fn placement<A: crate::Actor, M: Message, R>(alone: bool) -> Placement {
    if alone {
        Placement::Alone
    } else {
        Placement::for_layout(Layout::new::<Typed<A, M, R>>())
    }
}

/// Builds a node. The caller owns the returned pointer until it is pushed.
#[inline]
pub(crate) fn envelope<A, M, K>(msg: M, reply: Option<ReplyTo<M::Reply>>) -> *mut Envelope<A>
where
    A: Handles<M, K>,
    M: Message,
{
    match reply {
        None => build::<A, M, NoReply>(msg, NoReply, A::VTABLE, false),
        Some(tx) => build::<A, M, ReplyTo<M::Reply>>(msg, tx, A::VTABLE_ASK, false),
    }
}

/// Builds a node that may stay put for long (a stashed message): it gets an
/// allocation of its own instead of keeping a whole slab alive.
pub(crate) fn envelope_alone<A, M, K>(msg: M, reply: Option<ReplyTo<M::Reply>>) -> *mut Envelope<A>
where
    A: Handles<M, K>,
    M: Message,
{
    match reply {
        None => build::<A, M, NoReply>(msg, NoReply, A::VTABLE_ALONE, true),
        Some(tx) => build::<A, M, ReplyTo<M::Reply>>(msg, tx, A::VTABLE_ASK_ALONE, true),
    }
}

/// `vtable` must be one made for `Typed<A, M, R>` with this `alone`.
#[inline]
fn build<A: crate::Actor, M: Message, R>(
    msg: M,
    reply: R,
    vtable: &'static EnvelopeVTable<A>,
    alone: bool,
) -> *mut Envelope<A> {
    let p = nodes::alloc(Layout::new::<Typed<A, M, R>>(), placement::<A, M, R>(alone))
        as *mut Typed<A, M, R>;
    // SAFETY: fresh memory with the node's size and alignment. Field by
    // field rather than a whole `Typed` built on the stack and copied: the
    // copy's wide loads read back the stack's narrow stores, which the CPU
    // cannot forward, and `perf` put most of the send path's time there.
    unsafe {
        std::ptr::addr_of_mut!((*p).head).write(Envelope {
            link: Link::new(),
            vtable,
        });
        std::ptr::addr_of_mut!((*p).msg).write(msg);
        std::ptr::addr_of_mut!((*p).reply).write(reply);
        std::ptr::addr_of_mut!((*p).sender).write(sender_span());
    }
    p as *mut Envelope<A>
}

/// Moves the message and the reply channel out of the node and frees it
/// (unless `keep`: the mailbox still links it).
/// Field by field, for the reason given in [`build`].
///
/// # Safety
/// `p` must come from [`envelope`] (`ALONE == false`) or
/// [`envelope_alone`] (`ALONE == true`) with the same `A` and `M`, for a
/// `tell` (`R` is [`NoReply`]) or an `ask` (`R` is [`ReplyTo`]).
#[inline]
unsafe fn take<A: crate::Actor, M: Message, R: ReplySlotOf<M::Reply>, const ALONE: bool>(
    p: *mut Envelope<A>,
    keep: bool,
) -> (M, Option<ReplyTo<M::Reply>>, SenderSpan) {
    let typed = p as *mut Typed<A, M, R>;
    // SAFETY: a live `Typed<A, M>` (contract); each field is read once and
    // the node is freed right after or, with `keep`, only ever passed to
    // `free` (which reads nothing), so nothing is dropped twice. The head
    // (a link and a vtable pointer) needs no drop and stays readable.
    unsafe {
        let msg = std::ptr::addr_of!((*typed).msg).read();
        let reply = std::ptr::addr_of!((*typed).reply).read();
        let sender = std::ptr::addr_of!((*typed).sender).read();
        if !keep {
            free::<A, M, R, ALONE>(p);
        }
        (msg, reply.into_reply(), sender)
    }
}

/// The `free` of a vtable: gives back the memory of a node whose message
/// was taken out.
///
/// # Safety
/// As for [`take`], after a `take` with `keep`; not used again afterwards.
unsafe fn free<A: crate::Actor, M: Message, R, const ALONE: bool>(p: *mut Envelope<A>) {
    // SAFETY: the node's placement is a function of its vtable, so `free`
    // gets the one `alloc` got (contract).
    unsafe {
        nodes::free(
            p as *mut u8,
            Layout::new::<Typed<A, M, R>>(),
            placement::<A, M, R>(ALONE),
        );
    }
}

impl<A: crate::Actor> Envelope<A> {
    pub(crate) fn as_link(p: *mut Envelope<A>) -> *mut Link {
        p as *mut Link
    }

    pub(crate) fn from_link(p: *mut Link) -> *mut Envelope<A> {
        p as *mut Envelope<A>
    }

    /// Runs the handler and frees the node.
    ///
    /// # Safety
    /// `p` must be a live node built by [`envelope`] (or one of its
    /// siblings) for this actor type, owned by the caller. `actor` and
    /// `ctx` are the actor and context of the cell whose turn this is (the
    /// caller holds its consumer role). If the result is
    /// [`Handled::Suspended`], the caller keeps the future in that cell and
    /// drops it before anything else touches the actor (it holds the
    /// actor's `&mut`).
    #[inline]
    pub(crate) unsafe fn handle(
        p: *mut Envelope<A>,
        actor: &mut A,
        ctx: &mut Context<A>,
    ) -> Handled {
        // SAFETY: a live node (contract), whose vtable was chosen for its
        // message type when it was built; the rest is passed on.
        unsafe { ((*p).vtable.handle)(p, actor, ctx, false) }
    }

    /// Runs the handler of a node the mailbox handed out, leaving the node
    /// to the mailbox (its dummy; `mailbox.rs`, invariant 2).
    ///
    /// # Safety
    /// As for [`handle`](Self::handle); afterwards the node is only passed
    /// to [`free_taken`](Self::free_taken), once.
    #[inline]
    pub(crate) unsafe fn handle_queued(
        p: *mut Envelope<A>,
        actor: &mut A,
        ctx: &mut Context<A>,
    ) -> Handled {
        // SAFETY: as for `handle`.
        unsafe { ((*p).vtable.handle)(p, actor, ctx, true) }
    }

    /// As [`discard`](Self::discard), leaving the node to the mailbox.
    ///
    /// # Safety
    /// As for [`handle_queued`](Self::handle_queued).
    pub(crate) unsafe fn discard_queued(p: *mut Envelope<A>) -> &'static str {
        // SAFETY: as for `handle`.
        unsafe { ((*p).vtable.discard)(p, true) }
    }

    /// Frees a node whose message was taken by
    /// [`handle_queued`](Self::handle_queued) or
    /// [`discard_queued`](Self::discard_queued), once the mailbox retired it.
    ///
    /// # Safety
    /// `p` is such a node, freed only here, once.
    #[inline]
    pub(crate) unsafe fn free_taken(p: *mut Envelope<A>) {
        // SAFETY: the head is intact after the take (contract).
        unsafe { ((*p).vtable.free)(p) }
    }

    /// Drops the node (its `ask` fails with `NoReply`); returns the message
    /// type's name for dead-letter reporting.
    ///
    /// # Safety
    /// `p` must be a live node built for this actor type, owned by the
    /// caller.
    pub(crate) unsafe fn discard(p: *mut Envelope<A>) -> &'static str {
        // SAFETY: as for `handle`.
        unsafe { ((*p).vtable.discard)(p, false) }
    }
}

/// The `discard` of a vtable: drops the message and the reply channel.
///
/// # Safety
/// As for [`take`].
unsafe fn discard<A: crate::Actor, M: Message, R: ReplySlotOf<M::Reply>, const ALONE: bool>(
    p: *mut Envelope<A>,
    keep: bool,
) -> &'static str {
    // SAFETY: as for `take` (contract).
    drop(unsafe { take::<A, M, R, ALONE>(p, keep) });
    std::any::type_name::<M>()
}

// Stash support. While a handler runs for an `ask`, this thread-local points
// at the dispatch frame's reply slot, so `ctx.stash(msg)` can move the reply
// channel along with the message and the reply is sent when the stashed
// message is finally handled. A thread-local instead of a field of the
// context keeps the slot out of memory the handler borrows mutably.
//
// The slot is keyed by the cell being run and by the type of the message
// being handled, not by the reply type: a handler that stashes some other
// message whose reply type happens to match must not hand that message
// the asker's channel, nor may another actor's handler run on this thread
// inside this one (a `LocalActor`) take it. Guards nest: a turn run inside
// a handler puts back the outer slot when it ends.
#[derive(Clone, Copy)]
struct ReplySlot {
    /// `*mut Option<ReplyTo<M::Reply>>`; null when no `ask` is handled.
    slot: *mut (),
    /// The cell whose handler runs (`Context::cell_addr`).
    cell: *const (),
    /// `TypeId` of `M`, the message being handled.
    msg: Option<TypeId>,
}

impl ReplySlot {
    const NONE: ReplySlot = ReplySlot {
        slot: std::ptr::null_mut(),
        cell: std::ptr::null(),
        msg: None,
    };
}

thread_local! {
    static CURRENT_REPLY: Cell<ReplySlot> = const { Cell::new(ReplySlot::NONE) };
}

/// Restores the slot that was current before it, also while unwinding from
/// a panicking handler, so the slot never dangles into the next message.
struct ReplySlotGuard {
    outer: ReplySlot,
}

impl ReplySlotGuard {
    fn set<M: Message>(cell: *const (), slot: &mut Option<ReplyTo<M::Reply>>) -> Self {
        let current = ReplySlot {
            slot: slot as *mut Option<ReplyTo<M::Reply>> as *mut (),
            cell,
            msg: Some(TypeId::of::<M>()),
        };
        ReplySlotGuard {
            outer: CURRENT_REPLY.with(|c| c.replace(current)),
        }
    }
}

impl Drop for ReplySlotGuard {
    fn drop(&mut self) {
        let outer = self.outer;
        CURRENT_REPLY.with(|c| c.set(outer));
    }
}

/// Takes the reply channel of the message `cell`'s handler is handling, if
/// that message is an `ask` of type `M` and its channel is still there.
pub(crate) fn take_current_reply<M: Message>(cell: *const ()) -> Option<ReplyTo<M::Reply>> {
    CURRENT_REPLY.with(|c| {
        let current = c.get();
        if current.slot.is_null() || current.cell != cell || current.msg != Some(TypeId::of::<M>())
        {
            return None;
        }
        // SAFETY: the pointer was set by `ReplySlotGuard::set::<M>` (same
        // `TypeId`, so the slot's type is `Option<ReplyTo<M::Reply>>`) for
        // a slot in the dispatch frame that outlives the guard, and the
        // guard takes it out of the thread-local before that frame returns.
        // The frame does not touch the slot while the handler runs.
        unsafe { (*(current.slot as *mut Option<ReplyTo<M::Reply>>)).take() }
    })
}

/// The `handle` of a [`Handler`]'s vtable.
///
/// # Safety
/// As for [`take`].
unsafe fn handle_sync<A: Handler<M>, M: Message, R: ReplySlotOf<M::Reply>, const ALONE: bool>(
    p: *mut Envelope<A>,
    actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    // SAFETY: contract.
    let (msg, mut reply, _sender) = unsafe { take::<A, M, R, ALONE>(p, keep) };
    #[cfg(feature = "tracing")]
    let _span = enter_handling(handling_span!(_sender, "handle", ctx, M), _sender);
    match reply {
        // A `tell`: nothing to reply to, the direct path.
        None => {
            A::handle(actor, msg, ctx);
        }
        Some(_) => {
            let guard = ReplySlotGuard::set::<M>(ctx.cell_addr(), &mut reply);
            let out = A::handle(actor, msg, ctx);
            drop(guard);
            // `None` here means the handler stashed the message with its
            // reply channel; the reply goes out when it is handled again.
            if let Some(tx) = reply {
                let _ = tx.send(out);
            }
        }
    }
    Handled::Done
}

/// The `handle` of an [`AsyncHandler`]'s vtable.
///
/// # Safety
/// As for [`take`] and [`Envelope::handle`]: `actor` lives in the cell
/// whose turn this is, and a returned future is kept in that cell and
/// dropped before anything else touches the actor.
unsafe fn handle_async<
    A: AsyncHandler<M>,
    M: Message,
    R: ReplySlotOf<M::Reply>,
    const ALONE: bool,
>(
    p: *mut Envelope<A>,
    actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    // SAFETY: contract.
    let (msg, mut reply, _sender) = unsafe { take::<A, M, R, ALONE>(p, keep) };
    #[cfg(feature = "tracing")]
    let _span = enter_handling(handling_span!(_sender, "handle_async", ctx, M), _sender);
    let waker = ctx.waker();
    let cell_addr = ctx.cell_addr();
    // SAFETY: (a lifetime extension) the future borrows the actor, which lives
    // inside the actor's cell at a fixed address. While the future is
    // pending the cell hands out no other reference to the actor: no user
    // message is dispatched, and every path that touches the actor again
    // (stop, kill, restart) drops the future first. The cell outlives the
    // future because the future is stored in the cell. The future owns its
    // own context (a pointer to the cell), so nothing else needs pinning.
    let actor: &'static mut A = unsafe { &mut *(actor as *mut A) };
    let cell_ctx = ctx.detach();
    let mut fut = Box::pin(async move {
        let mut ctx = cell_ctx;
        A::handle(actor, msg, &mut ctx).await
    });
    let polled = {
        let _guard = ReplySlotGuard::set::<M>(cell_addr, &mut reply);
        fut.as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
    };
    // The future has its own context; whatever it asked for (stop, fail,
    // unstash) is in the cell, so make the turn look.
    ctx.mark_dirty();
    match polled {
        Poll::Ready(out) => {
            if let Some(tx) = reply {
                let _ = tx.send(out);
            }
            Handled::Done
        }
        Poll::Pending => Handled::Suspended(Box::pin(async move {
            let out = fut.await;
            if let Some(tx) = reply {
                let _ = tx.send(out);
            }
        })),
    }
}

/// Keeps `A` invariant in containers of raw envelope pointers.
pub(crate) struct EnvelopeQueue<A: crate::Actor> {
    items: std::collections::VecDeque<*mut Envelope<A>>,
    _actor: PhantomData<A>,
}

// SAFETY: the envelopes hold `Send` messages and are only touched by the
// actor's consumer.
unsafe impl<A: crate::Actor> Send for EnvelopeQueue<A> {}

impl<A: crate::Actor> Default for EnvelopeQueue<A> {
    fn default() -> Self {
        EnvelopeQueue {
            items: Default::default(),
            _actor: PhantomData,
        }
    }
}

impl<A: crate::Actor> EnvelopeQueue<A> {
    /// # Safety
    /// `p` is a live node built for `A`, owned by the caller, who gives it
    /// up here (the queue discards what it still holds when dropped).
    pub(crate) unsafe fn push_back(&mut self, p: *mut Envelope<A>) {
        self.items.push_back(p);
    }
    pub(crate) fn pop_front(&mut self) -> Option<*mut Envelope<A>> {
        self.items.pop_front()
    }
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
    /// Moves all of `other` behind the current items.
    pub(crate) fn append(&mut self, other: &mut Self) {
        self.items.append(&mut other.items);
    }
}

impl<A: crate::Actor> Drop for EnvelopeQueue<A> {
    fn drop(&mut self) {
        for p in self.items.drain(..) {
            // SAFETY: every pointer here is an owned, live node.
            unsafe { Envelope::discard(p) };
        }
    }
}
