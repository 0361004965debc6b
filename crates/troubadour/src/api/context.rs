//! [`Context`]: what a handler can do besides changing its own state —
//! spawn children, stop or fail, link and monitor, set timers, stash.

use crate::api::actor::{Actor, Handler, Message};
use crate::api::actor_ref::ActorRef;
use crate::api::error::{SendError, SpawnError, TerminateError};
use crate::api::exit::{ActorId, Down, ExitReason, Exited};
use crate::runtime::cell::{ActorCell, Phase, Request};
use crate::runtime::envelope::{envelope, envelope_alone, take_current_reply, Handles, Immediate};
use crate::runtime::signal::{ControlHandle, Signal, Watcher};
use crate::runtime::spawn::{spawn_actor, Source, SpawnOptions};
use crate::runtime::system::SystemHandle;
use crate::runtime::timer::{Fired, TimerRef};
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

/// The reply to an `ask`, taken over by its handler with
/// [`Context::defer_reply`] to be sent later, from anywhere.
#[must_use = "dropping it answers the asker with AskError::NoReply"]
pub struct DeferredReply<R> {
    tx: crate::runtime::envelope::ReplyTo<R>,
}

impl<R> DeferredReply<R> {
    /// Answers the asker. `Err(reply)` if nobody waits any more (the asker
    /// gave up or timed out).
    pub fn send(self, reply: R) -> Result<(), R> {
        self.tx.send(reply)
    }

    /// Whether the asker has stopped waiting.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl<R> std::fmt::Debug for DeferredReply<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredReply")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The handle a handler gets to its own actor and to the system.
///
/// It is a pointer to the actor's cell; methods act on the actor's own turn,
/// so none of them races with message handling.
///
/// A context may move to another thread with the `&mut` a handler holds
/// (it is `Send`: an [`AsyncHandler`](crate::AsyncHandler)'s future keeps
/// it), but it is not `Sync`: it reads state only the actor's turn may
/// touch, so threads a handler starts cannot share it. As in Akka, where
/// the `ActorContext` is not thread-safe. Hand them what they need
/// instead ([`myself`](Self::myself), [`system`](Self::system), ids):
///
/// ```compile_fail,E0277
/// use troubadour::prelude::*;
/// struct Fan;
/// impl Actor for Fan {}
/// struct Go;
/// impl Message for Go { type Reply = (); }
/// impl Handler<Go> for Fan {
///     fn handle(&mut self, _: Go, ctx: &mut Context<Self>) {
///         let ctx = &*ctx;
///         std::thread::scope(|s| {
///             s.spawn(|| ctx.children());
///             s.spawn(|| ctx.stashed());
///         });
///     }
/// }
/// ```
pub struct Context<A: Actor> {
    cell: NonNull<ActorCell<A>>,
    /// Set by calls that change what the turn must do next (stop, fail,
    /// unstash). Lives in the turn's stack frame, so the per-message check
    /// reads no shared memory.
    dirty: bool,
}

// SAFETY: a context is used by one thread at a time: the thread running
// its actor's turn, a thread it lent the `&mut Context` to for the length
// of the handler (a scoped thread), or the actor's suspended future, which
// only the holder of the turn polls. Not `Sync`: `&self` methods read
// consumer-only state of the cell, which two threads must not do while
// the turn could write it, and nothing keeps a shared `&Context` handed
// to another thread within the turn.
unsafe impl<A: Actor> Send for Context<A> {}

impl<A: Actor> Context<A> {
    /// # Safety
    /// `cell` points to a cell inside an `Arc` that outlives the context,
    /// and the context is used only by the holder of the cell's consumer
    /// role (its methods touch consumer state).
    pub(crate) unsafe fn new(cell: NonNull<ActorCell<A>>) -> Self {
        Context { cell, dirty: false }
    }

    /// Whether a stop, fail or unstash was requested since the last call.
    #[inline]
    pub(crate) fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// Marks that the turn must re-check the actor's state.
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Another context for the same actor (for an async handler's future).
    pub(crate) fn detach(&self) -> Self {
        Context {
            cell: self.cell,
            dirty: false,
        }
    }

    /// Which cell this context belongs to, as an address (the key of the
    /// current reply slot, `envelope.rs`).
    #[inline]
    pub(crate) fn cell_addr(&self) -> *const () {
        self.cell.as_ptr() as *const ()
    }

    #[inline]
    fn cell(&self) -> &ActorCell<A> {
        // SAFETY: the cell owns this context and outlives it.
        unsafe { self.cell.as_ref() }
    }

    fn arc(&self) -> Arc<ActorCell<A>> {
        // SAFETY: the cell lives in an Arc for as long as its context does.
        unsafe {
            Arc::increment_strong_count(self.cell.as_ptr());
            Arc::from_raw(self.cell.as_ptr())
        }
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.cell().id
    }

    /// A reference to this actor, to hand to others.
    pub fn myself(&self) -> ActorRef<A> {
        ActorRef::from_cell(self.arc())
    }

    /// Who this actor is beyond this activation, when the layer that
    /// spawned it said so: a cluster's entity always has one, an actor
    /// spawned with [`SpawnOptions::entity`](crate::SpawnOptions::entity)
    /// has the one given there, others have none.
    ///
    /// ```
    /// use troubadour::prelude::*;
    /// use troubadour::EntityId;
    /// struct Vehicle;
    /// impl Actor for Vehicle {}
    /// struct WhoAmI;
    /// impl Message for WhoAmI { type Reply = Option<EntityId>; }
    /// impl Handler<WhoAmI> for Vehicle {
    ///     fn handle(&mut self, _: WhoAmI, ctx: &mut Context<Self>) -> Option<EntityId> {
    ///         ctx.entity().cloned()
    ///     }
    /// }
    /// let system = ActorSystem::new();
    /// let me = EntityId::new("vehicle", "0012.01214");
    /// let v = system.spawn_with_options(SpawnOptions::new().entity(me.clone()), Vehicle).unwrap();
    /// assert_eq!(v.ask(WhoAmI).wait().unwrap(), Some(me));
    /// ```
    pub fn entity(&self) -> Option<&crate::EntityId> {
        self.cell().config.as_ref()?.entity.as_ref()
    }

    /// The system this actor runs in.
    pub fn system(&self) -> SystemHandle {
        SystemHandle::from_core(self.cell().system.clone())
    }

    /// Queues a control signal to this actor itself: it is processed before
    /// the next user message, as if another actor had sent it.
    pub(crate) fn signal_self(&self, signal: Signal) {
        self.arc().send_signal(signal);
    }

    /// Counts a message that reached this actor too late to be handled.
    #[cfg(feature = "simulation")]
    pub(crate) fn dead_letter(&self, message: &'static str) {
        let cell = self.cell();
        cell.system.dead_letters.record(
            cell.id,
            message,
            crate::runtime::dead_letters::DeadLetterReason::RecipientStopped,
        );
    }

    /// Stops this actor after the current handler returns: its children
    /// stop first, then `stopped` runs. Exit reason
    /// [`ExitReason::Normal`]. Messages still queued go to dead letters.
    pub fn stop(&mut self) {
        // SAFETY: called from the actor's own turn.
        unsafe { self.cell().request(Request::Stop, None) };
        self.dirty = true;
    }

    /// Fails this actor after the current handler returns, as if it had
    /// panicked: its supervisor decides whether it restarts.
    pub fn fail(&mut self, reason: impl Into<String>) {
        let reason = ExitReason::Failed(Arc::from(reason.into()));
        // SAFETY: as for `stop`.
        unsafe { self.cell().request(Request::Fail, Some(reason)) };
        self.dirty = true;
    }

    /// Ends an activation that returned `Err(reason)` (`Actor::activate`):
    /// a normal reason stops the actor, any other fails it.
    pub(crate) fn end_activation(&mut self, reason: ExitReason) {
        let request = if reason.is_normal() {
            Request::Stop
        } else {
            Request::Fail
        };
        // SAFETY: called from the actor's own turn (the activation's future
        // is polled only there).
        unsafe { self.cell().request(request, Some(reason)) };
        self.dirty = true;
    }

    fn spawn_child<B: Actor>(
        &mut self,
        options: SpawnOptions,
        source: Source<B>,
    ) -> Result<ActorRef<B>, SpawnError> {
        let cell = self.cell();
        // SAFETY: the actor's own turn.
        if unsafe { !matches!(cell.phase(), Phase::Running | Phase::Starting) } {
            return Err(SpawnError::ParentStopping);
        }
        let parent: Arc<dyn ControlHandle> = self.arc();
        let child = spawn_actor(&cell.system, Some(parent), options, source, |child| {
            // Registered before the child can run, so its first signal to
            // us (it is processed on our turn, after this returns) finds it.
            // SAFETY: the actor's own turn.
            unsafe { cell.extras().children.insert(child.id(), child) };
            Ok(())
        })?;
        Ok(child)
    }

    /// Spawns a child from a value. It is not restarted if it fails (it
    /// stops with the failure as its exit reason); use
    /// [`spawn_with`](Self::spawn_with) for a restartable child.
    pub fn spawn<B: Actor>(&mut self, actor: B) -> Result<ActorRef<B>, SpawnError> {
        self.spawn_child(SpawnOptions::new(), Source::Value(actor))
    }

    /// Spawns a restartable child: `factory` builds it now and again on each
    /// restart ([`Restart::Transient`](crate::Restart::Transient) unless the
    /// options say otherwise).
    pub fn spawn_with<B: Actor>(
        &mut self,
        factory: impl FnMut() -> B + Send + 'static,
    ) -> Result<ActorRef<B>, SpawnError> {
        self.spawn_child(SpawnOptions::new(), Source::Factory(Box::new(factory)))
    }

    /// Spawns a child from a value with options (name, mailbox, blocking).
    pub fn spawn_with_options<B: Actor>(
        &mut self,
        options: SpawnOptions,
        actor: B,
    ) -> Result<ActorRef<B>, SpawnError> {
        self.spawn_child(options, Source::Value(actor))
    }

    /// Spawns a restartable child with options.
    pub fn spawn_factory_with_options<B: Actor>(
        &mut self,
        options: SpawnOptions,
        factory: impl FnMut() -> B + Send + 'static,
    ) -> Result<ActorRef<B>, SpawnError> {
        self.spawn_child(options, Source::Factory(Box::new(factory)))
    }

    /// Stops `child` for good, whatever its restart type (OTP's
    /// `supervisor:terminate_child`): it stops with
    /// [`ExitReason::Shutdown`] after its current message (its stop hooks
    /// run, its own children stop first) and is not restarted, also if it
    /// fails meanwhile. Returns at once; await
    /// [`ActorRef::wait_stopped`] to know when it is gone. Unlike OTP, the
    /// child is then forgotten: there is no child specification to restart
    /// it from later; spawn a new one.
    ///
    /// Fails with [`TerminateError::NotAChild`] if `child` is not a live
    /// child of this actor. [`ActorRef::stop`] instead is a normal exit,
    /// after which a [`Restart::Permanent`](crate::Restart::Permanent)
    /// child is restarted.
    pub fn terminate_child<B: Actor>(&mut self, child: &ActorRef<B>) -> Result<(), TerminateError> {
        let id = child.id();
        // SAFETY: the actor's own turn.
        let extras = unsafe { self.cell().extras() };
        if !extras.children.contains_key(&id) {
            return Err(TerminateError::NotAChild(id));
        }
        if !extras.terminating.contains(&id) {
            extras.terminating.push(id);
        }
        child.cell().send_signal(Signal::Stop(ExitReason::Shutdown));
        Ok(())
    }

    /// Ids of the live children, in spawn order.
    pub fn children(&self) -> Vec<ActorId> {
        // SAFETY: the actor's own turn.
        unsafe {
            self.cell()
                .extras_ref()
                .map(|e| e.children.keys().copied().collect())
                .unwrap_or_default()
        }
    }

    /// Links this actor with `other` (both ways, like Erlang's `link/1`):
    /// when either stops with a reason other than `Normal`, the other fails
    /// with the same reason, unless it traps exits. Linking to an actor that
    /// has already stopped fails this one with [`ExitReason::NoProc`].
    /// Linking twice is one link, as in Erlang.
    ///
    /// A failure that the actor's supervisor answers with a restart is not
    /// a stop: the reference lives on (as in Akka) and links hear nothing.
    /// In Erlang the restarted process is a new pid, so its links fire.
    pub fn link<B: Actor>(&mut self, other: &ActorRef<B>) {
        let other: Arc<dyn ControlHandle> = other.cell().clone();
        // SAFETY: the actor's own turn.
        unsafe { self.cell().add_link(other.clone()) };
        other.signal(Signal::Link(self.arc()));
    }

    /// Removes a link in both directions.
    pub fn unlink<B: Actor>(&mut self, other: &ActorRef<B>) {
        let id = other.id();
        // SAFETY: the actor's own turn.
        unsafe { self.cell().extras().links.retain(|l| l.id() != id) };
        other.cell().send_signal(Signal::Unlink(self.id()));
    }

    /// Watches `other`: when it stops, this actor receives [`Down`] with the
    /// exit reason. If it has already stopped, `Down` comes at once with the
    /// reason it stopped for: troubadour remembers it, so a late monitor
    /// learns what an early one did (Erlang answers `noproc` there, which
    /// troubadour keeps for links to a dead actor).
    ///
    /// `Down` is a system message: it comes after every message `other` sent
    /// this actor before it stopped (per-pair order, as in Erlang), and a
    /// bounded mailbox takes it even when full, so it is never lost while
    /// this actor lives.
    pub fn monitor<B: Actor>(&mut self, other: &ActorRef<B>)
    where
        A: Handler<Down>,
    {
        let down = self.myself().recipient::<Down, Immediate>();
        other.cell().send_signal(Signal::Watch(Watcher::Actor {
            watcher: self.id(),
            down,
        }));
    }

    /// Stops watching `other`. A [`Down`] already sent may still arrive.
    pub fn demonitor<B: Actor>(&mut self, other: &ActorRef<B>) {
        other.cell().send_signal(Signal::Unwatch(self.id()));
    }

    /// Turns exit signals from linked actors into [`Exited`] messages instead
    /// of failing this actor (Erlang's `trap_exit`), whatever their reason,
    /// `Normal` and a linked actor's `Killed` included. Only
    /// [`ActorRef::kill`] of this actor itself is never trapped.
    ///
    /// Like [`Down`], an `Exited` keeps per-pair order: it comes after every
    /// message the linked actor sent this one before it stopped, and a
    /// bounded mailbox takes it even when full. An untrapped exit signal
    /// stops this actor at once, with whatever is queued still unhandled
    /// (as in Erlang, where the messages had arrived but were not received).
    pub fn trap_exits(&mut self, on: bool)
    where
        A: Handler<Exited>,
    {
        // SAFETY: the actor's own turn.
        let extras = unsafe { self.cell().extras() };
        extras.trap_exits = on;
        extras.exited_vtable = Some(|e| envelope::<A, Exited, Immediate>(e, None));
    }

    /// The time this actor's timers go by: use it instead of
    /// `Instant::now()` for deadlines and idle checks, so that tests with
    /// [virtual time](crate::ActorSystemBuilder::virtual_time) control them.
    pub fn now(&self) -> Instant {
        self.cell().system.timers.now()
    }

    /// Sends `msg` to this actor after `delay`. The timer is cancelled when
    /// the actor stops, fails or restarts, or by [`TimerRef::cancel`].
    ///
    /// The actor asked for this message itself, so a bounded mailbox that
    /// is full when it falls due still takes it (over its bound, like a
    /// `Down`): a timeout the actor relies on is never lost to its own
    /// backlog.
    pub fn send_after<M, K>(&mut self, delay: Duration, msg: M) -> TimerRef
    where
        M: Message,
        A: Handles<M, K>,
        K: 'static,
    {
        // The timer holds the actor weakly and remembers which incarnation
        // armed it: a stop or restart makes it stale, with no list of
        // timers kept in the actor (a million actors with a timer each
        // cost the timers, not a timer list per actor).
        let weak = Arc::downgrade(&self.arc());
        let incarnation = self.cell().incarnation();
        let mut msg = Some(msg);
        self.cell().system.timers.schedule(
            delay,
            None,
            Box::new(move || match (weak.upgrade(), msg.take()) {
                (Some(cell), Some(m)) if cell.timer_is_current(incarnation) => {
                    let _ = ActorRef::from_cell(cell).tell_system(m);
                    Fired::Sent
                }
                _ => Fired::Stale,
            }),
        )
    }

    /// Sends a clone of `msg` to this actor every `period`, first after one
    /// period, until cancelled or the actor stops, fails or restarts.
    ///
    /// A tick that finds a bounded mailbox full is skipped and counted as a
    /// dead letter; the interval goes on (momentary backpressure is not a
    /// cancellation, and a slow actor does not pile up ticks over its
    /// bound). On an unbounded mailbox every tick is sent.
    pub fn send_interval<M, K>(&mut self, period: Duration, msg: M) -> TimerRef
    where
        M: Message + Clone,
        A: Handles<M, K>,
        K: 'static,
    {
        let weak = Arc::downgrade(&self.arc());
        let incarnation = self.cell().incarnation();
        self.cell().system.timers.schedule(
            period,
            Some(period),
            Box::new(move || match weak.upgrade() {
                Some(cell) if cell.timer_is_current(incarnation) => {
                    let actor = ActorRef::from_cell(cell);
                    match actor.tell(msg.clone()) {
                        Ok(()) => Fired::SentAgain,
                        Err(SendError::Full(_)) => {
                            let cell = actor.cell();
                            cell.system.dead_letters.record(
                                cell.id,
                                std::any::type_name::<M>(),
                                crate::runtime::dead_letters::DeadLetterReason::MailboxFull,
                            );
                            Fired::SentAgain
                        }
                        // Stopped: nothing left to tick for.
                        Err(_) => Fired::Sent,
                    }
                }
                _ => Fired::Stale,
            }),
        )
    }

    /// Defers `msg` (usually the one being handled) until
    /// [`unstash_all`](Self::unstash_all). The stash survives a restart; with
    /// [`SpawnOptions::unstash_on_restart`] a restart unstashes it all for
    /// the fresh instance (Akka's behaviour). If it is the message being handled
    /// and was sent with `ask`, its reply channel moves with it: the asker
    /// gets the reply when the message is handled after unstashing, and the
    /// value the current handler returns is discarded. (In an
    /// [`AsyncHandler`](crate::AsyncHandler) this holds for a stash before
    /// the handler's first `.await`.)
    ///
    /// The handler owns its message, so "the message being handled" is
    /// the first message stashed by this handler whose type is the handled
    /// message's type. A message of any other type is stashed without a
    /// reply channel, even if its reply type is the same: the asker always
    /// gets the reply of the message it asked. To answer later without
    /// stashing, take the reply with [`defer_reply`](Self::defer_reply).
    pub fn stash<M, K>(&mut self, msg: M)
    where
        M: Message,
        A: Handles<M, K>,
    {
        let reply = take_current_reply::<M>(self.cell_addr());
        let env = envelope_alone::<A, M, K>(msg, reply);
        // SAFETY: the actor's own turn.
        unsafe { self.cell().extras().stash.push_back(env) };
    }

    /// Takes over the reply to the `ask` being handled, to answer it later
    /// with [`DeferredReply::send`] (Erlang's `{noreply, State}` and
    /// `gen_server:reply(From, Reply)`): the value the handler returns is
    /// then discarded. `M` is the type of the message being handled. `None`
    /// if it was told rather than asked, if its reply was already taken (by
    /// an earlier call or a [`stash`](Self::stash)), or outside that
    /// message's handler. (In an [`AsyncHandler`](crate::AsyncHandler):
    /// before its first `.await`.)
    ///
    /// The asker still gets an answer if the handle is dropped unanswered
    /// or the actor stops: [`AskError::NoReply`](crate::AskError::NoReply).
    ///
    /// ```
    /// use troubadour::prelude::*;
    /// use troubadour::DeferredReply;
    ///
    /// /// Answers `Take` when a `Put` arrives.
    /// struct Slot { waiting: Vec<DeferredReply<u32>> }
    /// impl Actor for Slot {}
    /// struct Take;
    /// impl Message for Take { type Reply = u32; }
    /// struct Put(u32);
    /// impl Message for Put { type Reply = (); }
    /// impl Handler<Take> for Slot {
    ///     fn handle(&mut self, _: Take, ctx: &mut Context<Self>) -> u32 {
    ///         self.waiting.extend(ctx.defer_reply::<Take>());
    ///         0 // discarded
    ///     }
    /// }
    /// impl Handler<Put> for Slot {
    ///     fn handle(&mut self, Put(n): Put, _: &mut Context<Self>) {
    ///         for reply in self.waiting.drain(..) { let _ = reply.send(n); }
    ///     }
    /// }
    ///
    /// let system = ActorSystem::new();
    /// let slot = system.spawn(Slot { waiting: vec![] })?;
    /// let taken = slot.ask(Take);
    /// slot.tell(Put(7))?;
    /// assert_eq!(taken.wait()?, 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn defer_reply<M: Message>(&mut self) -> Option<DeferredReply<M::Reply>> {
        take_current_reply::<M>(self.cell_addr()).map(|tx| DeferredReply { tx })
    }

    /// Replays every stashed message, oldest first, before any message still
    /// in the mailbox.
    pub fn unstash_all(&mut self) {
        // SAFETY: the actor's own turn.
        let extras = unsafe { self.cell().extras_for_turn() };
        let mut stash = std::mem::take(&mut extras.stash);
        // Stashed messages go ahead of anything replayed later but behind
        // what is already waiting to be replayed.
        extras.replay.append(&mut stash);
        self.dirty = true;
    }

    /// How many messages are stashed.
    pub fn stashed(&self) -> usize {
        // SAFETY: the actor's own turn.
        unsafe { self.cell().extras_ref().map_or(0, |e| e.stash.len()) }
    }

    /// `&mut self`: it may allocate the cell's waker in its extras.
    pub(crate) fn waker(&mut self) -> Waker {
        // SAFETY: the actor's own turn.
        unsafe { self.arc().waker() }
    }
}
