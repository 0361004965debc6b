//! A bank with a race that only some interleavings expose, and the
//! deterministic simulator finding it.
//!
//! Two tellers each move 80 out of an account that holds 100. The racy
//! teller checks the balance with `ask`, then debits with `tell`: when both
//! tellers check before either debits, both see 100 and the account ends at
//! -60. Whether that happens depends only on the order actors run in, so a
//! test on real threads rarely sees it; the simulator tries seeds until one
//! schedule breaks it, and that seed replays the failure every time. The
//! fixed teller asks the account to debit only if the money is there, in
//! one message, so no schedule can overdraw.
//!
//! Run: `cargo run --example bank` (from the test kit:
//! `cargo run -p troubadour-testkit --example bank`).

use troubadour::prelude::*;
use troubadour_testkit::Simulation;

/// An account: its balance may only go negative through a bug.
pub struct Account {
    balance: i64,
}

impl Actor for Account {}

/// Reads the balance.
pub struct Balance;
impl Message for Balance {
    type Reply = i64;
}
impl Handler<Balance> for Account {
    fn handle(&mut self, _: Balance, _: &mut Context<Self>) -> i64 {
        self.balance
    }
}

/// Takes money out, unconditionally.
pub struct Withdraw(i64);
impl Message for Withdraw {
    type Reply = ();
}
impl Handler<Withdraw> for Account {
    fn handle(&mut self, Withdraw(amount): Withdraw, _: &mut Context<Self>) {
        self.balance -= amount;
    }
}

/// Takes money out if it is there; says whether it did.
pub struct WithdrawIfCovered(i64);
impl Message for WithdrawIfCovered {
    type Reply = bool;
}
impl Handler<WithdrawIfCovered> for Account {
    fn handle(
        &mut self,
        WithdrawIfCovered(amount): WithdrawIfCovered,
        _: &mut Context<Self>,
    ) -> bool {
        let covered = self.balance >= amount;
        if covered {
            self.balance -= amount;
        }
        covered
    }
}

/// Puts money in.
pub struct Deposit(i64);
impl Message for Deposit {
    type Reply = ();
}
impl Handler<Deposit> for Account {
    fn handle(&mut self, Deposit(amount): Deposit, _: &mut Context<Self>) {
        self.balance += amount;
    }
}

/// Moves money between accounts.
pub struct Teller {
    /// Check with one message, debit with another (the bug).
    racy: bool,
}

impl Actor for Teller {}

/// Moves `amount` from `from` to `to`; replies whether it did.
pub struct Transfer {
    from: ActorRef<Account>,
    to: ActorRef<Account>,
    amount: i64,
}
impl Message for Transfer {
    type Reply = bool;
}

impl AsyncHandler<Transfer> for Teller {
    async fn handle(&mut self, t: Transfer, _: &mut Context<Self>) -> bool {
        if self.racy {
            // Check, then act: another teller may debit in between.
            let Ok(balance) = t.from.ask(Balance).await else {
                return false;
            };
            if balance < t.amount {
                return false;
            }
            let _ = t.from.tell(Withdraw(t.amount));
        } else if !matches!(t.from.ask(WithdrawIfCovered(t.amount)).await, Ok(true)) {
            return false;
        }
        let _ = t.to.tell(Deposit(t.amount));
        true
    }
}

/// Two tellers each move 80 out of an account holding 100; panics if money
/// is overdrawn, created or lost.
pub fn two_transfers(sim: &mut Simulation, racy: bool) {
    let source = sim.spawn(Account { balance: 100 }).expect("spawn");
    let sinks = [(); 2].map(|_| sim.spawn(Account { balance: 0 }).expect("spawn"));
    let tellers = [(); 2].map(|_| sim.spawn(Teller { racy }).expect("spawn"));
    let transfers: Vec<_> = tellers
        .iter()
        .zip(&sinks)
        .map(|(teller, sink)| {
            teller.ask(Transfer {
                from: source.clone(),
                to: sink.clone(),
                amount: 80,
            })
        })
        .collect();
    let done: Vec<bool> = transfers
        .into_iter()
        .map(|t| sim.block_on(t).expect("the teller answers"))
        .collect();
    sim.run_until_idle();
    let mut balances = vec![sim.block_on(source.ask(Balance)).expect("balance")];
    for sink in &sinks {
        balances.push(sim.block_on(sink.ask(Balance)).expect("balance"));
    }
    sim.note(format!("transfers done: {done:?}, balances: {balances:?}"));
    assert!(
        balances[0] >= 0,
        "the source account is overdrawn: balances {balances:?}"
    );
    assert_eq!(
        balances.iter().sum::<i64>(),
        100,
        "money was created or lost: {balances:?}"
    );
}

/// The first of `seeds` whose schedule makes `two_transfers` fail.
pub fn first_failing_seed(seeds: std::ops::Range<u64>, racy: bool) -> Option<u64> {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let found = seeds.into_iter().find(|&seed| {
        std::panic::catch_unwind(|| two_transfers(&mut Simulation::new(seed), racy)).is_err()
    });
    std::panic::set_hook(quiet);
    found
}

#[allow(dead_code)]
fn main() -> std::process::ExitCode {
    let Some(seed) = first_failing_seed(0..1_000, true) else {
        eprintln!("racy teller: no failing seed in 0..1000; the simulator missed the race");
        return std::process::ExitCode::FAILURE;
    };
    println!("racy teller: seed {seed} overdraws the account. Its schedule:");
    let mut sim = Simulation::new(seed);
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let replay = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        two_transfers(&mut sim, true)
    }));
    std::panic::set_hook(quiet);
    print!("{}", sim.trace_text());
    if replay.is_ok() {
        eprintln!("seed {seed} passed on replay: the simulation is not deterministic");
        return std::process::ExitCode::FAILURE;
    }
    println!("replaying seed {seed} fails the same way");
    if let Some(seed) = first_failing_seed(0..1_000, false) {
        eprintln!("fixed teller: seed {seed} fails");
        return std::process::ExitCode::FAILURE;
    }
    println!("fixed teller: all 1000 seeds pass");
    std::process::ExitCode::SUCCESS
}
