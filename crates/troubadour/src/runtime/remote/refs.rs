//! References inside messages (the `serde` feature): an `ActorRef<A>` or a
//! `Recipient<M>` in a message that travels is serialized as the node and
//! serial of its actor, and deserialized on the far side as a working
//! reference, a proxy back to the node it names, or the local actor when it
//! names the receiving node.
//!
//! Serde has no context argument, so the remote layer installs a
//! [`RefCodec`] for the current thread around each encode and decode
//! ([`with_ref_codec`]); serializing a reference without one is an error
//! that says so. The codec decides what a reference means on the wire: it
//! exports a local actor the first time its reference is serialized (lazy
//! export), and resolves a decoded one to a local actor or to a route.

use crate::api::actor::{Actor, Handler, Message};
use crate::api::actor_ref::{ActorRef, Recipient};
use crate::api::context::Context;
use crate::api::exit::ActorId;
use crate::runtime::envelope::Immediate;
use crate::runtime::remote::{proxy, Route};
use crate::runtime::system::SystemHandle;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

/// A reference as it travels: which node, which actor. The strings borrow
/// from the codec when encoding and from the frame when decoding, so a
/// reference costs no allocation either way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRef<'a> {
    /// The node's name.
    #[serde(borrow)]
    pub node: Cow<'a, str>,
    /// The node's incarnation.
    pub incarnation: u64,
    /// Where the node listens, if it does (`ip:port`).
    #[serde(borrow)]
    pub address: Option<Cow<'a, str>>,
    /// The actor's serial on that node.
    pub serial: u64,
}

/// What is being serialized: a reference to a local actor (to export) or
/// to a proxy (to name).
#[non_exhaustive]
pub enum RefTarget<'a> {
    /// An `ActorRef<A>`; `actor_type` is `TypeId::of::<A>()`, `actor` the
    /// `ActorRef<A>` itself.
    Actor {
        /// The actor.
        id: ActorId,
        /// `TypeId::of::<A>()`.
        actor_type: TypeId,
        /// `std::any::type_name::<A>()`, for errors.
        type_name: &'static str,
        /// The `ActorRef<A>`.
        actor: &'a (dyn Any + Send + Sync),
    },
    /// A `Recipient<M>`; `message_type` is `TypeId::of::<M>()`,
    /// `recipient` the `Recipient<M>` itself.
    Recipient {
        /// The actor.
        id: ActorId,
        /// `TypeId::of::<M>()`.
        message_type: TypeId,
        /// `std::any::type_name::<M>()`, for errors.
        type_name: &'static str,
        /// The `Recipient<M>`.
        recipient: &'a (dyn Any + Send + Sync),
    },
}

/// What a decoded reference stands for.
pub enum Resolved {
    /// An actor of this node: an `ActorRef<A>` or a `Recipient<M>` (boxed
    /// as `Any`); the wrong one of them is a decode error.
    Local(Box<dyn Any + Send + Sync>),
    /// An actor of another node, reached through `route`.
    Remote {
        /// The actor.
        id: ActorId,
        /// Where its messages go.
        route: Arc<dyn Route>,
    },
}

/// The remote layer's side of references in messages: the wire form of a
/// reference being sent (exporting a local actor the first time), and
/// what a received one stands for. Installed for the current thread by
/// [`with_ref_codec`] around each encode and decode; serde has no context
/// argument.
pub trait RefCodec: Send + Sync {
    /// The wire form of a reference about to be serialized.
    fn encode(&self, target: RefTarget<'_>) -> Result<WireRef<'_>, String>;

    /// What a decoded reference stands for. `want` is the `TypeId` of the
    /// `ActorRef<A>` or `Recipient<M>` being deserialized.
    fn decode(&self, wire: &WireRef<'_>, want: TypeId) -> Result<Resolved, String>;

    /// The system decoded proxies belong to.
    fn system(&self) -> &SystemHandle;

    /// A reference made earlier from the same `wire` as the same `want`
    /// (see [`remember`](Self::remember)), to hand out again instead of a
    /// new proxy: a reply-to reference that arrives in every message then
    /// costs a lookup, not a proxy. The default remembers nothing.
    fn known(&self, wire: &WireRef<'_>, want: TypeId) -> Option<Arc<dyn Any + Send + Sync>> {
        let _ = (wire, want);
        None
    }

    /// Offers the proxy just made for `wire` (an `ActorRef<A>` or a
    /// `Recipient<M>`, as `want` says) for [`known`](Self::known) to return
    /// later. A codec that caches should bound what it keeps and forget a
    /// node's proxies when the node is declared down.
    fn remember(&self, wire: &WireRef<'_>, want: TypeId, made: Arc<dyn Any + Send + Sync>) {
        let _ = (wire, want, made);
    }
}

thread_local! {
    static CODEC: RefCell<Option<Arc<dyn RefCodec>>> = const { RefCell::new(None) };
}

/// Runs `f` with `codec` as the current thread's [`RefCodec`]: every
/// `ActorRef` and `Recipient` serialized or deserialized inside uses it.
/// Nests: the previous codec is restored afterwards, also on unwind.
pub fn with_ref_codec<R>(codec: &Arc<dyn RefCodec>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn RefCodec>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CODEC.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(CODEC.with(|c| c.borrow_mut().replace(codec.clone())));
    f()
}

fn current<R>(f: impl FnOnce(Option<&dyn RefCodec>) -> R) -> R {
    // Cloned out, so that a codec may itself serialize (nested calls
    // borrow the cell again).
    let codec = CODEC.with(|c| c.borrow().clone());
    f(codec.as_deref())
}

const NO_CODEC: &str = "an ActorRef or Recipient can only be serialized or deserialized by the \
     remote layer (inside a message sent to another node)";

/// Serializes `target` in the wire form the current codec gives it (which
/// may borrow from the codec, hence inside `current`).
fn serialize_ref<S: Serializer>(s: S, target: RefTarget<'_>) -> Result<S::Ok, S::Error> {
    current(|codec| {
        let wire = codec
            .ok_or_else(|| NO_CODEC.to_string())
            .and_then(|codec| codec.encode(target))
            .map_err(S::Error::custom)?;
        wire.serialize(s)
    })
}

impl<A: Actor> Serialize for ActorRef<A> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_ref(
            s,
            RefTarget::Actor {
                id: self.id(),
                actor_type: TypeId::of::<A>(),
                type_name: std::any::type_name::<A>(),
                actor: self,
            },
        )
    }
}

/// Deserializes a reference of type `R` (an `ActorRef<A>` or a
/// `Recipient<M>`): the proxy the codec made earlier from the same wire
/// form, else what the codec resolves it to: the local reference, or a
/// proxy made by `make` and offered to the codec to keep.
fn deserialize_ref<'de, D, R>(
    d: D,
    not_local: impl FnOnce() -> String,
    make: impl FnOnce(&SystemHandle, ActorId, Arc<dyn Route>) -> R,
) -> Result<R, D::Error>
where
    D: Deserializer<'de>,
    R: Clone + Send + Sync + 'static,
{
    let wire = WireRef::deserialize(d)?;
    current(|codec| {
        let codec = codec.ok_or_else(|| NO_CODEC.to_string())?;
        let want = TypeId::of::<R>();
        if let Some(r) = codec
            .known(&wire, want)
            .and_then(|known| known.downcast_ref::<R>().cloned())
        {
            return Ok(r);
        }
        match codec.decode(&wire, want)? {
            Resolved::Local(any) => any.downcast::<R>().map(|b| *b).map_err(|_| not_local()),
            Resolved::Remote { id, route } => {
                let made = make(codec.system(), id, route);
                codec.remember(&wire, want, Arc::new(made.clone()));
                Ok(made)
            }
        }
    })
    .map_err(D::Error::custom)
}

impl<'de, A: Actor> Deserialize<'de> for ActorRef<A> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_ref(
            d,
            || {
                format!(
                    "the reference names an actor of this node that is not a {}",
                    std::any::type_name::<A>()
                )
            },
            |system, id, route| proxy::<A>(system, id, route),
        )
    }
}

impl<M: Message> Serialize for Recipient<M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_ref(
            s,
            RefTarget::Recipient {
                id: self.id(),
                message_type: TypeId::of::<M>(),
                type_name: std::any::type_name::<M>(),
                recipient: self,
            },
        )
    }
}

impl<'de, M: Message> Deserialize<'de> for Recipient<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_ref(
            d,
            || {
                format!(
                    "the reference names an actor of this node that does not take {}",
                    std::any::type_name::<M>()
                )
            },
            |system, id, route| {
                proxy::<RemoteRecipient<M>>(system, id, route).recipient::<M, Immediate>()
            },
        )
    }
}

/// The actor type behind the proxy of a decoded `Recipient<M>` of another
/// node: it "handles" `M` so that the proxy has a recipient; like every
/// proxy, it never runs.
pub struct RemoteRecipient<M>(PhantomData<fn() -> M>);

impl<M: Message> Actor for RemoteRecipient<M> {}

impl<M: Message> Handler<M> for RemoteRecipient<M> {
    fn handle(&mut self, _: M, _: &mut Context<Self>) -> M::Reply {
        unreachable!("a proxy's handlers never run: its messages go to its route")
    }
}
