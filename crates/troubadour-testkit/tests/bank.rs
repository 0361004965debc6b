//! The simulator finds a real race: the racy bank overdraws under some seed
//! within 1,000, that seed fails again on replay, and the fixed protocol
//! survives all 1,000.

#[path = "../../../examples/bank.rs"]
#[allow(dead_code)]
mod bank;

use troubadour_testkit::{simulate, Simulation};

#[test]
fn the_simulator_finds_the_overdraft_and_its_seed_replays_it() {
    let seed = bank::first_failing_seed(0..1_000, true)
        .expect("some schedule in 1,000 seeds lets both tellers check before either debits");
    let replay = std::panic::catch_unwind(|| bank::two_transfers(&mut Simulation::new(seed), true));
    assert!(
        replay.is_err(),
        "seed {seed} failed once and must fail on every replay"
    );
}

#[test]
fn the_fixed_protocol_survives_every_seed() {
    simulate(0..1_000, |sim| bank::two_transfers(sim, false));
}
