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
