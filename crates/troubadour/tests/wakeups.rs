//! No input is ever stranded: an actor whose async handler is woken from
//! another thread while messages and signals arrive at the same moment
//! always runs again (DESIGN.md: an actor with input is never left idle).
//! Each round races a foreign waker, senders and a child's exit against
//! the turn that gives the consumer role up; the loom models check the
//! protocol, this checks the runtime around it, on real threads.

mod common;

use common::{block_on, LIVENESS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use tokio::sync::oneshot;
use troubadour::prelude::*;

/// Sums what its gates and messages bring, and reports each opened gate;
/// spawns children that stop at once, so their exits arrive as signals.
struct Waiter {
    sum: u64,
    opened: mpsc::Sender<usize>,
    me: usize,
    /// Set just before the handler awaits its gate.
    awaiting: Arc<AtomicBool>,
}
impl Actor for Waiter {}

/// Suspends the handler until the gate opens, then adds what came.
struct Wait(oneshot::Receiver<u64>);
impl Message for Wait {
    type Reply = ();
}
impl AsyncHandler<Wait> for Waiter {
    async fn handle(&mut self, Wait(gate): Wait, _: &mut Context<Self>) {
        self.awaiting.store(true, Ordering::Release);
        self.sum += gate.await.unwrap_or(0);
        // Reported outside the actor, so the report is no input to it.
        self.opened.send(self.me).unwrap();
    }
}

struct Add(u64);
impl Message for Add {
    type Reply = ();
}
impl Handler<Add> for Waiter {
    fn handle(&mut self, Add(k): Add, _: &mut Context<Self>) {
        self.sum += k;
    }
}

/// A child that stops in `started`: its exit is a signal to the parent.
struct Brief;
impl Actor for Brief {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

struct SpawnBrief;
impl Message for SpawnBrief {
    type Reply = ();
}
impl Handler<SpawnBrief> for Waiter {
    fn handle(&mut self, _: SpawnBrief, ctx: &mut Context<Self>) {
        ctx.spawn(Brief).unwrap();
    }
}

struct Sum;
impl Message for Sum {
    type Reply = u64;
}
impl Handler<Sum> for Waiter {
    fn handle(&mut self, _: Sum, _: &mut Context<Self>) -> u64 {
        self.sum
    }
}

/// `rounds` rounds on `actors` actors: in each, every actor is suspended
/// on a gate that a foreign thread opens, while (in two rounds of three)
/// another thread sends it a message or has it spawn a child that exits
/// at once (a signal). The test waits for every handler to report its
/// gate before it sends anything more: a wake-up lost in the race would
/// leave the handler suspended, with no later input to rescue it.
fn race_wakers_against_releases(workers: usize, actors: usize, rounds: u64) {
    let system = ActorSystem::builder().worker_threads(workers).build();
    let (opened, reports) = mpsc::channel();
    let awaiting: Arc<Vec<Arc<AtomicBool>>> =
        Arc::new((0..actors).map(|_| Arc::default()).collect());
    let waiters: Vec<ActorRef<Waiter>> = (0..actors)
        .map(|me| {
            system
                .spawn(Waiter {
                    sum: 0,
                    opened: opened.clone(),
                    me,
                    awaiting: awaiting[me].clone(),
                })
                .unwrap()
        })
        .collect();
    let waiters = Arc::new(waiters);
    let start = Arc::new(Barrier::new(3));
    for round in 0..rounds {
        let (opens, gates): (Vec<_>, Vec<_>) = (0..actors).map(|_| oneshot::channel()).unzip();
        for (w, gate) in waiters.iter().zip(gates) {
            w.tell(Wait(gate)).unwrap();
        }
        let opener = {
            let (start, awaiting) = (start.clone(), awaiting.clone());
            std::thread::spawn(move || {
                start.wait();
                // Each gate opens a varying moment after its handler began
                // to await it: sweeping the window in which the turn that
                // suspended the handler gives the role up.
                let mut seed = round.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for (open, awaiting) in opens.into_iter().zip(awaiting.iter()) {
                    while !awaiting.swap(false, Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    for _ in 0..seed % 512 {
                        std::hint::spin_loop();
                    }
                    let _ = open.send(round);
                }
            })
        };
        let sender = {
            let (start, waiters) = (start.clone(), waiters.clone());
            std::thread::spawn(move || {
                start.wait();
                for w in waiters.iter() {
                    match round % 3 {
                        0 => {}
                        1 => w.tell(Add(1)).unwrap(),
                        _ => w.tell(SpawnBrief).unwrap(),
                    }
                }
            })
        };
        start.wait();
        opener.join().unwrap();
        sender.join().unwrap();
        let mut seen = vec![false; actors];
        for _ in 0..actors {
            match reports.recv_timeout(LIVENESS) {
                Ok(me) => seen[me] = true,
                Err(_) => panic!(
                    "round {round}: the handlers of actors {:?} were woken but never resumed",
                    (0..actors).filter(|&i| !seen[i]).collect::<Vec<_>>()
                ),
            }
        }
    }
    // Every gate's value and every `Add` counted.
    let want: u64 = (0..rounds).map(|r| r + u64::from(r % 3 == 1)).sum();
    let sums = block_on(async {
        let mut sums = Vec::new();
        for w in waiters.iter() {
            sums.push(w.ask(Sum).timeout(LIVENESS).await);
        }
        sums
    });
    for (i, sum) in sums.into_iter().enumerate() {
        assert_eq!(
            sum.unwrap_or_else(|e| panic!("actor {i} never answered: {e}")),
            want,
            "actor {i} lost input"
        );
    }
    system.shutdown(LIVENESS).unwrap();
}

#[test]
fn a_woken_handler_always_runs_again_on_one_worker() {
    race_wakers_against_releases(1, 4, 5_000);
}

#[test]
fn a_woken_handler_always_runs_again_on_two_workers() {
    race_wakers_against_releases(2, 4, 5_000);
}
