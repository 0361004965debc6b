//! `Actor::activate`: async work before the first message. Messages wait
//! for it, in order; signals still act; an `Err` stops or fails the actor;
//! a restart activates again.

mod common;

use common::{log, LIVENESS};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use troubadour::prelude::*;

/// Loads its state from a channel the test fills when it chooses, as a
/// store read would.
struct Loader {
    load: Arc<Mutex<Option<oneshot::Receiver<Vec<String>>>>>,
    state: Option<Vec<String>>,
    activations: Arc<AtomicU32>,
    log: Sender<String>,
}

impl Actor for Loader {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("started".into());
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopped".into());
    }
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        self.activations.fetch_add(1, Ordering::SeqCst);
        let load = self.load.lock().unwrap().take();
        Some(async move {
            let Some(load) = load else {
                self.state = Some(vec!["fresh".into()]);
                return Ok(());
            };
            match load.await {
                Ok(state) => {
                    self.state = Some(state);
                    Ok(())
                }
                Err(_) => Err(ExitReason::Failed("the store went away".into())),
            }
        })
    }
}

struct Push(String);
impl Message for Push {
    type Reply = Vec<String>;
}
impl Handler<Push> for Loader {
    fn handle(&mut self, Push(s): Push, _: &mut Context<Self>) -> Vec<String> {
        let state = self
            .state
            .as_mut()
            .expect("a message arrived before the activation finished");
        state.push(s);
        state.clone()
    }
}

struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for Loader {
    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!("crash on purpose");
    }
}

fn loader(load: Option<oneshot::Receiver<Vec<String>>>) -> (Loader, Arc<AtomicU32>, common::Log) {
    let (tx, log) = log();
    let activations = Arc::new(AtomicU32::new(0));
    (
        Loader {
            load: Arc::new(Mutex::new(load)),
            state: None,
            activations: activations.clone(),
            log: tx,
        },
        activations,
        log,
    )
}

#[test]
fn messages_sent_during_activation_wait_for_it_in_order() {
    let system = ActorSystem::new();
    let (tx, rx) = oneshot::channel();
    let (actor, _, log) = loader(Some(rx));
    let a = system.spawn(actor).unwrap();
    assert_eq!(log.next(), "started");
    let asks: Vec<_> = (0..50).map(|i| a.ask(Push(format!("m{i}")))).collect();
    tx.send(vec!["loaded".into()]).unwrap();
    let mut last = vec![];
    for ask in asks {
        last = ask.timeout(LIVENESS).wait().unwrap();
    }
    let mut want = vec!["loaded".to_string()];
    want.extend((0..50).map(|i| format!("m{i}")));
    assert_eq!(last, want);
}

#[test]
fn an_activation_that_fails_fails_the_actor_and_a_restart_activates_again() {
    let system = ActorSystem::new();
    let (tx, rx) = oneshot::channel::<Vec<String>>();
    let (actor, activations, log) = loader(Some(rx));
    let shared_load = actor.load.clone();
    let shared_activations = activations.clone();
    let log_tx = actor.log.clone();
    let mut first = Some(actor);
    let a = system
        .spawn_factory_with_options(SpawnOptions::new(), move || {
            first.take().unwrap_or_else(|| Loader {
                load: shared_load.clone(),
                state: None,
                activations: shared_activations.clone(),
                log: log_tx.clone(),
            })
        })
        .unwrap();
    assert_eq!(log.next(), "started");
    let queued = a.ask(Push("kept".into()));
    drop(tx); // the load fails: the first activation ends with Err
              // Restarted (`after_restart` runs `started`), not stopped.
    assert_eq!(log.next(), "started");
    // The restarted instance activated again (without a load: fresh state)
    // and then took the message that waited in the mailbox.
    assert_eq!(
        queued.timeout(LIVENESS).wait(),
        Ok(vec!["fresh".to_string(), "kept".to_string()])
    );
    assert_eq!(activations.load(Ordering::SeqCst), 2);
}

#[test]
fn a_normal_reason_from_activation_stops_the_actor() {
    struct Gone;
    impl Actor for Gone {
        fn activate(
            &mut self,
            _: &mut Context<Self>,
        ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
            Some(async { Err(ExitReason::Normal) })
        }
    }
    impl Handler<Push> for Gone {
        fn handle(&mut self, _: Push, _: &mut Context<Self>) -> Vec<String> {
            panic!("a stopped actor handled a message");
        }
    }
    let system = ActorSystem::new();
    let a = system.spawn(Gone).unwrap();
    assert_eq!(system.block_on(a.wait_stopped()), ExitReason::Normal);
    assert!(a.ask(Push("late".into())).timeout(LIVENESS).wait().is_err());
}

#[test]
fn a_stop_during_activation_drops_it_and_runs_the_stop_hooks() {
    let system = ActorSystem::new();
    let (tx, rx) = oneshot::channel::<Vec<String>>();
    let (actor, _, log) = loader(Some(rx));
    let a = system.spawn(actor).unwrap();
    assert_eq!(log.next(), "started");
    let waiting = a.ask(Push("never".into()));
    a.stop();
    assert_eq!(system.block_on(a.wait_stopped()), ExitReason::Normal);
    assert_eq!(log.next(), "stopped");
    // The activation's future was dropped with the receiver it awaited.
    assert!(tx.send(vec![]).is_err());
    assert!(waiting.timeout(LIVENESS).wait().is_err());
}

#[test]
fn a_crash_after_activation_restarts_and_activates_again() {
    let system = ActorSystem::new();
    let (actor, activations, log) = loader(None);
    let a = system
        .spawn_factory_with_options(SpawnOptions::new(), {
            let load = actor.load.clone();
            let activations = activations.clone();
            let log = actor.log.clone();
            move || Loader {
                load: load.clone(),
                state: None,
                activations: activations.clone(),
                log: log.clone(),
            }
        })
        .unwrap();
    drop(actor);
    assert_eq!(log.next(), "started");
    assert_eq!(
        a.ask(Push("a".into())).timeout(LIVENESS).wait(),
        Ok(vec!["fresh".to_string(), "a".to_string()])
    );
    a.tell(Crash).unwrap();
    assert_eq!(
        a.ask(Push("b".into())).timeout(LIVENESS).wait(),
        Ok(vec!["fresh".to_string(), "b".to_string()])
    );
    assert_eq!(activations.load(Ordering::SeqCst), 2);
}

#[test]
fn a_local_actor_finishes_its_activation_before_a_direct_call() {
    let system = ActorSystem::new();
    let (tx, rx) = oneshot::channel();
    let (actor, _, _log) = loader(Some(rx));
    let mut local = LocalActor::new(&system.handle(), actor).unwrap();
    assert!(local.is_suspended());
    std::thread::spawn(move || tx.send(vec!["loaded".into()]).unwrap());
    assert_eq!(
        local.handle(Push("direct".into())).ok(),
        Some(vec!["loaded".to_string(), "direct".to_string()])
    );
}
