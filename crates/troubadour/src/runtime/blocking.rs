//! Waiting for a future from synchronous code (plain `fn main`, tests,
//! direct dispatch of an async handler).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

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
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
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
