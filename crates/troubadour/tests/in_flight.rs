//! Held messages (`hold_messages`): what a simulation or a network layer
//! builds on. Sends are held in order with their sender, delivered on
//! request, and never lost silently.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::{ActorSystem, InFlight, Mailbox, SendError, SpawnOptions};

struct Box_(Arc<Mutex<Vec<u32>>>, Option<ActorRef<Box_>>);
impl Actor for Box_ {}

struct Put(u32);
impl Message for Put {
    type Reply = ();
}
impl Handler<Put> for Box_ {
    fn handle(&mut self, Put(n): Put, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(n);
        if let Some(next) = &self.1 {
            let _ = next.tell(Put(n * 10));
        }
    }
}

fn held_system() -> ActorSystem {
    ActorSystem::builder()
        .manual_scheduling()
        .hold_messages()
        .build()
}

fn run_all(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, 64)).is_some() {}
}

#[test]
fn sends_are_held_in_order_with_their_sender_until_delivered() {
    let system = held_system();
    let got = Arc::default();
    let last = system.spawn(Box_(Arc::clone(&got), None)).unwrap();
    let first = system
        .spawn(Box_(Arc::new(Mutex::new(Vec::new())), Some(last.clone())))
        .unwrap();
    first.tell(Put(1)).unwrap();
    first.tell(Put(2)).unwrap();
    run_all(&system);
    let held = system.take_in_flight();
    assert_eq!(held.len(), 2, "nothing ran: the puts are still held");
    assert!(held
        .iter()
        .all(|m| m.from().is_none() && m.to() == first.id()));
    assert!(!held[0].is_ask());
    for m in held {
        m.deliver();
    }
    run_all(&system);
    let forwarded = system.take_in_flight();
    assert_eq!(forwarded.len(), 2);
    assert!(
        forwarded
            .iter()
            .all(|m| m.from() == Some(first.id()) && m.to() == last.id()),
        "a send from a turn names its sender: {forwarded:?}"
    );
    for m in forwarded {
        m.deliver();
    }
    run_all(&system);
    assert_eq!(*got.lock().unwrap(), [10, 20]);
    assert!(system.take_in_flight().is_empty());
}

#[test]
fn a_held_message_to_an_actor_that_stopped_is_a_dead_letter() {
    let system = held_system();
    let b = system.spawn(Box_(Arc::default(), None)).unwrap();
    b.tell(Put(1)).unwrap();
    let held = system.take_in_flight();
    b.stop();
    run_all(&system);
    assert!(!b.is_alive());
    for m in held {
        m.deliver();
    }
    assert_eq!(system.dead_letter_count(), 1);
    // Sent after the stop: refused at once, as on any system.
    assert!(matches!(b.tell(Put(2)), Err(SendError::Stopped(Put(2)))));
}

#[test]
fn dropping_a_held_message_counts_it_and_losing_it_does_not() {
    let system = held_system();
    let b = system.spawn(Box_(Arc::default(), None)).unwrap();
    b.tell(Put(1)).unwrap();
    b.tell(Put(2)).unwrap();
    let mut held = system.take_in_flight();
    let second: InFlight = held.pop().unwrap();
    drop(held);
    assert_eq!(system.dead_letter_count(), 1, "dropped undelivered");
    second.lose();
    assert_eq!(system.dead_letter_count(), 1, "lost on purpose");
}

#[test]
fn a_bounded_mailbox_gets_its_room_back_from_lost_and_injected_messages() {
    let system = held_system();
    let got = Arc::default();
    let b = system
        .spawn_factory_with_options(SpawnOptions::new().mailbox(Mailbox::Bounded(1)), {
            let got = Arc::clone(&got);
            move || Box_(Arc::clone(&got), None)
        })
        .unwrap();
    b.tell(Put(1)).unwrap();
    assert!(
        matches!(b.tell(Put(2)), Err(SendError::Full(_))),
        "a held message takes its room"
    );
    system.take_in_flight().pop().unwrap().lose();
    b.tell(Put(3)).unwrap();
    // A panic injected at it: the node is taken out like a message.
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    system
        .take_in_flight()
        .pop()
        .unwrap()
        .deliver_with_panic("injected");
    run_all(&system);
    std::panic::set_hook(quiet);
    b.tell(Put(4)).unwrap();
    system.take_in_flight().pop().unwrap().deliver();
    run_all(&system);
    assert_eq!(*got.lock().unwrap(), [4], "restarted, then room for one");
    assert!(matches!(b.tell(Put(5)), Ok(())));
    assert!(
        matches!(b.tell(Put(6)), Err(SendError::Full(_))),
        "no room was handed back twice"
    );
}

#[test]
fn shutdown_delivers_what_is_still_held() {
    let system = held_system();
    let got = Arc::default();
    let b = system.spawn(Box_(Arc::clone(&got), None)).unwrap();
    b.tell(Put(7)).unwrap();
    system.shutdown(Duration::from_secs(1)).unwrap();
    // Delivered, then drained as the actor stopped: counted, not lost.
    assert_eq!(
        got.lock().unwrap().len() as u64 + system.dead_letter_count(),
        1
    );
    assert!(system.take_in_flight().is_empty());
}

#[test]
fn systems_without_the_switch_hold_nothing() {
    let system = ActorSystem::builder().manual_scheduling().build();
    let got = Arc::default();
    let b = system.spawn(Box_(Arc::clone(&got), None)).unwrap();
    b.tell(Put(1)).unwrap();
    assert!(system.take_in_flight().is_empty());
    run_all(&system);
    assert_eq!(*got.lock().unwrap(), [1]);
}
