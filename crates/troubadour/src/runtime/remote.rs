//! The seam for the remote layer: how an `ActorRef` reaches an actor in
//! another process without the local fast path knowing.
//!
//! This module is for extension crates (`troubadour-remote` first); an
//! application never needs it. It offers four things:
//!
//! * **Proxies.** [`proxy`] makes an ordinary [`ActorRef<A>`] for an actor
//!   of another node. Its cell carries the `HELD` bit, which `tell` already
//!   tests together with `CLOSED` (one load, one branch, as for every
//!   send), so a proxy costs local sends nothing; only on the rare path does
//!   a send look for the cell's [`Route`] and hand it the message while its
//!   type is still known ([`Outgoing`]). The route encodes it (or refuses,
//!   and the caller gets its message back in a typed [`SendError`]).
//! * **Remote asks.** An `ask` to a proxy gives the route a
//!   [`ReplySender`], which ends the asker's wait with the reply or with a
//!   typed error ([`AskError::ConnectionLost`], [`AskError::Refused`]).
//! * **Signals.** Stop, kill, links, monitors and exits addressed to a proxy
//!   reach its route as an [`OutgoingSignal`]; what arrives from the network
//!   is applied to a local actor through a [`ControlRef`]. A local actor
//!   that links to or monitors a remote one, and a remote one that links to
//!   or monitors a local one, go through the local runtime's own machinery:
//!   the far end is a proxy ([`RemoteProcess`]), so exits and `Down`s
//!   propagate exactly as they do locally.
//! * **References in messages** (the `serde` feature): `ActorRef` and
//!   `Recipient` are serde types whose wire form a `RefCodec` of the
//!   remote layer decides.
//! * **Batching.** [`at_turn_end`] defers work (a connection's flush) to
//!   the end of the running actor turn, on the worker that ran it, so what
//!   one turn sends to a node leaves in one write.
//! * **Identity.** [`NodeId::remote`](crate::NodeId::remote) and
//!   [`ActorId::on`] name other processes' nodes and actors.
//!
//! [`SendError`]: crate::SendError
//! [`AskError::ConnectionLost`]: crate::AskError::ConnectionLost
//! [`AskError::Refused`]: crate::AskError::Refused

#[cfg(feature = "serde")]
mod refs;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use refs::{with_ref_codec, RefCodec, RefTarget, RemoteRecipient, Resolved, WireRef};

use crate::api::actor::{Actor, Handler, Message};
use crate::api::actor_ref::{ActorRef, Recipient};
use crate::api::context::Context;
use crate::api::error::AskError;
use crate::api::exit::{ActorId, Down, ExitReason, Exited};
use crate::runtime::cell::{ActorCell, CellConfig};
pub use crate::runtime::scheduler::{Arrival, TurnEnd};
use crate::runtime::signal::{ControlHandle, Signal, Watcher};
use crate::runtime::system::SystemHandle;
use std::any::{Any, TypeId};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Where a proxy's messages and signals go: one per peer node, made by the
/// remote layer. See the [module docs](self).
///
/// Both methods are called on the sender's thread, inside `tell`, `ask` or
/// the runtime's signal delivery, so they must not block for long: encode
/// into a buffer and hand it to a writer.
pub trait Route: Send + Sync + 'static {
    /// Takes one message for `message.to()`. `Ok` means the route has
    /// accepted it (and taken its [`ReplySender`], if any); the message
    /// itself may be left in `message`, encoded by reference, and is then
    /// dropped by the caller. `Err` hands the message back to the sender,
    /// inside a [`SendError`](crate::SendError) matching the refusal.
    fn send(&self, message: &mut Outgoing<'_>) -> Result<(), Refusal>;

    /// Takes one signal for the remote actor `to`.
    fn signal(&self, to: ActorId, signal: OutgoingSignal);

    /// Whether the remote actor may still be alive: `false` once its node
    /// was declared down, or the actor is known to have stopped. Backs
    /// [`ActorRef::is_alive`] for a proxy.
    fn is_alive(&self, to: ActorId) -> bool {
        let _ = to;
        true
    }

    /// Resolves when the queue a send to `to` would enter may have room
    /// again, after [`Refusal::Full`]: what `ActorRef::send(..).await`
    /// waits on before it tries again. The default resolves at once (a
    /// route that never refuses for room need not implement it).
    fn room(&self, to: ActorId) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let _ = to;
        Box::pin(std::future::ready(()))
    }
}

/// Defers `work` to the end of the actor turn running on this thread:
/// [`TurnEnd::turn_ended`] is called once, on this worker, after the
/// turn's handler returns (however many times the same `work` was deferred
/// during the turn), before the worker runs its next actor.
///
/// Returns `false`, and defers nothing, on a thread that is not one of the
/// runtime's workers (a plain thread, a tokio task, a blocking actor's
/// thread, a simulation's manual scheduling): the caller then does the work
/// another way, such as waking its own writer task.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use troubadour::prelude::*;
/// use troubadour::remote::{at_turn_end, TurnEnd};
///
/// #[derive(Default)]
/// struct Flush(AtomicUsize);
/// impl TurnEnd for Flush {
///     fn turn_ended(&self) { self.0.fetch_add(1, Ordering::SeqCst); }
/// }
///
/// struct Sender(Arc<dyn TurnEnd>);
/// impl Actor for Sender {}
/// struct Send3;
/// impl Message for Send3 { type Reply = bool; }
/// impl Handler<Send3> for Sender {
///     fn handle(&mut self, _: Send3, _: &mut Context<Self>) -> bool {
///         // Three sends in one turn, one flush after it.
///         (0..3).all(|_| at_turn_end(&self.0))
///     }
/// }
///
/// let system = ActorSystem::new();
/// let flush = Arc::new(Flush::default());
/// let sender = system.spawn(Sender(flush.clone()))?;
/// assert!(sender.ask(Send3).wait()?);
/// // The ask's reply was sent inside the turn; the flush runs right after
/// // the turn, which the asker may see a moment later: wait for it.
/// let start = std::time::Instant::now();
/// while flush.0.load(Ordering::SeqCst) == 0 {
///     assert!(start.elapsed().as_secs() < 30, "hang guard: the turn never ended");
///     std::thread::yield_now();
/// }
/// assert!(!at_turn_end(&(flush as Arc<dyn TurnEnd>)), "not a worker thread");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn at_turn_end(work: &Arc<dyn TurnEnd>) -> bool {
    crate::runtime::scheduler::defer_to_turn_end(work)
}

/// Lets the system's own I/O thread poll `socket` for data for a short
/// while before it sleeps, from now until the socket is closed
/// ([`ActorSystemBuilder::io_busy_poll`](crate::ActorSystemBuilder::io_busy_poll)):
/// data that arrives during the poll is read without waiting for the
/// kernel to wake the thread. Does nothing where the system runs on a
/// borrowed tokio runtime, where the poll is turned off, and off Linux.
///
/// For extension crates (the remote layer registers each connection's
/// socket once its handshake is done); an application never calls it.
///
/// ```
/// use troubadour::{remote, ActorSystem};
/// let system = ActorSystem::new();
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// remote::busy_poll(&system, &socket);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(unix)]
pub fn busy_poll(system: &SystemHandle, socket: &impl std::os::fd::AsFd) {
    system.core.busy_poll.watch(socket.as_fd());
}

/// Runs `deliver` (which tells or asks local actors what arrived from the
/// network) and, if its sends woke exactly one idle actor, keeps that actor
/// instead of waking a worker for it, so that the calling thread can run
/// its turn itself with [`Arrival::run`]: a remote round trip then wakes no
/// worker on either side. Dropping the [`Arrival`] hands the actor to the
/// workers, as if nothing had been kept. If the sends woke several actors,
/// all go to the workers (there is work for several threads) and `None`
/// is returned.
///
/// Only sends from a thread that is not one of the system's workers keep an
/// actor (a worker's own sends already run on it); actors on threads of
/// their own (`SpawnOptions::blocking`) and those of a simulated (manually
/// driven) system are never kept. A nested call keeps nothing itself (the
/// outer call may keep what it woke).
///
/// For extension crates (the remote layer's connection reader); an
/// application has no use for it.
///
/// ```
/// use troubadour::prelude::*;
/// use troubadour::remote::keep_arrival;
///
/// struct Echo;
/// impl Actor for Echo {}
/// struct Ping(u32);
/// impl Message for Ping { type Reply = u32; }
/// impl Handler<Ping> for Echo {
///     fn handle(&mut self, Ping(n): Ping, _: &mut Context<Self>) -> u32 { n }
/// }
///
/// let system = ActorSystem::new();
/// let echo = system.spawn(Echo)?;
/// let (asked, arrival) = keep_arrival(|| echo.ask(Ping(7)));
/// // `None` if the actor was scheduled already (its start may still be
/// // running on a worker); else it was kept, not queued: run its turn here.
/// if let Some(arrival) = arrival {
///     arrival.run();
/// }
/// assert_eq!(asked.wait()?, 7);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn keep_arrival<R>(deliver: impl FnOnce() -> R) -> (R, Option<Arrival>) {
    crate::runtime::scheduler::keep_arrival(deliver)
}

/// Why a [`Route`] did not take a message; each becomes the
/// [`SendError`](crate::SendError) (or [`AskError`]) variant of the same
/// name, holding the message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The node is gone (declared down) or the actor is known to have
    /// stopped: the message counts as a dead letter.
    Stopped,
    /// The connection's bounded outbound queue is full.
    Full,
    /// The message type is not registered with the remote layer.
    Unregistered,
    /// Encoding failed, or the message is over the connection's cap.
    Unencodable(String),
}

/// A message on its way to a remote actor, lent to [`Route::send`] while its
/// type is still known. The message and the reply sender stay on the
/// sender's stack: the route reads the message by reference (to encode it)
/// or takes it, and takes the reply sender of an `ask`.
pub struct Outgoing<'a> {
    pub(crate) to: ActorId,
    pub(crate) type_id: TypeId,
    pub(crate) type_name: &'static str,
    /// An `Option<M>`.
    pub(crate) message: &'a mut (dyn Any + Send),
    /// An `Option<ReplySender<M::Reply>>`, for an `ask`.
    pub(crate) reply: Option<&'a mut (dyn Any + Send)>,
    pub(crate) system_message: bool,
}

impl Outgoing<'_> {
    /// The receiving actor (on another node).
    pub fn to(&self) -> ActorId {
        self.to
    }

    /// The `TypeId` of the message type `M`: the key to find its encoder.
    pub fn message_type_id(&self) -> TypeId {
        self.type_id
    }

    /// The message type's name (`std::any::type_name`), for errors and
    /// logs.
    pub fn message_type_name(&self) -> &'static str {
        self.type_name
    }

    /// `true` for an `ask`: [`take_reply`](Self::take_reply) gives the
    /// sender of its reply.
    pub fn is_ask(&self) -> bool {
        self.reply.is_some()
    }

    /// `true` for a system message (a `Down` or a trapped `Exited`
    /// delivered by a monitor or a link), which a bounded queue must not
    /// refuse while the peer is reachable.
    pub fn is_system_message(&self) -> bool {
        self.system_message
    }

    /// The message, if it is an `M` and still here.
    pub fn message<M: Message>(&self) -> Option<&M> {
        self.message.downcast_ref::<Option<M>>()?.as_ref()
    }

    /// Takes the message, if it is an `M` and still here.
    pub fn take_message<M: Message>(&mut self) -> Option<M> {
        self.message.downcast_mut::<Option<M>>()?.take()
    }

    /// Takes the reply sender of an `ask` whose reply type is `R`.
    pub fn take_reply<R: Send + 'static>(&mut self) -> Option<ReplySender<R>> {
        self.reply
            .as_mut()?
            .downcast_mut::<Option<ReplySender<R>>>()?
            .take()
    }
}

impl fmt::Debug for Outgoing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outgoing")
            .field("to", &self.to)
            .field("message", &self.type_name)
            .field("ask", &self.is_ask())
            .finish()
    }
}

/// Ends a remote `ask`: with the reply ([`send`](Self::send)) or a typed
/// error ([`fail`](Self::fail)). Dropping it ends the ask with
/// [`AskError::ConnectionLost`], so an ask whose reply can no longer come
/// never waits for its timeout.
pub struct ReplySender<R> {
    tx: Option<oneshot::Sender<Result<R, AskError>>>,
}

impl<R> ReplySender<R> {
    pub(crate) fn new(tx: oneshot::Sender<Result<R, AskError>>) -> Self {
        ReplySender { tx: Some(tx) }
    }

    /// Delivers the reply. `false` if nobody waits for it any more (the ask
    /// timed out or was dropped).
    pub fn send(mut self, reply: R) -> bool {
        self.tx.take().is_some_and(|tx| tx.send(Ok(reply)).is_ok())
    }

    /// Ends the ask with `error`.
    pub fn fail(mut self, error: AskError) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Err(error));
        }
    }

    /// `true` once the asker stopped waiting (timeout, or the `Ask` was
    /// dropped): the route can forget the request.
    pub fn is_closed(&self) -> bool {
        self.tx.as_ref().is_none_or(|tx| tx.is_closed())
    }
}

impl<R> Drop for ReplySender<R> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Err(AskError::ConnectionLost));
        }
    }
}

impl<R> fmt::Debug for ReplySender<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplySender")
    }
}

/// A signal for a remote actor, given to its proxy's [`Route::signal`].
#[non_exhaustive]
pub enum OutgoingSignal {
    /// [`ActorRef::stop`]: a normal exit, as if the actor stopped itself.
    RequestStop,
    /// Stop for good with this reason (a supervisor's or the system's stop).
    Stop(ExitReason),
    /// [`ActorRef::kill`].
    Kill,
    /// [`ActorRef::stop_gracefully`].
    StopGracefully,
    /// A local actor linked to the remote one ended with `reason`.
    Exit {
        /// The local actor that ended.
        from: ActorId,
        /// Why.
        reason: ExitReason,
    },
    /// A local actor links to the remote one: when the remote one ends
    /// (or its node is lost, with [`ExitReason::NoConnection`]), tell
    /// [`ControlRef::exit`] on this handle.
    Link(ControlRef),
    /// The local actor `from` unlinks.
    Unlink(ActorId),
    /// Someone local monitors the remote actor: when it ends (or its node
    /// is lost), call [`Watch::notify`].
    Monitor(Watch),
    /// The local actor `watcher` stops monitoring.
    Unwatch(ActorId),
}

impl fmt::Debug for OutgoingSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutgoingSignal::RequestStop => write!(f, "RequestStop"),
            OutgoingSignal::Stop(r) => write!(f, "Stop({r})"),
            OutgoingSignal::Kill => write!(f, "Kill"),
            OutgoingSignal::StopGracefully => write!(f, "StopGracefully"),
            OutgoingSignal::Exit { from, reason } => write!(f, "Exit({from}, {reason})"),
            OutgoingSignal::Link(c) => write!(f, "Link({})", c.id()),
            OutgoingSignal::Unlink(id) => write!(f, "Unlink({id})"),
            OutgoingSignal::Monitor(w) => write!(f, "Monitor({:?})", w.watcher()),
            OutgoingSignal::Unwatch(id) => write!(f, "Unwatch({id})"),
        }
    }
}

impl OutgoingSignal {
    /// `None` for signals a proxy never gets (supervision between a parent
    /// and its children, which are always on one node).
    fn from_signal(signal: Signal) -> Option<OutgoingSignal> {
        Some(match signal {
            Signal::RequestStop => OutgoingSignal::RequestStop,
            Signal::Stop(reason) => OutgoingSignal::Stop(reason),
            Signal::Kill => OutgoingSignal::Kill,
            Signal::Exit { from, reason } => OutgoingSignal::Exit { from, reason },
            Signal::Link(handle) => OutgoingSignal::Link(ControlRef(handle)),
            Signal::Unlink(id) => OutgoingSignal::Unlink(id),
            Signal::Watch(w) => OutgoingSignal::Monitor(Watch(w)),
            Signal::Unwatch(id) => OutgoingSignal::Unwatch(id),
            _ => return None,
        })
    }
}

/// Someone waiting to hear that a remote actor ended: a local actor that
/// monitors it, or code in [`ActorRef::wait_stopped`].
pub struct Watch(Watcher);

impl Watch {
    /// The monitoring actor; `None` for `wait_stopped`.
    pub fn watcher(&self) -> Option<ActorId> {
        match &self.0 {
            Watcher::Actor { watcher, .. } => Some(*watcher),
            Watcher::Waiter(_) => None,
        }
    }

    /// Tells the watcher that `id` ended with `reason` (a `Down` message
    /// past any mailbox bound, or the end of `wait_stopped`).
    pub fn notify(self, id: ActorId, reason: ExitReason) {
        crate::runtime::cell::lifecycle::deliver_down(self.0, id, reason);
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Watch({:?})", self.watcher())
    }
}

/// The untyped control face of any actor, local or a proxy: what the remote
/// layer uses to apply signals that arrived from the network.
#[derive(Clone)]
pub struct ControlRef(pub(crate) Arc<dyn ControlHandle>);

impl ControlRef {
    /// The control face of `actor`.
    pub fn of<A: Actor>(actor: &ActorRef<A>) -> ControlRef {
        ControlRef(actor.cell().clone())
    }

    /// The control face of the actor behind `recipient`; `None` when it is
    /// not an actor (an [`Inbox`](crate::Inbox)).
    pub fn of_recipient<M: Message>(recipient: &Recipient<M>) -> Option<ControlRef> {
        recipient.control().map(ControlRef)
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.0.id()
    }

    /// `true` once the actor has stopped (for a proxy: as far as is known
    /// here).
    pub fn is_stopped(&self) -> bool {
        self.0.is_stopped()
    }

    /// As [`ActorRef::stop`].
    pub fn request_stop(&self) {
        self.0.clone().signal(Signal::RequestStop);
    }

    /// Stops the actor for good with `reason`.
    pub fn stop(&self, reason: ExitReason) {
        self.0.clone().signal(Signal::Stop(reason));
    }

    /// As [`ActorRef::kill`].
    pub fn kill(&self) {
        self.0.clone().signal(Signal::Kill);
    }

    /// An actor linked to this one (`from`, usually remote) ended with
    /// `reason`: the exit signal a link carries.
    pub fn exit(&self, from: ActorId, reason: ExitReason) {
        self.0.clone().signal(Signal::Exit { from, reason });
    }

    /// Links `other` to this actor: when this one ends, `other` gets its
    /// exit signal. Links are two-way; the remote layer sends the other
    /// half to `other`'s node.
    pub fn link(&self, other: ControlRef) {
        self.0.clone().signal(Signal::Link(other.0));
    }

    /// Removes the link from `other`.
    pub fn unlink(&self, other: ActorId) {
        self.0.clone().signal(Signal::Unlink(other));
    }

    /// Makes `watcher` (usually a proxy of a remote actor) monitor this
    /// actor: when it ends, `down` gets a [`Down`].
    pub fn monitor(&self, watcher: ActorId, down: Recipient<Down>) {
        self.0
            .clone()
            .signal(Signal::Watch(Watcher::Actor { watcher, down }));
    }

    /// Removes `watcher`'s monitor.
    pub fn unmonitor(&self, watcher: ActorId) {
        self.0.clone().signal(Signal::Unwatch(watcher));
    }
}

impl fmt::Debug for ControlRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ControlRef{}", self.id())
    }
}

/// The actor type of a proxy for a remote actor whose type this node does
/// not know: the far end of a link or a monitor made from another node. It
/// accepts what the runtime sends to watchers and linked actors ([`Down`],
/// [`Exited`]); its handlers never run here, since a proxy's messages go
/// to its [`Route`].
pub struct RemoteProcess;

impl Actor for RemoteProcess {}

impl Handler<Down> for RemoteProcess {
    fn handle(&mut self, _: Down, _: &mut Context<Self>) {}
}

impl Handler<Exited> for RemoteProcess {
    fn handle(&mut self, _: Exited, _: &mut Context<Self>) {}
}

/// An [`ActorRef<A>`] for actor `id` of another node, whose messages and
/// signals go to `route`. Sends to it are as cheap to decide as local ones:
/// the proxy's run state has the bit the rare path already tests.
///
/// Nothing ever runs in a proxy: it has no mailbox traffic, never counts as
/// a live actor of `system`, and stopping `system` does not stop the remote
/// actor. `system` supplies the clock for `ask` timeouts and the dead-letter
/// counters.
pub fn proxy<A: Actor>(system: &SystemHandle, id: ActorId, route: Arc<dyn Route>) -> ActorRef<A> {
    let config = Box::new(CellConfig {
        deadline: None,
        stats: None,
        bound: None,
        dedicated: None,
        route: Some(route),
        entity: None,
    });
    ActorRef::from_cell(ActorCell::proxy(system.core.clone(), id, config))
}

/// What a proxy's cell does with a signal: hand it to the route.
pub(crate) fn route_signal(route: &Arc<dyn Route>, to: ActorId, signal: Signal) {
    if let Some(signal) = OutgoingSignal::from_signal(signal) {
        route.signal(to, signal);
    }
}
