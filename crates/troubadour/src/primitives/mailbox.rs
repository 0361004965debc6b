//! The two lock-free queues every actor owns.
//!
//! * [`Queue`]: user messages. An intrusive multi-producer single-consumer
//!   FIFO after Dmitry Vyukov's design. A push is one `swap` and one store,
//!   wait-free for producers, which is what keeps fan-in fast when many OS
//!   threads (more than there are cores) send to one actor: a producer
//!   preempted mid-push delays only the consumer, never other producers, and
//!   nobody walks a list of blocks. The message lives inside its node, so a
//!   message costs exactly one allocation.
//! * [`SignalStack`]: control signals (stop, exit signals, supervision). A
//!   Treiber stack the consumer empties in one `swap` and reverses, so signals
//!   keep their order among themselves. Signals are rare; eight bytes per actor
//!   matter more than constant factors here.
//!
//! # Invariants (`Queue`)
//!
//! Nodes form a singly linked list from `head` (consumer end) to `tail`
//! (producer end). A fixed `stub` node, embedded in the queue, is in the list
//! whenever the list would otherwise be empty; `null` in `head` or `tail`
//! stands for the stub, so a queue can be built before it reaches its final
//! address (the stub's address is only taken once the queue is in place).
//!
//! 1. Producers only touch `tail` (one `swap`) and then the `next` field of
//!    the node they displaced. After the swap, the new node is reachable from
//!    `tail` but not yet from `head`: the list is "inconsistent" until the
//!    producer's second store publishes the link. The consumer detects that
//!    window (`head` has no `next` but is not `tail`) and reports
//!    [`Pop::Inconsistent`]; it never skips the node, so no message is lost
//!    and per-producer FIFO order holds (each producer's swaps are ordered,
//!    and the links follow swap order).
//! 2. Only the consumer touches `head` and frees nodes, and a node is handed
//!    out only once its successor is linked (or the stub was pushed behind
//!    it), so no producer can still be writing into a node the consumer
//!    returned. That is why the last real node stays in the list until the
//!    stub is re-pushed behind it.
//! 3. The queue is empty exactly when `tail` is the stub: every push moves
//!    `tail` off the stub and only a re-push of the stub moves it back, after
//!    which the consumer has taken everything before it. Any thread may test
//!    this ([`Queue::looks_empty`]), which the scheduling protocol in
//!    `cell.rs` relies on after it releases the consumer role.
//!
//! The single-consumer rule is enforced outside this module: only the thread
//! holding an actor's `SCHEDULED` bit calls `pop` (see `cell.rs`).

use crate::primitives::sync::{AtomicPtr, Ordering};
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
    Data(*mut Link),
    Empty,
    /// A producer is between its two steps; the message will be there soon.
    Inconsistent,
}

/// `tail` last: see the layout note on the actor cell.
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

    #[inline]
    fn resolve(&self, p: *mut Link) -> *mut Link {
        if p.is_null() {
            self.stub()
        } else {
            p
        }
    }

    /// Appends a node. Wait-free: one swap and one store.
    ///
    /// # Safety
    /// `node` must be a valid, exclusively owned node that stays allocated
    /// until `pop` returns it; the queue must not move while it holds nodes.
    #[inline]
    pub unsafe fn push(&self, node: *mut Link) {
        // SAFETY: `node` is valid and ours (contract).
        unsafe { (*node).next.store(ptr::null_mut(), Ordering::Relaxed) };
        // SeqCst: the scheduling protocol's fast path relies on it (run_state.rs).
        let prev = self.resolve(self.tail.swap(node, Ordering::SeqCst));
        // Publishing the link is the second step; between the two the queue
        // is "inconsistent" (invariant 1).
        // SAFETY: `prev` was the tail: the stub (part of the queue, which
        // does not move) or a node still allocated until `pop` returns it,
        // which cannot happen before this store links it (invariant 2).
        unsafe { (*prev).next.store(node, Ordering::Release) };
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
        let mut head = match *head_slot {
            p if p.is_null() || p == stub => stub,
            p => p,
        };
        // SAFETY: (and for every dereference below) `head` and the `next` nodes it
        // leads to are the stub or queued nodes, which stay allocated until
        // this, the only consumer, hands them out.
        let mut next = unsafe { (*head).next.load(Ordering::Acquire) };
        if head == stub {
            if next.is_null() {
                return if self.resolve(self.tail.load(Ordering::Acquire)) == stub {
                    Pop::Empty
                } else {
                    Pop::Inconsistent
                };
            }
            *head_slot = next;
            head = next;
            // SAFETY: as above.
            next = unsafe { (*next).next.load(Ordering::Acquire) };
        }
        if !next.is_null() {
            *head_slot = next;
            return Pop::Data(head);
        }
        if head != self.resolve(self.tail.load(Ordering::Acquire)) {
            return Pop::Inconsistent;
        }
        // `head` is the last node: put the stub behind it so it can be
        // handed out (invariant 2).
        // SAFETY: the stub is part of the queue and no longer linked in
        // (we took it out above), so it is ours to push.
        unsafe { self.push(stub) };
        // SAFETY: as above.
        next = unsafe { (*head).next.load(Ordering::Acquire) };
        if !next.is_null() {
            *head_slot = next;
            return Pop::Data(head);
        }
        Pop::Inconsistent
    }

    /// How many nodes are queued, counting at most `cap` (an observer's
    /// sample of the mailbox's depth). Walks the links from `head` the way
    /// `pop` would, without taking anything; a node whose producer is still
    /// between its two steps (invariant 1) is not counted yet.
    ///
    /// # Safety
    /// As for [`pop`](Self::pop): only the consumer calls it, and not while
    /// a [`Consumer`] of this queue is alive.
    pub unsafe fn count_up_to(&self, cap: u32) -> u32 {
        let stub = self.stub();
        let mut node = self.resolve(self.head.load(Ordering::Relaxed));
        let mut count = 0;
        while count < cap {
            // SAFETY: `node` is the stub or a queued node, and the nodes its
            // links lead to are queued too; only this consumer frees them
            // (invariant 2).
            let next = unsafe { (*node).next.load(Ordering::Acquire) };
            if node != stub {
                count += 1;
            }
            if next.is_null() {
                break;
            }
            node = next;
        }
        count
    }

    /// True when no message is queued or being pushed (invariant 3). Safe
    /// from any thread; the answer may be stale by the time it is used,
    /// which callers account for.
    #[inline]
    pub fn looks_empty(&self) -> bool {
        self.resolve(self.tail.load(Ordering::SeqCst)) == self.stub()
    }
}

/// A run of pops by the consumer; see [`Queue::consumer`].
pub struct Consumer<'a> {
    queue: &'a Queue,
    head: *mut Link,
}

impl Consumer<'_> {
    /// Takes the oldest node.
    #[inline]
    pub fn pop(&mut self) -> Pop {
        // SAFETY: creating the `Consumer` required being the only consumer.
        unsafe { self.queue.pop_from(&mut self.head) }
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        self.queue.head.store(self.head, Ordering::Relaxed);
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

    /// # Safety
    /// `p` came from [`node`] and was handed back by the queue.
    unsafe fn take(p: *mut Link) -> u64 {
        // SAFETY: a `Node` from `Box::into_raw` (contract).
        unsafe { Box::from_raw(p as *mut Node).value }
    }

    #[test]
    fn fifo_single_thread() {
        let q = Queue::new();
        assert!(q.looks_empty());
        // SAFETY: one thread, so it is the only consumer; nodes come from
        // `node` and are taken back once each.
        unsafe {
            assert_eq!(q.pop(), Pop::Empty);
            for i in 0..10 {
                q.push(node(i));
            }
            assert!(!q.looks_empty());
            for i in 0..10 {
                match q.pop() {
                    Pop::Data(p) => assert_eq!(take(p), i),
                    other => panic!("expected {i}, got {other:?}"),
                }
            }
            assert_eq!(q.pop(), Pop::Empty);
            assert!(q.looks_empty());
            // Reuse after draining exercises the stub re-push path.
            q.push(node(42));
            match q.pop() {
                Pop::Data(p) => assert_eq!(take(p), 42),
                other => panic!("got {other:?}"),
            }
        }
    }

    #[test]
    fn a_depth_sample_counts_what_is_queued_and_takes_nothing() {
        let q = Queue::new();
        // SAFETY: as in `fifo_single_thread`.
        unsafe {
            assert_eq!(q.count_up_to(100), 0);
            for i in 0..5 {
                q.push(node(i));
            }
            assert_eq!(q.count_up_to(100), 5);
            assert_eq!(q.count_up_to(3), 3, "the cap bounds the walk");
            // Past the last node the stub is pushed behind the queue (the
            // stub then sits mid-list): it is not a message.
            for i in 0..5 {
                let Pop::Data(p) = q.pop() else {
                    panic!("a node was lost")
                };
                assert_eq!(take(p), i);
                assert_eq!(q.count_up_to(100), 4 - i as u32);
            }
            q.push(node(7));
            q.push(node(8));
            assert_eq!(q.count_up_to(100), 2);
            while let Pop::Data(p) = q.pop() {
                take(p);
            }
            assert_eq!(q.count_up_to(100), 0);
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
                seen.push(take(p));
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
                        unsafe { q.push(node(p << 32 | i)) };
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; PRODUCERS as usize];
        let mut got = 0;
        while got < PRODUCERS * PER {
            // SAFETY: this thread is the only consumer.
            match unsafe { q.pop() } {
                Pop::Data(n) => {
                    // SAFETY: a node from `node`, handed back once.
                    let v = unsafe { take(n) };
                    let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                    assert_eq!(i, next[p], "producer {p} out of order");
                    next[p] += 1;
                    got += 1;
                }
                Pop::Empty | Pop::Inconsistent => std::thread::yield_now(),
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        // SAFETY: the only consumer.
        assert_eq!(unsafe { q.pop() }, Pop::Empty);
    }
}
