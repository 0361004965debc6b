//! Which messages may cross the network, and which actors may be reached:
//! [`RemoteMessage`] (a message with a stable name, serde on both the
//! message and its reply) and [`RemoteActor`] (an actor type with a stable
//! name and the list of remote messages it accepts).
//!
//! Both are allow-lists: a node encodes only registered message types, and
//! decodes a frame only as one of the types the receiving actor's
//! [`RemoteActor::accepts`] lists; anything else is dead-lettered with its
//! reason and the connection stays up.

use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use troubadour::remote::{Outgoing, Refusal};
use troubadour::{Actor, ActorRef, AskError, Awaiting, Handles, Immediate, Message, SendError};

use crate::codec::{decode_payload, serialize_into, type_id, DecodeError};
use crate::frame::{encode_frame_with, Header, Kind, Lane, Limits};

/// A message that can travel to another node: serde for the message and
/// its reply, and a stable name that both nodes agree on. The name, not
/// the Rust path, identifies the type on the wire, so keep it when the type
/// is renamed or moved.
///
/// Derive it (feature `macros`, on by default): one attribute gives the
/// reply type and the name, and implements [`Message`] too.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour_remote::RemoteMessage;
///
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(reply = u64, remote = "counter.Add")]
/// struct Add(u64);
/// ```
///
/// which is, by hand:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour::Message;
/// use troubadour_remote::RemoteMessage;
///
/// #[derive(Serialize, Deserialize)]
/// struct Add(u64);
/// impl Message for Add { type Reply = u64; }
/// impl RemoteMessage for Add { const NAME: &'static str = "counter.Add"; }
/// ```
pub trait RemoteMessage:
    Message<Reply: Serialize + DeserializeOwned> + Serialize + DeserializeOwned
{
    /// The stable name (any string; a dotted path is the convention).
    /// Names starting with `troubadour.system.` are reserved.
    const NAME: &'static str;
}

/// An actor type that can be reached from other nodes: a stable name
/// (checked by [`Remote::lookup`](crate::Remote::lookup), so a lookup of
/// the wrong type fails instead of misrouting), and the remote messages it
/// accepts.
///
/// Derive it (feature `macros`, on by default), listing in `handle` the
/// messages it has a [`Handler`](troubadour::Handler) for and in
/// `handle_async` those it has an
/// [`AsyncHandler`](troubadour::AsyncHandler) for:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour::prelude::*;
/// use troubadour_remote::{RemoteActor, RemoteMessage};
///
/// #[derive(RemoteActor)]
/// #[remote(name = "counter.Counter", handle(Add))]
/// struct Counter(u64);
/// impl Actor for Counter {}
///
/// #[derive(Serialize, Deserialize, RemoteMessage)]
/// #[message(reply = u64, remote = "counter.Add")]
/// struct Add(u64);
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
/// }
/// ```
///
/// which is, by hand:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour::prelude::*;
/// use troubadour_remote::{Accepts, RemoteActor, RemoteMessage};
///
/// struct Counter(u64);
/// impl Actor for Counter {}
///
/// #[derive(Serialize, Deserialize)]
/// struct Add(u64);
/// impl Message for Add { type Reply = u64; }
/// impl RemoteMessage for Add { const NAME: &'static str = "counter.Add"; }
/// impl Handler<Add> for Counter {
///     fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 { self.0 += n; self.0 }
/// }
///
/// impl RemoteActor for Counter {
///     const NAME: &'static str = "counter.Counter";
///     fn accepts(accepts: &mut Accepts<Self>) {
///         accepts.handle::<Add>();
///     }
/// }
/// ```
pub trait RemoteActor: Actor {
    /// The stable name of the actor type.
    const NAME: &'static str;

    /// Lists the remote messages this actor accepts from other nodes.
    fn accepts(accepts: &mut Accepts<Self>);
}

/// Delivers one decoded frame to a local actor: decode, then `tell` or
/// `ask`. Monomorphized per (actor, message) by [`Accepts`].
pub(crate) type DeliverFn = fn(
    actor: &(dyn Any + Send + Sync),
    payload: &[u8],
    max_depth: usize,
    ask: Option<Asked>,
) -> Delivered;

/// What became of an incoming frame.
pub(crate) enum Delivered {
    /// Handed to the actor (an ask's reply will follow on its own).
    Ok,
    /// The payload did not decode.
    Undecodable(DecodeError),
    /// The actor had stopped before the frame was handed to it.
    Stopped,
    /// The actor had stopped; the core counted the message as a dead
    /// letter of the receiving system.
    DeadLetter,
    /// The actor's bounded mailbox was full.
    Full,
}

/// The answer to an incoming ask: the reply's encoding, or a reply code
/// (`wire::reply`) and a reason.
pub(crate) type Answer = Result<Vec<u8>, (u64, String)>;

/// An incoming ask: who to answer, and how long this node waits for the
/// local actor's reply before answering with a timeout.
pub(crate) struct Asked {
    pub answer: Box<dyn FnOnce(Answer) + Send>,
    pub limit: Duration,
    pub user_cap: usize,
    pub codec: Arc<dyn troubadour::remote::RefCodec>,
    /// Runs the future that awaits the local reply: on the thread that
    /// completes it (`inline_task.rs`), or, in a simulation, in the
    /// simulation's loop.
    pub runner: Arc<dyn AnswerRunner>,
}

/// A future that answers one incoming ask.
pub(crate) type AnswerFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Where answers to incoming asks are awaited.
pub(crate) trait AnswerRunner: Send + Sync {
    fn run(&self, answer: AnswerFuture);
}

/// The remote messages an actor type accepts; filled by
/// [`RemoteActor::accepts`].
pub struct Accepts<A: Actor> {
    pub(crate) handlers: HashMap<u64, (&'static str, DeliverFn)>,
    /// For each accepted `M`: `TypeId::of::<Recipient<M>>()` and how to
    /// make that recipient from the `ActorRef<A>`.
    pub(crate) recipients: Vec<(TypeId, MakeFn)>,
    pub(crate) clash: Option<(&'static str, &'static str)>,
    _actor: std::marker::PhantomData<fn() -> A>,
}

impl<A: Actor> Accepts<A> {
    pub(crate) fn collect() -> Accepts<A>
    where
        A: RemoteActor,
    {
        let mut accepts = Accepts {
            handlers: HashMap::new(),
            recipients: Vec::new(),
            clash: None,
            _actor: std::marker::PhantomData,
        };
        A::accepts(&mut accepts);
        accepts
    }

    /// Accepts `M`, handled by a synchronous [`Handler`](troubadour::Handler).
    pub fn handle<M: RemoteMessage>(&mut self) -> &mut Self
    where
        A: Handles<M, Immediate>,
    {
        self.add::<M>(deliver::<A, M, Immediate>, recipient_of::<A, M, Immediate>)
    }

    /// Accepts `M`, handled by an [`AsyncHandler`](troubadour::AsyncHandler).
    pub fn handle_async<M: RemoteMessage>(&mut self) -> &mut Self
    where
        A: Handles<M, Awaiting>,
    {
        self.add::<M>(deliver::<A, M, Awaiting>, recipient_of::<A, M, Awaiting>)
    }

    fn add<M: RemoteMessage>(&mut self, f: DeliverFn, make: MakeFn) -> &mut Self {
        let id = type_id(M::NAME);
        self.recipients
            .push((TypeId::of::<troubadour::Recipient<M>>(), make));
        if let Some((existing, _)) = self.handlers.insert(id, (M::NAME, f)) {
            if existing != M::NAME {
                self.clash = Some((existing, M::NAME));
            }
        }
        self
    }
}

/// Decodes a message; a reference in it that did not resolve says why.
fn decode_message<M: RemoteMessage>(payload: &[u8], max_depth: usize) -> Result<M, DecodeError> {
    take_ref_error();
    decode_payload::<M>(payload, max_depth).map_err(|e| match take_ref_error() {
        Some(reason) => DecodeError::Invalid { reason },
        None => e,
    })
}

/// Makes a reference (`ActorRef<A>` or `Recipient<M>`, boxed) from the
/// exported `ActorRef<A>`.
pub(crate) type MakeFn = fn(&(dyn Any + Send + Sync)) -> Option<Box<dyn Any + Send + Sync>>;

fn recipient_of<A, M, K>(actor: &(dyn Any + Send + Sync)) -> Option<Box<dyn Any + Send + Sync>>
where
    A: Handles<M, K>,
    M: RemoteMessage,
    K: 'static,
{
    let actor = actor.downcast_ref::<ActorRef<A>>()?;
    Some(Box::new(actor.recipient::<M, K>()))
}

fn clone_of<T: Clone + Send + Sync + 'static>(
    any: &(dyn Any + Send + Sync),
) -> Option<Box<dyn Any + Send + Sync>> {
    Some(Box::new(any.downcast_ref::<T>()?.clone()))
}

fn deliver<A, M, K>(
    actor: &(dyn Any + Send + Sync),
    payload: &[u8],
    max_depth: usize,
    ask: Option<Asked>,
) -> Delivered
where
    A: Handles<M, K>,
    M: RemoteMessage,
    K: 'static,
{
    let Some(actor) = actor.downcast_ref::<ActorRef<A>>() else {
        // The export table pairs each handler with its own actor type.
        return Delivered::Stopped;
    };
    let msg = match decode_message::<M>(payload, max_depth) {
        Ok(m) => m,
        Err(e) => return Delivered::Undecodable(e),
    };
    match ask {
        None => match actor.tell(msg) {
            Ok(()) => Delivered::Ok,
            Err(SendError::Full(_)) => Delivered::Full,
            Err(_) => Delivered::DeadLetter,
        },
        Some(asked) => {
            if !actor.is_alive() {
                return Delivered::Stopped;
            }
            answer_later(actor.ask(msg), asked);
            Delivered::Ok
        }
    }
}

/// Delivers to an exported `Recipient<M>` (a reference that travelled as a
/// recipient).
fn deliver_recipient<M: RemoteMessage>(
    target: &(dyn Any + Send + Sync),
    payload: &[u8],
    max_depth: usize,
    ask: Option<Asked>,
) -> Delivered {
    let Some(recipient) = target.downcast_ref::<troubadour::Recipient<M>>() else {
        return Delivered::Stopped;
    };
    let msg = match decode_message::<M>(payload, max_depth) {
        Ok(m) => m,
        Err(e) => return Delivered::Undecodable(e),
    };
    match ask {
        None => match recipient.tell(msg) {
            Ok(()) => Delivered::Ok,
            Err(SendError::Full(_)) => Delivered::Full,
            Err(_) => Delivered::DeadLetter,
        },
        Some(asked) => {
            if !recipient.is_alive() {
                return Delivered::Stopped;
            }
            answer_later(recipient.ask(msg), asked);
            Delivered::Ok
        }
    }
}

/// Awaits a local ask's reply and answers the remote asker.
fn answer_later<R: serde::Serialize + Send + 'static>(pending: troubadour::Ask<R>, asked: Asked) {
    let Asked {
        answer,
        limit,
        user_cap,
        codec,
        runner,
    } = asked;
    let pending = pending.timeout(limit);
    runner.run(Box::pin(async move {
        use crate::wire::reply;
        let outcome = match pending.await {
            Ok(r) => {
                let mut out = BytesMut::new();
                // The reply may hold references: encode them for its peer.
                match troubadour::remote::with_ref_codec(&codec, || {
                    serialize_into(&mut out, &r, user_cap)
                }) {
                    Ok(()) => Ok(out.to_vec()),
                    Err(e) => Err((reply::UNENCODABLE, e.to_string())),
                }
            }
            Err(AskError::Stopped) => Err((reply::STOPPED, String::new())),
            Err(AskError::Full) => Err((reply::FULL, String::new())),
            Err(AskError::Timeout(_)) => Err((reply::TIMEOUT, String::new())),
            Err(e) => Err((reply::NO_REPLY, e.to_string())),
        };
        answer(outcome);
    }));
}

thread_local! {
    /// Why the last reference in a message failed to encode or decode:
    /// postcard keeps only that a custom error happened, not its text.
    static REF_ERROR: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Remembers why a reference failed, for the error of its message.
pub(crate) fn note_ref_error(reason: &str) {
    REF_ERROR.with(|r| *r.borrow_mut() = Some(reason.to_string()));
}

/// The reason noted by [`note_ref_error`] since the last call, if any.
pub(crate) fn take_ref_error() -> Option<String> {
    REF_ERROR.with(|r| r.borrow_mut().take())
}

/// The sending half of a registered message type: encode an [`Outgoing`]
/// straight into a connection's buffer, and, for an ask, the function that
/// will decode its reply.
#[derive(Clone, Copy)]
pub(crate) struct Encoder {
    pub wire_id: u64,
    pub encode: EncodeFn,
    /// Exports a `Recipient<M>` (boxed as `Any`), adding to the export
    /// of its actor if there is one.
    pub export_recipient: ExportRecipientFn,
}

pub(crate) type ExportRecipientFn =
    fn(existing: Option<&Export>, recipient: &(dyn Any + Send + Sync)) -> Option<Export>;

fn export_recipient<M: RemoteMessage>(
    existing: Option<&Export>,
    any: &(dyn Any + Send + Sync),
) -> Option<Export> {
    let recipient = any.downcast_ref::<troubadour::Recipient<M>>()?;
    let mut export = match existing {
        Some(e) => e.clone(),
        None => Export {
            actor_type: None,
            control: troubadour::remote::ControlRef::of_recipient(recipient),
            handlers: HashMap::new(),
            references: HashMap::new(),
            stop_gracefully: None,
        },
    };
    export.add_recipient(
        recipient,
        (type_id(M::NAME), M::NAME, deliver_recipient::<M>),
    );
    Some(export)
}

/// Exports an `ActorRef<A>` (boxed as `Any`) of a registered actor type.
pub(crate) type ExportActorFn =
    fn(actor: &(dyn Any + Send + Sync)) -> Option<Result<Export, crate::node::RemoteError>>;

pub(crate) fn export_actor<A: RemoteActor>(
    any: &(dyn Any + Send + Sync),
) -> Option<Result<Export, crate::node::RemoteError>> {
    Some(Export::of_actor(any.downcast_ref::<ActorRef<A>>()?))
}

/// Finishes a pending ask: the reply's payload, or the reply code and the
/// peer's reason.
pub(crate) type PendingReply = Box<dyn FnOnce(Result<&[u8], AskError>, usize) + Send>;

pub(crate) type EncodeFn = fn(
    out: &mut Outgoing<'_>,
    buf: &mut BytesMut,
    receiver: u64,
    request: Option<u64>,
    limits: &Limits,
) -> Result<Option<PendingReply>, Refusal>;

fn encode<M: RemoteMessage>(
    out: &mut Outgoing<'_>,
    buf: &mut BytesMut,
    receiver: u64,
    request: Option<u64>,
    limits: &Limits,
) -> Result<Option<PendingReply>, Refusal> {
    let msg = out.message::<M>().ok_or(Refusal::Unregistered)?;
    let header = Header {
        lane: Lane::User,
        kind: if request.is_some() {
            Kind::Ask
        } else {
            Kind::Message
        },
        code: type_id(M::NAME),
        sender: request.unwrap_or(0),
        receiver,
    };
    take_ref_error();
    encode_frame_with(buf, &header, limits, |b, max| serialize_into(b, msg, max))
        .map_err(|e| Refusal::Unencodable(take_ref_error().unwrap_or_else(|| e.to_string())))?;
    if request.is_none() {
        return Ok(None);
    }
    let Some(reply) = out.take_reply::<M::Reply>() else {
        return Ok(None);
    };
    Ok(Some(Box::new(move |outcome, max_depth| match outcome {
        Ok(bytes) => match decode_payload::<M::Reply>(bytes, max_depth) {
            Ok(r) => {
                reply.send(r);
            }
            Err(e) => reply.fail(AskError::Unencodable(format!(
                "the reply to {} did not decode: {e}",
                M::NAME
            ))),
        },
        Err(e) => reply.fail(e),
    })))
}

/// Every message type this node can send, by Rust type.
#[derive(Default, Clone)]
pub(crate) struct Encoders {
    by_type: HashMap<TypeId, Encoder>,
    names: HashMap<u64, &'static str>,
}

impl Encoders {
    pub(crate) fn register<M: RemoteMessage>(&mut self) -> Result<(), crate::node::RemoteError> {
        use crate::node::RemoteError;
        if crate::wire::is_reserved(M::NAME) {
            return Err(RemoteError::ReservedName(M::NAME));
        }
        let id = type_id(M::NAME);
        match self.names.get(&id) {
            Some(existing) if *existing != M::NAME => {
                return Err(RemoteError::NameClash {
                    first: existing,
                    second: M::NAME,
                })
            }
            Some(_) if !self.by_type.contains_key(&TypeId::of::<M>()) => {
                return Err(RemoteError::NameClash {
                    first: M::NAME,
                    second: std::any::type_name::<M>(),
                })
            }
            _ => {}
        }
        self.names.insert(id, M::NAME);
        self.by_type.insert(
            TypeId::of::<M>(),
            Encoder {
                wire_id: id,
                encode: encode::<M>,
                export_recipient: export_recipient::<M>,
            },
        );
        Ok(())
    }

    pub(crate) fn get(&self, t: TypeId) -> Option<&Encoder> {
        self.by_type.get(&t)
    }
}

/// One message type an export accepts: how to deliver it, and to what.
#[derive(Clone)]
pub(crate) struct Accepted {
    pub name: &'static str,
    pub deliver: DeliverFn,
    /// The `ActorRef<A>` or `Recipient<M>` the frame goes to.
    pub target: Arc<dyn Any + Send + Sync>,
}

/// A local actor reachable from other nodes: exposed by name, or exported
/// the first time a reference to it was sent.
#[derive(Clone)]
pub(crate) struct Export {
    /// The actor type's stable name; `None` for an actor known only
    /// through recipients.
    pub actor_type: Option<&'static str>,
    /// `None` for a recipient that is not an actor (an `Inbox`).
    pub control: Option<troubadour::remote::ControlRef>,
    pub handlers: HashMap<u64, Accepted>,
    /// References to it that may arrive back, by the `TypeId` of the
    /// `ActorRef<A>` or `Recipient<M>` wanted, with their source.
    pub references: HashMap<TypeId, (MakeFn, Arc<dyn Any + Send + Sync>)>,
    pub stop_gracefully: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Export {
    pub(crate) fn of_actor<A: RemoteActor>(
        actor: &ActorRef<A>,
    ) -> Result<Export, crate::node::RemoteError> {
        let accepts = Accepts::<A>::collect();
        if let Some((first, second)) = accepts.clash {
            return Err(crate::node::RemoteError::NameClash { first, second });
        }
        let target: Arc<dyn Any + Send + Sync> = Arc::new(actor.clone());
        let handlers = accepts
            .handlers
            .into_iter()
            .map(|(id, (name, deliver))| {
                (
                    id,
                    Accepted {
                        name,
                        deliver,
                        target: target.clone(),
                    },
                )
            })
            .collect();
        let mut references: HashMap<TypeId, (MakeFn, Arc<dyn Any + Send + Sync>)> = accepts
            .recipients
            .into_iter()
            .map(|(t, make)| (t, (make, target.clone())))
            .collect();
        references.insert(
            TypeId::of::<ActorRef<A>>(),
            (clone_of::<ActorRef<A>>, target.clone()),
        );
        let typed = actor.clone();
        Ok(Export {
            actor_type: Some(A::NAME),
            control: Some(troubadour::remote::ControlRef::of(actor)),
            handlers,
            references,
            stop_gracefully: Some(Arc::new(move || typed.stop_gracefully())),
        })
    }

    /// Adds what a `Recipient<M>` of the same actor accepts.
    pub(crate) fn add_recipient<M: RemoteMessage>(
        &mut self,
        recipient: &troubadour::Recipient<M>,
        (id, name, deliver): (u64, &'static str, DeliverFn),
    ) {
        let target: Arc<dyn Any + Send + Sync> = Arc::new(recipient.clone());
        self.handlers.entry(id).or_insert(Accepted {
            name,
            deliver,
            target: target.clone(),
        });
        self.references
            .entry(TypeId::of::<troubadour::Recipient<M>>())
            .or_insert((clone_of::<troubadour::Recipient<M>>, target));
    }
}
