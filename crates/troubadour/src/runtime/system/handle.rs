//! `SystemHandle`: what actors and users share to spawn, look up, and
//! drive a system (time, simulation hooks).

use super::*;

/// A cheap, cloneable handle to a running system: what actors get from
/// [`Context::system`](crate::Context::system). Spawning, names, groups,
/// dead letters.
#[derive(Clone)]
pub struct SystemHandle {
    pub(crate) core: Arc<SystemCore>,
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

    /// Attaches `value` to this system, one value per type, for any actor
    /// to find with [`extension`](Self::extension): how an extension crate
    /// makes a per-system service (a reminder service, a cluster) reachable
    /// from every handler without threading it through each actor. Returns
    /// the value it replaces. The system drops what it holds at shutdown
    /// (a value set after shutdown is dropped at once).
    ///
    /// ```
    /// use troubadour::ActorSystem;
    /// struct Greeting(&'static str);
    /// let system = ActorSystem::new();
    /// assert!(system.set_extension(Greeting("hello")).is_none());
    /// assert_eq!(system.extension::<Greeting>().unwrap().0, "hello");
    /// assert!(system.extension::<u64>().is_none());
    /// ```
    pub fn set_extension<T: Send + Sync + 'static>(&self, value: T) -> Option<Arc<T>> {
        let old = self.core.extensions.set(value);
        // `shutdown` sets the flag before it clears: a value set after the
        // clear sees the flag here (the lock orders the two).
        if self.core.is_shutting_down() {
            self.core.extensions.clear();
        }
        old
    }

    /// The value of type `T` attached to this system with
    /// [`set_extension`](Self::set_extension), if any.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.core.extensions.get()
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
    /// [`Context::terminate_child`](crate::Context::terminate_child)), one
    /// of another system, or a [`LocalActor`](crate::LocalActor) not yet
    /// spawned.
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

    /// The system's figures now: per kind of actor (when it
    /// [observes](ActorSystemBuilder::observe) its actors), dead letters by
    /// reason, the scheduler's workers, timers. Each call also asks every
    /// actor for a fresh mailbox-depth sample at the end of its next turn,
    /// so depths are at most one observer's interval old.
    pub fn metrics(&self) -> RuntimeMetrics {
        let kinds = match self.core.live.as_ref() {
            Some(live) => {
                live.request_samples();
                live.kinds()
            }
            None => Vec::new(),
        };
        RuntimeMetrics {
            observing: self.core.live.is_some(),
            kinds,
            dead_letters: self.core.dead_letters.counts(),
            workers: self.core.scheduler.workers(),
            timers_armed: self.core.timers.armed(),
            uptime: self.core.started.elapsed(),
        }
    }

    /// Calls `f` with a sample of every live actor (in no particular
    /// order), when the system [observes](ActorSystemBuilder::observe) its
    /// actors; returns `false` (calling nothing) when it does not. Samples
    /// are copied out in batches before `f` sees them, so `f` may spawn,
    /// stop and send; an actor spawned meanwhile may or may not be seen.
    ///
    /// ```
    /// use troubadour::{Actor, ActorSystem};
    /// struct Worker;
    /// impl Actor for Worker {}
    /// let system = ActorSystem::builder().observe().build();
    /// let worker = system.spawn(Worker).unwrap();
    /// let mut seen = Vec::new();
    /// assert!(system.for_each_actor(|a| seen.push(a.id)));
    /// assert_eq!(seen, [worker.id()]);
    /// ```
    pub fn for_each_actor(&self, f: impl FnMut(ActorSample)) -> bool {
        match self.core.live.as_ref() {
            Some(live) => {
                live.for_each(f);
                true
            }
            None => false,
        }
    }

    /// One live actor's sample, with its latest failure (the reason it
    /// last failed or was killed, kept across restarts) and the names it is
    /// registered under; `None` if it has stopped or the system does not
    /// [observe](ActorSystemBuilder::observe) its actors.
    pub fn actor_details(&self, id: ActorId) -> Option<ActorDetails> {
        let (sample, last_failure) = self.core.live.as_ref()?.find(id)?;
        let names = self
            .core
            .registry
            .names()
            .into_iter()
            .filter(|(_, holder)| *holder == id)
            .map(|(name, _)| name)
            .collect();
        Some(ActorDetails {
            sample,
            last_failure,
            names,
        })
    }

    /// Every registered name and the actor holding it, sorted by name.
    pub fn registered_names(&self) -> Vec<(String, ActorId)> {
        self.core.registry.names()
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

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
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

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    /// On a manually scheduled system: how many actors are ready to run
    /// (the `n` the next [`run_one`](Self::run_one) will choose from). 0 on
    /// a system with worker threads.
    pub fn ready_actors(&self) -> usize {
        self.core.scheduler.ready_len()
    }

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
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
