//! A future polled on whichever thread wakes it: how the answer to an
//! incoming ask leaves from the thread of the actor that replied.
//!
//! Spawning the answer as a tokio task cost a thread hand-off per remote
//! ask: the actor's worker completed the reply, woke a tokio thread, and
//! that thread encoded and wrote the answer. Polled here instead, the
//! reply's `send` wakes this task, which polls at once on the replying
//! thread: the answer is encoded and (when the stream is free) written
//! before the worker takes its next message, as an Erlang process's reply
//! to a remote caller leaves from its own scheduler.
//!
//! The future must not block: it runs inside whatever woke it (a reply
//! being sent, a timer firing, a reply slot being dropped). The answer
//! future only takes the connection's short locks.
//!
//! Invariant: a wake is never lost. `wake` sets `notified` before it tries
//! the lock; whoever holds the lock swaps `notified` to `false` before each
//! poll and checks it again after releasing the lock. A wake that finds the
//! lock taken has set `notified` before that holder's final check, so the
//! holder (or a later waker that wins the lock) polls once more. A wake
//! from inside the poll itself (a future that yields by waking itself)
//! takes the same path and never re-enters the lock it is under.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type Boxed = Pin<Box<dyn Future<Output = ()> + Send>>;

pub(crate) struct InlineTask {
    future: Mutex<Option<Boxed>>,
    notified: AtomicBool,
}

impl InlineTask {
    /// Polls `future` now, on the calling thread, and from then on on the
    /// thread of each wake, until it completes.
    pub(crate) fn start(future: Boxed) {
        let task = Arc::new(InlineTask {
            future: Mutex::new(Some(future)),
            notified: AtomicBool::new(false),
        });
        task.wake_by_ref();
    }

    fn run(self: &Arc<Self>) {
        loop {
            let Ok(mut slot) = self.future.try_lock() else {
                // The holder checks `notified` after unlocking.
                return;
            };
            let waker = Waker::from(self.clone());
            let mut cx = Context::from_waker(&waker);
            while self.notified.swap(false, Ordering::AcqRel) {
                let Some(future) = slot.as_mut() else { break };
                if let Poll::Ready(()) = future.as_mut().poll(&mut cx) {
                    *slot = None;
                }
            }
            drop(slot);
            if !self.notified.load(Ordering::Acquire) {
                return;
            }
        }
    }
}

impl Wake for InlineTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notified.store(true, Ordering::Release);
        self.run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Completes on the thread that sends, and every send is seen, with
    /// many threads racing the wakes.
    #[test]
    fn completes_once_on_the_waking_thread_under_racing_wakes() {
        for _ in 0..200 {
            let (tx, rx) = tokio::sync::oneshot::channel::<std::thread::ThreadId>();
            let done = Arc::new(AtomicUsize::new(0));
            let seen = Arc::new(Mutex::new(None));
            let (d, s) = (done.clone(), seen.clone());
            InlineTask::start(Box::pin(async move {
                let sender = rx.await.unwrap();
                *s.lock().unwrap() = Some((sender, std::thread::current().id()));
                d.fetch_add(1, Ordering::SeqCst);
            }));
            assert_eq!(done.load(Ordering::SeqCst), 0, "pending until the reply");
            std::thread::spawn(move || {
                tx.send(std::thread::current().id()).unwrap();
            })
            .join()
            .unwrap();
            assert_eq!(done.load(Ordering::SeqCst), 1);
            let (sender, poller) = seen.lock().unwrap().unwrap();
            assert_eq!(sender, poller, "polled on the thread that sent the reply");
        }
    }

    /// A future woken by many threads at once, many times, is polled after
    /// the last wake (no wake lost) and completes exactly once.
    #[test]
    fn no_wake_is_lost() {
        struct Countdown {
            left: Arc<AtomicUsize>,
            wakers: Arc<Mutex<Vec<Waker>>>,
        }
        impl Future for Countdown {
            type Output = ();
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.left.load(Ordering::SeqCst) == 0 {
                    return Poll::Ready(());
                }
                self.wakers.lock().unwrap().push(cx.waker().clone());
                // A decrement between the check and the push is followed
                // by a wake, which polls again.
                if self.left.load(Ordering::SeqCst) == 0 {
                    return Poll::Ready(());
                }
                Poll::Pending
            }
        }
        for _ in 0..100 {
            let threads = 4;
            let per_thread = 250;
            let left = Arc::new(AtomicUsize::new(threads * per_thread));
            let wakers = Arc::new(Mutex::new(Vec::new()));
            let done = Arc::new(AtomicUsize::new(0));
            let (l, w, d) = (left.clone(), wakers.clone(), done.clone());
            InlineTask::start(Box::pin(async move {
                Countdown { left: l, wakers: w }.await;
                d.fetch_add(1, Ordering::SeqCst);
            }));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (left, wakers) = (left.clone(), wakers.clone());
                    std::thread::spawn(move || {
                        for _ in 0..per_thread {
                            left.fetch_sub(1, Ordering::SeqCst);
                            let taken: Vec<Waker> = std::mem::take(&mut *wakers.lock().unwrap());
                            for w in taken {
                                w.wake();
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(done.load(Ordering::SeqCst), 1);
        }
    }
}
