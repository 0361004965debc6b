//! Entities (virtual actors): the [`Entity`] trait a kind implements, the
//! messages it lists, and the envelope an entity message travels in from
//! the sender's region to the region of its shard's owner.
//!
//! The envelope ([`Routed`]) is one remote message type for every entity
//! message. Its body is the user's message itself, serialized by the
//! remote layer's serializer in the same pass as the envelope (through
//! `erased-serde`), so references inside it travel as in any remote
//! message, and decoded on the far side by the message's registered name,
//! straight into its type. A name no kind on the node listed does not
//! decode: only registered types are ever decoded.

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use troubadour::{Actor, ActorRef, AskError, Handles, Message, SendError};
use troubadour_remote::RemoteMessage;

/// A kind of virtual actor: an ordinary actor with a kind name and the
/// messages it takes from the cluster. One exists per id in the whole
/// cluster, made by the factory registered for its kind on the node that
/// owns the id's shard, on its first message.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour::prelude::*;
/// use troubadour_cluster::{Entity, EntityMessages};
/// use troubadour_remote::RemoteMessage;
///
/// #[derive(Serialize, Deserialize)]
/// struct Add(u64);
/// impl Message for Add { type Reply = u64; }
/// impl RemoteMessage for Add { const NAME: &'static str = "doc.Add"; }
///
/// struct Counter(u64);
/// impl Actor for Counter {}
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
/// }
/// impl Entity for Counter {
///     const KIND: &'static str = "counter";
///     fn messages(m: &mut EntityMessages<Self>) { m.handle::<Add>(); }
/// }
/// ```
pub trait Entity: Actor + Sized {
    /// The kind's name, the same on every node.
    const KIND: &'static str;

    /// Lists the messages the kind takes (each a
    /// [`RemoteMessage`], since its owner may be another node).
    fn messages(messages: &mut EntityMessages<Self>);
}

/// The messages of an entity kind, as [`Entity::messages`] lists them.
pub struct EntityMessages<A> {
    pub(crate) deliver: BTreeMap<&'static str, Deliverers>,
    pub(crate) errors: Vec<String>,
    _kind: PhantomData<fn() -> A>,
}

impl<A: Entity> EntityMessages<A> {
    pub(crate) fn collect() -> EntityMessages<A> {
        let mut messages = EntityMessages {
            deliver: BTreeMap::new(),
            errors: Vec::new(),
            _kind: PhantomData,
        };
        A::messages(&mut messages);
        messages
    }

    /// The kind handles `M` (with a [`Handler`](troubadour::Handler)).
    pub fn handle<M: RemoteMessage>(&mut self) -> &mut Self
    where
        A: Handles<M, troubadour::Immediate>,
    {
        self.add::<M, troubadour::Immediate>()
    }

    /// The kind handles `M` with an
    /// [`AsyncHandler`](troubadour::AsyncHandler).
    pub fn handle_async<M: RemoteMessage>(&mut self) -> &mut Self
    where
        A: Handles<M, troubadour::Awaiting>,
    {
        self.add::<M, troubadour::Awaiting>()
    }

    fn add<M: RemoteMessage, K: 'static>(&mut self) -> &mut Self
    where
        A: Handles<M, K>,
    {
        if let Err(e) = register_message::<M>() {
            self.errors.push(e);
        }
        self.deliver.insert(
            M::NAME,
            Deliverers {
                tell: tell_entity::<A, M, K>,
                ask: ask_entity::<A, M, K>,
            },
        );
        self
    }
}

/// An entity's reference, with its type erased (an `ActorRef<A>`).
pub(crate) type AnyEntity = Box<dyn EntityControl>;

/// What the region does to an entity without knowing its kind.
pub(crate) trait EntityControl: Send + Sync {
    fn as_any(&self) -> &(dyn Any + Send + Sync);
    /// Stops it after the messages it already has (a passivation or a
    /// handoff: nothing handed to it is dropped).
    fn stop_after_queued(&self);
    /// Stops it after its current message (its shard is no longer this
    /// node's: nothing more may run here).
    fn stop_now(&self);
    /// Resolves once it has stopped.
    fn stopped(&self) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// Whether it still runs.
    fn is_alive(&self) -> bool;
}

impl<A: Actor> EntityControl for ActorRef<A> {
    fn as_any(&self) -> &(dyn Any + Send + Sync) {
        self
    }

    fn stop_after_queued(&self) {
        self.stop_gracefully();
    }

    fn stop_now(&self) {
        self.stop();
    }

    fn stopped(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let stopped = self.wait_stopped();
        Box::pin(async move {
            stopped.await;
        })
    }

    fn is_alive(&self) -> bool {
        ActorRef::is_alive(self)
    }
}

/// How long a region waits on an entity's (or another region's) answer
/// before giving up on it: far beyond any asker's own timeout, which is
/// what ends an ask for the asker.
pub(crate) const ENTITY_ASK_LIMIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The answer to an ask, on its way back from the entity.
pub(crate) type AnswerFuture =
    Pin<Box<dyn Future<Output = Result<Box<dyn Any + Send>, AskError>> + Send>>;

/// How a body reaches an entity of one kind, per message type.
#[derive(Clone, Copy)]
pub(crate) struct Deliverers {
    pub tell: fn(&AnyEntity, Box<dyn Any + Send>) -> Result<(), Undelivered>,
    pub ask: fn(&AnyEntity, Box<dyn Any + Send>) -> Result<AnswerFuture, Undelivered>,
}

/// Why a body did not reach its entity.
pub(crate) enum Undelivered {
    /// The entity has stopped (it stopped itself): the body comes back, to
    /// go to the entity's next activation.
    Stopped(Box<dyn Any + Send>),
    /// Its bounded mailbox is full.
    Full,
}

fn entity_of<A: Entity>(entity: &AnyEntity) -> &ActorRef<A> {
    entity
        .as_any()
        .downcast_ref::<ActorRef<A>>()
        .expect("a kind's deliverers are only called with that kind's entities")
}

fn body_of<M: 'static>(body: Box<dyn Any + Send>) -> M {
    *body
        .downcast::<M>()
        .expect("a body is only delivered under its own message's name")
}

fn tell_entity<A, M: RemoteMessage, K: 'static>(
    entity: &AnyEntity,
    body: Box<dyn Any + Send>,
) -> Result<(), Undelivered>
where
    A: Entity + Handles<M, K>,
{
    match entity_of::<A>(entity).tell(body_of::<M>(body)) {
        Ok(()) => Ok(()),
        Err(SendError::Full(_)) => Err(Undelivered::Full),
        Err(e) => Err(Undelivered::Stopped(Box::new(e.into_message()))),
    }
}

fn ask_entity<A, M: RemoteMessage, K: 'static>(
    entity: &AnyEntity,
    body: Box<dyn Any + Send>,
) -> Result<AnswerFuture, Undelivered>
where
    A: Entity + Handles<M, K>,
{
    let entity = entity_of::<A>(entity);
    if !entity.is_alive() {
        return Err(Undelivered::Stopped(body));
    }
    // The asker's own timeout governs (it waits on the region's answer);
    // this one only bounds what an entity that never answers holds here
    // (and replaces the core's default of a few seconds).
    let asked = entity.ask(body_of::<M>(body)).timeout(ENTITY_ASK_LIMIT);
    Ok(Box::pin(async move {
        asked
            .await
            .map(|reply| Box::new(reply) as Box<dyn Any + Send>)
    }))
}

// ---- the registry of entity messages ---------------------------------------

/// Decodes a body or a reply into its type, boxed.
type DecodeFn =
    fn(&mut dyn erased_serde::Deserializer<'_>) -> Result<Box<dyn Any + Send>, erased_serde::Error>;

/// How one entity message type is encoded and decoded inside the envelope.
pub(crate) struct MessageCodec {
    pub name: &'static str,
    type_id: TypeId,
    decode_body: DecodeFn,
    body: fn(&(dyn Any + Send)) -> Option<&dyn erased_serde::Serialize>,
    decode_reply: DecodeFn,
    reply: fn(&(dyn Any + Send)) -> Option<&dyn erased_serde::Serialize>,
}

/// Read on every entity message sent and received, written once per
/// type: a concurrent map, so readers on every thread take no lock (a
/// shared lock's counter was a cache line every sender wrote).
/// Hashed with foldhash: the keys are names registered by this process's
/// own code, so a name from the network can only miss, never crowd them.
static CODECS: LazyLock<
    papaya::HashMap<&'static str, &'static MessageCodec, foldhash::fast::RandomState>,
> = LazyLock::new(Default::default);
/// Registration is rare; one at a time keeps "a second type under the same
/// name is refused" exact.
static REGISTERING: Mutex<()> = Mutex::new(());

/// Enters `M` in the process-wide registry (once per type); a second type
/// under the same name is refused.
fn register_message<M: RemoteMessage>() -> Result<(), String> {
    let _one_at_a_time = REGISTERING.lock().unwrap_or_else(|p| p.into_inner());
    let codecs = CODECS.pin();
    match codecs.get(M::NAME) {
        Some(c) if c.type_id == TypeId::of::<M>() => Ok(()),
        Some(_) => Err(format!(
            "two entity message types are named {:?}; give one of them another name",
            M::NAME
        )),
        None => {
            codecs.insert(
                M::NAME,
                Box::leak(Box::new(MessageCodec {
                    name: M::NAME,
                    type_id: TypeId::of::<M>(),
                    decode_body: |d| Ok(Box::new(erased_serde::deserialize::<M>(d)?)),
                    body: |b| {
                        b.downcast_ref::<M>()
                            .map(|m| m as &dyn erased_serde::Serialize)
                    },
                    decode_reply: |d| Ok(Box::new(erased_serde::deserialize::<M::Reply>(d)?)),
                    reply: |r| {
                        r.downcast_ref::<M::Reply>()
                            .map(|m| m as &dyn erased_serde::Serialize)
                    },
                })),
            );
            Ok(())
        }
    }
}

/// Every entity kind registered in this process, so that a received
/// envelope names its kind without allocating (unknown kinds keep their
/// name, for the error).
static KINDS: LazyLock<papaya::HashSet<&'static str, foldhash::fast::RandomState>> =
    LazyLock::new(Default::default);

pub(crate) fn register_kind(kind: &'static str) {
    KINDS.pin().insert(kind);
}

fn kind_named(name: &str) -> Cow<'static, str> {
    match KINDS.pin().get(name) {
        Some(kind) => Cow::Borrowed(*kind),
        None => Cow::Owned(name.to_owned()),
    }
}

/// The codec of the entity message named `name`, if one is registered.
pub(crate) fn codec_of<M: RemoteMessage>() -> Option<&'static MessageCodec> {
    codec_named(M::NAME).filter(|c| c.type_id == TypeId::of::<M>())
}

fn codec_named(name: &str) -> Option<&'static MessageCodec> {
    CODECS.pin().get(name).copied()
}

/// A marker that travels a shard's stream of messages like any of them
/// and is answered where the shard is hosted: once answered, everything a
/// region sent for the shard before it has reached the shard's entities.
/// A region sends one down the old path before it sends anything down a
/// new one (a shard moved), so each sender's messages keep their order.
#[derive(Serialize, Deserialize)]
pub(crate) struct Flush;

impl Message for Flush {
    type Reply = ();
}

impl RemoteMessage for Flush {
    const NAME: &'static str = "troubadour.cluster.Flush";
}

/// The flush marker's codec (registered on first use).
pub(crate) fn flush_codec() -> &'static MessageCodec {
    register_message::<Flush>().expect("the cluster's own name is taken by no user type");
    codec_of::<Flush>().expect("registered above")
}

/// A node that left the store tells every member's region so: the member
/// stops using it as a path and answers with [`Departed`], down the same
/// path as everything it sent there before.
#[derive(Serialize, Deserialize)]
pub(crate) struct Departing {
    pub name: String,
    pub incarnation: u64,
}

impl Message for Departing {
    type Reply = ();
}

impl RemoteMessage for Departing {
    const NAME: &'static str = "troubadour.cluster.Departing";
}

/// A member's answer to [`Departing`]: it sends the departing node nothing
/// more, and everything it sent before has arrived (one path, in order).
#[derive(Serialize, Deserialize)]
pub(crate) struct Departed {
    pub name: String,
    pub incarnation: u64,
}

impl Message for Departed {
    type Reply = ();
}

impl RemoteMessage for Departed {
    const NAME: &'static str = "troubadour.cluster.Departed";
}

/// The codecs of the departure's markers (registered on first use).
pub(crate) fn departure_codecs() -> (&'static MessageCodec, &'static MessageCodec) {
    register_message::<Departing>().expect("the cluster's own name is taken by no user type");
    register_message::<Departed>().expect("the cluster's own name is taken by no user type");
    (
        codec_of::<Departing>().expect("registered above"),
        codec_of::<Departed>().expect("registered above"),
    )
}

// ---- the envelope -----------------------------------------------------------

/// An entity message on its way to the region of its shard's owner.
pub(crate) struct Routed {
    /// Borrowed for every kind registered here: no allocation per message.
    pub kind: Cow<'static, str>,
    /// Shared with the [`EntityRef`](crate::EntityRef) it was sent from
    /// and with the entity's key where it is hosted.
    pub id: Arc<str>,
    pub codec: &'static MessageCodec,
    pub body: Box<dyn Any + Send>,
    /// The incarnation of the node that sent it to this one (its region
    /// forwarding it, or an entity reference's shortcut); on the node it
    /// was made on, that node's. A region moving the shard lets what comes
    /// from its old path's node go on unheld (`region.rs`, `route_at`).
    pub from: u64,
}

impl Message for Routed {
    type Reply = Answer;
}

impl RemoteMessage for Routed {
    const NAME: &'static str = "troubadour.cluster.Routed";
}

/// A body, serialized through its codec.
struct ErasedBody<'a>(&'a dyn erased_serde::Serialize);

impl Serialize for ErasedBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        erased_serde::serialize(self.0, s)
    }
}

impl Serialize for Routed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let body = (self.codec.body)(&*self.body)
            .ok_or_else(|| serde::ser::Error::custom("the body is not its codec's type"))?;
        let mut t = s.serialize_tuple(5)?;
        t.serialize_element(&*self.kind)?;
        t.serialize_element(&*self.id)?;
        t.serialize_element(self.codec.name)?;
        t.serialize_element(&ErasedBody(body))?;
        t.serialize_element(&self.from)?;
        t.end()
    }
}

/// Decodes a body (or a reply) with a codec's function.
struct BodySeed(DecodeFn);

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = Box<dyn Any + Send>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let mut erased = <dyn erased_serde::Deserializer<'_>>::erase(d);
        (self.0)(&mut erased).map_err(de::Error::custom)
    }
}

/// The next element, a string, made into what `make` returns without an
/// owned copy first (the decoder lends it from the frame).
pub(crate) fn next_str<'de, T, A: SeqAccess<'de>>(
    seq: &mut A,
    what: &str,
    make: impl FnOnce(&str) -> T,
) -> Result<T, A::Error> {
    struct StrSeed<F>(F);
    impl<'de, T, F: FnOnce(&str) -> T> DeserializeSeed<'de> for StrSeed<F> {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl<'de, T, F: FnOnce(&str) -> T> Visitor<'de> for StrSeed<F> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
            Ok((self.0)(s))
        }
    }
    seq.next_element_seed(StrSeed(make))?
        .ok_or_else(|| de::Error::custom(format!("the envelope ended before its {what}")))
}

pub(crate) fn next<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    seq: &mut A,
    what: &str,
) -> Result<T, A::Error> {
    seq.next_element()?
        .ok_or_else(|| de::Error::custom(format!("the envelope ended before its {what}")))
}

impl<'de> Deserialize<'de> for Routed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RoutedVisitor;
        impl<'de> Visitor<'de> for RoutedVisitor {
            type Value = Routed;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an entity message's envelope")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Routed, A::Error> {
                let kind = next_str(&mut seq, "kind", kind_named)?;
                let id = next_str(&mut seq, "id", |id: &str| Arc::<str>::from(id))?;
                let codec = next_str(&mut seq, "message name", |name: &str| {
                    codec_named(name).ok_or_else(|| name.to_owned())
                })?
                .map_err(|name| {
                    de::Error::custom(format!(
                        "no entity kind on this node takes a message named {name:?}"
                    ))
                })?;
                let body = seq
                    .next_element_seed(BodySeed(codec.decode_body))?
                    .ok_or_else(|| de::Error::custom("the envelope ended before its body"))?;
                let from = next(&mut seq, "sender's incarnation")?;
                Ok(Routed {
                    kind,
                    id,
                    codec,
                    body,
                    from,
                })
            }
        }
        d.deserialize_tuple(5, RoutedVisitor)
    }
}

/// The answer to a routed ask: the entity's reply, or why there is none.
pub(crate) struct Answer(pub Result<Reply, WireAskError>);

/// An entity's reply, serialized through its message's codec.
pub(crate) struct Reply {
    pub codec: &'static MessageCodec,
    pub body: Box<dyn Any + Send>,
}

/// Why a routed ask got no reply, as it travels back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireAskError {
    /// The entity stopped or failed before replying.
    NoReply,
    /// The entity's mailbox was full.
    Full,
    /// The kind is not known on the owning node.
    UnknownKind(String),
    /// The entity could not be made (its factory panicked or the system is
    /// stopping).
    NotActivated(String),
    /// The owner could not be reached, or lost its shard before answering.
    Unreachable(String),
    /// The connection to the owner was lost before the answer came: the
    /// message may or may not have been handled.
    ConnectionLost,
    /// Anything else the ask ended with, as text.
    Other(String),
}

impl From<WireAskError> for AskError {
    fn from(e: WireAskError) -> AskError {
        match e {
            WireAskError::NoReply => AskError::NoReply,
            WireAskError::Full => AskError::Full,
            WireAskError::UnknownKind(kind) => AskError::Refused(format!(
                "no node of the cluster can make an entity of kind {kind:?}: register it on every node"
            )),
            WireAskError::NotActivated(why) => {
                AskError::Refused(format!("the entity could not be activated: {why}"))
            }
            WireAskError::Unreachable(why) => AskError::Refused(format!(
                "the entity's owner could not be reached: {why}"
            )),
            WireAskError::ConnectionLost => AskError::ConnectionLost,
            WireAskError::Other(why) => AskError::Refused(why),
        }
    }
}

impl From<AskError> for WireAskError {
    fn from(e: AskError) -> WireAskError {
        match e {
            AskError::NoReply | AskError::Stopped => WireAskError::NoReply,
            AskError::Full => WireAskError::Full,
            AskError::ConnectionLost => WireAskError::ConnectionLost,
            other => WireAskError::Other(other.to_string()),
        }
    }
}

impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(2)?;
        match &self.0 {
            Ok(reply) => {
                let body = (reply.codec.reply)(&*reply.body).ok_or_else(|| {
                    serde::ser::Error::custom("the reply is not its codec's reply type")
                })?;
                t.serialize_element(reply.codec.name)?;
                t.serialize_element(&ErasedBody(body))?;
            }
            Err(e) => {
                t.serialize_element("")?;
                t.serialize_element(e)?;
            }
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnswerVisitor;
        impl<'de> Visitor<'de> for AnswerVisitor {
            type Value = Answer;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an entity's answer")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Answer, A::Error> {
                let codec = next_str(&mut seq, "message name", |name: &str| {
                    if name.is_empty() {
                        Ok(None)
                    } else {
                        codec_named(name).map(Some).ok_or_else(|| name.to_owned())
                    }
                })?
                .map_err(|name| {
                    de::Error::custom(format!("an answer to an unknown message {name:?}"))
                })?;
                let Some(codec) = codec else {
                    return Ok(Answer(Err(next(&mut seq, "error")?)));
                };
                let body = seq
                    .next_element_seed(BodySeed(codec.decode_reply))?
                    .ok_or_else(|| de::Error::custom("the answer ended before its body"))?;
                Ok(Answer(Ok(Reply { codec, body })))
            }
        }
        d.deserialize_tuple(2, AnswerVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Move {
        x: i32,
        y: i32,
    }
    impl Message for Move {
        type Reply = Vec<String>;
    }
    impl RemoteMessage for Move {
        const NAME: &'static str = "entity-test.Move";
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Other;
    impl Message for Other {
        type Reply = ();
    }
    impl RemoteMessage for Other {
        const NAME: &'static str = "entity-test.Move";
    }

    #[test]
    fn an_envelope_round_trips_with_its_body_decoded_into_the_message_type() {
        register_message::<Move>().unwrap();
        let sent = Routed {
            kind: "vehicle".into(),
            id: "0012.01214".into(),
            codec: codec_of::<Move>().unwrap(),
            body: Box::new(Move { x: 3, y: -4 }),
            from: 7,
        };
        let bytes = postcard::to_allocvec(&sent).unwrap();
        let got: Routed = postcard::from_bytes(&bytes).unwrap();
        assert_eq!((&*got.kind, &*got.id), ("vehicle", "0012.01214"));
        assert_eq!(got.codec.name, Move::NAME);
        assert_eq!(got.from, 7);
        assert_eq!(*got.body.downcast::<Move>().unwrap(), Move { x: 3, y: -4 });
    }

    #[test]
    fn an_answer_round_trips_with_its_reply_or_its_error() {
        register_message::<Move>().unwrap();
        let codec = codec_of::<Move>().unwrap();
        let reply = Answer(Ok(Reply {
            codec,
            body: Box::new(vec!["a".to_string()]),
        }));
        let got: Answer = postcard::from_bytes(&postcard::to_allocvec(&reply).unwrap()).unwrap();
        let body = got.0.unwrap().body.downcast::<Vec<String>>().unwrap();
        assert_eq!(*body, ["a"]);
        let failed = Answer(Err(WireAskError::UnknownKind("bus".into())));
        let got: Answer = postcard::from_bytes(&postcard::to_allocvec(&failed).unwrap()).unwrap();
        assert_eq!(got.0.err(), Some(WireAskError::UnknownKind("bus".into())));
    }

    #[test]
    fn an_unregistered_message_name_does_not_decode() {
        #[derive(Serialize)]
        struct Forged(&'static str, &'static str, &'static str, u8);
        let bytes = postcard::to_allocvec(&Forged("vehicle", "1", "nobody.Registered", 0)).unwrap();
        let e = postcard::from_bytes::<Routed>(&bytes).err().unwrap();
        assert!(matches!(e, postcard::Error::SerdeDeCustom), "{e:?}");
    }

    #[test]
    fn two_types_under_one_name_are_refused() {
        register_message::<Move>().unwrap();
        let e = register_message::<Other>().unwrap_err();
        assert!(e.contains("another name"), "{e}");
        assert!(codec_of::<Other>().is_none());
    }
}
