//! `troubadour::handle_here`: a task or thread that asks an idle actor runs
//! the actor's turn itself. What a user relies on: the reply is the one the
//! actor would give on a worker; the turn runs on the calling thread when
//! the actor was idle and on a worker when it was not (or on a
//! current-thread runtime); and nothing else about the actor changes: one
//! message at a time, every message handled once and in each sender's
//! order, a panic fails only the actor.

mod common;

use common::LIVENESS;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, ThreadId};
use std::time::Instant;
use troubadour::handle_here;
use troubadour::prelude::*;

/// Answers with the thread that handled the question; holds its turn while
/// a `Hold` is waiting on the test's channel.
struct Where;
impl Actor for Where {}

struct WhereAmI;
impl Message for WhereAmI {
    type Reply = ThreadId;
}
impl Handler<WhereAmI> for Where {
    fn handle(&mut self, _: WhereAmI, _: &mut Context<Self>) -> ThreadId {
        thread::current().id()
    }
}

struct Hold(mpsc::Receiver<()>, mpsc::Sender<()>);
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Where {
    fn handle(&mut self, Hold(release, started): Hold, _: &mut Context<Self>) {
        started.send(()).unwrap();
        release.recv_timeout(LIVENESS).unwrap();
    }
}

/// Asks until a turn runs here (the actor's start, on a worker, may still
/// hold it at first), within the liveness guard. "Here" is the thread
/// that sends each ask: after a yield, tokio may resume the task on its
/// other worker thread (under load it did, and stayed there).
async fn until_handled_here(actor: &ActorRef<Where>) {
    let deadline = Instant::now() + LIVENESS;
    loop {
        let me = thread::current().id();
        if handle_here(|| actor.ask(WhereAmI)).await.unwrap() == me {
            return;
        }
        assert!(Instant::now() < deadline, "liveness guard");
        tokio::task::yield_now().await;
    }
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_idle_actor_asked_from_a_task_answers_on_the_tasks_thread() {
    let system = ActorSystem::new();
    let actor = system.spawn(Where).unwrap();
    multi_thread().block_on(async {
        tokio::spawn(async move {
            until_handled_here(&actor).await;
            // Idle after each turn run here: every ask runs here.
            for _ in 0..200 {
                let me = thread::current().id();
                let ask = handle_here(|| actor.ask(WhereAmI));
                assert_eq!(ask.await.unwrap(), me);
            }
        })
        .await
        .unwrap();
    });
}

#[test]
fn a_plain_thread_runs_the_turn_itself() {
    let system = ActorSystem::new();
    let actor = system.spawn(Where).unwrap();
    let me = thread::current().id();
    let deadline = Instant::now() + LIVENESS;
    while handle_here(|| actor.ask(WhereAmI)).wait().unwrap() != me {
        assert!(Instant::now() < deadline, "liveness guard");
        thread::yield_now();
    }
    for _ in 0..200 {
        assert_eq!(handle_here(|| actor.ask(WhereAmI)).wait().unwrap(), me);
    }
}

#[test]
fn a_busy_actor_answers_from_its_worker() {
    let system = ActorSystem::new();
    let actor = system.spawn(Where).unwrap();
    let (release_tx, release_rx) = mpsc::channel();
    let (started_tx, started_rx) = mpsc::channel();
    multi_thread().block_on(async {
        let me = thread::current().id();
        until_handled_here(&actor).await;
        // A worker runs the held turn; the ask behind it must wait for it
        // and not run here beside it.
        actor.tell(Hold(release_rx, started_tx)).unwrap();
        started_rx.recv_timeout(LIVENESS).unwrap();
        let ask = handle_here(|| actor.ask(WhereAmI));
        release_tx.send(()).unwrap();
        let handled_on = ask.timeout(LIVENESS).await.unwrap();
        assert_ne!(handled_on, me, "ran here while a worker held the actor");
    });
}

#[test]
fn on_a_current_thread_runtime_the_workers_run_it() {
    let system = ActorSystem::new();
    let actor = system.spawn(Where).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let me = thread::current().id();
            for _ in 0..100 {
                let handled_on = handle_here(|| actor.ask(WhereAmI))
                    .timeout(LIVENESS)
                    .await
                    .unwrap();
                assert_ne!(handled_on, me);
            }
        });
}

/// A current-thread runtime driven from a multi-threaded runtime's worker,
/// inside `block_in_place`: the thread is that runtime's only one now, so
/// the turn is the workers', as on any current-thread runtime. (The
/// multi-threaded worker's index is no answer here: decision 0066.)
#[test]
fn a_current_thread_runtime_inside_a_multi_threaded_worker_leaves_it_to_the_workers() {
    let system = ActorSystem::new();
    let actor = system.spawn(Where).unwrap();
    multi_thread().block_on(async {
        // On each of the runtime's workers in turn (worker 0 and the
        // others take different ways to the answer). Under Miri, whose
        // threads take turns by its own rules, on whichever comes: it
        // checks the memory accesses, not the choice.
        let mut seen = [false; 2];
        let deadline = Instant::now() + LIVENESS;
        let enough = |seen: &[bool; 2]| {
            if cfg!(miri) {
                seen.contains(&true)
            } else {
                seen == &[true; 2]
            }
        };
        while !enough(&seen) {
            assert!(Instant::now() < deadline, "liveness guard");
            let actor = actor.clone();
            let on = tokio::spawn(async move {
                let worker = tokio::runtime::worker_index()?;
                until_handled_here(&actor).await;
                tokio::task::block_in_place(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap()
                        .block_on(async {
                            let me = thread::current().id();
                            for _ in 0..if cfg!(miri) { 2 } else { 20 } {
                                let handled_on = handle_here(|| actor.ask(WhereAmI))
                                    .timeout(LIVENESS)
                                    .await
                                    .unwrap();
                                assert_ne!(handled_on, me);
                            }
                        })
                });
                Some(worker)
            })
            .await
            .unwrap();
            if let Some(worker) = on {
                seen[worker.min(1)] = true;
            }
        }
    });
}

/// Counts what it was told per sender, checking each sender's order and
/// that no two turns overlap.
struct Tally {
    next: Vec<u64>,
    in_turn: Arc<AtomicBool>,
    overlaps: Arc<AtomicU64>,
}
impl Actor for Tally {}

struct Count {
    sender: usize,
    seq: u64,
}
impl Message for Count {
    type Reply = ();
}
impl Handler<Count> for Tally {
    fn handle(&mut self, Count { sender, seq }: Count, _: &mut Context<Self>) {
        if self.in_turn.swap(true, Ordering::AcqRel) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(self.next[sender], seq, "sender {sender} out of order");
        self.next[sender] += 1;
        self.in_turn.store(false, Ordering::Release);
    }
}

struct Totals;
impl Message for Totals {
    type Reply = Vec<u64>;
}
impl Handler<Totals> for Tally {
    fn handle(&mut self, _: Totals, _: &mut Context<Self>) -> Vec<u64> {
        self.next.clone()
    }
}

/// Plain threads and tokio tasks running turns here, racing threads that
/// only tell (whose turns run on the workers): every message handled once,
/// each sender's in order, never two turns at once.
#[test]
fn racing_senders_keep_one_message_at_a_time_and_each_senders_order() {
    const PER_SENDER: u64 = if cfg!(miri) { 50 } else { 5_000 };
    const THREADS: usize = 3;
    const TASKS: usize = 4;
    const TELLERS: usize = 2;
    let senders = THREADS + TASKS + TELLERS;
    let system = ActorSystem::builder().worker_threads(2).build();
    let overlaps = Arc::new(AtomicU64::new(0));
    let tally = system
        .spawn(Tally {
            next: vec![0; senders],
            in_turn: Arc::new(AtomicBool::new(false)),
            overlaps: overlaps.clone(),
        })
        .unwrap();
    let runtime = multi_thread();
    let mut threads = vec![];
    for sender in 0..THREADS + TELLERS {
        let tally = tally.clone();
        threads.push(thread::spawn(move || {
            for seq in 0..PER_SENDER {
                let tell = || tally.tell(Count { sender, seq }).unwrap();
                if sender < THREADS {
                    handle_here(tell);
                } else {
                    tell();
                }
            }
        }));
    }
    let tasks: Vec<_> = (THREADS + TELLERS..senders)
        .map(|sender| {
            let tally = tally.clone();
            runtime.spawn(async move {
                for seq in 0..PER_SENDER {
                    handle_here(|| tally.tell(Count { sender, seq }).unwrap());
                    if seq % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    runtime.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    let totals = tally.ask(Totals).timeout(LIVENESS).wait().unwrap();
    assert_eq!(totals, vec![PER_SENDER; senders]);
    assert_eq!(overlaps.load(Ordering::Relaxed), 0, "two turns at once");
}

struct Fragile;
impl Actor for Fragile {}
struct Try(u64);
impl Message for Try {
    type Reply = (u64, ThreadId);
}
impl Handler<Try> for Fragile {
    fn handle(&mut self, Try(n): Try, _: &mut Context<Self>) -> (u64, ThreadId) {
        assert!(n != 13, "unlucky");
        (n, thread::current().id())
    }
}

#[test]
fn a_panic_in_a_turn_run_here_fails_only_the_actor() {
    let system = ActorSystem::new();
    let fragile = system.spawn_with(|| Fragile).unwrap();
    let me = thread::current().id();
    let deadline = Instant::now() + LIVENESS;
    while handle_here(|| fragile.ask(Try(1))).wait().unwrap().1 != me {
        assert!(Instant::now() < deadline, "liveness guard");
        thread::yield_now();
    }
    // The panic is caught in the turn: this thread goes on, the ask fails.
    assert!(handle_here(|| fragile.ask(Try(13)))
        .timeout(LIVENESS)
        .wait()
        .is_err());
    // Restarted by its supervisor, it answers again.
    let (n, _) = fragile.ask(Try(7)).timeout(LIVENESS).wait().unwrap();
    assert_eq!(n, 7);
}

// An ask of an idle actor inside `handle_here` is answered as it is sent,
// without a reply channel (decision 0065). What a handler may do with its
// ask must work there as on a worker.

/// Holds asks back while locked: stashes them with their replies, or hands
/// their replies to the test to answer later.
struct Gate {
    locked: bool,
    deferred: mpsc::Sender<troubadour::DeferredReply<u64>>,
}
impl Actor for Gate {}

struct Value(u64);
impl Message for Value {
    type Reply = u64;
}
impl Handler<Value> for Gate {
    fn handle(&mut self, Value(n): Value, ctx: &mut Context<Self>) -> u64 {
        if self.locked {
            ctx.stash(Value(n));
        }
        // Discarded when stashed: the reply goes out when it is handled
        // again.
        n * 10
    }
}

struct Later(u64);
impl Message for Later {
    type Reply = u64;
}
impl Handler<Later> for Gate {
    fn handle(&mut self, Later(n): Later, ctx: &mut Context<Self>) -> u64 {
        let reply = ctx.defer_reply::<Later>().expect("an ask's reply");
        assert!(
            ctx.defer_reply::<Later>().is_none(),
            "a reply is taken once"
        );
        self.deferred.send(reply).unwrap();
        // Discarded: the reply was taken over.
        n
    }
}

struct Unlock;
impl Message for Unlock {
    type Reply = ();
}
impl Handler<Unlock> for Gate {
    fn handle(&mut self, _: Unlock, ctx: &mut Context<Self>) {
        self.locked = false;
        ctx.unstash_all();
    }
}

struct Lock;
impl Message for Lock {
    type Reply = ();
}
impl Handler<Lock> for Gate {
    fn handle(&mut self, _: Lock, _: &mut Context<Self>) {
        self.locked = true;
    }
}

impl Handler<WhereAmI> for Gate {
    fn handle(&mut self, _: WhereAmI, _: &mut Context<Self>) -> ThreadId {
        thread::current().id()
    }
}

/// Asks until an ask is answered on this thread (the actor's start may
/// hold it on a worker at first).
fn until_answered_here<A: Handler<WhereAmI>>(actor: &ActorRef<A>) {
    let deadline = Instant::now() + LIVENESS;
    let me = thread::current().id();
    while handle_here(|| actor.ask(WhereAmI))
        .timeout(LIVENESS)
        .wait()
        .unwrap()
        != me
    {
        assert!(Instant::now() < deadline, "liveness guard");
        thread::yield_now();
    }
}

/// An unlocked gate, once an ask of it was answered on this thread; and
/// where it hands the replies it defers.
fn gate_answering_here(
    system: &ActorSystem,
) -> (
    ActorRef<Gate>,
    mpsc::Receiver<troubadour::DeferredReply<u64>>,
) {
    let (deferred_tx, deferred) = mpsc::channel();
    let gate = system
        .spawn(Gate {
            locked: false,
            deferred: deferred_tx,
        })
        .unwrap();
    until_answered_here(&gate);
    (gate, deferred)
}

#[test]
fn a_reply_deferred_by_a_handler_run_here_arrives_when_sent() {
    let system = ActorSystem::new();
    let (gate, deferred) = gate_answering_here(&system);
    for n in 0..50 {
        let mut ask = handle_here(|| gate.ask(Later(n)));
        let reply = deferred.recv_timeout(LIVENESS).unwrap();
        // Not answered yet: the handler's own return value was dropped.
        let pending = std::future::Future::poll(
            std::pin::Pin::new(&mut ask),
            &mut std::task::Context::from_waker(std::task::Waker::noop()),
        )
        .is_pending();
        assert!(pending, "answered before the deferred reply was sent");
        reply.send(n + 1000).unwrap();
        assert_eq!(ask.timeout(LIVENESS).wait().unwrap(), n + 1000);
    }
}

#[test]
fn an_ask_stashed_by_a_handler_run_here_is_answered_when_unstashed() {
    let system = ActorSystem::new();
    let (gate, _deferred) = gate_answering_here(&system);
    handle_here(|| gate.ask(Lock))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    let held: Vec<_> = (1..=5)
        .map(|n| handle_here(|| gate.ask(Value(n))))
        .collect();
    handle_here(|| gate.ask(Unlock))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    // In the order they were asked, each with its own reply.
    let replies: Vec<u64> = held
        .into_iter()
        .map(|a| a.timeout(LIVENESS).wait().unwrap())
        .collect();
    assert_eq!(replies, [10, 20, 30, 40, 50]);
}

/// Replies, then stops if asked to.
struct Quitter;
impl Actor for Quitter {}
impl Handler<WhereAmI> for Quitter {
    fn handle(&mut self, _: WhereAmI, _: &mut Context<Self>) -> ThreadId {
        thread::current().id()
    }
}
struct Answer {
    then_stop: bool,
}
impl Message for Answer {
    type Reply = &'static str;
}
impl Handler<Answer> for Quitter {
    fn handle(&mut self, a: Answer, ctx: &mut Context<Self>) -> &'static str {
        if a.then_stop {
            ctx.stop();
        }
        "answered"
    }
}

#[test]
fn a_stop_asked_for_in_a_handler_run_here_comes_after_its_reply() {
    let system = ActorSystem::new();
    let quitter = system.spawn(Quitter).unwrap();
    until_answered_here(&quitter);
    let last = handle_here(|| quitter.ask(Answer { then_stop: true }));
    assert_eq!(last.timeout(LIVENESS).wait().unwrap(), "answered");
    let reason = system.block_on(quitter.wait_stopped());
    assert_eq!(reason, ExitReason::Normal);
    assert!(!quitter.is_alive());
    let after = handle_here(|| quitter.ask(Answer { then_stop: false }));
    assert!(
        after.timeout(LIVENESS).wait().is_err(),
        "a stopped actor answered"
    );
}

/// Asks another actor and waits for it inside its handler.
struct Relay(ActorRef<Where>);
impl Actor for Relay {}
struct Through;
impl Message for Through {
    type Reply = ThreadId;
}
impl Handler<Through> for Relay {
    fn handle(&mut self, _: Through, _: &mut Context<Self>) -> ThreadId {
        // Not answered here in turn: this thread is inside a turn already.
        handle_here(|| self.0.ask(WhereAmI))
            .timeout(LIVENESS)
            .wait()
            .unwrap()
    }
}

#[test]
fn a_handler_run_here_may_wait_for_another_actor() {
    let system = ActorSystem::new();
    let inner = system.spawn(Where).unwrap();
    let relay = system.spawn(Relay(inner)).unwrap();
    multi_thread().block_on(async {
        tokio::spawn(async move {
            for _ in 0..100 {
                let me = thread::current().id();
                let inner_on = handle_here(|| relay.ask(Through))
                    .timeout(LIVENESS)
                    .await
                    .unwrap();
                assert_ne!(inner_on, me, "a nested turn ran inside a turn run here");
            }
        })
        .await
        .unwrap();
    });
}

/// Answers `Numbered` with how many it has had from that sender, so each
/// sender can check its asks are answered once each, in order.
struct Counter {
    seen: Vec<u64>,
    in_turn: Arc<AtomicBool>,
    overlaps: Arc<AtomicU64>,
}
impl Actor for Counter {}
struct Numbered {
    sender: usize,
}
impl Message for Numbered {
    type Reply = u64;
}
impl Handler<Numbered> for Counter {
    fn handle(&mut self, Numbered { sender }: Numbered, _: &mut Context<Self>) -> u64 {
        if self.in_turn.swap(true, Ordering::AcqRel) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        self.seen[sender] += 1;
        let n = self.seen[sender];
        self.in_turn.store(false, Ordering::Release);
        n
    }
}

/// Asks answered as they are sent, from plain threads and tokio tasks,
/// racing tells and asks that the workers handle, in an observed system:
/// each ask answered once and in its sender's order, never two handlers at
/// once, and every message counted.
#[test]
fn asks_answered_here_race_with_the_workers_one_message_at_a_time() {
    const PER_SENDER: u64 = if cfg!(miri) { 50 } else { 5_000 };
    const HERE_THREADS: usize = 2;
    const HERE_TASKS: usize = 3;
    const ELSEWHERE: usize = 2;
    let senders = HERE_THREADS + HERE_TASKS + ELSEWHERE;
    let system = ActorSystem::builder().worker_threads(2).observe().build();
    let overlaps = Arc::new(AtomicU64::new(0));
    let counter = system
        .spawn(Counter {
            seen: vec![0; senders],
            in_turn: Arc::new(AtomicBool::new(false)),
            overlaps: overlaps.clone(),
        })
        .unwrap();
    let check = |sender: usize, seq: u64, answer: u64| {
        assert_eq!(
            answer,
            seq + 1,
            "sender {sender}: an ask answered out of order"
        );
    };
    let runtime = multi_thread();
    let mut threads = vec![];
    for sender in 0..HERE_THREADS + ELSEWHERE {
        let counter = counter.clone();
        threads.push(thread::spawn(move || {
            for seq in 0..PER_SENDER {
                let ask = || counter.ask(Numbered { sender });
                let answer = if sender < HERE_THREADS {
                    handle_here(ask)
                } else {
                    ask()
                };
                check(sender, seq, answer.timeout(LIVENESS).wait().unwrap());
            }
        }));
    }
    let tasks: Vec<_> = (HERE_THREADS + ELSEWHERE..senders)
        .map(|sender| {
            let counter = counter.clone();
            runtime.spawn(async move {
                for seq in 0..PER_SENDER {
                    let answer = handle_here(|| counter.ask(Numbered { sender }))
                        .timeout(LIVENESS)
                        .await
                        .unwrap();
                    check(sender, seq, answer);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    runtime.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(overlaps.load(Ordering::Relaxed), 0, "two handlers at once");
    // Every message counted by the observer, those answered here included
    // (a turn's count is added when it ends: the last reply may come first).
    let total = senders as u64 * PER_SENDER;
    let deadline = Instant::now() + LIVENESS;
    loop {
        let handled = system
            .actor_details(counter.id())
            .expect("observed")
            .sample
            .messages_handled;
        if handled == total {
            break;
        }
        assert!(handled < total, "counted {handled} of {total}");
        assert!(Instant::now() < deadline, "liveness guard");
        thread::yield_now();
    }
}
