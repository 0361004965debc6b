//! Reliable delivery from a producer to a persistent actor: effectively
//! once (Akka's reliable delivery, with the consumer's dedup state kept
//! in its journal).
//!
//! * The [`ReliableProducer`] numbers what it sends per producer id
//!   (1, 2, 3, …), keeps every message until it is acknowledged, and
//!   sends the unacknowledged ones again every `resend_every` and as soon
//!   as the consumer says it expects an earlier one.
//! * The consumer holds its state as [`Persistent<Deduplicated<S>>`] and
//!   hands each [`Delivery`] to [`receive`](Persistent::receive). That
//!   handles only the number it expects next from that producer: the
//!   events it decides and the new "next expected" are one event, one
//!   append, one transaction. A duplicate (lower number) is not handled; a
//!   message from beyond a gap (higher number) waits to be sent again in
//!   order. Either way the consumer answers with an [`Ack`] saying which
//!   number it expects next.
//!
//! So a message lost, duplicated or reordered on the way, an ack lost, a
//! consumer crash before or after its write: each ends with every message
//! handled once, in the producer's order. A [`ReliableProducer`] keeps
//! its messages in memory until acknowledged: a crash of the producer
//! loses those. A [`DurableProducer`] keeps them in a journal (an outbox):
//! [`ProduceDurably`] answers once the message is stored, a restarted
//! producer recovers what is unacknowledged and its numbering and sends
//! it again, so the producer's crash loses nothing either.

use crate::error::PersistError;
use crate::event::Event;
use crate::persistent::{EventSourced, Persistence, Persistent, SnapshotPolicy};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;
use troubadour::{Actor, AsyncHandler, Context, ExitReason, Handler, Message, Recipient};

/// A message from a [`ReliableProducer`], numbered.
pub struct Delivery<M> {
    /// The producer's id (stable across its restarts).
    pub producer: String,
    /// The message's number from this producer, from 1.
    pub seq: u64,
    /// The message.
    pub msg: M,
    /// Where the consumer's [`Ack`] goes.
    pub ack_to: Recipient<Ack>,
}

impl<M: Send + 'static> Message for Delivery<M> {
    type Reply = ();
}

/// A consumer's answer: it has handled every message of `producer` below
/// `next`, and expects `next`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The producer's id.
    pub producer: String,
    /// The number the consumer expects next.
    pub next: u64,
}

impl Message for Ack {
    type Reply = ();
}

/// A consumer's state with the number it expects next from each producer,
/// both changed by the same events.
#[derive(Serialize, Deserialize, Default)]
pub struct Deduplicated<S> {
    /// The consumer's own state.
    pub state: S,
    next: HashMap<String, u64>,
}

impl<S> Deduplicated<S> {
    /// The consumer's state, starting as `state`.
    pub fn new(state: S) -> Self {
        Deduplicated {
            state,
            next: HashMap::new(),
        }
    }

    /// The number expected next from `producer`.
    pub fn expected(&self, producer: &str) -> u64 {
        self.next.get(producer).copied().unwrap_or(1)
    }
}

/// The events one delivery produced, with the delivery's producer and
/// number: stored as one event, so the dedup state and the consumer's
/// change are one write.
#[derive(Serialize, Deserialize)]
pub struct Delivered<E> {
    producer: String,
    seq: u64,
    events: Vec<E>,
}

impl<E: Event> Event for Delivered<E> {
    const TYPE: &'static str = "troubadour.Delivered";
}

impl<S: EventSourced> EventSourced for Deduplicated<S> {
    type Event = Delivered<S::Event>;
    fn apply(&mut self, d: &Delivered<S::Event>) {
        for e in &d.events {
            self.state.apply(e);
        }
        self.next.insert(d.producer.clone(), d.seq + 1);
    }
}

impl<S: EventSourced> Persistent<Deduplicated<S>> {
    /// Handles `delivery` effectively once: if it is the number expected
    /// from its producer, `decide` turns it into events, which are
    /// persisted together with the new expected number (one append), then
    /// applied; otherwise nothing is handled. Then acknowledges. An error
    /// from the store is returned (and the actor fails, as for `persist`):
    /// nothing is acknowledged, so the producer sends it again.
    pub async fn receive<M, A: Actor>(
        &mut self,
        delivery: Delivery<M>,
        ctx: &mut Context<A>,
        decide: impl FnOnce(&S, M) -> Vec<S::Event>,
    ) -> Result<(), PersistError> {
        let expected = self.expected(&delivery.producer);
        let next = if delivery.seq == expected {
            let events = decide(&self.state().state, delivery.msg);
            let delivered = Delivered {
                producer: delivery.producer.clone(),
                seq: delivery.seq,
                events,
            };
            self.persist(delivered, ctx).await?;
            expected + 1
        } else {
            expected
        };
        let _ = delivery.ack_to.tell(Ack {
            producer: delivery.producer,
            next,
        });
        Ok(())
    }
}

/// Sends messages to a consumer reliably: numbers them, keeps each until
/// acknowledged, and sends the unacknowledged again every `resend_every`
/// and as soon as an [`Ack`] shows the consumer expects an earlier one.
/// The consumer takes them with
/// [`Persistent::receive`](crate::Persistent::receive), which handles each
/// once, in order, its dedup state written with its events.
/// Spawn it, tell it [`Produce`]s; ask [`Unconfirmed`] to know what is
/// still on its way.
pub struct ReliableProducer<M: Clone + Send + 'static> {
    consumer: Consumer<M>,
    next: u64,
    unconfirmed: BTreeMap<u64, M>,
    resend_every: Duration,
}

/// The consumer as a producer reaches it: the producer's id, where its
/// deliveries go, and where the acknowledgements come back (the producer,
/// once started).
struct Consumer<M: Send + 'static> {
    producer: String,
    to: Recipient<Delivery<M>>,
    ack_to: Option<Recipient<Ack>>,
}

impl<M: Clone + Send + 'static> Consumer<M> {
    fn new(producer: String, to: Recipient<Delivery<M>>) -> Self {
        Consumer {
            producer,
            to,
            ack_to: None,
        }
    }

    fn send(&self, seq: u64, msg: M) {
        let Some(ack_to) = self.ack_to.clone() else {
            return;
        };
        // A refused send is like a lost one: sent again later.
        let _ = self.to.tell(Delivery {
            producer: self.producer.clone(),
            seq,
            msg,
            ack_to,
        });
    }

    /// Sends again every message of `unconfirmed` from number `from` on.
    fn resend_from(&self, unconfirmed: &BTreeMap<u64, M>, from: u64) {
        for (seq, msg) in unconfirmed.range(from..) {
            self.send(*seq, msg.clone());
        }
    }
}

impl<M: Clone + Send + 'static> ReliableProducer<M> {
    /// A producer with the stable id `id`, sending to `to`, resending what
    /// is unacknowledged every `resend_every`.
    pub fn new(id: impl Into<String>, to: Recipient<Delivery<M>>, resend_every: Duration) -> Self {
        ReliableProducer {
            consumer: Consumer::new(id.into(), to),
            next: 1,
            unconfirmed: BTreeMap::new(),
            resend_every,
        }
    }

    fn send(&self, seq: u64, msg: M) {
        self.consumer.send(seq, msg);
    }

    fn resend_from(&self, from: u64) {
        self.consumer.resend_from(&self.unconfirmed, from);
    }
}

/// Sends `M` through a [`ReliableProducer`]; replies with its number.
pub struct Produce<M>(pub M);
impl<M: Send + 'static> Message for Produce<M> {
    type Reply = u64;
}

/// How many messages the producer still waits to see acknowledged.
pub struct Unconfirmed;
impl Message for Unconfirmed {
    type Reply = usize;
}

/// The producer's resend tick.
#[derive(Clone)]
struct Resend;
impl Message for Resend {
    type Reply = ();
}

impl<M: Clone + Send + 'static> Actor for ReliableProducer<M> {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.consumer.ack_to = Some(ctx.myself().recipient());
        ctx.send_interval(self.resend_every, Resend);
    }
}

impl<M: Clone + Send + 'static> Handler<Produce<M>> for ReliableProducer<M> {
    fn handle(&mut self, Produce(msg): Produce<M>, _: &mut Context<Self>) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.unconfirmed.insert(seq, msg.clone());
        self.send(seq, msg);
        seq
    }
}

impl<M: Clone + Send + 'static> Handler<Ack> for ReliableProducer<M> {
    fn handle(&mut self, ack: Ack, _: &mut Context<Self>) {
        if ack.producer != self.consumer.producer {
            return;
        }
        let before = self.unconfirmed.len();
        self.unconfirmed = self.unconfirmed.split_off(&ack.next);
        // The consumer expects one we sent but it did not take (lost, or
        // it arrived after a gap): go back to it now, once per ack that
        // confirmed nothing new, rather than wait for the tick.
        if before == self.unconfirmed.len() && self.unconfirmed.contains_key(&ack.next) {
            if let Some(msg) = self.unconfirmed.get(&ack.next).cloned() {
                self.send(ack.next, msg);
            }
        }
    }
}

impl<M: Clone + Send + 'static> Handler<Resend> for ReliableProducer<M> {
    fn handle(&mut self, _: Resend, _: &mut Context<Self>) {
        if let Some((&first, _)) = self.unconfirmed.iter().next() {
            self.resend_from(first);
        }
    }
}

impl<M: Clone + Send + 'static> Handler<Unconfirmed> for ReliableProducer<M> {
    fn handle(&mut self, _: Unconfirmed, _: &mut Context<Self>) -> usize {
        self.unconfirmed.len()
    }
}

/// A [`ReliableProducer`] whose unacknowledged messages outlive it (an
/// outbox, Akka's durable producer queue): each message is stored in the
/// producer's journal before [`ProduceDurably`] answers with its number,
/// each acknowledgement is stored too, and a producer restarted (by its
/// supervisor, or in a new process with the same id and store) recovers
/// its numbering and what is unacknowledged, and sends that again at once.
/// With a consumer on [`Persistent::receive`], a message the producer
/// accepted is handled once, whoever crashes.
///
/// Its journal's persistence id is `troubadour.producer.<id>`; a snapshot
/// every 1,000 events deletes the events before it, so the journal holds
/// about what is unacknowledged.
///
/// ```
/// use std::time::Duration;
/// use troubadour::prelude::*;
/// use troubadour_persistence::{Delivery, DurableProducer, Persistence, ProduceDurably};
///
/// struct Printer;
/// impl Actor for Printer {}
/// impl Handler<Delivery<String>> for Printer {
///     fn handle(&mut self, d: Delivery<String>, _: &mut Context<Self>) {
///         println!("{}: {}", d.seq, d.msg);
///     }
/// }
///
/// let system = ActorSystem::new();
/// let persistence = Persistence::in_memory();
/// let printer = system.spawn(Printer).unwrap();
/// let outbox = system
///     .spawn(DurableProducer::new(&persistence, "orders", printer.recipient(), Duration::from_secs(1)))
///     .unwrap();
/// // Answered once the message is in the journal.
/// assert_eq!(system.block_on(outbox.ask(ProduceDurably("first".to_string()))).unwrap(), Ok(1));
/// # system.shutdown(Duration::from_secs(5)).unwrap();
/// ```
pub struct DurableProducer<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> {
    consumer: Consumer<M>,
    outbox: Persistent<Outbox<M>>,
    resend_every: Duration,
}

/// A [`DurableProducer`]'s journal: its next number and what waits for an
/// acknowledgement.
#[derive(Serialize, Deserialize)]
pub struct Outbox<M> {
    next: u64,
    unconfirmed: BTreeMap<u64, M>,
}

/// What a [`DurableProducer`]'s journal records.
#[derive(Serialize, Deserialize)]
pub enum OutboxEvent<M> {
    /// The next message, numbered in order.
    Queued(M),
    /// The consumer has every message below this number.
    Confirmed(u64),
}

impl<M: Serialize + DeserializeOwned + Send + Sync + 'static> Event for OutboxEvent<M> {
    const TYPE: &'static str = "troubadour.OutboxEvent";
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> EventSourced for Outbox<M> {
    type Event = OutboxEvent<M>;
    fn apply(&mut self, event: &OutboxEvent<M>) {
        match event {
            OutboxEvent::Queued(msg) => {
                self.unconfirmed.insert(self.next, msg.clone());
                self.next += 1;
            }
            OutboxEvent::Confirmed(below) => {
                self.unconfirmed = self.unconfirmed.split_off(below);
            }
        }
    }
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> DurableProducer<M> {
    /// A producer with the stable id `id`, its outbox in `persistence`,
    /// sending to `to`, resending what is unacknowledged every
    /// `resend_every`.
    pub fn new(
        persistence: &Persistence,
        id: impl Into<String>,
        to: Recipient<Delivery<M>>,
        resend_every: Duration,
    ) -> Self {
        let id = id.into();
        let outbox = Persistent::new(
            persistence,
            format!("troubadour.producer.{id}"),
            Outbox {
                next: 1,
                unconfirmed: BTreeMap::new(),
            },
        )
        .snapshots(SnapshotPolicy::every(1_000).keep(1).delete_events(true));
        DurableProducer {
            consumer: Consumer::new(id, to),
            outbox,
            resend_every,
        }
    }

    fn send(&self, seq: u64, msg: M) {
        self.consumer.send(seq, msg);
    }

    fn resend_from(&self, from: u64) {
        self.consumer.resend_from(&self.outbox.unconfirmed, from);
    }
}

/// Sends `M` through a [`DurableProducer`]; replies with its number once
/// it is stored (an error: it is not, and the producer fails and
/// recovers).
pub struct ProduceDurably<M>(pub M);
impl<M: Send + 'static> Message for ProduceDurably<M> {
    type Reply = Result<u64, PersistError>;
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> Actor for DurableProducer<M> {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.consumer.ack_to = Some(ctx.myself().recipient());
        ctx.send_interval(self.resend_every, Resend);
    }

    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_, M>> {
        Some(async move {
            self.outbox.recovery().await?;
            // What a previous incarnation sent but saw no ack for goes
            // again now, not a resend period later.
            if let Some((&first, _)) = self.outbox.unconfirmed.iter().next() {
                self.resend_from(first);
            }
            Ok(())
        })
    }
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static>
    AsyncHandler<ProduceDurably<M>> for DurableProducer<M>
{
    async fn handle(
        &mut self,
        ProduceDurably(msg): ProduceDurably<M>,
        ctx: &mut Context<Self>,
    ) -> Result<u64, PersistError> {
        let seq = self.outbox.next;
        self.outbox
            .persist(OutboxEvent::Queued(msg.clone()), ctx)
            .await?;
        self.send(seq, msg);
        Ok(seq)
    }
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> AsyncHandler<Ack>
    for DurableProducer<M>
{
    async fn handle(&mut self, ack: Ack, ctx: &mut Context<Self>) {
        if ack.producer != self.consumer.producer {
            return;
        }
        let first = self.outbox.unconfirmed.keys().next().copied();
        match first {
            // Confirms something new: stored, so a restart does not send it again.
            Some(first) if ack.next > first => {
                let below = ack.next.min(self.outbox.next);
                // An error fails the producer; its restart recovers and
                // sends again what the journal still holds.
                let _ = self
                    .outbox
                    .persist(OutboxEvent::Confirmed(below), ctx)
                    .await;
            }
            // The consumer expects one it did not take: send it now.
            Some(_) => {
                if let Some(msg) = self.outbox.unconfirmed.get(&ack.next).cloned() {
                    self.send(ack.next, msg);
                }
            }
            None => {}
        }
    }
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> Handler<Resend>
    for DurableProducer<M>
{
    fn handle(&mut self, _: Resend, _: &mut Context<Self>) {
        if let Some((&first, _)) = self.outbox.unconfirmed.iter().next() {
            self.resend_from(first);
        }
    }
}

impl<M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> Handler<Unconfirmed>
    for DurableProducer<M>
{
    fn handle(&mut self, _: Unconfirmed, _: &mut Context<Self>) -> usize {
        self.outbox.unconfirmed.len()
    }
}
