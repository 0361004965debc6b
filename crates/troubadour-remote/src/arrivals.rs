//! Running the actor a message woke on the connection's own I/O thread.
//!
//! A frame read from a socket is told to its actor by a tokio thread, which
//! is not one of the system's workers: the actor would go to the global
//! queue and a sleeping worker would be woken to run it. On an idle node
//! that hand-over is most of a remote round trip (decision 0022). So the
//! reader keeps the actor its frames woke, when they woke only one
//! ([`troubadour::remote::keep_arrival`]) and hands it to a task of the
//! connection's own, which runs the turn on the same tokio thread right
//! after the reader yields, with no thread woken.
//!
//! The turn runs on a task beside the reader, not inside it, because a
//! handler may wait (`ask(..).wait()`): the wait moves the tokio thread's
//! other tasks to another thread (`block_in_place`), and the reader, being
//! one of them, goes on reading, even the very reply the handler waits for.
//!
//! The turn holds its tokio thread, so only short turns are wanted there: an
//! actor whose turns took longer than [`SLOW_TURN`] twice in a row is left
//! to the workers for a while ([`SLOW_FORGOTTEN_AFTER`]). A turn that comes
//! while the last one is still queued or running goes to the workers too
//! (the hand-over holds one).

use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::mpsc;
use troubadour::remote::{keep_arrival, Arrival};
use troubadour::ActorId;

/// A turn longer than this is slow (two in a row send the actor to the
/// workers): long enough for any handler that only computes a reply, far
/// shorter than what would delay the connection's other frames noticeably.
const SLOW_TURN: Duration = Duration::from_micros(250);

/// How long an actor stays off the I/O threads once sent to the workers.
/// A turn is timed by the wall clock, so one that was only preempted (a
/// busy machine) looks slow too: forgetting lets such an actor back, and an
/// actor that really is slow costs the connection two slow turns per
/// period.
const SLOW_FORGOTTEN_AFTER: Duration = Duration::from_secs(1);

/// How many slow actors a connection remembers; past this the set starts
/// over early.
const SLOW_REMEMBERED: usize = 4096;

/// The hand-over from one connection's reader to the task that runs the
/// turns its frames woke.
pub(crate) struct ArrivalRunner {
    turns: mpsc::Sender<Arrival>,
}

impl ArrivalRunner {
    /// Starts the running task on `runtime`; `None` on a current-thread
    /// runtime, where a waiting handler could not hand the reader on (the
    /// workers run every turn then).
    pub(crate) fn start(runtime: &Handle) -> Option<Self> {
        if runtime.runtime_flavor() != RuntimeFlavor::MultiThread {
            return None;
        }
        let (turns, mut queued) = mpsc::channel::<Arrival>(1);
        runtime.spawn(async move {
            let mut slow = SlowActors::default();
            // Ends when the reader drops its side.
            while let Some(arrival) = queued.recv().await {
                let actor = arrival.id();
                if slow.contains(actor) {
                    drop(arrival); // to the workers
                    continue;
                }
                let started = Instant::now();
                arrival.run();
                let ended = Instant::now();
                slow.timed(actor, ended - started, ended);
            }
        });
        Some(Self { turns })
    }

    /// Runs `deliver` (the dispatch of what was read) and hands the actor
    /// it woke, if it woke just one, to the running task, or to the workers
    /// if that task still has one.
    pub(crate) fn deliver<R>(&self, deliver: impl FnOnce() -> R) -> R {
        let (out, arrival) = keep_arrival(deliver);
        if let Some(arrival) = arrival {
            // Refused (full or closed), the `Arrival` comes back in the
            // error and dropping it queues the actor for a worker.
            let _ = self.turns.try_send(arrival);
        }
        out
    }
}

/// The actors whose turns were slow lately: an actor is left to the
/// workers after two slow turns in a row here. One is not enough: on a busy
/// machine a turn of a few microseconds is sometimes preempted for a
/// millisecond, and one such turn would send a quick actor to the workers
/// (a wake-up per message again) for a whole period.
#[derive(Default)]
struct SlowActors {
    /// Slow twice in a row: run by the workers.
    slow: HashSet<ActorId>,
    /// Their last turn here was slow.
    suspects: HashSet<ActorId>,
    /// When the sets were last emptied (`None`: they are empty).
    since: Option<Instant>,
}

impl SlowActors {
    fn contains(&mut self, actor: ActorId) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        if since.elapsed() > SLOW_FORGOTTEN_AFTER {
            self.forget();
            return false;
        }
        self.slow.contains(&actor)
    }

    fn forget(&mut self) {
        self.slow.clear();
        self.suspects.clear();
        self.since = None;
    }

    /// Takes note of a turn of `actor` that took `took`, ending `now`.
    fn timed(&mut self, actor: ActorId, took: Duration, now: Instant) {
        if took <= SLOW_TURN {
            if self.since.is_some() {
                self.suspects.remove(&actor);
            }
            return;
        }
        if self.slow.len() + self.suspects.len() >= SLOW_REMEMBERED {
            self.forget();
        }
        self.since.get_or_insert(now);
        if self.suspects.remove(&actor) {
            self.slow.insert(actor);
        } else {
            self.suspects.insert(actor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(n: u64) -> ActorId {
        let node = troubadour::NodeId::remote("arrivals-test", None, 1).unwrap();
        ActorId::on(&node, n).unwrap()
    }

    const QUICK: Duration = Duration::from_micros(5);
    const LONG: Duration = Duration::from_millis(2);

    #[test]
    fn two_slow_turns_in_a_row_send_an_actor_to_the_workers() {
        let mut slow = SlowActors::default();
        let now = Instant::now();
        slow.timed(actor(1), LONG, now);
        assert!(
            !slow.contains(actor(1)),
            "one slow turn may be a preemption"
        );
        slow.timed(actor(1), LONG, now);
        assert!(slow.contains(actor(1)));
        assert!(!slow.contains(actor(2)));
    }

    #[test]
    fn a_quick_turn_between_two_slow_ones_clears_the_suspicion() {
        let mut slow = SlowActors::default();
        let now = Instant::now();
        for _ in 0..10 {
            slow.timed(actor(1), LONG, now);
            slow.timed(actor(1), QUICK, now);
        }
        assert!(!slow.contains(actor(1)));
    }

    #[test]
    fn slow_actors_are_forgotten_after_a_while() {
        let mut slow = SlowActors::default();
        let now = Instant::now();
        slow.timed(actor(1), LONG, now);
        slow.timed(actor(1), LONG, now);
        assert!(slow.contains(actor(1)));
        // As if the period had passed.
        slow.since = now.checked_sub(SLOW_FORGOTTEN_AFTER * 2);
        assert!(!slow.contains(actor(1)));
        // And suspicion starts over: one slow turn is not enough again.
        slow.timed(actor(1), LONG, now);
        assert!(!slow.contains(actor(1)));
    }

    #[test]
    fn the_sets_stay_bounded() {
        let mut slow = SlowActors::default();
        let now = Instant::now();
        for n in 1..=(3 * SLOW_REMEMBERED as u64) {
            slow.timed(actor(n), LONG, now);
            assert!(slow.slow.len() + slow.suspects.len() <= SLOW_REMEMBERED);
        }
    }
}
