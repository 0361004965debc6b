//! The seam for the remote layer (`troubadour::remote`), driven by a fake
//! route that records what a network layer would be handed: a proxy is an
//! ordinary `ActorRef`, its sends reach the route while the message type is
//! known, refusals come back as typed errors holding the message, remote
//! asks end with the reply or a typed error, and signals (stop, kill, links,
//! monitors, exits) travel both ways through the runtime's own machinery.

// Test helpers pass closures around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::{Batch, Batcher, LIVENESS};
use std::sync::{Arc, Mutex};
use troubadour::prelude::*;
use troubadour::remote::{self, ControlRef, OutgoingSignal, Refusal, RemoteProcess, Route};
use troubadour::NodeId;

#[derive(Debug, PartialEq)]
struct Add(u64);
impl Message for Add {
    type Reply = ();
}

#[derive(Debug, PartialEq)]
struct Get;
impl Message for Get {
    type Reply = u64;
}

/// The remote actor's type as this node knows it; never runs here.
struct Counter;
impl Actor for Counter {}
impl Handler<Add> for Counter {
    fn handle(&mut self, _: Add, _: &mut Context<Self>) {}
}
impl Handler<Get> for Counter {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> u64 {
        unreachable!("a proxy's handlers never run")
    }
}

#[derive(Default)]
struct Recorded {
    adds: Vec<u64>,
    asks: Vec<troubadour::remote::ReplySender<u64>>,
    signals: Vec<(ActorId, OutgoingSignal)>,
}

/// A route that takes `Add` (recording it) and `Get` (keeping its reply
/// sender), refuses with `refuse` when set, and knows no other type.
#[derive(Default)]
struct FakeRoute {
    recorded: Mutex<Recorded>,
    refuse: Mutex<Option<Refusal>>,
    dead: Mutex<bool>,
}

impl Route for FakeRoute {
    fn send(&self, out: &mut remote::Outgoing<'_>) -> Result<(), Refusal> {
        if let Some(r) = self.refuse.lock().unwrap().clone() {
            return Err(r);
        }
        let mut rec = self.recorded.lock().unwrap();
        if let Some(add) = out.message::<Add>() {
            rec.adds.push(add.0);
            return Ok(());
        }
        if out.message::<Get>().is_some() {
            let reply = out
                .take_reply::<u64>()
                .expect("an ask of Get has a u64 reply");
            rec.asks.push(reply);
            return Ok(());
        }
        Err(Refusal::Unregistered)
    }

    fn signal(&self, to: ActorId, signal: OutgoingSignal) {
        self.recorded.lock().unwrap().signals.push((to, signal));
    }

    fn is_alive(&self, _: ActorId) -> bool {
        !*self.dead.lock().unwrap()
    }
}

fn peer_node() -> NodeId {
    NodeId::remote("peer", Some("127.0.0.1:9".parse().unwrap()), 0x5eed).unwrap()
}

fn setup() -> (ActorSystem, Arc<FakeRoute>, ActorRef<Counter>) {
    let system = ActorSystem::new();
    let route = Arc::new(FakeRoute::default());
    let id = ActorId::on(&peer_node(), 3).unwrap();
    let counter = remote::proxy::<Counter>(&system, id, route.clone());
    (system, route, counter)
}

#[test]
fn a_proxy_is_an_actor_ref_whose_sends_reach_the_route_in_order() {
    let (_system, route, counter) = setup();
    assert_eq!(counter.id().node(), peer_node());
    assert_eq!(counter.id().serial(), 3);
    for i in 0..100 {
        counter.tell(Add(i)).unwrap();
    }
    let r: Recipient<Add> = counter.recipient();
    r.tell(Add(100)).unwrap();
    assert_eq!(
        route.recorded.lock().unwrap().adds,
        (0..=100).collect::<Vec<_>>()
    );
}

#[test]
fn refusals_hand_the_message_back_in_typed_errors() {
    let (system, route, counter) = setup();
    *route.refuse.lock().unwrap() = Some(Refusal::Full);
    assert_eq!(counter.tell(Add(1)), Err(SendError::Full(Add(1))));
    *route.refuse.lock().unwrap() = Some(Refusal::Unencodable("too big".into()));
    assert_eq!(
        counter.tell(Add(2)),
        Err(SendError::Unencodable(Add(2), "too big".into()))
    );
    let before = system.dead_letter_count();
    *route.refuse.lock().unwrap() = Some(Refusal::Stopped);
    assert_eq!(counter.tell(Add(3)), Err(SendError::Stopped(Add(3))));
    assert_eq!(
        system.dead_letter_count(),
        before + 1,
        "a refused-as-stopped send is a dead letter"
    );
    *route.refuse.lock().unwrap() = None;

    /// A type the route has no encoder for.
    #[derive(Debug, PartialEq)]
    struct Secret;
    impl Message for Secret {
        type Reply = ();
    }
    impl Handler<Secret> for Counter {
        fn handle(&mut self, _: Secret, _: &mut Context<Self>) {}
    }
    let err = counter.tell(Secret).unwrap_err();
    assert!(err.to_string().contains("not registered"), "{err}");
    assert_eq!(err, SendError::Unregistered(Secret));
    assert_eq!(
        counter.ask(Secret).wait().unwrap_err(),
        AskError::Unregistered
    );
}

#[test]
fn a_remote_ask_ends_with_the_reply_or_a_typed_error_never_a_hang() {
    let (system, route, counter) = setup();
    let answered = counter.ask(Get).timeout(LIVENESS);
    let failed = counter.ask(Get).timeout(LIVENESS);
    let dropped = counter.ask(Get).timeout(LIVENESS);
    let mut asks = std::mem::take(&mut route.recorded.lock().unwrap().asks);
    assert_eq!(asks.len(), 3);
    let drop_me = asks.pop().unwrap();
    let fail_me = asks.pop().unwrap();
    assert!(asks.pop().unwrap().send(42));
    fail_me.fail(AskError::Refused("unknown type".into()));
    drop(drop_me); // the connection went away with the request
    assert_eq!(system.block_on(answered), Ok(42));
    assert_eq!(
        system.block_on(failed),
        Err(AskError::Refused("unknown type".into()))
    );
    assert_eq!(system.block_on(dropped), Err(AskError::ConnectionLost));
}

#[test]
fn a_reply_sender_knows_when_the_asker_gave_up() {
    let (_system, route, counter) = setup();
    let ask = counter.ask(Get);
    let reply = route.recorded.lock().unwrap().asks.pop().unwrap();
    assert!(!reply.is_closed());
    drop(ask);
    assert!(reply.is_closed());
    assert!(!reply.send(1), "nobody waits for it any more");
}

#[test]
fn is_alive_of_a_proxy_asks_the_route() {
    let (_system, route, counter) = setup();
    assert!(counter.is_alive());
    *route.dead.lock().unwrap() = true;
    assert!(!counter.is_alive());
}

#[test]
fn stop_kill_and_graceful_stop_of_a_proxy_go_to_the_route() {
    let (_system, route, counter) = setup();
    counter.stop();
    counter.kill();
    counter.stop_gracefully();
    counter.stop_gracefully(); // once only, as for a local actor
    let signals = std::mem::take(&mut route.recorded.lock().unwrap().signals);
    let names: Vec<String> = signals.iter().map(|(_, s)| format!("{s:?}")).collect();
    assert_eq!(names, ["RequestStop", "Kill", "StopGracefully"]);
    assert!(signals.iter().all(|(to, _)| *to == counter.id()));
    // Sealed by the graceful stop: later sends are refused here, as locally.
    assert_eq!(counter.tell(Add(1)), Err(SendError::Stopped(Add(1))));
}

/// A local actor that links to or monitors the proxy, and logs what it
/// hears.
struct Watcher {
    log: std::sync::mpsc::Sender<String>,
    trap: bool,
}
impl Actor for Watcher {
    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.trap {
            ctx.trap_exits(true);
        }
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send("stopped".to_string());
    }
}
impl Handler<Down> for Watcher {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("down {}: {}", d.id.serial(), d.reason));
    }
}
impl Handler<Exited> for Watcher {
    fn handle(&mut self, e: Exited, _: &mut Context<Self>) {
        let _ = self
            .log
            .send(format!("exited {}: {}", e.id.serial(), e.reason));
    }
}
struct Do(Box<dyn FnOnce(&mut Context<Watcher>) + Send>);
impl Message for Do {
    type Reply = ();
}
impl Handler<Do> for Watcher {
    fn handle(&mut self, Do(f): Do, ctx: &mut Context<Self>) {
        f(ctx)
    }
}

fn take_signals(route: &FakeRoute) -> Vec<(ActorId, OutgoingSignal)> {
    std::mem::take(&mut route.recorded.lock().unwrap().signals)
}

#[test]
fn a_monitor_of_a_proxy_hears_noconnection_when_the_route_says_so() {
    let (system, route, counter) = setup();
    let (tx, log) = common::log();
    let watcher = system
        .spawn(Watcher {
            log: tx,
            trap: false,
        })
        .unwrap();
    let c = counter.clone();
    watcher
        .ask(Do(Box::new(move |ctx| ctx.monitor(&c))))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    let mut signals = take_signals(&route);
    assert_eq!(signals.len(), 1);
    let (to, OutgoingSignal::Monitor(watch)) = signals.pop().unwrap() else {
        panic!("expected a monitor");
    };
    assert_eq!(to, counter.id());
    assert_eq!(watch.watcher(), Some(watcher.id()));
    watch.notify(counter.id(), ExitReason::NoConnection);
    assert_eq!(
        log.next(),
        "down 3: noconnection (the connection to the actor's node was lost)"
    );

    // `wait_stopped` of a proxy is a monitor without an actor.
    let waiting = counter.wait_stopped();
    let (_, OutgoingSignal::Monitor(watch)) = take_signals(&route).pop().unwrap() else {
        panic!("expected a monitor");
    };
    assert_eq!(watch.watcher(), None);
    watch.notify(counter.id(), ExitReason::Normal);
    assert_eq!(system.block_on(waiting), ExitReason::Normal);
}

#[test]
fn a_link_to_a_proxy_propagates_exits_both_ways() {
    let (system, route, counter) = setup();
    // Remote end fails: an untrapping linked actor fails with the reason.
    let (tx, log) = common::log();
    let a = system
        .spawn(Watcher {
            log: tx,
            trap: false,
        })
        .unwrap();
    let c = counter.clone();
    a.ask(Do(Box::new(move |ctx| ctx.link(&c))))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    let (_, OutgoingSignal::Link(local)) = take_signals(&route).pop().unwrap() else {
        panic!("expected a link");
    };
    assert_eq!(local.id(), a.id());
    local.exit(counter.id(), ExitReason::NoConnection);
    assert_eq!(log.next(), "stopped");
    assert_eq!(system.block_on(a.wait_stopped()), ExitReason::NoConnection);

    // A trapping one gets `Exited` (and the link is gone with the
    // remote actor, as in Erlang).
    let (tx, log) = common::log();
    let b = system
        .spawn(Watcher {
            log: tx,
            trap: true,
        })
        .unwrap();
    let c = counter.clone();
    b.ask(Do(Box::new(move |ctx| ctx.link(&c))))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    let (_, OutgoingSignal::Link(local)) = take_signals(&route).pop().unwrap() else {
        panic!("expected a link");
    };
    local.exit(counter.id(), ExitReason::Failed("boom".into()));
    assert_eq!(log.next(), "exited 3: failed: boom");

    // A local actor linked to the proxy fails: the remote end hears the
    // exit through the route.
    let (tx, log) = common::log();
    let d = system
        .spawn(Watcher {
            log: tx,
            trap: false,
        })
        .unwrap();
    let c = counter.clone();
    d.ask(Do(Box::new(move |ctx| ctx.link(&c))))
        .timeout(LIVENESS)
        .wait()
        .unwrap();
    assert_eq!(take_signals(&route).len(), 1);
    d.tell(Do(Box::new(|ctx| ctx.fail("bad")))).unwrap();
    assert_eq!(log.next(), "stopped");
    assert_eq!(
        system.block_on(d.wait_stopped()),
        ExitReason::Failed("bad".into())
    );
    let exits: Vec<String> = take_signals(&route)
        .into_iter()
        .map(|(to, s)| format!("{} {s:?}", to.serial()))
        .collect();
    assert_eq!(exits, [format!("3 Exit({}, failed: bad)", d.id())]);
}

#[test]
fn signals_from_the_network_reach_local_actors_through_control_refs() {
    let system = ActorSystem::new();
    let route = Arc::new(FakeRoute::default());
    let (tx, log) = common::log();
    let local = system
        .spawn(Watcher {
            log: tx,
            trap: false,
        })
        .unwrap();
    let local_ctl = ControlRef::of(&local);
    // A remote actor monitors the local one: its proxy's `Down` goes to the
    // route as a system message.
    let remote_watcher = remote::proxy::<RemoteProcess>(
        &system,
        ActorId::on(&peer_node(), 9).unwrap(),
        route.clone(),
    );
    let downs = Arc::new(Mutex::new(Vec::new()));
    struct DownRoute(Arc<Mutex<Vec<(ActorId, Down, bool)>>>);
    impl Route for DownRoute {
        fn send(&self, out: &mut remote::Outgoing<'_>) -> Result<(), Refusal> {
            let system = out.is_system_message();
            let to = out.to();
            let d = out.take_message::<Down>().ok_or(Refusal::Unregistered)?;
            self.0.lock().unwrap().push((to, d, system));
            Ok(())
        }
        fn signal(&self, _: ActorId, _: OutgoingSignal) {}
    }
    let down_route = Arc::new(DownRoute(downs.clone()));
    let remote_watcher2 =
        remote::proxy::<RemoteProcess>(&system, ActorId::on(&peer_node(), 10).unwrap(), down_route);
    drop(remote_watcher);
    local_ctl.monitor(remote_watcher2.id(), remote_watcher2.recipient());
    local_ctl.request_stop();
    assert_eq!(log.next(), "stopped");
    assert_eq!(system.block_on(local.wait_stopped()), ExitReason::Normal);
    let downs = downs.lock().unwrap();
    assert_eq!(downs.len(), 1);
    assert_eq!(downs[0].0, remote_watcher2.id());
    assert_eq!(
        downs[0].1,
        Down {
            id: local.id(),
            reason: ExitReason::Normal
        }
    );
    assert!(downs[0].2, "a Down is a system message");
    assert!(local_ctl.is_stopped());
}

#[test]
fn an_actor_id_names_a_remote_node_without_colliding_with_local_ones() {
    let system = ActorSystem::new();
    let local = system.spawn_fn((), |_, _: Add, _| {}).unwrap();
    let remote_id = ActorId::on(&peer_node(), local.id().serial()).unwrap();
    assert_ne!(remote_id, local.id());
    assert_eq!(remote_id.serial(), local.id().serial());
    assert!(ActorId::on(&peer_node(), 0).is_none());
    assert!(ActorId::on(&peer_node(), 1 << 44).is_none());
    assert!(NodeId::remote("bad name!", None, 1).is_err());
}

/// Work deferred during a turn runs once after it, on the worker, before
/// that worker's next turn: never before the handler that deferred it,
/// never twice for one turn, and never left behind.
#[test]
fn work_deferred_in_a_turn_runs_once_when_the_turn_ends() {
    let system = ActorSystem::new();
    let (batcher, log, flush) = Batcher::spawn_on(&system);
    for round in 0..50 {
        for _ in 0..(round % 5 + 1) {
            batcher.tell(Batch).unwrap();
        }
        let deadline = std::time::Instant::now() + LIVENESS;
        loop {
            let log = log.lock().unwrap();
            let handled = log.iter().filter(|e| **e == "handled").count();
            if handled == (0..=round).map(|r| r % 5 + 1).sum::<u64>() as usize
                && log.last() == Some(&"flushed")
            {
                break;
            }
            drop(log);
            assert!(std::time::Instant::now() < deadline, "liveness guard");
            std::thread::yield_now();
        }
    }
    let log = log.lock().unwrap();
    assert_eq!(log.first(), Some(&"handled"));
    assert!(
        log.windows(2).all(|w| w != ["flushed", "flushed"]),
        "one flush per turn however often it was deferred: {log:?}"
    );
    // Off a worker thread nothing is deferred.
    assert!(!remote::at_turn_end(&flush));
}
