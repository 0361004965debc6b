//! The actor cell: one heap object per actor holding its queues, its
//! scheduling state and the actor itself, and the turn a worker runs. What
//! happens on signals, stops, failures and restarts is in `lifecycle.rs`.
//!
//! Layout is kept small because a million idle actors must stay cheap: the
//! fields every actor needs are inline; everything only some actors use
//! (children, links, monitors, stash, a restart factory, a suspended
//! async handler) lives in [`Extras`], allocated on first use.
//!
//! Field ownership:
//! * `run`, `mailbox` (producer side), `signals` (producer side), `id`,
//!   `system`, `config`: shared, touched by any thread.
//! * everything in an `UnsafeCell`: consumer-only, touched only by the thread
//!   holding the consumer role (see `mailbox.rs`). References into them
//!   are kept short and never held across a call into user code, except the
//!   `&mut A` / `&mut Context<A>` a handler receives.

use crate::api::actor::Actor;
use crate::api::context::Context;
use crate::api::exit::{panic_message, ActorId, ExitReason, Exited};
use crate::api::supervision::{Restart, RestartLog, RestartPlan};
use crate::primitives::mailbox::{Link, Pop, Queue, Release, SignalStack};
use crate::primitives::run_state::{
    RunState, BOUNDED, CLOSED, DETACHED, HELD, NAMED, SEALED, TOP_LEVEL, WOKEN,
};
use crate::runtime::envelope::{Envelope, EnvelopeQueue, Handled, Suspended};
use crate::runtime::scheduler::{Runnable, Scheduler, Turn};
use crate::runtime::signal::{ControlHandle, Signal, SignalNode, Watcher};
use crate::runtime::system::SystemCore;
use crate::simulation::in_flight::InFlight;

pub(crate) mod lifecycle;
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};

/// Where an actor is in its life. Consumer-only.
///
/// | from | on | to |
/// |---|---|---|
/// | `Starting` | its first turn (`started` runs before any signal) | `Running` |
/// | `Running` | a failure of a restartable actor | `Failed` (parent told `ChildFailed`) |
/// | `Running`, `Failed` | a stop; a one-for-one `Restart` | `Draining` while children stop, then `Stopped`; or rebuilt, `Running` |
/// | `Running`, `Failed` | `StopForRestart` (one-for-all, rest-for-one) | `Draining` while children stop, then `Parked` (parent told `ChildParked`) |
/// | `Parked` | `StartNow` | `Running` (parent told `ChildStarted`) |
/// | `Failed`, `Parked` | another failure, kill or exit signal | unchanged: the supervisor's decision follows |
/// | any | a stop that sticks, a kill of a non-restartable actor | `Stopped` (`CLOSED`) |
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Spawned; `started` has not run.
    Starting,
    Running,
    /// Failed; waiting for its supervisor's decision. Takes no user message.
    Failed,
    /// Waiting for its children to stop before finishing a stop or restart.
    Draining,
    /// Terminated by its supervisor for a one-for-all or rest-for-one
    /// restart: no instance, takes no user message, waits for `StartNow`.
    Parked,
    Stopped,
}

/// What a handler asked for through its context, applied after it returns.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    None,
    Stop,
    Fail,
}

pub(crate) enum AfterChildren {
    Stop(ExitReason),
    Restart(ExitReason),
    /// Park for a restart step (`Signal::StopForRestart`).
    Park,
}

/// Immutable per-actor settings that producers read.
pub(crate) struct CellConfig {
    pub(crate) bound: Option<crate::runtime::mailbox_bound::MailboxBound>,
    pub(crate) dedicated: Option<crossbeam_utils::sync::Unparker>,
    /// Set only in a proxy for a remote actor (`remote.rs`): where its
    /// messages and signals go.
    pub(crate) route: Option<Arc<dyn crate::runtime::remote::Route>>,
    /// Set when the system observes its actors (`observation.rs`).
    pub(crate) stats: Option<Arc<crate::runtime::observation::ActorStats>>,
    /// Set by [`SpawnOptions::deadline`](crate::SpawnOptions::deadline):
    /// checked before every message.
    pub(crate) deadline: Option<Arc<crate::Deadline>>,
    /// Set by [`SpawnOptions::entity`](crate::SpawnOptions::entity).
    pub(crate) entity: Option<crate::EntityId>,
}

pub(crate) type Factory<A> = Box<dyn FnMut() -> A + Send>;

/// State only some actors need; allocated on first use.
pub(crate) struct Extras<A: Actor> {
    /// `None`: a top-level actor, supervised by the system's guardian.
    pub(crate) parent: Option<Arc<dyn ControlHandle>>,
    /// Ordered by id, which is spawn order (rest-for-one relies on it).
    pub(crate) children: BTreeMap<ActorId, Arc<dyn ControlHandle>>,
    /// Children told to stop for good (`terminate_child`): a failure they
    /// report meanwhile is not restarted.
    pub(crate) terminating: Vec<ActorId>,
    pub(crate) links: Vec<Arc<dyn ControlHandle>>,
    pub(crate) watchers: Vec<Watcher>,
    pub(crate) trap_exits: bool,
    pub(crate) exited_vtable: Option<fn(Exited) -> *mut Envelope<A>>,
    pub(crate) stash: EnvelopeQueue<A>,
    pub(crate) replay: EnvelopeQueue<A>,
    /// `SpawnOptions::unstash_on_restart`.
    pub(crate) unstash_on_restart: bool,
    pub(crate) factory: Option<Factory<A>>,
    pub(crate) restart: Restart,
    pub(crate) suspended: Option<Suspended>,
    /// Children's failures that arrived while `suspended` held the actor:
    /// deciding one reads the actor (`supervisor_strategy`), so they wait
    /// for the handler to finish.
    pub(crate) deferred_failures: Vec<(ActorId, ExitReason)>,
    pub(crate) waker: Option<Waker>,
    pub(crate) restarts: RestartLog,
    /// A one-for-all or rest-for-one restart of its children under way.
    pub(crate) plan: Option<Box<RestartPlan<Arc<dyn ControlHandle>>>>,
    pub(crate) then: Option<AfterChildren>,
    pub(crate) requested_reason: Option<ExitReason>,
    pub(crate) exit_reason: Option<ExitReason>,
}

impl<A: Actor> Default for Extras<A> {
    fn default() -> Self {
        Extras {
            parent: None,
            children: BTreeMap::new(),
            terminating: Vec::new(),
            links: Vec::new(),
            watchers: Vec::new(),
            trap_exits: false,
            exited_vtable: None,
            stash: EnvelopeQueue::default(),
            replay: EnvelopeQueue::default(),
            unstash_on_restart: false,
            factory: None,
            restart: Restart::Temporary,
            suspended: None,
            deferred_failures: Vec::new(),
            waker: None,
            restarts: RestartLog::default(),
            plan: None,
            then: None,
            requested_reason: None,
            exit_reason: None,
        }
    }
}

/// Field order is fixed (`repr(C)`) for cache behaviour (decision 0062).
/// The actor's state, which every handler writes, comes first; what every
/// `tell` reads or writes comes last: the mailbox's `tail` (read by each
/// `tell`, swapped by each push) and the run state (`tell_path`, one load
/// that also says whether the mailbox is bounded, so a `tell` does not
/// read `config`), with the flags that change only at a start, a stop or
/// a request beside them. At least 64 bytes lie between the state's last
/// word and `tail` (the signal stack, the identity, the configuration,
/// the extras, the mailbox's head and stub), so a sender never finds the
/// line it reads taken by the consumer's last message. With `run` and
/// `config` next to the state, counting's sender spent half of its own
/// time on those loads on an Intel Xeon. The consumer still writes the
/// mailbox's `head` back once per turn, near `tail`: they are one `Queue`.
#[repr(C)]
pub(crate) struct ActorCell<A: Actor> {
    actor: UnsafeCell<MaybeUninit<A>>,
    /// Read by the consumer before every message (signals overtake).
    signals: SignalStack,
    pub(crate) id: ActorId,
    pub(crate) system: Arc<SystemCore>,
    pub(crate) config: Option<Box<CellConfig>>,
    extras: UnsafeCell<Option<Box<Extras<A>>>>,
    mailbox: Queue,
    run: RunState,
    phase: UnsafeCell<Phase>,
    request: UnsafeCell<Request>,
    /// `HAS_ACTOR`, `ROLE_REF`, `TURN_READS_EXTRAS`: one byte, so the
    /// cell stays 72 bytes.
    flags: ConsumerFlags,
}

/// The actor value is in the cell (not dropped for a restart or a stop).
const HAS_ACTOR: u8 = 1;
/// The run queues' reference to the cell exists (decision 0050): one
/// strong count, taken at the actor's first schedule, that a task carries
/// with the consumer role and an idle actor keeps, so a send that wakes
/// the actor queues it without touching the count. The holder that lets a
/// stopped actor go drops it.
const ROLE_REF: u8 = 2;
/// The extras may hold what a turn must see before the mailbox: a
/// suspended handler or messages to replay. Set with either (and it may
/// outlive both until a turn finds them gone), so the turns of an actor
/// with neither never read the extras: a separate allocation, whose lines
/// a supervised child's turn otherwise misses when it runs on another
/// thread than its last (a `handle_here` ask from a tokio thread).
const TURN_READS_EXTRAS: u8 = 4;

/// Consumer-only flags of a cell, read and written only by the thread
/// holding the consumer role (the module's protocol, as for `phase`).
struct ConsumerFlags(UnsafeCell<u8>);

impl ConsumerFlags {
    fn new(flags: u8) -> Self {
        ConsumerFlags(UnsafeCell::new(flags))
    }

    /// # Safety
    /// The caller holds the consumer role.
    #[inline]
    unsafe fn get(&self, flag: u8) -> bool {
        // SAFETY: only the consumer touches the byte (this function's contract).
        unsafe { *self.0.get() & flag != 0 }
    }

    /// # Safety
    /// The caller holds the consumer role.
    #[inline]
    unsafe fn set(&self, flag: u8, on: bool) {
        // SAFETY: as in `get`.
        unsafe {
            let flags = &mut *self.0.get();
            *flags = if on { *flags | flag } else { *flags & !flag };
        }
    }

    /// Sets `flag` to `on` and says whether it was set before.
    ///
    /// # Safety
    /// The caller holds the consumer role.
    #[inline]
    unsafe fn replace(&self, flag: u8, on: bool) -> bool {
        // SAFETY: as in `get`.
        unsafe {
            let was = self.get(flag);
            self.set(flag, on);
            was
        }
    }
}

// SAFETY: the consumer-only fields are touched only by the thread holding
// the consumer role (module docs); `A: Send` and messages are `Send`.
unsafe impl<A: Actor> Send for ActorCell<A> {}
// SAFETY: as for `Send`.
unsafe impl<A: Actor> Sync for ActorCell<A> {}

impl<A: Actor> ActorCell<A> {
    /// A cell in `Starting` phase, created owning the consumer role (the
    /// spawner schedules it at once, or a `LocalActor` keeps it).
    pub(crate) fn new(
        system: Arc<SystemCore>,
        id: ActorId,
        actor: A,
        config: Option<Box<CellConfig>>,
        extras: Option<Box<Extras<A>>>,
    ) -> Arc<Self> {
        let held = if system.holds_messages() { HELD } else { 0 };
        let top = if extras.as_ref().is_none_or(|e| e.parent.is_none()) {
            TOP_LEVEL
        } else {
            0
        };
        let bounded = if config.as_ref().is_some_and(|c| c.bound.is_some()) {
            BOUNDED
        } else {
            0
        };
        Arc::new(ActorCell {
            run: RunState::new(held | top | bounded),
            phase: UnsafeCell::new(Phase::Starting),
            request: UnsafeCell::new(Request::None),
            flags: ConsumerFlags::new(HAS_ACTOR),
            id,
            system,
            mailbox: Queue::new(),
            signals: SignalStack::new(),
            config,
            extras: UnsafeCell::new(extras),
            actor: UnsafeCell::new(MaybeUninit::new(actor)),
        })
    }

    /// A proxy for the remote actor `id`: no actor, never scheduled (it is
    /// born holding the consumer role and never gives it up, so no send
    /// can schedule it), and `HELD`, so every send and signal takes the
    /// rare path, which hands it to the route in `config`.
    pub(crate) fn proxy(
        system: Arc<SystemCore>,
        id: ActorId,
        config: Box<CellConfig>,
    ) -> Arc<Self> {
        debug_assert!(config.route.is_some());
        Arc::new(ActorCell {
            run: RunState::new(HELD | DETACHED),
            phase: UnsafeCell::new(Phase::Starting),
            request: UnsafeCell::new(Request::None),
            flags: ConsumerFlags::new(0),
            id,
            system,
            mailbox: Queue::new(),
            signals: SignalStack::new(),
            config: Some(config),
            extras: UnsafeCell::new(None),
            actor: UnsafeCell::new(MaybeUninit::uninit()),
        })
    }

    /// The actor's counters, when its system observes its actors.
    #[inline]
    pub(crate) fn stats(&self) -> Option<&crate::runtime::observation::ActorStats> {
        self.config.as_ref().and_then(|c| c.stats.as_deref())
    }

    /// The route of a proxy; `None` for every local actor.
    #[inline]
    pub(crate) fn route(&self) -> Option<&Arc<dyn crate::runtime::remote::Route>> {
        self.config.as_ref().and_then(|c| c.route.as_ref())
    }

    // ---- producer side -------------------------------------------------

    /// The incarnation timers armed now belong to (see `run_state.rs`).
    pub(crate) fn incarnation(&self) -> u32 {
        RunState::incarnation(self.run.load())
    }

    /// True while the actor is still the incarnation that armed a timer:
    /// not stopped, not restarted or stopping since.
    pub(crate) fn timer_is_current(&self, incarnation: u32) -> bool {
        let bits = self.run.load();
        bits & CLOSED == 0 && RunState::incarnation(bits) == incarnation
    }

    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.run.load() & CLOSED != 0
    }

    /// `true` if a send must take the rare path: the actor has stopped or
    /// is stopping gracefully, or its messages are held for a simulation.
    /// One load and one test, the same as `is_closed`.
    #[inline]
    pub(crate) fn closed_or_held(&self) -> bool {
        self.run.load() & (CLOSED | HELD | SEALED) != 0
    }

    /// What a `tell` needs to know, from one load of the run state: the
    /// rare path ([`closed_or_held`](Self::closed_or_held)), else whether
    /// it must take a permit of a bounded mailbox first.
    #[inline]
    pub(crate) fn tell_path(&self) -> TellPath {
        let bits = self.run.load();
        if bits & (CLOSED | HELD | SEALED) != 0 {
            TellPath::Rare
        } else if bits & BOUNDED != 0 {
            TellPath::Bounded
        } else {
            TellPath::Open
        }
    }

    /// `true` once the actor takes no more messages: stopped, or sealed by
    /// a graceful stop (a message now would queue behind the stop marker).
    #[inline]
    pub(crate) fn refuses_messages(&self) -> bool {
        self.run.load() & (CLOSED | SEALED) != 0
    }

    /// Puts the graceful-stop marker behind everything queued and refuses
    /// later sends. Does nothing if a graceful stop was already asked for or
    /// the actor has stopped. The marker takes no room in a bounded
    /// mailbox: a full bound must not turn a stop into an error.
    pub(crate) fn stop_gracefully(self: &Arc<Self>) {
        let before = self.run.fetch_set(SEALED);
        if before & (SEALED | CLOSED) != 0 {
            return;
        }
        if let Some(route) = self.route() {
            route.signal(
                self.id,
                crate::runtime::remote::OutgoingSignal::StopGracefully,
            );
            return;
        }
        let marker = crate::runtime::graceful::marker::<A>();
        if before & HELD != 0 {
            // Held like any message, so a simulation delivers it after the
            // messages this sender held before it.
            // SAFETY: a fresh node for this actor type, given up here.
            unsafe { self.hold(marker, crate::runtime::graceful::MARKER_NAME, false) };
        } else {
            // SAFETY: as above.
            unsafe { self.enqueue(marker) };
        }
    }

    /// A send to a held actor: the node goes to the system's divert, or
    /// straight in once the system is shutting down (nobody will deliver
    /// it any more).
    ///
    /// # Safety
    /// `env` is a live node built for this actor type (by `envelope` or one
    /// of its siblings) and owned by the caller, who gives it up here.
    pub(crate) unsafe fn hold(
        self: &Arc<Self>,
        env: *mut Envelope<A>,
        message: &'static str,
        ask: bool,
    ) {
        let core = &self.system;
        match core.divert() {
            Some(divert) if !core.is_shutting_down() => {
                let from = core.scheduler.current_actor();
                // SAFETY: the node is ours to give (contract).
                let held = unsafe { InFlight::new(from, self.clone(), env, message, ask) };
                divert.divert(held);
            }
            // SAFETY: as above.
            _ => unsafe { self.enqueue(env) },
        }
    }

    /// Enqueues a built message node and makes sure someone will run it.
    ///
    /// # Safety
    /// `env` is a live node built for this actor type (by `envelope` or one
    /// of its siblings) and owned by the caller, who gives it up here.
    #[inline]
    pub(crate) unsafe fn enqueue(self: &Arc<Self>, env: *mut Envelope<A>) {
        // SAFETY: `env` is a live node we own (contract); the cell is pinned
        // in its Arc.
        if unsafe { self.mailbox.push(Envelope::as_link(env)) } {
            // SAFETY: the push took the role.
            unsafe { self.acquired() };
        }
    }

    /// Enqueues a `tell` of `msg`, into this thread's run at the tail when
    /// there is one for it (`envelope::tell_node`), and makes sure someone
    /// will run the actor.
    #[inline(always)]
    pub(crate) fn enqueue_tell<M, K>(self: &Arc<Self>, msg: M)
    where
        M: crate::Message,
        A: crate::runtime::envelope::Handles<M, K>,
    {
        use crate::runtime::envelope::Told;
        match crate::runtime::envelope::tell_node::<A, M, K>(&self.mailbox, msg) {
            // Queued behind the role's holder, who takes it (`mailbox.rs`,
            // invariant 7).
            Told::Appended => {}
            // SAFETY: a fresh node for this actor type, given up here.
            Told::Node(env) => unsafe { self.enqueue(env) },
        }
    }

    pub(crate) fn send_signal(self: &Arc<Self>, signal: Signal) {
        if let Some(route) = self.route() {
            crate::runtime::remote::route_signal(route, self.id, signal);
            return;
        }
        // SAFETY: as for `enqueue`.
        unsafe { self.signals.push(SignalNode::boxed(signal)) };
        self.offer();
    }

    /// Offers the consumer role after recording input that is not a
    /// message (a signal, a wake-up): if nobody holds it, take it and run
    /// the actor; otherwise its holder sees the input (`mailbox.rs`,
    /// invariant 6).
    fn offer(self: &Arc<Self>) {
        if self.mailbox.try_acquire() {
            // SAFETY: we just took the role.
            unsafe { self.acquired() };
        }
    }

    /// The consumer role just taken by a sender: schedule the actor, or, if
    /// it has stopped, drain what was sent to it and give the role up. Out
    /// of line: a send to an actor that is already scheduled stays small.
    ///
    /// # Safety
    /// The caller holds the role and hands it over with this call.
    #[inline(never)]
    unsafe fn acquired(self: &Arc<Self>) {
        // `CLOSED` is set by the role's holder before it gives the role up,
        // so taking the role shows it (`run_state.rs`).
        if self.run.load() & CLOSED == 0 {
            // SAFETY: we hold the role (contract) and hand it over.
            unsafe { self.schedule() };
        } else {
            // We own a stopped actor: report what was sent to it.
            // SAFETY: we hold the role (contract).
            unsafe { self.drain_closed_loop() };
        }
    }

    /// An ask sent inside a keeping call ([`handle_here`](crate::handle_here))
    /// to an actor that is idle with nothing to do: takes the consumer role
    /// as an offer does (`mailbox.rs`, invariant 6) and calls the handler
    /// with the message itself, on this thread, as the turn this send would
    /// have started here. No node and no reply channel: the reply is
    /// returned (decision 0065). Where that is not so, the message goes
    /// back to the caller: [`HandledHere::NotHere`] with nothing changed,
    /// [`HandledHere::Held`] with the role taken, to be given to the
    /// message's node ([`enqueue_held`](Self::enqueue_held)).
    #[inline]
    pub(crate) fn ask_here<M, K>(self: &Arc<Self>, msg: M) -> HandledHere<M>
    where
        M: crate::Message,
        A: crate::runtime::envelope::Handles<M, K>,
    {
        let Some(handle_now) = <A as crate::runtime::envelope::Handles<M, K>>::HANDLE_NOW else {
            return HandledHere::NotHere(msg);
        };
        let scheduler = &self.system.scheduler;
        // What a send reads first: an actor that refuses messages, whose
        // sends are held (a simulation) or bounded, or whose configuration
        // a turn handles (a deadline, a thread of its own) or that is a
        // remote actor's proxy, takes its usual path. The role is looked
        // at before it is offered for: an offer while someone holds it
        // would make that holder look for input again.
        if !scheduler.may_handle_here()
            || !matches!(self.tell_path(), TellPath::Open)
            || self
                .config
                .as_ref()
                .is_some_and(|c| c.deadline.is_some() || c.dedicated.is_some() || c.route.is_some())
            || !self.mailbox.is_idle()
            || !self.mailbox.try_acquire()
        {
            return HandledHere::NotHere(msg);
        }
        // SAFETY: we hold the role: the consumer fields are ours, and the
        // actor is touched by no other thread until we give the role up.
        unsafe {
            // Anything a turn would do before this message: drain a
            // stopped actor, start, apply a signal or a request, resume,
            // replay, take queued messages first.
            let plain = self.run.load() & (CLOSED | WOKEN) == 0
                && self.phase() == Phase::Running
                && !self.flags.get(TURN_READS_EXTRAS)
                && *self.request.get() == Request::None
                && self.signals.looks_empty()
                && self.mailbox.looks_empty();
            if !plain {
                return HandledHere::Held(msg);
            }
            let answered = scheduler.handle_here(|| {
                let mut ctx = self.context();
                let handled = catch_unwind(AssertUnwindSafe(|| {
                    handle_now(self.actor_mut(), msg, &mut ctx)
                }));
                // Counted even if it panicked, as in a turn.
                if let Some(stats) = self.stats() {
                    self.observe_turn(stats, 1);
                }
                match handled {
                    // A handler that asked for something of its actor
                    // (stop, fail, unstash) leaves it to a turn.
                    Ok(answered) => (Some(answered), ctx.take_dirty()),
                    Err(payload) => {
                        self.fail_from_panic(payload);
                        (None, false)
                    }
                }
            });
            let (answered, for_a_turn) = answered;
            // Give the role up, or, with input come meanwhile or work left
            // for a turn, hand the actor on as a send that took the role
            // does.
            if for_a_turn || self.release() {
                self.acquired();
            }
            HandledHere::Answered(answered)
        }
    }

    /// Enqueues a built message node behind the role the caller took
    /// ([`HandledHere::Held`]), then hands the actor on as a send that
    /// took the role does.
    ///
    /// # Safety
    /// As for [`enqueue`](Self::enqueue), and the caller holds the consumer
    /// role, which it gives up with this call.
    pub(crate) unsafe fn enqueue_held(self: &Arc<Self>, env: *mut Envelope<A>) {
        // SAFETY: a live node we own (contract); while we hold the role the
        // push cannot take it (`mailbox.rs`, invariant 4).
        unsafe {
            let took = self.mailbox.push(Envelope::as_link(env));
            debug_assert!(!took, "the role was already ours");
            self.acquired();
        }
    }

    /// Drains a stopped actor until a release finds nothing more.
    ///
    /// # Safety
    /// The caller holds the consumer role of a stopped (`CLOSED`) actor; it
    /// has given it up when this returns.
    unsafe fn drain_closed_loop(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract), and
        // again whenever the release says it was taken back.
        unsafe {
            loop {
                self.drain_closed();
                if !self.release() {
                    return;
                }
            }
        }
    }

    /// Discards every message left in a node the mailbox handed out (one,
    /// or a run's), each a dead letter for `reason`. The pop freed one
    /// bounded-mailbox slot; each further message of a run frees its own.
    ///
    /// # Safety
    /// The caller holds the consumer role; `env` was just handed out by
    /// this cell's mailbox and none of its messages was taken since.
    pub(super) unsafe fn discard_queued_node(
        &self,
        env: *mut Envelope<A>,
        reason: crate::runtime::dead_letters::DeadLetterReason,
    ) {
        // SAFETY: contract; a run holds `left` more after each discard.
        unsafe {
            loop {
                let name = Envelope::discard_queued(env);
                self.system.dead_letters.record(self.id, name, reason);
                if Envelope::left_after_take(env) == 0 {
                    return;
                }
                if let Some(bound) = self.config.as_ref().and_then(|c| c.bound.as_ref()) {
                    bound.free();
                }
            }
        }
    }

    /// After a panic in a run's handler: the run, the mailbox's dummy now,
    /// still holds messages after the one that panicked, and becomes the
    /// oldest node again, so they are handled (or discarded) in order, as
    /// a message behind the one that panicked would be.
    ///
    /// # Safety
    /// The caller holds the consumer role, with no `Consumer` of the
    /// mailbox alive.
    #[cold]
    unsafe fn take_run_again(&self) {
        // SAFETY: contract; the dummy is a node the mailbox handed out.
        unsafe {
            let dummy = self.mailbox.dummy_node();
            if !dummy.is_null() && Envelope::<A>::left_after_take(Envelope::from_link(dummy)) > 0 {
                self.mailbox.take_dummy_again();
            }
        }
    }

    /// Frees a node the mailbox retired (`mailbox.rs`, invariant 2): one
    /// whose message was taken, null for none.
    ///
    /// # Safety
    /// `retired` was just handed over by this cell's mailbox.
    #[inline]
    unsafe fn free_retired(retired: *mut Link) {
        if !retired.is_null() {
            // SAFETY: a node of this actor type whose message was taken
            // with `handle_queued` or `discard_queued` (contract).
            unsafe { Envelope::<A>::free_taken(Envelope::from_link(retired)) };
        }
    }

    /// Hands the actor (whose consumer role the caller holds) to whoever
    /// runs it.
    ///
    /// # Safety
    /// The caller holds the consumer role, and hands it over with this
    /// call: it must not touch the actor's consumer state afterwards.
    #[inline(always)]
    pub(crate) unsafe fn schedule(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.config.as_ref().and_then(|c| c.dedicated.as_ref()) {
                Some(unparker) => unparker.unpark(),
                None => {
                    let cell = Arc::as_ptr(self);
                    // The run queues' reference (`role_ref`): taken once,
                    // then carried with the role, so the task costs no
                    // count here and none when its turn ends idle.
                    if !self.flags.get(ROLE_REF) {
                        self.flags.set(ROLE_REF, true);
                        Arc::increment_strong_count(cell);
                    }
                    let task: Arc<Self> = Arc::from_raw(cell);
                    self.system.scheduler.schedule(task)
                }
            }
        }
    }

    pub(crate) fn wake(self: &Arc<Self>) {
        self.run.set(WOKEN);
        self.offer();
    }

    /// For a `LocalActor`: not attached to a supervisor until spawned.
    pub(crate) fn set_detached(&self, detached: bool) {
        if detached {
            self.run.set(DETACHED)
        } else {
            self.run.clear(DETACHED)
        }
    }

    /// For a `LocalActor`'s poll after each direct call: whether no signal
    /// waits (unordered, see `SignalStack::looks_empty_unordered`).
    #[inline]
    pub(crate) fn signals_look_empty(&self) -> bool {
        self.signals.looks_empty_unordered()
    }

    /// Gives up the consumer role for good, running whatever arrives in the
    /// meantime (used by owners that are not workers).
    ///
    /// # Safety
    /// The caller holds the consumer role; it has given it up when this
    /// returns.
    pub(crate) unsafe fn release_all(self: &Arc<Self>) {
        // SAFETY: we hold the role (contract), and again each time
        // `release` says it was taken back.
        unsafe {
            while self.release() {
                self.run_guarded(u32::MAX);
            }
        }
    }

    pub(crate) fn mark_named(&self) {
        self.run.set(NAMED);
    }

    /// Supervised by the guardian (and not owned by a `LocalActor`).
    pub(crate) fn is_top_level(&self) -> bool {
        self.run.load() & (TOP_LEVEL | DETACHED) == TOP_LEVEL
    }

    // ---- consumer side -------------------------------------------------
    // SAFETY (all `unsafe` accessors below): callers hold the consumer role
    // or own the cell through a `LocalActor`.

    /// Where the actor is in its life.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    #[inline]
    pub(crate) unsafe fn phase(&self) -> Phase {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe { *self.phase.get() }
    }

    /// Moves the actor to phase `p`.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    #[inline]
    unsafe fn set_phase(&self, p: Phase) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            *self.phase.get() = p;
        }
    }

    /// Records what user code asked for (stop, fail); applied after it returns.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(crate) unsafe fn request(&self, r: Request, reason: Option<ExitReason>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            *self.request.get() = r;
            if let Some(reason) = reason {
                self.extras().requested_reason = Some(reason);
            }
        }
    }

    #[inline]
    // The consumer-only cells hand out `&mut` by the consumer-role protocol.
    /// The extras, if allocated.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No other reference into the extras (from this or another accessor) is
    /// used while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn extras_opt(&self) -> Option<&mut Extras<A>> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe { (*self.extras.get()).as_deref_mut() }
    }

    /// Shared access to the extras, for readers (`Context`'s `&self`
    /// methods) that must not claim exclusive access.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No `&mut` into the extras is used while the returned reference lives.
    #[inline]
    pub(crate) unsafe fn extras_ref(&self) -> Option<&Extras<A>> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe { (*self.extras.get()).as_deref() }
    }

    // The consumer-only cells hand out `&mut` by the consumer-role protocol.
    /// The extras, allocated on first use.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No other reference into the extras (from this or another accessor) is
    /// used while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn extras(&self) -> &mut Extras<A> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe { (*self.extras.get()).get_or_insert_with(Default::default) }
    }

    /// The extras, to give them something a turn must see first (a
    /// suspended handler, messages to replay): every such change goes
    /// through here, which tells the turns to look (`TURN_READS_EXTRAS`).
    ///
    /// # Safety
    /// As for [`extras`](Self::extras).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn extras_for_turn(&self) -> &mut Extras<A> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.flags.set(TURN_READS_EXTRAS, true);
            self.extras()
        }
    }

    /// The extras when they may hold what a turn must see first; `None`
    /// (without reading them) when they cannot.
    ///
    /// # Safety
    /// As for [`extras_opt`](Self::extras_opt).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn turn_extras(&self) -> Option<&mut Extras<A>> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if self.flags.get(TURN_READS_EXTRAS) {
                self.extras_opt()
            } else {
                None
            }
        }
    }

    /// The next message to replay (unstashed), if any; forgets that the
    /// extras need looking at once they hold nothing a turn must see.
    ///
    /// # Safety
    /// As for [`extras_opt`](Self::extras_opt).
    #[inline]
    unsafe fn next_replayed(&self) -> Option<*mut Envelope<A>> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let extras = self.turn_extras()?;
            let env = extras.replay.pop_front();
            if env.is_none() && extras.suspended.is_none() {
                self.flags.set(TURN_READS_EXTRAS, false);
            }
            env
        }
    }

    #[inline]
    // The consumer-only cells hand out `&mut` by the consumer-role protocol.
    /// The actor.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// The actor is present (not dropped by a stop or a failed restart), and no
    /// other reference to it is used while the returned one lives (a suspended
    /// handler's future holds one: see `has_suspended`).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn actor_mut(&self) -> &mut A {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            debug_assert!(self.flags.get(HAS_ACTOR));
            (*self.actor.get()).assume_init_mut()
        }
    }

    /// Moves the actor's state out of the cell, which has none until
    /// [`put_actor`](Self::put_actor) gives it back (a `LocalActor` keeps it
    /// in a local through a batch of direct calls, where the compiler can
    /// keep it in registers; in the cell it is memory that anything may
    /// reach).
    ///
    /// # Safety
    /// As for [`actor_mut`](Self::actor_mut); and the caller gives the state
    /// back before anything else of this cell that may touch it runs
    /// (a turn, a hook, a stop).
    #[inline]
    pub(crate) unsafe fn take_actor(&self) -> A {
        // SAFETY: the state is present and not borrowed (contract); marking
        // it absent first means nothing drops or reads the moved-out bits.
        unsafe {
            debug_assert!(self.flags.get(HAS_ACTOR));
            self.flags.set(HAS_ACTOR, false);
            (*self.actor.get()).assume_init_read()
        }
    }

    /// Gives back the state [`take_actor`](Self::take_actor) moved out.
    ///
    /// # Safety
    /// The caller holds the consumer role, and the cell has no state (it was
    /// taken).
    #[inline]
    pub(crate) unsafe fn put_actor(&self, actor: A) {
        // SAFETY: the slot is empty (contract): nothing is overwritten.
        unsafe {
            debug_assert!(!self.flags.get(HAS_ACTOR));
            (*self.actor.get()).write(actor);
            self.flags.set(HAS_ACTOR, true);
        }
    }

    /// A context for user code on this actor's turn. It is only a pointer;
    /// made from the `Arc` so it may mint new references to the cell.
    ///
    /// # Safety
    /// The context touches consumer state: it is used only while the
    /// caller holds the consumer role.
    #[inline]
    pub(crate) unsafe fn context(self: &Arc<Self>) -> Context<A> {
        // SAFETY: `Arc::as_ptr` is never null; the cell lives in an `Arc`;
        // the use of the context is the caller's contract.
        unsafe { Context::new(NonNull::new_unchecked(Arc::as_ptr(self) as *mut Self)) }
    }

    /// Drops the actor's state, if it has any. A panic in its `Drop` is
    /// reported and returned as an exit reason (a stop records it).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No reference to the actor is alive (a suspended future is dropped first).
    unsafe fn drop_actor(&self) -> Option<ExitReason> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if !self.flags.replace(HAS_ACTOR, false) {
                return None;
            }
            match catch_unwind(AssertUnwindSafe(|| {
                (*self.actor.get()).assume_init_drop();
            })) {
                Ok(()) => None,
                Err(payload) => {
                    self.report_crash();
                    Some(ExitReason::Panicked(panic_message(&*payload)))
                }
            }
        }
    }

    /// Reports a panic just caught in this actor's code (`crash_report.rs`).
    #[cold]
    pub(crate) fn report_crash(&self) {
        crate::runtime::crash_report::report(self.id, std::any::type_name::<A>());
    }

    /// Runs a lifecycle hook whose panic must not derail a stop or restart
    /// (nothing runs if the actor has no state any more, after a kill or a
    /// failed factory). A panic is reported and returned as an exit reason:
    /// a stop goes on with it as its reason (Erlang: a crash in `terminate`
    /// becomes the exit reason), a restart goes on regardless.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No reference to the actor is alive.
    unsafe fn guarded_hook(
        self: &Arc<Self>,
        hook: impl FnOnce(&mut A, &mut Context<A>),
    ) -> Option<ExitReason> {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if !self.flags.get(HAS_ACTOR) {
                return None;
            }
            let actor = self.actor_mut();
            let mut ctx = self.context();
            match catch_unwind(AssertUnwindSafe(|| hook(actor, &mut ctx))) {
                Ok(()) => None,
                Err(payload) => {
                    self.report_crash();
                    #[cfg(feature = "tracing")]
                    tracing::warn!(actor = %self.id, "a stop or restart hook panicked; continuing");
                    Some(ExitReason::Panicked(panic_message(&*payload)))
                }
            }
        }
    }

    /// Whether an async handler of this actor is suspended (its future
    /// holds the `&mut A`).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    #[inline]
    pub(crate) unsafe fn has_suspended(&self) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.flags.get(TURN_READS_EXTRAS)
                && self.extras_ref().is_some_and(|e| e.suspended.is_some())
        }
    }

    /// For a `LocalActor`: waits on this thread until no async handler is
    /// suspended, resuming it each time it is woken. Signals still act (a
    /// stop drops the future), and a panic in it is caught and supervised
    /// as in any turn.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// The cell is detached (a `LocalActor`'s): nobody else may run it.
    #[cold]
    pub(crate) unsafe fn finish_suspended(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            // While we wait, the future's wake-ups must unpark this thread; the
            // cell's own waker would only set `WOKEN` on a cell nobody else may
            // run. Each poll hands the future the waker it is polled with.
            let parker = Waker::from(Arc::new(crate::runtime::blocking::ThreadWaker(
                std::thread::current(),
            )));
            let cell_waker = self.extras().waker.replace(parker);
            while self.has_suspended() && self.phase() == Phase::Running {
                // A poll without a wake-up is allowed, and the first one must
                // happen whether or not the future was woken: it registers the
                // parker.
                self.run.set(WOKEN);
                self.run_guarded(0);
                if self.has_suspended() && self.phase() == Phase::Running {
                    std::thread::park();
                }
            }
            if let Some(extras) = self.extras_opt() {
                extras.waker = cell_waker;
            }
        }
    }

    /// A waker that schedules this actor, made once per actor that awaits.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No other reference into the extras (from this or another accessor) is
    /// used while the returned one lives.
    pub(crate) unsafe fn waker(self: &Arc<Self>) -> Waker {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let extras = self.extras();
            extras
                .waker
                .get_or_insert_with(|| {
                    Waker::from(Arc::new(CellWaker {
                        cell: Arc::downgrade(self),
                    }))
                })
                .clone()
        }
    }

    /// An observed actor's turn ends: count what it handled, and sample the
    /// mailbox's depth if an observer asked since the last sample.
    #[cold]
    fn observe_turn(&self, stats: &crate::runtime::observation::ActorStats, handled: u32) {
        stats.handled(handled);
        let Some(live) = self.system.live.as_ref() else {
            return;
        };
        if stats.wants_sample(&live.epoch) {
            // SAFETY: we hold the consumer role (caller), and no `Consumer`
            // of the mailbox is alive after the turn.
            let depth = unsafe {
                self.mailbox.count_with(
                    crate::runtime::observation::DEPTH_CAP,
                    |node| Envelope::<A>::left_after_take(Envelope::from_link(node)),
                    |node| Envelope::<A>::queued_messages(Envelope::from_link(node)),
                )
            };
            stats.record_depth(depth, &live.epoch);
        } else if stats.has_depth() {
            // SAFETY: as above.
            if unsafe { self.mailbox.looks_empty() } {
                // Drained since the sample: an idle actor must not show a
                // backlog it no longer has.
                stats.clear_depth();
            }
        }
    }

    /// One turn: signals first, then up to `left` user messages, counting
    /// `left` down. Returns `true` if the budget ran out with more to do.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    #[inline(always)]
    unsafe fn turn_counted(self: &Arc<Self>, left: &mut u32) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let woken = self.run.take_woken();
            if self.phase() == Phase::Starting {
                // `started` comes before everything, signals included, so a
                // stop sent before the first turn still finds a started actor:
                // the stop hooks never run without `started` (Erlang's `init`,
                // Akka's `preStart`). A stop it asks for is applied here; signals
                // that came meanwhile are then processed as for any stopped actor.
                self.set_phase(Phase::Running);
                self.actor_mut().started(&mut self.context());
                if self.phase() == Phase::Running && *self.request.get() == Request::None {
                    self.activate();
                }
                self.after_user_code();
            }
            self.process_signals();
            match self.phase() {
                Phase::Stopped => {
                    self.drain_closed();
                    return false;
                }
                Phase::Failed | Phase::Draining | Phase::Parked | Phase::Starting => return false,
                Phase::Running => {
                    // A request left by a direct call (`LocalActor`).
                    if *self.request.get() != Request::None && !self.after_user_code() {
                        return false;
                    }
                }
            }
            if self.turn_extras().is_some_and(|e| e.suspended.is_some())
                && (!woken || !self.resume_suspended())
            {
                return false;
            }
            let mut ctx = self.context();
            while *left > 0 {
                if !self.signals.looks_empty() {
                    self.process_queued_signals();
                    if self.phase() != Phase::Running {
                        return false;
                    }
                }
                // Unstashed messages come before the mailbox.
                if let Some(env) = self.next_replayed() {
                    if self.config.as_ref().is_some_and(|c| c.deadline.is_some())
                        && self.past_deadline(&ctx)
                    {
                        return self.stop_at_deadline(env, false);
                    }
                    *left -= 1;
                    if !self.dispatch(env, &mut ctx) {
                        return false;
                    }
                    continue;
                }
                // A run of mailbox messages with the queue's head in a register.
                // The run ends, writing the head back, before anything else can
                // touch the queue (a stop drains it).
                // Only some actors have a configuration (a bounded mailbox, a
                // deadline, ...): the others pay one branch per message.
                let config = self.config.as_deref();
                let mut consumer = self.mailbox.consumer();
                let mut spins = 0u32;
                loop {
                    let node = match consumer.pop() {
                        Pop::Data { node, retired } => {
                            // A signal sent before this message (or while
                            // the last one was handled) comes first: looked
                            // for after the pop, whose acquire makes every
                            // signal sent before the message visible here.
                            if !self.signals.looks_empty() {
                                // SAFETY: that pop's `retired`, untouched.
                                consumer.unpop(retired);
                                break;
                            }
                            Self::free_retired(retired);
                            node
                        }
                        // The rest of a run (`mailbox.rs`, invariant 7).
                        Pop::Again(node) => {
                            if !self.signals.looks_empty() {
                                // SAFETY: the node that pop handed out.
                                consumer.repeat(node);
                                break;
                            }
                            node
                        }
                        Pop::Empty => return false,
                        // A producer is mid-push. Wait briefly; if it was
                        // preempted, give the thread back and let the release
                        // protocol reschedule us.
                        Pop::Inconsistent if spins < 64 => {
                            spins += 1;
                            std::hint::spin_loop();
                            continue;
                        }
                        Pop::Inconsistent => return false,
                    };
                    let env = Envelope::from_link(node);
                    if let Some(config) = config {
                        if let Some(bound) = &config.bound {
                            bound.free();
                        }
                        // An actor past its deadline handles nothing
                        // more (`deadline.rs`).
                        if config.deadline.is_some() && self.past_deadline(&ctx) {
                            drop(consumer);
                            return self.stop_at_deadline(env, true);
                        }
                    }
                    *left -= 1;
                    match Envelope::handle_queued(env, self.actor_mut(), &mut ctx) {
                        Handled::Done => {}
                        // SAFETY: the run this loop's last pop handed out.
                        Handled::Again => consumer.repeat(node),
                        Handled::Suspended(fut) => {
                            drop(consumer);
                            self.extras_for_turn().suspended = Some(fut);
                            self.after_user_code();
                            return false;
                        }
                    }
                    // Only a handler that called stop/fail/unstash (or awaited)
                    // makes us look at the cell's consumer state again.
                    if ctx.take_dirty() {
                        drop(consumer);
                        if *self.request.get() != Request::None && !self.after_user_code() {
                            return false;
                        }
                        break;
                    }
                    if *left == 0 {
                        break;
                    }
                }
            }
            true
        }
    }

    /// Whether the actor has a deadline and it has passed by its clock.
    /// Out of line: the turn's loop reaches it only for an actor with a
    /// deadline.
    #[cold]
    #[inline(never)]
    fn past_deadline(&self, ctx: &Context<A>) -> bool {
        self.config
            .as_ref()
            .and_then(|c| c.deadline.as_deref())
            .is_some_and(|d| !d.admits(ctx.now()))
    }

    /// The actor's deadline passed: `env`, just taken from its queue, goes
    /// to dead letters with what is still queued, and the actor stops as if
    /// stopped from outside, for good (never restarted: its right to run is
    /// over). Returns `false` (it takes no more).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role, no mailbox run is open,
    /// the actor is running, and `env` is a live node built for this actor
    /// type, owned by the caller, or, if `queued`, just handed out by the
    /// mailbox (which keeps its memory).
    #[cold]
    unsafe fn stop_at_deadline(self: &Arc<Self>, env: *mut Envelope<A>, queued: bool) -> bool {
        // SAFETY: `env` is live and its message ours (this function's
        // contract); the rest of the contract is `begin_stop`'s.
        unsafe {
            let reason = crate::runtime::dead_letters::DeadLetterReason::DiscardedAtStop;
            if queued {
                self.discard_queued_node(env, reason);
            } else {
                self.system
                    .dead_letters
                    .record(self.id, Envelope::<A>::discard(env), reason);
            }
            self.begin_stop(ExitReason::Shutdown);
        }
        false
    }

    /// Dispatches one message outside a mailbox run. `false` if the actor
    /// can take no more messages this turn.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// `env` is a live node built for this actor type, owned by the caller.
    unsafe fn dispatch(self: &Arc<Self>, env: *mut Envelope<A>, ctx: &mut Context<A>) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match Envelope::handle(env, self.actor_mut(), ctx) {
                // A node outside the mailbox is never a run.
                Handled::Done | Handled::Again => {}
                Handled::Suspended(fut) => {
                    self.extras_for_turn().suspended = Some(fut);
                    self.after_user_code();
                    return false;
                }
            }
            ctx.take_dirty();
            *self.request.get() == Request::None || self.after_user_code()
        }
    }

    /// A node just taken from the mailbox: frees its bounded-mailbox slot.
    #[inline]
    fn popped(&self, link: *mut crate::primitives::mailbox::Link) -> *mut Envelope<A> {
        if let Some(bound) = self.config.as_ref().and_then(|c| c.bound.as_ref()) {
            bound.free();
        }
        Envelope::from_link(link)
    }

    /// Runs the actor's [`activate`](crate::Actor::activate) hook: a future
    /// it returns is polled once here and, if pending, kept as the
    /// suspended handler, so messages wait until it completes. An `Err`
    /// becomes a stop or failure request, applied by the caller's
    /// `after_user_code`.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role, the actor is running,
    /// and no async handler is suspended in it.
    pub(crate) unsafe fn activate(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let mut ctx = self.context();
            // SAFETY: (a lifetime extension, as for an async handler in
            // `envelope.rs`) the future borrows the actor, which lives in
            // this cell at a fixed address; while the future is kept as the
            // suspended handler no message is dispatched, and every path
            // that touches the actor again (stop, kill, restart) drops it
            // first. It cannot borrow the context (`use<'_, Self>`).
            let actor: &'static mut A = &mut *(self.actor_mut() as *mut A);
            let Some(fut) = actor.activate(&mut ctx) else {
                return;
            };
            let mut own_ctx = ctx.detach();
            let mut fut: Suspended = Box::pin(async move {
                if let Err(reason) = fut.await {
                    own_ctx.end_activation(reason);
                }
            });
            let waker = self.waker();
            if fut
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_pending()
            {
                self.extras_for_turn().suspended = Some(fut);
            }
        }
    }

    /// Polls a suspended async handler. `true` if it finished and the actor
    /// may take messages again.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn resume_suspended(self: &Arc<Self>) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let waker = self.waker();
            let Some(fut) = self.extras().suspended.as_mut() else {
                return true;
            };
            match fut
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
            {
                Poll::Pending => {
                    // A stop requested before the await is applied now.
                    self.after_user_code();
                    false
                }
                Poll::Ready(()) => {
                    self.extras().suspended = None;
                    // Failures of children that arrived meanwhile, before
                    // any message (signals overtake).
                    self.after_user_code() && self.decide_deferred_failures()
                }
            }
        }
    }

    /// Applies what user code asked for (stop, fail). `true` if the actor
    /// keeps running.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    /// No reference to the actor from user code is alive.
    unsafe fn after_user_code(self: &Arc<Self>) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match std::mem::replace(&mut *self.request.get(), Request::None) {
                Request::None => {}
                Request::Stop => {
                    let reason = self
                        .extras()
                        .requested_reason
                        .take()
                        .unwrap_or(ExitReason::Normal);
                    self.self_stop(reason);
                }
                Request::Fail => {
                    let reason = self
                        .extras()
                        .requested_reason
                        .take()
                        .unwrap_or_else(|| ExitReason::Failed(Arc::from("failed")));
                    self.abnormal(reason, false);
                }
            }
            self.phase() == Phase::Running
        }
    }

    /// The whole turn runs under `catch_unwind`; a panic fails the actor.
    ///
    /// # Safety
    /// The caller holds the consumer role.
    pub(crate) unsafe fn run_guarded(self: &Arc<Self>, budget: u32) -> bool {
        // Outside the unwind, so a turn that panics still counts the
        // messages it handled, the one that panicked included.
        let mut left = budget;
        // SAFETY: callers hold the consumer role.
        let turn = catch_unwind(AssertUnwindSafe(|| unsafe { self.turn_counted(&mut left) }));
        if let Some(stats) = self.stats() {
            self.observe_turn(stats, budget - left);
        }
        match turn {
            Ok(busy) => busy,
            Err(payload) => {
                // SAFETY: as above; the turn's `Consumer` was dropped by
                // the unwind.
                unsafe {
                    self.take_run_again();
                    self.fail_from_panic(payload);
                }
                false
            }
        }
    }

    /// A panic just caught in this actor's code (a handler, a hook, its
    /// factory, its `supervisor_strategy`) fails the actor: its supervisor
    /// decides, as for any failure.
    ///
    /// # Safety
    /// The caller holds the consumer role.
    pub(crate) unsafe fn fail_from_panic(self: &Arc<Self>, payload: Box<dyn std::any::Any + Send>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.report_crash();
            let reason = ExitReason::Panicked(panic_message(&*payload));
            // A panic while failing (in a hook) stops the actor without further
            // hooks.
            let nested = catch_unwind(AssertUnwindSafe(|| {
                *self.request.get() = Request::None;
                self.abnormal(reason.clone(), false)
            }));
            if nested.is_err() {
                self.report_crash();
                if self.phase() != Phase::Stopped {
                    self.drop_actor();
                    self.kill_children();
                    self.finish_stop(reason);
                }
            }
        }
    }

    /// Gives up the consumer role unless there is more to do, for a holder
    /// with a reference of its own (not a run queue's task): a dedicated
    /// thread, a `LocalActor`, a sender draining a stopped actor.
    ///
    /// # Safety
    /// The caller holds the consumer role and a strong reference to the
    /// cell besides `role_ref`. When this returns `false` it no longer
    /// holds the role and must not touch the actor's consumer state.
    pub(crate) unsafe fn release(self: &Arc<Self>) -> bool {
        let cell = Arc::as_ptr(self);
        // SAFETY: we hold the role (contract).
        match unsafe { Self::release_from(cell) } {
            Released::Kept => true,
            Released::Idle => false,
            Released::Finished => {
                // SAFETY: the run queues' count, given up by the release;
                // not the last, as the caller holds another (contract).
                unsafe { Arc::decrement_strong_count(cell) };
                false
            }
        }
    }

    /// Gives up the consumer role unless there is more to do (a message, or
    /// input offered meanwhile: `mailbox.rs`, invariant 6).
    ///
    /// A raw pointer, not `&self`: once the role is handed on, the actor
    /// may be stopped and freed by its next holder while this thread is
    /// still returning, and a reference argument would have to stay valid
    /// until then. After the exchange only the mailbox, which is atomics
    /// alone, is borrowed.
    ///
    /// # Safety
    /// `this` is a live cell whose consumer role the caller holds, with no
    /// mailbox run open. After [`Released::Idle`] or [`Released::Finished`]
    /// the caller holds neither the role nor, through it, the cell.
    unsafe fn release_from(this: *const Self) -> Released {
        // SAFETY: live, and we hold the role (contract), so the consumer
        // fields are ours until the exchange below.
        let cell = unsafe { &*this };
        // SAFETY: we hold the role (contract): the consumer fields are ours.
        let (waiting, closed, finishing) = unsafe {
            let waiting = cell.phase() != Phase::Running
                || cell.turn_extras().is_some_and(|e| e.suspended.is_some());
            let closed = cell.run.load() & CLOSED != 0;
            // A stopped actor lets the run queues' reference go with its
            // role: no task will be made for it again (`acquired`).
            let finishing = closed && cell.flags.replace(ROLE_REF, false);
            // A waiting actor gives the role up with messages queued (the
            // next send takes it back), unless it has stopped: then they
            // are drained.
            (waiting && !closed, closed, finishing)
        };
        let (mailbox, signals, run) = (&cell.mailbox, &cell.signals, &cell.run);
        // A wake-up is input only for a live actor: a stopped one has no
        // handler to resume, and a waker can outlive it (a timer or a
        // socket keeps it), so its `WOKEN` may stay set for good.
        let input_waiting = || !signals.looks_empty() || (!closed && run.load() & WOKEN != 0);
        // SAFETY: we hold the role (contract); no mailbox run is open.
        let released = unsafe { mailbox.release(waiting, input_waiting) };
        match released {
            Release::Kept => {
                if finishing {
                    // Still ours: the task goes on carrying the reference.
                    // SAFETY: we hold the role again (kept).
                    unsafe { cell.flags.set(ROLE_REF, true) };
                }
                Released::Kept
            }
            Release::Released { retired } => {
                // SAFETY: the release handed it to us; it is a sender's
                // node, not part of the cell.
                unsafe { Self::free_retired(retired) };
                if finishing {
                    Released::Finished
                } else {
                    Released::Idle
                }
            }
        }
    }
}

/// What [`ActorCell::ask_here`] did with an ask.
pub(crate) enum HandledHere<M: crate::Message> {
    /// Handled: its answer, or `None` if the handler panicked.
    Answered(Option<crate::runtime::envelope::Answered<M::Reply>>),
    /// Not handled, nothing changed: send it as usual.
    NotHere(M),
    /// Not handled, and the caller holds the actor's consumer role: its
    /// node goes in with [`ActorCell::enqueue_held`].
    Held(M),
}

/// How a `tell` goes ([`ActorCell::tell_path`]).
pub(crate) enum TellPath {
    /// Stopped, stopping gracefully, or held for a simulation.
    Rare,
    /// A bounded mailbox: take a permit, then enqueue.
    Bounded,
    /// Enqueue.
    Open,
}

/// Outcome of [`ActorCell::release_from`].
enum Released {
    /// The caller still holds the role.
    Kept,
    /// Let go; the run queues' reference stays with the idle actor.
    Idle,
    /// Let go for the last time as a task: the actor has stopped, and the
    /// caller must drop the run queues' reference.
    Finished,
}

impl<A: Actor> Runnable for ActorCell<A> {
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn run_turn(self: Arc<Self>, budget: u32) -> Turn {
        // SAFETY: we hold the consumer role (this function's contract).
        if unsafe { self.run_guarded(budget) } {
            return Turn::Again(self);
        }
        // The task is the run queues' reference (`role_ref`): it goes back
        // to the idle actor, or is dropped with a stopped one.
        let cell = Arc::into_raw(self);
        // SAFETY: live (the task's count) and we hold the role.
        match unsafe { Self::release_from(cell) } {
            // SAFETY: the count `into_raw` took out of the task.
            Released::Kept => Turn::Again(unsafe { Arc::from_raw(cell) }),
            Released::Idle => Turn::Idle,
            Released::Finished => {
                // SAFETY: as for `Kept`; the release gave it up to us.
                drop(unsafe { Arc::from_raw(cell) });
                Turn::Idle
            }
        }
    }

    unsafe fn run_turn_owned(self: Arc<Self>, budget: u32) -> bool {
        // SAFETY: we hold the role and a reference of our own (contract).
        unsafe { self.run_guarded(budget) || self.release() }
    }

    fn is_finished(&self) -> bool {
        self.is_closed()
    }

    fn id(&self) -> ActorId {
        self.id
    }

    fn scheduler(&self) -> &Scheduler {
        &self.system.scheduler
    }
}

impl<A: Actor> ControlHandle for ActorCell<A> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn signal(self: Arc<Self>, signal: Signal) {
        self.send_signal(signal);
    }

    fn is_stopped(&self) -> bool {
        self.is_closed()
    }
}

impl<A: Actor> Drop for ActorCell<A> {
    fn drop(&mut self) {
        // Last reference gone: free whatever is still queued. Messages here
        // were sent to an actor that can no longer run; count them.
        // SAFETY: `&mut self`: nobody else can reach the cell any more, so
        // its consumer state and queues are ours; `has_actor` says whether
        // the actor is still there to drop, and every queued node is live.
        unsafe {
            if self.flags.get(HAS_ACTOR) {
                (*self.actor.get()).assume_init_drop();
            }
            self.take_run_again();
            while let Pop::Data { node, retired } = self.mailbox.pop() {
                Self::free_retired(retired);
                self.discard_queued_node(
                    Envelope::from_link(node),
                    crate::runtime::dead_letters::DeadLetterReason::DiscardedAtStop,
                );
            }
            // The last node taken stays the queue's until now.
            Self::free_retired(self.mailbox.take_dummy());
            // An actor that never finished a stop (a stuck system's
            // shutdown) leaves the table now.
            if let (Some(stats), Some(live)) = (self.stats(), self.system.live.as_ref()) {
                live.remove(stats);
            }
            let mut node = self.signals.take_all();
            while !node.is_null() {
                let next = SignalStack::next_of(node);
                drop(SignalNode::unbox(node));
                node = next;
            }
        }
    }
}

struct CellWaker<A: Actor> {
    cell: std::sync::Weak<ActorCell<A>>,
}

impl<A: Actor> Wake for CellWaker<A> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(cell) = self.cell.upgrade() {
            cell.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Idle;
    impl Actor for Idle {}

    /// Idle actors are counted in millions: the inline part of a cell is
    /// budgeted (ARCHITECTURE.md). With the `Arc` counts (16 bytes) and the
    /// allocator's header a zero-sized actor costs one 96-byte block.
    #[test]
    fn an_idle_cell_stays_small() {
        assert!(
            std::mem::size_of::<ActorCell<Idle>>() <= 72,
            "ActorCell grew to {} bytes",
            std::mem::size_of::<ActorCell<Idle>>()
        );
        assert!(std::mem::size_of::<Context<Idle>>() <= 16);
    }
}
