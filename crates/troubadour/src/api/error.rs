//! Every error a user can meet, each a typed value whose message says what
//! happened and what to do about it.

use std::fmt;
use std::time::Duration;

/// Why a `tell`, `try_tell` or `send` did not enqueue a message. The message
/// is handed back so nothing is lost silently.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(PartialEq, Eq)]
pub enum SendError<M> {
    /// The actor has stopped (or the system shut down). The message was also
    /// counted as a dead letter.
    Stopped(M),
    /// The actor's bounded mailbox is full, or, for an actor on another
    /// node, the connection's bounded outbound queue is. Retry later, or use
    /// `send(msg).await` to wait for room.
    Full(M),
    /// The actor is on another node and this message type is not
    /// registered with the remote layer, so it cannot travel. Only
    /// registered types are ever encoded or decoded.
    Unregistered(M),
    /// The actor is on another node and the message could not be encoded:
    /// its serialization failed, or it is larger than the connection
    /// accepts. The reason says which.
    Unencodable(M, String),
}

impl<M> SendError<M> {
    /// The message that could not be delivered.
    pub fn into_message(self) -> M {
        match self {
            SendError::Stopped(m)
            | SendError::Full(m)
            | SendError::Unregistered(m)
            | SendError::Unencodable(m, _) => m,
        }
    }
}

impl<M> fmt::Debug for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Stopped(_) => write!(f, "SendError::Stopped(..)"),
            SendError::Full(_) => write!(f, "SendError::Full(..)"),
            SendError::Unregistered(_) => write!(f, "SendError::Unregistered(..)"),
            SendError::Unencodable(_, reason) => {
                write!(f, "SendError::Unencodable(.., {reason:?})")
            }
        }
    }
}

impl<M> fmt::Display for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Stopped(_) => write!(
                f,
                "the actor has stopped; the {} message went to dead letters",
                std::any::type_name::<M>()
            ),
            SendError::Full(_) => write!(
                f,
                "the actor's bounded mailbox (or its node's outbound queue) is full; \
                 retry, or use `send(..).await` to wait for room"
            ),
            SendError::Unregistered(_) => write!(
                f,
                "the actor is on another node and {} is not registered for the network; \
                 register it with the remote layer (`#[derive(Message)]` with `remote`, \
                 or `RemoteBuilder::register`) on both nodes",
                std::any::type_name::<M>()
            ),
            SendError::Unencodable(_, reason) => write!(
                f,
                "the actor is on another node and the {} message could not be encoded: {reason}",
                std::any::type_name::<M>()
            ),
        }
    }
}

impl<M> std::error::Error for SendError<M> {}

/// Why an `ask` ended without a reply.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskError {
    /// The actor had stopped before the request was sent.
    Stopped,
    /// The actor's bounded mailbox was full.
    Full,
    /// No reply within the timeout. The request may still be handled later.
    Timeout(Duration),
    /// The actor stopped, was restarted or panicked after taking the request
    /// and before replying.
    NoReply,
    /// The actor system shut down while the reply was awaited (or before),
    /// and with it the clock the timeout runs on: no reply will come. An
    /// actor stuck past the shutdown deadline ends here rather than in its
    /// timeout.
    SystemShutdown,
    /// The actor is on another node and the request's type is not
    /// registered with the remote layer ([`SendError::Unregistered`]).
    Unregistered,
    /// The actor is on another node and the request could not be encoded,
    /// or the reply could not be decoded; the reason says which.
    Unencodable(String),
    /// The actor is on another node and the connection to it was lost (or
    /// the node was declared down) before the reply came. The request may
    /// or may not have been handled.
    ConnectionLost,
    /// The actor's node refused the request (it does not know the type,
    /// or could not decode it); the reason is the node's.
    Refused(String),
}

impl fmt::Display for AskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskError::Stopped => write!(f, "ask failed: the actor has stopped"),
            AskError::Full => write!(f, "ask failed: the actor's bounded mailbox is full"),
            AskError::Timeout(d) => write!(
                f,
                "ask timed out after {d:?}; the actor may be overloaded or stuck, \
                 or the timeout too short (set it with `.timeout(..)`)"
            ),
            AskError::NoReply => write!(
                f,
                "ask failed: the actor stopped, restarted or panicked before replying"
            ),
            AskError::SystemShutdown => write!(
                f,
                "ask failed: the actor system has shut down, so no reply will come; \
                 ask before calling `shutdown` (or dropping the system)"
            ),
            AskError::Unregistered => write!(
                f,
                "ask failed: the actor is on another node and the request's type is not \
                 registered for the network; register it with the remote layer on both nodes"
            ),
            AskError::Unencodable(reason) => {
                write!(
                    f,
                    "ask failed: the request or its reply could not be encoded: {reason}"
                )
            }
            AskError::ConnectionLost => write!(
                f,
                "ask failed: the connection to the actor's node was lost before the reply \
                 came; the request may or may not have been handled"
            ),
            AskError::Refused(reason) => {
                write!(
                    f,
                    "ask failed: the actor's node refused the request: {reason}"
                )
            }
        }
    }
}

impl std::error::Error for AskError {}

impl<M> From<SendError<M>> for AskError {
    fn from(e: SendError<M>) -> Self {
        match e {
            SendError::Stopped(_) => AskError::Stopped,
            SendError::Full(_) => AskError::Full,
            SendError::Unregistered(_) => AskError::Unregistered,
            SendError::Unencodable(_, reason) => AskError::Unencodable(reason),
        }
    }
}

/// Why a spawn did not happen.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnError {
    /// `ActorSystem::shutdown` has begun; no new actors are accepted.
    SystemShutdown,
    /// The spawning actor is stopping; children can no longer be added.
    ParentStopping,
    /// The name asked for in the spawn options is already registered.
    NameTaken(String),
    /// A blocking actor needs a thread of its own and the OS refused one.
    NoThread(String),
    /// The system has handed out every actor id it can (2^44 spawns).
    IdsExhausted,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::SystemShutdown => {
                write!(f, "cannot spawn: the actor system is shutting down")
            }
            SpawnError::ParentStopping => {
                write!(f, "cannot spawn a child: the parent actor is stopping")
            }
            SpawnError::NameTaken(n) => write!(
                f,
                "cannot spawn: the name {n:?} is already registered; pick another or \
                 unregister the holder first"
            ),
            SpawnError::NoThread(e) => write!(
                f,
                "cannot spawn a blocking actor: no thread could be created ({e}); \
                 lower the number of blocking actors or raise the OS thread limit"
            ),
            SpawnError::IdsExhausted => write!(
                f,
                "cannot spawn: this actor system has used up its actor ids; \
                 start a new system"
            ),
        }
    }
}

impl std::error::Error for SpawnError {}

/// Why an actor could not be terminated.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminateError {
    /// [`Context::terminate_child`](crate::Context::terminate_child): the
    /// actor is not a live child of the caller.
    /// [`SystemHandle::terminate`](crate::SystemHandle::terminate): it is
    /// not a top-level actor (its supervisor is another actor, which must
    /// terminate it).
    NotAChild(crate::ActorId),
}

impl fmt::Display for TerminateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TerminateError::NotAChild(id) => write!(
                f,
                "cannot terminate {id}: only its own supervisor can (an actor for its \
                 children, the system for top-level actors)"
            ),
        }
    }
}

impl std::error::Error for TerminateError {}

/// Why a name could not be registered.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// Another live actor holds the name.
    NameTaken(String),
    /// The actor has stopped; a stopped actor cannot be named.
    Stopped,
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::NameTaken(n) => write!(
                f,
                "the name {n:?} is already registered to a live actor; unregister it first"
            ),
            RegistryError::Stopped => write!(f, "cannot register a stopped actor"),
        }
    }
}

impl std::error::Error for RegistryError {}

/// Why `ActorSystem::shutdown` did not finish cleanly.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownError {
    /// Some actors were still running at the deadline (for example a handler
    /// blocked in a system call). Their count is given; they were killed
    /// where possible, and the worker threads were released anyway.
    DeadlineExceeded {
        /// How many top-level actors had not stopped.
        still_running: usize,
    },
}

impl fmt::Display for ShutdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShutdownError::DeadlineExceeded { still_running } => write!(
                f,
                "shutdown deadline passed with {still_running} actor(s) still running; \
                 a handler is probably blocking, move it to a blocking actor"
            ),
        }
    }
}

impl std::error::Error for ShutdownError {}

/// Why the clock could not be moved.
///
/// `#[non_exhaustive]`: later versions (the network layer first) will add
/// reasons, so a `match` outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// The system runs on the real clock, which only moves by itself.
    RealClock,
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::RealClock => write!(
                f,
                "this system runs on the real clock; build it with \
                 ActorSystem::builder().virtual_time() to move time by hand"
            ),
        }
    }
}

impl std::error::Error for TimeError {}

/// Why an [`Inbox`](crate::Inbox) receive ended without a message.
///
/// `#[non_exhaustive]`: later versions may add reasons, so a `match`
/// outside this crate needs a `_` arm.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvError {
    /// No message arrived within the timeout (Erlang's `after` clause).
    Timeout(Duration),
    /// The actor system shut down while the inbox waited, and with it the
    /// clock the timeout runs on: nothing more will arrive from its actors.
    SystemShutdown,
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Timeout(d) => write!(f, "no message arrived in the inbox within {d:?}"),
            RecvError::SystemShutdown => write!(
                f,
                "the actor system shut down while the inbox waited; receive before \
                 calling `shutdown` (or dropping the system)"
            ),
        }
    }
}

impl std::error::Error for RecvError {}

/// Why an [`ActorSystem`](crate::ActorSystem) could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The name given to [`ActorSystemBuilder::name`](crate::ActorSystemBuilder::name)
    /// is not allowed.
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// This process has started as many systems as actor ids can tell
    /// apart; no more can be built.
    TooManySystems {
        /// How many systems one process can start.
        limit: usize,
    },
    /// The operating system refused a worker thread or the tokio runtime.
    Io(std::io::Error),
    /// [`ActorSystemBuilder::guardian_strategy`](crate::ActorSystemBuilder::guardian_strategy)
    /// was given a kind other than one-for-one.
    GuardianStrategy(crate::Strategy),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::InvalidName { name, reason } => write!(
                f,
                "invalid actor system name {name:?}: {reason}; use ASCII letters, digits, \
                 '-' and '_', starting with a letter or digit"
            ),
            BuildError::TooManySystems { limit } => write!(
                f,
                "this process has already started {limit} actor systems, the most actor ids \
                 can tell apart; reuse systems instead of building one per task"
            ),
            BuildError::Io(e) => write!(
                f,
                "the operating system refused a thread or runtime for the actor system ({e}); \
                 lower `worker_threads` or raise the OS thread limit"
            ),
            BuildError::GuardianStrategy(kind) => write!(
                f,
                "the guardian supervises top-level actors one-for-one only, not {kind:?}; \
                 spawn a supervisor actor with that strategy for actors that restart together"
            ),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for BuildError {
    fn from(e: std::io::Error) -> Self {
        BuildError::Io(e)
    }
}
