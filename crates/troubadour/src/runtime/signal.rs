//! Control signals: what actors, supervisors and the system tell each other
//! about lifecycles. They travel on each actor's signal stack, which its
//! turn empties before any user message, so they overtake user messages.

use crate::api::actor_ref::Recipient;
use crate::api::exit::{ActorId, Down, ExitReason};
use crate::api::supervision::ChildId;
use crate::primitives::mailbox::Link;
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
    /// Stop after the current message, for good: from a parent (`Shutdown`),
    /// from the system, `terminate_child` or `SystemHandle::terminate`.
    Stop(ExitReason),
    /// `ActorRef::stop`: a normal exit, like the actor's own `ctx.stop()`,
    /// so a `Permanent` actor is restarted by its supervisor (OTP).
    RequestStop,
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
    /// One-for-one.
    Restart(ExitReason),
    /// Parent → child, one step of a one-for-all or rest-for-one restart:
    /// run `before_restart`, stop your children, drop the instance and
    /// answer [`ChildParked`](Signal::ChildParked); then wait, taking no
    /// message, for [`StartNow`](Signal::StartNow). A child that is never
    /// restarted (spawned from a value, or `Temporary`) stops instead.
    StopForRestart(ExitReason),
    /// Parent → parked child: rebuild from the factory, run
    /// `after_restart`, answer [`ChildStarted`](Signal::ChildStarted).
    StartNow(ExitReason),
    /// Child → parent: terminated for the restart under way.
    ChildParked {
        id: ActorId,
    },
    /// Child → parent: started again (`after_restart` has returned).
    ChildStarted {
        id: ActorId,
    },
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

impl ChildId for Arc<dyn ControlHandle> {
    fn child_id(&self) -> ActorId {
        self.id()
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
