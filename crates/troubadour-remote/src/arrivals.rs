//! Running the actor a message woke on the connection's own I/O thread.
//!
//! A frame read from a socket is told to its actor by a tokio thread, which
//! is not one of the system's workers: the actor would go to the global
//! queue and a sleeping worker would be woken to run it. On an idle node
//! that hand-over is most of a remote round trip (decision 0022). So the
//! reader keeps the first actor its frames woke
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
//! actor whose turn took longer than [`SLOW_TURN`] is remembered and left to
//! the workers from then on. A turn that comes while the last one is still
//! queued or running goes to the workers too (the hand-over holds one).

use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::mpsc;
use troubadour::remote::{keep_arrival, Arrival};
use troubadour::ActorId;

/// A turn longer than this keeps the actor off the I/O threads from then
/// on: long enough for any handler that only computes a reply, far shorter
/// than what would delay the connection's other frames noticeably.
const SLOW_TURN: Duration = Duration::from_micros(250);

/// How many slow actors a connection remembers; past this the set starts
/// over (an actor that is still slow is caught again after one turn).
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
            let mut slow = HashSet::new();
            // Ends when the reader drops its side.
            while let Some(arrival) = queued.recv().await {
                let actor = arrival.id();
                if slow.contains(&actor) {
                    drop(arrival); // to the workers
                    continue;
                }
                let started = Instant::now();
                arrival.run();
                if started.elapsed() > SLOW_TURN {
                    remember_slow(&mut slow, actor);
                }
            }
        });
        Some(Self { turns })
    }

    /// Runs `deliver` (the dispatch of what was read) and hands the first
    /// actor it woke to the running task, or to the workers if that task
    /// still has one.
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

fn remember_slow(slow: &mut HashSet<ActorId>, actor: ActorId) {
    if slow.len() >= SLOW_REMEMBERED {
        slow.clear();
    }
    slow.insert(actor);
}
