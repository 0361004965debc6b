//! `ActorSystemBuilder`: a system's configuration, and its start.

use super::*;

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
    incarnation: Option<u64>,
    clock_start: Option<std::time::Instant>,
    divert: Option<Arc<dyn Divert>>,
    outbox: Option<Arc<Outbox>>,
    crash_reports: CrashReports,
    guardian_strategy: SupervisorStrategy,
    observe: bool,
    io_busy_poll: Duration,
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
            incarnation: None,
            clock_start: None,
            divert: None,
            outbox: None,
            crash_reports: CrashReports::default(),
            guardian_strategy: SupervisorStrategy::default(),
            observe: false,
            io_busy_poll: crate::runtime::busy_poll::DEFAULT,
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

    /// Keeps a table of live actors with counters an observer reads
    /// (a dashboard, a metrics exporter such as `troubadour-observe`):
    /// per actor its kind, supervisor, messages handled, a sampled mailbox
    /// depth, restarts and latest failure; per kind the totals
    /// ([`SystemHandle::metrics`], [`SystemHandle::for_each_actor`]).
    ///
    /// Off by default. On, a spawn and a stop each take one short lock (of
    /// 64, picked by actor id) and allocate one small record, and each turn
    /// of an actor stores one counter; the message path is unchanged.
    /// Actors owned by a [`LocalActor`](crate::LocalActor) are not listed.
    ///
    /// ```
    /// use troubadour::{Actor, ActorSystem};
    /// struct Worker;
    /// impl Actor for Worker {}
    /// let system = ActorSystem::builder().observe().build();
    /// system.spawn(Worker).unwrap();
    /// let metrics = system.metrics();
    /// let workers = metrics.kinds.iter().find(|k| k.kind.ends_with("Worker")).unwrap();
    /// assert_eq!(workers.alive, 1);
    /// ```
    pub fn observe(mut self) -> Self {
        self.observe = true;
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

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    /// Gives the system this incarnation instead of a fresh random one:
    /// for a simulation that must replay from its seed (identities travel
    /// in what nodes send each other). Never for a real system: an
    /// incarnation must be new on every start.
    pub fn incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = Some(incarnation);
        self
    }

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    /// Starts the [virtual clock](Self::virtual_time) at `start` instead of
    /// the real current instant: several systems of one simulation then
    /// share one clock from the start, whenever each was built, so a seed
    /// replays their timers to the nanosecond.
    pub fn virtual_time_from(mut self, start: std::time::Instant) -> Self {
        self.virtual_time = true;
        self.clock_start = Some(start);
        self
    }

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
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

    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
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
    /// `hold_messages` (with the `simulation` feature), which is this with the
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

    /// How long the system's own I/O thread polls the sockets of remote
    /// connections for data before it sleeps (default 50 µs; `ZERO` turns
    /// it off).
    ///
    /// A remote round trip on an idle node otherwise waits, on each side,
    /// for the kernel to wake the I/O thread when the answer arrives, which
    /// on a virtual machine is most of the round trip; Erlang's schedulers
    /// busy-wait before they sleep for the same reason. The poll ends as
    /// soon as a socket is readable or a task is queued for the thread, and
    /// yields the CPU between looks, so other threads ready on that CPU run
    /// first. Its cost is CPU time: up to this long after each burst of
    /// remote traffic, on one thread; and a tokio timer of that thread may
    /// fire up to this late. Set it to `ZERO` where the CPU time
    /// matters more than the round trip (many nodes sharing few cores,
    /// battery-powered devices).
    ///
    /// Only the runtime the system starts for itself polls: with
    /// [`tokio_handle`](Self::tokio_handle), or inside `#[tokio::main]`,
    /// the runtime's threads are the application's and sleep as it built
    /// them. A system without remote connections never polls.
    ///
    /// ```
    /// use troubadour::ActorSystem;
    /// use std::time::Duration;
    /// let system = ActorSystem::builder()
    ///     .io_busy_poll(Duration::ZERO)
    ///     .build();
    /// ```
    pub fn io_busy_poll(mut self, time: Duration) -> Self {
        self.io_busy_poll = time;
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
        let (tokio, busy_poll) = match self.tokio.or(current) {
            Some(h) => (
                TokioRuntime::borrowed(h),
                Arc::new(BusyPoll::new(Duration::ZERO)),
            ),
            None => {
                let busy_poll = Arc::new(BusyPoll::new(self.io_busy_poll));
                let mut runtime = tokio::runtime::Builder::new_multi_thread();
                runtime
                    .worker_threads(1)
                    .thread_name("troubadour-io")
                    .enable_all();
                // tokio under loom has no park hooks (and loom no sockets).
                #[cfg(not(loom))]
                {
                    let polls = busy_poll.clone();
                    runtime.on_thread_park(move || polls.before_park());
                }
                (TokioRuntime::own(runtime.build()?), busy_poll)
            }
        };
        crash_report::install();
        let (node, index) = NodeId::start(&self.name, self.incarnation)?;
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
                Timers::virtual_clock(self.clock_start)
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
            live: self
                .observe
                .then(crate::runtime::observation::LiveActors::new),
            extensions: Default::default(),
            started: Instant::now(),
            busy_poll,
        });
        Ok(ActorSystem {
            handle: SystemHandle { core },
            default_deadline: Duration::from_secs(5),
        })
    }
}
