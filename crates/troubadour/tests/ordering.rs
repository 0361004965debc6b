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

/// A receiver that records what it handles, and waits at its first
/// message until the test lets it go, so that everything sent meanwhile
/// piles up in its mailbox: the case where a mailbox may batch a sender's
/// messages (decision 0052), and where order and drops must still hold.
struct Lagging {
    gate: Option<std::sync::mpsc::Receiver<()>>,
    seen: Vec<String>,
}
impl Actor for Lagging {}

/// A message with a destructor, so a discarded one is seen to be dropped.
struct Small(u64, #[allow(dead_code)] Counted);
impl Message for Small {
    type Reply = ();
}
struct Other(u32);
impl Message for Other {
    type Reply = ();
}
struct Query(u64);
impl Message for Query {
    type Reply = u64;
}
struct Seen;
impl Message for Seen {
    type Reply = Vec<String>;
}

struct Counted(Arc<std::sync::atomic::AtomicU64>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Lagging {
    fn wait_at_the_gate(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.recv_timeout(LIVENESS)
                .expect("the test lets the actor go");
        }
    }
}
impl Handler<Small> for Lagging {
    fn handle(&mut self, Small(n, _): Small, _: &mut Context<Self>) {
        self.wait_at_the_gate();
        self.seen.push(format!("s{n}"));
    }
}
impl Handler<Other> for Lagging {
    fn handle(&mut self, Other(n): Other, _: &mut Context<Self>) {
        self.wait_at_the_gate();
        self.seen.push(format!("o{n}"));
    }
}
impl Handler<Query> for Lagging {
    fn handle(&mut self, Query(n): Query, _: &mut Context<Self>) -> u64 {
        self.wait_at_the_gate();
        self.seen.push(format!("q{n}"));
        n
    }
}
impl Handler<Seen> for Lagging {
    fn handle(&mut self, _: Seen, _: &mut Context<Self>) -> Vec<String> {
        std::mem::take(&mut self.seen)
    }
}

/// A system with a [`Lagging`] actor; the sender opens its gate, and the
/// counter counts the `Small`s dropped.
fn lagging_actor() -> (
    ActorSystem,
    ActorRef<Lagging>,
    std::sync::mpsc::Sender<()>,
    Arc<std::sync::atomic::AtomicU64>,
) {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (open, gate) = std::sync::mpsc::channel();
    let actor = system
        .spawn(Lagging {
            gate: Some(gate),
            seen: vec![],
        })
        .unwrap();
    let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
    (system, actor, open, dropped)
}

/// One sender's messages to an actor that lags behind are handled in the
/// order sent, whatever their types: long stretches of one type, other
/// types and asks between them, and another thread's messages between two
/// stretches, which this thread's later messages must not overtake.
#[test]
fn a_lagging_actor_handles_one_senders_mixed_messages_in_the_order_sent() {
    let (system, actor, open, dropped) = lagging_actor();
    let mut expected = vec![];
    let mut asks = vec![];
    let mut n = 0u64;
    let mut send_stretch = |len: u64, expected: &mut Vec<String>| {
        for _ in 0..len {
            actor.tell(Small(n, Counted(dropped.clone()))).unwrap();
            expected.push(format!("s{n}"));
            n += 1;
        }
    };
    send_stretch(1, &mut expected);
    send_stretch(300, &mut expected);
    actor.tell(Other(1)).unwrap();
    expected.push("o1".into());
    send_stretch(70, &mut expected);
    asks.push(actor.ask(Query(7)));
    expected.push("q7".into());
    send_stretch(5, &mut expected);
    // Another thread's messages between this thread's stretches.
    let other = actor.clone();
    let from_other = std::thread::spawn(move || {
        for i in 0..100u32 {
            other.tell(Other(1000 + i)).unwrap();
        }
    });
    from_other.join().unwrap();
    expected.extend((0..100).map(|i| format!("o{}", 1000 + i)));
    send_stretch(200, &mut expected);
    open.send(()).unwrap();
    for ask in asks {
        assert_eq!(ask.timeout(LIVENESS).wait().unwrap(), 7);
    }
    let seen = actor.ask(Seen).timeout(LIVENESS).wait().unwrap();
    assert_eq!(seen.len(), expected.len(), "lost or duplicated");
    if let Some(i) = seen.iter().zip(&expected).position(|(a, b)| a != b) {
        panic!(
            "out of order at {i}: handled {:?}, sent {:?}",
            &seen[i..(i + 5).min(seen.len())],
            &expected[i..(i + 5).min(expected.len())]
        );
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        n,
        "every message dropped once"
    );
    system.shutdown(LIVENESS).unwrap();
}

/// Messages still queued when an actor stops become dead letters, each
/// dropped once: none handled after the stop, none lost from the count,
/// none leaked.
#[test]
fn a_backlog_left_at_a_stop_is_dropped_as_dead_letters_once_each() {
    let (system, actor, open, dropped) = lagging_actor();
    let before = system.dead_letter_count();
    const SENT: u64 = 1_000;
    for n in 0..SENT {
        actor.tell(Small(n, Counted(dropped.clone()))).unwrap();
    }
    // The first message may be at the gate already; stop, then open it.
    actor.stop();
    open.send(()).unwrap();
    system.shutdown(LIVENESS).unwrap();
    let dead = system.dead_letter_count() - before;
    assert!(
        (SENT - 1..=SENT).contains(&dead),
        "{dead} dead letters for {SENT} sent, one of which may have been handled"
    );
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        SENT,
        "every message dropped once"
    );
}

/// Records the numbers it handles in a log that outlives its restarts,
/// and fails at one of them; it waits at its first message until the test
/// lets it go, so what is sent meanwhile piles up in its mailbox.
struct Failing {
    gate: Arc<std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>>,
    log: Arc<std::sync::Mutex<Vec<u64>>>,
    fail_at: u64,
}
impl Actor for Failing {}
struct Numbered(u64);
impl Message for Numbered {
    type Reply = ();
}
struct Log;
impl Message for Log {
    type Reply = Vec<u64>;
}
impl Handler<Numbered> for Failing {
    fn handle(&mut self, Numbered(n): Numbered, _: &mut Context<Self>) {
        if let Some(gate) = self.gate.lock().unwrap().take() {
            gate.recv_timeout(LIVENESS)
                .expect("the test lets the actor go");
        }
        if n == self.fail_at {
            panic!("failing at {n}, as the test asks");
        }
        self.log.lock().unwrap().push(n);
    }
}
impl Handler<Log> for Failing {
    fn handle(&mut self, _: Log, _: &mut Context<Self>) -> Vec<u64> {
        self.log.lock().unwrap().clone()
    }
}

/// A handler that panics in the middle of a backlog fails its own message
/// only: the restarted actor handles every message queued behind it, in
/// the order sent (the mailbox outlives a restart, as in Akka), however
/// the mailbox holds a sender's piled-up messages.
#[test]
fn a_panic_in_the_middle_of_a_backlog_loses_none_of_the_messages_behind_it() {
    const SENT: u64 = 5_000;
    const FAIL_AT: u64 = 2_345;
    let system = ActorSystem::builder().worker_threads(2).build();
    let (open, gate) = std::sync::mpsc::channel();
    let gate = Arc::new(std::sync::Mutex::new(Some(gate)));
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let actor = system
        .spawn_with(move || Failing {
            gate: gate.clone(),
            log: log.clone(),
            fail_at: FAIL_AT,
        })
        .unwrap();
    for n in 0..SENT {
        actor.tell(Numbered(n)).unwrap();
    }
    open.send(()).unwrap();
    let log = actor.ask(Log).timeout(LIVENESS).wait().unwrap();
    let expected: Vec<u64> = (0..SENT).filter(|&n| n != FAIL_AT).collect();
    assert_eq!(log.len(), expected.len(), "lost or duplicated");
    assert!(log == expected, "out of order");
    system.shutdown(LIVENESS).unwrap();
}
