//! Handling a message on the thread that sent it.
//!
//! A tokio task that asks an actor hands the message to the workers: a
//! worker is woken, runs the turn, and the reply wakes the task again on
//! its own thread. For a quick handler (a read of the actor's state) those
//! two hand-overs cost more than the handler: most of what an HTTP service
//! asking one actor per request spent beyond the same service with no
//! actors went to them (decision 0033). [`handle_here`] lets the sender run the
//! turn itself when the actor was idle, so the reply is ready when the task
//! awaits it, with no thread woken on either side.

use crate::runtime::blocking::tokio_flavor;
use crate::runtime::scheduler::{arrival_running, keep_arrival_answering};

/// Runs `send` (a `tell` or an `ask`, or several), and if it woke exactly
/// one idle actor of a system with worker threads, runs that actor's turn
/// here, on the calling thread, before returning: an `ask`'s reply is then
/// ready when it is awaited, with no worker woken and no hand-over back.
///
/// An `ask` of an actor that is idle with nothing else to do is answered
/// as it is sent: its handler is called with the message itself, inside
/// the `ask`, and the reply is kept in the returned [`Ask`](crate::Ask),
/// with no message queued and no reply channel made (decision 0065). What
/// `send` sends after that goes to the workers, as for a second actor
/// woken. A handler there may take its reply over
/// ([`Context::defer_reply`](crate::Context::defer_reply), or stash its
/// message); whatever it asks of its actor (a stop, an unstash) is done in
/// a turn that follows on a worker.
///
/// What stays the same: the actor handles one message at a time (the turn
/// here holds the same role a worker's would), in the order its senders
/// sent them; a panic is caught and supervised as on a worker; if the actor
/// has more messages than one turn takes, the rest go to the workers.
/// Nothing is run here, and `send` behaves exactly as without this call,
/// when the actor was already scheduled or running (its turn is a worker's),
/// when `send` woke several actors, when the caller is one of the system's
/// workers or is inside a turn already, when the actor has a thread of its
/// own ([`SpawnOptions::blocking`](crate::SpawnOptions::blocking)), when the
/// system is simulated, and on a thread that drives a current-thread tokio
/// runtime (a handler that waits there would hold the only thread what it
/// waits for could run on).
///
/// Use it for quick handlers asked from tokio tasks or plain threads, such
/// as an HTTP handler reading an actor's state. The turn runs on the
/// caller's thread, so, as with any code in a task:
///
/// * a slow or blocking handler holds up the caller's other tasks on that
///   thread for the length of the turn (leave such actors to the workers:
///   an ordinary `ask`);
/// * a handler that locks a mutex the caller holds across this call
///   deadlocks (on a worker it would have waited for the caller to let
///   go);
/// * a handler that calls `tokio::runtime::Handle::block_on` panics, as in
///   any tokio task. troubadour's own waits (`ask(..).wait()`) are safe: on
///   a multi-threaded runtime they hand the thread's other tasks on first.
///
/// ```
/// use troubadour::prelude::*;
/// use troubadour::handle_here;
///
/// struct Counter(u64);
/// impl Actor for Counter {}
/// struct Get;
/// impl Message for Get { type Reply = u64; }
/// impl Handler<Get> for Counter {
///     fn handle(&mut self, _: Get, _: &mut Context<Self>) -> u64 { self.0 }
/// }
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let system = ActorSystem::new();
/// let counter = system.spawn(Counter(42))?;
/// // In an HTTP handler, say: the turn runs here if the actor was idle.
/// let value = handle_here(|| counter.ask(Get)).await?;
/// assert_eq!(value, 42);
/// # Ok(())
/// # }
/// ```
pub fn handle_here<R>(send: impl FnOnce() -> R) -> R {
    if arrival_running() || on_current_thread_tokio() {
        return send();
    }
    let (sent, arrival) = keep_arrival_answering(send);
    if let Some(arrival) = arrival {
        arrival.run();
    }
    sent
}

fn on_current_thread_tokio() -> bool {
    tokio_flavor() == Some(tokio::runtime::RuntimeFlavor::CurrentThread)
}
