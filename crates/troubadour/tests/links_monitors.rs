//! Links (both ways), monitors (one way, with the exit reason), trapping
//! exits, and the exit reasons themselves.

// Test helpers pass closures and tuples around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::{log, LIVENESS};
use std::sync::mpsc::Sender;
use troubadour::prelude::*;

struct Node {
    name: &'static str,
    log: Sender<String>,
}

impl Actor for Node {
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} stopped", self.name));
    }
}

/// Test-side commands run inside the actor.
struct Do(Box<dyn FnOnce(&mut Node, &mut Context<Node>) + Send>);
impl Message for Do {
    type Reply = ();
}
impl Handler<Do> for Node {
    fn handle(&mut self, Do(f): Do, ctx: &mut Context<Self>) {
        f(self, ctx)
    }
}

impl Handler<Down> for Node {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("{} got down: {}", self.name, d.reason));
    }
}

impl Handler<Exited> for Node {
    fn handle(&mut self, e: Exited, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("{} trapped exit: {}", self.name, e.reason));
    }
}

fn node(system: &ActorSystem, name: &'static str, log: &Sender<String>) -> ActorRef<Node> {
    system
        .spawn(Node {
            name,
            log: log.clone(),
        })
        .unwrap()
}

fn run(on: &ActorRef<Node>, f: impl FnOnce(&mut Node, &mut Context<Node>) + Send + 'static) {
    on.ask(Do(Box::new(f))).timeout(LIVENESS).wait().unwrap();
}

#[test]
fn monitor_delivers_each_exit_reason() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let watcher = node(&system, "w", &tx);
    let cases: Vec<(Box<dyn Fn(&ActorRef<Node>) + Send>, &str)> = vec![
        (Box::new(|t| t.stop()), "normal"),
        (Box::new(|t| t.kill()), "killed"),
        (
            Box::new(|t| {
                let _ = t.tell(Do(Box::new(|_, _| panic!("kaput"))));
            }),
            "panicked: kaput",
        ),
        (
            Box::new(|t| {
                let _ = t.tell(Do(Box::new(|_, ctx| ctx.fail("bad input"))));
            }),
            "failed: bad input",
        ),
    ];
    for (make_exit, want) in cases {
        let target = node(&system, "t", &tx);
        let t2 = target.clone();
        run(&watcher, move |_, ctx| ctx.monitor(&t2));
        make_exit(&target);
        rx.until(&format!("w got down: {want}"));
    }
}

#[test]
fn monitoring_a_stopped_actor_reports_its_exit_reason() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let watcher = node(&system, "w", &tx);
    let target = node(&system, "t", &tx);
    target.stop();
    system.block_on(target.wait_stopped());
    run(&watcher, move |_, ctx| ctx.monitor(&target));
    // Erlang answers `noproc`; we know more and report the actual reason.
    assert_eq!(rx.until("w got down: normal").len(), 1);
}

#[test]
fn link_propagates_abnormal_exit_both_ways() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    // a fails, b dies with it.
    let a = node(&system, "a", &tx);
    let b = node(&system, "b", &tx);
    let a2 = a.clone();
    run(&b, move |_, ctx| ctx.link(&a2));
    a.tell(Do(Box::new(|_, _| panic!("a broke")))).unwrap();
    let reason = system.block_on(b.wait_stopped());
    assert_eq!(reason.to_string(), "panicked: a broke");
    // The other direction: d fails, c (which created the link) dies.
    let c = node(&system, "c", &tx);
    let d = node(&system, "d", &tx);
    let d2 = d.clone();
    run(&c, move |_, ctx| ctx.link(&d2));
    d.kill();
    assert_eq!(system.block_on(c.wait_stopped()), ExitReason::Killed);
    drop(rx);
}

#[test]
fn normal_exit_does_not_kill_linked_actors() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let a = node(&system, "a", &tx);
    let b = node(&system, "b", &tx);
    let a2 = a.clone();
    run(&b, move |_, ctx| ctx.link(&a2));
    a.stop();
    system.block_on(a.wait_stopped());
    // b still answers after the exit signal was processed.
    run(&b, |_, _| {});
    assert!(b.is_alive());
}

#[test]
fn unlink_stops_propagation() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let a = node(&system, "a", &tx);
    let b = node(&system, "b", &tx);
    let (a2, a3) = (a.clone(), a.clone());
    run(&b, move |_, ctx| ctx.link(&a2));
    run(&b, move |_, ctx| ctx.unlink(&a3));
    a.kill();
    system.block_on(a.wait_stopped());
    run(&b, |_, _| {});
    assert!(b.is_alive());
}

#[test]
fn trapping_turns_exit_signals_into_messages() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let trapper = node(&system, "trapper", &tx);
    let a = node(&system, "a", &tx);
    let a2 = a.clone();
    run(&trapper, move |_, ctx| {
        ctx.trap_exits(true);
        ctx.link(&a2);
    });
    a.tell(Do(Box::new(|_, _| panic!("oops")))).unwrap();
    rx.until("trapper trapped exit: panicked: oops");
    // Normal exits are delivered too when trapping.
    let b = node(&system, "b", &tx);
    let b2 = b.clone();
    run(&trapper, move |_, ctx| ctx.link(&b2));
    b.stop();
    rx.until("trapper trapped exit: normal");
    assert!(trapper.is_alive());
}

#[test]
fn kill_is_not_trappable() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let trapper = node(&system, "trapper", &tx);
    run(&trapper, |_, ctx| ctx.trap_exits(true));
    trapper.kill();
    assert_eq!(system.block_on(trapper.wait_stopped()), ExitReason::Killed);
}

#[test]
fn linking_to_a_dead_actor_fails_with_noproc() {
    let system = ActorSystem::new();
    let (tx, _rx) = log();
    let a = node(&system, "a", &tx);
    let b = node(&system, "b", &tx);
    a.stop();
    system.block_on(a.wait_stopped());
    let _ = b.tell(Do(Box::new(move |_, ctx| ctx.link(&a))));
    assert_eq!(system.block_on(b.wait_stopped()), ExitReason::NoProc);
}

#[test]
fn demonitor_stops_notifications() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let watcher = node(&system, "w", &tx);
    let t = node(&system, "t", &tx);
    let (t2, t3) = (t.clone(), t.clone());
    run(&watcher, move |_, ctx| ctx.monitor(&t2));
    run(&watcher, move |_, ctx| ctx.demonitor(&t3));
    // Make sure the target processed the demonitor before it stops: signals
    // are handled in order, and this ask is answered after them.
    run(&t, |_, _| {});
    t.stop();
    system.block_on(t.wait_stopped());
    run(&watcher, |_, _| {});
    assert!(rx.drain().iter().all(|e| !e.starts_with("w got down")));
}
