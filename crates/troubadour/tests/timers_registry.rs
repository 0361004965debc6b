//! Timers, names and groups.

// Test helpers pass closures and tuples around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::{log, LIVENESS};
use std::sync::mpsc::Sender;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::{RegistryError, SpawnError, TimerRef};

struct Ticker {
    log: Sender<String>,
    timer: Option<TimerRef>,
}
impl Actor for Ticker {}

#[derive(Clone)]
struct Tick(&'static str);
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Ticker {
    fn handle(&mut self, Tick(s): Tick, _: &mut Context<Self>) {
        let _ = self.log.send(s.to_string());
    }
}

struct Arm(Box<dyn FnOnce(&mut Ticker, &mut Context<Ticker>) + Send>);
impl Message for Arm {
    type Reply = ();
}
impl Handler<Arm> for Ticker {
    fn handle(&mut self, Arm(f): Arm, ctx: &mut Context<Self>) {
        f(self, ctx)
    }
}

fn ticker(system: &ActorSystem, tx: &Sender<String>) -> ActorRef<Ticker> {
    system
        .spawn(Ticker {
            log: tx.clone(),
            timer: None,
        })
        .unwrap()
}

fn arm(t: &ActorRef<Ticker>, f: impl FnOnce(&mut Ticker, &mut Context<Ticker>) + Send + 'static) {
    t.ask(Arm(Box::new(f))).timeout(LIVENESS).wait().unwrap();
}

#[test]
fn send_after_fires_in_deadline_order() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let t = ticker(&system, &tx);
    arm(&t, |_, ctx| {
        ctx.send_after(Duration::from_millis(40), Tick("late"));
        ctx.send_after(Duration::from_millis(5), Tick("early"));
    });
    assert_eq!(rx.next(), "early");
    assert_eq!(rx.next(), "late");
}

#[test]
fn cancelled_timer_never_fires() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let t = ticker(&system, &tx);
    arm(&t, |_, ctx| {
        let doomed = ctx.send_after(Duration::from_millis(20), Tick("cancelled"));
        doomed.cancel();
        // Fires after the cancelled one would have.
        ctx.send_after(Duration::from_millis(60), Tick("marker"));
    });
    assert_eq!(rx.next(), "marker");
}

#[test]
fn interval_repeats_until_cancelled() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let t = ticker(&system, &tx);
    arm(&t, |me, ctx| {
        me.timer = Some(ctx.send_interval(Duration::from_millis(2), Tick("tick")));
    });
    for _ in 0..5 {
        assert_eq!(rx.next(), "tick");
    }
    arm(&t, |me, ctx| {
        me.timer.take().unwrap().cancel();
        ctx.send_after(Duration::from_millis(30), Tick("marker"));
    });
    // A tick the timer sent before the cancel is not recalled, and how
    // many are on their way depends on how the threads were scheduled, so
    // those before the marker are not counted. After it, the timer has
    // been cancelled for 30 ms: an interval of 2 ms still running would
    // tick about 20 times before the next marker.
    let _sent_before_the_cancel = rx.until("marker");
    arm(&t, |_, ctx| {
        ctx.send_after(Duration::from_millis(40), Tick("end"));
    });
    let after_cancel = rx.until("end");
    assert!(
        after_cancel.is_empty(),
        "ticks long after the cancel: {after_cancel:?}"
    );
}

#[test]
fn timers_stop_with_their_actor() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let t = ticker(&system, &tx);
    arm(&t, |_, ctx| {
        ctx.send_interval(Duration::from_millis(1), Tick("tick"));
    });
    rx.until("tick");
    t.stop();
    system.block_on(t.wait_stopped());
    let dead_before = system.dead_letter_count();
    // A second actor's timer proves time has passed on the timer thread.
    let other = ticker(&system, &tx);
    arm(&other, |_, ctx| {
        ctx.send_after(Duration::from_millis(30), Tick("marker"));
    });
    rx.until("marker");
    // At most one tick raced the stop; the interval was cancelled, so it
    // does not keep producing dead letters.
    assert!(system.dead_letter_count() <= dead_before + 1);
}

#[test]
fn many_actors_with_one_timer_each() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let n = 10_000;
    let actors: Vec<_> = (0..n).map(|_| ticker(&system, &tx)).collect();
    for a in &actors {
        a.tell(Arm(Box::new(|_, ctx| {
            ctx.send_after(Duration::from_millis(5), Tick("t"));
        })))
        .unwrap();
    }
    for _ in 0..n {
        assert_eq!(rx.next(), "t");
    }
}

#[test]
fn names_are_unique_and_released_on_stop() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let a = ticker(&system, &tx);
    let b = ticker(&system, &tx);
    system.register("clock", &a).unwrap();
    assert_eq!(
        system.register("clock", &b),
        Err(RegistryError::NameTaken("clock".into()))
    );
    assert_eq!(system.whereis::<Ticker>("clock"), Some(a.clone()));
    // Wrong type: no match rather than a bad cast.
    struct Other;
    impl Actor for Other {}
    assert!(system.whereis::<Other>("clock").is_none());
    a.stop();
    system.block_on(a.wait_stopped());
    assert!(system.whereis::<Ticker>("clock").is_none());
    system.register("clock", &b).unwrap();
    assert!(system.unregister("clock"));
    assert!(system.whereis_id("clock").is_none());
}

/// Four threads race to register eight names, look them up, release them
/// (by stopping the holder or by `unregister`) and stop actors that lost.
/// Each thread only releases what it holds, so from its own point of view
/// a name it holds answers with its actor until it lets go, and a name it
/// let go of never answers with that actor again: two threads each holding
/// one name, or a release that leaves the name pointing at a stopped actor,
/// fails the assertions.
#[test]
fn names_stay_unique_while_threads_race_to_take_release_and_look_them_up() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let names: Vec<String> = (0..8).map(|i| format!("slot-{i}")).collect();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (system, tx, names) = (&system, tx.clone(), &names);
            s.spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t + 1);
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut held: Vec<(String, ActorRef<Ticker>)> = Vec::new();
                for _ in 0..1_500 {
                    let name = &names[(next() % 8) as usize];
                    let a = ticker(system, &tx);
                    match system.register(name, &a) {
                        Ok(()) => held.push((name.clone(), a)),
                        Err(RegistryError::NameTaken(n)) => {
                            assert_eq!(&n, name);
                            a.stop();
                        }
                        Err(e) => panic!("registering a live actor failed: {e}"),
                    }
                    for (n, a) in &held {
                        assert_eq!(system.whereis_id(n), Some(a.id()), "{n} changed hands");
                        assert_eq!(system.whereis::<Ticker>(n).as_ref(), Some(a));
                    }
                    if !held.is_empty() && next() % 2 == 0 {
                        let i = (next() % held.len() as u64) as usize;
                        let (n, a) = held.swap_remove(i);
                        if next() % 2 == 0 {
                            assert!(system.unregister(&n), "{n} was held");
                            a.stop();
                        } else {
                            a.stop();
                            system.block_on(a.wait_stopped());
                        }
                        assert_ne!(
                            system.whereis_id(&n),
                            Some(a.id()),
                            "{n} outlived its release"
                        );
                    }
                }
                for (_, a) in held {
                    a.stop();
                    system.block_on(a.wait_stopped());
                }
            });
        }
    });
    // Every holder stopped: every name is free again.
    assert_eq!(system.registered_names(), Vec::new());
    let (tx, _rx) = log();
    for n in &names {
        assert!(system.whereis_id(n).is_none());
        system.register(n, &ticker(&system, &tx)).unwrap();
    }
}

#[test]
fn spawn_with_a_taken_name_fails() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let _a = system
        .spawn_with_options(
            SpawnOptions::new().name("db"),
            Ticker {
                log: tx.clone(),
                timer: None,
            },
        )
        .unwrap();
    let err = system
        .spawn_with_options(
            SpawnOptions::new().name("db"),
            Ticker {
                log: tx.clone(),
                timer: None,
            },
        )
        .unwrap_err();
    assert_eq!(err, SpawnError::NameTaken("db".into()));
    assert!(err.to_string().contains("already registered"));
}

#[test]
fn groups_fan_out_and_forget_stopped_members() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let members: Vec<_> = (0..3).map(|_| ticker(&system, &tx)).collect();
    for m in &members {
        system.join_group("room", m.recipient::<Tick, _>());
    }
    // Joining twice is one membership.
    system.join_group("room", members[0].recipient::<Tick, _>());
    assert_eq!(system.broadcast("room", Tick("hello")), 3);
    for _ in 0..3 {
        assert_eq!(rx.next(), "hello");
    }
    members[1].stop();
    system.block_on(members[1].wait_stopped());
    assert_eq!(system.group_members::<Tick>("room").len(), 2);
    assert!(system.leave_group::<Tick>("room", members[2].id()));
    assert_eq!(system.broadcast("room", Tick("bye")), 1);
    assert_eq!(rx.next(), "bye");
}
