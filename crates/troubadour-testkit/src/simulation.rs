//! Deterministic simulation: every actor of a system runs on the test's
//! thread, and every scheduling choice (which ready actor runs next, how
//! many messages it may handle this turn) comes from a seeded PRNG. The same
//! seed replays the same run, turn for turn; [`simulate`] tries many seeds
//! and names the one that fails.
//!
//! What varies between seeds is the order in which ready actors run and how
//! far each gets per turn, which is exactly what decides the interleaving of
//! messages from different senders into one mailbox. What never varies is
//! what the runtime guarantees: per-sender FIFO order, one message at a time
//! per actor, control signals first.
//!
//! Time is virtual (see the crate docs): when nothing is ready, the
//! simulation moves the clock to the next timer instead of waiting.

use std::fmt::Write as _;
use std::future::Future;
use std::ops::Deref;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use troubadour::{ActorId, ActorSystem};

/// The largest per-turn message budget a simulation picks. Small budgets
/// make more interleavings reachable.
const MAX_BUDGET: u32 = 8;

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// One line of a simulation's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// `actor` ran one turn, chosen among `ready` ready actors, with at
    /// most `budget` messages.
    Turn {
        /// Who ran.
        actor: ActorId,
        /// How many were ready.
        ready: usize,
        /// Its message budget.
        budget: u32,
    },
    /// The virtual clock moved to this offset from the start.
    Clock(Duration),
    /// A line the test wrote with [`Simulation::note`].
    Note(String),
}

/// A system under deterministic simulation, for one seed.
///
/// ```
/// use troubadour::prelude::*;
/// use troubadour_testkit::Simulation;
///
/// struct Counter(u32);
/// impl Actor for Counter {}
/// struct Add;
/// impl Message for Add { type Reply = u32; }
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, _: Add, _: &mut Context<Self>) -> u32 { self.0 += 1; self.0 }
/// }
///
/// let mut sim = Simulation::new(42);
/// let counter = sim.spawn(Counter(0))?;
/// counter.tell(Add)?;
/// assert_eq!(sim.block_on(counter.ask(Add))?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Spawn and send from the test's thread only (the simulation is that
/// thread); actors run when the simulation runs them: in
/// [`run_until_idle`](Self::run_until_idle), [`run_for`](Self::run_for)
/// and [`block_on`](Self::block_on). Handlers that await other actors'
/// replies or [`SystemHandle::sleep`](troubadour::SystemHandle::sleep) are
/// simulated too; tokio's own timers and I/O are not (they run on tokio's
/// threads, outside the seed's control).
pub struct Simulation {
    system: ActorSystem,
    seed: u64,
    rng: Rng,
    start: Instant,
    trace: Vec<TraceEvent>,
}

impl Simulation {
    /// A fresh system scheduled by `seed`.
    pub fn new(seed: u64) -> Self {
        let system = ActorSystem::builder().manual_scheduling().build();
        let start = system.now();
        Simulation {
            system,
            seed,
            rng: Rng(seed),
            start,
            trace: Vec::new(),
        }
    }

    /// The seed this run follows.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Runs one turn of one ready actor, chosen by the seed. `false` when
    /// no actor is ready.
    pub fn step(&mut self) -> bool {
        let rng = &mut self.rng;
        let mut choose = |n: usize| {
            let r = rng.next();
            (
                (r % n as u64) as usize,
                1 + ((r >> 32) % u64::from(MAX_BUDGET)) as u32,
            )
        };
        match self.system.run_one(&mut choose) {
            Some(turn) => {
                self.trace.push(TraceEvent::Turn {
                    actor: turn.actor,
                    ready: turn.ready,
                    budget: turn.budget,
                });
                true
            }
            None => false,
        }
    }

    /// Runs turns until no actor is ready (timers not moved). Returns how
    /// many turns ran.
    pub fn run_until_idle(&mut self) -> usize {
        let mut turns = 0;
        while self.step() {
            turns += 1;
        }
        turns
    }

    /// Moves the virtual clock to the next pending timer and fires it.
    /// `false` when no timer is pending.
    fn advance_to_next_timer(&mut self) -> bool {
        let Some(at) = self.system.next_timer_at() else {
            return false;
        };
        let by = at.saturating_duration_since(self.system.now());
        // On a manually scheduled system the clock is virtual.
        let _ = self.system.advance_time(by);
        self.trace
            .push(TraceEvent::Clock(self.system.now() - self.start));
        true
    }

    /// Runs the system for `duration` of virtual time: every actor that is
    /// ready runs, then the clock jumps to the next timer, until the next
    /// timer is past `duration` from now.
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.system.now() + duration;
        loop {
            self.run_until_idle();
            match self.system.next_timer_at() {
                Some(at) if at <= end => {
                    self.advance_to_next_timer();
                }
                _ => break,
            }
        }
        let rest = end.saturating_duration_since(self.system.now());
        let _ = self.system.advance_time(rest);
        self.run_until_idle();
    }

    /// Runs the simulation until `fut` (an `ask`, say) completes, moving
    /// virtual time to the next timer whenever nothing is ready.
    ///
    /// # Panics
    /// If the future is still pending when no actor is ready and no timer
    /// is pending: nothing could ever complete it.
    pub fn block_on<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = TaskContext::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
            if self.step() || self.advance_to_next_timer() {
                continue;
            }
            panic!(
                "simulation (seed {}): the awaited future can never complete: no actor is ready and no timer is pending",
                self.seed
            );
        }
    }

    /// Adds a line to the trace (for the test's own events).
    pub fn note(&mut self, line: impl Into<String>) {
        self.trace.push(TraceEvent::Note(line.into()));
    }

    /// Everything that happened, in order.
    pub fn trace(&self) -> &[TraceEvent] {
        &self.trace
    }

    /// The trace as text, one event per line.
    pub fn trace_text(&self) -> String {
        let mut out = String::new();
        for (i, e) in self.trace.iter().enumerate() {
            let _ = match e {
                TraceEvent::Turn {
                    actor,
                    ready,
                    budget,
                } => writeln!(
                    out,
                    "{i:>6} turn  actor {actor} (1 of {ready} ready, budget {budget})"
                ),
                TraceEvent::Clock(t) => writeln!(out, "{i:>6} clock {t:?}"),
                TraceEvent::Note(s) => writeln!(out, "{i:>6} note  {s}"),
            };
        }
        out
    }
}

impl Deref for Simulation {
    type Target = ActorSystem;

    fn deref(&self) -> &ActorSystem {
        &self.system
    }
}

/// Polling is driven by the simulation's loop, so wake-ups need no action.
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// Environment variable: run only this seed (the replay command a failure
/// prints sets it).
pub const SEED_VAR: &str = "TROUBADOUR_SIM_SEED";
/// Environment variable: how many seeds [`simulate`] tries (default 100).
pub const SEEDS_VAR: &str = "TROUBADOUR_SIM_SEEDS";

/// The seeds [`simulate`] runs: only `$TROUBADOUR_SIM_SEED` when set, else
/// `0..$TROUBADOUR_SIM_SEEDS` (default `0..default`).
pub fn seeds(default: u64) -> std::ops::Range<u64> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match var(SEED_VAR) {
        Some(seed) => seed..seed + 1,
        None => 0..var(SEEDS_VAR).unwrap_or(default),
    }
}

/// Runs `body` once per seed in `seeds`, each on a fresh [`Simulation`].
/// When a run panics, prints its seed, the one-line command that replays
/// only that seed, and the end of its trace, then fails with the original
/// panic.
///
/// ```no_run
/// use troubadour_testkit::{seeds, simulate};
/// simulate(seeds(100), |sim| {
///     // spawn, send, sim.run_for(..), assert
/// });
/// ```
pub fn simulate(seeds: impl IntoIterator<Item = u64>, mut body: impl FnMut(&mut Simulation)) {
    for seed in seeds {
        let mut sim = Simulation::new(seed);
        let Err(payload) = catch_unwind(AssertUnwindSafe(|| body(&mut sim))) else {
            continue;
        };
        let trace = sim.trace_text();
        let lines: Vec<&str> = trace.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        let test = std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .map(|n| format!(" {n} -- --exact"))
            .unwrap_or_default();
        eprintln!(
            "\nsimulation failed with seed {seed}\nreplay only this seed:  {SEED_VAR}={seed} cargo test{test}\nlast {} of {} trace events:\n{}",
            tail.len(),
            lines.len(),
            tail.join("\n")
        );
        resume_unwind(payload);
    }
}
