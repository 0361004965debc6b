//! Control signals: what actors, supervisors and the system tell each other
//! about lifecycles. They travel on each actor's signal stack, which its
//! turn empties before any user message, so they overtake user messages.

use crate::actor_ref::Recipient;
use crate::exit::{ActorId, Down, ExitReason};
use crate::mailbox::Link;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Who wants to hear that an actor stopped.
pub(crate) enum Watcher {
    /// An actor that called `ctx.monitor`.
    Actor {
        watcher: ActorId,
        down: Recipient<Down>,
    },
    /// Code awaiting `ActorRef::wait_stopped`.
    Waiter(oneshot::Sender<ExitReason>),
}

pub(crate) enum Signal {
    /// Stop after the current message. `Normal` from `stop()`, `Shutdown`
    /// from a parent or the system.
    Stop(ExitReason),
    /// Stop now; untrappable.
    Kill,
    /// A linked actor stopped.
    Exit {
        from: ActorId,
        reason: ExitReason,
    },
    Link(Arc<dyn ControlHandle>),
    Unlink(ActorId),
    Watch(Watcher),
    Unwatch(ActorId),
    /// Child → parent: the child failed and waits for a decision.
    ChildFailed {
        id: ActorId,
        reason: ExitReason,
    },
    /// Child → parent: the child has fully stopped.
    ChildExited {
        id: ActorId,
    },
    /// Parent → child: restart now (or stop, if the child cannot restart).
    Restart(ExitReason),
}

#[repr(C)]
pub(crate) struct SignalNode {
    link: Link,
    pub(crate) signal: Signal,
}

impl SignalNode {
    pub(crate) fn boxed(signal: Signal) -> *mut Link {
        Box::into_raw(Box::new(SignalNode {
            link: Link::new(),
            signal,
        })) as *mut Link
    }

    /// # Safety
    /// `p` must come from [`boxed`](Self::boxed) and be owned by the caller.
    pub(crate) unsafe fn unbox(p: *mut Link) -> Signal {
        // SAFETY: a `SignalNode` from `Box::into_raw`, ours (contract).
        unsafe { Box::from_raw(p as *mut SignalNode).signal }
    }
}

/// The untyped face of an actor: what supervisors, links, the registry and
/// the system need without knowing the actor's type.
pub(crate) trait ControlHandle: Send + Sync + 'static {
    fn id(&self) -> ActorId;
    /// Takes the `Arc` because queueing a signal may schedule the actor,
    /// which needs an owned reference; making one from `&self` would not be
    /// allowed to touch the reference counts (Miri's Stacked Borrows).
    fn signal(self: Arc<Self>, signal: Signal);
    fn is_stopped(&self) -> bool;
}
