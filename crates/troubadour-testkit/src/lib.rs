//! # troubadour-testkit
//!
//! Tools for testing actor programs built on troubadour.
//!
//! * [`TestProbe`]: an actor the test controls. Hand its
//!   [`recipient`](TestProbe::recipient) to the code under test and assert
//!   on what arrives: [`expect_msg`](TestProbe::expect_msg),
//!   [`expect_msg_matching`](TestProbe::expect_msg_matching),
//!   [`expect_no_msg`](TestProbe::expect_no_msg),
//!   [`receive_n`](TestProbe::receive_n), [`fish_for`](TestProbe::fish_for).
//!   An autopilot answers `ask`s.
//!
//! ```
//! use std::time::Duration;
//! use troubadour::prelude::*;
//! use troubadour_testkit::TestProbe;
//!
//! // The actor under test forwards doubled numbers to whoever it was given.
//! struct Doubler { out: Recipient<Doubled> }
//! impl Actor for Doubler {}
//! struct Number(u32);
//! impl Message for Number { type Reply = (); }
//! #[derive(Debug, PartialEq)]
//! struct Doubled(u32);
//! impl Message for Doubled { type Reply = (); }
//! impl Handler<Number> for Doubler {
//!     fn handle(&mut self, Number(n): Number, _: &mut Context<Self>) {
//!         let _ = self.out.tell(Doubled(2 * n));
//!     }
//! }
//!
//! let system = ActorSystem::new();
//! let probe = TestProbe::new(&system)?;
//! let doubler = system.spawn(Doubler { out: probe.recipient() })?;
//! doubler.tell(Number(1))?;
//! doubler.tell(Number(2))?;
//! assert_eq!(probe.receive_n(2, Duration::from_secs(3)), [Doubled(2), Doubled(4)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Virtual time
//!
//! Build the system under test with
//! [`ActorSystem::builder().virtual_time()`](troubadour::ActorSystemBuilder::virtual_time):
//! its timers (`send_after`, `send_interval`) and `ask` timeouts then move
//! only when the test calls
//! [`advance_time`](troubadour::SystemHandle::advance_time), and actors read
//! that clock with [`Context::now`](troubadour::Context::now). A test of a
//! 30-minute expiry runs in milliseconds and never depends on the machine's
//! speed:
//!
//! ```
//! use std::time::Duration;
//! use troubadour::prelude::*;
//! use troubadour_testkit::TestProbe;
//!
//! #[derive(Debug, PartialEq)]
//! struct Reminder;
//! impl Message for Reminder { type Reply = (); }
//!
//! /// Reminds `0` 30 minutes after it starts.
//! struct Alarm(Recipient<Reminder>);
//! impl Actor for Alarm {
//!     fn started(&mut self, ctx: &mut Context<Self>) {
//!         ctx.send_after(Duration::from_secs(30 * 60), Ring);
//!     }
//! }
//! struct Ring;
//! impl Message for Ring { type Reply = (); }
//! impl Handler<Ring> for Alarm {
//!     fn handle(&mut self, _: Ring, _: &mut Context<Self>) { let _ = self.0.tell(Reminder); }
//! }
//! struct Ready;
//! impl Message for Ready { type Reply = (); }
//! impl Handler<Ready> for Alarm {
//!     fn handle(&mut self, _: Ready, _: &mut Context<Self>) {}
//! }
//!
//! let system = ActorSystem::builder().virtual_time().build();
//! let probe = TestProbe::new(&system)?;
//! let alarm = system.spawn(Alarm(probe.recipient()))?;
//! // An actor starts on its own thread: make sure `started` has set the
//! // timer before moving the clock.
//! alarm.ask(Ready).wait()?;
//! system.advance_time(Duration::from_secs(30 * 60 - 1))?;
//! probe.expect_no_msg(Duration::from_millis(10));
//! system.advance_time(Duration::from_secs(1))?;
//! probe.expect_msg_eq(Reminder, Duration::from_secs(5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Deterministic simulation
//!
//! A [`Simulation`] runs every actor of a system on the test's thread and
//! holds every message in flight until it chooses to deliver it. Every
//! choice comes from a seeded PRNG, on virtual time: deliver which
//! message next (only the oldest of each sender-receiver pair may go, so
//! per-pair order always holds, but a message may overtake one sent
//! earlier by someone else), run which ready actor, with how many messages
//! this turn. The same seed replays the same run event for event;
//! [`simulate`] runs a test body under many seeds (100 by default,
//! `TROUBADOUR_SIM_SEEDS=10000` for a nightly job) and, when one fails,
//! prints its seed, the command that replays only that seed
//! (`TROUBADOUR_SIM_SEED=<seed> cargo test <name> -- --exact`) and the end
//! of its trace.
//!
//! ```
//! use troubadour::prelude::*;
//! use troubadour_testkit::{seeds, simulate};
//!
//! struct Counter(u32);
//! impl Actor for Counter {}
//! struct Add;
//! impl Message for Add { type Reply = u32; }
//! impl Handler<Add> for Counter {
//!     fn handle(&mut self, _: Add, _: &mut Context<Self>) -> u32 { self.0 += 1; self.0 }
//! }
//!
//! simulate(seeds(20), |sim| {
//!     let counter = sim.spawn(Counter(0)).unwrap();
//!     for _ in 0..9 {
//!         counter.tell(Add).unwrap();
//!     }
//!     assert_eq!(sim.block_on(counter.ask(Add)).unwrap(), 10);
//! });
//! ```
//!
//! `examples/bank.rs` is a protocol with a race (check a balance with
//! `ask`, debit with `tell`) that the simulator breaks within a few seeds,
//! and its fix, which survives all of them.
//!
//! ### The trace
//!
//! [`Simulation::trace_text`] tells the run as a story: who sent what to
//! whom (`send #12 <troubadour.3> -> <troubadour.4> tell bank::Withdraw`),
//! when each message was delivered, each turn with its budget, each fault
//! and clock move, and the test's own [`note`](Simulation::note)s.
//! [`Simulation::trace`] gives the same as [`TraceEvent`] values for
//! assertions.
//!
//! ### Fault injection
//!
//! A fault happens at a message, which pins it to a point in the
//! receiver's history and makes it replay exactly:
//!
//! * [`Fault::Panic`]: the receiver panics when it reaches the message (its
//!   supervisor restarts it, or not); [`Fault::Stop`]: it stops just
//!   before; [`Fault::Delay`]: the message arrives later in virtual time
//!   (its sender's later messages wait behind it); [`Fault::Drop`]: it is
//!   lost, as a network may lose it (an `ask` for it times out).
//! * At a point the test picks: [`Simulation::inject`] with a predicate on
//!   the [`InFlight`] message (its sender, receiver and type).
//! * At random, chosen by the seed: [`Simulation::set_faults`] with
//!   probabilities in [`Faults`], optionally only for some messages.
//!
//! ```
//! use troubadour::prelude::*;
//! use troubadour_testkit::{Fault, Simulation};
//!
//! struct Counter(u32);
//! impl Actor for Counter {}
//! struct Add;
//! impl Message for Add { type Reply = u32; }
//! impl Handler<Add> for Counter {
//!     fn handle(&mut self, _: Add, _: &mut Context<Self>) -> u32 { self.0 += 1; self.0 }
//! }
//! # std::panic::set_hook(Box::new(|_| {}));
//!
//! let mut sim = Simulation::new(1);
//! // Restarted from the factory when it fails.
//! let counter = sim.spawn_with(|| Counter(0))?;
//! let id = counter.id();
//! // The counter panics at the first message it gets.
//! sim.inject(Fault::Panic, move |m| m.to() == id);
//! assert_eq!(sim.block_on(counter.ask(Add)), Err(AskError::NoReply));
//! assert_eq!(sim.block_on(counter.ask(Add))?, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ### Limits
//!
//! Handlers that await other actors' replies or
//! [`SystemHandle::sleep`](troubadour::SystemHandle::sleep) are simulated;
//! tokio's own timers and I/O inside async handlers are not (they run on
//! tokio's threads, outside the seed's control). Replies to `ask`s are not
//! held in flight: they reach the asker as soon as they are sent.
//! Duplicated messages and partitions are network faults; they come with
//! the remote layer, which will feed the same [`InFlight`] hook.
#![warn(missing_docs)]

mod channels;
mod explore;
mod faults;
mod network;
mod probe;
mod rng;
mod simulation;
mod trace;

pub use explore::{seeds, simulate, SEEDS_VAR, SEED_VAR, TRACE_DIR_VAR};
pub use faults::{Fault, Faults};
pub use network::{simulate_network, NetEvent, NodeIndex, SimNetwork};
pub use probe::{ProbeActor, TestProbe};
pub use rng::Rng;
pub use simulation::Simulation;
pub use trace::TraceEvent;
pub use troubadour::InFlight;
