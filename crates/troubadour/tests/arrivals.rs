//! `troubadour::remote::keep_arrival`: a thread that delivers what it read
//! from the network keeps the actor its sends woke, when they woke only
//! one, and runs that actor's turn itself. What a user relies on is that nothing about the
//! actor changes: one turn at a time, every message handled once and in
//! order, a dropped `Arrival` still runs (on a worker), work deferred to the
//! turn's end runs, a panic fails only the actor, and a handler may wait for
//! another actor's reply.

mod common;

use common::{Batch, Batcher, LoggedFlush, LIVENESS};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use troubadour::prelude::*;
use troubadour::remote::{self, keep_arrival};

/// Records the thread each message was handled on, and the values in order.
#[derive(Default)]
struct Recorder {
    seen: Vec<u64>,
    threads: Vec<ThreadId>,
}
impl Actor for Recorder {}

#[derive(Debug)]
struct Note(u64);
impl Message for Note {
    type Reply = ();
}
impl Handler<Note> for Recorder {
    fn handle(&mut self, Note(n): Note, _: &mut Context<Self>) {
        self.seen.push(n);
        self.threads.push(thread::current().id());
    }
}

struct Seen;
impl Message for Seen {
    type Reply = (Vec<u64>, Vec<ThreadId>);
}
impl Handler<Seen> for Recorder {
    fn handle(&mut self, _: Seen, _: &mut Context<Self>) -> (Vec<u64>, Vec<ThreadId>) {
        (self.seen.clone(), self.threads.clone())
    }
}

/// A message that does nothing, for [`until_idle`].
struct Wake;
impl Message for Wake {
    type Reply = ();
}
macro_rules! wakes {
    ($($actor:ty),*) => {$(
        impl Handler<Wake> for $actor {
            fn handle(&mut self, _: Wake, _: &mut Context<Self>) {}
        }
    )*};
}
wakes!(Recorder, Batcher, Asker, NapAsker, Fragile);

/// Returns once `actor` is idle (a spawned actor runs its start first):
/// a `Wake` it was sent is kept and run here, and after that turn no one
/// else has it to run.
fn until_idle<A: Handler<Wake>>(actor: &ActorRef<A>) {
    let deadline = std::time::Instant::now() + LIVENESS;
    loop {
        if let ((), Some(arrival)) = keep_arrival(|| actor.tell(Wake).unwrap()) {
            return arrival.run();
        }
        assert!(std::time::Instant::now() < deadline, "liveness guard");
        thread::yield_now();
    }
}

fn seen(actor: &ActorRef<Recorder>) -> (Vec<u64>, Vec<ThreadId>) {
    actor.ask(Seen).timeout(LIVENESS).wait().unwrap()
}

#[test]
fn the_one_actor_woken_is_kept_and_runs_on_the_delivering_thread() {
    let system = ActorSystem::new();
    let actor = system.spawn(Recorder::default()).unwrap();
    until_idle(&actor);
    let ((), arrival) = keep_arrival(|| {
        actor.tell(Note(1)).unwrap();
        actor.tell(Note(2)).unwrap();
    });
    let arrival = arrival.expect("the tell woke an idle actor");
    assert_eq!(arrival.id(), actor.id());
    arrival.run();
    let me = thread::current().id();
    let (values, threads) = seen(&actor);
    assert_eq!(values, [1, 2], "both messages, in order, in one turn");
    assert_eq!(threads, [me, me], "the turn ran here");
}

/// A delivery that wakes several actors has work for several threads: all
/// of them go to the workers, none is kept.
#[test]
fn when_several_actors_are_woken_the_workers_run_them_all() {
    let system = ActorSystem::new();
    let actors: Vec<_> = (0..3)
        .map(|_| system.spawn(Recorder::default()).unwrap())
        .collect();
    for a in &actors {
        until_idle(a);
    }
    let ((), arrival) = keep_arrival(|| {
        for (n, a) in actors.iter().enumerate() {
            a.tell(Note(n as u64)).unwrap();
        }
    });
    assert!(arrival.is_none(), "kept one of several");
    let me = thread::current().id();
    for (n, a) in actors.iter().enumerate() {
        let (values, threads) = seen(a);
        assert_eq!(values, [n as u64]);
        assert_ne!(threads, [me]);
    }
    // The next delivery that wakes one actor keeps it again.
    until_idle(&actors[0]);
    let ((), arrival) = keep_arrival(|| actors[0].tell(Note(9)).unwrap());
    let arrival = arrival.expect("a lone wake-up is kept");
    arrival.run();
    assert_eq!(seen(&actors[0]).1.last(), Some(&me));
}

#[test]
fn an_arrival_dropped_unrun_is_run_by_a_worker() {
    let system = ActorSystem::new();
    let actor = system.spawn(Recorder::default()).unwrap();
    for round in 0..200 {
        let ((), arrival) = keep_arrival(|| actor.tell(Note(round)).unwrap());
        // Kept only if the actor was idle (the last round's turn may still
        // be running on a worker): either way the message is handled.
        drop(arrival);
    }
    let (values, threads) = seen(&actor);
    assert_eq!(values, (0..200).collect::<Vec<_>>());
    assert!(!threads.contains(&thread::current().id()));
}

#[test]
fn a_nested_keep_keeps_nothing_and_the_outer_one_keeps_the_first() {
    let system = ActorSystem::new();
    let actor = system.spawn(Recorder::default()).unwrap();
    until_idle(&actor);
    let (inner, outer) = keep_arrival(|| keep_arrival(|| actor.tell(Note(1)).unwrap()).1);
    assert!(inner.is_none());
    outer.expect("the outer call keeps the actor").run();
    assert_eq!(seen(&actor).0, [1]);
}

/// A delivery that panics after waking an actor: the actor still runs (on
/// a worker), and the thread is not left keeping.
#[test]
fn a_delivery_that_unwinds_hands_what_it_kept_to_the_workers() {
    let system = ActorSystem::new();
    let actor = system.spawn(Recorder::default()).unwrap();
    until_idle(&actor);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        keep_arrival(|| {
            actor.tell(Note(1)).unwrap();
            panic!("a decoder bug");
        })
    }));
    assert!(unwound.is_err());
    let (values, threads) = seen(&actor);
    assert_eq!(values, [1]);
    assert_ne!(threads, [thread::current().id()]);
    // Not keeping any more: a plain send from here queues the actor, and
    // the next keeping call keeps again.
    until_idle(&actor);
    actor.tell(Note(2)).unwrap();
    assert_eq!(seen(&actor).0, [1, 2]);
    until_idle(&actor);
    let ((), arrival) = keep_arrival(|| actor.tell(Note(3)).unwrap());
    arrival.expect("kept").run();
    assert_eq!(seen(&actor).0, [1, 2, 3]);
}

#[test]
fn actors_on_threads_of_their_own_and_sends_from_workers_are_never_kept() {
    let system = ActorSystem::new();
    let blocking = system
        .spawn_with_options(SpawnOptions::new().blocking(), Recorder::default())
        .unwrap();
    let ((), arrival) = keep_arrival(|| blocking.tell(Note(1)).unwrap());
    assert!(arrival.is_none(), "a blocking actor runs on its own thread");
    assert_eq!(seen(&blocking).0, [1]);

    // A worker's own sends already run on it.
    struct Forward(u64);
    impl Message for Forward {
        type Reply = bool;
    }
    struct Relay(ActorRef<Recorder>);
    impl Actor for Relay {}
    impl Handler<Forward> for Relay {
        fn handle(&mut self, Forward(n): Forward, _: &mut Context<Self>) -> bool {
            let ((), arrival) = keep_arrival(|| self.0.tell(Note(n)).unwrap());
            arrival.is_some()
        }
    }
    let target = system.spawn(Recorder::default()).unwrap();
    let relay = system.spawn(Relay(target.clone())).unwrap();
    let kept = relay.ask(Forward(2)).timeout(LIVENESS).wait().unwrap();
    assert!(!kept, "a send on a worker was kept");
    assert_eq!(seen(&target).0, [2]);
}

#[test]
fn a_simulated_system_runs_only_what_its_driver_picks() {
    let system = ActorSystem::builder().manual_scheduling().build();
    let actor = system.spawn(Recorder::default()).unwrap();
    let ((), arrival) = keep_arrival(|| actor.tell(Note(1)).unwrap());
    assert!(arrival.is_none());
}

/// With a budget of 4 messages a turn, an arrival's turn handles 4 and
/// hands the actor, with the rest, to the workers.
#[test]
fn a_turn_that_leaves_messages_hands_the_actor_to_the_workers() {
    let system = ActorSystem::builder().budget(4).build();
    let actor = system.spawn(Recorder::default()).unwrap();
    until_idle(&actor);
    let ((), arrival) = keep_arrival(|| {
        for n in 0..100 {
            actor.tell(Note(n)).unwrap();
        }
    });
    arrival.expect("kept").run();
    let me = thread::current().id();
    let (values, threads) = seen(&actor);
    assert_eq!(values, (0..100).collect::<Vec<_>>());
    assert_eq!(&threads[..4], [me; 4], "one turn, of the budget, here");
    assert!(!threads[4..].contains(&me));
}

#[test]
fn work_deferred_in_an_arrival_turn_runs_once_when_it_ends() {
    let system = ActorSystem::new();
    let (batcher, log, flush) = Batcher::spawn_on(&system);
    until_idle(&batcher);
    let ((), arrival) = keep_arrival(|| {
        batcher.tell(Batch).unwrap();
        batcher.tell(Batch).unwrap();
    });
    arrival.expect("kept").run();
    assert_eq!(*log.lock().unwrap(), ["handled", "handled", "flushed"]);
    // After the turn this thread defers nothing.
    assert!(!remote::at_turn_end(&flush));
}

/// Asks another actor and waits for its reply inside the handler.
struct Asker(ActorRef<Recorder>);
impl Actor for Asker {}
struct Gather(u64);
impl Message for Gather {
    type Reply = Vec<u64>;
}
impl Handler<Gather> for Asker {
    fn handle(&mut self, Gather(n): Gather, _: &mut Context<Self>) -> Vec<u64> {
        self.0.tell(Note(n)).unwrap();
        self.0.ask(Seen).timeout(LIVENESS).wait().unwrap().0
    }
}

#[test]
fn a_handler_in_an_arrival_turn_may_wait_for_another_actor() {
    let system = ActorSystem::new();
    let recorder = system.spawn(Recorder::default()).unwrap();
    let asker = system.spawn(Asker(recorder)).unwrap();
    until_idle(&asker);
    let (reply, arrival) = keep_arrival(|| asker.ask(Gather(5)));
    arrival.expect("kept").run();
    assert_eq!(reply.timeout(LIVENESS).wait().unwrap(), [5]);
}

/// Naps on a tokio timer before replying.
struct Napper;
impl Actor for Napper {}
struct Nap;
impl Message for Nap {
    type Reply = &'static str;
}
impl AsyncHandler<Nap> for Napper {
    async fn handle(&mut self, _: Nap, _: &mut Context<Self>) -> &'static str {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        "rested"
    }
}

/// Waits, inside its handler, for the napper.
struct NapAsker(ActorRef<Napper>);
impl Actor for NapAsker {}
impl Handler<Nap> for NapAsker {
    fn handle(&mut self, _: Nap, _: &mut Context<Self>) -> &'static str {
        self.0.ask(Nap).timeout(LIVENESS).wait().unwrap()
    }
}

/// The same on a thread of a multi-threaded tokio runtime, as the remote
/// layer runs its arrivals: while the handler waits, the runtime's other
/// work (here the timer the napper waits for; for the remote layer, the
/// connection's reader) goes on on another thread, even with one worker.
#[test]
fn a_waiting_arrival_turn_on_a_tokio_thread_lets_the_runtime_go_on() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let system = ActorSystem::builder()
        .tokio_handle(runtime.handle().clone())
        .build();
    let napper = system.spawn(Napper).unwrap();
    let asker = system.spawn(NapAsker(napper)).unwrap();
    let reply = runtime.block_on(async move {
        tokio::spawn(async move {
            until_idle(&asker);
            let (reply, arrival) = keep_arrival(|| asker.ask(Nap));
            arrival.expect("kept").run();
            // The turn has replied: this wait ends at once.
            reply.timeout(LIVENESS).wait()
        })
        .await
        .unwrap()
    });
    assert_eq!(reply.unwrap(), "rested");
}

struct Fragile;
impl Actor for Fragile {}
struct Try(u64);
impl Message for Try {
    type Reply = u64;
}
impl Handler<Try> for Fragile {
    fn handle(&mut self, Try(n): Try, _: &mut Context<Self>) -> u64 {
        assert!(n != 13, "unlucky");
        n
    }
}

#[test]
fn a_panic_in_an_arrival_turn_fails_only_the_actor() {
    let system = ActorSystem::new();
    let fragile = system.spawn_with(|| Fragile).unwrap();
    let watcher = system.spawn(Recorder::default()).unwrap();
    until_idle(&fragile);
    let (crashed, arrival) = keep_arrival(|| fragile.ask(Try(13)));
    arrival.expect("kept").run();
    assert!(crashed.timeout(LIVENESS).wait().is_err());
    // Restarted by its supervisor, it answers again; this thread is no
    // longer taken for a worker (its turn-end queue is not used).
    assert_eq!(fragile.ask(Try(7)).timeout(LIVENESS).wait().unwrap(), 7);
    assert!(!remote::at_turn_end(
        &(Arc::new(LoggedFlush(Default::default())) as _)
    ));
    watcher.tell(Note(1)).unwrap();
    assert_eq!(seen(&watcher).0, [1]);
}
