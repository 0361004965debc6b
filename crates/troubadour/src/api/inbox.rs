//! An address for code that is not an actor: a plain thread, an async task,
//! `main`. [`Inbox`] is CAF's `scoped_actor` and Erlang's `receive .. after`
//! without a process: others [`tell`](Recipient::tell) and
//! [`ask`](Recipient::ask) it through an ordinary [`Recipient`], and its
//! owner receives, blocking or awaiting, with or without a timeout on the
//! system's clock.
//!
//! The queue is a mutex around a `VecDeque`, a waker and a `closed` flag:
//! an inbox serves code outside the actor runtime, where a lock per message
//! costs nothing that matters, and under one lock a send either lands
//! before the inbox is dropped (and is then counted as a dead letter with
//! the rest of the queue) or is refused after, with no third case. Actors
//! never meet any of it: it is a [`Recipient`]'s other kind of sink.

use crate::api::actor::Message;
use crate::api::actor_ref::{Ask, Recipient, Sink};
use crate::api::error::{AskError, RecvError, SendError, SpawnError};
use crate::api::exit::ActorId;
use crate::runtime::envelope::ReplyTo;
use crate::runtime::system::{SystemCore, SystemHandle};
use crate::runtime::timer::{Deadline, Expiry};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;
use tokio::sync::oneshot;

/// A mailbox owned by code that is not an actor. Hand out its address with
/// [`recipient`](Self::recipient); receive with [`recv`](Self::recv) or
/// [`recv_timeout`](Self::recv_timeout), each a future to `.await` in async
/// code or to [`wait`](Recv::wait) for on a plain thread.
///
/// Messages from one sender arrive in the order sent. Dropping the inbox
/// closes its address: later sends fail with [`SendError::Stopped`] (an
/// `ask` with [`AskError::Stopped`]) and, like messages still queued, are
/// counted as dead letters; an `ask` still queued or received and not
/// answered ends with [`AskError::NoReply`] at once, never hangs.
///
/// Differences from an actor, by design: an inbox has no [`ActorRef`]
/// (it cannot be linked, monitored or supervised, and has no lifecycle
/// hooks), its mailbox is unbounded, and on a system whose sends are
/// diverted (a simulation's `hold_messages()`, with the `simulation`
/// feature) sends to it are not held but arrive at once.
///
/// [`ActorRef`]: crate::ActorRef
///
/// ```
/// use troubadour::prelude::*;
/// use std::time::Duration;
///
/// struct Question(u32);
/// impl Message for Question { type Reply = u32; }
///
/// let system = ActorSystem::new();
/// let mut inbox = system.inbox::<Question>()?;
/// let oracle = inbox.recipient();
/// let asker = std::thread::spawn(move || oracle.ask(Question(20)).wait());
///
/// let question = inbox.recv().wait();
/// let answer = question.message().0 + 22;
/// question.reply(answer);
/// assert_eq!(asker.join().unwrap()?, 42);
///
/// // Erlang's `receive .. after`: nothing came within 10 ms.
/// let nothing = inbox.recv_timeout(Duration::from_millis(10)).wait();
/// assert!(matches!(nothing, Err(RecvError::Timeout(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Inbox<M: Message> {
    sink: Arc<InboxSink<M>>,
}

/// A message taken from an [`Inbox`], with the means to answer it if it
/// was sent with `ask`. Dropping it unanswered fails that `ask` with
/// [`AskError::NoReply`] at once.
pub struct Received<M: Message> {
    message: M,
    responder: Responder<M::Reply>,
}

/// The reply half of a [`Received`] message: answers the `ask` that sent
/// it (Erlang's `From` in `gen_server:reply(From, Reply)`). Dropping it
/// unused fails that `ask` with [`AskError::NoReply`] at once.
pub struct Responder<R> {
    tx: Option<ReplyTo<R>>,
}

struct Item<M: Message> {
    message: M,
    reply: Option<ReplyTo<M::Reply>>,
}

struct Queue<M: Message> {
    items: VecDeque<Item<M>>,
    /// The inbox was dropped: refuse everything from now on.
    closed: bool,
    /// The receiving future's waker, while it waits.
    waker: Option<Waker>,
}

/// The shared half: what every [`Recipient`] of the inbox holds.
struct InboxSink<M: Message> {
    id: ActorId,
    system: Arc<SystemCore>,
    queue: Mutex<Queue<M>>,
}

impl<M: Message> InboxSink<M> {
    fn lock(&self) -> MutexGuard<'_, Queue<M>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item`, or hands it back if the inbox is gone (counting it
    /// as a dead letter).
    fn push(&self, item: Item<M>) -> Result<(), Item<M>> {
        let mut queue = self.lock();
        if queue.closed {
            drop(queue);
            self.system.dead_letters.record(
                self.id,
                std::any::type_name::<M>(),
                crate::runtime::dead_letters::DeadLetterReason::RecipientStopped,
            );
            return Err(item);
        }
        queue.items.push_back(item);
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    fn poll_pop(&self, cx: &mut TaskContext<'_>) -> Poll<Received<M>> {
        let mut queue = self.lock();
        match queue.items.pop_front() {
            Some(item) => Poll::Ready(Received::from(item)),
            None => {
                queue.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<M: Message> Sink<M> for InboxSink<M> {
    fn tell(&self, message: M) -> Result<(), SendError<M>> {
        self.push(Item {
            message,
            reply: None,
        })
        .map_err(|item| SendError::Stopped(item.message))
    }

    fn ask(&self, message: M) -> Ask<M::Reply> {
        let (tx, rx) = oneshot::channel();
        let item = Item {
            message,
            reply: Some(tx),
        };
        match self.push(item) {
            Ok(()) => Ask::waiting(rx, &self.system),
            Err(_) => Ask::failed(AskError::Stopped, &self.system),
        }
    }

    fn id(&self) -> ActorId {
        self.id
    }

    fn is_alive(&self) -> bool {
        !self.lock().closed
    }
}

impl SystemHandle {
    /// A new [`Inbox`] for messages of type `M`, with an id of this
    /// system's (so it shows in dead letters and traces like an actor).
    /// Fails as a spawn would: after shutdown has begun, or when the system
    /// has used up its ids.
    pub fn inbox<M: Message>(&self) -> Result<Inbox<M>, SpawnError> {
        let core = self.core();
        if core.is_shutting_down() {
            return Err(SpawnError::SystemShutdown);
        }
        let id = ActorId(core.next_id()?);
        Ok(Inbox {
            sink: Arc::new(InboxSink {
                id,
                system: core.clone(),
                queue: Mutex::new(Queue {
                    items: VecDeque::new(),
                    closed: false,
                    waker: None,
                }),
            }),
        })
    }
}

impl<M: Message> Inbox<M> {
    /// The inbox's address, to hand to actors and other threads. It stays
    /// valid for as long as the inbox lives.
    pub fn recipient(&self) -> Recipient<M> {
        Recipient::from_sink(self.sink.clone())
    }

    /// The inbox's id (its recipients' [`Recipient::id`]).
    pub fn id(&self) -> ActorId {
        self.sink.id
    }

    /// The next message, oldest first: a future that completes when one
    /// is there, and waits for as long as it takes (Erlang's `receive`
    /// without `after`). Await it, or [`wait`](Recv::wait) for it on a
    /// plain thread.
    pub fn recv(&mut self) -> Recv<'_, M> {
        Recv { inbox: self }
    }

    /// The next message, or [`RecvError::Timeout`] if none arrives within
    /// `timeout` (Erlang's `receive .. after`). The timeout starts now and
    /// runs on the system's clock: on a system built with
    /// [`virtual_time`](crate::ActorSystemBuilder::virtual_time) it passes
    /// only when [`advance_time`](SystemHandle::advance_time) moves the
    /// clock past it. A message already queued is taken even if the
    /// timeout is zero.
    pub fn recv_timeout(&mut self, timeout: Duration) -> RecvTimeout<'_, M> {
        let deadline = (!timeout.is_zero()).then(|| Deadline::start(&*self.sink.system, timeout));
        RecvTimeout {
            inbox: self,
            timeout,
            deadline,
        }
    }

    /// The next message if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Received<M>> {
        self.sink.lock().items.pop_front().map(Received::from)
    }
}

impl<M: Message> Drop for Inbox<M> {
    fn drop(&mut self) {
        let items = {
            let mut queue = self.sink.lock();
            queue.closed = true;
            queue.waker = None;
            std::mem::take(&mut queue.items)
        };
        // Never handled: dead letters, as a stopped actor's queue is. Their
        // reply channels drop with them, so their asks end with `NoReply`.
        for item in items {
            self.sink.system.dead_letters.record(
                self.sink.id,
                std::any::type_name::<M>(),
                crate::runtime::dead_letters::DeadLetterReason::DiscardedAtStop,
            );
            drop(item);
        }
    }
}

impl<M: Message> fmt::Debug for Inbox<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Inbox<{}>{}", std::any::type_name::<M>(), self.sink.id)
    }
}

/// Waits for the next message of an [`Inbox`]: see [`Inbox::recv`].
#[must_use = "a Recv receives nothing unless awaited or waited for"]
pub struct Recv<'a, M: Message> {
    inbox: &'a mut Inbox<M>,
}

impl<M: Message> Recv<'_, M> {
    /// Blocks the current thread until a message arrives. For plain
    /// threads and `fn main`; in async code, await the `Recv` instead, and
    /// never call this from a handler (it would hold the worker thread).
    pub fn wait(self) -> Received<M> {
        crate::runtime::blocking::block_on(self)
    }
}

impl<M: Message> Future for Recv<'_, M> {
    type Output = Received<M>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Received<M>> {
        self.inbox.sink.poll_pop(cx)
    }
}

/// Waits for the next message of an [`Inbox`] or a timeout: see
/// [`Inbox::recv_timeout`].
#[must_use = "a RecvTimeout receives nothing unless awaited or waited for"]
pub struct RecvTimeout<'a, M: Message> {
    inbox: &'a mut Inbox<M>,
    timeout: Duration,
    /// `None` for a zero timeout: look once, never wait.
    deadline: Option<Deadline>,
}

impl<M: Message> RecvTimeout<'_, M> {
    /// Blocks the current thread until a message arrives or the timeout
    /// passes. As for [`Recv::wait`], not from a handler.
    pub fn wait(self) -> Result<Received<M>, RecvError> {
        crate::runtime::blocking::block_on(self)
    }
}

impl<M: Message> Future for RecvTimeout<'_, M> {
    type Output = Result<Received<M>, RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // A message that is there wins over a deadline that has passed.
        if let Poll::Ready(received) = this.inbox.sink.poll_pop(cx) {
            return Poll::Ready(Ok(received));
        }
        let expiry = match &mut this.deadline {
            None => Poll::Ready(Expiry::Elapsed),
            Some(deadline) => deadline.poll(&*this.inbox.sink.system, cx),
        };
        match expiry {
            Poll::Ready(Expiry::Elapsed) => Poll::Ready(Err(RecvError::Timeout(this.timeout))),
            Poll::Ready(Expiry::SystemDown) => Poll::Ready(Err(RecvError::SystemShutdown)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<M: Message> From<Item<M>> for Received<M> {
    fn from(item: Item<M>) -> Self {
        Received {
            message: item.message,
            responder: Responder { tx: item.reply },
        }
    }
}

impl<M: Message> Received<M> {
    /// The message.
    pub fn message(&self) -> &M {
        &self.message
    }

    /// `true` if it was sent with `ask`: someone waits for the reply.
    pub fn is_ask(&self) -> bool {
        self.responder.is_ask()
    }

    /// Answers the `ask` that sent this message (a no-op for a `tell`).
    /// `true` if an asker was still waiting and got it.
    pub fn reply(self, reply: M::Reply) -> bool {
        self.responder.reply(reply)
    }

    /// The message and its responder, to answer after the message has been
    /// moved out (or later, from elsewhere).
    pub fn into_parts(self) -> (M, Responder<M::Reply>) {
        (self.message, self.responder)
    }
}

impl<M: Message> fmt::Debug for Received<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("message", &std::any::type_name::<M>())
            .field("ask", &self.is_ask())
            .finish()
    }
}

impl<R> Responder<R> {
    /// `true` if the message was sent with `ask`.
    pub fn is_ask(&self) -> bool {
        self.tx.is_some()
    }

    /// Sends the reply. `true` if an asker was still waiting and got it;
    /// `false` for a `tell`, or when the asker has stopped waiting (timed
    /// out, dropped its `Ask`).
    pub fn reply(mut self, reply: R) -> bool {
        self.tx.take().is_some_and(|tx| tx.send(reply).is_ok())
    }
}

impl<R> fmt::Debug for Responder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("ask", &self.is_ask())
            .finish()
    }
}
