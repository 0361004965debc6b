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
use crate::primitives::mailbox::{Link, Queue, RunCount};
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
    /// The node is a run with messages left (`mailbox.rs`, invariant 7):
    /// the mailbox hands it out again next. No payload: with one, the
    /// value no longer fits two registers and every dispatch returns it
    /// through memory.
    Again,
}

/// Functions of one `(actor, message)` pair. `handle` and `discard` take
/// the message out of the node; with `keep` set they leave the node's
/// memory to the mailbox, which still links it (`mailbox.rs`, invariant 2)
/// and later gives it to `free`.
///
/// A run (several `tell`s in one node, `mailbox.rs`, invariant 7) gives
/// out one message per `handle` or `discard`; its `handle` says
/// `Handled::Again` while messages are left, and `left` counts them.
pub struct EnvelopeVTable<A: crate::Actor> {
    pub(crate) handle: unsafe fn(*mut Envelope<A>, &mut A, &mut Context<A>, bool) -> Handled,
    pub(crate) discard: unsafe fn(*mut Envelope<A>, bool) -> &'static str,
    pub(crate) free: unsafe fn(*mut Envelope<A>),
    /// What the node is: one `TypeId` per actor, message, handler kind and
    /// node shape. A sender compares it to find its own node or run of the
    /// same message at a mailbox's tail ([`tell_node`]); unlike the
    /// table's address, it can neither be shared by two kinds nor differ
    /// for one.
    pub(crate) kind: fn() -> TypeId,
    /// For a run only: how many of its messages were not taken yet. Other
    /// nodes hold one message.
    pub(crate) left: Option<unsafe fn(*mut Envelope<A>) -> u32>,
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
///     const VTABLE_RUN: Option<&'static EnvelopeVTable<A>> =
///         <A as Handles<Big, Immediate>>::VTABLE_RUN;
///     const VTABLE_RUN_SMALL: Option<&'static EnvelopeVTable<A>> =
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
    /// For a run of `tell`s (`mailbox.rs`, invariant 7); none for a message
    /// too large for runs, or an async handler.
    #[doc(hidden)]
    const VTABLE_RUN: Option<&'static EnvelopeVTable<Self>>;
    /// For a sender's first, small run of `tell`s to an actor.
    #[doc(hidden)]
    const VTABLE_RUN_SMALL: Option<&'static EnvelopeVTable<Self>>;
    /// Handles an `ask` without a node, on the thread that sends it
    /// (`ActorCell::ask_here`); none for an async handler, whose turn may
    /// outlast the call.
    #[doc(hidden)]
    const HANDLE_NOW: Option<HandleNow<Self, M>>;
}

/// The type of [`Handles::HANDLE_NOW`].
#[doc(hidden)]
pub type HandleNow<A, M> = fn(&mut A, M, &mut Context<A>) -> Answered<<M as Message>::Reply>;

/// What a handler run by [`Handles::HANDLE_NOW`] did with its ask.
#[doc(hidden)]
pub enum Answered<R> {
    /// Returned the reply.
    Now(R),
    /// Took the reply over ([`Context::defer_reply`], or a stash with its
    /// reply): it comes through this channel.
    Later(oneshot::Receiver<R>),
}

/// The seal of [`Handles`]: a public trait in a private module, so no
/// crate outside this one can name it, let alone implement it.
mod sealed {
    pub trait Sealed<M, K> {}
}

impl<A: Handler<M>, M: Message> sealed::Sealed<M, Immediate> for A {}
impl<A: AsyncHandler<M>, M: Message> sealed::Sealed<M, Awaiting> for A {}

impl<A: Handler<M>, M: Message> Handles<M, Immediate> for A {
    const HANDLE_NOW: Option<HandleNow<A, M>> = Some(handle_now::<A, M>);
    const VTABLE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, NoReply, false>,
        discard: discard::<A, M, NoReply, false>,
        free: free::<A, M, NoReply, false>,
        kind: TypeId::of::<(A, M, Immediate, [(); 0])>,
        left: None,
    };
    const VTABLE_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, NoReply, true>,
        discard: discard::<A, M, NoReply, true>,
        free: free::<A, M, NoReply, true>,
        kind: TypeId::of::<(A, M, Immediate, [(); 1])>,
        left: None,
    };
    const VTABLE_ASK: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, ReplyTo<M::Reply>, false>,
        discard: discard::<A, M, ReplyTo<M::Reply>, false>,
        free: free::<A, M, ReplyTo<M::Reply>, false>,
        kind: TypeId::of::<(A, M, Immediate, [(); 2])>,
        left: None,
    };
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_sync::<A, M, ReplyTo<M::Reply>, true>,
        discard: discard::<A, M, ReplyTo<M::Reply>, true>,
        free: free::<A, M, ReplyTo<M::Reply>, true>,
        kind: TypeId::of::<(A, M, Immediate, [(); 3])>,
        left: None,
    };
    const VTABLE_RUN: Option<&'static EnvelopeVTable<A>> = if runs_fit::<A, M>() {
        Some(&EnvelopeVTable {
            handle: handle_run::<A, M, true>,
            discard: discard_run::<A, M, true>,
            free: free_run::<A, M, true>,
            kind: TypeId::of::<(A, M, Immediate, [(); 4])>,
            left: Some(left_in_run::<A, M, true>),
        })
    } else {
        None
    };
    const VTABLE_RUN_SMALL: Option<&'static EnvelopeVTable<A>> = if runs_fit::<A, M>() {
        Some(&EnvelopeVTable {
            handle: handle_run::<A, M, false>,
            discard: discard_run::<A, M, false>,
            free: free_run::<A, M, false>,
            kind: TypeId::of::<(A, M, Immediate, [(); 5])>,
            left: Some(left_in_run::<A, M, false>),
        })
    } else {
        None
    };
}

impl<A: AsyncHandler<M>, M: Message> Handles<M, Awaiting> for A {
    const HANDLE_NOW: Option<HandleNow<A, M>> = None;
    const VTABLE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, NoReply, false>,
        discard: discard::<A, M, NoReply, false>,
        free: free::<A, M, NoReply, false>,
        kind: TypeId::of::<(A, M, Awaiting, [(); 0])>,
        left: None,
    };
    const VTABLE_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, NoReply, true>,
        discard: discard::<A, M, NoReply, true>,
        free: free::<A, M, NoReply, true>,
        kind: TypeId::of::<(A, M, Awaiting, [(); 1])>,
        left: None,
    };
    const VTABLE_ASK: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, ReplyTo<M::Reply>, false>,
        discard: discard::<A, M, ReplyTo<M::Reply>, false>,
        free: free::<A, M, ReplyTo<M::Reply>, false>,
        kind: TypeId::of::<(A, M, Awaiting, [(); 2])>,
        left: None,
    };
    const VTABLE_ASK_ALONE: &'static EnvelopeVTable<A> = &EnvelopeVTable {
        handle: handle_async::<A, M, ReplyTo<M::Reply>, true>,
        discard: discard::<A, M, ReplyTo<M::Reply>, true>,
        free: free::<A, M, ReplyTo<M::Reply>, true>,
        kind: TypeId::of::<(A, M, Awaiting, [(); 3])>,
        left: None,
    };
    // An async handler's messages never go in runs: a handler suspended
    // in the middle of a run would have to be resumed and the run taken
    // up again.
    const VTABLE_RUN: Option<&'static EnvelopeVTable<A>> = None;
    const VTABLE_RUN_SMALL: Option<&'static EnvelopeVTable<A>> = None;
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
    build_inline(msg, reply, vtable, alone)
}

/// [`build`], inlined into its caller.
#[inline(always)]
fn build_inline<A: crate::Actor, M: Message, R>(
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

/// A run of `tell`s of one message type from one sender (`mailbox.rs`,
/// invariant 7): [`RunHead`], then [`run_capacity`] slots, then the
/// consumer's [`RunTaken`]. Always carved
/// from the sender's slab and handled from the mailbox, one message per
/// pop. A sender's first run to an actor is small (`LARGE` unset): many
/// actors get a few messages at once (a parent the results of its
/// children), and a full-size run for each would take the room of many
/// nodes; only a sender that filled a run starts large ones.
#[repr(C)]
struct RunHead<A: crate::Actor> {
    head: Envelope<A>,
    count: RunCount,
}

/// The consumer's counts of a run, behind its slots: the consumer writes
/// them at every take, and in the head's line they would take that line
/// away from the sender that links its next node there, while the
/// consumer waits for that link (decision 0053). Behind the slots they
/// share a line only with slots that are written before the close.
#[repr(C)]
struct RunTaken {
    /// How many messages were taken.
    taken: u32,
    /// How many it holds, fixed at its close (the first take).
    end: u32,
}

/// A run starts a cache line: its head's line is shared by no node before
/// it.
const RUN_ALIGN: usize = 64;

/// One message of a run.
#[repr(C)]
struct RunSlot<M> {
    msg: M,
    sender: SenderSpan,
}

/// Bytes of messages a run holds: a run of `u64`s holds 64 of them in 544
/// bytes, 576 with the alignment, 9 bytes a message (decision 0053).
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

/// Where a run's [`RunTaken`] lies.
const fn run_taken_at<A: crate::Actor, M, const LARGE: bool>() -> usize {
    let end =
        run_slots_at::<A, M>() + run_capacity::<M, LARGE>() * std::mem::size_of::<RunSlot<M>>();
    let align = std::mem::align_of::<RunTaken>();
    (end + align - 1) & !(align - 1)
}

/// The layout of a run of `M` for `A`.
const fn run_layout<A: crate::Actor, M, const LARGE: bool>() -> Layout {
    let size = run_taken_at::<A, M, LARGE>() + std::mem::size_of::<RunTaken>();
    let slot = std::mem::align_of::<RunSlot<M>>();
    match Layout::from_size_align(size, if RUN_ALIGN > slot { RUN_ALIGN } else { slot }) {
        Ok(layout) => layout,
        Err(_) => panic!("a run's size is at most a few KiB and its alignment a power of two"),
    }
}

/// Whether `tell`s of `M` to `A` may go in runs: a run holds enough of
/// them, fits a slab, and a `tell`'s own node lies in a slab too (so a
/// sender can tell its own nodes by their slab, `nodes.rs`).
const fn runs_fit<A: crate::Actor, M: Message>() -> bool {
    let layout = run_layout::<A, M, true>();
    run_capacity::<M, true>() >= RUN_SLOTS_MIN
        && layout.size() <= nodes::MAX_RUN
        && layout.align() <= 64
        && matches!(placement::<A, M, NoReply>(false), Placement::Slab)
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

/// The consumer's counts of the run `p`.
///
/// # Safety
/// `p` is a run of `M` for `A` of this size (its memory in place).
#[inline]
unsafe fn run_taken<A: crate::Actor, M, const LARGE: bool>(p: *mut Envelope<A>) -> *mut RunTaken {
    // SAFETY: inside the run's allocation (contract and `run_layout`).
    unsafe { (p as *mut u8).add(run_taken_at::<A, M, LARGE>()).cast() }
}

/// A new run holding `msg` in its first slot. The caller owns it until it
/// is pushed.
fn build_run<A, M, K, const LARGE: bool>(
    queue: &Queue,
    vtable: &'static EnvelopeVTable<A>,
    msg: M,
) -> *mut Envelope<A>
where
    A: Handles<M, K>,
    M: Message,
{
    let p = nodes::alloc(run_layout::<A, M, LARGE>(), Placement::Slab) as *mut RunHead<A>;
    // SAFETY: fresh memory with the run's layout; field by field as in
    // `build`; slot 0 is inside it.
    unsafe {
        std::ptr::addr_of_mut!((*p).head).write(Envelope {
            link: Link::new(),
            vtable,
        });
        std::ptr::addr_of_mut!((*p).count).write(RunCount::new());
        run_taken::<A, M, LARGE>(p.cast()).write(RunTaken { taken: 0, end: 0 });
        let slot = run_slot::<A, M>(p.cast(), 0);
        std::ptr::addr_of_mut!((*slot).msg).write(msg);
        std::ptr::addr_of_mut!((*slot).sender).write(sender_span());
    }
    // Carved just now from this thread's slab, which is open.
    nodes::remember(p as *mut u8, queue.key());
    p.cast()
}

/// Takes the next message out of a run the mailbox handed out, closing
/// the run at the first (`mailbox.rs`, invariant 7); `true` with it if
/// messages are left after it.
///
/// # Safety
/// `p` is a queued run of `M` for `A`, handed out by the mailbox to the
/// caller, its consumer, with messages left.
#[inline]
unsafe fn take_from_run<A: crate::Actor, M: Message, const LARGE: bool>(
    p: *mut Envelope<A>,
) -> (M, SenderSpan, bool) {
    let run = p as *mut RunHead<A>;
    // SAFETY: a live run (contract); `taken` and `end` are the consumer's,
    // and the sender only reads `count` (an atomic) and the head. Each
    // slot below `end` was published by the close's acquire and is read
    // once.
    unsafe {
        let counts = run_taken::<A, M, LARGE>(p);
        let taken = (*counts).taken;
        let end = if taken == 0 {
            let end = (*run).count.close();
            (*counts).end = end;
            end
        } else {
            (*counts).end
        };
        debug_assert!(taken < end);
        (*counts).taken = taken + 1;
        let at = run_slot::<A, M>(p, taken);
        let msg = std::ptr::addr_of!((*at).msg).read();
        let sender = std::ptr::addr_of!((*at).sender).read();
        (msg, sender, taken + 1 < end)
    }
}

/// The `left` of a run's vtable.
///
/// # Safety
/// `p` is a run of `M` for `A` still queued or the dummy, and the caller
/// its consumer.
unsafe fn left_in_run<A: crate::Actor, M: Message, const LARGE: bool>(p: *mut Envelope<A>) -> u32 {
    let run = p as *mut RunHead<A>;
    // SAFETY: as in `take_from_run`.
    unsafe {
        let counts = run_taken::<A, M, LARGE>(p);
        let taken = (*counts).taken;
        if taken == 0 {
            (*run).count.published()
        } else {
            (*counts).end - taken
        }
    }
}

/// The `handle` of a run's vtable: handles its next message.
///
/// # Safety
/// As for [`take_from_run`], and `actor` and `ctx` as for
/// [`Envelope::handle`].
unsafe fn handle_run<A: Handler<M>, M: Message, const LARGE: bool>(
    p: *mut Envelope<A>,
    actor: &mut A,
    ctx: &mut Context<A>,
    keep: bool,
) -> Handled {
    debug_assert!(keep, "a run is only handled from the mailbox");
    // Taken before the handler runs: if it panics, the run still says
    // what is left, and the cell hands the rest out again (`cell.rs`).
    // SAFETY: contract.
    let (msg, _sender, more) = unsafe { take_from_run::<A, M, LARGE>(p) };
    #[cfg(feature = "tracing")]
    let _span = enter_handling(handling_span!(_sender, "handle", ctx, M), _sender);
    A::handle(actor, msg, ctx);
    if more {
        Handled::Again
    } else {
        Handled::Done
    }
}

/// The `discard` of a run's vtable: drops its next message.
///
/// # Safety
/// As for [`take_from_run`].
unsafe fn discard_run<A: crate::Actor, M: Message, const LARGE: bool>(
    p: *mut Envelope<A>,
    keep: bool,
) -> &'static str {
    debug_assert!(keep, "a run is only discarded from the mailbox");
    // SAFETY: contract.
    drop(unsafe { take_from_run::<A, M, LARGE>(p) });
    std::any::type_name::<M>()
}

/// The `free` of a run's vtable.
///
/// # Safety
/// As for [`free`]: a run whose messages were all taken.
unsafe fn free_run<A: crate::Actor, M: Message, const LARGE: bool>(p: *mut Envelope<A>) {
    // SAFETY: runs are always carved from a slab with this layout
    // (`build_run`).
    unsafe { nodes::free(p as *mut u8, run_layout::<A, M, LARGE>(), Placement::Slab) };
}

/// What a `tell` makes of its message: [`tell_node`].
pub(crate) enum Told<A: crate::Actor> {
    /// It went into this thread's open run in the mailbox: nothing to
    /// push, and nobody to wake (`mailbox.rs`, invariant 7).
    Appended,
    /// A node (of one message, or a new run) to push.
    Node(*mut Envelope<A>),
}

/// Places a `tell` of `msg` to the actor whose mailbox is `queue`. Only
/// while this thread's messages pile up somewhere (`nodes::TAIL_LOOKS`)
/// does it look for a run: the one it added to last, if that is for this
/// actor and may be joined, else what lies at the tail. If that is its run
/// of the same message and the actor has not reached it, the message goes
/// in; if the actor reached it, or it is its last node of the same
/// message, or its full run, this one starts a run ([`after_close`]).
/// Otherwise it gets a node of its own.
#[inline(always)]
pub(crate) fn tell_node<A, M, K>(queue: &Queue, msg: M) -> Told<A>
where
    A: Handles<M, K>,
    M: Message,
{
    let (Some(run), Some(small)) = (A::VTABLE_RUN, A::VTABLE_RUN_SMALL) else {
        return Told::Node(envelope::<A, M, K>(msg, None));
    };
    if nodes::TAIL_LOOKS.with(Cell::get) == 0 {
        // The common case, a node of its own: built in place, as a call
        // would cost the send a frame of its own.
        return Told::Node(build_inline::<A, M, NoReply>(
            msg,
            NoReply,
            A::VTABLE,
            false,
        ));
    }
    // The common case while messages pile up: this thread's last run is
    // for this actor, and it is still the tail. Only the tail says so: a
    // run whose link is still null may have a push behind it whose link
    // is not written yet, and behind that one a finished push of this
    // sender's (from this thread, or from another that its task moved
    // from), which an append would overtake. A swap of the tail after the
    // run's push, ordered before this `tell`, is seen here (the tail never
    // comes back to a node it left: a node is pushed once). So a sender
    // appends only where its push would have gone (`mailbox.rs`,
    // invariant 7).
    let remembered = nodes::remembered_for(queue.key());
    if !remembered.is_null() {
        if queue.tail_for_sender() != remembered as *mut Link {
            // Another's message is behind the run, or the actor took it
            // and went idle.
            return looked((Told::Node(envelope::<A, M, K>(msg, None)), Seen::Nothing));
        }
        let node = remembered as *mut Envelope<A>;
        // SAFETY: a remembered node lies in a slab this thread has not
        // sealed (`nodes.rs`), as in `tell_at_tail`.
        let vtable = unsafe { (*node).vtable };
        // Equal tables have equal `kind`s, so the same address is the same
        // kind (a copy of a table elsewhere only sends it the long way).
        if std::ptr::eq(vtable, run) {
            // SAFETY: a run of `M` for `A` of this size in this thread's
            // open slab, which only this thread appends to.
            return looked(unsafe { append::<A, M, K, true>(queue, node, run, msg) });
        }
        if std::ptr::eq(vtable, small) {
            // SAFETY: as above.
            return looked(unsafe { append::<A, M, K, false>(queue, node, run, msg) });
        }
    }
    tell_at_tail::<A, M, K>(queue, msg)
}

/// [`tell_node`]'s look at `tail`, the mailbox's, when it is not the run
/// this thread added to last. Out of line: a `tell` that does not look
/// stays the code it was before runs.
#[inline(never)]
fn tell_at_tail<A, M, K>(queue: &Queue, msg: M) -> Told<A>
where
    A: Handles<M, K>,
    M: Message,
{
    let (Some(run), Some(small)) = (A::VTABLE_RUN, A::VTABLE_RUN_SMALL) else {
        return Told::Node(envelope::<A, M, K>(msg, None));
    };
    let tail = queue.tail_for_sender();
    let seen = if tail.is_null() {
        (Told::Node(envelope::<A, M, K>(msg, None)), Seen::Idle)
    } else if nodes::in_open_slab(tail as *const u8) {
        let node = Envelope::<A>::from_link(tail);
        // SAFETY: the node lies in a slab this thread carved it from and
        // has not sealed, so its memory is in place even if its message
        // was taken and the node freed, and its head is as this thread
        // wrote it: every node in an `A`'s mailbox starts with an
        // `Envelope<A>`, and nothing writes a node's vtable after it is
        // built. The tables are statics.
        let kind = unsafe { ((*node).vtable.kind)() };
        if kind == (A::VTABLE.kind)() {
            (
                Told::Node(build_run::<A, M, K, false>(queue, small, msg)),
                Seen::Waiting,
            )
        } else if kind == (small.kind)() {
            // SAFETY: a run of `M` for `A` of this size in this thread's
            // open slab (above), which only this thread appends to.
            remember_appended(queue, node, unsafe {
                append::<A, M, K, false>(queue, node, run, msg)
            })
        } else if kind == (run.kind)() {
            // SAFETY: as above.
            remember_appended(queue, node, unsafe {
                append::<A, M, K, true>(queue, node, run, msg)
            })
        } else {
            (Told::Node(envelope::<A, M, K>(msg, None)), Seen::Nothing)
        }
    } else {
        // In a slab this thread sealed lately: likely its own message
        // still waiting (a sender telling many actors in turn comes back
        // to each after a slab or more), which its next look will find in
        // an open slab.
        let seen = if nodes::carved_here_lately(tail as *const u8) {
            Seen::Waiting
        } else {
            Seen::Nothing
        };
        (Told::Node(envelope::<A, M, K>(msg, None)), seen)
    };
    looked(seen)
}

/// A run found at the tail that took `told`'s message becomes the one this
/// thread remembers for the mailbox, so its next `tell` there finds it
/// without asking which slab the tail lies in. A run that [`append`] starts
/// remembers itself ([`build_run`]), and a remembered run needs no telling
/// again: so only here, off the appends that follow.
#[inline]
fn remember_appended<A: crate::Actor>(
    queue: &Queue,
    node: *mut Envelope<A>,
    told: (Told<A>, Seen),
) -> (Told<A>, Seen) {
    if matches!(told.0, Told::Appended) {
        // The run lies in this thread's open slab (the caller's look).
        nodes::remember(node as *mut u8, queue.key());
    }
    told
}

/// Counts a look at the tail ([`nodes::TAIL_LOOKS`]) by what it found.
#[inline]
fn looked<A: crate::Actor>((told, seen): (Told<A>, Seen)) -> Told<A> {
    nodes::TAIL_LOOKS.with(|looks| {
        let left = match seen {
            Seen::Growing => nodes::LOOKS_PER_SIGN,
            Seen::Waiting => looks.get(),
            Seen::Idle => looks.get().saturating_sub(LOOKS_PER_IDLE),
            Seen::Nothing => looks.get().saturating_sub(LOOKS_PER_MISS),
            Seen::Reached => looks.get().saturating_sub(LOOKS_PER_REACHED),
        };
        looks.set(left);
        if left == 0 {
            // Nothing of this thread's waits any more: its slabs need not
            // stay open (`nodes.rs`).
            nodes::keep_slabs_open(false);
        }
    });
    told
}

/// The looks a look that finds another's message at the tail spends: all
/// of them. An actor many threads send to shows each of them the others'
/// messages at its tail, where a run of one sender's would hardly grow,
/// and each look there loads the line they all swap.
const LOOKS_PER_MISS: u32 = nodes::LOOKS_PER_SIGN;
/// The looks a look that finds an idle actor spends: 16 such in a row end
/// the looking. A sender telling many actors in turn finds them idle until
/// its first messages reach them; one whose messages to an actor that keeps
/// up look piled up (a slab's count lags while the receiver's frees of it
/// are batched) finds it idle at every message, and each look costs it a
/// load.
const LOOKS_PER_IDLE: u32 = nodes::LOOKS_PER_SIGN / 16;

/// The looks a run closed small spends ([`after_close`]): 16 such in a
/// row, with no append between them, end the looking.
const LOOKS_PER_REACHED: u32 = nodes::LOOKS_PER_SIGN / 16;

/// What a look at the tail found ([`tell_at_tail`]).
enum Seen {
    /// This thread's run there grows, or filled up: its next tells look
    /// again, as many times as a sign buys.
    Growing,
    /// This thread's message waits there (a node, which starts a run, or
    /// one in a slab it sealed lately): no look spent, none bought, since
    /// two senders taking turns at the tail see that too.
    Waiting,
    /// An idle actor (or one that waits), whose mailbox is not appended
    /// to: [`LOOKS_PER_IDLE`] looks spent.
    Idle,
    /// Another's message: [`LOOKS_PER_MISS`] looks spent.
    Nothing,
    /// The actor reached this thread's run almost as soon as it was
    /// pushed: it may keep up, and then a run gains nothing (its messages
    /// would be taken as they come, with the run's count a line both
    /// threads write). [`LOOKS_PER_REACHED`] looks spent: a slab's count
    /// can look piled up while the receiver's frees of it are still
    /// batched, so a sign alone does not keep a sender appending to runs
    /// that are closed small.
    Reached,
}

/// Appends `msg` to the run `node` if the actor has not reached it and it
/// has room; starts a large run if it is full.
///
/// # Safety
/// `node` is a run of `M` for `A` of this size, in this thread's open slab
/// (`nodes.rs`); this thread is its sender.
#[inline]
unsafe fn append<A, M, K, const LARGE: bool>(
    queue: &Queue,
    node: *mut Envelope<A>,
    large: &'static EnvelopeVTable<A>,
    msg: M,
) -> (Told<A>, Seen)
where
    A: Handles<M, K>,
    M: Message,
{
    let run = node as *mut RunHead<A>;
    // SAFETY: contract: the count is in place, and an atomic.
    let count = match unsafe { (*run).count.open_count() } {
        Ok(count) => count,
        Err(held) => return after_close::<A, M, K>(queue, msg, held),
    };
    if count as usize >= run_capacity::<M, LARGE>() {
        return (
            Told::Node(build_run::<A, M, K, true>(queue, large, msg)),
            Seen::Growing,
        );
    }
    // SAFETY: slot `count` is below the capacity and not published, so
    // nobody reads it; if the append fails it never was, and the message
    // is read back out once.
    unsafe {
        let slot = run_slot::<A, M>(node, count);
        std::ptr::addr_of_mut!((*slot).msg).write(msg);
        std::ptr::addr_of_mut!((*slot).sender).write(sender_span());
        if (*run).count.append(count) {
            return (Told::Appended, Seen::Growing);
        }
        // The span (a `tracing::Span` with the feature on) is dropped.
        let _sender = std::ptr::addr_of!((*slot).sender).read();
        let msg = std::ptr::addr_of!((*slot).msg).read();
        after_close::<A, M, K>(queue, msg, count)
    }
}

/// A `tell` whose run the actor closed while it held `held` messages:
/// `msg` starts the next run. The receiver caught up with this sender,
/// which says little about the messages to come: a receiver that was
/// behind and just reached the run the sender was filling (the run held
/// many) is behind again as soon as the sender, appending, outpaces it
/// (decision 0060). Only a receiver that reaches every run almost at once
/// keeps up, and each such close ([`Seen::Reached`]) spends looks until
/// the sender goes back to a node per message. The run starts small, as
/// every run does: a large one would hold a slab's space for messages
/// that another sender's push behind it may cut short.
#[inline(never)]
fn after_close<A, M, K>(queue: &Queue, msg: M, held: u32) -> (Told<A>, Seen)
where
    A: Handles<M, K>,
    M: Message,
{
    let seen = if held >= RUN_BEHIND {
        Seen::Waiting
    } else {
        Seen::Reached
    };
    let Some(small) = A::VTABLE_RUN_SMALL else {
        return (Told::Node(envelope::<A, M, K>(msg, None)), seen);
    };
    (
        Told::Node(build_run::<A, M, K, false>(queue, small, msg)),
        seen,
    )
}

/// The messages a run held when the actor closed it, from which its
/// sender takes the actor for one that was behind ([`after_close`]).
const RUN_BEHIND: u32 = 16;

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

    /// How many messages of a node the mailbox handed out were not taken
    /// yet: only a run's can be more than none.
    ///
    /// # Safety
    /// `p` is a node of this actor type the mailbox handed out to the
    /// caller, its consumer, and not retired yet.
    #[inline]
    pub(crate) unsafe fn left_after_take(p: *mut Envelope<A>) -> u32 {
        // SAFETY: a live node (contract); a run's `left` reads only its
        // counts.
        unsafe { (*p).vtable.left.map_or(0, |left| left(p)) }
    }

    /// How many messages a queued node holds: one, or a run's.
    ///
    /// # Safety
    /// `p` is a node of this actor type queued in the caller's mailbox,
    /// whose consumer the caller is.
    pub(crate) unsafe fn queued_messages(p: *mut Envelope<A>) -> u32 {
        // SAFETY: as for `left_after_take`.
        unsafe { (*p).vtable.left.map_or(1, |left| left(p)) }
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
    /// `*mut Option<ReplyTo<M::Reply>>`, or for an ask handled without a
    /// node (`direct`) `*mut Option<oneshot::Receiver<M::Reply>>`, where
    /// the channel is made when the handler takes the reply; null when no
    /// `ask` is handled.
    slot: *mut (),
    /// See `slot`.
    direct: bool,
    /// The cell whose handler runs (`Context::cell_addr`).
    cell: *const (),
    /// `TypeId` of `M`, the message being handled.
    msg: Option<TypeId>,
}

impl ReplySlot {
    const NONE: ReplySlot = ReplySlot {
        slot: std::ptr::null_mut(),
        direct: false,
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
        Self::enter(ReplySlot {
            slot: slot as *mut Option<ReplyTo<M::Reply>> as *mut (),
            direct: false,
            cell,
            msg: Some(TypeId::of::<M>()),
        })
    }

    /// For an ask handled without a node: the handler that takes its reply
    /// makes the channel, whose receiving end goes to `later`.
    fn direct<M: Message>(
        cell: *const (),
        later: &mut Option<oneshot::Receiver<M::Reply>>,
    ) -> Self {
        Self::enter(ReplySlot {
            slot: later as *mut Option<oneshot::Receiver<M::Reply>> as *mut (),
            direct: true,
            cell,
            msg: Some(TypeId::of::<M>()),
        })
    }

    fn enter(current: ReplySlot) -> Self {
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
        if current.direct {
            // SAFETY: as below, set by `ReplySlotGuard::direct::<M>`, so
            // the slot is an `Option<oneshot::Receiver<M::Reply>>`.
            let later = unsafe { &mut *(current.slot as *mut Option<oneshot::Receiver<M::Reply>>) };
            if later.is_some() {
                // Taken already.
                return None;
            }
            let (tx, rx) = oneshot::channel();
            *later = Some(rx);
            return Some(tx);
        }
        // SAFETY: the pointer was set by `ReplySlotGuard::set::<M>` (same
        // `TypeId`, so the slot's type is `Option<ReplyTo<M::Reply>>`) for
        // a slot in the dispatch frame that outlives the guard, and the
        // guard takes it out of the thread-local before that frame returns.
        // The frame does not touch the slot while the handler runs.
        unsafe { (*(current.slot as *mut Option<ReplyTo<M::Reply>>)).take() }
    })
}

/// [`Handles::HANDLE_NOW`] of a [`Handler`]: the handler called with the
/// message itself, its reply returned rather than sent, unless the handler
/// takes the reply over; then it comes through a channel made when it is
/// taken. The caller holds the actor's consumer role.
fn handle_now<A: Handler<M>, M: Message>(
    actor: &mut A,
    msg: M,
    ctx: &mut Context<A>,
) -> Answered<M::Reply> {
    let _sender = sender_span();
    #[cfg(feature = "tracing")]
    let _span = enter_handling(handling_span!(_sender, "handle", ctx, M), _sender);
    let mut later = None;
    let guard = ReplySlotGuard::direct::<M>(ctx.cell_addr(), &mut later);
    let out = A::handle(actor, msg, ctx);
    drop(guard);
    match later {
        None => Answered::Now(out),
        Some(rx) => Answered::Later(rx),
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::primitives::mailbox::Pop;
    use std::cell::RefCell;

    struct Receiver;
    impl crate::Actor for Receiver {}

    thread_local! {
        static DROPPED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    }

    /// A message whose drop is recorded, in order.
    struct Probe(u64);
    impl Drop for Probe {
        fn drop(&mut self) {
            DROPPED.with(|d| d.borrow_mut().push(self.0));
        }
    }
    impl Message for Probe {
        type Reply = ();
    }
    impl Handler<Probe> for Receiver {
        fn handle(&mut self, _: Probe, _: &mut Context<Self>) {}
    }

    /// Tells `n` to `queue`, whose role the caller holds; how many were
    /// appended to a run.
    fn tell(queue: &Queue, n: std::ops::Range<u64>) -> usize {
        let mut appended = 0;
        for i in n {
            match tell_node::<Receiver, Probe, Immediate>(queue, Probe(i)) {
                Told::Appended => appended += 1,
                // SAFETY: a fresh node; the role is held, so the push does
                // not take it.
                Told::Node(env) => assert!(!unsafe { queue.push(Envelope::as_link(env)) }),
            }
        }
        appended
    }

    /// Discards everything queued, one message at a time as the cell does;
    /// how many nodes held them.
    fn drain(queue: &Queue) -> usize {
        let mut nodes = 0;
        // SAFETY: the test holds the role; every node is a `Receiver`'s,
        // and each is retired once.
        unsafe {
            let mut consumer = queue.consumer();
            loop {
                let node = match consumer.pop() {
                    Pop::Data { node, retired } => {
                        if !retired.is_null() {
                            Envelope::<Receiver>::free_taken(Envelope::from_link(retired));
                        }
                        node
                    }
                    Pop::Again(node) => node,
                    _ => break,
                };
                let env = Envelope::<Receiver>::from_link(node);
                Envelope::discard_queued(env);
                if Envelope::left_after_take(env) > 0 {
                    consumer.repeat(node);
                } else {
                    nodes += 1;
                }
            }
        }
        nodes
    }

    fn free_dummy(queue: &Queue) {
        // SAFETY: everything was popped; the queue is not used again.
        let dummy = unsafe { queue.take_dummy() };
        if !dummy.is_null() {
            // SAFETY: its messages were all taken.
            unsafe { Envelope::<Receiver>::free_taken(Envelope::from_link(dummy)) };
        }
    }

    fn dropped() -> Vec<u64> {
        DROPPED.with(|d| std::mem::take(&mut *d.borrow_mut()))
    }

    /// Once this thread's messages are seen to pile up, its tells to an
    /// actor that has not reached them go into runs, and come out one at
    /// a time, in the order sent, each once.
    #[test]
    fn piled_up_tells_go_in_runs_and_come_out_in_order() {
        nodes::TAIL_LOOKS.with(|l| l.set(nodes::LOOKS_PER_SIGN));
        nodes::keep_slabs_open(true);
        let queue = Queue::new();
        const N: u64 = 1_000;
        let appended = tell(&queue, 0..N);
        // One node, a small run, then large runs of 64.
        assert!(appended as u64 >= N - 2 - N / 64 - 1, "{appended} appended");
        let nodes = drain(&queue);
        assert_eq!(nodes, N as usize - appended, "one node per run or message");
        free_dummy(&queue);
        assert_eq!(dropped(), (0..N).collect::<Vec<_>>());
    }

    /// A run the consumer has taken from takes no more messages: the next
    /// tell starts a run behind it, and order holds.
    #[test]
    fn a_run_reached_by_the_consumer_takes_no_more() {
        nodes::TAIL_LOOKS.with(|l| l.set(nodes::LOOKS_PER_SIGN));
        nodes::keep_slabs_open(true);
        let queue = Queue::new();
        assert_eq!(tell(&queue, 0..5), 3, "a node, then a run of four");
        // SAFETY: the test holds the role; the nodes are `Receiver`'s.
        unsafe {
            let mut consumer = queue.consumer();
            let Pop::Data { node, retired } = consumer.pop() else {
                panic!("a node is queued");
            };
            assert!(retired.is_null());
            Envelope::discard_queued(Envelope::<Receiver>::from_link(node));
            let Pop::Data { node, retired } = consumer.pop() else {
                panic!("the run is queued");
            };
            Envelope::<Receiver>::free_taken(Envelope::from_link(retired));
            let run = Envelope::<Receiver>::from_link(node);
            assert_eq!(Envelope::queued_messages(run), 4);
            Envelope::discard_queued(run);
            assert_eq!(Envelope::left_after_take(run), 3);
            consumer.repeat(node);
        }
        assert_eq!(dropped(), vec![0, 1]);
        // The run is closed: 5 starts a run behind it (a message let into
        // the closed run would never come out), which 6 and 7 join.
        assert_eq!(tell(&queue, 5..8), 2);
        assert_eq!(drain(&queue), 2, "the closed run, then the new one");
        free_dummy(&queue);
        assert_eq!(dropped(), (2..8).collect::<Vec<_>>());
    }

    /// A receiver that was behind and caught up with the run its sender
    /// was filling does not end the sender's runs: every round of 32 tells
    /// after the first is a new small run, then a large one (8 and 64
    /// `u64`s), and 30 appends, however often the receiver catches up
    /// (decision 0060).
    #[test]
    fn a_receiver_that_catches_up_leaves_its_sender_runs() {
        nodes::TAIL_LOOKS.with(|l| l.set(nodes::LOOKS_PER_SIGN));
        nodes::keep_slabs_open(true);
        let queue = Queue::new();
        tell(&queue, 0..32);
        drain(&queue);
        for round in 1..100 {
            let appended = tell(&queue, round * 32..(round + 1) * 32);
            assert_eq!(appended, 30, "round {round}");
            assert_eq!(drain(&queue), 2, "round {round}: two runs");
        }
        free_dummy(&queue);
        assert_eq!(dropped(), (0..100 * 32).collect::<Vec<_>>());
    }

    /// A receiver that takes each message as it comes (every run closed
    /// while it holds one) ends the looking: the sender goes back to a
    /// node per message, the cheapest for one that keeps up.
    #[test]
    fn a_receiver_that_keeps_up_ends_the_runs() {
        nodes::TAIL_LOOKS.with(|l| l.set(nodes::LOOKS_PER_SIGN));
        nodes::keep_slabs_open(true);
        let queue = Queue::new();
        for i in 0..40 {
            assert_eq!(tell(&queue, i..i + 1), 0);
            drain(&queue);
        }
        assert_eq!(nodes::TAIL_LOOKS.with(Cell::get), 0);
        free_dummy(&queue);
        assert_eq!(dropped(), (0..40).collect::<Vec<_>>());
    }

    /// A sender whose looks ran out, as in the test above, though it once
    /// saw its messages pile up, probes the tail again after
    /// [`nodes::SEALS_PER_PROBE`] slabs, and once its receiver falls
    /// behind its tells go into runs again, though no slab of its gave a
    /// sign since (every node was freed before its slab was sealed).
    #[test]
    fn a_sender_back_on_nodes_finds_runs_again() {
        let queue = Queue::new();
        let mut sent = 0;
        // Piled up: a slab sealed with its nodes queued is the sign.
        while nodes::TAIL_LOOKS.with(Cell::get) == 0 {
            tell(&queue, sent..sent + 1);
            sent += 1;
        }
        drain(&queue);
        // The receiver keeps up until the looks run out.
        while nodes::TAIL_LOOKS.with(Cell::get) != 0 {
            assert_eq!(tell(&queue, sent..sent + 1), 0);
            drain(&queue);
            sent += 1;
        }
        let back_on_nodes = sent;
        while nodes::TAIL_LOOKS.with(Cell::get) == 0 {
            assert!(sent < back_on_nodes + 100_000, "no probe");
            assert_eq!(tell(&queue, sent..sent + 1), 0);
            drain(&queue);
            sent += 1;
        }
        // The receiver stops keeping up: the probe's looks find this
        // thread's message still queued and start a run.
        let appended = tell(&queue, sent..sent + 100);
        assert!(appended >= 100 - 4, "{appended} of 100 appended");
        drain(&queue);
        free_dummy(&queue);
        assert_eq!(dropped(), (0..sent + 100).collect::<Vec<_>>());
    }

    /// Without a sign that its messages pile up a thread never looks at
    /// the tail: every tell is a node of its own.
    #[test]
    fn without_a_sign_every_tell_is_a_node() {
        nodes::TAIL_LOOKS.with(|l| l.set(0));
        let queue = Queue::new();
        assert_eq!(tell(&queue, 0..100), 0);
        assert_eq!(drain(&queue), 100);
        free_dummy(&queue);
        assert_eq!(dropped(), (0..100).collect::<Vec<_>>());
    }
}
