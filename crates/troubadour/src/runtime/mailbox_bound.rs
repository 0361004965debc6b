//! The room in a bounded mailbox.
//!
//! User messages take room before they enter and give it back when they
//! leave; a send that finds no room is refused (`SendError::Full`) or waits
//! (`send(..).await`). System messages, the `Down` of a monitor and the
//! `Exited` of a trapped link, are not the user's traffic and must never be
//! refused or lost for want of room (Erlang and Akka keep them apart from
//! the user's mailbox for the same reason). They take room if there is
//! some, and otherwise go over the bound, as a debt.
//!
//! # Invariant
//!
//! `available permits + messages inside holding room − over == bound`,
//! where `over` counts messages that entered without room. Whenever a
//! message leaves, the debt is paid before any room is given back, so user
//! sends see the bound again as soon as the extra messages have been
//! handled. Paying is one `fetch_update` that only succeeds while `over`
//! is non-zero, so two leaving messages never pay the same debt.

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Semaphore, TryAcquireError};

pub(crate) struct MailboxBound {
    room: Semaphore,
    over: AtomicUsize,
}

/// Why a send could not take room.
pub(crate) enum NoRoom {
    Full,
    /// The actor has stopped (its room is closed when it does).
    Closed,
}

impl MailboxBound {
    pub(crate) fn new(capacity: usize) -> Self {
        MailboxBound {
            room: Semaphore::new(capacity.max(1)),
            over: AtomicUsize::new(0),
        }
    }

    /// Room for a user message, or why there is none.
    #[inline]
    pub(crate) fn take(&self) -> Result<(), NoRoom> {
        match self.room.try_acquire() {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(TryAcquireError::NoPermits) => Err(NoRoom::Full),
            Err(TryAcquireError::Closed) => Err(NoRoom::Closed),
        }
    }

    /// Room for a system message: never `Full`; over the bound if need be.
    pub(crate) fn take_for_system(&self) -> Result<(), NoRoom> {
        match self.take() {
            Err(NoRoom::Full) => {
                self.over.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            other => other,
        }
    }

    /// Waits for room (backpressure). `Err` once the actor has stopped.
    pub(crate) async fn wait_for_room(&self) -> Result<(), NoRoom> {
        match self.room.acquire().await {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(_) => Err(NoRoom::Closed),
        }
    }

    /// A message left (or will never enter): pays a debt, or gives its room
    /// back.
    #[inline]
    pub(crate) fn free(&self) {
        if self.over.load(Ordering::Acquire) != 0
            && self
                .over
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        {
            return;
        }
        self.room.add_permits(1);
    }

    /// The actor stopped: senders waiting for room wake and are refused.
    pub(crate) fn close(&self) {
        self.room.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_messages_go_over_the_bound_and_the_debt_is_paid_first() {
        let bound = MailboxBound::new(1);
        assert!(bound.take().is_ok());
        assert!(matches!(bound.take(), Err(NoRoom::Full)));
        assert!(bound.take_for_system().is_ok());
        assert!(bound.take_for_system().is_ok());
        // Two messages over a bound of one: the first two to leave pay.
        bound.free();
        assert!(matches!(bound.take(), Err(NoRoom::Full)));
        bound.free();
        assert!(matches!(bound.take(), Err(NoRoom::Full)));
        bound.free();
        assert!(bound.take().is_ok(), "all three left: room for one again");
        assert!(matches!(bound.take(), Err(NoRoom::Full)));
    }

    /// Producers taking room (user sends refused when full, system messages
    /// over the bound) race a consumer freeing it; when everything has
    /// left, the bound is exactly as it started: no room lost, none made.
    #[test]
    fn racing_sends_and_frees_leave_the_bound_unchanged() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        const CAPACITY: usize = 8;
        let rounds = if cfg!(miri) { 50 } else { 20_000 };
        let bound = Arc::new(MailboxBound::new(CAPACITY));
        let inside = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let (bound, inside) = (bound.clone(), inside.clone());
                std::thread::spawn(move || {
                    for i in 0..rounds {
                        let entered = if (i + p) % 3 == 0 {
                            bound.take_for_system().is_ok()
                        } else {
                            bound.take().is_ok()
                        };
                        if entered {
                            inside.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                })
            })
            .collect();
        let consumer = {
            let (bound, inside) = (bound.clone(), inside.clone());
            std::thread::spawn(move || {
                let mut freed = 0usize;
                let mut idle = 0u32;
                while idle < 1000 {
                    if inside
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        bound.free();
                        freed += 1;
                        idle = 0;
                    } else {
                        idle += 1;
                        std::thread::yield_now();
                    }
                }
                freed
            })
        };
        for p in producers {
            p.join().unwrap();
        }
        consumer.join().unwrap();
        while inside
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
        {
            bound.free();
        }
        assert_eq!(bound.over.load(Ordering::Acquire), 0, "every debt was paid");
        for _ in 0..CAPACITY {
            assert!(bound.take().is_ok(), "room was lost");
        }
        assert!(matches!(bound.take(), Err(NoRoom::Full)), "room was made");
    }

    #[test]
    fn a_closed_bound_refuses_system_messages_too() {
        let bound = MailboxBound::new(4);
        bound.close();
        assert!(matches!(bound.take_for_system(), Err(NoRoom::Closed)));
    }
}
