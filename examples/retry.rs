//! Retries that double-charge, and the fault injection that shows it.
//!
//! A client charges a card through a ledger actor with `ask`, waits one
//! second for the answer and, on a timeout, sends the charge again (up to
//! three tries). With prompt delivery that is fine. But a slow message is
//! not a lost one: if the first charge is only late, the ledger gets it and
//! the retry, and the naive ledger charges twice. Delays of more than a
//! second are rare on a real machine, so ordinary tests never see this; a
//! simulation that delays messages at random (chosen by the seed, in
//! virtual time, so the test still takes milliseconds) finds it at once,
//! and the seed replays it. The fixed ledger remembers which payment ids
//! it has applied and answers a repeat without charging again.
//!
//! Run: `cargo run -p troubadour-testkit --example retry`.

use std::collections::HashMap;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_testkit::{Faults, Simulation};

/// The ledger: every charge it applied, in order.
pub struct Ledger {
    /// Answer a repeated payment id instead of charging it again.
    idempotent: bool,
    charges: Vec<(u64, u32)>,
    applied: HashMap<u64, bool>,
}

impl Actor for Ledger {}

/// Charge `amount` for payment `id`.
pub struct Charge {
    id: u64,
    amount: u32,
}
impl Message for Charge {
    type Reply = bool;
}
impl Handler<Charge> for Ledger {
    fn handle(&mut self, c: Charge, _: &mut Context<Self>) -> bool {
        if self.idempotent {
            if let Some(&done) = self.applied.get(&c.id) {
                return done;
            }
            self.applied.insert(c.id, true);
        }
        self.charges.push((c.id, c.amount));
        true
    }
}

/// Every charge applied so far.
pub struct Charges;
impl Message for Charges {
    type Reply = Vec<(u64, u32)>;
}
impl Handler<Charges> for Ledger {
    fn handle(&mut self, _: Charges, _: &mut Context<Self>) -> Vec<(u64, u32)> {
        self.charges.clone()
    }
}

/// A client that pays through the ledger, retrying on timeouts.
pub struct Client {
    ledger: ActorRef<Ledger>,
}
impl Actor for Client {}

/// Pay `amount` as payment `id`; answers whether the ledger confirmed it.
pub struct Pay {
    id: u64,
    amount: u32,
}
impl Message for Pay {
    type Reply = bool;
}
impl AsyncHandler<Pay> for Client {
    async fn handle(&mut self, p: Pay, _: &mut Context<Self>) -> bool {
        for _ in 0..3 {
            let charge = Charge {
                id: p.id,
                amount: p.amount,
            };
            match self
                .ledger
                .ask(charge)
                .timeout(Duration::from_secs(1))
                .await
            {
                Ok(done) => return done,
                Err(AskError::Timeout(_)) => continue,
                Err(_) => return false,
            }
        }
        false
    }
}

/// Three clients make two payments each while charges are delayed (up to
/// 3 s) or lost at random; panics if a payment is charged twice or a
/// confirmed one is missing.
pub fn payments(sim: &mut Simulation, idempotent: bool) {
    sim.set_faults(
        Faults::none()
            .delay(0.3, Duration::from_secs(3))
            .drop(0.1)
            .only(|m| m.message_type().ends_with("::Charge")),
    );
    let ledger = sim
        .spawn(Ledger {
            idempotent,
            charges: Vec::new(),
            applied: HashMap::new(),
        })
        .expect("spawn");
    let clients = [(); 3].map(|_| {
        sim.spawn(Client {
            ledger: ledger.clone(),
        })
        .expect("spawn")
    });
    let payments: Vec<_> = (0..6u64)
        .map(|id| {
            let client = &clients[id as usize % 3];
            (
                id,
                client
                    .ask(Pay { id, amount: 10 })
                    .timeout(Duration::from_secs(60)),
            )
        })
        .collect();
    let mut confirmed = Vec::new();
    for (id, reply) in payments {
        if sim.block_on(reply).expect("the client answers") {
            confirmed.push(id);
        }
    }
    // Let late charges land before looking.
    sim.run_for(Duration::from_secs(10));
    let charges = sim.block_on(ledger.ask(Charges)).expect("charges");
    sim.note(format!("confirmed {confirmed:?}, charged {charges:?}"));
    for id in 0..6 {
        let times = charges.iter().filter(|(c, _)| *c == id).count();
        assert!(
            times <= 1,
            "payment {id} was charged {times} times: {charges:?}"
        );
    }
    for id in &confirmed {
        assert!(
            charges.iter().any(|(c, _)| c == id),
            "payment {id} was confirmed but never charged"
        );
    }
}

/// The first of `seeds` under which `payments` fails.
pub fn first_failing_seed(seeds: std::ops::Range<u64>, idempotent: bool) -> Option<u64> {
    seeds.into_iter().find(|&seed| {
        std::panic::catch_unwind(|| payments(&mut Simulation::new(seed), idempotent)).is_err()
    })
}

#[allow(dead_code)]
fn main() -> std::process::ExitCode {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let naive = first_failing_seed(0..1_000, false);
    let fixed = first_failing_seed(0..1_000, true);
    let replay = naive.map(|seed| {
        let mut sim = Simulation::new(seed);
        let failed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| payments(&mut sim, false)))
                .is_err();
        (seed, failed, sim.trace_text())
    });
    std::panic::set_hook(quiet);
    let Some((seed, failed, trace)) = replay else {
        eprintln!("naive ledger: no failing seed in 0..1000; the faults never hit");
        return std::process::ExitCode::FAILURE;
    };
    println!("naive ledger: seed {seed} charges a payment twice. The end of its run:");
    let lines: Vec<&str> = trace.lines().collect();
    for line in &lines[lines.len().saturating_sub(25)..] {
        println!("{line}");
    }
    if !failed {
        eprintln!("seed {seed} passed on replay: the simulation is not deterministic");
        return std::process::ExitCode::FAILURE;
    }
    println!("replaying seed {seed} fails the same way");
    if let Some(seed) = fixed {
        eprintln!("idempotent ledger: seed {seed} fails");
        return std::process::ExitCode::FAILURE;
    }
    println!("idempotent ledger: all 1000 seeds pass");
    std::process::ExitCode::SUCCESS
}
