//! Dead letters: messages that reached an actor that could no longer
//! handle them. Counted, and observable by subscribing an actor.

use crate::api::actor::Message;
use crate::api::actor_ref::Recipient;
use crate::api::exit::ActorId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

/// Published to dead-letter subscribers for each undelivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The actor the message was for.
    pub recipient: ActorId,
    /// The message's type name.
    pub message_type: &'static str,
}

impl Message for DeadLetter {
    type Reply = ();
}

#[derive(Default)]
pub(crate) struct DeadLetters {
    count: AtomicU64,
    has_subscribers: AtomicBool,
    subscribers: RwLock<Vec<Recipient<DeadLetter>>>,
}

impl DeadLetters {
    pub(crate) fn record(&self, recipient: ActorId, message_type: &'static str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        tracing::debug!(%recipient, message_type, "dead letter");
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
            });
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
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
