//! What users implement: [`Actor`] (state and lifecycle hooks), [`Message`]
//! (a plain value with a typed reply), and one [`Handler`] or
//! [`AsyncHandler`] per message type.

use crate::api::context::Context;
use crate::api::exit::ExitReason;
use crate::api::supervision::SupervisorStrategy;
use std::future::Future;

/// A message: any `Send + 'static` value, with the type of its reply.
///
/// ```
/// use troubadour::Message;
/// struct Add(u64);
/// impl Message for Add { type Reply = (); }
/// ```
pub trait Message: Send + 'static {
    /// What `ask` returns. `()` for messages that are only told.
    type Reply: Send + 'static;
}

// The runtime's own messages are messages like any other; their impls live
// here so that `exit.rs` (identities and reasons) depends on nothing above
// it.
impl Message for crate::api::exit::Down {
    type Reply = ();
}

impl Message for crate::api::exit::Exited {
    type Reply = ();
}

/// An actor: state that is touched by one message at a time.
///
/// Every hook has a default that does nothing. Hooks run on the actor's own
/// turn, like handlers. The panic message of a panic in any of them becomes
/// [`ExitReason::Panicked`], and the panic is reported once, as a `tracing`
/// event, not as Rust's panic message (see
/// [`CrashReports`](crate::CrashReports)). What happens next depends on
/// where it panicked:
///
/// * in a handler, in [`started`](Actor::started) or
///   [`after_restart`](Actor::after_restart), in the factory that builds it
///   on a restart, or in [`supervisor_strategy`](Actor::supervisor_strategy):
///   the actor fails; it stops taking messages and its supervisor decides
///   (see [`SupervisorStrategy`]). Signals already sent to it (a stop, a
///   `wait_stopped`, a link) are still processed;
/// * in [`stopping`](Actor::stopping), [`stopped`](Actor::stopped) or the
///   actor's `Drop`: the stop goes on (children are stopped, the later hooks
///   run) and `Panicked` becomes the exit reason that links, monitors and
///   [`wait_stopped`](crate::ActorRef::wait_stopped) see, as a crash in
///   Erlang's `terminate` does;
/// * in [`before_restart`](Actor::before_restart): the restart goes on.
///
/// Lifecycle, in order:
/// 1. [`started`](Actor::started), before the first message and before any
///    signal: an actor stopped before its first turn still runs `started`
///    first, so the stop hooks never run without it (Erlang's `init`, Akka's
///    `preStart`);
/// 2. [`activate`](Actor::activate), if the actor has async work to finish
///    before its first message (loading or recovering its state): messages
///    wait in the mailbox until it completes;
/// 3. messages;
/// 4. on a restart decided by the supervisor:
///    [`before_restart`](Actor::before_restart) on the failed instance, which
///    is then dropped (its children are stopped first), a fresh instance is
///    built by the factory, and [`after_restart`](Actor::after_restart) runs
///    on it (by default it calls `started`), then `activate` again. The mailbox and the
///    [`ActorRef`](crate::ActorRef) survive a restart; the message being
///    handled when it failed is dropped (an `ask` for it fails with
///    [`AskError::NoReply`](crate::AskError::NoReply)). Under one-for-all
///    and rest-for-one the siblings restart too, one at a time: each
///    affected child runs `before_restart` and is dropped in reverse start
///    order, then each is rebuilt and runs `after_restart` in start order
///    (see [`supervision`](crate::api::supervision));
/// 5. on stop: [`stopping`](Actor::stopping) while children still run, then
///    children are stopped and awaited, then [`stopped`](Actor::stopped),
///    then the actor is dropped, queued messages go to dead letters, and
///    links, monitors and the parent are told the [`ExitReason`].
pub trait Actor: Sized + Send + 'static {
    /// Runs once before the first message.
    fn started(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// The actor is about to stop; its children are still running.
    fn stopping(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// The actor has stopped and its children are gone; it is dropped next.
    fn stopped(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// Runs on the failed instance before it is replaced. Its state may be
    /// inconsistent after a panic; release external resources here.
    fn before_restart(&mut self, reason: &ExitReason, ctx: &mut Context<Self>) {
        let _ = (reason, ctx);
    }

    /// Runs on the fresh instance after a restart. Calls `started` unless
    /// overridden.
    fn after_restart(&mut self, reason: &ExitReason, ctx: &mut Context<Self>) {
        let _ = reason;
        self.started(ctx);
    }

    /// How this actor supervises the children it spawns. Consulted each
    /// time a child fails. It reads the actor, so a failure that arrives
    /// while an [`AsyncHandler`] of this actor is suspended is decided when
    /// that handler has finished (as in kameo and ractor, whose actors
    /// await their handlers); a stop or restart of this actor in the
    /// meantime stops the children instead.
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::default()
    }

    /// Async work that must finish before the actor takes its first
    /// message: loading its state from a database, recovering it from a
    /// journal (OTP's `handle_continue` after `init`, Orleans'
    /// `OnActivateAsync`, kameo's and ractor's async start). Runs after
    /// [`started`](Actor::started), and after
    /// [`after_restart`](Actor::after_restart) on every restart, so a
    /// restarted actor loads its state again.
    ///
    /// Return `None` (the default) for nothing to do; that costs one
    /// branch. While the returned future is pending the actor is suspended
    /// as during an [`AsyncHandler`]: messages wait in the mailbox, in
    /// order; signals still act (a stop or kill drops the future). An
    /// `Err` ends the activation: [`ExitReason::Normal`] or
    /// [`ExitReason::Shutdown`] stop the actor, any other reason fails it
    /// and its supervisor decides, as after a panic.
    ///
    /// The future may borrow the actor but not the context; take what it
    /// needs from `ctx` ([`myself`](Context::myself),
    /// [`system`](Context::system)) before returning it.
    ///
    /// ```
    /// use troubadour::{Actor, ActorSystem, Context, ExitReason, Handler, Message};
    /// use std::future::Future;
    ///
    /// struct Profile { name: Option<String> }
    ///
    /// impl Actor for Profile {
    ///     fn activate(
    ///         &mut self,
    ///         _ctx: &mut Context<Self>,
    ///     ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
    ///         Some(async move {
    ///             // For example a database read.
    ///             tokio::task::yield_now().await;
    ///             self.name = Some("Ada".to_string());
    ///             Ok(())
    ///         })
    ///     }
    /// }
    ///
    /// struct Name;
    /// impl Message for Name { type Reply = String; }
    /// impl Handler<Name> for Profile {
    ///     fn handle(&mut self, _: Name, _: &mut Context<Self>) -> String {
    ///         self.name.clone().expect("loaded before the first message")
    ///     }
    /// }
    ///
    /// let system = ActorSystem::new();
    /// let profile = system.spawn(Profile { name: None }).unwrap();
    /// let name = system.block_on(profile.ask(Name)).unwrap();
    /// assert_eq!(name, "Ada");
    /// # system.shutdown(std::time::Duration::from_secs(5)).unwrap();
    /// ```
    fn activate(
        &mut self,
        ctx: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_, Self>> {
        let _ = ctx;
        None::<std::future::Ready<Result<(), ExitReason>>>
    }
}

/// Handles one message type synchronously: the reply is the return value.
/// This is the zero-overhead path: no future, no allocation beyond the
/// message itself.
///
/// ```
/// use troubadour::prelude::*;
/// struct Counter { total: u64 }
/// impl Actor for Counter {}
/// struct Add(u64);
/// impl Message for Add { type Reply = (); }
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) { self.total += n; }
/// }
/// ```
pub trait Handler<M: Message>: Actor {
    /// Handles `msg`; the return value is the reply to an `ask`.
    fn handle(&mut self, msg: M, ctx: &mut Context<Self>) -> M::Reply;
}

/// Handles one message type with an `async fn`, for handlers that await
/// tokio I/O, timers or other actors' replies.
///
/// While the future is pending the actor takes no other user message (one
/// message at a time holds across awaits), but its worker thread runs other
/// actors, and control signals (stop, kill, a restart by its supervisor)
/// still act at once: stopping drops the pending future. Only what must
/// read the actor waits for the future to finish: the decision on a
/// failed child ([`Actor::supervisor_strategy`]).
///
/// ```
/// use troubadour::prelude::*;
/// use std::time::Duration;
/// struct Slow;
/// impl Actor for Slow {}
/// struct Ping;
/// impl Message for Ping { type Reply = &'static str; }
/// impl AsyncHandler<Ping> for Slow {
///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
///         tokio::time::sleep(Duration::from_millis(1)).await;
///         "pong"
///     }
/// }
/// ```
pub trait AsyncHandler<M: Message>: Actor {
    /// Handles `msg`; the output is the reply to an `ask`.
    fn handle(&mut self, msg: M, ctx: &mut Context<Self>) -> impl Future<Output = M::Reply> + Send;
}
