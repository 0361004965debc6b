//! `ask` always ends: with the reply, a timeout, or an error saying the
//! actor stopped before replying.

mod common;

use common::LIVENESS;
use std::time::Duration;
use troubadour::prelude::*;

struct Echo;
impl Actor for Echo {}

struct Say(u32);
impl Message for Say {
    type Reply = u32;
}
impl Handler<Say> for Echo {
    fn handle(&mut self, Say(n): Say, _: &mut Context<Self>) -> u32 {
        n
    }
}

struct Boom;
impl Message for Boom {
    type Reply = u32;
}
impl Handler<Boom> for Echo {
    fn handle(&mut self, _: Boom, _: &mut Context<Self>) -> u32 {
        panic!("boom")
    }
}

struct StopAndReply;
impl Message for StopAndReply {
    type Reply = u32;
}
impl Handler<StopAndReply> for Echo {
    fn handle(&mut self, _: StopAndReply, ctx: &mut Context<Self>) -> u32 {
        ctx.stop();
        7
    }
}

/// Never replies in time: sleeps (on its own thread) longer than the asker waits.
struct Sleepy;
impl Actor for Sleepy {}
impl Handler<Say> for Sleepy {
    fn handle(&mut self, Say(n): Say, _: &mut Context<Self>) -> u32 {
        std::thread::sleep(Duration::from_millis(300));
        n
    }
}

#[test]
fn ask_gets_the_reply() {
    let system = ActorSystem::new();
    let echo = system.spawn(Echo).unwrap();
    for i in 0..1000 {
        assert_eq!(echo.ask(Say(i)).timeout(LIVENESS).wait(), Ok(i));
    }
}

#[test]
fn ask_from_async_code() {
    let system = ActorSystem::new();
    let echo = system.spawn(Echo).unwrap();
    let got = common::block_on(async move { echo.ask(Say(5)).await });
    assert_eq!(got, Ok(5));
}

#[test]
fn ask_to_a_panicking_actor_fails_with_no_reply() {
    let system = ActorSystem::new();
    let echo = system.spawn(Echo).unwrap();
    assert_eq!(
        echo.ask(Boom).timeout(LIVENESS).wait(),
        Err(AskError::NoReply)
    );
    // A value-spawned actor is not restarted: it stopped with the panic.
    let reason = system.block_on(echo.wait_stopped());
    assert!(
        matches!(reason, ExitReason::Panicked(ref m) if m.contains("boom")),
        "{reason}"
    );
    assert_eq!(echo.ask(Say(1)).wait(), Err(AskError::Stopped));
}

#[test]
fn asks_queued_behind_a_stop_fail_promptly() {
    let system = ActorSystem::new();
    let echo = system.spawn(Echo).unwrap();
    let first = echo.ask(StopAndReply);
    let queued: Vec<_> = (0..100).map(|i| echo.ask(Say(i))).collect();
    assert_eq!(first.timeout(LIVENESS).wait(), Ok(7));
    for q in queued {
        // Each either was handled before the stop took effect or fails with
        // NoReply; none waits for its timeout.
        match q.timeout(LIVENESS).wait() {
            Ok(_) | Err(AskError::NoReply) | Err(AskError::Stopped) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn ask_to_a_stopped_actor_fails_at_once() {
    let system = ActorSystem::new();
    let echo = system.spawn(Echo).unwrap();
    echo.stop();
    assert_eq!(system.block_on(echo.wait_stopped()), ExitReason::Normal);
    assert_eq!(echo.ask(Say(1)).wait(), Err(AskError::Stopped));
    assert!(matches!(echo.tell(Say(1)), Err(SendError::Stopped(Say(1)))));
}

#[test]
fn ask_times_out() {
    let system = ActorSystem::new();
    let sleepy = system
        .spawn_with_options(SpawnOptions::new().blocking(), Sleepy)
        .unwrap();
    let err = sleepy
        .ask(Say(1))
        .timeout(Duration::from_millis(10))
        .wait()
        .unwrap_err();
    assert_eq!(err, AskError::Timeout(Duration::from_millis(10)));
    assert!(err.to_string().contains("timed out"));
}

#[test]
fn ask_fails_when_the_system_shuts_down() {
    let system = ActorSystem::new();
    let sleepy = system
        .spawn_with_options(SpawnOptions::new().blocking(), Sleepy)
        .unwrap();
    let pending: Vec<_> = (0..5).map(|i| sleepy.ask(Say(i))).collect();
    system.shutdown(LIVENESS).unwrap();
    let mut no_reply = 0;
    for p in pending {
        match p.timeout(LIVENESS).wait() {
            Ok(_) => {}
            Err(AskError::NoReply) => no_reply += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(no_reply >= 1, "queued asks must fail at shutdown");
}
