//! Supervision follows Erlang/OTP: strategies, restart from the factory,
//! intensity and escalation.

// Test helpers pass closures and tuples around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::{log, Log, LIVENESS};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;

/// A child that logs its lifecycle and can be told to fail.
struct Worker {
    name: &'static str,
    log: Sender<String>,
    handled: u32,
}

impl Actor for Worker {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} started", self.name));
    }
    fn before_restart(&mut self, reason: &ExitReason, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("{} before_restart: {reason}", self.name));
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} stopped", self.name));
    }
}

struct Fail;
impl Message for Fail {
    type Reply = ();
}
impl Handler<Fail> for Worker {
    fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
        panic!("{} fails", self.name)
    }
}

struct Count;
impl Message for Count {
    type Reply = u32;
}
impl Handler<Count> for Worker {
    fn handle(&mut self, _: Count, _: &mut Context<Self>) -> u32 {
        self.handled += 1;
        self.handled
    }
}

/// A supervisor that spawns named workers from factories.
struct Sup {
    strategy: SupervisorStrategy,
    names: Vec<&'static str>,
    log: Sender<String>,
    children: Arc<Mutex<Vec<ActorRef<Worker>>>>,
}

impl Actor for Sup {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let mut kids = self.children.lock().unwrap();
        kids.clear();
        for &name in &self.names {
            let log = self.log.clone();
            kids.push(
                ctx.spawn_with(move || Worker {
                    name,
                    log: log.clone(),
                    handled: 0,
                })
                .unwrap(),
            );
        }
        let _ = self.log.send("sup started".into());
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("sup stopped".into());
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        self.strategy
    }
}

fn start(strategy: SupervisorStrategy) -> (ActorSystem, Log, Vec<ActorRef<Worker>>, ActorRef<Sup>) {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let children = Arc::new(Mutex::new(vec![]));
    let sup = system
        .spawn(Sup {
            strategy,
            names: vec!["a", "b", "c"],
            log: tx,
            children: children.clone(),
        })
        .unwrap();
    rx.until("sup started");
    let kids = children.lock().unwrap().clone();
    for k in &kids {
        k.ask(Count).timeout(LIVENESS).wait().unwrap();
    }
    (system, rx, kids, sup)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn one_for_one_restarts_only_the_failed_child_with_fresh_state() {
    let (_system, rx, kids, _sup) = start(SupervisorStrategy::new(Strategy::OneForOne));
    rx.drain();
    kids[1].tell(Fail).unwrap();
    assert_eq!(rx.next(), "b before_restart: panicked: b fails");
    assert_eq!(rx.next(), "b started");
    // Same reference, fresh state; siblings untouched.
    assert_eq!(kids[1].ask(Count).timeout(LIVENESS).wait(), Ok(1));
    assert_eq!(kids[0].ask(Count).timeout(LIVENESS).wait(), Ok(2));
    assert_eq!(kids[2].ask(Count).timeout(LIVENESS).wait(), Ok(2));
    assert!(rx.drain().is_empty());
}

#[test]
fn one_for_all_restarts_every_child() {
    let (_system, rx, kids, _sup) = start(SupervisorStrategy::new(Strategy::OneForAll));
    rx.drain();
    kids[0].tell(Fail).unwrap();
    let mut events = vec![];
    for _ in 0..6 {
        events.push(rx.next());
    }
    assert_eq!(
        sorted(events),
        vec![
            "a before_restart: panicked: a fails",
            "a started",
            "b before_restart: panicked: a fails",
            "b started",
            "c before_restart: panicked: a fails",
            "c started",
        ]
    );
    for k in &kids {
        assert_eq!(k.ask(Count).timeout(LIVENESS).wait(), Ok(1));
    }
}

#[test]
fn rest_for_one_restarts_the_failed_child_and_later_siblings() {
    let (_system, rx, kids, _sup) = start(SupervisorStrategy::new(Strategy::RestForOne));
    rx.drain();
    kids[1].tell(Fail).unwrap();
    let mut events = vec![];
    for _ in 0..4 {
        events.push(rx.next());
    }
    assert_eq!(
        sorted(events),
        vec![
            "b before_restart: panicked: b fails",
            "b started",
            "c before_restart: panicked: b fails",
            "c started",
        ]
    );
    assert_eq!(kids[0].ask(Count).timeout(LIVENESS).wait(), Ok(2));
    assert_eq!(kids[1].ask(Count).timeout(LIVENESS).wait(), Ok(1));
    assert_eq!(kids[2].ask(Count).timeout(LIVENESS).wait(), Ok(1));
}

/// Top of the tree: supervises `Sup` with its own intensity.
struct Root {
    log: Sender<String>,
    children: Arc<Mutex<Vec<ActorRef<Worker>>>>,
    sup: Arc<Mutex<Option<ActorRef<Sup>>>>,
    root_intensity: u32,
}

impl Actor for Root {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let (log, children) = (self.log.clone(), self.children.clone());
        let sup = ctx
            .spawn_with(move || Sup {
                strategy: SupervisorStrategy::new(Strategy::OneForOne)
                    .intensity(2, Duration::from_secs(60)),
                names: vec!["a"],
                log: log.clone(),
                children: children.clone(),
            })
            .unwrap();
        *self.sup.lock().unwrap() = Some(sup);
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("root stopped".into());
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::new(Strategy::OneForOne)
            .intensity(self.root_intensity, Duration::from_secs(60))
    }
}

/// Fails worker "a" three times; its supervisor allows two restarts.
fn fail_worker_three_times(
    root_intensity: u32,
) -> (
    ActorSystem,
    Log,
    ActorRef<Root>,
    ActorRef<Sup>,
    Arc<Mutex<Vec<ActorRef<Worker>>>>,
) {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let children = Arc::new(Mutex::new(vec![]));
    let sup_slot = Arc::new(Mutex::new(None));
    let root = system
        .spawn(Root {
            log: tx,
            children: children.clone(),
            sup: sup_slot.clone(),
            root_intensity,
        })
        .unwrap();
    rx.until("sup started");
    for round in 0..3 {
        let worker = children.lock().unwrap()[0].clone();
        worker.ask(Count).timeout(LIVENESS).wait().unwrap();
        worker.tell(Fail).unwrap();
        if round < 2 {
            rx.until("a started");
        }
    }
    let sup = sup_slot.lock().unwrap().clone().unwrap();
    (system, rx, root, sup, children)
}

#[test]
fn intensity_exceeded_escalates_and_the_parent_restarts_the_supervisor() {
    let (_system, rx, root, sup, children) = fail_worker_three_times(3);
    // Over the limit: the supervisor fails; the root restarts it, which
    // stops its old child and builds a fresh tree.
    let skipped = rx.until("sup started");
    assert!(skipped.contains(&"a stopped".to_string()), "{skipped:?}");
    assert!(skipped.contains(&"a started".to_string()), "{skipped:?}");
    assert!(sup.is_alive() && root.is_alive());
    let fresh = children.lock().unwrap()[0].clone();
    assert_eq!(fresh.ask(Count).timeout(LIVENESS).wait(), Ok(1));
}

#[test]
fn escalation_goes_up_until_a_supervisor_can_absorb_it() {
    // The root allows no restart: the escalation passes through it too, and
    // as a top-level actor spawned from a value it stops, children first.
    let (system, rx, root, sup, _children) = fail_worker_three_times(0);
    let reason = system.block_on(root.wait_stopped());
    assert!(matches!(reason, ExitReason::RestartLimit(_)), "{reason}");
    let mut order = rx.drain();
    order.retain(|e| e.ends_with("stopped"));
    assert_eq!(order, vec!["a stopped", "sup stopped", "root stopped"]);
    assert!(!sup.is_alive());
}

#[test]
fn top_level_factory_actor_is_restarted_by_the_guardian() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let w = system
        .spawn_with(move || Worker {
            name: "top",
            log: tx.clone(),
            handled: 0,
        })
        .unwrap();
    rx.until("top started");
    w.ask(Count).timeout(LIVENESS).wait().unwrap();
    w.tell(Fail).unwrap();
    rx.until("top started");
    assert_eq!(w.ask(Count).timeout(LIVENESS).wait(), Ok(1));
}

#[test]
fn top_level_restart_limit_stops_the_actor() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let w = system
        .spawn_with(move || Worker {
            name: "top",
            log: tx.clone(),
            handled: 0,
        })
        .unwrap();
    // The guardian's default intensity is 3 restarts in 5 s.
    for _ in 0..4 {
        rx.until("top started");
        w.tell(Fail).unwrap();
    }
    let reason = system.block_on(w.wait_stopped());
    assert!(matches!(reason, ExitReason::RestartLimit(_)), "{reason}");
}

#[test]
fn permanent_child_restarts_after_stopping_itself() {
    struct Quitter {
        log: Sender<String>,
    }
    impl Actor for Quitter {
        fn started(&mut self, _: &mut Context<Self>) {
            let _ = self.log.send("quitter started".into());
        }
    }
    struct Quit;
    impl Message for Quit {
        type Reply = ();
    }
    impl Handler<Quit> for Quitter {
        fn handle(&mut self, _: Quit, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let q = system
        .spawn_factory_with_options(SpawnOptions::new().restart(Restart::Permanent), move || {
            Quitter { log: tx.clone() }
        })
        .unwrap();
    rx.until("quitter started");
    q.tell(Quit).unwrap();
    rx.until("quitter started");
    assert!(q.is_alive());
}
