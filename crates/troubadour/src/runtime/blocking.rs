//! Waiting for a future from synchronous code (plain `fn main`, tests,
//! direct dispatch of an async handler).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use tokio::runtime::RuntimeFlavor;

/// Wakes a thread parked in [`block_on`] (or in `LocalActor`'s wait for a
/// suspended handler).
pub(crate) struct ThreadWaker(pub(crate) Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on the current thread, parking between polls.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    if crate::runtime::scheduler::arrival_running() && on_multi_thread_tokio() {
        // A handler running on the tokio thread that read its message (an
        // `Arrival`) waits: hand that thread's other tasks (the socket
        // reader among them) to another thread first, or what it waits for
        // might never be read. (A current-thread runtime cannot hand them
        // on; the remote layer runs no arrivals on one.)
        return tokio::task::block_in_place(|| park_until_ready(fut));
    }
    park_until_ready(fut)
}

fn on_multi_thread_tokio() -> bool {
    tokio_flavor() == Some(RuntimeFlavor::MultiThread)
}

/// The flavour of the tokio runtime whose scheduler this thread runs, or,
/// on a thread that runs none, of the runtime it entered (`None`: none).
///
/// A worker of a multi-threaded runtime other than its first says so in one
/// thread-local read (`worker_index`: a current-thread runtime's only
/// thread is its worker 0). Elsewhere the runtime's handle is looked at,
/// and taking it clones an `Arc` that every thread of the runtime shares,
/// a line that moved between the threads twice per `handle_here` call
/// (decision 0066).
///
/// Where the two could differ (a multi-threaded worker that entered a
/// current-thread runtime's handle), a worker above 0 answers for its
/// scheduler, which is what `block_in_place` hands on; worker 0 cannot be
/// told from a current-thread runtime's thread, so there the handle
/// answers, as it did for every thread before.
pub(crate) fn tokio_flavor() -> Option<RuntimeFlavor> {
    if matches!(tokio::runtime::worker_index(), Some(i) if i > 0) {
        return Some(RuntimeFlavor::MultiThread);
    }
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|h| h.runtime_flavor())
}

fn park_until_ready<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        // A handler that waits ends its batch first: the ask it waits on
        // may still be in the remote layer's buffer, written when the
        // turn ends.
        crate::runtime::scheduler::run_turn_end_now();
        thread::park();
    }
}
