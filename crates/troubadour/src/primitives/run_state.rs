//! Who may run an actor: the `SCHEDULED` bit is the consumer role.
//!
//! An actor is run by at most one thread at a time, and an actor with queued
//! input is never left idle. Both follow from one rule: the thread that sets
//! `SCHEDULED` (from clear to set) owns the actor's queues' consumer side and
//! must run it (or hand it to a worker) until it clears the bit again.
//!
//! * A producer enqueues first, then calls [`RunState::notify`]. If the bit
//!   was clear it now owns the actor and schedules it; otherwise whoever
//!   holds the bit will see the message.
//! * The consumer, when out of work, calls [`RunState::release`]: it clears
//!   the bit and *then* looks at the queues again. A producer whose message
//!   the consumer missed must have enqueued before the consumer's second
//!   look or after the clear; in the second case its own `notify` finds the
//!   bit clear and schedules. In the first case the second look sees the
//!   message, and the consumer tries to take the bit back: if it wins it runs
//!   again, if it loses another thread has taken over. All four operations
//!   are `SeqCst`, so "enqueue, then read the bit" and "clear the bit, then
//!   read the queue" cannot both miss each other (the store-buffer pattern).
//!
//! `CLOSED` marks a stopped actor: a thread that acquires the bit on a closed
//! actor drains what was sent to dead letters itself, so a message raced
//! against a stop is reported, never stranded. `WOKEN` records that the
//! future of a suspended async handler was woken.

use crate::primitives::sync::{AtomicU32, Ordering};

pub const SCHEDULED: u32 = 1;
pub const CLOSED: u32 = 1 << 1;
pub const WOKEN: u32 = 1 << 2;
/// The actor holds at least one registered name (so stopping must clean up).
pub const NAMED: u32 = 1 << 3;
/// Owned by a `LocalActor` and not yet attached to a supervisor.
pub const DETACHED: u32 = 1 << 4;
/// Stopped with `ExitReason::Normal` (remembered without an allocation).
pub const EXITED_NORMAL: u32 = 1 << 5;
/// Sends to this actor are held in flight for a simulation to deliver (see
/// `in_flight.rs`). Set at creation, never changed.
pub const HELD: u32 = 1 << 6;
/// A graceful stop was asked for: the stop marker is in the mailbox, and
/// sends from now on are refused as if the actor had stopped (they would
/// land behind the marker). Set once, never cleared; `CLOSED` follows.
pub const SEALED: u32 = 1 << 7;
/// Supervised by the system's guardian (a top-level actor). Set at creation
/// or when a `LocalActor` is spawned, never cleared.
pub const TOP_LEVEL: u32 = 1 << 8;
/// The bits above this count the actor's incarnations (a restart or a stop
/// starts a new one), so a timer armed by an earlier incarnation can tell
/// it is stale without the actor keeping a list of its timers.
const INCARNATION_SHIFT: u32 = 9;

#[derive(Debug, PartialEq, Eq)]
pub enum Notify {
    /// The caller now owns the actor and must run or schedule it.
    Acquired,
    /// The caller owns a stopped actor and must drain it.
    AcquiredClosed,
    /// Someone else owns it and will see the input.
    AlreadyScheduled,
}

pub struct RunState(AtomicU32);

impl RunState {
    pub fn new(bits: u32) -> Self {
        RunState(AtomicU32::new(bits))
    }

    /// Call after enqueueing input; `extra` bits are set together.
    ///
    /// Fast path: if the actor is already scheduled, a plain load is enough.
    /// The enqueue was a `SeqCst` swap and this load is `SeqCst`; if it still
    /// sees the bit set, the owner's clearing `fetch_and` comes later in the
    /// single total order, so the owner's look at the queue after it sees
    /// our message. This saves a locked read-modify-write per message under
    /// load.
    #[inline]
    pub fn notify(&self, extra: u32) -> Notify {
        if extra == 0 && self.0.load(Ordering::SeqCst) & SCHEDULED != 0 {
            return Notify::AlreadyScheduled;
        }
        let prev = self.0.fetch_or(SCHEDULED | extra, Ordering::SeqCst);
        if prev & SCHEDULED != 0 {
            Notify::AlreadyScheduled
        } else if prev & CLOSED != 0 {
            Notify::AcquiredClosed
        } else {
            Notify::Acquired
        }
    }

    /// Gives up the consumer role. Returns `true` if `has_input` (asked
    /// after the release) saw work and the role was taken back: the caller
    /// owns the actor again.
    #[inline]
    pub fn release(&self, has_input: impl FnOnce(u32) -> bool) -> bool {
        let now = self.0.fetch_and(!SCHEDULED, Ordering::SeqCst) & !SCHEDULED;
        if !has_input(now) {
            return false;
        }
        self.0.fetch_or(SCHEDULED, Ordering::SeqCst) & SCHEDULED == 0
    }

    /// Clears `WOKEN`, telling whether it was set.
    #[inline]
    pub fn take_woken(&self) -> bool {
        self.0.load(Ordering::Relaxed) & WOKEN != 0
            && self.0.fetch_and(!WOKEN, Ordering::AcqRel) & WOKEN != 0
    }

    /// Which incarnation `bits` (a value [`load`](Self::load)ed) belong to.
    #[inline]
    pub fn incarnation(bits: u32) -> u32 {
        bits >> INCARNATION_SHIFT
    }

    /// Starts a new incarnation: timers armed before it become stale. The
    /// count wraps, after 16 million restarts of one actor.
    pub fn new_incarnation(&self) {
        self.0.fetch_add(1 << INCARNATION_SHIFT, Ordering::SeqCst);
    }

    /// Sets `bits`, returning the bits as they were before.
    pub fn fetch_set(&self, bits: u32) -> u32 {
        self.0.fetch_or(bits, Ordering::SeqCst)
    }

    pub fn clear(&self, bits: u32) {
        self.0.fetch_and(!bits, Ordering::SeqCst);
    }

    pub fn set(&self, bits: u32) {
        self.0.fetch_or(bits, Ordering::SeqCst);
    }

    #[inline]
    pub fn load(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}
