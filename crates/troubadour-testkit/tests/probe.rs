//! The probe's assertions pass when they should and fail, saying what
//! arrived, when they should not.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_testkit::TestProbe;

#[derive(Debug, Clone, PartialEq)]
struct Note(u32);

impl Message for Note {
    type Reply = ();
}

const WAIT: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(50);

fn panic_text(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("the expectation must fail");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn messages_arrive_in_order_and_pass_matching_expectations() {
    let system = ActorSystem::new();
    let probe = TestProbe::new(&system).unwrap();
    let to = probe.recipient();
    for i in 0..5 {
        to.tell(Note(i)).unwrap();
    }
    assert_eq!(probe.expect_msg(WAIT), Note(0));
    probe.expect_msg_eq(Note(1), WAIT);
    let n = probe.expect_msg_matching("with an even number", WAIT, |n| n.0 % 2 == 0);
    assert_eq!(n, Note(2));
    assert_eq!(probe.receive_n(2, WAIT), [Note(3), Note(4)]);
    probe.expect_no_msg(QUIET);
}

#[test]
fn failed_expectations_say_what_arrived() {
    let system = ActorSystem::new();
    let probe = TestProbe::new(&system).unwrap();
    let to = probe.recipient();

    to.tell(Note(7)).unwrap();
    let text = panic_text(|| {
        probe.expect_msg_eq(Note(8), WAIT);
    });
    assert!(text.contains("expected Note(8), got Note(7)"), "{text}");

    to.tell(Note(9)).unwrap();
    let text = panic_text(|| {
        probe.expect_msg_matching("below 5", WAIT, |n| n.0 < 5);
    });
    assert!(
        text.contains("expected a message below 5, got Note(9)"),
        "{text}"
    );

    to.tell(Note(10)).unwrap();
    let text = panic_text(|| probe.expect_no_msg(WAIT));
    assert!(text.contains("expected no message for"), "{text}");
    assert!(text.contains("got Note(10)"), "{text}");

    let text = panic_text(|| {
        probe.expect_msg(QUIET);
    });
    assert!(
        text.contains("TestProbe<Note>: expected a message within 50ms, but none arrived"),
        "{text}"
    );

    to.tell(Note(11)).unwrap();
    let text = panic_text(|| {
        probe.receive_n(2, QUIET);
    });
    assert!(
        text.contains("expected 2 messages within 50ms, got 1: [Note(11)]"),
        "{text}"
    );
}

#[test]
fn fish_for_skips_until_a_match_and_lists_what_it_skipped() {
    let system = ActorSystem::new();
    let probe = TestProbe::new(&system).unwrap();
    let to = probe.recipient();
    for i in [1, 3, 4, 5] {
        to.tell(Note(i)).unwrap();
    }
    assert_eq!(probe.fish_for("even", WAIT, |n| n.0 % 2 == 0), Note(4));
    assert_eq!(
        probe.expect_msg(WAIT),
        Note(5),
        "fishing consumes only up to the match"
    );

    to.tell(Note(21)).unwrap();
    let text = panic_text(|| {
        probe.fish_for("above 100", QUIET, |n| n.0 > 100);
    });
    assert!(
        text.contains("no message above 100 within 50ms; skipped 1: [Note(21)]"),
        "{text}"
    );
}

#[derive(Debug)]
struct Quote(&'static str);

impl Message for Quote {
    type Reply = Option<u32>;
}

#[test]
fn the_autopilot_answers_asks_and_the_test_still_sees_them() {
    let system = ActorSystem::new();
    let probe =
        TestProbe::with_autopilot(&system, |q: &Quote| (q.0 == "tea").then_some(3)).unwrap();
    let to = probe.recipient();
    assert_eq!(to.ask(Quote("tea")).timeout(WAIT).wait().unwrap(), Some(3));
    assert_eq!(to.ask(Quote("gold")).timeout(WAIT).wait().unwrap(), None);
    assert_eq!(probe.expect_msg(WAIT).0, "tea");
    assert_eq!(probe.expect_msg(WAIT).0, "gold");
}

#[derive(Debug)]
struct Tagged(usize, u32);

impl Message for Tagged {
    type Reply = ();
}

/// Many senders at once: the probe sees every message, each sender's in
/// the order sent.
#[test]
fn a_probe_sees_every_message_from_many_concurrent_senders() {
    let system = ActorSystem::new();
    let probe = TestProbe::<Tagged>::new(&system).unwrap();
    const SENDERS: usize = 8;
    const EACH: u32 = 2_000;
    std::thread::scope(|s| {
        for sender in 0..SENDERS {
            let to = probe.recipient();
            s.spawn(move || {
                for i in 0..EACH {
                    to.tell(Tagged(sender, i)).unwrap();
                }
            });
        }
    });
    let got = probe.receive_n(SENDERS * EACH as usize, WAIT);
    let mut next = [0u32; SENDERS];
    for Tagged(sender, i) in got {
        assert_eq!(i, next[sender], "sender {sender} out of order");
        next[sender] += 1;
    }
    probe.expect_no_msg(QUIET);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_is_async() {
    let system = ActorSystem::builder()
        .tokio_handle(tokio::runtime::Handle::current())
        .build();
    let probe = TestProbe::new(&system).unwrap();
    assert_eq!(probe.recv(QUIET).await, None);
    probe.recipient().tell(Note(1)).unwrap();
    assert_eq!(probe.recv(WAIT).await, Some(Note(1)));
    assert_eq!(probe.pending(), 0);
}

#[test]
fn dropping_the_probe_stops_its_actor() {
    let system = ActorSystem::new();
    let probe = TestProbe::<Note>::new(&system).unwrap();
    let actor = probe.actor().clone();
    let to = probe.recipient();
    drop(probe);
    let reason = system.block_on(actor.wait_stopped());
    assert!(reason.is_normal(), "{reason}");
    assert!(matches!(to.tell(Note(1)), Err(SendError::Stopped(_))));
}
