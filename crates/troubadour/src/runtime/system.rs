//! The actor system: configuration, the handle actors and users share, the
//! guardian that supervises top-level actors, and orderly shutdown.

use crate::api::actor::{Actor, Message};
use crate::api::actor_ref::{ActorRef, Recipient};
use crate::api::error::{
    BuildError, RegistryError, ShutdownError, SpawnError, TerminateError, TimeError,
};
use crate::api::exit::{ActorId, ExitReason};
use crate::api::node_id::{validate_name, NodeId, MAX_SERIAL, SERIAL_BITS};
use crate::api::supervision::{RestartLog, SupervisorStrategy};
use crate::runtime::crash_report::{self, CrashReports};
use crate::runtime::dead_letters::{DeadLetter, DeadLetters};
use crate::runtime::registry::Registry;
use crate::runtime::scheduler::{Scheduler, TurnRun};
use crate::runtime::signal::{ControlHandle, Signal};
use crate::runtime::spawn::{spawn_actor, Mailbox, Source, SpawnOptions};
use crate::runtime::timer::{Clock, Sleep, Timers};
use crate::runtime::tokio_runtime::TokioRuntime;
use crate::simulation::divert::{Divert, Outbox};
use crate::simulation::in_flight::InFlight;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct Config {
    pub(crate) default_mailbox: Mailbox,
    pub(crate) ask_timeout: Duration,
}

/// State shared by everything in one system.
pub(crate) struct SystemCore {
    pub(crate) scheduler: Scheduler,
    pub(crate) dead_letters: DeadLetters,
    pub(crate) registry: Registry,
    pub(crate) timers: Timers,
    pub(crate) guardian: Guardian,
    pub(crate) config: Config,
    pub(crate) tokio: TokioRuntime,
    node: NodeId,
    /// The node's index, shifted into the high bits every id of this system
    /// carries.
    id_base: u64,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
    /// Where sends go instead of mailboxes (`divert.rs`), if anywhere.
    divert: Option<Arc<dyn Divert>>,
    /// The divert when it is the built-in outbox of `hold_messages`, for
    /// `take_in_flight` and for delivering what it holds at shutdown.
    outbox: Option<Arc<Outbox>>,
}

impl Clock for SystemCore {
    fn timers(&self) -> &Timers {
        &self.timers
    }
    fn tokio(&self) -> &TokioRuntime {
        &self.tokio
    }
}

impl SystemCore {
    pub(crate) fn holds_messages(&self) -> bool {
        self.divert.is_some()
    }

    pub(crate) fn divert(&self) -> Option<&dyn Divert> {
        self.divert.as_deref()
    }

    /// A new actor id (see [`ActorId`] for the layout). Serials start at 1,
    /// so no id is 0, which the scheduler's current-actor word uses for none.
    pub(crate) fn next_id(&self) -> Result<u64, SpawnError> {
        let serial = self.next_id.fetch_add(1, Ordering::Relaxed);
        if serial > MAX_SERIAL {
            // Never wrap into the node bits: that would name another system.
            return Err(SpawnError::IdsExhausted);
        }
        Ok(self.id_base | serial)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// A top-level actor's signal to its parent, the guardian, which
    /// measures restart intensity on this system's clock.
    pub(crate) fn to_guardian(&self, from: ActorId, signal: Signal) {
        self.guardian.on_signal(from, signal, &self.timers);
    }
}

/// Supervises top-level actors (those spawned from the system rather than
/// from an actor) one-for-one with the builder's intensity (by default 3
/// restarts in 5 s, counted per actor), and tracks them so shutdown can stop
/// them all.
///
/// The guardian holds a strong reference to every top-level actor: an actor
/// lives until it stops, whether or not anyone holds a reference to it (as
/// in Erlang and Akka). The references sit in a plain list, compacted once
/// as many actors have exited as remain, so exits cost amortized O(1) and a
/// live actor costs 16 bytes here instead of a map entry: idle actors are
/// counted in millions.
pub(crate) struct Guardian {
    state: Mutex<GuardianState>,
    live: AtomicUsize,
    all_stopped: Condvar,
    strategy: SupervisorStrategy,
}

struct GuardianState {
    children: Vec<Arc<dyn ControlHandle>>,
    exited_since_compaction: usize,
    restarts: HashMap<ActorId, RestartLog>,
    accepting: bool,
}

impl Guardian {
    fn new(strategy: SupervisorStrategy) -> Self {
        Guardian {
            state: Mutex::new(GuardianState {
                children: Vec::new(),
                exited_since_compaction: 0,
                restarts: HashMap::new(),
                accepting: true,
            }),
            live: AtomicUsize::new(0),
            all_stopped: Condvar::new(),
            strategy,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuardianState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn add(&self, child: Arc<dyn ControlHandle>) -> Result<(), SpawnError> {
        let mut state = self.lock();
        if !state.accepting {
            return Err(SpawnError::SystemShutdown);
        }
        state.children.push(child);
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn find(state: &GuardianState, id: ActorId) -> Option<Arc<dyn ControlHandle>> {
        state.children.iter().rev().find(|c| c.id() == id).cloned()
    }

    /// A top-level actor's signal to its parent.
    fn on_signal(&self, from: ActorId, signal: Signal, clock: &Timers) {
        match signal {
            Signal::ChildFailed { id, reason } => {
                // Read before taking the lock: the virtual clock has one too.
                let now = clock.now();
                let (child, verdict) = {
                    let mut state = self.lock();
                    let child = Self::find(&state, id);
                    let allowed = state.accepting
                        && state
                            .restarts
                            .entry(id)
                            .or_default()
                            .allow(&self.strategy, now);
                    (child, allowed)
                };
                let Some(child) = child else { return };
                #[cfg(feature = "tracing")]
                tracing::warn!(actor = %id, %reason, restart = verdict, "top-level actor failed");
                child.signal(if verdict {
                    Signal::Restart(reason)
                } else {
                    Signal::Stop(ExitReason::RestartLimit(Arc::new(reason)))
                });
            }
            Signal::ChildExited { .. } => {
                {
                    let mut state = self.lock();
                    state.restarts.remove(&from);
                    state.exited_since_compaction += 1;
                    if state.exited_since_compaction * 2 > state.children.len() {
                        state.children.retain(|c| !c.is_stopped());
                        state.exited_since_compaction = 0;
                        // Give memory back after a mass exit.
                        if state.children.capacity() > 4 * state.children.len() + 64 {
                            state.children.shrink_to_fit();
                        }
                    }
                }
                if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                    let mut state = self.lock();
                    if self.live.load(Ordering::SeqCst) == 0 {
                        state.children.retain(|c| !c.is_stopped());
                        state.children.shrink_to_fit();
                    }
                    self.all_stopped.notify_all();
                }
            }
            _ => {}
        }
    }

    /// Stops accepting top-level actors and asks the live ones to stop.
    fn stop_all(&self) {
        let children: Vec<_> = {
            let mut state = self.lock();
            state.accepting = false;
            state.children.clone()
        };
        // Newest first, as Erlang supervisors stop children in reverse start
        // order.
        for c in children.into_iter().rev() {
            c.signal(Signal::Stop(ExitReason::Shutdown));
        }
    }

    /// Drops the references to stopped actors (breaks the cycle cell →
    /// system → guardian → cell once the system is down).
    fn clear(&self) {
        let children = std::mem::take(&mut self.lock().children);
        drop(children);
    }

    fn kill_all(&self) {
        let children: Vec<_> = self.lock().children.clone();
        for c in children {
            c.signal(Signal::Kill);
        }
    }

    /// Waits until every top-level actor has stopped or the deadline passes;
    /// returns how many are left.
    fn wait_all_stopped(&self, deadline: Instant) -> usize {
        let mut state = self.lock();
        loop {
            let live = self.live.load(Ordering::SeqCst);
            if live == 0 {
                return 0;
            }
            let now = Instant::now();
            if now >= deadline {
                return live;
            }
            state = self
                .all_stopped
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// A cheap, cloneable handle to a running system: what actors get from
/// [`Context::system`](crate::Context::system). Spawning, names, groups,
/// dead letters.
#[derive(Clone)]
pub struct SystemHandle {
    core: Arc<SystemCore>,
}

impl SystemHandle {
    pub(crate) fn from_core(core: Arc<SystemCore>) -> Self {
        SystemHandle { core }
    }

    pub(crate) fn core(&self) -> &Arc<SystemCore> {
        &self.core
    }

    /// This system's node identity: its name, address and incarnation.
    /// Every actor it spawns carries it ([`ActorId::node`]).
    pub fn node(&self) -> NodeId {
        self.core.node.clone()
    }

    fn spawn_top<A: Actor>(
        &self,
        options: SpawnOptions,
        source: Source<A>,
    ) -> Result<ActorRef<A>, SpawnError> {
        let guardian = &self.core.guardian;
        spawn_actor(&self.core, None, options, source, |c| guardian.add(c))
    }

    /// Spawns a top-level actor from a value. It is not restarted if it
    /// fails; see [`spawn_with`](Self::spawn_with).
    pub fn spawn<A: Actor>(&self, actor: A) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_top(SpawnOptions::new(), Source::Value(actor))
    }

    /// Spawns a restartable top-level actor built by `factory` (now and on
    /// every restart).
    pub fn spawn_with<A: Actor>(
        &self,
        factory: impl FnMut() -> A + Send + 'static,
    ) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_top(SpawnOptions::new(), Source::Factory(Box::new(factory)))
    }

    /// Spawns a top-level actor from a value, with options.
    pub fn spawn_with_options<A: Actor>(
        &self,
        options: SpawnOptions,
        actor: A,
    ) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_top(options, Source::Value(actor))
    }

    /// Spawns a restartable top-level actor, with options.
    pub fn spawn_factory_with_options<A: Actor>(
        &self,
        options: SpawnOptions,
        factory: impl FnMut() -> A + Send + 'static,
    ) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_top(options, Source::Factory(Box::new(factory)))
    }

    /// Stops a top-level actor for good, whatever its restart type (OTP's
    /// `supervisor:terminate_child` on the top-level supervisor): it stops
    /// with [`ExitReason::Shutdown`] after its current message and the
    /// guardian does not restart it. Returns at once; await
    /// [`ActorRef::wait_stopped`] to know when it is gone. Terminating an
    /// actor that has already stopped does nothing.
    ///
    /// Fails with [`TerminateError::NotAChild`] for an actor spawned by
    /// another actor (its parent terminates it, with
    /// [`Context::terminate_child`](crate::Context::terminate_child)).
    /// [`ActorRef::stop`] instead is a normal exit, after which a
    /// [`Restart::Permanent`](crate::Restart::Permanent) actor is restarted.
    pub fn terminate<A: Actor>(&self, actor: &ActorRef<A>) -> Result<(), TerminateError> {
        let cell = actor.cell();
        if !cell.is_top_level() || !Arc::ptr_eq(&cell.system, &self.core) {
            return Err(TerminateError::NotAChild(actor.id()));
        }
        cell.send_signal(Signal::Stop(ExitReason::Shutdown));
        Ok(())
    }

    /// Registers `actor` under `name`. Fails with
    /// [`RegistryError::NameTaken`] while another live actor holds it. The
    /// name is released when the actor stops.
    pub fn register<A: Actor>(&self, name: &str, actor: &ActorRef<A>) -> Result<(), RegistryError> {
        self.core.registry.register(name.to_owned(), actor)
    }

    /// Releases a name; `false` if nobody held it.
    pub fn unregister(&self, name: &str) -> bool {
        self.core.registry.unregister(name)
    }

    /// The live actor registered under `name`, if it is an `A`.
    pub fn whereis<A: Actor>(&self, name: &str) -> Option<ActorRef<A>> {
        self.core.registry.whereis(name)
    }

    /// The id of the live actor registered under `name`, whatever its type.
    pub fn whereis_id(&self, name: &str) -> Option<ActorId> {
        self.core.registry.whereis_id(name)
    }

    /// Adds a member to a group of `M` recipients (joining twice is one
    /// membership). Members leave automatically when they stop.
    pub fn join_group<M: Message>(&self, group: &str, member: Recipient<M>) {
        self.core.registry.join(group, member)
    }

    /// Removes a member; `false` if it was not in the group.
    pub fn leave_group<M: Message>(&self, group: &str, member: ActorId) -> bool {
        self.core.registry.leave::<M>(group, member)
    }

    /// The live members of a group.
    pub fn group_members<M: Message>(&self, group: &str) -> Vec<Recipient<M>> {
        self.core.registry.members(group)
    }

    /// Tells every live member of `group` a clone of `msg`; returns how many
    /// accepted it.
    pub fn broadcast<M: Message + Clone>(&self, group: &str, msg: M) -> usize {
        self.core
            .registry
            .members::<M>(group)
            .iter()
            .filter(|m| m.tell(msg.clone()).is_ok())
            .count()
    }

    /// How many messages went to dead letters so far.
    pub fn dead_letter_count(&self) -> u64 {
        self.core.dead_letters.count()
    }

    /// Sends a [`DeadLetter`] to `subscriber` for every undelivered message
    /// from now on.
    pub fn subscribe_dead_letters(&self, subscriber: Recipient<DeadLetter>) {
        self.core.dead_letters.subscribe(subscriber)
    }

    /// The time the system's timers go by: the real clock, or the virtual
    /// one of a system built with
    /// [`virtual_time`](ActorSystemBuilder::virtual_time).
    pub fn now(&self) -> Instant {
        self.core.timers.now()
    }

    /// Moves a virtual clock on by `by`, delivering every timer message and
    /// failing every `ask` timeout that falls due on the way, in deadline
    /// order, before returning. Returns how many timers fired. Messages are
    /// delivered, not yet handled: the actors handle them on their worker
    /// threads as usual.
    ///
    /// Fails with [`TimeError::RealClock`] on a system that runs on the real
    /// clock.
    pub fn advance_time(&self, by: Duration) -> Result<usize, TimeError> {
        if !self.core.timers.is_virtual() {
            return Err(TimeError::RealClock);
        }
        Ok(self.core.timers.advance(by))
    }

    /// On a system built with
    /// [`manual_scheduling`](ActorSystemBuilder::manual_scheduling): runs one
    /// turn of one ready actor on this thread. `choose(n)` is given the
    /// number of ready actors (in the order they became ready) and returns
    /// which to run (modulo `n`) and how many messages it may handle (at
    /// least 1). `None` when no actor is ready, or the system is not
    /// manually scheduled.
    pub fn run_one(&self, choose: &mut dyn FnMut(usize) -> (usize, u32)) -> Option<TurnRun> {
        self.core.scheduler.run_one(choose)
    }

    /// On a manually scheduled system: how many actors are ready to run
    /// (the `n` the next [`run_one`](Self::run_one) will choose from). 0 on
    /// a system with worker threads.
    pub fn ready_actors(&self) -> usize {
        self.core.scheduler.ready_len()
    }

    /// On a system built with
    /// [`hold_messages`](ActorSystemBuilder::hold_messages): every message
    /// sent since the last call, in the order sent, for the caller to
    /// deliver. Empty on other systems (a custom
    /// [`divert`](ActorSystemBuilder::divert) keeps its own).
    pub fn take_in_flight(&self) -> Vec<InFlight> {
        match &self.core.outbox {
            Some(outbox) => outbox.take(),
            None => Vec::new(),
        }
    }

    /// A future that completes after `duration` on the system's clock: real
    /// time, or virtual time on a system built with
    /// [`virtual_time`](ActorSystemBuilder::virtual_time) (where it is what
    /// a simulated [`AsyncHandler`](crate::AsyncHandler) should await
    /// instead of `tokio::time::sleep`). The wait starts at the first poll.
    /// Once the system has shut down there is no clock left to wait on: the
    /// sleep then ends at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troubadour::ActorSystem;
    /// let system = ActorSystem::new();
    /// system.block_on(system.sleep(Duration::from_millis(1)));
    /// ```
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::new(self.core.clone(), duration)
    }

    /// When the earliest pending timer (or `ask` timeout) falls due.
    pub fn next_timer_at(&self) -> Option<Instant> {
        self.core.timers.next_deadline()
    }

    /// The tokio runtime handlers run in (for `tokio::spawn` from outside).
    pub fn tokio_handle(&self) -> &tokio::runtime::Handle {
        self.core.tokio.handle()
    }

    /// Runs a future to completion from synchronous code (a plain `fn main`),
    /// inside the system's tokio runtime. Do not call it from a handler.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        let _guard = self.core.tokio.handle().enter();
        crate::runtime::blocking::block_on(fut)
    }
}

/// Builds an [`ActorSystem`] with non-default settings.
///
/// ```
/// use troubadour::{ActorSystem, Mailbox};
/// use std::time::Duration;
/// let system = ActorSystem::builder()
///     .worker_threads(2)
///     .budget(64)
///     .default_mailbox(Mailbox::Unbounded)
///     .ask_timeout(Duration::from_secs(2))
///     .build();
/// ```
pub struct ActorSystemBuilder {
    name: String,
    worker_threads: usize,
    budget: u32,
    default_mailbox: Mailbox,
    ask_timeout: Duration,
    tokio: Option<tokio::runtime::Handle>,
    virtual_time: bool,
    manual_scheduling: bool,
    divert: Option<Arc<dyn Divert>>,
    outbox: Option<Arc<Outbox>>,
    crash_reports: CrashReports,
    guardian_strategy: SupervisorStrategy,
}

impl Default for ActorSystemBuilder {
    fn default() -> Self {
        ActorSystemBuilder {
            name: "troubadour".to_string(),
            worker_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            budget: 64,
            default_mailbox: Mailbox::Unbounded,
            ask_timeout: Duration::from_secs(5),
            tokio: None,
            virtual_time: false,
            manual_scheduling: false,
            divert: None,
            outbox: None,
            crash_reports: CrashReports::default(),
            guardian_strategy: SupervisorStrategy::default(),
        }
    }
}

impl ActorSystemBuilder {
    /// The system's name (default `"troubadour"`), part of its
    /// [`NodeId`] and of how its actors' ids print (`<orders.42>`). ASCII
    /// letters, digits, `-` and `_`, not starting with `-` or `_` (Akka's
    /// rule); [`try_build`](Self::try_build) reports any other name as
    /// [`BuildError::InvalidName`]. Names need not be unique: every start is
    /// a new node whatever its name, but distinct names keep logs readable.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Worker threads running actors (default: one per core).
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.worker_threads = n.max(1);
        self
    }

    /// Messages an actor handles per turn before others get the thread
    /// (default 64). Lower is fairer, higher is faster for floods.
    pub fn budget(mut self, messages: u32) -> Self {
        self.budget = messages.max(1);
        self
    }

    /// Mailbox for actors whose spawn options do not pick one.
    pub fn default_mailbox(mut self, mailbox: Mailbox) -> Self {
        self.default_mailbox = mailbox;
        self
    }

    /// Timeout of an `ask` not given one with `.timeout(..)` (default 5 s).
    pub fn ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// Runs the system's timers (`send_after`, `send_interval`) and `ask`
    /// timeouts on a virtual clock that stands still until
    /// [`SystemHandle::advance_time`] moves it, for tests of time-dependent
    /// behaviour that run in milliseconds and never flake. Read the clock
    /// with [`SystemHandle::now`] or [`Context::now`](crate::Context::now).
    /// Tokio's own timers (a `tokio::time::sleep` in an
    /// [`AsyncHandler`](crate::AsyncHandler)) keep real time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troubadour::ActorSystem;
    /// let system = ActorSystem::builder().virtual_time().build();
    /// let start = system.now();
    /// system.advance_time(Duration::from_secs(1800))?;
    /// assert_eq!(system.now() - start, Duration::from_secs(1800));
    /// # Ok::<(), troubadour::TimeError>(())
    /// ```
    pub fn virtual_time(mut self) -> Self {
        self.virtual_time = true;
        self
    }

    /// No worker threads: actors run only when
    /// [`SystemHandle::run_one`] runs them, one turn at a time on the
    /// calling thread, and time is virtual (see
    /// [`virtual_time`](Self::virtual_time)). This is what the test kit's
    /// deterministic simulation drives; a program that only spawns and sends
    /// from that one thread then runs the same way every time for the same
    /// sequence of choices. Blocking actors run as ordinary ones.
    pub fn manual_scheduling(mut self) -> Self {
        self.manual_scheduling = true;
        self.virtual_time = true;
        self
    }

    /// Every `tell` and `ask` is held as an [`InFlight`] instead of entering
    /// the mailbox, until whoever drives the system takes it with
    /// [`SystemHandle::take_in_flight`] and delivers it (or injects a fault
    /// in its place). This is how the test kit's simulation chooses the
    /// interleaving of messages from different senders and injects faults;
    /// a system without it pays nothing for it. Once the system shuts down,
    /// sends go straight to mailboxes again.
    pub fn hold_messages(mut self) -> Self {
        let outbox = Arc::new(Outbox::default());
        self.divert = Some(outbox.clone());
        self.outbox = Some(outbox);
        self
    }

    /// Hands every `tell`, `ask` and graceful stop to `divert` instead of
    /// the mailbox: the seam for extensions that stand between senders and
    /// actors (a simulated network, the remote layer). See
    /// [`divert`](crate::simulation::divert). Replaces
    /// [`hold_messages`](Self::hold_messages), which is this with the
    /// built-in [`Outbox`].
    pub fn divert(mut self, divert: impl Divert) -> Self {
        self.divert = Some(Arc::new(divert));
        self.outbox = None;
        self
    }

    /// How a panic in an actor that the runtime catches (and its supervisor
    /// handles) is reported: by default one `tracing` event per panic
    /// (target `troubadour::crash`; one line on stderr when no subscriber is
    /// installed) instead of Rust's panic message and backtrace from a
    /// worker thread. [`CrashReports::PanicHook`] leaves them to the
    /// process's panic hook. Panics outside actors are never touched.
    pub fn crash_reports(mut self, reports: CrashReports) -> Self {
        self.crash_reports = reports;
        self
    }

    /// How the system's guardian supervises top-level actors (those spawned
    /// from the system, not from an actor): the restart intensity allowed
    /// to each before it is stopped with
    /// [`ExitReason::RestartLimit`]. Default: 3 restarts in 5 s. Like Akka's
    /// guardian strategy, and unlike an OTP supervisor, the guardian counts
    /// restarts per top-level actor: they are independent of each other.
    ///
    /// Only [`Strategy::OneForOne`](crate::Strategy::OneForOne) is accepted:
    /// top-level actors do not depend on each other, so restarting them all
    /// for one failure has no meaning here; actors that must restart
    /// together belong under a supervisor actor with that strategy.
    /// [`try_build`](Self::try_build) reports another kind as
    /// [`BuildError::GuardianStrategy`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use troubadour::{ActorSystem, SupervisorStrategy};
    /// let system = ActorSystem::builder()
    ///     .guardian_strategy(SupervisorStrategy::default().intensity(10, Duration::from_secs(60)))
    ///     .build();
    /// ```
    pub fn guardian_strategy(mut self, strategy: SupervisorStrategy) -> Self {
        self.guardian_strategy = strategy;
        self
    }

    /// Uses this tokio runtime for handlers' I/O and timers. By default the
    /// current multi-threaded runtime is used when there is one (inside
    /// `#[tokio::main]`), else the system starts a small one of its own.
    pub fn tokio_handle(mut self, handle: tokio::runtime::Handle) -> Self {
        self.tokio = Some(handle);
        self
    }

    /// Starts the system.
    ///
    /// # Panics
    /// If the name or the guardian's strategy is invalid (see
    /// [`name`](Self::name), [`guardian_strategy`](Self::guardian_strategy)) or the operating
    /// system refuses the worker threads; use [`try_build`](Self::try_build)
    /// to handle those as errors.
    pub fn build(self) -> ActorSystem {
        match self.try_build() {
            Ok(system) => system,
            Err(e) => panic!("cannot start the actor system: {e}"),
        }
    }

    /// Starts the system, reporting an invalid name or a refused thread or
    /// runtime as an error.
    pub fn try_build(self) -> Result<ActorSystem, BuildError> {
        validate_name(&self.name)?;
        if self.guardian_strategy.kind != crate::Strategy::OneForOne {
            return Err(BuildError::GuardianStrategy(self.guardian_strategy.kind));
        }
        let current = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let tokio = match self.tokio.or(current) {
            Some(h) => TokioRuntime::borrowed(h),
            None => TokioRuntime::own(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("troubadour-io")
                    .enable_all()
                    .build()?,
            ),
        };
        crash_report::install();
        let (node, index) = NodeId::start(&self.name)?;
        let core = Arc::new(SystemCore {
            scheduler: if self.manual_scheduling {
                Scheduler::manual(self.budget, tokio.handle().clone(), self.crash_reports)
            } else {
                Scheduler::new(
                    self.worker_threads,
                    self.budget,
                    tokio.handle().clone(),
                    self.crash_reports,
                )?
            },
            dead_letters: DeadLetters::default(),
            registry: Registry::default(),
            timers: if self.virtual_time {
                Timers::virtual_clock()
            } else {
                Timers::default()
            },
            guardian: Guardian::new(self.guardian_strategy),
            config: Config {
                default_mailbox: self.default_mailbox,
                ask_timeout: self.ask_timeout,
            },
            tokio,
            node,
            id_base: u64::from(index) << SERIAL_BITS,
            next_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            divert: self.divert,
            outbox: self.outbox,
        });
        Ok(ActorSystem {
            handle: SystemHandle { core },
            default_deadline: Duration::from_secs(5),
        })
    }
}

/// The owner of a running actor system. Dropping it shuts the system down
/// (with a 5 s deadline); call [`shutdown`](Self::shutdown) to choose the
/// deadline and see the outcome. Everything else is on [`SystemHandle`],
/// which this dereferences to.
///
/// ```
/// use troubadour::prelude::*;
/// let system = ActorSystem::new();
/// # struct A; impl Actor for A {}
/// let a = system.spawn(A)?;
/// system.shutdown(std::time::Duration::from_secs(1))?;
/// assert!(!a.is_alive());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ActorSystem {
    handle: SystemHandle,
    default_deadline: Duration,
}

impl Default for ActorSystem {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for ActorSystem {
    type Target = SystemHandle;
    fn deref(&self) -> &SystemHandle {
        &self.handle
    }
}

impl ActorSystem {
    /// A system with one worker thread per core, unbounded mailboxes and a
    /// 5 s default ask timeout.
    pub fn new() -> Self {
        ActorSystemBuilder::default().build()
    }

    /// Configures a system.
    pub fn builder() -> ActorSystemBuilder {
        ActorSystemBuilder::default()
    }

    /// A handle for other threads or tasks.
    pub fn handle(&self) -> SystemHandle {
        self.handle.clone()
    }

    /// Stops every actor, children before parents, waiting up to `deadline`.
    /// Pending `ask`s end with [`AskError::NoReply`](crate::AskError::NoReply)
    /// and later spawns fail with [`SpawnError::SystemShutdown`]. Actors
    /// still running at the deadline are killed and reported. The deadline
    /// holds even for a handler that never returns (blocked in a system
    /// call, looping): its worker thread is left behind, detached, and ends
    /// when the handler does; asks still waiting then end with
    /// [`AskError::SystemShutdown`](crate::AskError::SystemShutdown).
    /// Calling it again is harmless.
    pub fn shutdown(&self, deadline: Duration) -> Result<(), ShutdownError> {
        let core = &self.handle.core;
        if core.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let on_worker = core.scheduler.is_worker_thread();
        // Held messages were sent before the shutdown: they reach their
        // actors (and are drained to dead letters with them), and later
        // sends are no longer held.
        for held in self.take_in_flight() {
            held.deliver();
        }
        core.guardian.stop_all();
        let until = Instant::now() + deadline;
        let mut left = if core.scheduler.is_manual() {
            // Nobody else runs actors: drive the stops here, in order.
            while core.scheduler.run_one(&mut |_| (0, u32::MAX)).is_some() {}
            core.guardian.wait_all_stopped(Instant::now())
        } else if on_worker {
            0
        } else {
            core.guardian.wait_all_stopped(until)
        };
        if left > 0 {
            core.guardian.kill_all();
            left = core
                .guardian
                .wait_all_stopped(Instant::now() + Duration::from_millis(100));
        }
        core.timers.shutdown();
        // The deadline holds even for a handler that never returns: its
        // worker is left behind rather than joined (and counted above,
        // since its actor could not stop).
        core.scheduler
            .shutdown(Some(Instant::now() + Duration::from_millis(100)));
        core.guardian.clear();
        core.registry.clear();
        core.dead_letters.clear();
        core.tokio.shut_down();
        if left > 0 {
            Err(ShutdownError::DeadlineExceeded {
                still_running: left,
            })
        } else {
            Ok(())
        }
    }
}

impl Drop for ActorSystem {
    fn drop(&mut self) {
        let _ = self.shutdown(self.default_deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nobody;
    impl Actor for Nobody {}

    #[test]
    fn the_last_serial_is_handed_out_and_then_spawns_fail_instead_of_wrapping() {
        let system = ActorSystem::builder().manual_scheduling().build();
        system.core.next_id.store(MAX_SERIAL, Ordering::Relaxed);
        let last = system.spawn(Nobody).unwrap();
        assert_eq!(last.id().serial(), MAX_SERIAL);
        assert_eq!(last.id().node(), system.node());
        assert_eq!(
            system.spawn(Nobody).err(),
            Some(SpawnError::IdsExhausted),
            "the next serial would spill into the node bits"
        );
    }
}
