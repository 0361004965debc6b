//! Every worker is used: an actor with messages runs as soon as a worker is
//! free, even while the other workers are in long turns. A handler that
//! takes long (a computation, a blocking call a user made on purpose) must
//! never leave a ready actor queued while another worker sleeps.

mod common;

use common::LIVENESS;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use troubadour::prelude::*;

/// A meeting point for `n` handlers: each waits until all `n` are inside
/// their handler at once, which is only possible if each runs on a worker
/// of its own while the others are still busy. Gives up after [`LIVENESS`]
/// (and says so) instead of hanging the test.
struct Meeting {
    arrived: Mutex<usize>,
    all_in: Condvar,
    n: usize,
}

impl Meeting {
    fn new(n: usize) -> Arc<Meeting> {
        Arc::new(Meeting {
            arrived: Mutex::new(0),
            all_in: Condvar::new(),
            n,
        })
    }

    /// `true` if all `n` met.
    fn attend(&self) -> bool {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.all_in.notify_all();
        let (arrived, timeout) = self
            .all_in
            .wait_timeout_while(arrived, LIVENESS, |a| *a < self.n)
            .unwrap();
        !timeout.timed_out() || *arrived >= self.n
    }
}

struct Attendee {
    met: mpsc::Sender<bool>,
}
impl Actor for Attendee {}

struct Attend(Arc<Meeting>);
impl Message for Attend {
    type Reply = ();
}
impl Handler<Attend> for Attendee {
    fn handle(&mut self, Attend(meeting): Attend, _: &mut Context<Self>) {
        let _ = self.met.send(meeting.attend());
    }
}

/// `workers` actors, one message each, told back to back from outside the
/// system; each handler holds its worker until all of them are running.
/// Repeated, since the bad interleaving (a worker searching for work when
/// the messages arrive, so nobody wakes the sleeping ones) is a race.
fn every_worker_takes_a_ready_actor(workers: usize, rounds: usize) {
    let system = ActorSystem::builder().worker_threads(workers).build();
    let (met, meetings) = mpsc::channel();
    let attendees: Vec<_> = (0..workers)
        .map(|_| system.spawn(Attendee { met: met.clone() }).unwrap())
        .collect();
    for round in 0..rounds {
        let meeting = Meeting::new(workers);
        for attendee in &attendees {
            attendee.tell(Attend(meeting.clone())).unwrap();
        }
        for _ in 0..workers {
            let all_met = meetings
                .recv_timeout(LIVENESS * 2)
                .expect("a handler never ran: the system hung");
            assert!(
                all_met,
                "round {round}: an actor with a message waited while a worker slept \
                 ({workers} workers, each of the others holding one)"
            );
        }
        // Vary when the next round's messages arrive: now the workers are
        // still searching, after a pause they have gone to sleep.
        if round % 3 == 2 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    system.shutdown(LIVENESS).expect("every actor stops");
}

#[test]
fn two_workers_each_take_a_ready_actor() {
    every_worker_takes_a_ready_actor(2, 300);
}

#[test]
fn four_workers_each_take_a_ready_actor() {
    every_worker_takes_a_ready_actor(4, 200);
}

/// Tells an attendee from inside its own turn, then attends the same
/// meeting: the attendee goes to this worker's next-actor slot, and only
/// another worker, woken for it, can run it while this turn waits.
struct Host {
    guest: ActorRef<Attendee>,
    met: mpsc::Sender<bool>,
}
impl Actor for Host {}
impl Handler<Attend> for Host {
    fn handle(&mut self, Attend(meeting): Attend, _: &mut Context<Self>) {
        let _ = self.guest.tell(Attend(meeting.clone()));
        let _ = self.met.send(meeting.attend());
    }
}

/// The wake-up check of a send from a running turn, against the other
/// worker going to sleep at the same moment (decision 0041: producers
/// skip their fence when they read no sleeper, sleepers fence every
/// thread). A wake-up lost there leaves the guest in the slot until the
/// host's turn ends, which it never does before they meet.
#[test]
fn an_actor_woken_by_a_turn_runs_beside_it_while_the_turn_waits() {
    let system = ActorSystem::builder().worker_threads(2).build();
    let (met, meetings) = mpsc::channel();
    let guest = system.spawn(Attendee { met: met.clone() }).unwrap();
    let host = system.spawn(Host { guest, met }).unwrap();
    for round in 0..500 {
        host.tell(Attend(Meeting::new(2))).unwrap();
        for _ in 0..2 {
            let all_met = meetings
                .recv_timeout(LIVENESS * 2)
                .expect("a handler never ran: the system hung");
            assert!(
                all_met,
                "round {round}: the actor a turn woke waited in its slot while the \
                 other worker slept"
            );
        }
        // Reach the other worker at every stage: searching, about to
        // sleep, asleep.
        match round % 4 {
            1 => std::thread::yield_now(),
            2 => std::thread::sleep(std::time::Duration::from_micros(20)),
            3 => std::thread::sleep(std::time::Duration::from_millis(1)),
            _ => {}
        }
    }
    system.shutdown(LIVENESS).expect("every actor stops");
}
