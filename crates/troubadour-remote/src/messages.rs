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
}

/// The remote messages an actor type accepts; filled by
/// [`RemoteActor::accepts`].
pub struct Accepts<A: Actor> {
    pub(crate) handlers: HashMap<u64, (&'static str, DeliverFn)>,
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
        self.add::<M>(deliver::<A, M, Immediate>)
    }

    /// Accepts `M`, handled by an [`AsyncHandler`](troubadour::AsyncHandler).
    pub fn handle_async<M: RemoteMessage>(&mut self) -> &mut Self
    where
        A: Handles<M, Awaiting>,
    {
        self.add::<M>(deliver::<A, M, Awaiting>)
    }

    fn add<M: RemoteMessage>(&mut self, f: DeliverFn) -> &mut Self {
        let id = type_id(M::NAME);
        if let Some((existing, _)) = self.handlers.insert(id, (M::NAME, f)) {
            if existing != M::NAME {
                self.clash = Some((existing, M::NAME));
            }
        }
        self
    }
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
    let msg = match decode_payload::<M>(payload, max_depth) {
        Ok(m) => m,
        Err(e) => return Delivered::Undecodable(e),
    };
    match ask {
        None => match actor.tell(msg) {
            Ok(()) => Delivered::Ok,
            Err(SendError::Full(_)) => Delivered::Full,
            Err(_) => Delivered::DeadLetter,
        },
        Some(Asked {
            answer,
            limit,
            user_cap,
        }) => {
            if !actor.is_alive() {
                return Delivered::Stopped;
            }
            let pending = actor.ask(msg).timeout(limit);
            tokio::spawn(async move {
                use crate::wire::reply;
                let outcome = match pending.await {
                    Ok(r) => {
                        let mut out = BytesMut::new();
                        match serialize_into(&mut out, &r, user_cap) {
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
            });
            Delivered::Ok
        }
    }
}

/// The sending half of a registered message type: encode an [`Outgoing`]
/// straight into a connection's buffer, and, for an ask, the function that
/// will decode its reply.
#[derive(Clone, Copy)]
pub(crate) struct Encoder {
    pub encode: EncodeFn,
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
    encode_frame_with(buf, &header, limits, |b, max| serialize_into(b, msg, max))
        .map_err(|e| Refusal::Unencodable(e.to_string()))?;
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
                encode: encode::<M>,
            },
        );
        Ok(())
    }

    pub(crate) fn get(&self, t: TypeId) -> Option<&Encoder> {
        self.by_type.get(&t)
    }
}

/// A local actor reachable from other nodes.
pub(crate) struct Export {
    pub actor_type: &'static str,
    pub actor: Arc<dyn Any + Send + Sync>,
    pub control: troubadour::remote::ControlRef,
    pub handlers: Arc<HashMap<u64, (&'static str, DeliverFn)>>,
    pub stop_gracefully: Box<dyn Fn() + Send + Sync>,
}

impl Export {
    pub(crate) fn new<A: RemoteActor>(
        actor: &ActorRef<A>,
    ) -> Result<Export, crate::node::RemoteError> {
        let accepts = Accepts::<A>::collect();
        if let Some((first, second)) = accepts.clash {
            return Err(crate::node::RemoteError::NameClash { first, second });
        }
        let typed = actor.clone();
        Ok(Export {
            actor_type: A::NAME,
            actor: Arc::new(actor.clone()),
            control: troubadour::remote::ControlRef::of(actor),
            handlers: Arc::new(accepts.handlers),
            stop_gracefully: Box::new(move || typed.stop_gracefully()),
        })
    }
}
