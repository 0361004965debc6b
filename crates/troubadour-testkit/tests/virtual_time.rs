//! A user's test of time-dependent behaviour: a session that expires after
//! 30 idle minutes, tested in milliseconds on virtual time with a probe.

use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_testkit::TestProbe;

const MINUTE: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, PartialEq)]
struct Expired(&'static str);
impl Message for Expired {
    type Reply = ();
}

/// Expires after `idle` without a `Touch`, checking once a minute.
struct Session {
    user: &'static str,
    idle: Duration,
    last_touch: Instant,
    expired: Recipient<Expired>,
}

impl Actor for Session {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.last_touch = ctx.now();
        ctx.send_interval(MINUTE, Check);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.expired.tell(Expired(self.user));
    }
}

struct Touch;
impl Message for Touch {
    type Reply = ();
}
impl Handler<Touch> for Session {
    fn handle(&mut self, _: Touch, ctx: &mut Context<Self>) {
        self.last_touch = ctx.now();
    }
}

#[derive(Clone)]
struct Check;
impl Message for Check {
    type Reply = ();
}
impl Handler<Check> for Session {
    fn handle(&mut self, _: Check, ctx: &mut Context<Self>) {
        if ctx.now() - self.last_touch >= self.idle {
            ctx.stop();
        }
    }
}

#[test]
fn a_session_expires_after_thirty_idle_minutes_and_not_before() {
    let system = ActorSystem::builder().virtual_time().build();
    let probe = TestProbe::new(&system).unwrap();
    let session = system
        .spawn(Session {
            user: "ada",
            idle: 30 * MINUTE,
            last_touch: Instant::now(),
            expired: probe.recipient(),
        })
        .unwrap();

    system.advance_time(20 * MINUTE).unwrap();
    session.ask(Touch).timeout(WAIT).wait().unwrap();
    // 29 minutes after the touch: still alive.
    system.advance_time(29 * MINUTE).unwrap();
    session.ask(Touch).timeout(WAIT).wait().unwrap();
    probe.expect_no_msg(Duration::from_millis(20));

    // 30 minutes after the last touch, the next check expires it.
    system.advance_time(30 * MINUTE).unwrap();
    probe.expect_msg_eq(Expired("ada"), WAIT);
    assert_eq!(system.block_on(session.wait_stopped()), ExitReason::Normal);
}
