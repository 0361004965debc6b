//! Function actors: a closure and its state, spawned as an actor, for the
//! many small actors that do not deserve a struct and two impl blocks
//! (CAF's `spawn(fun)`, Akka Typed's `Behaviors.receive`).
//!
//! A function actor is an ordinary actor underneath ([`FnActor`] implements
//! [`Actor`] and [`Handler`]), so everything that holds for actors holds
//! for it: one message at a time, its [`ActorRef`] for `tell`, `ask`,
//! `stop` and `wait_stopped`, supervision, children, timers. Nothing about
//! it touches the runtime: the closure is called from an ordinary handler,
//! through one pointer.

use crate::api::actor::{Actor, Handler, Message};
use crate::api::actor_ref::ActorRef;
use crate::api::context::Context;
use crate::api::error::SpawnError;
use crate::runtime::spawn::SpawnOptions;
use crate::runtime::system::SystemHandle;
use std::sync::Arc;

/// The behaviour of a function actor: called with its state, the message
/// and its context; returns the reply.
type Behaviour<S, M> =
    Arc<dyn Fn(&mut S, M, &mut Context<FnActor<S, M>>) -> <M as Message>::Reply + Send + Sync>;

/// The actor behind a function actor: a state `S` and a closure that
/// handles messages of one type `M` (use an enum for several kinds).
/// Spawned by [`SystemHandle::spawn_fn`] or [`Context::spawn_fn`]; its
/// reference is an [`ActorRef<FnActor<S, M>>`](ActorRef).
///
/// It has the default lifecycle hooks and supervises its own children with
/// the default [`SupervisorStrategy`](crate::SupervisorStrategy); an actor
/// that needs its own hooks or strategy is better written as a struct.
///
/// Unlike Akka Typed's `Behaviors.receive`, whose handler returns the
/// behaviour for the next message, the closure stays the same and the state
/// changes in place: an actor that moves between behaviours keeps an enum
/// in its state and matches on it.
pub struct FnActor<S: Send + 'static, M: Message> {
    state: S,
    behaviour: Behaviour<S, M>,
}

impl<S: Send + 'static, M: Message> Actor for FnActor<S, M> {}

impl<S: Send + 'static, M: Message> Handler<M> for FnActor<S, M> {
    fn handle(&mut self, msg: M, ctx: &mut Context<Self>) -> M::Reply {
        (self.behaviour)(&mut self.state, msg, ctx)
    }
}

/// A factory of fresh instances: the initial state, cloned, with the
/// shared closure. This is what a restart rebuilds from.
fn factory<S, M>(initial: S, behaviour: Behaviour<S, M>) -> impl FnMut() -> FnActor<S, M> + Send
where
    S: Clone + Send + 'static,
    M: Message,
{
    move || FnActor {
        state: initial.clone(),
        behaviour: behaviour.clone(),
    }
}

impl SystemHandle {
    /// Spawns a top-level function actor: `behaviour` is called for each
    /// message with the actor's state (starting as `initial`), the message
    /// and the actor's [`Context`]; what it returns is the reply to an
    /// `ask`.
    ///
    /// A panic in `behaviour` fails the actor like a panic in any handler.
    /// The actor is restartable: a restart starts again from a clone of
    /// `initial` (hence `S: Clone`), with the
    /// [`Restart`](crate::Restart) policy of a factory spawn (`Transient`
    /// unless [`spawn_fn_with_options`](Self::spawn_fn_with_options) says
    /// otherwise).
    ///
    /// ```
    /// use troubadour::prelude::*;
    /// use std::time::Duration;
    ///
    /// enum Counter { Add(u64), Get }
    /// impl Message for Counter { type Reply = u64; }
    ///
    /// let system = ActorSystem::new();
    /// let counter = system.spawn_fn(0u64, |total, msg: Counter, _ctx| {
    ///     if let Counter::Add(n) = msg { *total += n }
    ///     *total
    /// })?;
    /// counter.tell(Counter::Add(2))?;
    /// let total = counter.ask(Counter::Get).timeout(Duration::from_secs(1)).wait()?;
    /// assert_eq!(total, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_fn<S, M, F>(
        &self,
        initial: S,
        behaviour: F,
    ) -> Result<ActorRef<FnActor<S, M>>, SpawnError>
    where
        S: Clone + Send + 'static,
        M: Message,
        F: Fn(&mut S, M, &mut Context<FnActor<S, M>>) -> M::Reply + Send + Sync + 'static,
    {
        self.spawn_fn_with_options(SpawnOptions::new(), initial, behaviour)
    }

    /// [`spawn_fn`](Self::spawn_fn) with options (name, mailbox, restart
    /// policy, own thread).
    pub fn spawn_fn_with_options<S, M, F>(
        &self,
        options: SpawnOptions,
        initial: S,
        behaviour: F,
    ) -> Result<ActorRef<FnActor<S, M>>, SpawnError>
    where
        S: Clone + Send + 'static,
        M: Message,
        F: Fn(&mut S, M, &mut Context<FnActor<S, M>>) -> M::Reply + Send + Sync + 'static,
    {
        self.spawn_factory_with_options(options, factory(initial, Arc::new(behaviour)))
    }
}

impl<A: Actor> Context<A> {
    /// Spawns a function actor as a child of this actor, supervised by it
    /// like any child (see [`SystemHandle::spawn_fn`] for the rest).
    ///
    /// ```
    /// use troubadour::prelude::*;
    /// use std::time::Duration;
    ///
    /// struct Double(u64);
    /// impl Message for Double { type Reply = u64; }
    ///
    /// // A function actor that starts helpers, function actors too.
    /// struct NewHelper;
    /// impl Message for NewHelper { type Reply = ActorRef<FnActor<(), Double>>; }
    ///
    /// let system = ActorSystem::new();
    /// let parent = system.spawn_fn((), |_, _: NewHelper, ctx| {
    ///     ctx.spawn_fn((), |_, Double(n): Double, _| n * 2).expect("the parent is running")
    /// })?;
    /// let helper = parent.ask(NewHelper).timeout(Duration::from_secs(1)).wait()?;
    /// assert_eq!(helper.ask(Double(21)).timeout(Duration::from_secs(1)).wait()?, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_fn<S, M, F>(
        &mut self,
        initial: S,
        behaviour: F,
    ) -> Result<ActorRef<FnActor<S, M>>, SpawnError>
    where
        S: Clone + Send + 'static,
        M: Message,
        F: Fn(&mut S, M, &mut Context<FnActor<S, M>>) -> M::Reply + Send + Sync + 'static,
    {
        self.spawn_fn_with_options(SpawnOptions::new(), initial, behaviour)
    }

    /// [`spawn_fn`](Self::spawn_fn) with options.
    pub fn spawn_fn_with_options<S, M, F>(
        &mut self,
        options: SpawnOptions,
        initial: S,
        behaviour: F,
    ) -> Result<ActorRef<FnActor<S, M>>, SpawnError>
    where
        S: Clone + Send + 'static,
        M: Message,
        F: Fn(&mut S, M, &mut Context<FnActor<S, M>>) -> M::Reply + Send + Sync + 'static,
    {
        self.spawn_factory_with_options(options, factory(initial, Arc::new(behaviour)))
    }
}
