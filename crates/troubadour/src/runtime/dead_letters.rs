//! Dead letters: messages that reached an actor that could no longer
//! handle them. Counted, and observable by subscribing an actor.

use crate::api::actor::Message;
use crate::api::actor_ref::Recipient;
use crate::api::exit::ActorId;
use crate::runtime::observation::DeadLetterCounts;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

/// Published to dead-letter subscribers for each undelivered message.
/// Never carries the message itself: subscribers (a dashboard, a log)
/// learn its type, not its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The actor the message was for.
    pub recipient: ActorId,
    /// The message's type name.
    pub message_type: &'static str,
    /// Why it was not handled.
    pub reason: DeadLetterReason,
}

/// Why a message became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// Sent to an actor that had already stopped, or was stopping
    /// gracefully and took no more messages.
    RecipientStopped,
    /// Waiting in the mailbox (or the stash) when its actor stopped.
    DiscardedAtStop,
    /// Lost between sender and mailbox (a simulation's fault).
    Lost,
    /// A timer's tick refused by a full bounded mailbox (the next tick
    /// comes as usual).
    MailboxFull,
}

impl DeadLetterReason {
    /// A short label for logs and metrics (`recipient_stopped`,
    /// `discarded_at_stop`, `lost`, `mailbox_full`).
    pub fn as_str(&self) -> &'static str {
        match self {
            DeadLetterReason::RecipientStopped => "recipient_stopped",
            DeadLetterReason::DiscardedAtStop => "discarded_at_stop",
            DeadLetterReason::Lost => "lost",
            DeadLetterReason::MailboxFull => "mailbox_full",
        }
    }
}

impl std::fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Message for DeadLetter {
    type Reply = ();
}

#[derive(Default)]
pub(crate) struct DeadLetters {
    recipient_stopped: AtomicU64,
    discarded_at_stop: AtomicU64,
    lost: AtomicU64,
    mailbox_full: AtomicU64,
    has_subscribers: AtomicBool,
    subscribers: RwLock<Vec<Recipient<DeadLetter>>>,
}

impl DeadLetters {
    pub(crate) fn record(
        &self,
        recipient: ActorId,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        let count = match reason {
            DeadLetterReason::RecipientStopped => &self.recipient_stopped,
            DeadLetterReason::DiscardedAtStop => &self.discarded_at_stop,
            DeadLetterReason::Lost => &self.lost,
            DeadLetterReason::MailboxFull => &self.mailbox_full,
        };
        count.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        tracing::debug!(%recipient, message_type, %reason, "dead letter");
        if !self.has_subscribers.load(Ordering::Acquire) {
            return;
        }
        // Cloned out so a subscriber that is itself dead (whose refusal
        // records another dead letter) cannot re-enter the lock.
        let subs: Vec<_> = match self.subscribers.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        for s in subs.iter().filter(|s| s.is_alive()) {
            let _ = s.tell(DeadLetter {
                recipient,
                message_type,
                reason,
            });
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.counts().total()
    }

    pub(crate) fn counts(&self) -> DeadLetterCounts {
        DeadLetterCounts {
            recipient_stopped: self.recipient_stopped.load(Ordering::Relaxed),
            discarded_at_stop: self.discarded_at_stop.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            mailbox_full: self.mailbox_full.load(Ordering::Relaxed),
        }
    }

    /// Drops every subscription: a subscriber is an actor, which holds the
    /// system, which holds this list, so shutdown must break the cycle.
    pub(crate) fn clear(&self) {
        self.has_subscribers.store(false, Ordering::Release);
        let subs =
            std::mem::take(&mut *self.subscribers.write().unwrap_or_else(|p| p.into_inner()));
        drop(subs);
    }

    pub(crate) fn subscribe(&self, r: Recipient<DeadLetter>) {
        let mut subs = self.subscribers.write().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| s.is_alive());
        subs.push(r);
        self.has_subscribers.store(true, Ordering::Release);
    }
}
