//! The divert seam: an extension installed on the builder receives every
//! send as an `InFlight` and alone decides when (and whether) it reaches the
//! mailbox. The test kit's simulation and the remote layer build on this.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use troubadour::divert::Divert;
use troubadour::prelude::*;
use troubadour::InFlight;

/// Keeps what it is given; the test decides.
#[derive(Default)]
struct Keep(Mutex<Vec<InFlight>>);

impl Keep {
    fn take(&self) -> Vec<InFlight> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Divert for Keep {
    fn divert(&self, message: InFlight) {
        self.0.lock().unwrap().push(message);
    }
}

struct Recorder(Sender<u32>);
impl Actor for Recorder {}

struct Note(u32);
impl Message for Note {
    type Reply = u32;
}
impl Handler<Note> for Recorder {
    fn handle(&mut self, Note(n): Note, _: &mut Context<Self>) -> u32 {
        let _ = self.0.send(n);
        n * 10
    }
}

fn settle(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, u32::MAX)).is_some() {}
}

fn setup() -> (
    ActorSystem,
    Arc<Keep>,
    ActorRef<Recorder>,
    std::sync::mpsc::Receiver<u32>,
) {
    let keep = Arc::new(Keep::default());
    let system = ActorSystem::builder()
        .manual_scheduling()
        .divert(keep.clone())
        .build();
    let (tx, rx) = channel();
    let recorder = system.spawn(Recorder(tx)).unwrap();
    settle(&system);
    (system, keep, recorder, rx)
}

#[test]
fn every_send_goes_to_the_divert_and_reaches_the_actor_only_when_delivered() {
    let (system, keep, recorder, handled) = setup();
    for n in 1..=3 {
        recorder.tell(Note(n)).unwrap();
    }
    let mut answer = recorder.ask(Note(4));
    settle(&system);
    assert!(handled.try_recv().is_err(), "nothing bypassed the divert");
    let held = keep.take();
    assert_eq!(held.len(), 4);
    assert!(held.iter().all(|m| m.to() == recorder.id()));
    assert!(
        held.iter().all(|m| m.from().is_none()),
        "sent from the test"
    );
    assert_eq!(
        held.iter().map(InFlight::is_ask).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    // The divert chooses the order: last sent first.
    for m in held.into_iter().rev() {
        m.deliver();
    }
    settle(&system);
    assert_eq!(handled.try_iter().collect::<Vec<_>>(), [4, 3, 2, 1]);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(matches!(
        std::future::Future::poll(std::pin::Pin::new(&mut answer), &mut cx),
        std::task::Poll::Ready(Ok(40))
    ));
}

#[test]
fn a_diverted_message_dropped_undelivered_is_a_dead_letter_and_a_lost_one_is_not() {
    let (system, keep, recorder, handled) = setup();
    recorder.tell(Note(1)).unwrap();
    recorder.tell(Note(2)).unwrap();
    let mut held = keep.take().into_iter();
    let before = system.dead_letter_count();
    drop(held.next());
    assert_eq!(
        system.dead_letter_count(),
        before + 1,
        "nothing vanishes silently"
    );
    held.next().unwrap().lose();
    assert_eq!(
        system.dead_letter_count(),
        before + 1,
        "`lose` is the deliberate, uncounted loss of a lossy network"
    );
    settle(&system);
    assert!(handled.try_recv().is_err());
}

#[test]
fn a_divert_also_carries_sends_between_actors_with_their_sender() {
    let (system, keep, recorder, handled) = setup();
    struct Forwarder(ActorRef<Recorder>);
    impl Actor for Forwarder {}
    struct Go;
    impl Message for Go {
        type Reply = ();
    }
    impl Handler<Go> for Forwarder {
        fn handle(&mut self, _: Go, _: &mut Context<Self>) {
            self.0.tell(Note(9)).unwrap();
        }
    }
    let forwarder = system.spawn(Forwarder(recorder.clone())).unwrap();
    settle(&system);
    forwarder.tell(Go).unwrap();
    keep.take().into_iter().for_each(InFlight::deliver);
    settle(&system);
    let held = keep.take();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].from(), Some(forwarder.id()));
    assert_eq!(held[0].to(), recorder.id());
    held.into_iter().for_each(InFlight::deliver);
    settle(&system);
    assert_eq!(handled.try_iter().collect::<Vec<_>>(), [9]);
}
