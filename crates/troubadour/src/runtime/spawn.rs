//! Creating actors: options (name, mailbox, restart type, own thread) and
//! the one function every spawn path goes through.

use crate::api::actor::Actor;
use crate::api::actor_ref::ActorRef;
use crate::api::error::{RegistryError, SpawnError};
use crate::api::exit::ActorId;
use crate::api::supervision::Restart;
use crate::runtime::cell::{ActorCell, CellConfig, Extras, Factory};
use crate::runtime::signal::ControlHandle;
use crate::runtime::system::SystemCore;
use std::sync::Arc;

/// Which mailbox an actor gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mailbox {
    /// Never refuses a message (`tell` never waits). The default.
    #[default]
    Unbounded,
    /// Holds at most this many messages: `tell`/`try_tell` fail with
    /// [`SendError::Full`](crate::SendError::Full) when full, and
    /// `send(..).await` waits for room.
    Bounded(usize),
}

/// Options for a spawn.
///
/// ```
/// use troubadour::{Mailbox, Restart, SpawnOptions};
/// let opts = SpawnOptions::new().name("db").mailbox(Mailbox::Bounded(1000)).restart(Restart::Permanent);
/// ```
#[derive(Clone, Debug, Default)]
pub struct SpawnOptions {
    pub(crate) name: Option<String>,
    pub(crate) mailbox: Option<Mailbox>,
    pub(crate) restart: Option<Restart>,
    pub(crate) blocking: bool,
    pub(crate) unstash_on_restart: bool,
    pub(crate) deadline: Option<Arc<crate::Deadline>>,
    pub(crate) entity: Option<crate::EntityId>,
}

impl SpawnOptions {
    /// Defaults: no name, the system's default mailbox, `Transient` for
    /// factory spawns, a shared worker thread.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the actor under `name` (spawn fails with
    /// [`SpawnError::NameTaken`] if the name is held). The name is released
    /// when the actor stops.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Picks the mailbox.
    pub fn mailbox(mut self, mailbox: Mailbox) -> Self {
        self.mailbox = Some(mailbox);
        self
    }

    /// When a factory-spawned actor is restarted (ignored for actors spawned
    /// from a value, which are never restarted).
    pub fn restart(mut self, restart: Restart) -> Self {
        self.restart = Some(restart);
        self
    }

    /// On every restart, puts everything the failed instance stashed back in
    /// front of the mailbox (oldest first, behind messages already
    /// unstashed), for the fresh instance to handle: Akka's `Stash`, which
    /// unstashes all on restart. An `ask` waiting in the stash is then
    /// answered by the fresh instance instead of running into its timeout.
    /// Off by default: the stash then survives a restart untouched, until
    /// the fresh instance calls
    /// [`Context::unstash_all`](crate::Context::unstash_all). Only
    /// factory-spawned actors restart.
    pub fn unstash_on_restart(mut self, on: bool) -> Self {
        self.unstash_on_restart = on;
        self
    }

    /// Stops the actor at its first turn after `deadline` has passed, by
    /// its system's clock, before it handles another message: what is
    /// still queued goes to dead letters, as for any actor stopped with
    /// messages waiting. Many actors may share one deadline and anyone may
    /// move it ([`Deadline::set`](crate::Deadline::set)). For extension
    /// crates: the cluster stops every entity of a node this way the
    /// instant the node's lease ends, however busy or late the actor that
    /// watches the lease is. The stop is final: an actor its deadline
    /// stopped is not restarted, whatever its [`Restart`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// use troubadour::{Deadline, SpawnOptions};
    /// let lease = Arc::new(Deadline::new(Instant::now() + Duration::from_secs(10)));
    /// let opts = SpawnOptions::new().deadline(lease.clone());
    /// ```
    pub fn deadline(mut self, deadline: Arc<crate::Deadline>) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Gives the actor an identity beyond this activation (a virtual
    /// actor's kind and id), which it reads back with
    /// [`Context::entity`](crate::Context::entity) and extension crates key
    /// its state by (durable reminders). The cluster sets it on every
    /// entity it activates; set it yourself for an actor that stands for
    /// something with a stable name in a single-process program.
    ///
    /// ```
    /// use troubadour::{EntityId, SpawnOptions};
    /// let opts = SpawnOptions::new().entity(EntityId::new("vehicle", "0012.01214"));
    /// ```
    pub fn entity(mut self, entity: crate::EntityId) -> Self {
        self.entity = Some(entity);
        self
    }

    /// Runs the actor on a thread of its own, so its handlers may block
    /// (file I/O, a synchronous database driver, heavy computation) without
    /// stalling other actors.
    ///
    /// Without it, a handler that blocks holds its worker thread, and the
    /// actor it last sent to (which waits in that worker's next-actor slot,
    /// to run on the core that wrote its message) starts only when the
    /// handler returns or another worker goes looking for work.
    pub fn blocking(mut self) -> Self {
        self.blocking = true;
        self
    }
}

pub(crate) enum Source<A> {
    Value(A),
    Factory(Factory<A>),
}

/// Builds, registers and starts an actor. `attach` records the new child
/// with its parent (or the guardian) before the child can run.
pub(crate) fn spawn_actor<A: Actor>(
    core: &Arc<SystemCore>,
    parent: Option<Arc<dyn ControlHandle>>,
    options: SpawnOptions,
    source: Source<A>,
    attach: impl FnOnce(Arc<dyn ControlHandle>) -> Result<(), SpawnError>,
) -> Result<ActorRef<A>, SpawnError> {
    if core.is_shutting_down() {
        return Err(SpawnError::SystemShutdown);
    }
    let (actor, factory) = match source {
        Source::Value(a) => (a, None),
        Source::Factory(mut f) => (f(), Some(f)),
    };
    let extras = if parent.is_some() || factory.is_some() {
        let restart = match factory {
            Some(_) => options.restart.unwrap_or_default(),
            None => Restart::Temporary,
        };
        Some(Box::new(Extras {
            parent,
            factory,
            restart,
            unstash_on_restart: options.unstash_on_restart,
            ..Extras::default()
        }))
    } else {
        None
    };
    let bound = match options.mailbox.unwrap_or(core.config.default_mailbox) {
        Mailbox::Unbounded => None,
        Mailbox::Bounded(n) => Some(crate::runtime::mailbox_bound::MailboxBound::new(n)),
    };
    // A manually scheduled system (simulation) runs everything on one
    // thread, blocking actors included.
    let dedicated = options.blocking && !core.scheduler.is_manual();
    let parker = dedicated.then(crossbeam_utils::sync::Parker::new);
    let id = ActorId(core.next_id()?);
    let stats = core.live.as_ref().map(|live| {
        let parent = extras
            .as_ref()
            .and_then(|e| e.parent.as_ref())
            .map(|p| p.id());
        live.insert::<A>(id, parent)
    });
    let (deadline, entity) = (options.deadline, options.entity);
    let config = (bound.is_some()
        || parker.is_some()
        || stats.is_some()
        || deadline.is_some()
        || entity.is_some())
    .then(|| {
        Box::new(CellConfig {
            bound,
            dedicated: parker.as_ref().map(|p| p.unparker().clone()),
            route: None,
            stats,
            deadline,
            entity,
        })
    });
    let cell = ActorCell::new(core.clone(), id, actor, config, extras);
    let actor_ref = ActorRef::from_cell(cell.clone());
    if let Some(name) = options.name {
        match core.registry.register(name.clone(), &actor_ref) {
            Ok(()) => {}
            Err(RegistryError::NameTaken(n)) => return Err(SpawnError::NameTaken(n)),
            Err(RegistryError::Stopped) => return Err(SpawnError::SystemShutdown),
        }
    }
    if let Err(e) = attach(cell.clone()) {
        core.registry.remove_actor(id);
        return Err(e);
    }
    // The cell was created owning its consumer role: hand it to a runner.
    match parker {
        Some(parker) => {
            // SAFETY: the cell was created holding its consumer role, which
            // the dedicated thread takes over; its config holds `parker`'s
            // unparker, so `schedule` unparks that thread.
            if let Err(e) = unsafe { core.scheduler.spawn_dedicated(cell.clone(), parker) } {
                // Never ran: stop it so its parent and name are released.
                // SAFETY: we still hold the consumer role the cell was born with.
                unsafe { cell.begin_stop(crate::ExitReason::Shutdown) };
                return Err(SpawnError::NoThread(e.to_string()));
            }
        }
        // SAFETY: the cell was created holding its consumer role, which we
        // hand to the scheduler here.
        None => unsafe { cell.schedule() },
    }
    Ok(actor_ref)
}
