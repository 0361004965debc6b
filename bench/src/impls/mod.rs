//! The implementations under test, one module each.
//!
//! Adding one is a module with a type that implements [`Contender`] and one
//! line in [`IMPLEMENTATIONS`].

use crate::measure::{IdleMemory, Timed};
use crate::workload::{
    Backlog, BacklogReport, Counting, Direct, Failure, FanIn, Idle, IdleReport, Pi, PingPong,
    Rings, RingsReport, Skynet,
};

mod actix;
mod kameo;
mod plain;
mod ractor;
mod tokio_raw;
mod troubadour;

/// Makes an implementation that runs on the given number of worker threads.
type Make = fn(usize) -> Box<dyn Contender>;

/// Every implementation `--impl` accepts, by name, in the order tables list
/// them.
const IMPLEMENTATIONS: &[(&str, Make)] = &[
    ("troubadour", |threads| {
        Box::new(troubadour::Troubadour::new(threads))
    }),
    ("tokio-raw", |threads| {
        Box::new(tokio_raw::TokioRaw::new(threads))
    }),
    ("kameo", |threads| Box::new(kameo::Kameo::new(threads))),
    ("ractor", |threads| Box::new(ractor::Ractor::new(threads))),
    ("actix", |threads| Box::new(actix::Actix::new(threads))),
    ("plain", |threads| Box::new(plain::Plain::new(threads))),
];

/// Variants run only when named (`--impl`), never by the suite: what a
/// runtime costs with a feature switched on, A/B against its default.
const VARIANTS: &[(&str, Make)] = &[
    // The same code on a system that observes its actors (per-actor
    // counters and the table of live actors a dashboard reads).
    ("troubadour-observed", |threads| {
        Box::new(troubadour::Troubadour::observed(threads))
    }),
];

/// The names of all implementations.
pub fn names() -> impl Iterator<Item = &'static str> {
    IMPLEMENTATIONS.iter().map(|(name, _)| *name)
}

/// The implementation named `name`, given `threads` worker threads.
pub fn contender(name: &str, threads: usize) -> Option<Box<dyn Contender>> {
    IMPLEMENTATIONS
        .iter()
        .chain(VARIANTS)
        .find(|(known, _)| *known == name)
        .map(|(_, make)| make(threads))
}

/// The result of one run: the answer with the time the measured region took
/// (see [`crate::measure::Stopwatch`]), or why there is none.
pub type Outcome<T> = Result<Timed<T>, Failure>;

/// One implementation of the workloads (one `--impl`).
///
/// Each method runs its workload once, in this process, on a runtime the
/// implementation builds itself with the worker-thread count it was given,
/// and returns the raw answer; the harness checks it
/// ([`crate::workload::run`]). The parameter structs document what each
/// workload must do. A method left at its default reports the workload as
/// unsupported; override it with a reason where the library cannot express
/// the workload faithfully.
pub trait Contender {
    /// 1. The reply to `GetAndReset`.
    fn counting(&self, _: &Counting) -> Outcome<u64> {
        Err(not_written())
    }
    /// 2. The pongs each client received, one entry per pair.
    fn pingpong(&self, _: &PingPong) -> Outcome<Vec<u64>> {
        Err(not_written())
    }
    /// 3. The root's sum.
    fn skynet(&self, _: &Skynet) -> Outcome<u64> {
        Err(not_written())
    }
    /// 4. The receiver's total.
    fn fanin(&self, _: &FanIn) -> Outcome<u64> {
        Err(not_written())
    }
    /// 5. What the collector received.
    fn rings(&self, _: &Rings) -> Outcome<RingsReport> {
        Err(not_written())
    }
    /// 6. The census of started and stopped actors; `memory` takes its three
    ///    marks during the run. The timed region is spawning all actors until
    ///    all have started.
    fn idle(&self, _: &Idle, _memory: &mut IdleMemory) -> Outcome<IdleReport> {
        Err(not_written())
    }
    /// 7. The actor's state after the last message.
    fn direct(&self, _: &Direct) -> Outcome<u64> {
        Err(not_written())
    }
    /// 8. The coordinator's sum.
    fn pi(&self, _: &Pi) -> Outcome<f64> {
        Err(not_written())
    }
    /// 9. Each receiver's total, by receiver, and the fill's figures.
    fn backlog(&self, _: &Backlog) -> Outcome<BacklogReport> {
        Err(not_written())
    }
}

/// A fresh multi-thread tokio runtime with `threads` workers, as the
/// tokio-based implementations use.
fn tokio_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("build tokio runtime")
}

/// Runs `driver` as a task on a fresh runtime (not on the calling thread),
/// so the driver works on the runtime's workers like the actors do.
fn run_on_tokio<T: Send + 'static>(
    threads: usize,
    driver: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    tokio_runtime(threads)
        .block_on(async { tokio::spawn(driver).await.expect("driver task panicked") })
}

fn not_written() -> Failure {
    Failure::Unsupported("not written for this implementation".into())
}
