//! What an observer (a dashboard, a metrics exporter) sees of a system
//! built with `observe()`: which actors exist, under which supervisor, how
//! many messages each handled, how deep its mailbox is, how often it was
//! restarted and why it last failed; per kind, totals that never go
//! backwards when actors stop; dead letters by reason. Most tests drive a
//! manually scheduled system, so every figure is exact.

mod common;

use common::LIVENESS;
use troubadour::prelude::*;
use troubadour::{
    ActorSample, DeadLetter, DeadLetterReason, ExitReason, KindMetrics, RuntimeMetrics, TimerRef,
};

struct Counter(u64);
impl Actor for Counter {}

struct Add(u64);
impl Message for Add {
    type Reply = ();
}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.0 += n;
    }
}

struct Boom;
impl Message for Boom {
    type Reply = ();
}
impl Handler<Boom> for Counter {
    fn handle(&mut self, _: Boom, _: &mut Context<Self>) {
        panic!("counter overflowed its patience");
    }
}

/// Spawns `n` counters as its children.
struct Parent {
    children: Vec<ActorRef<Counter>>,
    n: usize,
}
impl Actor for Parent {
    fn started(&mut self, ctx: &mut Context<Self>) {
        for _ in 0..self.n {
            let child = ctx
                .spawn_factory_with_options(SpawnOptions::new(), || Counter(0))
                .unwrap();
            self.children.push(child);
        }
    }
}

fn manual() -> ActorSystem {
    ActorSystem::builder().manual_scheduling().observe().build()
}

fn run_all(system: &ActorSystem) {
    while system.run_one(&mut |_| (0, 64)).is_some() {}
}

fn kind<'a>(metrics: &'a RuntimeMetrics, suffix: &str) -> &'a KindMetrics {
    metrics
        .kinds
        .iter()
        .find(|k| k.kind.ends_with(suffix))
        .unwrap_or_else(|| panic!("no kind ending in {suffix}: {:?}", metrics.kinds))
}

fn samples(system: &ActorSystem) -> Vec<ActorSample> {
    let mut all = Vec::new();
    assert!(system.for_each_actor(|a| all.push(a)));
    all.sort_by_key(|a| a.id);
    all
}

#[test]
fn the_supervision_tree_and_the_handled_counts_are_seen_per_actor_and_per_kind() {
    let system = manual();
    let parent = system
        .spawn(Parent {
            children: Vec::new(),
            n: 3,
        })
        .unwrap();
    run_all(&system);
    let all = samples(&system);
    assert_eq!(all.len(), 4, "the parent and its three children: {all:?}");
    let top = all.iter().find(|a| a.id == parent.id()).unwrap();
    assert_eq!(
        top.parent, None,
        "a top-level actor's supervisor is the guardian"
    );
    assert!(top.kind.ends_with("Parent"));
    let children: Vec<_> = all.iter().filter(|a| a.id != parent.id()).collect();
    assert!(children.iter().all(|c| c.parent == Some(parent.id())));
    assert!(children.iter().all(|c| c.kind.ends_with("Counter")));

    let first = children[0].id;
    let second = children[1].id;
    let refs: Vec<ActorRef<Counter>> = {
        // The children are reached through the registry-free way a user
        // has: the parent hands them out in an ask.
        struct Children;
        impl Message for Children {
            type Reply = Vec<ActorRef<Counter>>;
        }
        impl Handler<Children> for Parent {
            fn handle(&mut self, _: Children, _: &mut Context<Self>) -> Vec<ActorRef<Counter>> {
                self.children.clone()
            }
        }
        let ask = parent.ask(Children);
        run_all(&system);
        system.block_on(ask).unwrap()
    };
    for _ in 0..5 {
        refs[0].tell(Add(1)).unwrap();
    }
    refs[1].tell(Add(1)).unwrap();
    run_all(&system);
    let all = samples(&system);
    let handled = |id| all.iter().find(|a| a.id == id).unwrap().messages_handled;
    assert_eq!(handled(first), 5);
    assert_eq!(handled(second), 1);
    assert_eq!(handled(parent.id()), 1, "the ask for its children");

    let metrics = system.metrics();
    assert!(metrics.observing);
    let counters = kind(&metrics, "Counter");
    assert_eq!(
        (counters.alive, counters.spawned, counters.stopped),
        (3, 3, 0)
    );
    assert_eq!(counters.messages_handled, 6);

    // A stopped actor leaves the table, and its kind keeps what it handled.
    refs[0].stop();
    run_all(&system);
    let metrics = system.metrics();
    let counters = kind(&metrics, "Counter");
    assert_eq!(
        (counters.alive, counters.spawned, counters.stopped),
        (2, 3, 1)
    );
    assert_eq!(counters.messages_handled, 6, "totals never go backwards");
    assert!(samples(&system).iter().all(|a| a.id != first));
    assert!(system.actor_details(first).is_none());
}

#[test]
fn a_restart_is_counted_and_the_failure_reason_kept() {
    let system = manual();
    let counter = system
        .spawn_factory_with_options(
            SpawnOptions::new()
                .name("patient")
                .restart(Restart::Permanent),
            || Counter(0),
        )
        .unwrap();
    run_all(&system);
    counter.tell(Boom).unwrap();
    run_all(&system);
    counter.tell(Add(1)).unwrap();
    run_all(&system);

    let details = system
        .actor_details(counter.id())
        .expect("restarted, not gone");
    assert_eq!(details.sample.restarts, 1);
    assert_eq!(details.sample.failures, 1);
    assert_eq!(details.names, ["patient"]);
    match details.last_failure {
        Some(ExitReason::Panicked(ref message)) => {
            assert!(message.contains("overflowed its patience"), "{message}")
        }
        other => panic!("expected the panic as the last failure, got {other:?}"),
    }
    assert_eq!(
        details.sample.messages_handled, 2,
        "the message that panicked and the one after the restart"
    );
    let metrics = system.metrics();
    let counters = kind(&metrics, "Counter");
    assert_eq!(
        (counters.restarts, counters.failures, counters.alive),
        (1, 1, 1)
    );
}

#[test]
fn mailbox_depth_is_sampled_at_the_end_of_a_turn_after_an_observer_asks() {
    let system = manual();
    let counter = system.spawn(Counter(0)).unwrap();
    run_all(&system);
    for _ in 0..10 {
        counter.tell(Add(1)).unwrap();
    }
    // The observer asks; the actor samples when its next turn ends.
    let before = system.metrics();
    assert_eq!(kind(&before, "Counter").mailbox_depth, 0, "not sampled yet");
    system
        .run_one(&mut |_| (0, 3))
        .expect("the counter is ready");
    let after = system.metrics();
    assert_eq!(kind(&after, "Counter").mailbox_depth, 7);
    assert_eq!(kind(&after, "Counter").max_mailbox_depth, 7);
    assert_eq!(samples(&system)[0].messages_handled, 3);

    // Drained: an idle actor shows no backlog, with no observer asking.
    run_all(&system);
    let all = samples(&system);
    assert_eq!((all[0].mailbox_depth, all[0].messages_handled), (0, 10));
}

#[test]
fn dead_letters_are_counted_by_reason() {
    let system = manual();
    let counter = system.spawn(Counter(0)).unwrap();
    run_all(&system);
    counter.tell(Add(1)).unwrap();
    counter.tell(Add(2)).unwrap();
    counter.stop();
    run_all(&system);
    let _ = counter.tell(Add(3));
    let dead = system.metrics().dead_letters;
    assert_eq!(dead.recipient_stopped, 1, "{dead:?}");
    // A stop is a signal: it overtakes the two queued messages.
    assert_eq!(dead.discarded_at_stop, 2, "{dead:?}");
    assert_eq!(dead.total(), system.dead_letter_count());
}

#[test]
fn a_dead_letter_subscriber_learns_the_reason() {
    let system = ActorSystem::builder().observe().build();
    let mut inbox = system.inbox::<DeadLetter>().unwrap();
    system.subscribe_dead_letters(inbox.recipient());
    let counter = system.spawn(Counter(0)).unwrap();
    counter.stop();
    system.block_on(counter.wait_stopped());
    let _ = counter.tell(Add(3));
    let received = inbox
        .recv_timeout(LIVENESS)
        .wait()
        .expect("the dead letter reaches its subscriber");
    let letter = received.message();
    assert_eq!(letter.recipient, counter.id());
    assert_eq!(letter.reason, DeadLetterReason::RecipientStopped);
    assert!(letter.message_type.ends_with("Add"));
}

#[test]
fn a_system_that_does_not_observe_lists_nothing_but_still_counts_dead_letters() {
    let system = ActorSystem::builder().manual_scheduling().build();
    let counter = system.spawn(Counter(0)).unwrap();
    run_all(&system);
    assert!(!system.for_each_actor(|_| panic!("nothing is listed")));
    assert!(system.actor_details(counter.id()).is_none());
    counter.stop();
    run_all(&system);
    let _ = counter.tell(Add(1));
    let metrics = system.metrics();
    assert!(!metrics.observing && metrics.kinds.is_empty());
    assert_eq!(metrics.dead_letters.recipient_stopped, 1);
}

/// Arms an hourly tick when it starts; cancels it when told.
struct Ticking(Option<TimerRef>);
impl Actor for Ticking {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.0 = Some(ctx.send_interval(std::time::Duration::from_secs(3600), Tick));
    }
}
#[derive(Clone)]
struct Tick;
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Ticking {
    fn handle(&mut self, _: Tick, _: &mut Context<Self>) {}
}
struct Cancel;
impl Message for Cancel {
    type Reply = ();
}
impl Handler<Cancel> for Ticking {
    fn handle(&mut self, _: Cancel, _: &mut Context<Self>) {
        if let Some(timer) = self.0.take() {
            timer.cancel();
        }
    }
}

#[test]
fn workers_and_timers_are_reported() {
    let system = ActorSystem::builder().worker_threads(2).observe().build();
    let ticking = system.spawn(Ticking(None)).unwrap();
    // An ask is handled after `started`, so the tick is armed by then.
    system.block_on(ticking.ask(Tick)).unwrap();
    let metrics = system.metrics();
    assert_eq!(metrics.workers.total, 2);
    assert_eq!(
        metrics.workers.busy + metrics.workers.searching + metrics.workers.parked,
        2
    );
    assert_eq!(metrics.timers_armed, 1);
    system.block_on(ticking.ask(Cancel)).unwrap();
    assert_eq!(
        system.metrics().timers_armed,
        0,
        "a cancelled timer is not armed"
    );
}

#[test]
fn stress_many_threads_spawning_and_stopping_leave_exact_totals() {
    // Spawns and stops race on the table's shards from several threads;
    // every actor must be entered once and taken out once.
    let system = ActorSystem::builder().worker_threads(2).observe().build();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let handle = system.handle();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    let c = handle.spawn(Counter(0)).unwrap();
                    c.tell(Add(1)).unwrap();
                    c.stop();
                    handle.block_on(c.wait_stopped());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let metrics = system.metrics();
    let counters = kind(&metrics, "Counter");
    assert_eq!(
        (counters.spawned, counters.stopped, counters.alive),
        (2000, 2000, 0)
    );
    assert!(samples(&system).is_empty());
}
