//! How others reach an actor: the typed [`ActorRef`], the message-typed
//! [`Recipient`], and the [`Ask`] future.
//!
//! `ActorRef<A>` is one pointer (an `Arc` of the cell). It is the type users
//! hold everywhere, so it is also where location transparency lives: a
//! reference to an actor of another node is the same type, pointing at a
//! proxy cell whose sends take the rare path to the remote layer
//! (`runtime/remote.rs`), so callers write the same code for both.

use crate::api::actor::{Actor, Message};
use crate::api::error::{AskError, SendError};
use crate::api::exit::{ActorId, ExitReason};
use crate::runtime::blocking::block_on;
use crate::runtime::cell::{ActorCell, HandledHere, TellPath};
use crate::runtime::envelope::{envelope, Answered, Handles, ReplyTo};
use crate::runtime::mailbox_bound::NoRoom;
use crate::runtime::remote::{Outgoing, Refusal, ReplySender, Route};
use crate::runtime::signal::{ControlHandle, Signal, Watcher};
use crate::runtime::system::SystemCore;
use crate::runtime::timer::{Deadline, Expiry};
use std::any::TypeId;
use std::fmt;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// A typed reference to an actor. Cheap to clone, `Send + Sync`.
pub struct ActorRef<A: Actor> {
    cell: Arc<ActorCell<A>>,
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        ActorRef {
            cell: self.cell.clone(),
        }
    }
}

impl<A: Actor> fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ActorRef<{}>{}",
            std::any::type_name::<A>(),
            self.cell.id
        )
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        self.cell.id == other.cell.id
    }
}

impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> Hash for ActorRef<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.cell.id.hash(state)
    }
}

impl<A: Actor> ActorRef<A> {
    pub(crate) fn from_cell(cell: Arc<ActorCell<A>>) -> Self {
        ActorRef { cell }
    }

    pub(crate) fn cell(&self) -> &Arc<ActorCell<A>> {
        &self.cell
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.cell.id
    }

    /// `false` once the actor has stopped. A `true` can be stale by the time
    /// it is read; `tell` reports the truth.
    pub fn is_alive(&self) -> bool {
        !self.cell.is_closed() && self.cell.route().is_none_or(|r| r.is_alive(self.cell.id))
    }

    /// Takes room in a bounded mailbox.
    #[inline]
    fn take_permit<M>(&self, msg: M) -> Result<M, SendError<M>> {
        if let Some(bound) = self.cell.config.as_ref().and_then(|c| c.bound.as_ref()) {
            match bound.take() {
                Ok(()) => {}
                Err(NoRoom::Full) => return Err(SendError::Full(msg)),
                Err(NoRoom::Closed) => return Err(SendError::Stopped(msg)),
            }
        }
        Ok(msg)
    }

    /// Sends a system message (a monitor's `Down`, a trapped `Exited`): as
    /// `tell`, but a bounded mailbox's bound does not apply (see
    /// `mailbox_bound.rs`), so it is never refused while the actor lives.
    pub(crate) fn tell_system<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        if let Some(bound) = self.cell.config.as_ref().and_then(|c| c.bound.as_ref()) {
            if bound.take_for_system().is_err() {
                self.cell.system.dead_letters.record(
                    self.cell.id,
                    std::any::type_name::<M>(),
                    crate::runtime::dead_letters::DeadLetterReason::RecipientStopped,
                );
                return Err(SendError::Stopped(msg));
            }
            if self.cell.closed_or_held() {
                return self.send_rare::<M, K>(msg, None, true);
            }
            // SAFETY: a fresh node for this actor type, given up here.
            unsafe { self.cell.enqueue(envelope::<A, M, K>(msg, None)) };
            Ok(())
        } else if let Some(route) = self.cell.route() {
            self.send_remote(route, msg, None, true)
        } else {
            self.tell(msg)
        }
    }

    /// A send to a proxy: the route takes the message while its type is
    /// known, or refuses and the message comes back in the error.
    #[cold]
    #[inline(never)]
    fn send_remote<M: Message>(
        &self,
        route: &Arc<dyn Route>,
        msg: M,
        reply: Option<ReplySender<M::Reply>>,
        system_message: bool,
    ) -> Result<(), SendError<M>> {
        let mut message = Some(msg);
        let mut reply = reply;
        let ask = reply.is_some();
        let verdict = {
            let mut out = Outgoing {
                to: self.cell.id,
                type_id: TypeId::of::<M>(),
                type_name: std::any::type_name::<M>(),
                message: &mut message,
                reply: if ask { Some(&mut reply) } else { None },
                system_message,
            };
            route.send(&mut out)
        };
        match verdict {
            Ok(()) => Ok(()),
            Err(refusal) => {
                let Some(msg) = message else {
                    // A route that took the message must not refuse it; if
                    // one does, what it took is its to account for.
                    return Ok(());
                };
                Err(match refusal {
                    Refusal::Stopped => {
                        self.cell.system.dead_letters.record(
                            self.cell.id,
                            std::any::type_name::<M>(),
                            crate::runtime::dead_letters::DeadLetterReason::RecipientStopped,
                        );
                        SendError::Stopped(msg)
                    }
                    Refusal::Full => SendError::Full(msg),
                    Refusal::Unregistered => SendError::Unregistered(msg),
                    Refusal::Unencodable(reason) => SendError::Unencodable(msg, reason),
                })
            }
        }
    }

    /// The rare path of a send: to a stopped actor (a dead letter), or to
    /// one whose messages are held for a simulation. `has_room`: the caller
    /// already holds a bounded mailbox's permit.
    #[cold]
    #[inline(never)]
    fn send_rare<M, K>(
        &self,
        msg: M,
        reply: Option<ReplyTo<M::Reply>>,
        has_room: bool,
    ) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        let name = std::any::type_name::<M>();
        let bound = self.cell.config.as_ref().and_then(|c| c.bound.as_ref());
        if self.cell.refuses_messages() {
            if let (true, Some(bound)) = (has_room, bound) {
                bound.free();
            }
            self.cell.system.dead_letters.record(
                self.cell.id,
                name,
                crate::runtime::dead_letters::DeadLetterReason::RecipientStopped,
            );
            return Err(SendError::Stopped(msg));
        }
        if let Some(route) = self.cell.route() {
            // A proxy. Asks to one never come here (`ask_remote`), so
            // `reply` is `None`.
            debug_assert!(reply.is_none());
            return self.send_remote(route, msg, None, false);
        }
        let msg = if has_room {
            msg
        } else {
            self.take_permit(msg)?
        };
        let ask = reply.is_some();
        // SAFETY: a fresh node for this actor type, given up here.
        unsafe { self.cell.hold(envelope::<A, M, K>(msg, reply), name, ask) };
        Ok(())
    }

    /// Sends a message without waiting (fire and forget). Never blocks: on an
    /// unbounded mailbox it always enqueues unless the actor has stopped; on
    /// a bounded one it fails with [`SendError::Full`] when there is no room.
    ///
    /// ```
    /// # use troubadour::prelude::*;
    /// # struct Counter(u64); impl Actor for Counter {}
    /// # struct Add(u64); impl Message for Add { type Reply = (); }
    /// # impl Handler<Add> for Counter { fn handle(&mut self, m: Add, _: &mut Context<Self>) { self.0 += m.0 } }
    /// let system = ActorSystem::new();
    /// let counter = system.spawn(Counter(0))?;
    /// counter.tell(Add(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn tell<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        self.tell_inline(msg)
    }

    /// [`tell`](Self::tell), inlined into a `Recipient`'s send, so a send
    /// through one costs one call (its own), not two.
    #[inline(always)]
    fn tell_inline<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        let msg = match self.cell.tell_path() {
            TellPath::Rare => return self.send_rare::<M, K>(msg, None, false),
            TellPath::Bounded => self.take_permit(msg)?,
            TellPath::Open => msg,
        };
        self.cell.enqueue_tell::<M, K>(msg);
        Ok(())
    }

    /// The same as [`tell`](Self::tell); the name says "this may be refused
    /// because the mailbox is full" at the call site.
    pub fn try_tell<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        self.tell(msg)
    }

    /// Sends a message, waiting for room in a bounded mailbox
    /// (backpressure). On an unbounded mailbox it completes at once.
    pub async fn send<M, K>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handles<M, K>,
    {
        if let Some(route) = self.cell.route() {
            // A proxy: wait for room in the connection's queue, as for a
            // bounded mailbox.
            let mut msg = msg;
            loop {
                if self.cell.refuses_messages() {
                    return self.send_rare::<M, K>(msg, None, false);
                }
                match self.send_remote(route, msg, None, false) {
                    Err(SendError::Full(m)) => {
                        msg = m;
                        route.room(self.cell.id).await;
                    }
                    other => return other,
                }
            }
        }
        if let Some(bound) = self.cell.config.as_ref().and_then(|c| c.bound.as_ref()) {
            if bound.wait_for_room().await.is_err() {
                return Err(SendError::Stopped(msg));
            }
            if self.cell.closed_or_held() {
                return self.send_rare::<M, K>(msg, None, true);
            }
            self.cell.enqueue_tell::<M, K>(msg);
            Ok(())
        } else {
            self.tell(msg)
        }
    }

    /// Sends a request and returns a future of its reply. The request is
    /// sent now; awaiting gives the reply, [`AskError::Timeout`] after the
    /// timeout (the system default unless set with [`Ask::timeout`]), or
    /// [`AskError::NoReply`] as soon as the actor stops, fails or restarts
    /// without replying. It never hangs because the other side died.
    pub fn ask<M, K>(&self, msg: M) -> Ask<M::Reply>
    where
        M: Message,
        A: Handles<M, K>,
    {
        let system = &self.cell.system;
        // The actor, not the system, is the way to the clock: its count is
        // in this thread's cache after the send, the system's is shared by
        // every asking thread.
        let clock = || -> Arc<dyn AskClock> { self.cell.clone() };
        let state = match self.cell.ask_here::<M, K>(msg) {
            // Inside `handle_here`, an idle actor answers as it is asked.
            HandledHere::Answered(Some(Answered::Now(reply))) => AskState::Ready(Some(reply)),
            HandledHere::Answered(Some(Answered::Later(rx))) => AskState::Waiting(rx, clock()),
            // It panicked: no reply will come.
            HandledHere::Answered(None) => AskState::Failed(Some(AskError::NoReply)),
            HandledHere::Held(msg) => {
                let (tx, rx) = oneshot::channel();
                // SAFETY: a fresh node for this actor type, given up here
                // with the role `ask_here` took.
                unsafe { self.cell.enqueue_held(envelope::<A, M, K>(msg, Some(tx))) };
                AskState::Waiting(rx, clock())
            }
            HandledHere::NotHere(msg) if self.cell.closed_or_held() => {
                if let (Some(route), false) = (self.cell.route(), self.cell.refuses_messages()) {
                    return self.ask_remote(route, msg);
                }
                let (tx, rx) = oneshot::channel();
                match self.send_rare::<M, K>(msg, Some(tx), false) {
                    Ok(()) => AskState::Waiting(rx, clock()),
                    Err(e) => AskState::Failed(Some(e.into())),
                }
            }
            HandledHere::NotHere(msg) => match self.take_permit(msg) {
                Ok(msg) => {
                    let (tx, rx) = oneshot::channel();
                    // SAFETY: a fresh node for this actor type, given up here.
                    unsafe { self.cell.enqueue(envelope::<A, M, K>(msg, Some(tx))) };
                    AskState::Waiting(rx, clock())
                }
                Err(e) => AskState::Failed(Some(e.into())),
            },
        };
        Ask {
            state,
            timeout: system.config.ask_timeout,
            sleep: None,
        }
    }

    /// An `ask` of a proxy: the reply comes through a [`ReplySender`].
    #[cold]
    #[inline(never)]
    fn ask_remote<M: Message>(&self, route: &Arc<dyn Route>, msg: M) -> Ask<M::Reply> {
        let (tx, rx) = oneshot::channel();
        let state = match self.send_remote(route, msg, Some(ReplySender::new(tx)), false) {
            Ok(()) => AskState::Remote(rx, self.cell.clone()),
            Err(e) => AskState::Failed(Some(e.into())),
        };
        Ask {
            state,
            timeout: self.cell.system.config.ask_timeout,
            sleep: None,
        }
    }

    /// A handle that only knows the message type, for code that should not
    /// depend on the actor's type.
    pub fn recipient<M, K>(&self) -> Recipient<M>
    where
        M: Message,
        A: Handles<M, K>,
        K: 'static,
    {
        Recipient {
            sink: Arc::new(RefSink::<A, K> {
                actor: self.clone(),
                _marker: PhantomData,
            }),
        }
    }

    /// Asks the actor to stop after its current message; control signals
    /// overtake queued user messages, which go to dead letters. Exit reason
    /// [`ExitReason::Normal`].
    ///
    /// This is the actor exiting normally, as if it had called
    /// [`Context::stop`](crate::Context::stop), and its supervisor treats it
    /// so (OTP): a [`Restart::Permanent`](crate::Restart::Permanent) actor
    /// is restarted (the restart counts against its supervisor's
    /// intensity); a transient or temporary one stays stopped. For a stop
    /// that sticks whatever the restart type, its supervisor calls
    /// [`Context::terminate_child`](crate::Context::terminate_child), or,
    /// for a top-level actor, anyone calls
    /// [`SystemHandle::terminate`](crate::SystemHandle::terminate); or
    /// anyone stops it with [`stop_gracefully`](Self::stop_gracefully).
    pub fn stop(&self) {
        self.cell.send_signal(Signal::RequestStop);
    }

    /// Stops the actor once it has handled every message already in its
    /// mailbox (Akka's `PoisonPill`, kameo's `stop_gracefully`), where
    /// [`stop`](Self::stop) overtakes them.
    ///
    /// A marker goes into the mailbox behind what is queued now. From this
    /// call on the actor takes no new message: `tell`, `ask`, `send` and
    /// timers are refused with [`SendError::Stopped`] (an `ask` with
    /// [`AskError::Stopped`](crate::AskError::Stopped)) and counted as dead
    /// letters, as for a stopped actor. When the actor reaches the marker
    /// it stops as after [`stop`](Self::stop): exit reason
    /// [`ExitReason::Normal`], `stopping`, its children stop, `stopped`;
    /// then [`wait_stopped`](Self::wait_stopped) resolves. Unlike `stop`, it
    /// is a stop for good: its mailbox is sealed, so even a
    /// [`Restart::Permanent`](crate::Restart::Permanent) actor is not
    /// restarted (as Akka does not restart after a `PoisonPill`). Control signals
    /// still overtake the queue: a `stop` or `kill` sent later stops the
    /// actor at once, and the messages not yet handled (and the marker)
    /// become dead letters. Messages the actor stashed and has not unstashed
    /// by then are not in the queue: they become dead letters when it stops,
    /// as on any stop. Until it has stopped, [`is_alive`](Self::is_alive)
    /// stays `true`.
    ///
    /// The marker takes no room in a bounded mailbox, so a full mailbox
    /// never refuses a graceful stop; senders waiting in `send(..).await`
    /// for room get [`SendError::Stopped`] once room frees up. On a system
    /// whose sends are diverted (a simulation's `hold_messages()`, with the
    /// `simulation` feature) the marker is held and delivered like a
    /// message, so messages held before it still arrive first. Calling it again, or on a stopped actor,
    /// does nothing.
    ///
    /// ```
    /// # use troubadour::prelude::*;
    /// # use std::sync::mpsc;
    /// struct Printer(mpsc::Sender<String>);
    /// impl Actor for Printer {
    ///     fn stopped(&mut self, _: &mut Context<Self>) { let _ = self.0.send("stopped".into()); }
    /// }
    /// struct Line(&'static str);
    /// impl Message for Line { type Reply = (); }
    /// impl Handler<Line> for Printer {
    ///     fn handle(&mut self, Line(s): Line, _: &mut Context<Self>) { let _ = self.0.send(s.into()); }
    /// }
    ///
    /// let system = ActorSystem::new();
    /// let (tx, rx) = mpsc::channel();
    /// let printer = system.spawn(Printer(tx))?;
    /// printer.tell(Line("one"))?;
    /// printer.tell(Line("two"))?;
    /// printer.stop_gracefully();
    /// assert!(printer.tell(Line("late")).is_err()); // refused, a dead letter
    /// system.block_on(printer.wait_stopped());
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["one", "two", "stopped"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop_gracefully(&self) {
        self.cell.stop_gracefully();
    }

    /// Kills the actor: it stops at once, without its stop hooks, with reason
    /// [`ExitReason::Killed`] (a restartable child is restarted by its
    /// supervisor).
    pub fn kill(&self) {
        self.cell.send_signal(Signal::Kill);
    }

    /// Resolves with the exit reason when the actor stops, at once if it
    /// already had (the reason it stopped for is remembered; Erlang would
    /// answer `noproc`). [`ExitReason::NoProc`] only if the actor's end could
    /// not be observed at all (its system was torn down first).
    pub fn wait_stopped(&self) -> impl Future<Output = ExitReason> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.cell.send_signal(Signal::Watch(Watcher::Waiter(tx)));
        async move { rx.await.unwrap_or(ExitReason::NoProc) }
    }
}

/// Where an [`Ask`] stands. Only an ask still waiting holds a way to the
/// clock its timeout runs on: one answered or failed as it was made takes
/// no reference to count up and down (an ask answered inside `handle_here`
/// is one per request of a service).
enum AskState<R> {
    /// Answered as it was asked (`handle_here`).
    Ready(Option<R>),
    Waiting(oneshot::Receiver<R>, Arc<dyn AskClock>),
    /// An ask of a remote actor: the remote layer ends it with the reply or
    /// a typed error.
    Remote(oneshot::Receiver<Result<R, AskError>>, Arc<dyn AskClock>),
    Failed(Option<AskError>),
}

/// The reply to an [`ActorRef::ask`]: await it, or [`wait`](Ask::wait) for
/// it from synchronous code.
#[must_use = "the request is sent, but its reply is only read by awaiting the Ask"]
pub struct Ask<R> {
    state: AskState<R>,
    timeout: Duration,
    sleep: Option<Deadline>,
}

/// What an [`Ask`] reaches its system's clock through: the asked actor, or
/// the system itself.
trait AskClock: Send + Sync {
    fn system(&self) -> &SystemCore;
}

impl AskClock for SystemCore {
    fn system(&self) -> &SystemCore {
        self
    }
}

impl<A: Actor> AskClock for ActorCell<A> {
    fn system(&self) -> &SystemCore {
        &self.system
    }
}

impl<R> Ask<R> {
    /// An ask whose request is on its way; `rx` gets the reply.
    pub(crate) fn waiting(rx: oneshot::Receiver<R>, system: &Arc<SystemCore>) -> Self {
        Ask {
            state: AskState::Waiting(rx, system.clone()),
            timeout: system.config.ask_timeout,
            sleep: None,
        }
    }

    /// An ask that failed before its request was sent.
    pub(crate) fn failed(error: AskError, system: &Arc<SystemCore>) -> Self {
        Ask {
            state: AskState::Failed(Some(error)),
            timeout: system.config.ask_timeout,
            sleep: None,
        }
    }

    /// Sets how long to wait for the reply.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.sleep = None;
        self
    }

    /// Blocks the current thread until the reply, the timeout or a failure.
    /// For plain `fn main` programs and other threads outside the runtime;
    /// do not call it from a handler (await the `Ask` there instead).
    pub fn wait(self) -> Result<R, AskError> {
        block_on(self)
    }
}

// Nothing in an `Ask` is pinned in place: a reply it holds is moved out.
impl<R> Unpin for Ask<R> {}

impl<R> Future for Ask<R> {
    type Output = Result<R, AskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let clock = match &mut this.state {
            AskState::Failed(e) => {
                return Poll::Ready(Err(e.take().unwrap_or(AskError::NoReply)));
            }
            AskState::Ready(reply) => return Poll::Ready(reply.take().ok_or(AskError::NoReply)),
            AskState::Waiting(rx, clock) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(reply)) => return Poll::Ready(Ok(reply)),
                Poll::Ready(Err(_)) => return Poll::Ready(Err(AskError::NoReply)),
                Poll::Pending => clock,
            },
            AskState::Remote(rx, clock) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(outcome)) => return Poll::Ready(outcome),
                Poll::Ready(Err(_)) => return Poll::Ready(Err(AskError::ConnectionLost)),
                Poll::Pending => clock,
            },
        };
        let timeout = this.timeout;
        let system = clock.system();
        let deadline = this
            .sleep
            .get_or_insert_with(|| Deadline::start(system, timeout));
        match deadline.poll(system, cx) {
            Poll::Ready(Expiry::Elapsed) => Poll::Ready(Err(AskError::Timeout(timeout))),
            Poll::Ready(Expiry::SystemDown) => Poll::Ready(Err(AskError::SystemShutdown)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A reference that only knows which message it accepts.
///
/// ```
/// # use troubadour::prelude::*;
/// # struct Logger; impl Actor for Logger {}
/// struct Line(String);
/// impl Message for Line { type Reply = (); }
/// # impl Handler<Line> for Logger { fn handle(&mut self, _: Line, _: &mut Context<Self>) {} }
/// fn log_to(r: &Recipient<Line>) { let _ = r.tell(Line("hello".into())); }
/// let system = ActorSystem::new();
/// let logger = system.spawn(Logger)?;
/// log_to(&logger.recipient());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Recipient<M: Message> {
    sink: Arc<dyn Sink<M>>,
}

impl<M: Message> Clone for Recipient<M> {
    fn clone(&self) -> Self {
        Recipient {
            sink: self.sink.clone(),
        }
    }
}

impl<M: Message> fmt::Debug for Recipient<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recipient<{}>{}", std::any::type_name::<M>(), self.id())
    }
}

impl<M: Message> Recipient<M> {
    /// A recipient that is not an actor (an [`Inbox`](crate::Inbox)).
    pub(crate) fn from_sink(sink: Arc<dyn Sink<M>>) -> Self {
        Recipient { sink }
    }

    /// See [`ActorRef::tell`].
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.sink.tell(msg)
    }

    /// See [`ActorRef::ask`].
    pub fn ask(&self, msg: M) -> Ask<M::Reply> {
        self.sink.ask(msg)
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.sink.id()
    }

    /// See [`ActorRef::is_alive`].
    pub fn is_alive(&self) -> bool {
        self.sink.is_alive()
    }

    /// Sends a system message, past a bounded mailbox's bound (see
    /// [`ActorRef::tell_system`]).
    pub(crate) fn tell_system(&self, msg: M) -> Result<(), SendError<M>> {
        self.sink.tell_system(msg)
    }

    /// The actor's control handle; `None` for an inbox.
    pub(crate) fn control(&self) -> Option<Arc<dyn ControlHandle>> {
        self.sink.control()
    }
}

/// Where a [`Recipient`] sends: an actor, or an inbox.
pub(crate) trait Sink<M: Message>: Send + Sync {
    fn tell(&self, msg: M) -> Result<(), SendError<M>>;
    /// A system message; only actors have a bound to bypass.
    fn tell_system(&self, msg: M) -> Result<(), SendError<M>> {
        self.tell(msg)
    }
    fn ask(&self, msg: M) -> Ask<M::Reply>;
    fn id(&self) -> ActorId;
    fn is_alive(&self) -> bool;
    /// The actor behind it; `None` for an inbox.
    fn control(&self) -> Option<Arc<dyn ControlHandle>> {
        None
    }
}

struct RefSink<A: Actor, K> {
    actor: ActorRef<A>,
    _marker: PhantomData<fn() -> K>,
}

impl<A, M, K> Sink<M> for RefSink<A, K>
where
    A: Handles<M, K>,
    M: Message,
    K: 'static,
{
    fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.actor.tell_inline(msg)
    }
    fn tell_system(&self, msg: M) -> Result<(), SendError<M>> {
        self.actor.tell_system(msg)
    }
    fn ask(&self, msg: M) -> Ask<M::Reply> {
        self.actor.ask(msg)
    }
    fn id(&self) -> ActorId {
        self.actor.id()
    }
    fn is_alive(&self) -> bool {
        self.actor.is_alive()
    }
    fn control(&self) -> Option<Arc<dyn ControlHandle>> {
        Some(self.actor.cell().clone())
    }
}
