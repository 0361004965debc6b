//! Actors spawned with a [`Deadline`]: each handles messages only before
//! it, by its system's clock, and stops for good at its first turn after
//! it, whatever it has queued (what a cluster node's entities rely on when
//! its lease ends while the actor watching the lease is late).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::Deadline;

const S: Duration = Duration::from_secs(1);

/// A manually scheduled system on virtual time: nothing runs and no time
/// passes unless the test says so.
fn manual() -> ActorSystem {
    ActorSystem::builder()
        .manual_scheduling()
        .virtual_time()
        .build()
}

fn run_all(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, 64)).is_some() {}
}

struct Add;
impl Message for Add {
    type Reply = u32;
}

/// Sent after the deadline was expired for good.
struct Late;
impl Message for Late {
    type Reply = ();
}

/// Counts what it handles, in a counter the test keeps (a `Late` counts
/// a thousand).
struct Counter {
    handled: Arc<AtomicU32>,
}
impl Actor for Counter {}
impl Handler<Add> for Counter {
    fn handle(&mut self, _: Add, _: &mut Context<Self>) -> u32 {
        self.handled.fetch_add(1, Ordering::SeqCst) + 1
    }
}
impl Handler<Late> for Counter {
    fn handle(&mut self, _: Late, _: &mut Context<Self>) {
        self.handled.fetch_add(1000, Ordering::SeqCst);
    }
}

fn counter(
    system: &ActorSystem,
    deadline: &Arc<Deadline>,
    options: SpawnOptions,
) -> (ActorRef<Counter>, Arc<AtomicU32>) {
    let handled = Arc::new(AtomicU32::new(0));
    let actor = system
        .spawn_with_options(
            options.deadline(deadline.clone()),
            Counter {
                handled: handled.clone(),
            },
        )
        .unwrap();
    (actor, handled)
}

#[test]
fn queued_messages_are_not_handled_once_the_deadline_has_passed() {
    let system = manual();
    let deadline = Arc::new(Deadline::new(system.now() + 10 * S));
    let (actor, handled) = counter(&system, &deadline, SpawnOptions::new());
    for _ in 0..3 {
        actor.tell(Add).unwrap();
    }
    run_all(&system);
    assert_eq!(handled.load(Ordering::SeqCst), 3);
    // Queued before the deadline, due after it: the actor has not run
    // since (a paused process, a busy worker).
    for _ in 0..5 {
        actor.tell(Add).unwrap();
    }
    let asked = actor.ask(Add);
    let dead_before = system.dead_letter_count();
    system.advance_time(10 * S).unwrap();
    run_all(&system);
    assert_eq!(handled.load(Ordering::SeqCst), 3, "nothing handled past it");
    assert!(!actor.is_alive());
    assert_eq!(common::block_on(actor.wait_stopped()), ExitReason::Shutdown);
    assert!(
        common::block_on(asked).is_err(),
        "an ask queued past the deadline fails, it is not answered"
    );
    assert_eq!(
        system.dead_letter_count() - dead_before,
        6,
        "what was queued is dead letters"
    );
}

#[test]
fn a_deadline_moved_later_keeps_every_actor_sharing_it_running() {
    let system = manual();
    let deadline = Arc::new(Deadline::new(system.now() + 10 * S));
    let actors: Vec<_> = (0..4)
        .map(|_| counter(&system, &deadline, SpawnOptions::new()))
        .collect();
    // Renewed every 5 s for a minute: nobody stops.
    for _ in 0..12 {
        system.advance_time(5 * S).unwrap();
        deadline.set(system.now() + 10 * S);
        for (a, _) in &actors {
            a.tell(Add).unwrap();
        }
        run_all(&system);
    }
    for (a, handled) in &actors {
        assert!(a.is_alive());
        assert_eq!(handled.load(Ordering::SeqCst), 12);
    }
    // Lost: every one stops at its next message.
    deadline.expire();
    for (a, _) in &actors {
        a.tell(Add).unwrap();
    }
    run_all(&system);
    for (a, handled) in &actors {
        assert!(!a.is_alive());
        assert_eq!(handled.load(Ordering::SeqCst), 12);
    }
}

#[test]
fn an_actor_its_deadline_stopped_is_not_restarted() {
    let system = manual();
    let deadline = Arc::new(Deadline::new(system.now() + S));
    let handled = Arc::new(AtomicU32::new(0));
    let starts = Arc::new(AtomicU32::new(0));
    let (h, s) = (handled.clone(), starts.clone());
    let actor = system
        .spawn_factory_with_options(
            SpawnOptions::new()
                .restart(Restart::Permanent)
                .deadline(deadline.clone()),
            move || {
                s.fetch_add(1, Ordering::SeqCst);
                Counter { handled: h.clone() }
            },
        )
        .unwrap();
    actor.tell(Add).unwrap();
    run_all(&system);
    system.advance_time(2 * S).unwrap();
    actor.tell(Add).unwrap();
    run_all(&system);
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    assert_eq!(starts.load(Ordering::SeqCst), 1, "made once, never again");
    assert!(!actor.is_alive());
}

/// Many threads move the deadline while actors on a real scheduler take
/// messages: an actor never handles a message it was sent after the
/// deadline had been expired for good.
#[test]
fn nothing_sent_after_the_deadline_expired_is_handled_on_any_worker() {
    let system = ActorSystem::builder().worker_threads(2).build();
    for _ in 0..if cfg!(miri) { 2 } else { 20 } {
        let deadline = Arc::new(Deadline::new(system.now() + 3600 * S));
        let actors: Vec<_> = (0..8)
            .map(|_| counter(&system, &deadline, SpawnOptions::new()))
            .collect();
        let movers: Vec<_> = (0..2)
            .map(|_| {
                let (d, now) = (deadline.clone(), system.now());
                std::thread::spawn(move || {
                    for k in 0..200u64 {
                        d.set(now + Duration::from_secs(3600 + k));
                    }
                })
            })
            .collect();
        for _ in 0..50 {
            for (a, _) in &actors {
                let _ = a.tell(Add);
            }
        }
        for m in movers {
            m.join().unwrap();
        }
        deadline.expire();
        for (a, handled) in &actors {
            let _ = a.tell(Late);
            assert_eq!(common::block_on(a.wait_stopped()), ExitReason::Shutdown);
            let handled = handled.load(Ordering::SeqCst);
            assert!(
                handled <= 50,
                "a message sent after the expiry was handled ({handled})"
            );
        }
    }
}
