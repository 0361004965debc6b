//! An actor's state bits besides its consumer role (which lives in the
//! mailbox's `tail`, `mailbox.rs`): whether it has stopped, whether its
//! suspended handler was woken, and a few facts read on the send path, in
//! one word so a send tests them with one load.
//!
//! `CLOSED` marks a stopped actor: it is set by the role's holder before it
//! gives the role up, so a thread that takes the role later sees it and
//! drains what was sent to dead letters itself; a message raced against a
//! stop is reported, never stranded. `WOKEN` records that the future of a
//! suspended async handler was woken; the waker sets it and then offers the
//! role (`Queue::try_acquire`), and the holder's release, which looks for
//! it before its exchange, keeps the role to resume the handler.

use crate::primitives::sync::{AtomicU32, Ordering};

pub const CLOSED: u32 = 1;
pub const WOKEN: u32 = 1 << 1;
/// The actor holds at least one registered name (so stopping must clean up).
pub const NAMED: u32 = 1 << 2;
/// Owned by a `LocalActor` and not yet attached to a supervisor.
pub const DETACHED: u32 = 1 << 3;
/// Stopped with `ExitReason::Normal` (remembered without an allocation).
pub const EXITED_NORMAL: u32 = 1 << 4;
/// Sends to this actor are held in flight for a simulation to deliver (see
/// `in_flight.rs`). Set at creation, never changed.
pub const HELD: u32 = 1 << 5;
/// A graceful stop was asked for: the stop marker is in the mailbox, and
/// sends from now on are refused as if the actor had stopped (they would
/// land behind the marker). Set once, never cleared; `CLOSED` follows.
pub const SEALED: u32 = 1 << 6;
/// Supervised by the system's guardian (a top-level actor). Set at creation
/// or when a `LocalActor` is spawned, never cleared.
pub const TOP_LEVEL: u32 = 1 << 7;
/// The mailbox is bounded: a send takes a permit first. Set at creation,
/// never changed, so a `tell` learns it from the word it reads anyway and
/// does not read the cell's configuration, which lies near the actor's
/// state (`cell.rs`, the layout note).
pub const BOUNDED: u32 = 1 << 8;
/// The bits above this count the actor's incarnations (a restart or a stop
/// starts a new one), so a timer armed by an earlier incarnation can tell
/// it is stale without the actor keeping a list of its timers.
const INCARNATION_SHIFT: u32 = 9;

pub struct RunState(AtomicU32);

impl RunState {
    pub fn new(bits: u32) -> Self {
        RunState(AtomicU32::new(bits))
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
    /// count wraps, after 8 million restarts of one actor.
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
