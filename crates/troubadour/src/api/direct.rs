//! Direct dispatch: an actor owned by the calling thread, driven through its
//! `Handler` impls by plain calls — no queue, no scheduler, no atomic on the
//! path. For the hot inner loop of a single-threaded component, for tests,
//! and for actors that are built up before they go live
//! ([`LocalActor::spawn`]).

use crate::api::actor::{Actor, AsyncHandler, Handler, Message};
use crate::api::actor_ref::ActorRef;
use crate::api::error::{SendError, SpawnError};
use crate::api::exit::{ActorId, ExitReason};
use crate::runtime::blocking::block_on;
use crate::runtime::cell::{ActorCell, Phase};
use crate::runtime::system::SystemHandle;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// An actor owned by the current thread.
///
/// ```
/// use troubadour::prelude::*;
/// struct Sum(u64);
/// impl Actor for Sum {}
/// struct Add(u64);
/// impl Message for Add { type Reply = u64; }
/// impl Handler<Add> for Sum {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
/// }
/// let system = ActorSystem::new();
/// let mut sum = LocalActor::new(&system, Sum(0))?;
/// for i in 0..10 { sum.handle(Add(i))?; }
/// assert_eq!(sum.actor().map(|s| s.0), Some(45));
/// let live: ActorRef<Sum> = sum.spawn(); // now a normal actor
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Messages told to it through [`actor_ref`](Self::actor_ref) queue until
/// [`run_pending`](Self::run_pending) or [`spawn`](Self::spawn). A panic in
/// a directly called handler propagates to the caller, as any function
/// call's would. Dropping it without spawning stops the actor (hooks run).
///
/// One message at a time holds here too. A queued message's
/// [`AsyncHandler`] that awaits inside `run_pending` stays suspended, with
/// the actor's state borrowed by its future, until it is woken and resumed
/// (by a later `run_pending`, or by the workers after `spawn`). Meanwhile
/// [`handle`](Self::handle) and [`handle_async`](Self::handle_async) first
/// wait on this thread for that handler to finish, so the direct message is
/// handled after it, and [`actor`](Self::actor) returns `None`. If what the
/// suspended handler waits for can only happen on this thread, that wait
/// never ends: check [`is_suspended`](Self::is_suspended) and resume it with
/// `run_pending` instead.
pub struct LocalActor<A: Actor> {
    cell: Option<Arc<ActorCell<A>>>,
    /// The actor is running and no async handler is suspended in it, so a
    /// direct call may go straight to the handler. Both are consumer state
    /// that only this owner's own calls change (it holds the consumer role;
    /// signals from other threads wait in the cell until one of those calls
    /// runs them), so it is refreshed after each such call and the direct
    /// path reads no shared memory for it.
    ready: bool,
    system: SystemHandle,
}

impl<A: Actor> LocalActor<A> {
    /// Takes ownership of `actor` and runs its `started` hook now.
    pub fn new(system: &SystemHandle, actor: A) -> Result<Self, SpawnError> {
        let core = system.core();
        if core.is_shutting_down() {
            return Err(SpawnError::SystemShutdown);
        }
        let cell = ActorCell::new(core.clone(), ActorId(core.next_id()?), actor, None, None);
        cell.set_detached(true);
        // The cell is born owning its consumer role; we keep it, so no worker
        // ever runs this actor while we own it. A zero-budget turn runs
        // `started` and any signals.
        let _reports = crate::runtime::crash_report::actor_thread(core.scheduler.crash_reports());
        // SAFETY: the cell was born holding its consumer role, and we keep
        // it for as long as this `LocalActor` owns the cell.
        unsafe { cell.run_guarded(0) };
        let mut local = LocalActor {
            cell: Some(cell),
            ready: false,
            system: system.clone(),
        };
        local.refresh();
        Ok(local)
    }

    /// Recomputes [`ready`](Self::ready) after a call that may have run
    /// hooks, signals or queued messages.
    fn refresh(&mut self) {
        // SAFETY: we hold the consumer role.
        self.ready = self
            .cell
            .as_ref()
            .is_some_and(|c| unsafe { c.phase() == Phase::Running && !c.has_suspended() });
    }

    /// Before a direct call: lets a suspended async handler finish, so that
    /// the call gets the only `&mut A` (one message at a time).
    #[inline]
    fn finish_suspended(&mut self) {
        if let Some(cell) = &self.cell {
            // SAFETY: we hold the consumer role.
            if unsafe { cell.has_suspended() } {
                let _tokio = self.system.tokio_handle().enter();
                let _reports = self.crash_reports();
                // SAFETY: as above.
                unsafe { cell.finish_suspended() };
            }
        }
        self.refresh();
    }

    /// The cell, for a direct call: after a suspended handler finished,
    /// and only while the actor runs.
    #[inline]
    fn ready_cell(&mut self) -> Option<&Arc<ActorCell<A>>> {
        if !self.ready {
            self.finish_suspended();
        }
        self.cell.as_ref().filter(|_| self.ready)
    }

    #[inline]
    fn live_cell(&self) -> Option<&Arc<ActorCell<A>>> {
        // SAFETY: we hold the consumer role.
        self.cell
            .as_ref()
            .filter(|c| unsafe { c.phase() } == Phase::Running)
    }

    /// Handles `msg` now, on this thread, and returns the reply. Fails with
    /// [`SendError::Stopped`] once the actor has stopped itself. If a queued
    /// async handler is suspended, waits for it to finish first (see the
    /// type's docs).
    #[inline]
    pub fn handle<M>(&mut self, msg: M) -> Result<M::Reply, SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        let Some(cell) = self.ready_cell() else {
            return Err(SendError::Stopped(msg));
        };
        // SAFETY: we hold the consumer role and `&mut self`, so nothing else
        // touches the actor or its context; no handler is suspended
        // (`finish_suspended` above).
        let mut ctx = unsafe { cell.context() };
        // SAFETY: as above.
        let reply = unsafe { A::handle(cell.actor_mut(), msg, &mut ctx) };
        if ctx.take_dirty() || !cell.signals_look_empty() {
            self.settle();
        }
        Ok(reply)
    }

    /// Handles each message of `msgs` in turn, now, on this thread, and
    /// drops their replies: a hot loop feeding one actor (a parser, a
    /// simulation step) at the cost of plain calls. Stops early, with the
    /// first message it could not deliver, once the actor has stopped
    /// itself; the caller keeps the rest if it passed `&mut iter`.
    ///
    /// Each message is still handled alone, with the handler's `Context`,
    /// and signals still act between two messages, as in [`handle`]; what
    /// differs is where the state lives meanwhile: in a local of this call,
    /// where the compiler may keep it in registers, rather than in the
    /// actor's cell, which it must treat as memory anything may touch
    /// (decision 0029). A panicking handler leaves the state as that
    /// handler left it, as with [`handle`].
    ///
    /// ```
    /// use troubadour::prelude::*;
    /// struct Sum(u64);
    /// impl Actor for Sum {}
    /// struct Add(u64);
    /// impl Message for Add { type Reply = (); }
    /// impl Handler<Add> for Sum {
    ///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) { self.0 += n }
    /// }
    /// let system = ActorSystem::new();
    /// let mut sum = LocalActor::new(&system, Sum(0))?;
    /// sum.handle_all((0..10).map(Add))?;
    /// assert_eq!(sum.actor().map(|s| s.0), Some(45));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`handle`]: Self::handle
    pub fn handle_all<M, I>(&mut self, msgs: I) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
        I: IntoIterator<Item = M>,
    {
        let mut msgs = msgs.into_iter();
        loop {
            let Some(cell) = self.ready_cell() else {
                return msgs.next().map_or(Ok(()), |m| Err(SendError::Stopped(m)));
            };
            // SAFETY: we hold the consumer role and `&mut self`; no handler
            // is suspended (`ready`).
            if !unsafe { handle_until_settle(cell, &mut msgs) } {
                return Ok(());
            }
            self.settle();
        }
    }

    /// Handles `msg` with an async handler, blocking this thread until the
    /// handler's future completes (after a suspended one, as for
    /// [`handle`](Self::handle)).
    pub fn handle_async<M>(&mut self, msg: M) -> Result<M::Reply, SendError<M>>
    where
        M: Message,
        A: AsyncHandler<M>,
    {
        self.finish_suspended();
        let Some(cell) = self.live_cell() else {
            return Err(SendError::Stopped(msg));
        };
        let _tokio = self.system.tokio_handle().enter();
        // SAFETY: as for `handle`; the future is finished before we return.
        let reply = unsafe { block_on(A::handle(cell.actor_mut(), msg, &mut cell.context())) };
        // The future may have asked for anything; always settle.
        self.settle();
        Ok(reply)
    }

    /// Applies stop/fail requests and signals after a direct call.
    #[cold]
    fn settle(&mut self) {
        if let Some(cell) = &self.cell {
            let _reports = self.crash_reports();
            // SAFETY: we hold the consumer role.
            unsafe { cell.run_guarded(0) };
        }
        self.refresh();
    }

    /// Handles every message queued through [`actor_ref`](Self::actor_ref).
    pub fn run_pending(&mut self) {
        if let Some(cell) = &self.cell {
            let _reports = self.crash_reports();
            // SAFETY: we hold the consumer role.
            while unsafe { cell.run_guarded(u32::MAX) } {}
        }
        self.refresh();
    }

    /// Panics in queued handlers and hooks are caught and supervised here,
    /// so they are reported as crashes (`crash_report.rs`); a directly
    /// called handler's panic is the caller's, as any call's would be.
    fn crash_reports(&self) -> crate::runtime::crash_report::ActorThread {
        crate::runtime::crash_report::actor_thread(self.system.core().scheduler.crash_reports())
    }

    /// Whether an async handler queued through [`run_pending`](Self::run_pending)
    /// is suspended in the actor, waiting to be woken. While it is, a
    /// direct call waits for it and [`actor`](Self::actor) returns `None`.
    pub fn is_suspended(&self) -> bool {
        // SAFETY: we hold the consumer role.
        self.cell
            .as_ref()
            .is_some_and(|c| unsafe { c.has_suspended() })
    }

    /// The actor's state, while it has not stopped and no async handler is
    /// suspended in it (the suspended handler's future holds the state
    /// mutably; `run_pending` resumes it).
    pub fn actor(&self) -> Option<&A> {
        // SAFETY: we hold the consumer role, and no suspended future holds
        // a `&mut A`; shared access only, for as long as `&self` lives,
        // which keeps every `&mut self` method (that could run a handler)
        // away.
        self.live_cell()
            .filter(|c| unsafe { !c.has_suspended() })
            .map(|c| unsafe { &*c.actor_mut() })
    }

    /// A reference others can send to; messages queue until
    /// [`run_pending`](Self::run_pending) or [`spawn`](Self::spawn).
    pub fn actor_ref(&self) -> Option<ActorRef<A>> {
        self.cell.as_ref().map(|c| ActorRef::from_cell(c.clone()))
    }

    /// Hands the actor to the system's workers: from now on it is a normal
    /// top-level actor and queued messages are handled there.
    pub fn spawn(mut self) -> ActorRef<A> {
        let cell = self
            .cell
            .take()
            .expect("LocalActor owns its cell until spawned or dropped");
        let actor_ref = ActorRef::from_cell(cell.clone());
        cell.set_detached(false);
        if cell.is_closed() || self.system.core().guardian.add(cell.clone()).is_err() {
            // Stopped already, or the system is shutting down: stop it and
            // give back the role; the reference reports it as stopped.
            cell.set_detached(true);
            // SAFETY: we hold the consumer role, and give it up last.
            unsafe {
                cell.begin_stop(ExitReason::Shutdown);
                cell.release_all();
            }
            return actor_ref;
        }
        // SAFETY: we hold the consumer role and hand it to the workers; the
        // cell is no longer ours to touch.
        unsafe { cell.schedule() };
        actor_ref
    }
}

/// The batch of [`LocalActor::handle_all`]: handles messages from `msgs`
/// with the actor's state moved into a local, until they run out (`false`)
/// or a handler asked for something, or a signal came, that the cell must
/// settle (`true`, the state back in the cell).
///
/// # Safety
/// The caller holds the consumer role of the running `cell`, in which no
/// handler is suspended, and runs nothing else of the cell until this
/// returns.
#[inline(always)]
unsafe fn handle_until_settle<A, M>(
    cell: &Arc<ActorCell<A>>,
    msgs: &mut impl Iterator<Item = M>,
) -> bool
where
    A: Handler<M>,
    M: Message,
{
    // `Taken` gives the state back when it drops, also when a handler's
    // panic unwinds through here.
    let mut state = Taken {
        // SAFETY: as the caller's contract says.
        actor: ManuallyDrop::new(unsafe { cell.take_actor() }),
        cell,
    };
    // SAFETY: as above.
    let mut ctx = unsafe { cell.context() };
    for msg in msgs {
        drop(A::handle(&mut state.actor, msg, &mut ctx));
        if ctx.take_dirty() || !cell.signals_look_empty() {
            return true;
        }
    }
    false
}

/// An actor's state taken out of its cell, given back on drop.
struct Taken<'a, A: Actor> {
    actor: ManuallyDrop<A>,
    cell: &'a ActorCell<A>,
}

impl<A: Actor> Drop for Taken<'_, A> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: taken from this cell by `handle_until_settle`, whose
        // caller holds the consumer role; `self.actor` is not used again.
        unsafe { self.cell.put_actor(ManuallyDrop::take(&mut self.actor)) };
    }
}

impl<A: Actor> Drop for LocalActor<A> {
    fn drop(&mut self) {
        if let Some(cell) = self.cell.take() {
            // SAFETY: we hold the consumer role, and give it up last.
            unsafe {
                cell.begin_stop(ExitReason::Normal);
                cell.release_all();
            }
        }
    }
}
