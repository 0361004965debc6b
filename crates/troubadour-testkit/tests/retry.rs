//! Fault injection finds a real bug: retrying a non-idempotent charge
//! after a timeout double-charges when the first charge was only late. The
//! seed replays it, and the idempotent ledger survives every seed.

#[path = "../../../examples/retry.rs"]
#[allow(dead_code)]
mod retry;

use troubadour_testkit::Simulation;

#[test]
fn delayed_charges_make_naive_retries_double_charge_and_the_seed_replays_it() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let seed = retry::first_failing_seed(0..1_000, false);
    let replay = seed.map(|seed| {
        std::panic::catch_unwind(|| retry::payments(&mut Simulation::new(seed), false))
    });
    std::panic::set_hook(quiet);
    let seed = seed.expect("some seed in 1,000 delays a charge past the client's timeout");
    assert!(
        replay.is_some_and(|r| r.is_err()),
        "seed {seed} failed once and must fail on every replay"
    );
}

#[test]
fn the_idempotent_ledger_survives_every_seed() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let failing = retry::first_failing_seed(0..1_000, true);
    std::panic::set_hook(quiet);
    assert_eq!(failing, None, "the idempotent ledger never charges twice");
}
