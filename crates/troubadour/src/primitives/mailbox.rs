//! The two lock-free queues every actor owns.
//!
//! * [`Queue`]: user messages. An intrusive multi-producer single-consumer
//!   FIFO after Dmitry Vyukov's design. A push is one `swap` and one store,
//!   wait-free for producers, which is what keeps fan-in fast when many OS
//!   threads (more than there are cores) send to one actor: a producer
//!   preempted mid-push delays only the consumer, never other producers, and
//!   nobody walks a list of blocks. The message lives inside its node, so a
//!   message costs exactly one allocation. As in Pony's queue, the last node
//!   handed out stays in the list as its dummy head, so taking the last
//!   message costs no atomic write (decision 0049).
//! * [`SignalStack`]: control signals (stop, exit signals, supervision). A
//!   Treiber stack the consumer empties in one `swap` and reverses, so signals
//!   keep their order among themselves. Signals are rare; eight bytes per actor
//!   matter more than constant factors here.
//!
//! # Invariants (`Queue`)
//!
//! Nodes form a singly linked list from `head` (consumer end) to `tail`
//! (producer end). `head` is a *dummy*: the node whose message was taken
//! last, or the `stub`, a node embedded in the queue that stands in when no
//! node was taken since the queue was last left empty; the messages waiting
//! are those after it. `null` in `head` or `tail` stands for the stub, so a
//! queue can be built before it reaches its final address (the stub's
//! address is only taken once the queue is in place).
//!
//! 1. Producers only touch `tail` (one `swap`) and then the `next` field of
//!    the node they displaced. After the swap, the new node is reachable from
//!    `tail` but not yet from `head`: the list is "inconsistent" until the
//!    producer's second store publishes the link. The consumer detects that
//!    window (`head` has no `next` but is not `tail`) and reports
//!    [`Pop::Inconsistent`]; it never skips the node, so no message is lost
//!    and per-producer FIFO order holds (each producer's swaps are ordered,
//!    and the links follow swap order).
//! 2. Only the consumer touches `head`. A pop hands out the node after the
//!    dummy, which becomes the dummy in turn: the caller takes its message
//!    but not its memory, since a producer may still link a node behind it.
//!    The old dummy is *retired*: its memory goes back to the caller to
//!    free, as no producer can touch it again (its successor is linked, so
//!    the producer that displaced it from `tail` is done with it).
//! 3. The queue is empty exactly when `tail` is the dummy. A release (below)
//!    that finds it so swings `tail` from a taken node back to the stub in
//!    one `compare_exchange`, which fails if a producer displaced that node
//!    meanwhile; on success no producer can reach the node any more, and it
//!    is retired too, so an idle actor pins no sender's slab. The stub is
//!    made the dummy before that exchange, not after: the exchange hands the
//!    role on, and the next holder must not find in `head` the node this
//!    one is about to free (the loom model found that order).
//!
//! # The consumer role (who may run the actor)
//!
//! An actor is run by at most one thread at a time, and an actor with input
//! is never left idle. Both follow from one rule: the thread that holds the
//! consumer role pops, and must run the actor (or hand it to a worker) until
//! it gives the role up. The role lives in the low bit of `tail`, `IDLE`:
//! set means nobody holds it. Keeping it there, as Pony's message queue
//! does, lets a send take the role with the same `swap` that queues its
//! message, instead of a second read-modify-write on a separate word (a
//! tenth of a ring hop's cost, decision 0048).
//!
//! 4. Only the holder sets `IDLE` ([`Queue::release`], a `compare_exchange`
//!    from the `tail` it saw); a push, which always leaves its own unmarked
//!    node in `tail`, and [`Queue::try_acquire`] clear it. So the thread
//!    whose `swap` or `compare_exchange` took a marked value is the one new
//!    holder, and while someone holds the role `tail` is unmarked.
//! 5. A running actor gives the role up only with its queue empty: the
//!    release's exchange succeeds only from the dummy (invariant 3), so a
//!    message pushed before it fails it and the holder runs on. One pushed
//!    after it finds the mark and takes the role. No message is stranded.
//!    An actor that waits (its async handler is suspended, or it is between
//!    stopping and restarting) may give it up with messages queued; the next
//!    push takes the role and its turn finds it still waiting.
//! 6. Input that is not a message (a control signal, a woken future) is
//!    recorded first and then offered with `try_acquire`, a
//!    read-modify-write of `tail` that either takes a free role or, while
//!    the role is held, sets `PENDING` in `tail` (bit 1). The holder's
//!    release reads `tail` with `Acquire` (clearing `PENDING` with a
//!    read-modify-write if set), asks the caller whether recorded input
//!    waits, and only then exchanges exactly the value it read. The offer
//!    and the release are both read-modify-writes of `tail`, so one comes
//!    after the other in its history. An offer after the release finds the
//!    mark and takes the role. An offer between the release's read and its
//!    exchange changed the value (the mark, or a push's node), so the
//!    exchange fails and the holder looks again. An offer before the read
//!    left `PENDING` there, or a push replaced its mark since (and the
//!    holder may have taken that push's message already); either way the
//!    holder's read synchronized with the offer (a push's `swap` continues
//!    the offer's release sequence), so the question sees its input.
//!    So the release decides everything before its exchange, and the
//!    releasing thread never touches the queue (or the actor around it)
//!    after the exchange that may hand the role on (decision 0050).
//!
//! # Runs (invariant 7)
//!
//! A node may hold several messages (a *run*, `envelope.rs`): its sender
//! appends to it while it finds it at `tail`. The queue does not tell runs
//! from other nodes; the envelope's handler does, and the consumer takes a
//! run's messages one pop at a time.
//!
//! 7. A run is closed by the first take of a message out of it (a
//!    read-modify-write of its count); an append is a `compare_exchange`
//!    of that count, which fails once it is closed, and is made only by
//!    the run's sender. So a run the consumer has reached takes no more
//!    messages: what it holds is fixed before its first message is
//!    handled. An append is placed where its run lies, so a sender joins
//!    only a run where its push would have gone: the node at an unmarked
//!    `tail` ([`Queue::tail_for_sender`]), read just before the append. A
//!    link is not enough: a run whose link is null may have a push behind
//!    it between its two steps, and behind that a finished push of the
//!    same sender's (a task that moved between threads), which an append
//!    would overtake; the tail, swapped in each push's first step, never
//!    comes back to a node it left. An open run was not taken from, so it
//!    is queued ahead of the consumer: an append needs no wake-up, as the
//!    role's holder cannot give the role up before taking the run
//!    (invariant 5), or the actor waits and its wait's end runs it.
//!    After a take that leaves messages in the run the consumer makes the
//!    run the oldest node again ([`Consumer::repeat`]), in a register of
//!    its own while its `Consumer` lives and, when that ends first, behind
//!    the stub: the run is the dummy, past the stub, so the stub is out of
//!    the list (only a release puts it back, at the tail) and its link may
//!    point at the run, behind which producers still link their nodes.
//!
//! The single-consumer rule is enforced outside this module: only the thread
//! holding the role calls `pop` (see `cell.rs`).

use crate::primitives::sync::{AtomicPtr, AtomicU32, Ordering};
use std::ptr;

/// The link at the start of every queued node (`#[repr(C)]` structs put it
/// first so a node pointer and its link pointer are the same address).
#[repr(C)]
pub struct Link {
    next: AtomicPtr<Link>,
}

impl Link {
    pub fn new() -> Self {
        Link {
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// Outcome of [`Queue::pop`].
#[derive(Debug, PartialEq, Eq)]
pub enum Pop {
    /// The oldest message's node. Its message is the caller's to take; its
    /// memory stays the queue's (it is the new dummy) until a later pop or
    /// release retires it. `retired` is the old dummy, now the caller's to
    /// free; null when that was the stub.
    Data {
        node: *mut Link,
        retired: *mut Link,
    },
    /// The node a [`Consumer::repeat`] put back: a run with messages left
    /// (invariant 7), the dummy still, with nothing retired. Only a
    /// [`Consumer`]'s pop hands this out.
    Again(*mut Link),
    Empty,
    /// A producer is between its two steps; the message will be there soon.
    Inconsistent,
}

/// The low bit of `tail`: nobody holds the consumer role (invariant 4).
/// Nodes and the stub hold an `AtomicPtr`, so their addresses are
/// multiples of four at least, leaving two bits for marks.
const IDLE: usize = 1;
/// Bit 1 of `tail`: input was offered while the role was held
/// (invariant 6). Never set together with `IDLE`.
const PENDING: usize = 2;

#[inline]
fn is_idle(tail: *mut Link) -> bool {
    tail.addr() & IDLE != 0
}

#[inline]
fn unmarked(tail: *mut Link) -> *mut Link {
    tail.map_addr(|a| a & !(IDLE | PENDING))
}

/// `tail` last, next to the cell's run state: see the layout note on the
/// actor cell.
#[repr(C)]
pub struct Queue {
    /// Consumer-only. An atomic (always `Relaxed`) only so the type stays
    /// `Sync` without an `UnsafeCell` and loom sees every access.
    head: AtomicPtr<Link>,
    stub: Link,
    tail: AtomicPtr<Link>,
}

// SAFETY: the raw pointers are nodes owned by the queue; the protocol above
// makes concurrent producers and one consumer safe.
unsafe impl Send for Queue {}
// SAFETY: as for `Send`.
unsafe impl Sync for Queue {}

impl Queue {
    /// An empty queue whose creator holds the consumer role.
    pub fn new() -> Self {
        Queue {
            head: AtomicPtr::new(ptr::null_mut()),
            stub: Link::new(),
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    fn stub(&self) -> *mut Link {
        &self.stub as *const Link as *mut Link
    }

    /// The node a `tail` value stands for: the mark stripped, null for
    /// the stub.
    #[inline]
    fn resolve(&self, p: *mut Link) -> *mut Link {
        let p = unmarked(p);
        if p.is_null() {
            self.stub()
        } else {
            p
        }
    }

    /// Appends a node. Wait-free: one swap and one store. Returns `true` if
    /// nobody held the consumer role: the caller now holds it (invariant 4)
    /// and must run the actor or hand it on.
    ///
    /// # Safety
    /// `node` must be a valid, exclusively owned node that stays allocated
    /// until `pop` returns it; the queue must not move while it holds nodes.
    #[inline]
    #[must_use = "a push that takes the consumer role must run the actor or hand it on"]
    pub unsafe fn push(&self, node: *mut Link) -> bool {
        // SAFETY: `node` is valid and ours (contract).
        unsafe { (*node).next.store(ptr::null_mut(), Ordering::Relaxed) };
        // SeqCst: the role's hand-over relies on it (invariant 6).
        let prev = self.tail.swap(node, Ordering::SeqCst);
        // Publishing the link is the second step; between the two the queue
        // is "inconsistent" (invariant 1).
        // SAFETY: `prev` was the tail: the stub (part of the queue, which
        // does not move) or a node still allocated until `pop` returns it,
        // which cannot happen before this store links it (invariant 2).
        unsafe { (*self.resolve(prev)).next.store(node, Ordering::Release) };
        is_idle(prev)
    }

    /// The queue's address, which names it while it lives: a sender keeps
    /// its last run under it (`nodes.rs`). Only compared; a queue freed and
    /// another at its address finds the old run closed (a mailbox's drop
    /// takes every message).
    #[inline]
    pub fn key(&self) -> usize {
        self as *const Queue as usize
    }

    /// The node at the tail, for a sender that may add to its own run there
    /// (invariant 7): null if it is the stub or nobody holds the consumer
    /// role (an idle actor's tail is a node already taken, and a waiting
    /// actor is woken by a push, not an append). The node may be taken and
    /// freed at any moment; the caller reads it only where it knows its
    /// memory to be in place.
    #[inline]
    pub fn tail_for_sender(&self) -> *mut Link {
        let tail = self.tail.load(Ordering::Acquire);
        if is_idle(tail) {
            ptr::null_mut()
        } else {
            unmarked(tail)
        }
    }

    /// Makes the dummy, a node whose messages are not all taken (a run
    /// whose handler panicked, invariant 7), the oldest node again, behind
    /// the stub: the next pop hands it out once more.
    ///
    /// # Safety
    /// The caller holds the consumer role, no [`Consumer`] of this queue is
    /// alive, and the dummy is not the stub.
    pub unsafe fn take_dummy_again(&self) {
        // SAFETY: contract.
        unsafe { self.put_behind_stub(self.dummy()) };
    }

    /// Makes `node`, the dummy, the oldest node behind the stub.
    ///
    /// # Safety
    /// As for [`take_dummy_again`](Self::take_dummy_again); `node` is the
    /// dummy (in `head`, or in the holder's [`Consumer`]).
    unsafe fn put_behind_stub(&self, node: *mut Link) {
        debug_assert!(node != self.stub());
        // SAFETY: the dummy is past the stub, so the stub is out of the
        // list: no producer can reach it (only a release puts it back at
        // the tail) and its link is ours (invariant 7).
        unsafe { (*self.stub()).next.store(node, Ordering::Relaxed) };
        self.head.store(ptr::null_mut(), Ordering::Relaxed);
    }

    /// The dummy (invariant 2), null if it is the stub: for a consumer
    /// that asks whether its messages are all taken.
    ///
    /// # Safety
    /// As for [`pop`](Self::pop).
    pub unsafe fn dummy_node(&self) -> *mut Link {
        let head = self.dummy();
        if head == self.stub() {
            ptr::null_mut()
        } else {
            head
        }
    }

    /// Takes the consumer role if nobody holds it; `true` if the caller
    /// now does. For input that is not a message (invariant 6): record it
    /// first, then offer it with this. While the role is held it marks
    /// `tail` `PENDING` instead, so the holder's release fails if it was
    /// under way, and asks for the input before it lets go.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let offered = if is_idle(tail) {
                unmarked(tail)
            } else {
                tail.map_addr(|a| a | PENDING)
            };
            match self.tail.compare_exchange_weak(
                tail,
                offered,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(seen) => return is_idle(seen),
                Err(now) => tail = now,
            }
        }
    }

    /// Gives up the consumer role, if the queue is empty or `even_if_queued`
    /// (an actor that waits; invariant 5), and no input was offered
    /// meanwhile (invariant 6). [`Release::Kept`]: a message is queued or
    /// input was offered, and the caller still holds the role and must
    /// look for both. `input_waiting` says whether recorded input (a
    /// signal, a wake-up) waits; it is asked between the release's read of
    /// `tail` and its exchange. After
    /// [`Release::Released`] the caller must free the retired node it
    /// carries (if any) and not touch the queue again: the role, and with
    /// it the queue, may already belong to another thread.
    ///
    /// # Safety
    /// The caller holds the consumer role, and no [`Consumer`] of this
    /// queue is alive.
    #[inline]
    #[must_use = "a released queue may hand back a node to free"]
    pub unsafe fn release(
        &self,
        even_if_queued: bool,
        mut input_waiting: impl FnMut() -> bool,
    ) -> Release {
        let stub = self.stub();
        let head = self.dummy();
        // The holder's view: not `IDLE` (invariant 4). `Acquire`: see the
        // input of an offer whose mark a push replaced (invariant 6).
        let mut tail = self.tail.load(Ordering::Acquire);
        loop {
            if tail.addr() & PENDING != 0 {
                // Input was offered while the role was held. Clear the
                // mark; the exchange reads the offer's value, so its input
                // is visible to the question below, which keeps the role
                // unless the turn has taken that input already (a signal
                // arriving mid-turn usually is: the turn looks for signals
                // before every message). Asking instead of keeping the role
                // at once spares such an actor a turn with nothing to do.
                match self.tail.compare_exchange(
                    tail,
                    unmarked(tail),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => tail = unmarked(tail),
                    Err(now) => {
                        tail = now;
                        continue;
                    }
                }
            }
            let empty = self.resolve(tail) == head;
            if !empty && !even_if_queued {
                return Release::Kept;
            }
            if input_waiting() {
                return Release::Kept;
            }
            // Empty behind a taken node: swing `tail` back to the stub and
            // retire the node (invariant 3). The stub is out of the list
            // (the dummy is past it), so its link is ours to clear.
            // The stub becomes the dummy *before* the exchange publishes
            // the release: the next holder reads `head` after taking the
            // role, and must not find the node this one is about to free.
            let retire = empty && head != stub;
            let marked = if retire {
                // SAFETY: the stub is part of the queue and not linked in.
                unsafe { (*stub).next.store(ptr::null_mut(), Ordering::Relaxed) };
                self.head.store(ptr::null_mut(), Ordering::Relaxed);
                stub.map_addr(|a| a | IDLE)
            } else {
                tail.map_addr(|a| a | IDLE)
            };
            match self
                .tail
                .compare_exchange(tail, marked, Ordering::SeqCst, Ordering::Acquire)
            {
                Ok(_) => {
                    return Release::Released {
                        retired: if retire { head } else { ptr::null_mut() },
                    }
                }
                // A push or an offer moved it: look again, with the dummy
                // back in place.
                Err(now) => {
                    if retire {
                        self.head.store(head, Ordering::Relaxed);
                    }
                    tail = now;
                }
            }
        }
    }

    /// The dummy head (invariant 2), resolved.
    #[inline]
    fn dummy(&self) -> *mut Link {
        self.resolve(self.head.load(Ordering::Relaxed))
    }

    /// Takes the dummy out of a queue that will not be used again, for its
    /// owner to free; null if it is the stub.
    ///
    /// # Safety
    /// The caller owns the queue alone (its `Drop`), has popped everything
    /// and does not push or pop afterwards.
    pub unsafe fn take_dummy(&self) -> *mut Link {
        let head = self.dummy();
        self.head.store(ptr::null_mut(), Ordering::Relaxed);
        if head == self.stub() {
            ptr::null_mut()
        } else {
            head
        }
    }

    /// `true` if nobody held the consumer role at this load: a hint, as
    /// it may be taken the next moment (an ask handled where it is sent
    /// looks before it offers, so as not to disturb a holder).
    #[inline]
    pub fn is_idle(&self) -> bool {
        is_idle(self.tail.load(Ordering::SeqCst))
    }

    /// Takes the oldest node.
    ///
    /// # Safety
    /// Only one thread at a time may call `pop` (the actor's consumer), and
    /// not while a [`Consumer`] of this queue is alive.
    pub unsafe fn pop(&self) -> Pop {
        let mut head = self.head.load(Ordering::Relaxed);
        // SAFETY: we are the only consumer (contract).
        let popped = unsafe { self.pop_from(&mut head) };
        self.head.store(head, Ordering::Relaxed);
        popped
    }

    /// The consumer side for a run of pops: `head` stays in a register
    /// instead of being stored after every pop. `head` shares a cache line
    /// with the producers' `tail`, so a store per message would bounce that
    /// line between cores on every message (padding them apart would cost
    /// more than the whole actor is allowed to weigh).
    ///
    /// # Safety
    /// As for [`pop`](Self::pop); the queue's `head` is written back when
    /// the `Consumer` drops (also when unwinding).
    pub unsafe fn consumer(&self) -> Consumer<'_> {
        Consumer {
            queue: self,
            head: self.head.load(Ordering::Relaxed),
            again: ptr::null_mut(),
        }
    }

    /// Takes the oldest node, with the consumer's `head` in `head_slot`.
    ///
    /// # Safety
    /// As for [`pop`](Self::pop); `head_slot` holds this queue's `head`.
    #[inline]
    unsafe fn pop_from(&self, head_slot: &mut *mut Link) -> Pop {
        let stub = self.stub();
        // A stored stub address carries the provenance of whichever borrow
        // of the queue stored it; use the one from `self` instead, so the
        // owner's `&mut` (in the cell's `Drop`) is never bypassed. Miri's
        // borrow checking holds us to this; the compiled code is the same.
        let head = match *head_slot {
            p if p.is_null() || p == stub => stub,
            p => p,
        };
        // SAFETY: `head` is the stub or a taken node still in the list,
        // allocated until retired (invariant 2), which only we do.
        let next = unsafe { (*head).next.load(Ordering::Acquire) };
        if !next.is_null() {
            *head_slot = next;
            let retired = if head == stub { ptr::null_mut() } else { head };
            return Pop::Data {
                node: next,
                retired,
            };
        }
        if self.resolve(self.tail.load(Ordering::Acquire)) == head {
            Pop::Empty
        } else {
            Pop::Inconsistent
        }
    }

    /// How many nodes are queued, counting at most `cap` (an observer's
    /// sample of the mailbox's depth). Walks the links from `head` the way
    /// `pop` would, without taking anything; a node whose producer is still
    /// between its two steps (invariant 1) is not counted yet.
    ///
    /// # Safety
    /// As for [`pop`](Self::pop): only the consumer calls it, and not while
    /// a [`Consumer`] of this queue is alive.
    #[cfg(test)]
    pub unsafe fn count_up_to(&self, cap: u32) -> u32 {
        // SAFETY: contract.
        unsafe { self.count_with(cap, |_| 0, |_| 1) }
    }

    /// As [`count_up_to`](Self::count_up_to), counting each queued node as
    /// the messages `weight` says it holds (a run holds several, invariant
    /// 7) and the dummy as the ones `left` says it still holds.
    ///
    /// # Safety
    /// As for [`count_up_to`](Self::count_up_to); `left` and `weight` only
    /// read the nodes they are given.
    pub unsafe fn count_with(
        &self,
        cap: u32,
        left: impl Fn(*mut Link) -> u32,
        weight: impl Fn(*mut Link) -> u32,
    ) -> u32 {
        let mut node = self.dummy();
        let mut count = if node == self.stub() { 0 } else { left(node) };
        while count < cap {
            // SAFETY: `node` is the dummy or a queued node, and the nodes its
            // links lead to are queued too; only this consumer retires them
            // (invariant 2).
            let next = unsafe { (*node).next.load(Ordering::Acquire) };
            if next.is_null() {
                break;
            }
            count = count.saturating_add(weight(next));
            node = next;
        }
        count.min(cap)
    }

    /// True when no message is queued or being pushed (invariant 3).
    ///
    /// # Safety
    /// As for [`pop`](Self::pop): only the consumer asks, and not while a
    /// [`Consumer`] of this queue is alive.
    #[inline]
    pub unsafe fn looks_empty(&self) -> bool {
        self.resolve(self.tail.load(Ordering::SeqCst)) == self.dummy()
    }
}

/// The count of a run (invariant 7): how many of its slots its sender
/// published, and whether the consumer closed it.
pub struct RunCount {
    count: AtomicU32,
}

/// Set in a run's count by the consumer's first take.
const RUN_CLOSED: u32 = 1 << 31;

impl RunCount {
    /// A run whose first slot is published.
    pub fn new() -> Self {
        RunCount {
            count: AtomicU32::new(1),
        }
    }

    /// For the run's sender: how many slots it published, or, as the
    /// error, how many the run held when the consumer closed it. Only the
    /// sender raises the count, so it reads its own last value; a close it
    /// does not see yet fails [`append`](Self::append).
    #[inline]
    pub fn open_count(&self) -> Result<u32, u32> {
        let count = self.count.load(Ordering::Relaxed);
        if count & RUN_CLOSED == 0 {
            Ok(count)
        } else {
            Err(count & !RUN_CLOSED)
        }
    }

    /// For the run's sender, after writing slot `count` (its last
    /// [`open_count`](Self::open_count)): publishes it. `false` if the
    /// consumer closed the run first; the slot was then never published
    /// and its message is the sender's again.
    #[inline]
    pub fn append(&self, count: u32) -> bool {
        // Release: the slot's message is written before it is published.
        self.count
            .compare_exchange(count, count + 1, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// For the consumer, at its first take: closes the run and returns how
    /// many messages it holds, every one visible (the appends' releases).
    #[inline]
    pub fn close(&self) -> u32 {
        self.count.fetch_or(RUN_CLOSED, Ordering::Acquire) & !RUN_CLOSED
    }

    /// For the consumer, of a run it has not closed (an observer's count of
    /// the mailbox): how many messages it holds now.
    #[inline]
    pub fn published(&self) -> u32 {
        self.count.load(Ordering::Relaxed) & !RUN_CLOSED
    }
}

impl Default for RunCount {
    fn default() -> Self {
        Self::new()
    }
}

/// Outcome of [`Queue::release`].
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// A message is queued: the caller still holds the consumer role.
    Kept,
    /// The role is free. `retired` is a node for the caller to free (null
    /// if none): the dummy the release took out of the list.
    Released { retired: *mut Link },
}

/// A run of pops by the consumer; see [`Queue::consumer`].
pub struct Consumer<'a> {
    queue: &'a Queue,
    head: *mut Link,
    /// The node [`repeat`](Self::repeat) put back, null if none: kept here
    /// rather than behind the stub, whose link shares a cache line with
    /// `tail`, so a run's messages are taken without writing the line
    /// every producer swaps.
    again: *mut Link,
}

impl Consumer<'_> {
    /// Takes the oldest node.
    #[inline]
    pub fn pop(&mut self) -> Pop {
        if !self.again.is_null() {
            return Pop::Again(std::mem::replace(&mut self.again, ptr::null_mut()));
        }
        // SAFETY: creating the `Consumer` required being the only consumer.
        unsafe { self.queue.pop_from(&mut self.head) }
    }

    /// Puts back the node the last pop took: it is the oldest again, and
    /// that pop's `retired` the dummy again. For a consumer that must see
    /// to something else before the message (a signal sent before it).
    /// The old dummy is still linked to the node (only a producer writes a
    /// `next`, and only the tail's), and nothing but this consumer moves
    /// `head` or retires nodes (invariant 2).
    ///
    /// # Safety
    /// `retired` is what the last [`pop`](Self::pop) of this consumer
    /// returned with [`Pop::Data`]; its node's message has not been taken
    /// and `retired` has not been freed.
    #[inline]
    pub unsafe fn unpop(&mut self, retired: *mut Link) {
        self.head = if retired.is_null() {
            self.queue.stub()
        } else {
            retired
        };
    }
}

impl Consumer<'_> {
    /// Makes `node`, which the last pop handed out and whose messages are
    /// not all taken (a run, invariant 7), the oldest node again: the next
    /// pop hands it out once more, with no node retired.
    ///
    /// # Safety
    /// `node` is what the last [`pop`](Self::pop) of this consumer returned
    /// with [`Pop::Data`] or [`Pop::Again`] (so it is the dummy, past the
    /// stub), and that pop's `retired` was not put back with
    /// [`unpop`](Self::unpop).
    #[inline]
    pub unsafe fn repeat(&mut self, node: *mut Link) {
        debug_assert_eq!(self.head, node);
        self.again = node;
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        if self.again.is_null() {
            self.queue.head.store(self.head, Ordering::Relaxed);
        } else {
            // A node put back and not popped again: it goes behind the
            // stub, for the next pop of the queue (invariant 7).
            // SAFETY: the holder's `Consumer` (its creation's contract);
            // `again` is the dummy, past the stub.
            unsafe { self.queue.put_behind_stub(self.again) };
        }
    }
}

/// Control signals: many producers, one consumer that takes all at once.
///
/// There is no ABA hazard: the consumer never pops a single node, it swaps
/// the whole stack out, and producers only ever compare against the value
/// they read as the top before linking their node to it.
pub struct SignalStack {
    top: AtomicPtr<Link>,
}

// SAFETY: see `Queue`.
unsafe impl Send for SignalStack {}
// SAFETY: see `Queue`.
unsafe impl Sync for SignalStack {}

impl SignalStack {
    pub fn new() -> Self {
        SignalStack {
            top: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// # Safety
    /// `node` must be a valid, exclusively owned node.
    pub unsafe fn push(&self, node: *mut Link) {
        let mut top = self.top.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is valid and ours until the exchange publishes
            // it (contract).
            unsafe { (*node).next.store(top, Ordering::Relaxed) };
            match self
                .top
                .compare_exchange_weak(top, node, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => top = actual,
            }
        }
    }

    /// Takes every queued node, oldest first, by following `next`.
    ///
    /// # Safety
    /// Only the actor's consumer may call this.
    pub unsafe fn take_all(&self) -> *mut Link {
        let mut node = self.top.swap(ptr::null_mut(), Ordering::Acquire);
        // Reverse the LIFO chain into arrival order.
        let mut ordered = ptr::null_mut();
        while !node.is_null() {
            // SAFETY: the swap took every node off the stack: they are ours
            // (only the consumer takes, by contract) and still allocated.
            let next = unsafe { (*node).next.load(Ordering::Relaxed) };
            // SAFETY: as above.
            unsafe { (*node).next.store(ordered, Ordering::Relaxed) };
            ordered = node;
            node = next;
        }
        ordered
    }

    #[inline]
    pub fn looks_empty(&self) -> bool {
        self.top.load(Ordering::SeqCst).is_null()
    }

    /// As [`looks_empty`](Self::looks_empty), unordered: for a consumer
    /// that polls between calls of its own (a `LocalActor`) and acts on a
    /// non-empty answer with [`take_all`](Self::take_all), whose acquire
    /// does the synchronising. Coherence still shows it every push that
    /// happened before the poll; a push racing with it is seen at the next
    /// poll, as it would be after a `SeqCst` load that lost the race. Being
    /// unordered, it lets the compiler keep the caller's other state in
    /// registers across the poll.
    #[inline]
    pub fn looks_empty_unordered(&self) -> bool {
        self.top.load(Ordering::Relaxed).is_null()
    }

    /// Next node of a chain returned by [`take_all`](Self::take_all).
    ///
    /// # Safety
    /// `node` must come from `take_all` and not be freed yet.
    pub unsafe fn next_of(node: *mut Link) -> *mut Link {
        // SAFETY: `node` is a live node of a taken chain (contract).
        unsafe { (*node).next.load(Ordering::Relaxed) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[repr(C)]
    struct Node {
        link: Link,
        value: u64,
    }

    fn node(value: u64) -> *mut Link {
        Box::into_raw(Box::new(Node {
            link: Link::new(),
            value,
        })) as *mut Link
    }

    /// Frees a node from [`node`] (null: nothing).
    ///
    /// # Safety
    /// `p` came from [`node`] and the queue gave up its memory (retired).
    unsafe fn free(p: *mut Link) {
        if !p.is_null() {
            // SAFETY: a `Node` from `Box::into_raw` (contract).
            drop(unsafe { Box::from_raw(p as *mut Node) });
        }
    }

    /// The next value, as a cell takes a message: the value is read, the
    /// node stays the queue's, and the node it retires is freed.
    ///
    /// # Safety
    /// The caller is the only consumer; every node came from [`node`].
    unsafe fn pop_value(q: &Queue) -> Result<u64, Pop> {
        // SAFETY: contract.
        unsafe {
            match q.pop() {
                Pop::Data { node, retired } => {
                    free(retired);
                    Ok((*(node as *mut Node)).value)
                }
                other => Err(other),
            }
        }
    }

    /// Releases the role (see [`Queue::release`]), freeing what it retires;
    /// `true` if it was released.
    ///
    /// # Safety
    /// As for `Queue::release`; every node came from [`node`].
    unsafe fn release(q: &Queue, even_if_queued: bool) -> bool {
        // SAFETY: contract.
        match unsafe { q.release(even_if_queued, || false) } {
            Release::Kept => false,
            Release::Released { retired } => {
                // SAFETY: handed over by the release.
                unsafe { free(retired) };
                true
            }
        }
    }

    /// Frees what a test leaves in the queue: its messages and its dummy.
    ///
    /// # Safety
    /// The queue is not used afterwards; every node came from [`node`].
    unsafe fn empty(q: &Queue) {
        // SAFETY: contract.
        unsafe {
            while pop_value(q).is_ok() {}
            free(q.take_dummy());
        }
    }

    #[test]
    fn fifo_single_thread() {
        let q = Queue::new();
        // SAFETY: one thread, so it is the only consumer; nodes come from
        // `node` and are freed once each, when the queue retires them.
        unsafe {
            assert!(q.looks_empty());
            assert_eq!(pop_value(&q), Err(Pop::Empty));
            for i in 0..10 {
                assert!(!q.push(node(i)), "the creator holds the role");
            }
            assert!(!q.looks_empty());
            for i in 0..10 {
                assert_eq!(pop_value(&q), Ok(i));
            }
            assert_eq!(pop_value(&q), Err(Pop::Empty));
            assert!(
                q.looks_empty(),
                "the last node taken is a dummy, not a message"
            );
            // A push behind a taken node, then one behind the stub again.
            assert!(!q.push(node(42)));
            assert_eq!(pop_value(&q), Ok(42));
            assert!(release(&q, false), "empty: the role is let go");
            assert!(q.push(node(43)), "and the next push takes it");
            assert_eq!(pop_value(&q), Ok(43));
            empty(&q);
        }
    }

    /// A node put back is the oldest again, from behind the stub and from
    /// behind a taken node, and nothing is lost or freed twice.
    #[test]
    fn a_node_put_back_is_popped_again_first() {
        let q = Queue::new();
        // SAFETY: as in `fifo_single_thread`; each `unpop` gets the
        // `retired` of the pop just before it, unfreed.
        unsafe {
            for i in 0..3 {
                assert!(!q.push(node(i)));
            }
            let mut c = q.consumer();
            let Pop::Data { retired, .. } = c.pop() else {
                panic!("a node is queued")
            };
            assert!(retired.is_null(), "the first pop leaves the stub");
            c.unpop(retired);
            drop(c);
            assert_eq!(pop_value(&q), Ok(0), "put back behind the stub");
            let mut c = q.consumer();
            let Pop::Data {
                node: taken,
                retired,
            } = c.pop()
            else {
                panic!("a node is queued")
            };
            assert_eq!((*(taken as *mut Node)).value, 1);
            assert!(!retired.is_null(), "behind a taken node");
            c.unpop(retired);
            drop(c);
            assert_eq!(q.count_up_to(10), 2, "both still queued");
            assert!(!release(&q, false), "not empty: the role is kept");
            assert_eq!(pop_value(&q), Ok(1));
            assert_eq!(pop_value(&q), Ok(2));
            assert!(release(&q, false));
            empty(&q);
        }
    }

    /// A node made the oldest again (a run with messages left, invariant
    /// 7) is handed out again with nothing retired, from behind a taken
    /// node and from behind the stub, also while producers push behind it,
    /// and the queue stays whole: a release keeps the role while it is
    /// queued, and after it the nodes behind it come in order.
    #[test]
    fn a_node_repeated_is_popped_again_and_the_queue_stays_whole() {
        let q = Queue::new();
        // SAFETY: as in `fifo_single_thread`; `repeat` gets the node of
        // the pop just before it.
        unsafe {
            for i in 0..2 {
                assert!(!q.push(node(i)));
            }
            assert_eq!(pop_value(&q), Ok(0));
            let mut c = q.consumer();
            let Pop::Data { node: run, retired } = c.pop() else {
                panic!("a node is queued")
            };
            assert!(!retired.is_null(), "behind a taken node");
            free(retired);
            assert_eq!(run, q.tail_for_sender(), "the run is the tail");
            c.repeat(run);
            assert_eq!(c.pop(), Pop::Again(run), "handed out again");
            c.repeat(run);
            drop(c);
            assert!(!q.looks_empty(), "the run is queued again");
            assert!(!release(&q, false), "so the role is kept");
            assert!(!q.push(node(2)), "a push behind the run");
            for _ in 0..3 {
                let mut c = q.consumer();
                let Pop::Data {
                    node: again,
                    retired,
                } = c.pop()
                else {
                    panic!("the run is queued")
                };
                assert_eq!(again, run);
                assert!(retired.is_null(), "the stub stood in front of it");
                c.repeat(again);
            }
            assert_eq!(q.count_with(10, |_| 0, |_| 1), 2, "the run and 2");
            let mut c = q.consumer();
            let Pop::Data { node: last, .. } = c.pop() else {
                panic!("the run is queued")
            };
            assert_eq!(last, run);
            drop(c);
            // Done with the run: the next pop retires it.
            let Pop::Data { node: two, retired } = q.pop() else {
                panic!("2 is queued")
            };
            assert_eq!(retired, run);
            free(retired);
            assert_eq!((*(two as *mut Node)).value, 2);
            assert!(release(&q, false), "empty: the role is let go");
            assert!(
                q.tail_for_sender().is_null(),
                "an idle tail is never appended to"
            );
            assert!(q.push(node(3)), "and the next push takes the role");
            assert_eq!(pop_value(&q), Ok(3));
            empty(&q);
        }
    }

    /// The dummy taken again (after a panic in a run's handler) is the
    /// oldest node once more.
    #[test]
    fn the_dummy_taken_again_is_popped_again() {
        let q = Queue::new();
        // SAFETY: as in `fifo_single_thread`.
        unsafe {
            assert!(!q.push(node(0)));
            assert!(!q.push(node(1)));
            let Pop::Data {
                node: first,
                retired,
            } = q.pop()
            else {
                panic!("a node is queued")
            };
            assert!(retired.is_null());
            assert_eq!(q.dummy_node(), first);
            q.take_dummy_again();
            assert!(q.dummy_node().is_null(), "the stub stands in front");
            let Pop::Data {
                node: again,
                retired,
            } = q.pop()
            else {
                panic!("it is queued again")
            };
            assert_eq!((again, retired), (first, ptr::null_mut()));
            assert_eq!(pop_value(&q), Ok(1));
            empty(&q);
        }
    }

    #[test]
    fn a_depth_sample_counts_what_is_queued_and_takes_nothing() {
        let q = Queue::new();
        // SAFETY: as in `fifo_single_thread`.
        unsafe {
            assert_eq!(q.count_up_to(100), 0);
            for i in 0..5 {
                assert!(!q.push(node(i)));
            }
            assert_eq!(q.count_up_to(100), 5);
            assert_eq!(q.count_up_to(3), 3, "the cap bounds the walk");
            // The node taken last stays as the dummy: it is not a message.
            for i in 0..5 {
                assert_eq!(pop_value(&q), Ok(i));
                assert_eq!(q.count_up_to(100), 4 - i as u32);
            }
            assert!(!q.push(node(7)));
            assert!(!q.push(node(8)));
            assert_eq!(q.count_up_to(100), 2);
            while pop_value(&q).is_ok() {}
            assert_eq!(q.count_up_to(100), 0);
            empty(&q);
        }
    }

    #[test]
    fn the_role_passes_with_the_tail() {
        let q = Queue::new();
        // SAFETY: one thread, which holds the role whenever it pops or
        // releases; nodes come from `node` and are freed once each.
        unsafe {
            assert!(!q.is_idle(), "the creator holds the role");
            assert!(!q.try_acquire(), "a held role cannot be taken");
            assert!(release(&q, false), "an empty queue's holder lets go");
            assert!(q.is_idle());
            assert!(q.push(node(1)), "the first push takes the free role");
            assert!(!q.is_idle());
            assert!(!q.push(node(2)), "only one push takes it");
            assert!(
                !release(&q, false),
                "a running actor keeps it while messages wait"
            );
            assert_eq!(pop_value(&q), Ok(1));
            assert!(!release(&q, false), "one message is still queued");
            assert!(
                release(&q, true),
                "a waiting actor lets go with messages queued"
            );
            assert!(q.try_acquire(), "an offer takes the free role");
            assert!(!q.try_acquire(), "once");
            assert_eq!(pop_value(&q), Ok(2));
            assert_eq!(pop_value(&q), Err(Pop::Empty));
            // Empty behind a taken node: the release puts the stub back and
            // retires the node (freed in `release`; Miri checks it is freed
            // once and not used after).
            assert!(release(&q, false));
            assert!(
                q.push(node(3)),
                "a push after the last pop takes the role again"
            );
            assert_eq!(pop_value(&q), Ok(3));
            empty(&q);
        }
    }

    #[test]
    fn input_offered_while_the_role_is_held_is_never_lost() {
        let q = Queue::new();
        // SAFETY: one thread, which holds the role whenever it pops or
        // releases; nodes come from `node` and are freed once each.
        unsafe {
            // A running actor: an offer marks `tail`, and the next release
            // asks whether input waits before letting go.
            assert!(!q.try_acquire());
            assert!(!q.try_acquire(), "two offers leave one mark");
            let kept = q.release(false, || true);
            assert_eq!(kept, Release::Kept, "the offered input keeps the role");
            assert!(!q.try_acquire());
            let mut asked = 0;
            let released = q.release(false, || {
                asked += 1;
                false
            });
            assert_eq!(
                released,
                Release::Released {
                    retired: ptr::null_mut()
                },
                "input the turn already took does not keep it"
            );
            assert_eq!(asked, 1);
            assert!(q.try_acquire());
            // A waiting actor, whose offer's mark a push replaced: the
            // release asks whether input waits, and keeps the role if so.
            assert!(!q.try_acquire());
            assert!(!q.push(node(1)));
            let mut asked = 0;
            let kept = q.release(true, || {
                asked += 1;
                true
            });
            assert_eq!(kept, Release::Kept);
            assert_eq!(asked, 1, "asked once, before the exchange");
            assert_eq!(
                q.release(true, || false),
                Release::Released {
                    retired: ptr::null_mut()
                },
                "no input: a waiting actor lets go with a message queued"
            );
            assert!(q.try_acquire());
            assert_eq!(pop_value(&q), Ok(1));
            empty(&q);
        }
    }

    #[test]
    fn signal_stack_keeps_arrival_order() {
        let s = SignalStack::new();
        // SAFETY: as in `fifo_single_thread`.
        unsafe {
            for i in 0..5 {
                s.push(node(i));
            }
            let mut p = s.take_all();
            let mut seen = vec![];
            while !p.is_null() {
                let next = SignalStack::next_of(p);
                seen.push((*(p as *mut Node)).value);
                free(p);
                p = next;
            }
            assert_eq!(seen, vec![0, 1, 2, 3, 4]);
            assert!(s.looks_empty());
        }
    }

    /// Many producers, one consumer, per-producer FIFO and no loss or
    /// duplication. Run it under `--release` too: the inconsistent window is
    /// only a few instructions wide.
    #[test]
    fn stress_many_producers() {
        use std::sync::Arc;
        const PRODUCERS: u64 = 8;
        const PER: u64 = 50_000;
        let q = Arc::new(Queue::new());
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        // SAFETY: a fresh node; `q` outlives the threads.
                        // The consumer below keeps the role throughout.
                        let took_role = unsafe { q.push(node(p << 32 | i)) };
                        assert!(!took_role);
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; PRODUCERS as usize];
        let mut got = 0;
        while got < PRODUCERS * PER {
            // SAFETY: this thread is the only consumer.
            match unsafe { pop_value(&q) } {
                Ok(v) => {
                    let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                    assert_eq!(i, next[p], "producer {p} out of order");
                    next[p] += 1;
                    got += 1;
                }
                Err(_) => std::thread::yield_now(),
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        // SAFETY: the only consumer, and the producers are done.
        unsafe {
            assert_eq!(pop_value(&q), Err(Pop::Empty));
            empty(&q);
        }
    }
}
