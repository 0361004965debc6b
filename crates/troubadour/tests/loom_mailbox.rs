//! Loom models of the lock-free core: the mailbox queue, the signal stack,
//! the consumer role carried by the queue's tail and a sender's appends to
//! its run at the tail (`mailbox.rs`), the count
//! that frees a message slab (`nodes.rs`) and a worker's next-actor slot
//! (`scheduler/next_slot.rs`).
//!
//! Run: `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p troubadour --release --test loom_mailbox`
//! (preemption bound 2: every interleaving with at most two forced thread
//! switches, which covers the two-step push racing a pop and a release).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use troubadour::loom_support::{
    next_slot_become_thief, next_slot_stop_thieving, Idle, Link, NextSlot, Pop, Queue, Release,
    RunCount, SignalStack, SlabCount,
};

#[repr(C)]
struct Node {
    link: Link,
    producer: usize,
    seq: usize,
}

fn node(producer: usize, seq: usize) -> *mut Link {
    Box::into_raw(Box::new(Node {
        link: Link::new(),
        producer,
        seq,
    })) as *mut Link
}

/// Frees a node made by [`node`], returning what it carried.
///
/// # Safety
/// `p` came from `node` and is owned by the caller (a signal taken off the
/// stack), once.
unsafe fn open(p: *mut Link) -> (usize, usize) {
    // SAFETY: a boxed `Node` we own (contract).
    let n = unsafe { Box::from_raw(p as *mut Node) };
    (n.producer, n.seq)
}

/// What a node the queue handed out carries; the node stays the queue's.
///
/// # Safety
/// `p` came from `node` and the queue handed it out (it is the dummy now).
unsafe fn read(p: *mut Link) -> (usize, usize) {
    // SAFETY: a live `Node` (contract).
    unsafe { ((*(p as *mut Node)).producer, (*(p as *mut Node)).seq) }
}

/// Frees a node the queue retired (null: none).
///
/// # Safety
/// `p` came from `node` and the queue gave it up, once.
unsafe fn free(p: *mut Link) {
    if !p.is_null() {
        // SAFETY: a boxed `Node` nobody uses any more (contract).
        drop(unsafe { Box::from_raw(p as *mut Node) });
    }
}

struct Shared(Queue);
// SAFETY: (test) the queue is Sync; the wrapper only moves it into an Arc.
unsafe impl Send for Shared {}
// SAFETY: (test) as for `Send`.
unsafe impl Sync for Shared {}

/// Two producers, one consumer: every message arrives once, in per-producer
/// order, whatever the interleaving (including a producer stalled between
/// its swap and its link store).
#[test]
fn queue_mpsc_fifo_no_loss() {
    loom::model(|| {
        let q = Arc::new(Shared(Queue::new()));
        // Producer 0 pushes two (its order is checked), producer 1 one.
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let q = q.clone();
                thread::spawn(move || {
                    for s in 0..(2 - p) {
                        // SAFETY: a fresh node; the queue outlives it. The
                        // consumer below keeps the role throughout.
                        let took_role = unsafe { q.0.push(node(p, s)) };
                        assert!(!took_role);
                    }
                })
            })
            .collect();
        let mut next = [0usize; 2];
        let mut got = 0;
        while got < 3 {
            // SAFETY: this thread is the only consumer.
            match unsafe { q.0.pop() } {
                Pop::Data { node, retired } => {
                    // SAFETY: nodes from `node`: one handed out, one retired.
                    let (prod, seq) = unsafe { read(node) };
                    unsafe { free(retired) };
                    assert_eq!(seq, next[prod]);
                    next[prod] += 1;
                    got += 1;
                }
                Pop::Again(_) => unreachable!("only a `Consumer` repeats"),
                Pop::Empty | Pop::Inconsistent => thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: the only consumer, and the producers are done.
        unsafe {
            assert_eq!(q.0.pop(), Pop::Empty);
            assert!(q.0.looks_empty());
            free(q.0.take_dummy());
        }
    });
}

struct Stack(SignalStack);
// SAFETY: (test) the stack is Sync; the wrapper only moves it into an Arc.
unsafe impl Send for Stack {}
// SAFETY: (test) as for `Send`.
unsafe impl Sync for Stack {}

/// Signals pushed concurrently with a take-all are each taken exactly once,
/// in per-producer order.
#[test]
fn signal_stack_take_all_races_pushes() {
    loom::model(|| {
        let s = Arc::new(Stack(SignalStack::new()));
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let s = s.clone();
                thread::spawn(move || {
                    for seq in 0..2 {
                        // SAFETY: a fresh node; the stack outlives it.
                        unsafe { s.0.push(node(p, seq)) };
                    }
                })
            })
            .collect();
        let mut next = [0usize; 2];
        // SAFETY: this thread is the only consumer; every node in a taken
        // chain came from `node` and is opened once, after reading its next.
        let take = |next: &mut [usize; 2]| unsafe {
            let mut p = s.0.take_all();
            while !p.is_null() {
                let following = SignalStack::next_of(p);
                let (prod, seq) = open(p);
                assert_eq!(seq, next[prod]);
                next[prod] += 1;
                p = following;
            }
        };
        take(&mut next);
        for p in producers {
            p.join().unwrap();
        }
        take(&mut next);
        assert_eq!(next, [2, 2]);
    });
}

/// An actor as the consumer-role models see it: its mailbox, and a count
/// of signals standing for its signal stack.
struct ModelActor {
    queue: Queue,
    /// Signals sent and not yet taken: stands for the signal stack, whose
    /// push is a read-modify-write too.
    signal: AtomicUsize,
    consuming: AtomicBool,
    handled: AtomicUsize,
    signals: AtomicUsize,
}

// SAFETY: (test) the queue is only popped and released by the holder of the
// role, which `consuming` checks.
unsafe impl Send for ModelActor {}
// SAFETY: (test) as for `Send`.
unsafe impl Sync for ModelActor {}

impl ModelActor {
    /// Created holding the role, as an actor cell is.
    fn new() -> Self {
        ModelActor {
            queue: Queue::new(),
            signal: AtomicUsize::new(0),
            consuming: AtomicBool::new(false),
            handled: AtomicUsize::new(0),
            signals: AtomicUsize::new(0),
        }
    }

    /// The start of a turn: only one holder at a time, signals first.
    fn begin_turn(&self) {
        assert!(!self.consuming.swap(true, Ordering::SeqCst), "two holders");
        let taken = self.signal.swap(0, Ordering::SeqCst);
        self.signals.fetch_add(taken, Ordering::SeqCst);
    }

    /// What the release asks before letting go: whether a signal waits.
    fn input_waiting(&self) -> bool {
        self.signal.load(Ordering::SeqCst) != 0
    }
}

/// The consumer role (`mailbox.rs`, invariants 4–6): two senders push
/// (the one whose push finds the role free runs the actor) while a third
/// records a signal and offers the role, against a holder that drains and
/// lets go. Whatever the interleaving, nobody runs the actor twice at once,
/// every message and the signal are handled, and the role ends free: no
/// input is left with nobody to take it (a lost wake-up).
#[test]
fn consumer_role_never_loses_a_wakeup() {
    fn consume(a: &ModelActor) {
        loop {
            a.begin_turn();
            loop {
                // SAFETY: `consuming` asserts we are the only consumer.
                match unsafe { a.queue.pop() } {
                    Pop::Data { node, retired } => {
                        // SAFETY: nodes from `node`: one handed out, one
                        // retired.
                        unsafe {
                            read(node);
                            free(retired);
                        }
                        a.handled.fetch_add(1, Ordering::SeqCst);
                    }
                    Pop::Again(_) => unreachable!("only a `Consumer` repeats"),
                    Pop::Empty => break,
                    // A producer is mid-push. The real cell ends its turn and
                    // its release fails (the queue is not empty); here, let
                    // the other threads run and retry.
                    Pop::Inconsistent => thread::yield_now(),
                }
            }
            a.consuming.store(false, Ordering::SeqCst);
            // As `ActorCell::release_from` does: nothing is looked at after
            // the release, which may hand the role (and the actor) on.
            // SAFETY: we hold the role, and no `Consumer` is alive.
            match unsafe { a.queue.release(false, || a.input_waiting()) } {
                Release::Kept => continue,
                // SAFETY: handed over by the release.
                Release::Released { retired } => unsafe { free(retired) },
            }
            return;
        }
    }

    loom::model(|| {
        let a = Arc::new(ModelActor::new());
        // The creator holds the role; an idle actor's is free.
        // SAFETY: we hold the role and the queue is empty.
        assert_eq!(
            unsafe { a.queue.release(false, || false) },
            Release::Released {
                retired: std::ptr::null_mut()
            }
        );
        let mut threads: Vec<_> = (0..2)
            .map(|p| {
                let a = a.clone();
                thread::spawn(move || {
                    // SAFETY: a fresh node; the queue outlives it.
                    if unsafe { a.queue.push(node(p, 0)) } {
                        consume(&a);
                    }
                })
            })
            .collect();
        let signaller = a.clone();
        threads.push(thread::spawn(move || {
            signaller.signal.fetch_add(1, Ordering::SeqCst);
            if signaller.queue.try_acquire() {
                consume(&signaller);
            }
        }));
        for t in threads {
            t.join().unwrap();
        }
        // Quiescent: nobody holds the role, and everything was handled.
        assert!(a.queue.is_idle(), "the role was left taken");
        assert_eq!(
            a.handled.load(Ordering::SeqCst),
            2,
            "a message was stranded"
        );
        assert_eq!(
            a.signals.load(Ordering::SeqCst),
            1,
            "the signal was stranded"
        );
        // Leave no nodes behind for the next model run (none are queued,
        // and the last release retired the last node taken).
        // SAFETY: quiescent; we are the only thread.
        unsafe {
            assert_eq!(a.queue.pop(), Pop::Empty);
            assert!(a.queue.take_dummy().is_null());
        }
    });
}

/// A node of the run model: `kind` 0 is a message of its own, 1 a run of
/// up to two, as an envelope's vtable would say; `taken` and `end` are the
/// consumer's, as in a run's head (`envelope.rs`).
#[repr(C)]
struct RunModelNode {
    link: Link,
    kind: usize,
    count: RunCount,
    taken: loom::cell::UnsafeCell<u32>,
    end: loom::cell::UnsafeCell<u32>,
    slots: [loom::cell::UnsafeCell<usize>; 2],
}

fn run_model_node(kind: usize, value: usize) -> *mut Link {
    Box::into_raw(Box::new(RunModelNode {
        link: Link::new(),
        kind,
        count: RunCount::new(),
        taken: loom::cell::UnsafeCell::new(0),
        end: loom::cell::UnsafeCell::new(0),
        slots: [
            loom::cell::UnsafeCell::new(value),
            loom::cell::UnsafeCell::new(0),
        ],
    })) as *mut Link
}

/// An actor for the run model: messages handled, in order, and the nodes
/// retired, freed at the end (a sender's open slab keeps a run's memory in
/// place while the sender may look at it, `nodes.rs`).
struct RunModelActor {
    queue: Queue,
    consuming: AtomicBool,
    handled: Mutex<Vec<usize>>,
    retired: Mutex<Vec<usize>>,
}

// SAFETY: (test) the queue is only popped and released by the holder of the
// role, which `consuming` checks.
unsafe impl Send for RunModelActor {}
// SAFETY: (test) as for `Send`.
unsafe impl Sync for RunModelActor {}

/// A turn and the release after it, as `ActorCell` does them: a run gives
/// out one message per pop, closed at the first, and is made the oldest
/// node again while messages are left (`Consumer::repeat`).
fn run_model_consume(a: &RunModelActor) {
    loop {
        assert!(!a.consuming.swap(true, Ordering::SeqCst), "two holders");
        {
            // SAFETY: `consuming` asserts we are the only consumer.
            let mut consumer = unsafe { a.queue.consumer() };
            loop {
                let node = match consumer.pop() {
                    Pop::Data { node, retired } => {
                        a.retired.lock().unwrap().push(retired as usize);
                        node
                    }
                    Pop::Again(node) => node,
                    Pop::Empty => break,
                    Pop::Inconsistent => {
                        thread::yield_now();
                        continue;
                    }
                };
                {
                    {
                        let n = node as *mut RunModelNode;
                        // SAFETY: a node of this model, live (the queue's
                        // dummy); `taken` and `end` are the consumer's.
                        let (value, more) = unsafe {
                            if (*n).kind == 0 {
                                ((*n).slots[0].with(|p| *p), false)
                            } else {
                                let taken = (*n).taken.with(|p| *p);
                                let end = if taken == 0 {
                                    let end = (*n).count.close();
                                    (*n).end.with_mut(|p| *p = end);
                                    end
                                } else {
                                    (*n).end.with(|p| *p)
                                };
                                (*n).taken.with_mut(|p| *p = taken + 1);
                                ((*n).slots[taken as usize].with(|p| *p), taken + 1 < end)
                            }
                        };
                        a.handled.lock().unwrap().push(value);
                        if more {
                            // SAFETY: the node the last pop handed out.
                            unsafe { consumer.repeat(node) };
                        }
                    }
                }
            }
        }
        a.consuming.store(false, Ordering::SeqCst);
        // SAFETY: we hold the role, and no `Consumer` is alive.
        match unsafe { a.queue.release(false, || false) } {
            Release::Kept => continue,
            Release::Released { retired } => a.retired.lock().unwrap().push(retired as usize),
        }
        return;
    }
}

/// A sender joins its run only while the run is the tail (`mailbox.rs`,
/// invariant 7), even when the run's link is still null. Here a second
/// sender pushes behind the run and may stop between its swap of the tail
/// and its link; the run's sender meanwhile pushes a message of another
/// kind (an `ask`, say, which never goes in a run), then tells once more.
/// Whatever the interleaving, the run's sender's three messages are
/// handled in the order sent. A sender that went by the run's link alone
/// would append its third message to the run, ahead of its second, in the
/// interleaving where the other push's link is not yet written.
#[test]
fn a_sender_joins_its_run_only_at_the_tail() {
    loom::model(|| {
        let a = Arc::new(RunModelActor {
            queue: Queue::new(),
            consuming: AtomicBool::new(false),
            handled: Mutex::new(vec![]),
            retired: Mutex::new(vec![]),
        });
        let s = a.clone();
        let runs = thread::spawn(move || {
            let run = run_model_node(1, 1);
            // SAFETY: a fresh run; the queue outlives it.
            if unsafe { s.queue.push(run) } {
                run_model_consume(&s);
            }
            // SAFETY: as above.
            if unsafe { s.queue.push(run_model_node(0, 2)) } {
                run_model_consume(&s);
            }
            let n = run as *mut RunModelNode;
            // SAFETY: our run, whose memory stays until the model ends.
            let appended = s.queue.tail_for_sender() == run
                && unsafe { (*n).count.open_count() } == Ok(1)
                && {
                    // SAFETY: slot 1 is not published: nobody reads it.
                    unsafe { (*n).slots[1].with_mut(|p| *p = 4) };
                    // SAFETY: as above.
                    unsafe { (*n).count.append(1) }
                };
            // SAFETY: a fresh node; the queue outlives it.
            if !appended && unsafe { s.queue.push(run_model_node(0, 4)) } {
                run_model_consume(&s);
            }
        });
        let t = a.clone();
        let other = thread::spawn(move || {
            // SAFETY: as above.
            if unsafe { t.queue.push(run_model_node(0, 3)) } {
                run_model_consume(&t);
            }
        });
        run_model_consume(&a);
        runs.join().unwrap();
        other.join().unwrap();
        assert!(a.queue.is_idle(), "the role was left taken");
        let handled = a.handled.lock().unwrap().clone();
        let mut sorted = handled.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![1, 2, 3, 4],
            "lost or handled twice: {handled:?}"
        );
        let at = |v: usize| handled.iter().position(|&h| h == v);
        assert!(
            at(1) < at(2) && at(2) < at(4),
            "the run's sender out of order: {handled:?}"
        );
        // SAFETY: quiescent; we are the only thread. Every node was retired
        // once (the last by the last release), and is freed once here.
        unsafe {
            assert_eq!(a.queue.pop(), Pop::Empty);
            assert!(a.queue.take_dummy().is_null());
            for p in a.retired.lock().unwrap().drain(..) {
                if p != 0 {
                    drop(Box::from_raw(p as *mut RunModelNode));
                }
            }
        }
    });
}

/// A sender's append to its run at the tail (`mailbox.rs`, invariant 7)
/// against the consumer's close at its first take, while a second sender
/// pushes behind the run. The consumer is the model's own thread, which
/// holds the role from the start and consumes while both send. Whatever
/// the interleaving, every message is handled once, the run's sender's
/// two in order, nobody runs the actor twice at once, and the role ends
/// free: an append that the close beat became a push that took the role,
/// never a message left behind with nobody to take it.
#[test]
fn an_append_races_the_consumers_close() {
    loom::model(|| {
        let a = Arc::new(RunModelActor {
            queue: Queue::new(),
            consuming: AtomicBool::new(false),
            handled: Mutex::new(vec![]),
            retired: Mutex::new(vec![]),
        });
        let s = a.clone();
        let runs = thread::spawn(move || {
            let run = run_model_node(1, 1);
            // SAFETY: a fresh run; the queue outlives it.
            if unsafe { s.queue.push(run) } {
                run_model_consume(&s);
            }
            let n = run as *mut RunModelNode;
            // SAFETY: our run, whose memory stays until the model ends.
            let appended = s.queue.tail_for_sender() == run
                && unsafe { (*n).count.open_count() } == Ok(1)
                && {
                    // SAFETY: slot 1 is not published: nobody reads it.
                    unsafe { (*n).slots[1].with_mut(|p| *p = 2) };
                    // SAFETY: as above.
                    unsafe { (*n).count.append(1) }
                };
            // SAFETY: a fresh node; the queue outlives it.
            if !appended && unsafe { s.queue.push(run_model_node(0, 2)) } {
                run_model_consume(&s);
            }
        });
        let t = a.clone();
        let other = thread::spawn(move || {
            // SAFETY: as above.
            if unsafe { t.queue.push(run_model_node(0, 3)) } {
                run_model_consume(&t);
            }
        });
        // This thread was created holding the role, and consumes while
        // the two send: it may reach the run while its sender appends.
        run_model_consume(&a);
        runs.join().unwrap();
        other.join().unwrap();
        assert!(a.queue.is_idle(), "the role was left taken");
        let handled = a.handled.lock().unwrap().clone();
        let mut sorted = handled.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 3], "lost or handled twice: {handled:?}");
        let first = handled.iter().position(|&v| v == 1);
        let second = handled.iter().position(|&v| v == 2);
        assert!(first < second, "the run's sender out of order: {handled:?}");
        // SAFETY: quiescent; we are the only thread. Every node was retired
        // once (the last by the last release), and is freed once here.
        unsafe {
            assert_eq!(a.queue.pop(), Pop::Empty);
            assert!(a.queue.take_dummy().is_null());
            for p in a.retired.lock().unwrap().drain(..) {
                if p != 0 {
                    drop(Box::from_raw(p as *mut RunModelNode));
                }
            }
        }
    });
}

/// The consumer role of an actor that waits (a suspended async handler):
/// it lets go with messages queued, so a push that replaces the mark an
/// offer left in `tail` does not keep it, and only the release's question
/// for recorded input, between its read and its exchange, finds the
/// offered input (invariant 6). The
/// holder (this thread) releases while a sender pushes and another records
/// a signal and offers the role. The signal is always taken, by the holder
/// or by a thread that took the role after it, and the role ends free.
#[test]
fn waiting_actor_never_loses_a_signal() {
    /// A turn of a waiting actor: it takes its signals, not its messages.
    fn turn(a: &ModelActor) {
        loop {
            a.begin_turn();
            a.consuming.store(false, Ordering::SeqCst);
            // SAFETY: we hold the role, and no `Consumer` is alive.
            match unsafe { a.queue.release(true, || a.input_waiting()) } {
                Release::Kept => continue,
                // Nothing was taken since the queue was made, so nothing
                // is retired.
                Release::Released { retired } => assert!(retired.is_null()),
            }
            return;
        }
    }

    loom::model(|| {
        let a = Arc::new(ModelActor::new());
        let pusher = a.clone();
        let pushing = thread::spawn(move || {
            // SAFETY: a fresh node; the queue outlives it.
            if unsafe { pusher.queue.push(node(0, 0)) } {
                turn(&pusher);
            }
        });
        let signaller = a.clone();
        let signalling = thread::spawn(move || {
            signaller.signal.fetch_add(1, Ordering::SeqCst);
            if signaller.queue.try_acquire() {
                turn(&signaller);
            }
        });
        turn(&a);
        pushing.join().unwrap();
        signalling.join().unwrap();
        assert!(a.queue.is_idle(), "the role was left taken");
        assert_eq!(
            a.signals.load(Ordering::SeqCst),
            1,
            "the signal was stranded"
        );
        // The message waits for the actor to resume; free it.
        // SAFETY: quiescent; we are the only thread, and the node came
        // from `node`.
        unsafe {
            assert!(a.queue.try_acquire());
            match a.queue.pop() {
                Pop::Data { node, retired } => {
                    assert!(retired.is_null());
                    assert_eq!(a.queue.pop(), Pop::Empty);
                    // The node taken is the dummy until now.
                    assert_eq!(a.queue.take_dummy(), node);
                    assert_eq!(open(node), (0, 0));
                }
                other => panic!("the message is gone: {other:?}"),
            }
        }
    });
}

/// A message slab (`nodes.rs`): its owner seals it while receivers on two
/// threads free its nodes. Exactly one of them finds the count at zero and
/// frees the slab, whatever the order, and nobody before the last.
#[test]
fn slab_freed_exactly_once() {
    loom::model(|| {
        let slab = Arc::new(SlabCount::new());
        let freed = Arc::new(AtomicUsize::new(0));
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let (slab, freed) = (slab.clone(), freed.clone());
                thread::spawn(move || {
                    if slab.release(1) {
                        freed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        // Three nodes carved: the two above and one the owner frees itself,
        // batched with its seal.
        if slab.seal(3) {
            freed.fetch_add(1, Ordering::SeqCst);
        }
        if slab.release(1) {
            freed.fetch_add(1, Ordering::SeqCst);
        }
        for r in receivers {
            r.join().unwrap();
        }
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    });
}

/// A worker's next-actor slot (`scheduler/next_slot.rs`): the owner puts
/// two tasks and takes back what it can while a thief steals. Every task is
/// taken exactly once, and a put into a full or half-taken slot hands the
/// task back instead of overwriting.
#[test]
fn next_slot_owner_and_thief() {
    loom::model(|| {
        let slot = Arc::new(NextSlot::new());
        let thief = {
            let slot = slot.clone();
            thread::spawn(move || {
                // A worker that becomes a thief for two steals, then stops.
                let me = || std::iter::once(&*slot);
                assert!(next_slot_become_thief(me()));
                // SAFETY: a thief of this slot until `stop_thieving`.
                let stolen = [unsafe { slot.steal() }, unsafe { slot.steal() }];
                next_slot_stop_thieving(me());
                stolen
            })
        };
        let mut taken = Vec::new();
        let mut elsewhere = Vec::new();
        for task in [1u32, 2] {
            if let Err(back) = slot.put(task) {
                // A worker pushes it to its deque instead.
                elsewhere.push(back);
            }
        }
        if let Some(t) = slot.take_own() {
            taken.push(t);
        }
        taken.extend(thief.join().unwrap().into_iter().flatten());
        if let Some(t) = slot.take_own() {
            taken.push(t);
        }
        taken.extend(elsewhere);
        taken.sort();
        assert_eq!(taken, vec![1, 2]);
    });
}

/// The scheduler's idle/park protocol (`scheduler/idle.rs`), on the real
/// `Idle`: a worker that finds no work searches, registers as a sleeper,
/// re-checks and parks, while a producer makes work visible and asks whom
/// to wake. Checked: the work is always taken (a lost wake-up leaves the
/// worker parked for ever, which loom reports as a deadlock), with the
/// producer racing every step of the worker's search and sleep.
#[test]
fn idle_protocol_never_loses_a_wakeup() {
    /// One worker's loop around the protocol, as `run_worker` does it, with
    /// an atomic count of queued tasks standing in for the run queues.
    fn worker(idle: &Idle, work: &AtomicUsize, me: usize) {
        let take = || {
            work.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        loop {
            if take() {
                return;
            }
            idle.start_searching();
            let found = take();
            idle.stop_searching();
            if found {
                return;
            }
            idle.prepare_sleep(me);
            if work.load(Ordering::SeqCst) > 0 {
                idle.cancel_sleep(me);
                continue;
            }
            thread::park();
            idle.woke(me);
        }
    }

    loom::model(|| {
        let idle = Arc::new(Idle::new(1));
        let work = Arc::new(AtomicUsize::new(0));
        let w = {
            let (idle, work) = (idle.clone(), work.clone());
            thread::spawn(move || worker(&idle, &work, 0))
        };
        let w_thread = w.thread().clone();
        let producer = {
            let (idle, work) = (idle.clone(), work.clone());
            thread::spawn(move || {
                work.fetch_add(1, Ordering::SeqCst);
                if let Some(i) = idle.worker_to_wake() {
                    assert_eq!(i, 0);
                    w_thread.unpark();
                }
            })
        };
        producer.join().unwrap();
        w.join().unwrap();
        assert_eq!(work.load(Ordering::SeqCst), 0);
    });
}

/// The same protocol when a worker that finds work keeps its core for
/// ever (a handler that blocks, or just a long one): two workers, two
/// tasks pushed one after the other, and a worker that takes a task never
/// comes back for more. Both tasks must run, so a worker that takes one
/// while the producer skipped its unparks (it saw a searcher) must wake the
/// other for the second: the last searcher to find work (`found_work`), and
/// a worker whose sleep re-check found work. Without either, the second
/// worker sleeps for ever beside the second task (loom reports the
/// deadlock).
#[test]
fn idle_protocol_wakes_a_sleeper_for_work_left_behind() {
    type Threads = Mutex<Vec<Option<thread::Thread>>>;

    fn wake(idle: &Idle, threads: &Threads) {
        if let Some(i) = idle.worker_to_wake() {
            let sleeper = threads.lock().unwrap()[i].clone();
            sleeper.expect("a sleeper registered its thread").unpark();
        }
    }

    fn worker(idle: &Idle, work: &AtomicUsize, threads: &Threads, me: usize) {
        // Registered before it can sleep, so whoever learns from `Idle`
        // that it sleeps finds its handle.
        threads.lock().unwrap()[me] = Some(thread::current());
        let take = || {
            work.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        // A woken worker looks for work as a searcher, as `run_worker` does.
        let mut woken = false;
        loop {
            if !woken && take() {
                return;
            }
            woken = false;
            idle.start_searching();
            if take() {
                if idle.found_work() && work.load(Ordering::SeqCst) > 0 {
                    wake(idle, threads);
                }
                return;
            }
            idle.stop_searching();
            idle.prepare_sleep(me);
            if work.load(Ordering::SeqCst) > 0 {
                idle.cancel_sleep(me);
                if take() {
                    if work.load(Ordering::SeqCst) > 0 {
                        wake(idle, threads);
                    }
                    return;
                }
                continue;
            }
            thread::park();
            idle.woke(me);
            woken = true;
        }
    }

    loom::model(|| {
        let idle = Arc::new(Idle::new(2));
        let work = Arc::new(AtomicUsize::new(0));
        let threads: Arc<Threads> = Arc::new(Mutex::new(vec![None, None]));
        let workers: Vec<_> = (0..2)
            .map(|me| {
                let (idle, work, threads) = (idle.clone(), work.clone(), threads.clone());
                thread::spawn(move || worker(&idle, &work, &threads, me))
            })
            .collect();
        let producer = {
            let (idle, work) = (idle.clone(), work.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    work.fetch_add(1, Ordering::SeqCst);
                    wake(&idle, &threads);
                }
            })
        };
        producer.join().unwrap();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(work.load(Ordering::SeqCst), 0);
    });
}
