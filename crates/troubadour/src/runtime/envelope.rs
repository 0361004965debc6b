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
use crate::primitives::mailbox::{Link, Queue, RunCounts, Tail, RUN_COUNTS_AT};
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
/// the message in the given slot out of the node (always 0 but in a run);
/// with `keep` set they leave the node's memory to the mailbox, which
/// still links it (`mailbox.rs`, invariant 2) and later gives it to
/// `free`.
pub struct EnvelopeVTable<A: crate::Actor> {
    pub(crate) handle: unsafe fn(*mut Envelope<A>, u32, &mut A, &mut Context<A>, bool) -> Handled,
    pub(crate) discard: unsafe fn(*mut Envelope<A>, u32, bool) -> &'static str,
    pub(crate) free: unsafe fn(*mut Envelope<A>),
    /// What the node is: one `TypeId` per actor, message, handler kind and
    /// node shape. A sender compares it to find its own run of the same
    /// message at a mailbox's tail ([`tell_node`]); unlike the table's
    /// address, it cannot be shared by two kinds nor differ for one.
    pub(crate) kind: fn() -> TypeId,
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
///     const VTABLE_RUN: &'static EnvelopeVTable<A> = <A as Handles<Big, Immediate>>::VTABLE_RUN;
///     const VTABLE_RUN_SMALL: &'static EnvelopeVTable<A> =
///         <A as Handles<Big, Immediate>>::VTABLE_RUN_SMALL;
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
    /// For a run of `tell`s (`mailbox.rs`, invariant 7).
    #[doc(hidden)]
    const VTABLE_RUN: &'static EnvelopeVTable<Self>;
    /// For a sender's first, small run of `tell`s.
    #[doc(hidden)]
    const VTABLE_RUN_SMALL: &'static EnvelopeVTable<Self>;
}

/// The seal of [`Handles`]: a public trait in a private module, so no
/// crate outside this one can name it, let alone implement it.
mod sealed {
    pub trait Sealed<M, K> {}
}

impl<A: Handler<M>, M: Message> sealed::Sealed<M, Immediate> for A {}
impl<A: AsyncHandler<M>, M: Message> sealed::Sealed<M, Awaiting> for A {}

/// The table of one node shape `S` of `(A, M)`, handled by `handle`.
macro_rules! vtable {
    ($handle:ident, $kind:ty, $shape:ty) => {
        &EnvelopeVTable {
            handle: $handle::<A, M, $shape>,
            discard: discard::<A, M, $shape>,
            free: <$shape as Shape<A, M>>::free,
            kind: TypeId::of::<(A, M, $kind, $shape)>,
        }
    };
}

impl<A: Handler<M>, M: Message> Handles<M, Immediate> for A {
    const VTABLE: &'static EnvelopeVTable<A> = vtable!(handle_sync, Immediate, One<NoReply, false>);
    const VTABLE_ALONE: &'static EnvelopeVTable<A> =
        vtable!(handle_sync, Immediate, One<NoReply, true>);
    const VTABLE_ASK: &'static EnvelopeVTable<A> =
        vtable!(handle_sync, Immediate, One<ReplyTo<M::Reply>, false>);
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> =
        vtable!(handle_sync, Immediate, One<ReplyTo<M::Reply>, true>);
    const VTABLE_RUN: &'static EnvelopeVTable<A> = vtable!(handle_sync, Immediate, Run<true>);
    const VTABLE_RUN_SMALL: &'static EnvelopeVTable<A> =
        vtable!(handle_sync, Immediate, Run<false>);
}

impl<A: AsyncHandler<M>, M: Message> Handles<M, Awaiting> for A {
    const VTABLE: &'static EnvelopeVTable<A> = vtable!(handle_async, Awaiting, One<NoReply, false>);
    const VTABLE_ALONE: &'static EnvelopeVTable<A> =
        vtable!(handle_async, Awaiting, One<NoReply, true>);
    const VTABLE_ASK: &'static EnvelopeVTable<A> =
        vtable!(handle_async, Awaiting, One<ReplyTo<M::Reply>, false>);
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> =
        vtable!(handle_async, Awaiting, One<ReplyTo<M::Reply>, true>);
    const VTABLE_RUN: &'static EnvelopeVTable<A> = vtable!(handle_async, Awaiting, Run<true>);
    const VTABLE_RUN_SMALL: &'static EnvelopeVTable<A> =
        vtable!(handle_async, Awaiting, Run<false>);
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

/// How a node holds its message: alone ([`One`]) or in a run ([`Run`]).
trait Shape<A: crate::Actor, M: Message> {
    /// Moves the message in `slot`, its reply channel and the sender's
    /// span out of the node and frees it (unless `keep`: the mailbox still
    /// links it). Field by field, for the reason given in [`build`].
    ///
    /// # Safety
    /// `p` is a live node of this shape built for `A` and `M`, whose
    /// message in `slot` was not taken yet; with `keep` unset, that is its
    /// last message.
    unsafe fn take(
        p: *mut Envelope<A>,
        slot: u32,
        keep: bool,
    ) -> (M, Option<ReplyTo<M::Reply>>, SenderSpan);

    /// The `free` of a vtable: gives back the memory of a node whose
    /// messages were taken out.
    ///
    /// # Safety
    /// As for [`take`](Self::take), after the takes (the last with
    /// `keep`); not used again afterwards.
    unsafe fn free(p: *mut Envelope<A>);
}

/// A node of one message ([`Typed`]): `R` is [`ReplyTo`] for an `ask` and
/// [`NoReply`] for a `tell`; `ALONE` says whether it is placed alone.
struct One<R, const ALONE: bool>(PhantomData<R>);

impl<A: crate::Actor, M: Message, R: ReplySlotOf<M::Reply>, const ALONE: bool> Shape<A, M>
    for One<R, ALONE>
{
    #[inline]
    unsafe fn take(
        p: *mut Envelope<A>,
        _slot: u32,
        keep: bool,
    ) -> (M, Option<ReplyTo<M::Reply>>, SenderSpan) {
        let typed = p as *mut Typed<A, M, R>;
        // SAFETY: a live `Typed<A, M>` (contract); each field is read once
        // and the node is freed right after or, with `keep`, only ever
        // passed to `free` (which reads nothing), so nothing is dropped
        // twice. The head (a link and a vtable pointer) needs no drop and
        // stays readable.
        unsafe {
            let msg = std::ptr::addr_of!((*typed).msg).read();
            let reply = std::ptr::addr_of!((*typed).reply).read();
            let sender = std::ptr::addr_of!((*typed).sender).read();
            if !keep {
                <Self as Shape<A, M>>::free(p);
            }
            (msg, reply.into_reply(), sender)
        }
    }

    unsafe fn free(p: *mut Envelope<A>) {
        // SAFETY: the node's placement is a function of its vtable, so
        // `free` gets the one `alloc` got (contract).
        unsafe {
            nodes::free(
                p as *mut u8,
                Layout::new::<Typed<A, M, R>>(),
                placement::<A, M, R>(ALONE),
            );
        }
    }
}

/// A run of `tell`s of one message type from one sender
/// (`mailbox.rs`, invariant 7): [`RunHead`], then [`run_capacity`] slots.
/// Always carved from the sender's slab, always handled from the mailbox.
/// A sender's first run to an actor is small (`LARGE` unset): many
/// actors get a few messages at once (a parent the results of its
/// children), and a full-size run for each would take up the room of
/// many nodes; only a sender that filled a run starts large ones.
struct Run<const LARGE: bool>;

/// The head of a run: the common head, then the counts the mailbox keeps
/// at [`RUN_COUNTS_AT`].
#[repr(C)]
struct RunHead<A: crate::Actor> {
    head: Envelope<A>,
    counts: RunCounts,
}

/// One message of a run.
#[repr(C)]
struct RunSlot<M> {
    msg: M,
    sender: SenderSpan,
}

/// Bytes of messages a run holds: a run of `u64`s holds 64 of them in 536
/// bytes, 8.4 bytes a message (decision 0052).
const RUN_BYTES: usize = 512;
/// Messages a run holds at most (a run of empty messages would otherwise
/// hold without end).
const RUN_SLOTS_MAX: usize = 512;
/// A message type whose runs would hold fewer is not sent in runs: a run
/// would save too little of a node's head to be worth its header.
const RUN_SLOTS_MIN: usize = 4;

/// How many messages of `M` a run holds: a large one, and a small one,
/// an eighth of it (at least [`RUN_SLOTS_MIN`]).
const fn run_capacity<M, const LARGE: bool>() -> usize {
    let size = std::mem::size_of::<RunSlot<M>>();
    let large = if size == 0 || RUN_BYTES / size > RUN_SLOTS_MAX {
        RUN_SLOTS_MAX
    } else {
        RUN_BYTES / size
    };
    if LARGE || large <= RUN_SLOTS_MIN {
        large
    } else if large / 8 < RUN_SLOTS_MIN {
        RUN_SLOTS_MIN
    } else {
        large / 8
    }
}

/// Where a run's first slot starts.
const fn run_slots_at<A: crate::Actor, M>() -> usize {
    let align = std::mem::align_of::<RunSlot<M>>();
    (std::mem::size_of::<RunHead<A>>() + align - 1) & !(align - 1)
}

/// The layout of a run of `M` for `A`.
const fn run_layout<A: crate::Actor, M, const LARGE: bool>() -> Layout {
    let size =
        run_slots_at::<A, M>() + run_capacity::<M, LARGE>() * std::mem::size_of::<RunSlot<M>>();
    let head = std::mem::align_of::<RunHead<A>>();
    let slot = std::mem::align_of::<RunSlot<M>>();
    match Layout::from_size_align(size, if head > slot { head } else { slot }) {
        Ok(layout) => layout,
        Err(_) => panic!("a run's size is at most a few KiB and its alignment a power of two"),
    }
}

/// Whether `tell`s of `M` to `A` go in runs.
const fn runs_for<A: crate::Actor, M>() -> bool {
    let layout = run_layout::<A, M, true>();
    run_capacity::<M, true>() >= RUN_SLOTS_MIN
        && layout.size() <= nodes::MAX_RUN
        && layout.align() <= 64
}

/// Slot `slot` of the run `p`.
///
/// # Safety
/// `p` is a run of `M` for `A` (its memory in place) and `slot` below its
/// capacity.
#[inline]
unsafe fn run_slot<A: crate::Actor, M>(p: *mut Envelope<A>, slot: u32) -> *mut RunSlot<M> {
    // SAFETY: inside the run's allocation (contract and `run_layout`).
    unsafe {
        (p as *mut u8)
            .add(run_slots_at::<A, M>() + slot as usize * std::mem::size_of::<RunSlot<M>>())
            .cast()
    }
}

impl<A: crate::Actor, M: Message, const LARGE: bool> Shape<A, M> for Run<LARGE> {
    #[inline]
    unsafe fn take(
        p: *mut Envelope<A>,
        slot: u32,
        keep: bool,
    ) -> (M, Option<ReplyTo<M::Reply>>, SenderSpan) {
        // SAFETY: a live run whose message in `slot` is untaken (contract):
        // each slot is read once; the node is freed right after only if
        // this was its last message.
        unsafe {
            let at = run_slot::<A, M>(p, slot);
            let msg = std::ptr::addr_of!((*at).msg).read();
            let sender = std::ptr::addr_of!((*at).sender).read();
            if !keep {
                <Self as Shape<A, M>>::free(p);
            }
            (msg, None, sender)
        }
    }

    unsafe fn free(p: *mut Envelope<A>) {
        // SAFETY: runs are always carved from a slab with this layout
        // (`tell_node`).
        unsafe { nodes::free(p as *mut u8, run_layout::<A, M, LARGE>(), Placement::Slab) };
    }
}

/// A new run holding `msg` in its first slot. The caller owns it until it
/// is pushed with [`Queue::push_run`].
fn build_run<A, M, K, const LARGE: bool>(msg: M) -> *mut Envelope<A>
where
    A: Handles<M, K>,
    M: Message,
{
    debug_assert_eq!(std::mem::offset_of!(RunHead<A>, counts), RUN_COUNTS_AT);
    let p = nodes::alloc(run_layout::<A, M, LARGE>(), Placement::Slab) as *mut RunHead<A>;
    // SAFETY: fresh memory with the run's layout; field by field as in
    // `build`; slot 0 is inside it.
    unsafe {
        std::ptr::addr_of_mut!((*p).head).write(Envelope {
            link: Link::new(),
            vtable: if LARGE {
                A::VTABLE_RUN
            } else {
                A::VTABLE_RUN_SMALL
            },
        });
        std::ptr::addr_of_mut!((*p).counts).write(RunCounts::new());
        let slot = run_slot::<A, M>(p.cast(), 0);
        std::ptr::addr_of_mut!((*slot).msg).write(msg);
        std::ptr::addr_of_mut!((*slot).sender).write(sender_span());
    }
    p.cast()
}

/// What a `tell` makes of its message: [`tell_node`].
pub(crate) enum Told<A: crate::Actor> {
    /// It went into this thread's run at the mailbox's tail: nothing to
    /// push.
    Appended,
    /// A node of one message, for [`Queue::push`].
    One(*mut Envelope<A>),
    /// A new run, for [`Queue::push_run`].
    Run(*mut Envelope<A>),
}

thread_local! {
    /// How many more of this thread's `tell`s look at the mailbox's tail
    /// before they push ([`tell_node`]). A look loads a cache line that
    /// other threads write, which pays only while this thread's messages
    /// pile up somewhere: a push shows that when what it displaced from
    /// the tail is this thread's own last message of the same type
    /// ([`after_push`]). Messages to actors that keep up (a ring's token,
    /// an actor woken from idle) never look.
    static TAIL_LOOKS: Cell<u32> = const { Cell::new(0) };
}

/// The looks a sign of messages piling up buys ([`TAIL_LOOKS`]); each look
/// that finds nothing to add to spends one, and a look that appends or
/// starts a run buys them again.
const TAIL_LOOKS_PER_SIGN: u32 = 256;

/// Places a `tell` of `msg` to the actor whose mailbox is `queue`. If the
/// tail is this thread's run of the same message and it has room, the
/// message goes in (`mailbox.rs`, invariant 7). If the tail is this
/// thread's last node of the same message, or its full run, its messages
/// are piling up there faster than the actor takes them (or the actor
/// just took the last one, which looks the same): the message starts a
/// run. Otherwise it gets a node of its own, as every message did before
/// runs. Only while this thread has seen its messages wait does it look
/// ([`TAIL_LOOKS`]); an actor that keeps up sees no run at all.
#[inline]
pub(crate) fn tell_node<A, M, K>(queue: &Queue, msg: M) -> Told<A>
where
    A: Handles<M, K>,
    M: Message,
{
    if !runs_for::<A, M>() {
        return Told::One(envelope::<A, M, K>(msg, None));
    }
    let looks = TAIL_LOOKS.with(Cell::get);
    if looks == 0 {
        return Told::One(envelope::<A, M, K>(msg, None));
    }
    let told = tell_at_tail::<A, M, K>(queue, msg);
    let looks = match told {
        Told::One(_) => looks - 1,
        Told::Appended | Told::Run(_) => TAIL_LOOKS_PER_SIGN,
    };
    TAIL_LOOKS.with(|l| l.set(looks));
    if looks == 0 {
        // Nothing of this thread's waits any more: its slabs need not
        // stay open (`nodes.rs`).
        nodes::keep_slabs_open(false);
    }
    told
}

/// After a `tell` of `M` pushed a node of its own: if what the push
/// displaced is this thread's own last message of the same type (a node
/// or a full run), this thread's messages wait there, and its next tells
/// look at the tail ([`TAIL_LOOKS`]).
#[inline]
pub(crate) fn after_push<A, M, K>(displaced: Tail)
where
    A: Handles<M, K>,
    M: Message,
{
    if !runs_for::<A, M>() {
        return;
    }
    match displaced {
        Tail::Nothing => {}
        Tail::Node(node) | Tail::Run(node) => saw_at_tail::<A, M, K>(node),
    }
}

/// [`after_push`]'s look at the node it displaced. Out of line, as
/// everything about runs, so that a `tell` to an actor that keeps up is
/// the code it was before runs.
#[inline(never)]
fn saw_at_tail<A, M, K>(node: *mut Link)
where
    A: Handles<M, K>,
    M: Message,
{
    let mine = if nodes::in_open_slab(node as *const u8) {
        // SAFETY: in this thread's open slab, as in `tell_at_tail`.
        let kind = unsafe { ((*(node as *mut Envelope<A>)).vtable.kind)() };
        [A::VTABLE.kind, A::VTABLE_RUN_SMALL.kind, A::VTABLE_RUN.kind]
            .iter()
            .any(|k| k() == kind)
    } else {
        // In a slab this thread sealed lately: likely its own message,
        // of whatever type (a sender telling many actors in turn comes
        // back to each after a slab or more).
        nodes::carved_here_lately(node as *const u8)
    };
    if mine && TAIL_LOOKS.with(|l| l.replace(TAIL_LOOKS_PER_SIGN)) == 0 {
        nodes::keep_slabs_open(true);
    }
}

/// [`tell_node`]'s look at the tail. Inline: while this thread's messages
/// pile up, every `tell` comes here, and pingpong's 5 ns messages took a
/// fifth longer through a call.
#[inline]
fn tell_at_tail<A, M, K>(queue: &Queue, msg: M) -> Told<A>
where
    A: Handles<M, K>,
    M: Message,
{
    let (node, is_run) = match queue.tail_for_sender() {
        Tail::Nothing => return Told::One(envelope::<A, M, K>(msg, None)),
        Tail::Node(node) => (node, false),
        Tail::Run(node) => (node, true),
    };
    if !nodes::in_open_slab(node as *const u8) {
        return Told::One(envelope::<A, M, K>(msg, None));
    }
    let node = node as *mut Envelope<A>;
    // SAFETY: the node lies in a slab this thread carved it from and has
    // not sealed, so its memory is in place even if its message was taken
    // and the node freed, and its head is as this thread wrote it: every
    // node in an `A`'s mailbox starts with an `Envelope<A>`, and nothing
    // writes a node's vtable after it is built. The tables are statics.
    let kind = unsafe { ((*node).vtable.kind)() };
    if !is_run {
        return if kind == (A::VTABLE.kind)() {
            Told::Run(build_run::<A, M, K, false>(msg))
        } else {
            Told::One(envelope::<A, M, K>(msg, None))
        };
    }
    if kind == (A::VTABLE_RUN_SMALL.kind)() {
        // SAFETY: a run of `M` for `A` in this thread's open slab (above).
        unsafe { append::<A, M, K, false>(node, msg) }
    } else if kind == (A::VTABLE_RUN.kind)() {
        // SAFETY: as above.
        unsafe { append::<A, M, K, true>(node, msg) }
    } else {
        Told::One(envelope::<A, M, K>(msg, None))
    }
}

/// Appends `msg` to the run `node` if it is open and has room; starts a
/// large run if it is full.
///
/// # Safety
/// `node` is a run of `M` for `A` of this size, in this thread's open slab
/// (`nodes.rs`); this thread is its sender.
#[inline]
unsafe fn append<A, M, K, const LARGE: bool>(node: *mut Envelope<A>, msg: M) -> Told<A>
where
    A: Handles<M, K>,
    M: Message,
{
    let link = Envelope::as_link(node);
    // SAFETY: contract.
    let Some(count) = (unsafe { Queue::open_count(link) }) else {
        // The actor caught up and closed it.
        return Told::One(envelope::<A, M, K>(msg, None));
    };
    if count as usize >= run_capacity::<M, LARGE>() {
        return Told::Run(build_run::<A, M, K, true>(msg));
    }
    // SAFETY: slot `count` is below the capacity and not published, so
    // nobody reads it; if the append fails it never was, and the message
    // is read back out once.
    unsafe {
        let slot = run_slot::<A, M>(node, count);
        std::ptr::addr_of_mut!((*slot).msg).write(msg);
        std::ptr::addr_of_mut!((*slot).sender).write(sender_span());
        if Queue::append_to(link, count) {
            return Told::Appended;
        }
        // The span (a `tracing::Span` with the feature on) is dropped.
        let _sender = std::ptr::addr_of!((*slot).sender).read();
        let msg = std::ptr::addr_of!((*slot).msg).read();
        Told::One(envelope::<A, M, K>(msg, None))
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
        unsafe { ((*p).vtable.handle)(p, 0, actor, ctx, false) }
    }

    /// Runs the handler of the message in `slot` of a node the mailbox
    /// handed out ([`Pop::Data`](crate::primitives::mailbox::Pop)),
    /// leaving the node to the mailbox (its dummy; `mailbox.rs`,
    /// invariant 2).
    ///
    /// # Safety
    /// As for [`handle`](Self::handle), for the message in `slot`, not
    /// taken yet; once the mailbox retires the node it is only passed to
    /// [`free_taken`](Self::free_taken), once.
    #[inline]
    pub(crate) unsafe fn handle_queued(
        p: *mut Envelope<A>,
        slot: u32,
        actor: &mut A,
        ctx: &mut Context<A>,
    ) -> Handled {
        // SAFETY: as for `handle`.
        unsafe { ((*p).vtable.handle)(p, slot, actor, ctx, true) }
    }

    /// As [`discard`](Self::discard), for the message in `slot`, leaving
    /// the node to the mailbox.
    ///
    /// # Safety
    /// As for [`handle_queued`](Self::handle_queued).
    pub(crate) unsafe fn discard_queued(p: *mut Envelope<A>, slot: u32) -> &'static str {
        // SAFETY: as for `handle`.
        unsafe { ((*p).vtable.discard)(p, slot, true) }
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
        unsafe { ((*p).vtable.discard)(p, 0, false) }
    }
}

/// The `discard` of a vtable: drops the message and the reply channel.
///
/// # Safety
/// As for [`take`].
unsafe fn discard<A: crate::Actor, M: Message, S: Shape<A, M>>(
    p: *mut Envelope<A>,
    slot: u32,
    keep: bool,
) -> &'static str {
    // SAFETY: as for `take` (contract).
    drop(unsafe { S::take(p, slot, keep) });
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
unsafe fn handle_sync<A: Handler<M>, M: Message, S: Shape<A, M>>(
    p: *mut Envelope<A>,
    slot: u32,
    actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    // SAFETY: contract.
    let (msg, mut reply, _sender) = unsafe { S::take(p, slot, keep) };
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
unsafe fn handle_async<A: AsyncHandler<M>, M: Message, S: Shape<A, M>>(
    p: *mut Envelope<A>,
    slot: u32,
    actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    // SAFETY: contract.
    let (msg, mut reply, _sender) = unsafe { S::take(p, slot, keep) };
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
