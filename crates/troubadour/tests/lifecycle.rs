//! Lifecycle hooks, orderly shutdown (children before parents), spawn
//! errors, fairness, async handlers and blocking actors.

mod common;

use common::{log, LIVENESS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::SpawnError;

/// Builds a tree: each node spawns `fanout` children down to `depth`.
struct TreeNode {
    label: String,
    depth: u32,
    fanout: u32,
    log: Sender<String>,
}

impl Actor for TreeNode {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let _ = self.log.send(format!("{} started", self.label));
        if self.depth > 0 {
            for i in 0..self.fanout {
                ctx.spawn(TreeNode {
                    label: format!("{}.{i}", self.label),
                    depth: self.depth - 1,
                    fanout: self.fanout,
                    log: self.log.clone(),
                })
                .unwrap();
            }
        }
    }
    fn stopping(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} stopping", self.label));
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.log.send(format!("{} stopped", self.label));
    }
}

#[test]
fn shutdown_stops_children_before_parents() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    for root in ["r0", "r1"] {
        system
            .spawn(TreeNode {
                label: root.into(),
                depth: 2,
                fanout: 3,
                log: tx.clone(),
            })
            .unwrap();
    }
    // 2 roots × (1 + 3 + 9) nodes.
    for _ in 0..26 {
        assert!(rx.next().ends_with("started"));
    }
    system.shutdown(LIVENESS).unwrap();
    let events: Vec<String> = rx.drain();
    let stopped: Vec<&str> = events
        .iter()
        .filter_map(|e| e.strip_suffix(" stopped"))
        .collect();
    assert_eq!(stopped.len(), 26, "{events:?}");
    let pos = |l: &str| stopped.iter().position(|s| *s == l).unwrap();
    for l in &stopped {
        if let Some((parent, _)) = l.rsplit_once('.') {
            assert!(pos(l) < pos(parent), "{l} stopped after its parent");
        }
    }
    // `stopping` runs while the children are still alive.
    let first = |needle: &str| events.iter().position(|e| e == needle).unwrap();
    assert!(first("r0 stopping") < first("r0.0 stopped"));
}

#[test]
fn spawn_after_shutdown_is_an_error() {
    let system = ActorSystem::new();
    let handle = system.handle();
    system.shutdown(LIVENESS).unwrap();
    let (tx, _rx) = log();
    let err = handle
        .spawn(TreeNode {
            label: "late".into(),
            depth: 0,
            fanout: 0,
            log: tx,
        })
        .unwrap_err();
    assert_eq!(err, SpawnError::SystemShutdown);
    assert!(err.to_string().contains("shutting down"));
}

#[test]
fn an_actor_lives_on_without_references() {
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let a = system
        .spawn(TreeNode {
            label: "orphan".into(),
            depth: 0,
            fanout: 0,
            log: tx,
        })
        .unwrap();
    rx.until("orphan started");
    let id = a.id();
    system.register("orphan", &a).unwrap();
    drop(a);
    let again = system
        .whereis::<TreeNode>("orphan")
        .expect("still registered");
    assert_eq!(again.id(), id);
    assert!(again.is_alive());
}

/// Floods itself forever.
struct Flooder {
    handled: Arc<AtomicU64>,
}
impl Actor for Flooder {}
struct Again;
impl Message for Again {
    type Reply = ();
}
impl Handler<Again> for Flooder {
    fn handle(&mut self, _: Again, ctx: &mut Context<Self>) {
        self.handled.fetch_add(1, Ordering::Relaxed);
        // Two for one: the mailbox only grows.
        let _ = ctx.myself().tell(Again);
        let _ = ctx.myself().tell(Again);
    }
}

struct Quiet;
impl Actor for Quiet {}
struct Ping(u32);
impl Message for Ping {
    type Reply = u32;
}
impl Handler<Ping> for Quiet {
    fn handle(&mut self, Ping(n): Ping, _: &mut Context<Self>) -> u32 {
        n + 1
    }
}

#[test]
fn a_flooding_actor_does_not_starve_others() {
    // One worker: fairness must come from the budget, not from parallelism.
    let system = ActorSystem::builder().worker_threads(1).budget(32).build();
    let handled = Arc::new(AtomicU64::new(0));
    let flooder = system
        .spawn(Flooder {
            handled: handled.clone(),
        })
        .unwrap();
    flooder.tell(Again).unwrap();
    let quiet = system.spawn(Quiet).unwrap();
    for i in 0..200 {
        assert_eq!(quiet.ask(Ping(i)).timeout(LIVENESS).wait(), Ok(i + 1));
    }
    assert!(handled.load(Ordering::Relaxed) > 0, "the flooder ran too");
    flooder.kill();
    system.block_on(flooder.wait_stopped());
}

/// Bounces a ball with its partner forever; the 100th bounce also wakes a
/// bystander (by then both run only because the other woke them).
struct Bouncer {
    partner: Option<ActorRef<Bouncer>>,
    bystander: Option<ActorRef<Bystander>>,
    bounces: Arc<AtomicU64>,
}
impl Actor for Bouncer {}
struct Ball;
impl Message for Ball {
    type Reply = ();
}
struct Partner(ActorRef<Bouncer>);
impl Message for Partner {
    type Reply = ();
}
impl Handler<Partner> for Bouncer {
    fn handle(&mut self, Partner(p): Partner, _: &mut Context<Self>) {
        self.partner = Some(p);
    }
}
impl Handler<Ball> for Bouncer {
    fn handle(&mut self, _: Ball, _: &mut Context<Self>) {
        let bounces = self.bounces.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = &self.partner {
            let _ = p.tell(Ball);
        }
        // Woken from this worker's turn, the bystander queues on this
        // worker behind the partner, which every turn wakes again.
        if bounces >= 100 {
            if let Some(b) = self.bystander.take() {
                let _ = b.tell(Ball);
            }
        }
    }
}

/// Reports that it ran.
struct Bystander(std::sync::mpsc::Sender<&'static str>);
impl Actor for Bystander {}
impl Handler<Ball> for Bystander {
    fn handle(&mut self, _: Ball, _: &mut Context<Self>) {
        let _ = self.0.send("ran");
    }
}

#[test]
fn two_actors_waking_each_other_do_not_starve_a_third_on_their_worker() {
    // One worker: nobody else could steal the bystander.
    let system = ActorSystem::builder().worker_threads(1).build();
    let bounces = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let bystander = system.spawn(Bystander(tx)).unwrap();
    let bouncer = |bystander| Bouncer {
        partner: None,
        bystander,
        bounces: bounces.clone(),
    };
    let a = system.spawn(bouncer(Some(bystander))).unwrap();
    let b = system.spawn(bouncer(None)).unwrap();
    a.tell(Partner(b.clone())).unwrap();
    b.tell(Partner(a.clone())).unwrap();
    a.tell(Ball).unwrap();
    assert_eq!(
        rx.recv_timeout(LIVENESS),
        Ok("ran"),
        "the bystander never ran"
    );
    assert!(bounces.load(Ordering::Relaxed) > 0, "the pair ran too");
    a.kill();
    b.kill();
    system.block_on(a.wait_stopped());
    system.block_on(b.wait_stopped());
}

/// Awaits a timer inside its handler.
struct Napper;
impl Actor for Napper {}
struct Nap(u64);
impl Message for Nap {
    type Reply = u64;
}
impl AsyncHandler<Nap> for Napper {
    async fn handle(&mut self, Nap(ms): Nap, _: &mut Context<Self>) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
}

#[test]
fn an_awaiting_handler_does_not_block_its_worker() {
    let system = ActorSystem::builder().worker_threads(1).build();
    let napper = system.spawn(Napper).unwrap();
    let quiet = system.spawn(Quiet).unwrap();
    let nap = napper.ask(Nap(200)).timeout(LIVENESS);
    // The only worker is free while the napper awaits.
    for i in 0..100 {
        assert_eq!(quiet.ask(Ping(i)).timeout(LIVENESS).wait(), Ok(i + 1));
    }
    assert_eq!(nap.wait(), Ok(200));
}

#[test]
fn an_awaiting_actor_handles_one_message_at_a_time() {
    struct Serial {
        inside: bool,
        log: Sender<String>,
    }
    impl Actor for Serial {}
    impl AsyncHandler<Nap> for Serial {
        async fn handle(&mut self, Nap(ms): Nap, _: &mut Context<Self>) -> u64 {
            assert!(!self.inside, "two handlers interleaved");
            self.inside = true;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.inside = false;
            let _ = self.log.send(format!("nap {ms}"));
            ms
        }
    }
    let system = ActorSystem::new();
    let (tx, rx) = log();
    let s = system
        .spawn(Serial {
            inside: false,
            log: tx,
        })
        .unwrap();
    let asks: Vec<_> = [30, 1, 20, 2].iter().map(|&ms| s.ask(Nap(ms))).collect();
    for a in asks {
        a.timeout(LIVENESS).wait().unwrap();
    }
    // Replies in sending order, not in order of nap length.
    let order: Vec<_> = (0..4).map(|_| rx.next()).collect();
    assert_eq!(order, vec!["nap 30", "nap 1", "nap 20", "nap 2"]);
}

#[test]
fn an_async_handler_can_await_another_actor() {
    struct Proxy {
        to: ActorRef<Quiet>,
    }
    impl Actor for Proxy {}
    impl AsyncHandler<Ping> for Proxy {
        async fn handle(&mut self, Ping(n): Ping, _: &mut Context<Self>) -> u32 {
            self.to.ask(Ping(n)).await.unwrap_or(0) * 2
        }
    }
    let system = ActorSystem::builder().worker_threads(1).build();
    let quiet = system.spawn(Quiet).unwrap();
    let proxy = system.spawn(Proxy { to: quiet }).unwrap();
    assert_eq!(proxy.ask(Ping(20)).timeout(LIVENESS).wait(), Ok(42));
}

#[test]
fn stopping_a_suspended_actor_drops_its_future() {
    let system = ActorSystem::new();
    let napper = system.spawn(Napper).unwrap();
    let nap = napper.ask(Nap(60_000));
    napper.stop();
    assert_eq!(nap.timeout(LIVENESS).wait(), Err(AskError::NoReply));
    assert_eq!(system.block_on(napper.wait_stopped()), ExitReason::Normal);
}

/// Blocks its thread in a handler.
struct Blocker;
impl Actor for Blocker {}
impl Handler<Nap> for Blocker {
    fn handle(&mut self, Nap(ms): Nap, _: &mut Context<Self>) -> u64 {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
}

#[test]
fn a_blocking_actor_on_its_own_thread_does_not_starve_others() {
    let system = ActorSystem::builder().worker_threads(1).build();
    let blocker = system
        .spawn_with_options(SpawnOptions::new().blocking(), Blocker)
        .unwrap();
    let quiet = system.spawn(Quiet).unwrap();
    let blocked = blocker.ask(Nap(300)).timeout(LIVENESS);
    for i in 0..100 {
        assert_eq!(quiet.ask(Ping(i)).timeout(LIVENESS).wait(), Ok(i + 1));
    }
    assert_eq!(blocked.wait(), Ok(300));
    blocker.stop();
    assert_eq!(system.block_on(blocker.wait_stopped()), ExitReason::Normal);
}

#[test]
fn works_inside_tokio_main() {
    common::block_on(async {
        let system = ActorSystem::new();
        let napper = system.spawn(Napper).unwrap();
        assert_eq!(napper.ask(Nap(1)).await, Ok(1));
        // The system shares the caller's runtime: tokio::spawn from a
        // handler lands there too.
        assert!(
            system.tokio_handle().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        );
        tokio::task::spawn_blocking(move || system.shutdown(LIVENESS))
            .await
            .unwrap()
            .unwrap();
    });
}

#[test]
fn direct_dispatch_through_a_local_actor() {
    let system = ActorSystem::new();
    let mut local = LocalActor::new(&system, Quiet).unwrap();
    let mut sum = 0u64;
    for i in 0..1000 {
        sum += local.handle(Ping(i)).unwrap() as u64;
    }
    assert_eq!(sum, (1..=1000).sum::<u64>());
    // Messages sent through its reference wait until it goes live.
    let r = local.actor_ref().unwrap();
    let pending = r.ask(Ping(41));
    let live = local.spawn();
    assert_eq!(pending.timeout(LIVENESS).wait(), Ok(42));
    assert_eq!(live.ask(Ping(1)).timeout(LIVENESS).wait(), Ok(2));
}

#[test]
fn direct_dispatch_of_an_async_handler_and_stop() {
    struct Once;
    impl Actor for Once {}
    impl Handler<Ping> for Once {
        fn handle(&mut self, Ping(n): Ping, ctx: &mut Context<Self>) -> u32 {
            ctx.stop();
            n
        }
    }
    let system = ActorSystem::new();
    let mut napper = LocalActor::new(&system, Napper).unwrap();
    assert_eq!(napper.handle_async(Nap(1)).unwrap(), 1);
    let mut once = LocalActor::new(&system, Once).unwrap();
    assert_eq!(once.handle(Ping(3)).unwrap(), 3);
    assert!(matches!(
        once.handle(Ping(4)),
        Err(SendError::Stopped(Ping(4)))
    ));
}
