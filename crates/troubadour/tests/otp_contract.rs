//! Corners of Erlang/OTP's documented semantics for links, exit signals
//! and monitors that users coming from Erlang rely on (erlang:link/1,
//! erlang:exit/2, process_flag(trap_exit, true), erlang:monitor/2).

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

fn wait_stopped(system: &ActorSystem, actor: &ActorRef<Node>) -> ExitReason {
    let stopped = actor.wait_stopped();
    system
        .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
        .expect("the actor did not stop")
}

/// Erlang: `exit(Pid, kill)` cannot be trapped, but the processes linked
/// to the killed one receive the reason `killed`, which they *can* trap
/// ("the exit reason killed ... is trappable by linked processes").
#[test]
fn a_neighbour_s_killed_exit_is_trappable() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let trapper = node(&system, "trapper", &tx);
    let victim = node(&system, "victim", &tx);
    let v = victim.clone();
    run(&trapper, move |_, ctx| {
        ctx.trap_exits(true);
        ctx.link(&v);
    });
    // The link is in place on both sides once the victim has handled a
    // message after it (signals overtake messages).
    run(&victim, |_, _| {});
    victim.kill();
    assert_eq!(
        rx.until("trapper trapped exit: killed"),
        Vec::<String>::new()
    );
    assert!(
        trapper.is_alive(),
        "a trapping actor survives a killed link"
    );
}

/// Erlang: "If the link already exists ... this function does nothing" —
/// a link is a set, so one exit produces one exit signal.
#[test]
fn linking_twice_is_one_link() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let trapper = node(&system, "trapper", &tx);
    let other = node(&system, "other", &tx);
    let o = other.clone();
    run(&trapper, move |_, ctx| {
        ctx.trap_exits(true);
        ctx.link(&o);
        ctx.link(&o);
    });
    run(&other, |_, _| {});
    run(&other, |_, ctx| ctx.fail("boom"));
    assert_eq!(
        rx.until("trapper trapped exit: failed: boom"),
        vec!["other stopped"]
    );
    // Anything further would be a second exit signal: a marker message
    // sent after the failure must be the next entry.
    run(&trapper, |n, _| {
        let _ = n.log.send("marker".into());
    });
    assert_eq!(rx.next(), "marker");
}

/// Erlang: a process that traps exits receives `{'EXIT', Pid, normal}`
/// from a linked process that ends normally (without trapping, a normal
/// exit signal is ignored).
#[test]
fn a_trapping_actor_hears_a_normal_exit() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let trapper = node(&system, "trapper", &tx);
    let other = node(&system, "other", &tx);
    let o = other.clone();
    run(&trapper, move |_, ctx| {
        ctx.trap_exits(true);
        ctx.link(&o);
    });
    run(&other, |_, _| {});
    other.stop();
    assert_eq!(
        rx.until("trapper trapped exit: normal"),
        vec!["other stopped"]
    );
}

/// A restart is not a stop: `wait_stopped` waits through restarts and
/// reports the final exit.
#[test]
fn wait_stopped_outlives_restarts() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let tx2 = tx.clone();
    let actor = system
        .spawn_with(move || Node {
            name: "phoenix",
            log: tx2.clone(),
        })
        .unwrap();
    let stopped = actor.wait_stopped();
    let _ = actor.tell(Do(Box::new(|_, _| panic!("once"))));
    // Restarted: it answers again.
    run(&actor, |n, _| {
        let _ = n.log.send("answered after restart".into());
    });
    rx.until("answered after restart");
    actor.stop();
    let reason = system
        .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
        .expect("wait_stopped never resolved");
    assert_eq!(reason, ExitReason::Normal);
    drop(tx);
}

/// OTP: a supervisor shutting a child down uses the reason `shutdown`,
/// which is what the child's monitors see.
#[test]
fn a_child_stopped_by_its_stopping_parent_exits_with_shutdown() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let parent = node(&system, "parent", &tx);
    let watcher = node(&system, "watcher", &tx);
    let (child_tx, child_rx) = std::sync::mpsc::channel();
    let tx3 = tx.clone();
    run(&parent, move |_, ctx| {
        let child = ctx
            .spawn(Node {
                name: "child",
                log: tx3,
            })
            .unwrap();
        child_tx.send(child).unwrap();
    });
    let child = child_rx.recv().unwrap();
    let c = child.clone();
    run(&watcher, move |_, ctx| ctx.monitor(&c));
    parent.stop();
    assert_eq!(wait_stopped(&system, &child), ExitReason::Shutdown);
    rx.until("watcher got down: shutdown");
}
