//! Deterministic simulation: every actor of a system runs on the test's
//! thread, every message is held in flight until the simulation delivers
//! it, and every choice (deliver which message next or run which ready
//! actor, how many messages that actor handles this turn, which faults to
//! inject) comes from a seeded PRNG. The same seed replays the same run,
//! event for event; [`simulate`](crate::simulate) tries many seeds and
//! names the one that fails.
//!
//! What varies between seeds: the order in which messages from different
//! senders reach a mailbox (including messages sent later overtaking ones
//! sent earlier by someone else, as across a network), the order in which
//! ready actors run, and how far each gets per turn. What never varies is
//! what the runtime guarantees: messages from one sender to one receiver
//! arrive in the order sent (each pair is its own FIFO channel here), one
//! message at a time per actor, control signals first.
//!
//! Time is virtual: when nothing can happen now, the simulation moves the
//! clock to the next timer or delayed message instead of waiting.

use crate::channels::{Channels, Pair, Pending};
use crate::faults::{Fault, Faults, Injection};
use crate::rng::Rng;
use crate::trace::{render, TraceEvent};
use std::future::Future;
use std::ops::Deref;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use troubadour::{ActorSystem, InFlight};

/// The largest per-turn message budget a simulation picks. Small budgets
/// make more interleavings reachable.
const MAX_BUDGET: u32 = 8;

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
    channels: Channels,
    sent: u64,
    reorder: bool,
    faults: Faults,
    injections: Vec<Injection>,
    /// Dropped messages, kept so that an `ask` for one times out as it
    /// would over a network, instead of failing at once.
    lost: Vec<InFlight>,
}

impl Simulation {
    /// A fresh system scheduled by `seed`.
    pub fn new(seed: u64) -> Self {
        let system = ActorSystem::builder()
            .manual_scheduling()
            .hold_messages()
            .build();
        let start = system.now();
        Simulation {
            system,
            seed,
            rng: Rng(seed),
            start,
            trace: Vec::new(),
            channels: Channels::default(),
            sent: 0,
            reorder: true,
            faults: Faults::none(),
            injections: Vec::new(),
            lost: Vec::new(),
        }
    }

    /// The seed this run follows.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Lets the seed inject faults at random from now on (see [`Faults`]).
    ///
    /// ```
    /// use troubadour_testkit::{Faults, Simulation};
    /// let mut sim = Simulation::new(7);
    /// sim.set_faults(Faults::none().panic(0.05));
    /// ```
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Injects `fault` at the first message delivered from now on for which
    /// `at` is true: a fault at a point the test chooses.
    ///
    /// ```
    /// use troubadour_testkit::{Fault, Simulation};
    /// let mut sim = Simulation::new(7);
    /// // The third `Deposit` that reaches any actor makes it panic.
    /// let mut seen = 0;
    /// sim.inject(Fault::Panic, move |m| {
    ///     seen += m.message_type().ends_with("Deposit") as u32;
    ///     seen == 3
    /// });
    /// ```
    pub fn inject(&mut self, fault: Fault, at: impl FnMut(&InFlight) -> bool + 'static) {
        self.injections.push(Injection {
            fault,
            at: Box::new(at),
        });
    }

    /// Whether a message may overtake one sent earlier by *another* sender
    /// to the same receiver (on by default). DESIGN.md guarantees order
    /// only per sender-receiver pair, and across a network such overtaking
    /// happens, so the simulation explores it. Turn it off to get the
    /// stronger order one process happens to give (a message enters the
    /// mailbox when its sender's turn ends), for code that will never be
    /// distributed. Delay faults still hold a message back either way.
    pub fn set_reordering(&mut self, on: bool) {
        self.reorder = on;
    }

    /// How many messages are sent and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.channels.len()
    }

    /// Moves what was sent since the last look into the channels, in the
    /// order sent (and, without reordering, on into the mailboxes).
    fn collect_sends(&mut self) {
        for message in self.system.take_in_flight() {
            self.sent += 1;
            let pair = (message.from(), message.to());
            self.trace.push(TraceEvent::Send {
                message: self.sent,
                from: pair.0,
                to: pair.1,
                kind: message.message_type(),
                ask: message.is_ask(),
            });
            let first = self.channels.head(&pair).is_none();
            self.channels.push(
                pair,
                Pending {
                    number: self.sent,
                    message,
                    not_before: None,
                },
            );
            if !self.reorder && first {
                self.deliver_head(pair);
            }
        }
    }

    /// Does one thing the seed picks among everything that can happen now:
    /// deliver the next message of one sender-receiver pair, or run one
    /// turn of one ready actor. `false` when nothing can happen until the
    /// clock moves.
    pub fn step(&mut self) -> bool {
        self.collect_sends();
        let deliverable = self.channels.deliverable(self.system.now());
        let ready = self.system.ready_actors();
        let choices = deliverable.len() + ready;
        if choices == 0 {
            return false;
        }
        let r = self.rng.next();
        let pick = (r % choices as u64) as usize;
        if let Some(pair) = self.channels.nth(&deliverable, pick) {
            self.deliver_head(pair);
        } else {
            let budget = 1 + ((r >> 32) % u64::from(MAX_BUDGET)) as u32;
            let mut choose = |_: usize| (pick - deliverable.len(), budget);
            if let Some(turn) = self.system.run_one(&mut choose) {
                self.trace.push(TraceEvent::Turn {
                    actor: turn.actor,
                    ready: turn.ready,
                    budget: turn.budget,
                });
            }
            self.collect_sends();
        }
        true
    }

    /// Delivers the head of `pair`'s channel, or injects the fault the test
    /// or the seed chose for it.
    fn deliver_head(&mut self, pair: Pair) {
        let Some(head) = self.channels.head(&pair) else {
            return;
        };
        let (number, to) = (head.number, head.message.to());
        let already_delayed = head.not_before.is_some();
        let injected = self
            .injections
            .iter_mut()
            .position(|i| (i.at)(&head.message));
        let fault = match injected {
            Some(i) => Some(self.injections.remove(i).fault),
            None => {
                let rng = &mut self.rng;
                self.faults
                    .choose(&head.message, &mut || rng.next())
                    // A message is delayed once at most, so it does arrive.
                    .filter(|f| !(already_delayed && matches!(f, Fault::Delay(_))))
            }
        };
        // A graceful stop's marker is no message: it may wait behind a
        // delay like its sender's messages, but nothing else happens to it
        // (chosen after the draw, so seeds replay as before).
        let fault = fault.filter(|f| !head.message.is_control() || matches!(f, Fault::Delay(_)));
        if let Some(Fault::Delay(by)) = fault {
            self.channels.delay_head(&pair, self.system.now() + by);
            self.trace.push(TraceEvent::Fault {
                message: number,
                to,
                fault: Fault::Delay(by),
            });
            return;
        }
        let Some(Pending { message, .. }) = self.channels.pop(&pair) else {
            return;
        };
        let fault = match fault {
            // Delays were handled above: the message stays at the head.
            None | Some(Fault::Delay(_)) => {
                self.trace.push(TraceEvent::Deliver {
                    message: number,
                    to,
                });
                message.deliver();
                return;
            }
            Some(fault) => fault,
        };
        self.trace.push(TraceEvent::Fault {
            message: number,
            to,
            fault,
        });
        match fault {
            Fault::Panic => message.deliver_with_panic(format!(
                "fault injected by the simulation (seed {}) at message #{number}",
                self.seed
            )),
            Fault::Stop => message.deliver_after_stop(),
            Fault::Drop | Fault::Delay(_) => self.lost.push(message),
        }
    }

    /// Runs until nothing can happen without moving the clock: no message
    /// deliverable, no actor ready. Returns how many steps ran.
    pub fn run_until_idle(&mut self) -> usize {
        let mut steps = 0;
        while self.step() {
            steps += 1;
        }
        steps
    }

    /// When the next thing is due: a timer, or a delayed message.
    fn next_event_at(&self) -> Option<Instant> {
        let delayed = self.channels.next_delayed_at();
        match (self.system.next_timer_at(), delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves the virtual clock to `at`, firing the timers due on the way.
    fn advance_to(&mut self, at: Instant) {
        let by = at.saturating_duration_since(self.system.now());
        // A simulated system's clock is virtual.
        let _ = self.system.advance_time(by);
        self.trace
            .push(TraceEvent::Clock(self.system.now() - self.start));
    }

    /// Moves the clock to the next timer or delayed message. `false` when
    /// there is none.
    fn advance_to_next_event(&mut self) -> bool {
        match self.next_event_at() {
            Some(at) => {
                self.advance_to(at);
                true
            }
            None => false,
        }
    }

    /// Runs the system for `duration` of virtual time: everything that can
    /// happen now happens, then the clock jumps to the next timer or
    /// delayed message, until the next one is past `duration` from now.
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.system.now() + duration;
        loop {
            self.run_until_idle();
            match self.next_event_at() {
                Some(at) if at <= end => self.advance_to(at),
                _ => break,
            }
        }
        let rest = end.saturating_duration_since(self.system.now());
        let _ = self.system.advance_time(rest);
        self.run_until_idle();
    }

    /// Runs the simulation until `fut` (an `ask`, say) completes, moving
    /// virtual time on whenever nothing can happen now.
    ///
    /// # Panics
    /// If the future is still pending when nothing can happen and nothing
    /// is due: nothing could ever complete it.
    pub fn block_on<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = TaskContext::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
            if self.step() || self.advance_to_next_event() {
                continue;
            }
            panic!(
                "simulation (seed {}): the awaited future can never complete: nothing is in flight, no actor is ready and no timer is pending",
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

    /// The trace as text, one event per line: who sent what to whom, when
    /// it was delivered, each turn, fault and clock move.
    ///
    /// ```text
    ///     12 send  #5 #3 -> #4 tell bank::Withdraw
    ///     13 deliv #5 -> #4
    ///     14 turn  #4 (1 of 2 ready, budget 3)
    ///     15 FAULT #6 -> #2: panic in its handler
    /// ```
    pub fn trace_text(&self) -> String {
        render(&self.trace)
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        // Deliberately lost: not dead letters.
        for m in self.lost.drain(..) {
            m.lose();
        }
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
