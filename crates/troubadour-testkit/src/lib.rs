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
//! takes every scheduling choice (which ready actor runs next, how many
//! messages it handles this turn) from a seeded PRNG, on virtual time. The
//! same seed replays the same run turn for turn; [`simulate`] runs a test
//! body under many seeds (100 by default, `TROUBADOUR_SIM_SEEDS=10000` for a
//! nightly job) and, when one fails, prints its seed, the command that
//! replays only that seed (`TROUBADOUR_SIM_SEED=<seed> cargo test <name> --
//! --exact`) and the end of its trace.
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
//! Not here yet: fault injection (panic, stop or delay chosen by the seed),
//! a message-level trace (who sent what to whom; the trace today lists
//! turns, clock moves and the test's notes), and simulation of tokio's own
//! timers and I/O inside async handlers (awaiting other actors' replies and
//! [`SystemHandle::sleep`](troubadour::SystemHandle::sleep) is simulated).
#![warn(missing_docs)]

mod probe;
mod simulation;

pub use probe::{ProbeActor, TestProbe};
pub use simulation::{seeds, simulate, Simulation, TraceEvent, SEEDS_VAR, SEED_VAR};
