//! What monitors and trapped links deliver as messages (`Down`, `Exited`)
//! are system messages: never refused by a full bounded mailbox, and in
//! per-pair order with the messages the stopped actor sent (Erlang orders
//! every signal between two processes; `erlang:monitor/2`, `trap_exit`).

mod common;

use common::{log, Log, LIVENESS};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use troubadour::prelude::*;

/// Logs everything it handles; `Hold` blocks it until released, so its
/// mailbox fills while the test arranges what arrives.
struct Watcher {
    log: Sender<String>,
    held: Sender<()>,
    release: Mutex<Receiver<()>>,
}

impl Actor for Watcher {}

struct Hold;
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Watcher {
    fn handle(&mut self, _: Hold, _: &mut Context<Self>) {
        let _ = self.held.send(());
        let _ = self.release.lock().unwrap().recv();
    }
}

struct Note(u32);
impl Message for Note {
    type Reply = ();
}
impl Handler<Note> for Watcher {
    fn handle(&mut self, Note(n): Note, _: &mut Context<Self>) {
        let _ = self.log.send(format!("note {n}"));
    }
}

impl Handler<Down> for Watcher {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self.log.send(format!("down: {}", d.reason));
    }
}

impl Handler<Exited> for Watcher {
    fn handle(&mut self, e: Exited, _: &mut Context<Self>) {
        let _ = self.log.send(format!("exited: {}", e.reason));
    }
}

type Command = Box<dyn FnOnce(&mut Context<Watcher>) + Send>;

/// Runs a closure inside the watcher (monitor, link, trap).
struct Do(Command);
impl Message for Do {
    type Reply = ();
}
impl Handler<Do> for Watcher {
    fn handle(&mut self, Do(f): Do, ctx: &mut Context<Self>) {
        f(ctx)
    }
}

/// The actor that stops: sends the watcher some notes first, then stops or
/// fails, as it is told.
struct Sender_ {
    to: ActorRef<Watcher>,
}
impl Actor for Sender_ {}

struct SendThenEnd {
    notes: u32,
    fail: bool,
}
impl Message for SendThenEnd {
    type Reply = ();
}
impl Handler<SendThenEnd> for Sender_ {
    fn handle(&mut self, m: SendThenEnd, ctx: &mut Context<Self>) {
        for n in 0..m.notes {
            // `send` would wait for room; these are sent before the end,
            // so they go in with room the test made.
            self.to.tell(Note(n)).unwrap();
        }
        if m.fail {
            ctx.fail("boom");
        } else {
            ctx.stop();
        }
    }
}

struct Setup {
    system: ActorSystem,
    watcher: ActorRef<Watcher>,
    held: Receiver<()>,
    release: Sender<()>,
    log: Log,
}

fn setup(mailbox: Mailbox) -> Setup {
    let system = ActorSystem::new();
    let (tx, log) = log();
    let (held_tx, held) = channel();
    let (release, release_rx) = channel();
    let watcher = system
        .spawn_with_options(
            // Its own thread: it blocks in `Hold`, which must not hold up
            // a worker (an actor it woke would wait in that worker's
            // next-actor slot).
            SpawnOptions::new().mailbox(mailbox).blocking(),
            Watcher {
                log: tx,
                held: held_tx,
                release: Mutex::new(release_rx),
            },
        )
        .unwrap();
    Setup {
        system,
        watcher,
        held,
        release,
        log,
    }
}

impl Setup {
    fn run(&self, f: impl FnOnce(&mut Context<Watcher>) + Send + 'static) {
        self.watcher
            .ask(Do(Box::new(f)))
            .timeout(LIVENESS)
            .wait()
            .unwrap();
    }

    /// Blocks the watcher inside a handler; returns when it is there.
    fn hold(&self) {
        self.watcher.tell(Hold).unwrap();
        self.held
            .recv_timeout(LIVENESS)
            .expect("the watcher never ran");
    }

    fn sender(&self) -> ActorRef<Sender_> {
        self.system
            .spawn(Sender_ {
                to: self.watcher.clone(),
            })
            .unwrap()
    }

    fn end(&self, sender: &ActorRef<Sender_>, notes: u32, fail: bool) {
        let stopped = sender.wait_stopped();
        sender.tell(SendThenEnd { notes, fail }).unwrap();
        self.system
            .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
            .expect("the sender did not stop");
    }
}

impl Setup {
    /// Ends `linked` and returns once its exit signal to the watcher has
    /// been sent: a second trapping actor, linked after the watcher, hears
    /// its own exit signal after the watcher's was sent (links are
    /// signalled in the order they were made).
    fn end_linked(&self, linked: &ActorRef<Sender_>, notes: u32) {
        let (tx, witness_log) = log();
        let (held_tx, _held) = channel();
        let (_release, release_rx) = channel();
        let witness = self
            .system
            .spawn(Watcher {
                log: tx,
                held: held_tx,
                release: Mutex::new(release_rx),
            })
            .unwrap();
        let l = linked.clone();
        witness
            .ask(Do(Box::new(move |ctx| {
                ctx.trap_exits(true);
                ctx.link(&l);
            })))
            .timeout(LIVENESS)
            .wait()
            .unwrap();
        linked.tell(SendThenEnd { notes, fail: true }).unwrap();
        assert_eq!(witness_log.next(), "exited: failed: boom");
    }
}

#[test]
fn a_down_reaches_a_watcher_whose_bounded_mailbox_is_full() {
    let s = setup(Mailbox::Bounded(2));
    let target = s.sender();
    let t = target.clone();
    s.run(move |ctx| ctx.monitor(&t));
    s.hold();
    s.watcher.tell(Note(1)).unwrap();
    s.watcher.tell(Note(2)).unwrap();
    assert!(
        matches!(s.watcher.tell(Note(3)), Err(SendError::Full(_))),
        "the watcher's mailbox is full"
    );
    s.end(&target, 0, false);
    s.release.send(()).unwrap();
    assert_eq!(s.log.next(), "note 1");
    assert_eq!(s.log.next(), "note 2");
    assert_eq!(
        s.log.next(),
        "down: normal",
        "the Down was lost to the full mailbox"
    );
}

#[test]
fn the_bound_holds_again_once_the_system_messages_are_handled() {
    let s = setup(Mailbox::Bounded(1));
    let target = s.sender();
    let t = target.clone();
    s.run(move |ctx| ctx.monitor(&t));
    s.hold();
    s.watcher.tell(Note(1)).unwrap();
    s.end(&target, 0, false);
    s.release.send(()).unwrap();
    assert_eq!(s.log.next(), "note 1");
    assert_eq!(s.log.next(), "down: normal");
    // The Down went over the bound; the bound is one again, not two.
    s.hold();
    s.watcher.tell(Note(2)).unwrap();
    assert!(
        matches!(s.watcher.tell(Note(3)), Err(SendError::Full(_))),
        "a system message over the bound must not leave the bound larger"
    );
    s.release.send(()).unwrap();
    assert_eq!(s.log.next(), "note 2");
}

#[test]
fn a_trapped_exit_reaches_an_actor_whose_bounded_mailbox_is_full() {
    let s = setup(Mailbox::Bounded(1));
    let linked = s.sender();
    let l = linked.clone();
    s.run(move |ctx| {
        ctx.trap_exits(true);
        ctx.link(&l);
    });
    s.hold();
    s.watcher.tell(Note(1)).unwrap();
    s.end_linked(&linked, 0);
    s.release.send(()).unwrap();
    assert_eq!(s.log.next(), "note 1");
    assert_eq!(s.log.next(), "exited: failed: boom");
}

/// Erlang: signals between a pair of processes arrive in the order sent,
/// so `{'EXIT', Pid, Reason}` comes after every message `Pid` sent first.
#[test]
fn a_trapped_exit_comes_after_the_messages_the_linked_actor_sent_before_dying() {
    let s = setup(Mailbox::Unbounded);
    let linked = s.sender();
    let l = linked.clone();
    s.run(move |ctx| {
        ctx.trap_exits(true);
        ctx.link(&l);
    });
    s.hold();
    s.end_linked(&linked, 100);
    s.release.send(()).unwrap();
    for n in 0..100 {
        assert_eq!(
            s.log.next(),
            format!("note {n}"),
            "the exit overtook the linked actor's messages"
        );
    }
    assert_eq!(s.log.next(), "exited: failed: boom");
}

#[test]
fn a_down_comes_after_the_messages_the_watched_actor_sent_before_stopping() {
    let s = setup(Mailbox::Unbounded);
    let target = s.sender();
    let t = target.clone();
    s.run(move |ctx| ctx.monitor(&t));
    s.hold();
    s.end(&target, 100, false);
    s.release.send(()).unwrap();
    for n in 0..100 {
        assert_eq!(s.log.next(), format!("note {n}"));
    }
    assert_eq!(s.log.next(), "down: normal");
}

/// An untrapped exit still overtakes: the actor dies at once, with the
/// dead actor's earlier messages unhandled (they had arrived; Erlang kills
/// the process without receiving them either).
#[test]
fn an_untrapped_exit_stops_the_actor_before_its_queued_messages() {
    let s = setup(Mailbox::Unbounded);
    let linked = s.sender();
    let l = linked.clone();
    s.run(move |ctx| ctx.link(&l));
    let watcher_stopped = s.watcher.wait_stopped();
    s.hold();
    s.end_linked(&linked, 5);
    s.release.send(()).unwrap();
    let reason = s
        .system
        .block_on(async { tokio::time::timeout(LIVENESS, watcher_stopped).await })
        .expect("the linked actor's failure did not stop the watcher");
    assert_eq!(reason.to_string(), "failed: boom");
    assert!(
        s.log.drain().is_empty(),
        "no note is handled after the exit signal arrived"
    );
}
