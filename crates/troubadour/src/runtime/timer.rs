//! Timers: one thread per system with a min-heap of deadlines.
//!
//! A timer is one heap entry (deadline, a boxed action holding a weak
//! reference to its actor and the message) and one small shared flag for
//! cancelling: a million actors with a timer each cost about 280 bytes
//! apiece, actor included (`examples/million_timers.rs`), and one thread,
//! not a million tasks. Cancelled entries are dropped lazily when they come
//! due. The thread starts with the first timer.
//!
//! The actor keeps no list of its timers. A stop or restart starts a new
//! incarnation of the actor (a counter in its run state, `run_state.rs`),
//! and a timer armed by an earlier one finds itself stale when it comes due
//! and sends nothing ([`Fired::Stale`]). Keeping the list instead cost each
//! actor with a timer its lazily allocated extras: 707 bytes per actor and
//! timer against 283 now.
//!
//! The clock is `std::time::Instant`, or, for a system built with
//! [`virtual_time`](crate::ActorSystemBuilder::virtual_time), a virtual
//! instant that moves only when a test calls
//! [`advance_time`](crate::SystemHandle::advance_time): there is no timer
//! thread then, and `advance_time` fires what falls due on the caller's
//! thread, in deadline order, moving the clock to each deadline as it fires.

use crate::runtime::tokio_runtime::TokioRuntime;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const ACTIVE: u8 = 0;
const CANCELLED: u8 = 1;
const DONE: u8 = 2;

/// A handle to a timer set with [`Context::send_after`] or
/// [`Context::send_interval`]. Dropping it does not cancel the timer.
///
/// [`Context::send_after`]: crate::Context::send_after
/// [`Context::send_interval`]: crate::Context::send_interval
#[derive(Clone, Debug)]
pub struct TimerRef {
    state: Arc<AtomicU8>,
}

impl TimerRef {
    /// Cancels the timer. A message already sent is not recalled.
    pub fn cancel(&self) {
        let _ = self
            .state
            .compare_exchange(ACTIVE, CANCELLED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// True once cancelled or once a one-shot timer has fired.
    pub fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) != ACTIVE
    }
}

/// A wait on the system's clock (an `ask`'s timeout, [`Sleep`]): a tokio
/// timer, or an alarm on the virtual clock.
pub(crate) enum Deadline {
    Real(Pin<Box<tokio::time::Sleep>>),
    Virtual(Arc<Alarm>, TimerRef),
    /// The system had shut down when the wait began: there is no clock to
    /// wait on.
    Down,
}

/// How a [`Deadline`] ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Expiry {
    /// Its time is up.
    Elapsed,
    /// The system shut down first and took its clock with it (its own tokio
    /// runtime, or the virtual clock's timers): the time will never be up.
    SystemDown,
}

const WAITING: u8 = 0;
const RUNG: u8 = 1;
const ABANDONED: u8 = 2;

/// Rung by the virtual clock's timer when an ask's time is up, or
/// abandoned when the timer is dropped unfired (the timers shut down).
#[derive(Default)]
pub(crate) struct Alarm {
    state: AtomicU8,
    waker: Mutex<Option<Waker>>,
}

impl Alarm {
    fn set(&self, to: u8) {
        if self
            .state
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

/// The timer's hold on an [`Alarm`]: rings it when fired, abandons it when
/// dropped unfired, so a waiter never waits on a timer that is gone.
struct Ringer(Arc<Alarm>);

impl Drop for Ringer {
    fn drop(&mut self) {
        self.0.set(ABANDONED);
    }
}

/// Where a system's time comes from: its timers (real or virtual) and the
/// tokio runtime real-time waits run on. The system implements it; waits
/// hold it, not the system.
pub(crate) trait Clock: Send + Sync + 'static {
    fn timers(&self) -> &Timers;
    fn tokio(&self) -> &TokioRuntime;
}

impl Deadline {
    pub(crate) fn start(clock: &dyn Clock, timeout: Duration) -> Deadline {
        if !clock.timers().is_virtual() {
            let alive = clock.tokio().alive();
            if !*alive {
                return Deadline::Down;
            }
            // Inside the system's runtime so this works from any executor
            // or a plain thread.
            let _guard = clock.tokio().handle().enter();
            return Deadline::Real(Box::pin(tokio::time::sleep(timeout)));
        }
        let alarm = Arc::new(Alarm::default());
        let ringer = Ringer(alarm.clone());
        let timer = clock.timers().schedule(
            timeout,
            None,
            Box::new(move || {
                ringer.0.set(RUNG);
                Fired::Sent
            }),
        );
        Deadline::Virtual(alarm, timer)
    }

    pub(crate) fn poll(&mut self, clock: &dyn Clock, cx: &mut TaskContext<'_>) -> Poll<Expiry> {
        match self {
            Deadline::Real(sleep) => {
                // Polling a tokio timer whose runtime has shut down panics
                // inside tokio; the read lock keeps the system's own runtime
                // from shutting down during the poll (see `tokio_runtime.rs`).
                let alive = clock.tokio().alive();
                if !*alive {
                    return Poll::Ready(Expiry::SystemDown);
                }
                sleep.as_mut().poll(cx).map(|()| Expiry::Elapsed)
            }
            Deadline::Virtual(alarm, _) => {
                // Register before checking, so a ring in between is not missed.
                *alarm.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
                match alarm.state.load(Ordering::Acquire) {
                    WAITING => Poll::Pending,
                    RUNG => Poll::Ready(Expiry::Elapsed),
                    _ => Poll::Ready(Expiry::SystemDown),
                }
            }
            Deadline::Down => Poll::Ready(Expiry::SystemDown),
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // An answered ask (or a dropped sleep) takes its alarm off the
        // virtual clock.
        if let Deadline::Virtual(_, timer) = self {
            timer.cancel();
        }
    }
}

/// Waits `duration` on the system's clock: see [`SystemHandle::sleep`].
///
/// [`SystemHandle::sleep`]: crate::SystemHandle::sleep
#[must_use = "a Sleep does nothing unless awaited"]
pub struct Sleep {
    deadline: Option<Deadline>,
    duration: Duration,
    clock: Arc<dyn Clock>,
}

impl Sleep {
    pub(crate) fn new(clock: Arc<dyn Clock>, duration: Duration) -> Self {
        Sleep {
            deadline: None,
            duration,
            clock,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let this = &mut *self;
        let (clock, duration) = (&*this.clock, this.duration);
        // Armed at the first poll (tokio's `sleep` counts from its creation
        // instead): a sleep created early and awaited late waits in full.
        // On a system that has shut down it ends at once (documented on
        // `SystemHandle::sleep`).
        this.deadline
            .get_or_insert_with(|| Deadline::start(clock, duration))
            .poll(clock, cx)
            .map(|_| ())
    }
}

/// What a due timer did.
pub(crate) enum Fired {
    /// It did its work (sent its message, rang its alarm); a one-shot
    /// timer is done.
    Sent,
    /// It did its work and, if periodic, wants to run again.
    SentAgain,
    /// Nothing: the actor it was for has stopped or restarted since it was
    /// armed. It is done, and not counted as fired.
    Stale,
}

type Action = Box<dyn FnMut() -> Fired + Send>;

struct Entry {
    at: Instant,
    seq: u64,
    period: Option<Duration>,
    state: Arc<AtomicU8>,
    action: Action,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Wheel {
    heap: BinaryHeap<Entry>,
    seq: u64,
    shutdown: bool,
    /// `Some` on a virtual clock: the current virtual instant.
    virtual_now: Option<Instant>,
}

#[derive(Default)]
struct Shared {
    wheel: Mutex<Wheel>,
    changed: Condvar,
}

#[derive(Default)]
pub(crate) struct Timers {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    is_virtual: bool,
}

impl Timers {
    /// Timers on a virtual clock that starts at `start` (the real current
    /// instant unless a simulation picks one) and moves only by
    /// [`advance`](Self::advance).
    pub(crate) fn virtual_clock(start: Option<Instant>) -> Self {
        let timers = Timers {
            is_virtual: true,
            ..Timers::default()
        };
        timers.lock().virtual_now = Some(start.unwrap_or_else(Instant::now));
        timers
    }

    pub(crate) fn is_virtual(&self) -> bool {
        self.is_virtual
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wheel> {
        self.shared.wheel.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time timers go by.
    pub(crate) fn now(&self) -> Instant {
        if !self.is_virtual {
            return Instant::now();
        }
        self.lock().virtual_now.unwrap_or_else(Instant::now)
    }

    /// When the earliest pending timer falls due (cancelled ones included:
    /// they are dropped when reached).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.lock().heap.peek().map(|e| e.at)
    }

    /// Moves a virtual clock on by `by`, firing every timer that falls due
    /// on the way, on this thread. Returns how many fired. Callers serialize
    /// (one test thread); concurrent calls interleave their firings but each
    /// timer still fires once per due time.
    pub(crate) fn advance(&self, by: Duration) -> usize {
        let target = self.now() + by;
        let mut fired = 0;
        loop {
            let mut wheel = self.lock();
            if wheel.heap.peek().is_none_or(|e| e.at > target) {
                wheel.virtual_now = wheel.virtual_now.max(Some(target));
                return fired;
            }
            let Some(entry) = wheel.heap.pop() else {
                continue;
            };
            wheel.virtual_now = wheel.virtual_now.max(Some(entry.at));
            let now = entry.at;
            if entry.state.load(Ordering::Acquire) != ACTIVE {
                continue;
            }
            drop(wheel);
            if fire(&self.shared, entry, now) {
                fired += 1;
            }
        }
    }

    /// Runs `action` after `delay`, then every `period` while it returns
    /// [`Fired::SentAgain`].
    pub(crate) fn schedule(
        &self,
        delay: Duration,
        period: Option<Duration>,
        action: Action,
    ) -> TimerRef {
        let state = Arc::new(AtomicU8::new(ACTIVE));
        let earliest = {
            let mut wheel = self.lock();
            if wheel.shutdown {
                // Nothing will ever fire it; the action (and what it holds)
                // goes now.
                drop(wheel);
                drop(action);
                state.store(DONE, Ordering::Release);
                return TimerRef { state };
            }
            let at = wheel.virtual_now.unwrap_or_else(Instant::now) + delay;
            wheel.seq += 1;
            let seq = wheel.seq;
            let earliest = wheel.heap.peek().is_none_or(|e| at < e.at);
            wheel.heap.push(Entry {
                at,
                seq,
                period,
                state: state.clone(),
                action,
            });
            earliest
        };
        if self.is_virtual {
            return TimerRef { state };
        }
        self.ensure_thread();
        if earliest {
            self.shared.changed.notify_one();
        }
        TimerRef { state }
    }

    fn ensure_thread(&self) {
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if thread.is_none() {
            let shared = self.shared.clone();
            *thread = std::thread::Builder::new()
                .name("troubadour-timers".into())
                .spawn(move || run(shared))
                .ok();
        }
    }

    /// Timers armed and neither fired nor cancelled (a cancelled timer
    /// stays in the heap until its deadline; it is not counted).
    pub(crate) fn armed(&self) -> usize {
        self.shared.wheel.lock().map_or(0, |w| {
            w.heap
                .iter()
                .filter(|e| e.state.load(Ordering::Relaxed) == ACTIVE)
                .count()
        })
    }

    /// Number of timers not yet fired or collected.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.shared.wheel.lock().map(|w| w.heap.len()).unwrap_or(0)
    }

    pub(crate) fn shutdown(&self) {
        let unfired = self.shared.wheel.lock().map(|mut w| {
            w.shutdown = true;
            std::mem::take(&mut w.heap)
        });
        // Dropped outside the lock: dropping an ask's alarm wakes its task.
        drop(unfired);
        self.shared.changed.notify_all();
        if let Some(h) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn run(shared: Arc<Shared>) {
    let mut wheel = shared.wheel.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if wheel.shutdown {
            return;
        }
        let now = Instant::now();
        match wheel.heap.peek() {
            None => {
                wheel = shared
                    .changed
                    .wait(wheel)
                    .unwrap_or_else(|p| p.into_inner());
            }
            Some(e) if e.at > now => {
                let wait = e.at - now;
                wheel = shared
                    .changed
                    .wait_timeout(wheel, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Some(_) => {
                let Some(entry) = wheel.heap.pop() else {
                    continue;
                };
                if entry.state.load(Ordering::Acquire) != ACTIVE {
                    continue;
                }
                // Fire outside the lock: the action sends a message, which may
                // set another timer.
                drop(wheel);
                fire(&shared, entry, now);
                wheel = shared.wheel.lock().unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// Runs a due timer's action (without the wheel's lock held) and re-arms it
/// if it is periodic and still wanted. `false` if it was stale.
fn fire(shared: &Shared, mut entry: Entry, now: Instant) -> bool {
    let outcome = (entry.action)();
    let again = matches!(outcome, Fired::SentAgain) && entry.period.is_some();
    let mut wheel = shared.wheel.lock().unwrap_or_else(|p| p.into_inner());
    match entry.period {
        Some(p) if again && entry.state.load(Ordering::Acquire) == ACTIVE => {
            // Fixed rate; if we fell far behind, do not burst.
            let next = entry.at + p;
            entry.at = if next < now { now + p } else { next };
            wheel.seq += 1;
            entry.seq = wheel.seq;
            wheel.heap.push(entry);
        }
        _ => entry.state.store(DONE, Ordering::Release),
    }
    !matches!(outcome, Fired::Stale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// On the virtual clock, so the order is decided by deadlines alone
    /// (a slow machine, or Miri, cannot make 30 ms pass between two
    /// `schedule` calls). The real clock's thread is covered by
    /// `interval_repeats_until_cancelled` and the integration tests.
    #[test]
    fn fires_in_deadline_order_and_cancels() {
        let timers = Timers::virtual_clock(None);
        let (tx, rx) = mpsc::channel();
        let make = |v: u32| {
            let tx = tx.clone();
            Box::new(move || {
                let _ = tx.send(v);
                Fired::Sent
            }) as Action
        };
        timers.schedule(Duration::from_millis(30), None, make(3));
        timers.schedule(Duration::from_millis(10), None, make(1));
        let cancelled = timers.schedule(Duration::from_millis(20), None, make(2));
        cancelled.cancel();
        assert_eq!(timers.advance(Duration::from_millis(25)), 1);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1]);
        assert_eq!(timers.advance(Duration::from_millis(5)), 1);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [3]);
        assert!(cancelled.is_done());
        assert_eq!(timers.pending(), 0);
        timers.shutdown();
    }

    #[test]
    fn interval_repeats_until_cancelled() {
        use std::sync::atomic::AtomicUsize;
        let timers = Timers::default();
        let (tx, rx) = mpsc::channel();
        // Ticks that start after `cancel` has returned.
        let cancelled = Arc::new(AtomicBool::new(false));
        let late = Arc::new(AtomicUsize::new(0));
        let t = timers.schedule(Duration::from_millis(1), Some(Duration::from_millis(1)), {
            let (cancelled, late) = (cancelled.clone(), late.clone());
            Box::new(move || {
                if cancelled.load(Ordering::SeqCst) {
                    late.fetch_add(1, Ordering::SeqCst);
                }
                match tx.send(()) {
                    Ok(()) => Fired::SentAgain,
                    Err(_) => Fired::Sent,
                }
            })
        });
        for _ in 0..5 {
            rx.recv().unwrap();
        }
        t.cancel();
        cancelled.store(true, Ordering::SeqCst);
        // A later one-shot timer fires after any tick that was already due,
        // so once it has fired the cancelled interval has had its chance.
        let (mtx, mrx) = mpsc::channel();
        timers.schedule(
            Duration::from_millis(5),
            None,
            Box::new(move || {
                let _ = mtx.send(());
                Fired::Sent
            }),
        );
        mrx.recv().unwrap();
        // At most one tick can have been in flight when `cancel` ran.
        assert!(late.load(Ordering::SeqCst) <= 1);
        assert!(t.is_done());
        timers.shutdown();
    }
}
