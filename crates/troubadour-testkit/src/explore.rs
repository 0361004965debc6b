//! Exploration: one test body under many seeds, and the one-line command
//! that replays a failing seed.

use crate::Simulation;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Environment variable: run only this seed (the replay command a failure
/// prints sets it).
pub const SEED_VAR: &str = "TROUBADOUR_SIM_SEED";
/// Environment variable: how many seeds [`simulate`] tries (default 100).
pub const SEEDS_VAR: &str = "TROUBADOUR_SIM_SEEDS";
/// Environment variable: a directory where [`simulate_network`](crate::simulate_network)
/// writes each seed's whole network trace (`<test>-seed-<n>.trace`, one
/// event per line), passed or failed. Two runs of one seed that part
/// somewhere are a replay bug; `diff` of their files shows where.
pub const TRACE_DIR_VAR: &str = "TROUBADOUR_SIM_TRACE_DIR";

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
        let tail = &lines[lines.len().saturating_sub(60)..];
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
