//! Delivery guarantees: per-sender FIFO order, no loss, no duplication, and
//! one message at a time per actor.

mod common;

use common::LIVENESS;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use troubadour::prelude::*;

/// Records, per sender, the sequence numbers received.
struct Checker {
    next: Vec<u64>,
    received: u64,
    busy: Arc<AtomicBool>,
}

impl Actor for Checker {}

struct Seq {
    sender: usize,
    n: u64,
}
impl Message for Seq {
    type Reply = ();
}

struct Report;
impl Message for Report {
    type Reply = (u64, Vec<u64>);
}

impl Handler<Seq> for Checker {
    fn handle(&mut self, Seq { sender, n }: Seq, _: &mut Context<Self>) {
        // One message at a time: nobody else may be inside a handler.
        assert!(
            !self.busy.swap(true, Ordering::SeqCst),
            "concurrent handler call"
        );
        assert_eq!(
            self.next[sender], n,
            "sender {sender}: out of order or duplicated"
        );
        self.next[sender] += 1;
        self.received += 1;
        self.busy.store(false, Ordering::SeqCst);
    }
}

impl Handler<Report> for Checker {
    fn handle(&mut self, _: Report, _: &mut Context<Self>) -> (u64, Vec<u64>) {
        (self.received, self.next.clone())
    }
}

fn run_fifo(threads: usize, senders: usize, per_sender: u64) {
    let system = ActorSystem::builder().worker_threads(threads).build();
    let checker = system
        .spawn(Checker {
            next: vec![0; senders],
            received: 0,
            busy: Arc::new(AtomicBool::new(false)),
        })
        .unwrap();
    let handles: Vec<_> = (0..senders)
        .map(|sender| {
            let checker = checker.clone();
            std::thread::spawn(move || {
                for n in 0..per_sender {
                    checker.tell(Seq { sender, n }).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (received, next) = checker.ask(Report).timeout(LIVENESS).wait().unwrap();
    assert_eq!(received, senders as u64 * per_sender, "messages lost");
    assert!(next.iter().all(|&n| n == per_sender));
    system.shutdown(LIVENESS).unwrap();
}

#[test]
fn fifo_per_sender_many_threads_one_worker() {
    run_fifo(1, 16, 20_000);
}

#[test]
fn fifo_per_sender_many_threads_many_workers() {
    run_fifo(4, 16, 20_000);
}

#[test]
fn fifo_repeated_small_bursts() {
    // Many short runs exercise the idle/scheduled transitions, where a lost
    // wake-up would hang the final ask.
    for _ in 0..200 {
        run_fifo(2, 3, 50);
    }
}

/// Actors as senders: each relay forwards its sequence to the checker.
struct Relay {
    to: ActorRef<Checker>,
    id: usize,
    n: u64,
}
impl Actor for Relay {}
struct Go(u64);
impl Message for Go {
    type Reply = ();
}
impl Handler<Go> for Relay {
    fn handle(&mut self, Go(count): Go, _: &mut Context<Self>) {
        for _ in 0..count {
            self.to
                .tell(Seq {
                    sender: self.id,
                    n: self.n,
                })
                .unwrap();
            self.n += 1;
        }
    }
}

#[test]
fn fifo_between_actors() {
    let system = ActorSystem::builder().worker_threads(3).build();
    let relays = 8;
    let checker = system
        .spawn(Checker {
            next: vec![0; relays],
            received: 0,
            busy: Arc::new(AtomicBool::new(false)),
        })
        .unwrap();
    let refs: Vec<_> = (0..relays)
        .map(|id| {
            system
                .spawn(Relay {
                    to: checker.clone(),
                    id,
                    n: 0,
                })
                .unwrap()
        })
        .collect();
    for _ in 0..50 {
        for r in &refs {
            r.tell(Go(100)).unwrap();
        }
    }
    // Flush: an ask to each relay returns after its earlier Go's were
    // handled, and each relay's tells to the checker precede it.
    struct Flush;
    impl Message for Flush {
        type Reply = ();
    }
    impl Handler<Flush> for Relay {
        fn handle(&mut self, _: Flush, _: &mut Context<Self>) {}
    }
    for r in &refs {
        r.ask(Flush).timeout(LIVENESS).wait().unwrap();
    }
    let (received, _) = checker.ask(Report).timeout(LIVENESS).wait().unwrap();
    assert_eq!(received, relays as u64 * 50 * 100);
}
