//! Lifecycle and supervision corners written from Erlang/OTP's and Akka's
//! documentation (issue 13, section 3 and the top-level strategy and
//! unstash-on-restart of section 4): what happens when hooks panic, when a
//! stop meets a failure, in which order a supervisor restarts its children,
//! and which clock its restart intensity reads.

// Test helpers pass closures and tuples around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::{log, LIVENESS};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use troubadour::prelude::*;

/// Runs every ready actor of a manually scheduled system until none is.
fn run_all(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, 64)).is_some() {}
}

/// Runs exactly one turn of the oldest ready actor.
fn run_once(system: &ActorSystem) {
    assert!(
        system.run_one(&mut |_| (0, 64)).is_some(),
        "an actor should be ready"
    );
}

/// Waits for an actor's exit reason; `None` if it never came (the waiter
/// was leaked), with LIVENESS as the hang guard.
fn stopped_reason(
    wait: impl std::future::Future<Output = ExitReason> + Send + 'static,
) -> Option<ExitReason> {
    common::block_on(async move { tokio::time::timeout(LIVENESS, wait).await.ok() })
}

fn manual() -> ActorSystem {
    ActorSystem::builder().manual_scheduling().build()
}

struct Fail;
impl Message for Fail {
    type Reply = ();
}

struct Ping;
impl Message for Ping {
    type Reply = &'static str;
}

// ---- 1. a panic while the cell processes a batch of signals ---------------

/// Logs its hooks; `after_restart` panics.
struct BadRestart {
    log: Sender<String>,
}

impl Actor for BadRestart {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("started".into());
    }
    fn after_restart(&mut self, _: &ExitReason, _: &mut Context<Self>) {
        panic!("after_restart fails");
    }
}

impl Handler<Fail> for BadRestart {
    fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
        panic!("handler fails")
    }
}

#[test]
fn a_panic_in_after_restart_does_not_lose_the_stop_and_waiter_queued_behind_the_restart() {
    let system = manual();
    let (tx, rx) = log();
    let a = system
        .spawn_with(move || BadRestart { log: tx.clone() })
        .unwrap();
    run_all(&system);
    assert_eq!(rx.drain(), vec!["started"]);
    a.tell(Fail).unwrap();
    // One turn: the handler panics and the guardian queues the restart.
    run_once(&system);
    // Queued behind the restart, in the same batch of signals.
    a.stop();
    let wait = a.wait_stopped();
    run_all(&system);
    let reason = stopped_reason(wait);
    assert_eq!(
        reason,
        Some(ExitReason::Normal),
        "wait_stopped must resolve with the stop that was asked for"
    );
    assert!(!a.is_alive());
}

#[test]
fn a_factory_that_panics_on_restart_is_a_new_failure_and_the_supervisor_tries_again() {
    struct Plain;
    impl Actor for Plain {}
    impl Handler<Fail> for Plain {
        fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
            panic!("handler fails")
        }
    }
    impl Handler<Ping> for Plain {
        fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
            "pong"
        }
    }
    let system = ActorSystem::new();
    let builds = Arc::new(AtomicU32::new(0));
    let counted = builds.clone();
    let a = system
        .spawn_with(move || {
            // The second build (the first restart) fails.
            if counted.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("factory fails");
            }
            Plain
        })
        .unwrap();
    assert_eq!(a.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    a.tell(Fail).unwrap();
    // The failed build counts as a failure; the guardian restarts again.
    assert_eq!(a.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(builds.load(Ordering::SeqCst), 3);
}

/// A supervisor whose `supervisor_strategy` panics.
struct BadStrategy;

struct Failing;
impl Actor for Failing {}
impl Handler<Fail> for Failing {
    fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
        panic!("child fails")
    }
}

struct SpawnFailing;
impl Message for SpawnFailing {
    type Reply = ActorRef<Failing>;
}

impl Actor for BadStrategy {
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        panic!("strategy fails")
    }
}

impl Handler<SpawnFailing> for BadStrategy {
    fn handle(&mut self, _: SpawnFailing, ctx: &mut Context<Self>) -> ActorRef<Failing> {
        ctx.spawn_with(|| Failing).unwrap()
    }
}

#[test]
fn a_panic_in_supervisor_strategy_fails_the_supervisor_and_answers_its_waiters() {
    let system = manual();
    let sup = system.spawn(BadStrategy).unwrap();
    let child = sup.ask(SpawnFailing);
    run_all(&system);
    let child = common::block_on(child).unwrap();
    child.tell(Fail).unwrap();
    // The child's turn: it fails and tells its supervisor.
    run_once(&system);
    // Queued behind the child's failure at the supervisor.
    let wait = sup.wait_stopped();
    run_all(&system);
    match stopped_reason(wait) {
        Some(ExitReason::Panicked(msg)) => assert!(msg.contains("strategy fails"), "{msg}"),
        other => panic!("expected the supervisor to fail with its panic, got {other:?}"),
    }
    assert!(
        !child.is_alive(),
        "a failed supervisor's children stop with it"
    );
}

// ---- 11. the stop hooks never run without `started` -----------------------

/// Logs every hook.
struct Hooks {
    log: Sender<String>,
}

impl Actor for Hooks {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("started".into());
    }
    fn stopping(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopping".into());
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopped".into());
    }
}

#[test]
fn a_stop_before_the_first_turn_still_runs_started_before_the_stop_hooks() {
    let system = manual();
    let (tx, rx) = log();
    let a = system.spawn(Hooks { log: tx }).unwrap();
    // Nothing has run yet: the stop is there before the first turn.
    a.stop();
    let wait = a.wait_stopped();
    run_all(&system);
    assert_eq!(stopped_reason(wait), Some(ExitReason::Normal));
    assert_eq!(rx.drain(), vec!["started", "stopping", "stopped"]);
}

// ---- 12. a panic in `stopping`/`stopped` is the exit reason ---------------

/// Panics in the stop hook it is told to.
struct BrittleStop {
    in_stopping: bool,
    log: Sender<String>,
}

impl Actor for BrittleStop {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let log = self.log.clone();
        ctx.spawn(Hooks { log }).unwrap();
    }
    fn stopping(&mut self, _: &mut Context<Self>) {
        if self.in_stopping {
            panic!("stopping fails");
        }
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("parent stopped".into());
        if !self.in_stopping {
            panic!("stopped fails");
        }
    }
}

impl Handler<Ping> for BrittleStop {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
        "pong"
    }
}

/// Forwards the `Down` it receives.
struct Watcher {
    downs: Sender<ExitReason>,
}
impl Actor for Watcher {}
impl Handler<Down> for Watcher {
    fn handle(&mut self, down: Down, _: &mut Context<Self>) {
        let _ = self.downs.send(down.reason);
    }
}

struct Watch(ActorRef<BrittleStop>);
impl Message for Watch {
    type Reply = ();
}
impl Handler<Watch> for Watcher {
    fn handle(&mut self, Watch(target): Watch, ctx: &mut Context<Self>) {
        ctx.monitor(&target);
    }
}

fn stop_brittle(in_stopping: bool) -> (Vec<String>, ExitReason, ExitReason) {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let a = system
        .spawn(BrittleStop {
            in_stopping,
            log: tx,
        })
        .unwrap();
    let (downs_tx, downs) = std::sync::mpsc::channel();
    let watcher = system.spawn(Watcher { downs: downs_tx }).unwrap();
    watcher
        .ask(Watch(a.clone()))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    a.ask(Ping).timeout(LIVENESS).wait().unwrap();
    let wait = a.wait_stopped();
    a.stop();
    let reason = stopped_reason(wait).expect("the stop must finish");
    let down = downs.recv_timeout(LIVENESS).expect("the watcher gets Down");
    let mut events = rx.drain();
    events.retain(|e| e != "started");
    (events, reason, down)
}

#[test]
fn a_panic_in_stopped_does_not_stop_the_stop_and_becomes_the_exit_reason() {
    let (events, reason, down) = stop_brittle(false);
    assert_eq!(events, vec!["stopping", "stopped", "parent stopped"]);
    assert!(
        matches!(&reason, ExitReason::Panicked(m) if m.contains("stopped fails")),
        "{reason:?}"
    );
    assert_eq!(down, reason, "monitors see the same reason");
}

#[test]
fn a_panic_in_stopping_does_not_stop_the_stop_and_becomes_the_exit_reason() {
    let (events, reason, down) = stop_brittle(true);
    // The children are still stopped, and `stopped` still runs.
    assert_eq!(events, vec!["stopping", "stopped", "parent stopped"]);
    assert!(
        matches!(&reason, ExitReason::Panicked(m) if m.contains("stopping fails")),
        "{reason:?}"
    );
    assert_eq!(down, reason, "monitors see the same reason");
}

// ---- supervisors: a worker and a supervisor that log ----------------------

/// A supervised child that logs its lifecycle; `Fail` logs "failing" and
/// panics.
struct Worker {
    name: &'static str,
    log: Sender<String>,
}

impl Actor for Worker {
    fn started(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} started", self.name));
    }
    fn before_restart(&mut self, _: &ExitReason, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} before_restart", self.name));
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} stopped", self.name));
    }
}

impl Handler<Fail> for Worker {
    fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} failing", self.name));
        panic!("{} fails", self.name)
    }
}

impl Handler<Ping> for Worker {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
        "pong"
    }
}

fn worker(name: &'static str, log: &Sender<String>) -> impl FnMut() -> Worker + Send + 'static {
    let log = log.clone();
    move || Worker {
        name,
        log: log.clone(),
    }
}

type Slot<T> = Arc<std::sync::Mutex<Vec<T>>>;

/// Spawns restartable workers named `names` from `started` (so a restart
/// of the supervisor builds them anew), publishes them in `kids` and logs
/// "sup started".
struct Sup {
    strategy: SupervisorStrategy,
    names: Vec<&'static str>,
    /// Of `names`, those spawned from a value (temporary children).
    temporary: Vec<&'static str>,
    log: Sender<String>,
    kids: Slot<ActorRef<Worker>>,
}

impl Actor for Sup {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let mut kids = self.kids.lock().unwrap();
        kids.clear();
        for &name in &self.names {
            let kid = if self.temporary.contains(&name) {
                ctx.spawn(worker(name, &self.log)())
            } else {
                ctx.spawn_with(worker(name, &self.log))
            };
            kids.push(kid.unwrap());
        }
        let _ = self.log.send("sup started".into());
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        self.strategy
    }
}

impl Handler<Ping> for Sup {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
        "pong"
    }
}

/// Blocks the supervisor's turn until the test sends on the channel, so
/// signals to it pile up meanwhile.
struct Block(std::sync::mpsc::Receiver<()>);
impl Message for Block {
    type Reply = ();
}
impl Handler<Block> for Sup {
    fn handle(&mut self, Block(gate): Block, _: &mut Context<Self>) {
        let _ = self.log.send("sup blocked".into());
        let _ = gate.recv_timeout(LIVENESS);
    }
}

fn sup(strategy: SupervisorStrategy, names: &[&'static str], log: &Sender<String>) -> Sup {
    Sup {
        strategy,
        names: names.to_vec(),
        temporary: vec![],
        log: log.clone(),
        kids: Arc::default(),
    }
}

fn kids(slot: &Slot<ActorRef<Worker>>) -> Vec<ActorRef<Worker>> {
    let kids = slot.lock().unwrap().clone();
    for k in &kids {
        assert_eq!(k.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    }
    kids
}

// ---- 6. a restarted supervisor starts with an empty restart history -------

/// Supervises one `Sup` (built by a factory) one-for-one.
struct Root {
    inner: Option<Box<dyn FnMut() -> Sup + Send>>,
}

impl Actor for Root {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let make = self.inner.take().unwrap();
        ctx.spawn_with(make).unwrap();
    }
}

#[test]
fn a_restarted_supervisor_starts_with_an_empty_restart_history() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let slot: Slot<ActorRef<Worker>> = Arc::default();
    let (log_tx, shared) = (tx.clone(), slot.clone());
    // One restart a minute allowed.
    let strategy = SupervisorStrategy::new(Strategy::OneForOne)
        .intensity(1, std::time::Duration::from_secs(60));
    let _root = system
        .spawn(Root {
            inner: Some(Box::new(move || Sup {
                kids: shared.clone(),
                ..sup(strategy, &["a"], &log_tx)
            })),
        })
        .unwrap();
    rx.until("sup started");
    let a = kids(&slot).remove(0);
    a.tell(Fail).unwrap();
    rx.until("a before_restart");
    assert_eq!(rx.until("a started"), Vec::<String>::new());
    // The second crash in the minute is one too many: the supervisor
    // escalates and the root restarts it with a fresh child.
    a.tell(Fail).unwrap();
    rx.until("sup started");
    let fresh = kids(&slot).remove(0);
    rx.drain();
    // The fresh supervisor's first restart is allowed: the child restarts,
    // the supervisor does not escalate again.
    fresh.tell(Fail).unwrap();
    assert_eq!(rx.next(), "a failing");
    assert_eq!(rx.next(), "a before_restart");
    assert_eq!(rx.next(), "a started");
    assert_eq!(fresh.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert!(rx.drain().is_empty());
}

// ---- 8. a kill of an already failed child is not a second failure --------

#[test]
fn killing_a_child_that_already_failed_is_not_a_second_failure() {
    let system = ActorSystem::builder().worker_threads(4).build();
    let (tx, rx) = log();
    let slot: Slot<ActorRef<Worker>> = Arc::default();
    // One restart allowed: a second failure would make it give up.
    let strategy = SupervisorStrategy::new(Strategy::OneForOne)
        .intensity(1, std::time::Duration::from_secs(60));
    let s = system
        .spawn(Sup {
            kids: slot.clone(),
            ..sup(strategy, &["a"], &tx)
        })
        .unwrap();
    rx.until("sup started");
    let a = kids(&slot).remove(0);
    // Hold the supervisor in a handler, so it decides only when released.
    let (gate, blocked) = std::sync::mpsc::channel();
    let held = s.ask(Block(blocked)).timeout(LIVENESS);
    rx.until("sup blocked");
    a.tell(Fail).unwrap();
    // "failing" is logged on the turn that fails: the kill is processed on
    // a later turn, while the child waits for its supervisor's decision.
    rx.until("a failing");
    a.kill();
    gate.send(()).unwrap();
    held.wait().unwrap();
    rx.until("a started");
    // Signals come before messages: by the time it answers, the supervisor
    // has seen everything the child sent.
    assert_eq!(s.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(a.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert!(s.is_alive() && a.is_alive());
}

// ---- 9. restart intensity reads the system's clock ------------------------

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

#[test]
fn the_guardian_measures_restart_intensity_on_virtual_time() {
    let system = ActorSystem::builder().virtual_time().build();
    let (tx, rx) = log();
    let a = system.spawn_with(worker("top", &tx)).unwrap();
    rx.until("top started");
    // The guardian allows 3 restarts in 5 s; these are an hour apart.
    for _ in 0..5 {
        system.advance_time(HOUR).unwrap();
        a.tell(Fail).unwrap();
        rx.until("top started");
    }
    assert_eq!(a.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
}

#[test]
fn a_supervisor_measures_restart_intensity_on_virtual_time() {
    let system = ActorSystem::builder().virtual_time().build();
    let (tx, rx) = log();
    let slot: Slot<ActorRef<Worker>> = Arc::default();
    let strategy = SupervisorStrategy::new(Strategy::OneForOne)
        .intensity(1, std::time::Duration::from_secs(5));
    let s = system
        .spawn(Sup {
            kids: slot.clone(),
            ..sup(strategy, &["a"], &tx)
        })
        .unwrap();
    rx.until("sup started");
    let a = kids(&slot).remove(0);
    for _ in 0..3 {
        system.advance_time(HOUR).unwrap();
        a.tell(Fail).unwrap();
        rx.until("a before_restart");
        rx.until("a started");
    }
    assert_eq!(s.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert!(s.is_alive());
}

// ---- section 4: a configurable top-level strategy -------------------------

#[test]
fn the_guardian_strategy_is_configurable() {
    let system = ActorSystem::builder()
        .guardian_strategy(
            SupervisorStrategy::new(Strategy::OneForOne)
                .intensity(1, std::time::Duration::from_secs(60)),
        )
        .build();
    let (tx, rx) = log();
    let a = system.spawn_with(worker("top", &tx)).unwrap();
    rx.until("top started");
    a.tell(Fail).unwrap();
    rx.until("top started");
    // One restart a minute: the second failure stops it.
    let wait = a.wait_stopped();
    a.tell(Fail).unwrap();
    let reason = stopped_reason(wait).expect("the guardian gives up");
    assert!(matches!(reason, ExitReason::RestartLimit(_)), "{reason:?}");

    // And more than the default 3 in 5 s when asked for.
    let system = ActorSystem::builder()
        .guardian_strategy(
            SupervisorStrategy::new(Strategy::OneForOne)
                .intensity(10, std::time::Duration::from_secs(60)),
        )
        .build();
    let b = system.spawn_with(worker("many", &tx)).unwrap();
    rx.until("many started");
    for _ in 0..6 {
        b.tell(Fail).unwrap();
        rx.until("many started");
    }
    assert_eq!(b.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
}

#[test]
fn the_guardian_refuses_strategies_other_than_one_for_one() {
    let built = ActorSystem::builder()
        .guardian_strategy(SupervisorStrategy::new(Strategy::OneForAll))
        .try_build();
    assert!(matches!(
        built,
        Err(troubadour::BuildError::GuardianStrategy(
            Strategy::OneForAll
        ))
    ));
}

// ---- 5. one-for-all and rest-for-one restart in OTP's order ---------------

/// Starts a supervisor of `names` and returns its children once started.
fn supervise(
    strategy: Strategy,
    names: &[&'static str],
    temporary: &[&'static str],
) -> (
    ActorSystem,
    common::Log,
    ActorRef<Sup>,
    Vec<ActorRef<Worker>>,
) {
    let system = ActorSystem::builder().worker_threads(4).build();
    let (tx, rx) = log();
    let slot: Slot<ActorRef<Worker>> = Arc::default();
    let s = system
        .spawn(Sup {
            kids: slot.clone(),
            temporary: temporary.to_vec(),
            ..sup(SupervisorStrategy::new(strategy), names, &tx)
        })
        .unwrap();
    rx.until("sup started");
    let kids = kids(&slot);
    rx.drain();
    (system, rx, s, kids)
}

fn next_events(rx: &common::Log, n: usize) -> Vec<String> {
    (0..n).map(|_| rx.next()).collect()
}

#[test]
fn one_for_all_terminates_in_reverse_start_order_then_starts_in_start_order() {
    let (_system, rx, _sup, kids) = supervise(Strategy::OneForAll, &["a", "b", "c"], &[]);
    kids[1].tell(Fail).unwrap();
    // Each step finishes before the next begins, so the log has one order.
    assert_eq!(
        next_events(&rx, 7),
        vec![
            "b failing",
            "c before_restart",
            "b before_restart",
            "a before_restart",
            "a started",
            "b started",
            "c started",
        ]
    );
    for k in &kids {
        assert_eq!(k.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    }
    assert!(rx.drain().is_empty());
}

#[test]
fn rest_for_one_restarts_the_failed_child_and_later_ones_in_otp_order() {
    let (_system, rx, _sup, kids) = supervise(Strategy::RestForOne, &["a", "b", "c", "d"], &[]);
    kids[1].tell(Fail).unwrap();
    assert_eq!(
        next_events(&rx, 7),
        vec![
            "b failing",
            "d before_restart",
            "c before_restart",
            "b before_restart",
            "b started",
            "c started",
            "d started",
        ]
    );
    for k in &kids {
        assert_eq!(k.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    }
    // "a" came before the failed child: untouched.
    assert!(rx.drain().is_empty());
}

#[test]
fn one_for_all_stops_a_temporary_sibling_instead_of_restarting_it() {
    let (_system, rx, s, kids) = supervise(Strategy::OneForAll, &["a", "t", "c"], &["t"]);
    kids[0].tell(Fail).unwrap();
    assert_eq!(
        next_events(&rx, 6),
        vec![
            "a failing",
            "c before_restart",
            "t stopped",
            "a before_restart",
            "a started",
            "c started",
        ]
    );
    assert!(
        !kids[1].is_alive(),
        "a temporary child is not restarted (OTP)"
    );
    assert_eq!(kids[0].ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(kids[2].ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(s.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
}

#[test]
fn a_failure_during_a_one_for_all_restart_is_decided_after_it() {
    let (_system, rx, s, kids) = supervise(Strategy::OneForAll, &["a", "b"], &[]);
    // Hold the supervisor so that both failures reach it together.
    let (gate, blocked) = std::sync::mpsc::channel();
    let held = s.ask(Block(blocked)).timeout(LIVENESS);
    rx.until("sup blocked");
    kids[0].tell(Fail).unwrap();
    rx.until("a failing");
    kids[1].tell(Fail).unwrap();
    rx.until("b failing");
    gate.send(()).unwrap();
    held.wait().unwrap();
    // One restart of both: "b" was terminated by it, so its own failure is
    // answered and not a second restart.
    assert_eq!(
        next_events(&rx, 4),
        vec![
            "b before_restart",
            "a before_restart",
            "a started",
            "b started"
        ]
    );
    assert_eq!(s.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    for k in &kids {
        assert_eq!(k.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    }
    assert!(rx.drain().is_empty());
}

// ---- 15. a permanent child stopped from outside is restarted --------------

/// Spawns children on request and terminates them on request.
struct Parent {
    log: Sender<String>,
}
impl Actor for Parent {}

struct SpawnChild(&'static str, Restart);
impl Message for SpawnChild {
    type Reply = ActorRef<Worker>;
}
impl Handler<SpawnChild> for Parent {
    fn handle(
        &mut self,
        SpawnChild(name, restart): SpawnChild,
        ctx: &mut Context<Self>,
    ) -> ActorRef<Worker> {
        ctx.spawn_factory_with_options(
            SpawnOptions::new().restart(restart),
            worker(name, &self.log),
        )
        .unwrap()
    }
}

struct TerminateChild(ActorRef<Worker>);
impl Message for TerminateChild {
    type Reply = Result<(), troubadour::TerminateError>;
}
impl Handler<TerminateChild> for Parent {
    fn handle(
        &mut self,
        TerminateChild(child): TerminateChild,
        ctx: &mut Context<Self>,
    ) -> Result<(), troubadour::TerminateError> {
        ctx.terminate_child(&child)
    }
}

struct Children;
impl Message for Children {
    type Reply = Vec<ActorId>;
}
impl Handler<Children> for Parent {
    fn handle(&mut self, _: Children, ctx: &mut Context<Self>) -> Vec<ActorId> {
        ctx.children()
    }
}

/// The parent hears of a child's exit on its own turn, after the child's
/// waiters: asks until it no longer lists any child (LIVENESS is only the
/// hang guard).
fn no_children_eventually(parent: &ActorRef<Parent>) {
    let start = std::time::Instant::now();
    loop {
        let children = parent.ask(Children).timeout(LIVENESS).wait().unwrap();
        if children.is_empty() {
            return;
        }
        assert!(start.elapsed() < LIVENESS, "still a child: {children:?}");
        std::thread::yield_now();
    }
}

fn parent_with(restart: Restart) -> (ActorSystem, common::Log, ActorRef<Parent>, ActorRef<Worker>) {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let parent = system.spawn(Parent { log: tx }).unwrap();
    let child = parent
        .ask(SpawnChild("a", restart))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    rx.until("a started");
    (system, rx, parent, child)
}

#[test]
fn a_permanent_child_stopped_with_actor_ref_stop_is_restarted() {
    let (_system, rx, parent, child) = parent_with(Restart::Permanent);
    child.stop();
    // OTP: a permanent child is restarted after any exit, a normal one too.
    assert_eq!(rx.next(), "a before_restart");
    assert_eq!(rx.next(), "a started");
    assert_eq!(child.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(
        parent.ask(Children).timeout(LIVENESS).wait(),
        Ok(vec![child.id()])
    );
}

#[test]
fn a_transient_child_stopped_with_actor_ref_stop_stays_stopped() {
    let (_system, rx, parent, child) = parent_with(Restart::Transient);
    let wait = child.wait_stopped();
    child.stop();
    assert_eq!(stopped_reason(wait), Some(ExitReason::Normal));
    assert_eq!(rx.next(), "a stopped");
    no_children_eventually(&parent);
}

#[test]
fn terminate_child_stops_a_permanent_child_for_good() {
    let (_system, rx, parent, child) = parent_with(Restart::Permanent);
    let wait = child.wait_stopped();
    let done = parent
        .ask(TerminateChild(child.clone()))
        .timeout(LIVENESS)
        .wait();
    assert_eq!(done, Ok(Ok(())));
    assert_eq!(stopped_reason(wait), Some(ExitReason::Shutdown));
    assert_eq!(rx.next(), "a stopped");
    no_children_eventually(&parent);
    assert!(rx.drain().is_empty(), "not restarted");
    // No longer its child.
    let again = parent
        .ask(TerminateChild(child.clone()))
        .timeout(LIVENESS)
        .wait();
    assert_eq!(
        again,
        Ok(Err(troubadour::TerminateError::NotAChild(child.id())))
    );
}

#[test]
fn terminate_child_refuses_an_actor_that_is_not_its_child() {
    let (system, _rx, parent, _child) = parent_with(Restart::Permanent);
    let (tx, _rx2) = log();
    let stranger = system.spawn(worker("s", &tx)()).unwrap();
    let refused = parent
        .ask(TerminateChild(stranger.clone()))
        .timeout(LIVENESS)
        .wait();
    assert_eq!(
        refused,
        Ok(Err(troubadour::TerminateError::NotAChild(stranger.id())))
    );
    assert_eq!(stranger.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
}

#[test]
fn a_permanent_top_level_actor_is_restarted_after_stop_and_terminated_by_the_system() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let top = system
        .spawn_factory_with_options(
            SpawnOptions::new().restart(Restart::Permanent),
            worker("top", &tx),
        )
        .unwrap();
    rx.until("top started");
    top.stop();
    rx.until("top before_restart");
    rx.until("top started");
    assert_eq!(top.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    let wait = top.wait_stopped();
    assert_eq!(system.terminate(&top), Ok(()));
    assert_eq!(stopped_reason(wait), Some(ExitReason::Shutdown));
    assert!(!top.is_alive());
    // A child belongs to its parent, not to the system.
    let parent = system.spawn(Parent { log: tx.clone() }).unwrap();
    let child = parent
        .ask(SpawnChild("c", Restart::Permanent))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    assert_eq!(
        system.terminate(&child),
        Err(troubadour::TerminateError::NotAChild(child.id()))
    );
    // Nor does another system's top-level actor.
    let other = ActorSystem::new();
    let foreign = other.spawn(worker("f", &tx)()).unwrap();
    assert_eq!(
        system.terminate(&foreign),
        Err(troubadour::TerminateError::NotAChild(foreign.id()))
    );
    assert_eq!(other.terminate(&foreign), Ok(()));
}

// ---- section 4: optional unstash of everything stashed on restart ---------

/// Stashes every `Get` until it is ready; only a restarted instance is.
struct Gated {
    ready: bool,
}
impl Actor for Gated {}

struct Get;
impl Message for Get {
    type Reply = u32;
}
impl Handler<Get> for Gated {
    fn handle(&mut self, _: Get, ctx: &mut Context<Self>) -> u32 {
        if !self.ready {
            ctx.stash(Get);
        }
        42
    }
}

struct Stashed;
impl Message for Stashed {
    type Reply = usize;
}
impl Handler<Stashed> for Gated {
    fn handle(&mut self, _: Stashed, ctx: &mut Context<Self>) -> usize {
        ctx.stashed()
    }
}

impl Handler<Fail> for Gated {
    fn handle(&mut self, _: Fail, _: &mut Context<Self>) {
        panic!("gated fails")
    }
}

fn gated(unstash: bool) -> (ActorSystem, ActorRef<Gated>) {
    let system = ActorSystem::new();
    let builds = AtomicU32::new(0);
    let a = system
        .spawn_factory_with_options(SpawnOptions::new().unstash_on_restart(unstash), move || {
            Gated {
                ready: builds.fetch_add(1, Ordering::SeqCst) > 0,
            }
        })
        .unwrap();
    (system, a)
}

#[test]
fn with_unstash_on_restart_an_ask_behind_a_stash_is_answered_by_the_fresh_instance() {
    let (_system, a) = gated(true);
    let reply = a.ask(Get).timeout(LIVENESS);
    assert_eq!(a.ask(Stashed).timeout(LIVENESS).wait(), Ok(1));
    a.tell(Fail).unwrap();
    assert_eq!(reply.wait(), Ok(42));
    assert_eq!(a.ask(Stashed).timeout(LIVENESS).wait(), Ok(0));
}

#[test]
fn without_unstash_on_restart_the_stash_survives_the_restart() {
    let (_system, a) = gated(false);
    let _reply = a.ask(Get).timeout(LIVENESS);
    assert_eq!(a.ask(Stashed).timeout(LIVENESS).wait(), Ok(1));
    a.tell(Fail).unwrap();
    assert_eq!(a.ask(Stashed).timeout(LIVENESS).wait(), Ok(1));
}

/// A restartable child with a child of its own, so that terminating it
/// takes a while: it waits for its child to stop first.
struct Middle {
    log: Sender<String>,
}

impl Actor for Middle {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.spawn_with(worker("inner", &self.log)).unwrap();
        let _ = self.log.send("b started".into());
    }
    fn before_restart(&mut self, _: &ExitReason, _: &mut Context<Self>) {
        let _ = self.log.send("b before_restart".into());
    }
}

impl Handler<Ping> for Middle {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> &'static str {
        "pong"
    }
}

/// One-for-all over a `Worker` "a" and a `Middle` "b".
struct Pair {
    log: Sender<String>,
    kids: Arc<std::sync::Mutex<Option<(ActorRef<Worker>, ActorRef<Middle>)>>>,
}

impl Actor for Pair {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let a = ctx.spawn_with(worker("a", &self.log)).unwrap();
        let log = self.log.clone();
        let b = ctx.spawn_with(move || Middle { log: log.clone() }).unwrap();
        *self.kids.lock().unwrap() = Some((a, b));
    }
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::new(Strategy::OneForAll)
    }
}

#[test]
fn a_kill_while_a_child_is_terminated_for_a_one_for_all_restart_does_not_stall_it() {
    let system = manual();
    let (tx, rx) = log();
    let kids = Arc::default();
    let _pair = system
        .spawn(Pair {
            log: tx,
            kids: Arc::clone(&kids),
        })
        .unwrap();
    run_all(&system);
    let (a, b) = kids.lock().unwrap().clone().unwrap();
    rx.drain();
    a.tell(Fail).unwrap();
    // One turn at a time until "b" has begun terminating for the restart:
    // it is waiting for its own child to stop.
    loop {
        run_once(&system);
        if rx.drain().iter().any(|e| e == "b before_restart") {
            break;
        }
    }
    b.kill();
    run_all(&system);
    let events = rx.drain();
    assert!(events.contains(&"a started".to_string()), "{events:?}");
    assert!(events.contains(&"b started".to_string()), "{events:?}");
    let (pa, pb) = (a.ask(Ping), b.ask(Ping));
    run_all(&system);
    assert_eq!(common::block_on(pa), Ok("pong"));
    assert_eq!(common::block_on(pb), Ok("pong"));
}

#[test]
fn a_panic_in_started_fails_the_actor_and_the_signals_queued_before_its_first_turn_are_answered() {
    struct BadStart;
    impl Actor for BadStart {
        fn started(&mut self, _: &mut Context<Self>) {
            panic!("started fails");
        }
    }
    let system = manual();
    let a = system.spawn(BadStart).unwrap();
    let wait = a.wait_stopped();
    a.stop();
    run_all(&system);
    // Spawned from a value, it is not restarted: it stops with the panic.
    match stopped_reason(wait) {
        Some(ExitReason::Panicked(msg)) => assert!(msg.contains("started fails"), "{msg}"),
        other => panic!("expected the actor to stop with its panic, got {other:?}"),
    }
}

#[test]
fn stopping_a_permanent_child_that_already_failed_is_not_a_second_failure() {
    let system = ActorSystem::builder().worker_threads(4).build();
    let (tx, rx) = log();
    let parent = system.spawn(Parent { log: tx.clone() }).unwrap();
    // The parent allows the default 3 restarts in 5 s; hold it so that the
    // failure and the stop both wait for its decision.
    let a = parent
        .ask(SpawnChild("a", Restart::Permanent))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    rx.until("a started");
    let (gate, blocked) = std::sync::mpsc::channel();
    let held = parent.ask(Hold(blocked)).timeout(LIVENESS);
    rx.until("parent blocked");
    a.tell(Fail).unwrap();
    rx.until("a failing");
    a.stop();
    gate.send(()).unwrap();
    held.wait().unwrap();
    // One decision, one restart: the stop of a permanent child that is
    // already failing is answered by the restart under way.
    assert_eq!(rx.next(), "a before_restart");
    assert_eq!(rx.next(), "a started");
    assert_eq!(a.ask(Ping).timeout(LIVENESS).wait(), Ok("pong"));
    assert_eq!(
        parent.ask(Children).timeout(LIVENESS).wait(),
        Ok(vec![a.id()])
    );
    assert!(rx.drain().is_empty(), "restarted once");
}

struct Hold(std::sync::mpsc::Receiver<()>);
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Parent {
    fn handle(&mut self, Hold(gate): Hold, _: &mut Context<Self>) {
        let _ = self.log.send("parent blocked".into());
        let _ = gate.recv_timeout(LIVENESS);
    }
}

/// Suspends the supervisor in an async handler until the sender fires.
struct Suspend(tokio::sync::oneshot::Receiver<()>);
impl Message for Suspend {
    type Reply = ();
}
impl AsyncHandler<Suspend> for Sup {
    async fn handle(&mut self, Suspend(gate): Suspend, _: &mut Context<Self>) {
        let _ = self.log.send("sup suspended".into());
        let _ = gate.await;
    }
}

#[test]
fn failures_decided_after_a_suspended_handler_join_the_one_for_all_restart_they_start() {
    // Manually scheduled, so that both failures are surely deferred before
    // the handler finishes.
    let system = manual();
    let (tx, rx) = log();
    let slot: Slot<ActorRef<Worker>> = Arc::default();
    // One restart a minute: a second decision would make it give up.
    let strategy = SupervisorStrategy::new(Strategy::OneForAll)
        .intensity(1, std::time::Duration::from_secs(60));
    let s = system
        .spawn(Sup {
            kids: slot.clone(),
            ..sup(strategy, &["a", "b"], &tx)
        })
        .unwrap();
    run_all(&system);
    let kids = slot.lock().unwrap().clone();
    // While its handler is suspended the supervisor defers its decisions.
    let (gate, suspended) = tokio::sync::oneshot::channel();
    s.tell(Suspend(suspended)).unwrap();
    run_all(&system);
    rx.until("sup suspended");
    for k in &kids {
        k.tell(Fail).unwrap();
        run_all(&system);
    }
    rx.until("b failing");
    gate.send(()).unwrap();
    run_all(&system);
    // The first deferred failure starts one restart of both; the second
    // joins it and is answered by it (b is restarted anyway).
    assert_eq!(
        rx.drain(),
        vec![
            "b before_restart",
            "a before_restart",
            "a started",
            "b started"
        ]
    );
    let pings: Vec<_> = kids.iter().map(|k| k.ask(Ping)).collect();
    let sup_ping = s.ask(Ping);
    run_all(&system);
    assert_eq!(common::block_on(sup_ping), Ok("pong"));
    for p in pings {
        assert_eq!(common::block_on(p), Ok("pong"));
    }
    assert!(s.is_alive());
}

#[test]
fn a_graceful_stop_sticks_even_for_a_permanent_child() {
    let (_system, rx, parent, child) = parent_with(Restart::Permanent);
    let wait = child.wait_stopped();
    child.stop_gracefully();
    assert_eq!(stopped_reason(wait), Some(ExitReason::Normal));
    assert_eq!(rx.next(), "a stopped");
    no_children_eventually(&parent);
    assert!(rx.drain().is_empty(), "not restarted");
}
