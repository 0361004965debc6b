//! `shutdown(deadline)` keeps its deadline even when a handler never
//! returns, and what is left of such a system answers with typed errors
//! instead of hanging or panicking inside tokio.

mod common;

use common::LIVENESS;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::ShutdownError;

/// Blocks its worker until the test lets it go: a handler stuck in a
/// system call, as far as the runtime can tell.
struct Stuck {
    entered: Sender<()>,
    release: Mutex<Receiver<()>>,
}

impl Actor for Stuck {}

struct Block;
impl Message for Block {
    type Reply = ();
}
impl Handler<Block> for Stuck {
    fn handle(&mut self, _: Block, _: &mut Context<Self>) {
        let _ = self.entered.send(());
        let _ = self.release.lock().unwrap().recv();
    }
}

struct Ping;
impl Message for Ping {
    type Reply = u32;
}
impl Handler<Ping> for Stuck {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> u32 {
        7
    }
}

/// A system whose only actor is stuck in a handler, and the sender that
/// releases it.
fn stuck_system() -> (ActorSystem, ActorRef<Stuck>, Sender<()>) {
    stuck_system_from(ActorSystem::builder().worker_threads(1))
}

fn stuck_system_from(
    builder: troubadour::ActorSystemBuilder,
) -> (ActorSystem, ActorRef<Stuck>, Sender<()>) {
    let system = builder.build();
    let (entered_tx, entered) = channel();
    let (release, release_rx) = channel();
    let stuck = system
        .spawn(Stuck {
            entered: entered_tx,
            release: Mutex::new(release_rx),
        })
        .unwrap();
    stuck.tell(Block).unwrap();
    entered
        .recv_timeout(LIVENESS)
        .expect("the handler never ran");
    (system, stuck, release)
}

/// Runs `shutdown` on another thread and waits for it far longer than its
/// deadline: if it has not returned by then, it is waiting for the handler.
fn shutdown_returns(system: ActorSystem, deadline: Duration) -> (ActorSystem, ShutdownError) {
    let (done_tx, done) = channel();
    std::thread::spawn(move || {
        let outcome = system.shutdown(deadline);
        let _ = done_tx.send((system, outcome));
    });
    let (system, outcome) = done
        .recv_timeout(LIVENESS)
        .expect("shutdown waited for a handler that never returns; the deadline must hold");
    (
        system,
        outcome.expect_err("a stuck actor cannot have stopped"),
    )
}

#[test]
fn shutdown_returns_at_its_deadline_while_a_handler_is_stuck_and_reports_it() {
    let (system, stuck, release) = stuck_system();
    let (system, err) = shutdown_returns(system, Duration::from_millis(50));
    assert!(
        matches!(err, ShutdownError::DeadlineExceeded { still_running: 1 }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains('1'),
        "the message says how many: {err}"
    );
    // Let the thread go; the killed actor stops without handling more.
    release.send(()).unwrap();
    drop(system);
    drop(stuck);
}

#[test]
fn dropping_a_system_with_a_stuck_handler_does_not_hang() {
    let (system, _stuck, release) = stuck_system();
    let (done_tx, done) = channel();
    std::thread::spawn(move || {
        drop(system); // shuts down with the 5 s default deadline
        let _ = done_tx.send(());
    });
    done.recv_timeout(LIVENESS + Duration::from_secs(5))
        .expect("Drop for ActorSystem waited for a handler that never returns");
    release.send(()).unwrap();
}

#[test]
fn an_ask_to_an_actor_that_outlived_the_shutdown_deadline_is_a_typed_error() {
    let (system, stuck, release) = stuck_system();
    let (system, _) = shutdown_returns(system, Duration::from_millis(50));
    // The actor still exists (its thread is stuck), so the ask is queued;
    // the system's clock is gone, so no timeout can fire: it must fail at
    // once with a reason, not panic inside tokio nor wait for ever.
    let answer = stuck.ask(Ping).timeout(LIVENESS * 10).wait();
    assert_eq!(answer, Err(AskError::SystemShutdown));
    assert!(answer.unwrap_err().to_string().contains("shut down"));
    release.send(()).unwrap();
    drop(system);
}

#[test]
fn an_ask_waiting_when_the_system_shuts_down_ends_with_a_typed_error() {
    let (system, stuck, release) = stuck_system();
    // Waiting on its timeout (the actor is stuck) when the runtime goes.
    let (answer_tx, answer) = channel();
    let asker = stuck.clone();
    std::thread::spawn(move || {
        let _ = answer_tx.send(asker.ask(Ping).timeout(LIVENESS * 10).wait());
    });
    let (system, _) = shutdown_returns(system, Duration::from_millis(50));
    let answer = answer
        .recv_timeout(LIVENESS)
        .expect("the ask neither answered nor failed after the shutdown");
    assert!(
        matches!(
            answer,
            Err(AskError::SystemShutdown) | Err(AskError::NoReply)
        ),
        "{answer:?}"
    );
    release.send(()).unwrap();
    drop(system);
}

#[test]
fn a_sleep_on_a_shut_down_system_ends_at_once() {
    let system = ActorSystem::new();
    let handle = system.handle();
    system.shutdown(Duration::from_secs(1)).unwrap();
    let (done_tx, done) = channel();
    std::thread::spawn(move || {
        futures_block_on(handle.sleep(LIVENESS * 10));
        let _ = done_tx.send(());
    });
    done.recv_timeout(LIVENESS)
        .expect("a sleep on a shut-down system waits for a clock that is gone");
}

#[test]
fn on_virtual_time_an_ask_waiting_at_shutdown_ends_with_a_typed_error() {
    let (system, stuck, release) = stuck_system_from(ActorSystem::builder().virtual_time());
    let (answer_tx, answer) = channel();
    let asker = stuck.clone();
    std::thread::spawn(move || {
        let _ = answer_tx.send(asker.ask(Ping).timeout(Duration::from_secs(1)).wait());
    });
    let (system, _) = shutdown_returns(system, Duration::from_millis(50));
    // Nobody advances the virtual clock any more: without the shutdown
    // ending it, this ask would wait for ever.
    let answer = answer.recv_timeout(LIVENESS).expect("the ask hung");
    assert!(
        matches!(
            answer,
            Err(AskError::SystemShutdown) | Err(AskError::NoReply)
        ),
        "{answer:?}"
    );
    release.send(()).unwrap();
    drop(system);
}

/// A minimal executor for a future outside any runtime.
fn futures_block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn an_inbox_waiting_with_a_timeout_when_the_system_shuts_down_ends_with_a_typed_error() {
    let system = ActorSystem::new();
    let mut inbox = system.inbox::<Ping>().unwrap();
    let (started_tx, started) = channel();
    let (answer_tx, answer) = channel();
    std::thread::spawn(move || {
        let _ = started_tx.send(());
        let _ = answer_tx.send(inbox.recv_timeout(LIVENESS * 10).wait().map(|_| ()));
    });
    started.recv().unwrap();
    system.shutdown(Duration::from_secs(1)).unwrap();
    let answer = answer
        .recv_timeout(LIVENESS)
        .expect("the inbox kept waiting on a clock that is gone");
    assert_eq!(answer, Err(troubadour::RecvError::SystemShutdown));
}
