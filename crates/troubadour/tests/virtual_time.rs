//! Virtual time: timers and ask timeouts move only when the test moves the
//! clock, so hour-long behaviour is tested in milliseconds, exactly.

use std::sync::mpsc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour::{TimeError, TimerRef};

const WAIT: Duration = Duration::from_secs(10);
const MINUTE: Duration = Duration::from_secs(60);

/// Reports every timer message it gets, with the system time it got it at.
struct Sleeper {
    out: mpsc::Sender<(u32, Instant)>,
    timer: Option<TimerRef>,
}

impl Actor for Sleeper {}

#[derive(Clone)]
struct Tick(u32);
impl Message for Tick {
    type Reply = ();
}

impl Handler<Tick> for Sleeper {
    fn handle(&mut self, Tick(n): Tick, ctx: &mut Context<Self>) {
        let _ = self.out.send((n, ctx.now()));
    }
}

struct After(Duration, u32);
impl Message for After {
    type Reply = ();
}

impl Handler<After> for Sleeper {
    fn handle(&mut self, After(d, n): After, ctx: &mut Context<Self>) {
        ctx.send_after(d, Tick(n));
    }
}

struct Every(Duration);
impl Message for Every {
    type Reply = ();
}

impl Handler<Every> for Sleeper {
    fn handle(&mut self, Every(d): Every, ctx: &mut Context<Self>) {
        self.timer = Some(ctx.send_interval(d, Tick(0)));
    }
}

struct CancelTimer;
impl Message for CancelTimer {
    type Reply = ();
}

impl Handler<CancelTimer> for Sleeper {
    fn handle(&mut self, _: CancelTimer, _: &mut Context<Self>) {
        if let Some(t) = self.timer.take() {
            t.cancel();
        }
    }
}

fn sleeper(system: &ActorSystem) -> (ActorRef<Sleeper>, mpsc::Receiver<(u32, Instant)>) {
    let (out, rx) = mpsc::channel();
    let actor = system.spawn(Sleeper { out, timer: None }).unwrap();
    (actor, rx)
}

/// Waits until the actor has handled everything sent before (a round trip).
fn settle(actor: &ActorRef<Sleeper>) {
    struct Ping;
    impl Message for Ping {
        type Reply = ();
    }
    impl Handler<Ping> for Sleeper {
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
    }
    actor.ask(Ping).timeout(WAIT).wait().unwrap();
}

#[test]
fn a_thirty_minute_timer_fires_exactly_when_the_clock_gets_there() {
    let system = ActorSystem::builder().virtual_time().build();
    let start = system.now();
    let (actor, rx) = sleeper(&system);
    actor.tell(After(30 * MINUTE, 1)).unwrap();
    settle(&actor);

    assert_eq!(system.advance_time(29 * MINUTE), Ok(0));
    settle(&actor);
    assert!(rx.try_recv().is_err(), "nothing before its time");

    assert_eq!(system.advance_time(MINUTE), Ok(1));
    let (n, at) = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        at - start,
        30 * MINUTE,
        "handled at the virtual instant it fired"
    );
}

#[test]
fn timers_fire_in_deadline_order_within_one_advance() {
    let system = ActorSystem::builder().virtual_time().build();
    let (actor, rx) = sleeper(&system);
    for (secs, n) in [(3, 3), (1, 1), (2, 2)] {
        actor.tell(After(Duration::from_secs(secs), n)).unwrap();
    }
    settle(&actor);
    assert_eq!(system.advance_time(Duration::from_secs(5)), Ok(3));
    let got: Vec<u32> = (0..3).map(|_| rx.recv_timeout(WAIT).unwrap().0).collect();
    assert_eq!(got, [1, 2, 3]);
}

#[test]
fn an_interval_ticks_once_per_period_until_cancelled() {
    let system = ActorSystem::builder().virtual_time().build();
    let (actor, rx) = sleeper(&system);
    actor.tell(Every(Duration::from_secs(1))).unwrap();
    settle(&actor);
    assert_eq!(system.advance_time(Duration::from_millis(10_500)), Ok(10));
    settle(&actor);
    assert_eq!(rx.try_iter().count(), 10);

    actor.tell(CancelTimer).unwrap();
    settle(&actor);
    assert_eq!(system.advance_time(MINUTE), Ok(0));
    settle(&actor);
    assert_eq!(rx.try_iter().count(), 0);
}

struct Boom;
impl Message for Boom {
    type Reply = ();
}

impl Handler<Boom> for Sleeper {
    fn handle(&mut self, _: Boom, _: &mut Context<Self>) {
        panic!("boom");
    }
}

#[test]
fn a_restart_cancels_the_timers_of_the_failed_incarnation() {
    let system = ActorSystem::builder().virtual_time().build();
    let (out, rx) = mpsc::channel();
    let actor = system
        .spawn_with(move || Sleeper {
            out: out.clone(),
            timer: None,
        })
        .unwrap();
    actor.tell(Every(Duration::from_secs(1))).unwrap();
    actor.tell(After(Duration::from_secs(90), 7)).unwrap();
    settle(&actor);
    assert_eq!(system.advance_time(Duration::from_millis(3_500)), Ok(3));
    settle(&actor);
    assert_eq!(rx.try_iter().count(), 3);

    // Restarted by the guardian from its factory: the old interval and
    // the pending one-shot belong to the failed incarnation.
    actor.tell(Boom).unwrap();
    actor.tell(After(Duration::from_secs(10), 8)).unwrap();
    settle(&actor);
    assert!(actor.is_alive(), "restarted, not stopped");
    assert_eq!(
        system.advance_time(2 * MINUTE),
        Ok(1),
        "only the new incarnation's timer fires"
    );
    settle(&actor);
    assert_eq!(rx.try_iter().map(|(n, _)| n).collect::<Vec<_>>(), [8]);
}

#[test]
fn a_stopped_actor_s_timers_fire_nothing_and_leave_no_dead_letters() {
    let system = ActorSystem::builder().virtual_time().build();
    let (actor, rx) = sleeper(&system);
    actor.tell(Every(Duration::from_secs(1))).unwrap();
    actor.tell(After(Duration::from_secs(5), 1)).unwrap();
    settle(&actor);
    actor.stop();
    system.block_on(actor.wait_stopped());
    assert_eq!(system.advance_time(MINUTE), Ok(0));
    assert_eq!(rx.try_iter().count(), 0);
    assert_eq!(system.dead_letter_count(), 0);
}

/// Never answers: keeps asks pending.
struct Silent;
impl Actor for Silent {}

struct Question;
impl Message for Question {
    type Reply = u32;
}

impl Handler<Question> for Silent {
    fn handle(&mut self, q: Question, ctx: &mut Context<Self>) -> u32 {
        ctx.stash(q);
        0
    }
}

#[test]
fn an_ask_times_out_on_the_virtual_clock_only() {
    let system = ActorSystem::builder().virtual_time().build();
    let silent = system.spawn(Silent).unwrap();
    let (tx, rx) = mpsc::channel();
    let asker = silent.clone();
    std::thread::spawn(move || {
        let _ = tx.send(asker.ask(Question).timeout(5 * MINUTE).wait());
    });
    // However long the real wait, the ask is still pending until the
    // virtual clock moves.
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    system.advance_time(4 * MINUTE).unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    system.advance_time(MINUTE).unwrap();
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        Err(AskError::Timeout(5 * MINUTE))
    );
}

struct Answering;
impl Actor for Answering {}
impl Handler<Question> for Answering {
    fn handle(&mut self, _: Question, _: &mut Context<Self>) -> u32 {
        42
    }
}

#[test]
fn an_answered_ask_leaves_no_timer_behind() {
    let system = ActorSystem::builder().virtual_time().build();
    let a = system.spawn(Answering).unwrap();
    for _ in 0..100 {
        assert_eq!(a.ask(Question).wait(), Ok(42));
    }
    assert_eq!(
        system.advance_time(MINUTE),
        Ok(0),
        "no timeout fires for answered asks"
    );
}

#[test]
fn a_real_clock_cannot_be_moved() {
    let system = ActorSystem::new();
    let err = system.advance_time(MINUTE).unwrap_err();
    assert_eq!(err, TimeError::RealClock);
    assert!(err.to_string().contains("virtual_time()"), "{err}");
}

/// Waits on the system clock inside an async handler.
struct Napper {
    system: SystemHandle,
}
impl Actor for Napper {}

struct Nap(Duration);
impl Message for Nap {
    type Reply = Instant;
}

impl AsyncHandler<Nap> for Napper {
    async fn handle(&mut self, Nap(d): Nap, ctx: &mut Context<Self>) -> Instant {
        self.system.sleep(d).await;
        ctx.now()
    }
}

#[test]
fn an_async_handler_sleeps_on_the_virtual_clock() {
    let system = ActorSystem::builder().virtual_time().build();
    let start = system.now();
    let napper = system
        .spawn(Napper {
            system: system.handle(),
        })
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let asker = napper.clone();
    std::thread::spawn(move || {
        let _ = tx.send(asker.ask(Nap(10 * MINUTE)).timeout(60 * MINUTE).wait());
    });
    // The nap is armed once the handler first polls it.
    while system.next_timer_at() != Some(start + 10 * MINUTE) {
        std::thread::yield_now();
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "asleep until the clock moves"
    );
    system.advance_time(10 * MINUTE).unwrap();
    let woke = rx.recv_timeout(WAIT).unwrap().unwrap();
    assert_eq!(woke - start, 10 * MINUTE);
}
