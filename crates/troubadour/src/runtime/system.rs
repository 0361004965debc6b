//! The actor system: the core every handle and actor shares, split by
//! concern into the guardian that supervises top-level actors
//! (`guardian.rs`), the handle actors and users share (`handle.rs`), the
//! builder (`builder.rs`) and the owner with its orderly shutdown
//! (`shutdown.rs`).

use crate::api::actor::{Actor, Message};
use crate::api::actor_ref::{ActorRef, Recipient};
use crate::api::error::{
    BuildError, RegistryError, ShutdownError, SpawnError, TerminateError, TimeError,
};
use crate::api::exit::{ActorId, ExitReason};
use crate::api::node_id::{validate_name, NodeId, MAX_SERIAL, SERIAL_BITS};
use crate::api::supervision::{RestartLog, SupervisorStrategy};
use crate::runtime::busy_poll::BusyPoll;
use crate::runtime::crash_report::{self, CrashReports};
use crate::runtime::dead_letters::{DeadLetter, DeadLetters};
use crate::runtime::extensions::Extensions;
use crate::runtime::observation::{ActorDetails, ActorSample, RuntimeMetrics};
use crate::runtime::registry::Registry;
use crate::runtime::scheduler::Scheduler;
#[cfg(feature = "simulation")]
use crate::runtime::scheduler::TurnRun;
use crate::runtime::signal::{ControlHandle, Signal};
use crate::runtime::spawn::{spawn_actor, Mailbox, Source, SpawnOptions};
use crate::runtime::timer::{Clock, Sleep, Timers};
use crate::runtime::tokio_runtime::TokioRuntime;
use crate::simulation::divert::{Divert, Outbox};
#[cfg(feature = "simulation")]
use crate::simulation::in_flight::InFlight;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod builder;
mod guardian;
mod handle;
mod shutdown;

pub use builder::ActorSystemBuilder;
pub(crate) use guardian::Guardian;
pub use handle::SystemHandle;
pub use shutdown::ActorSystem;

pub(crate) struct Config {
    pub(crate) default_mailbox: Mailbox,
    pub(crate) ask_timeout: Duration,
}

/// State shared by everything in one system.
pub(crate) struct SystemCore {
    pub(crate) scheduler: Scheduler,
    pub(crate) dead_letters: DeadLetters,
    pub(crate) registry: Registry,
    pub(crate) timers: Timers,
    pub(crate) guardian: Guardian,
    pub(crate) config: Config,
    pub(crate) tokio: TokioRuntime,
    node: NodeId,
    /// The node's index, shifted into the high bits every id of this system
    /// carries.
    id_base: u64,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
    /// Where sends go instead of mailboxes (`divert.rs`), if anywhere.
    divert: Option<Arc<dyn Divert>>,
    /// The divert when it is the built-in outbox of `hold_messages`, for
    /// `take_in_flight` and for delivering what it holds at shutdown.
    outbox: Option<Arc<Outbox>>,
    /// The table of live actors, when the system observes them.
    pub(crate) live: Option<crate::runtime::observation::LiveActors>,
    /// What extension crates attached (`SystemHandle::set_extension`).
    extensions: Extensions,
    started: Instant,
    /// What the system's own I/O thread polls before it sleeps.
    pub(crate) busy_poll: Arc<BusyPoll>,
}

impl Clock for SystemCore {
    fn timers(&self) -> &Timers {
        &self.timers
    }
    fn tokio(&self) -> &TokioRuntime {
        &self.tokio
    }
}

impl SystemCore {
    pub(crate) fn holds_messages(&self) -> bool {
        self.divert.is_some()
    }

    pub(crate) fn divert(&self) -> Option<&dyn Divert> {
        self.divert.as_deref()
    }

    /// A new actor id (see [`ActorId`] for the layout). Serials start at 1,
    /// so no id is 0, which the scheduler's current-actor word uses for none.
    pub(crate) fn next_id(&self) -> Result<u64, SpawnError> {
        let serial = self.next_id.fetch_add(1, Ordering::Relaxed);
        if serial > MAX_SERIAL {
            // Never wrap into the node bits: that would name another system.
            return Err(SpawnError::IdsExhausted);
        }
        Ok(self.id_base | serial)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// A top-level actor's signal to its parent, the guardian, which
    /// measures restart intensity on this system's clock.
    pub(crate) fn to_guardian(&self, from: ActorId, signal: Signal) {
        self.guardian.on_signal(from, signal, &self.timers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nobody;
    impl Actor for Nobody {}

    #[test]
    fn the_last_serial_is_handed_out_and_then_spawns_fail_instead_of_wrapping() {
        let system = ActorSystem::builder().manual_scheduling().build();
        system.core.next_id.store(MAX_SERIAL, Ordering::Relaxed);
        let last = system.spawn(Nobody).unwrap();
        assert_eq!(last.id().serial(), MAX_SERIAL);
        assert_eq!(last.id().node(), system.node());
        assert_eq!(
            system.spawn(Nobody).err(),
            Some(SpawnError::IdsExhausted),
            "the next serial would spill into the node bits"
        );
    }
}
