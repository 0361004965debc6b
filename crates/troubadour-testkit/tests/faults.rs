//! Fault injection: a panic, a stop, a delay or a loss at a message the
//! test or the seed picks, replayed exactly by the seed.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::ActorId;
use troubadour_testkit::{seeds, simulate, Fault, Faults, Simulation, TraceEvent};

/// Counts `Add`s; `Get` reads the count. The log records lifecycle events.
struct Counter {
    n: u32,
    log: Arc<Mutex<Vec<String>>>,
}
impl Actor for Counter {
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.log
            .lock()
            .unwrap()
            .push(format!("stopped at {}", self.n));
    }
}

struct Add;
impl Message for Add {
    type Reply = u32;
}
impl Handler<Add> for Counter {
    fn handle(&mut self, _: Add, _: &mut Context<Self>) -> u32 {
        self.n += 1;
        self.n
    }
}

struct Get;
impl Message for Get {
    type Reply = u32;
}
impl Handler<Get> for Counter {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> u32 {
        self.n
    }
}

fn counter(sim: &Simulation, log: &Arc<Mutex<Vec<String>>>) -> ActorRef<Counter> {
    let log = log.clone();
    sim.spawn_with(move || Counter {
        n: 0,
        log: log.clone(),
    })
    .unwrap()
}

/// The n-th message to `to` whose type name ends with `kind`.
fn nth(to: ActorId, kind: &'static str, n: u32) -> impl FnMut(&troubadour::InFlight) -> bool {
    let mut seen = 0;
    move |m| {
        if m.to() == to && m.message_type().ends_with(kind) {
            seen += 1;
        }
        seen == n
    }
}

type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send>;

/// Silences the injected panics' messages until the guard is dropped.
fn quiet_panics() -> impl Drop {
    struct Restore(Option<PanicHook>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(hook) = self.0.take() {
                std::panic::set_hook(hook);
            }
        }
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    Restore(Some(previous))
}

#[test]
fn an_injected_panic_restarts_the_actor_and_loses_only_that_message() {
    let _quiet = quiet_panics();
    simulate(seeds(100), |sim| {
        let log = Arc::default();
        let c = counter(sim, &log);
        sim.inject(Fault::Panic, nth(c.id(), "::Add", 3));
        c.tell(Add).unwrap();
        c.tell(Add).unwrap();
        let third = c.ask(Add);
        c.tell(Add).unwrap();
        c.tell(Add).unwrap();
        assert_eq!(
            sim.block_on(third),
            Err(AskError::NoReply),
            "the message the actor panicked at is lost with its reply"
        );
        assert_eq!(
            sim.block_on(c.ask(Get)).unwrap(),
            2,
            "a fresh actor from the factory counted the two Adds after the panic"
        );
        assert!(c.is_alive());
        assert!(sim.trace().iter().any(|e| matches!(
            e,
            TraceEvent::Fault { message: 3, fault: Fault::Panic, to } if *to == c.id()
        )));
    });
}

#[test]
fn an_injected_stop_sends_the_rest_to_dead_letters() {
    simulate(seeds(100), |sim| {
        let log = Arc::default();
        let c = sim
            .spawn(Counter {
                n: 0,
                log: Arc::clone(&log),
            })
            .unwrap();
        sim.inject(Fault::Stop, nth(c.id(), "::Add", 3));
        for _ in 0..5 {
            c.tell(Add).unwrap();
        }
        sim.run_until_idle();
        assert!(!c.is_alive());
        assert_eq!(*log.lock().unwrap(), ["stopped at 2"], "stop hooks ran");
        assert_eq!(sim.dead_letter_count(), 3, "Adds 3, 4 and 5");
    });
}

/// Records each label with the virtual time it arrived at.
struct Recorder {
    start: std::time::Instant,
    got: Vec<(&'static str, Duration)>,
}
impl Actor for Recorder {}

struct Label(&'static str);
impl Message for Label {
    type Reply = ();
}
impl Handler<Label> for Recorder {
    fn handle(&mut self, Label(l): Label, ctx: &mut Context<Self>) {
        self.got.push((l, ctx.now() - self.start));
    }
}

struct Got;
impl Message for Got {
    type Reply = Vec<(&'static str, Duration)>;
}
impl Handler<Got> for Recorder {
    fn handle(&mut self, _: Got, _: &mut Context<Self>) -> Vec<(&'static str, Duration)> {
        self.got.clone()
    }
}

struct Relay(ActorRef<Recorder>);
impl Actor for Relay {}
impl Handler<Label> for Relay {
    fn handle(&mut self, l: Label, _: &mut Context<Self>) {
        let _ = self.0.tell(l);
    }
}

#[test]
fn a_delayed_message_arrives_later_and_its_senders_next_message_waits_for_it() {
    simulate(seeds(100), |sim| {
        let recorder = sim
            .spawn(Recorder {
                start: sim.now(),
                got: Vec::new(),
            })
            .unwrap();
        let relay = sim.spawn(Relay(recorder.clone())).unwrap();
        // The first message from the test to the recorder: "a1".
        let to = recorder.id();
        sim.inject(Fault::Delay(Duration::from_secs(1)), move |m| {
            m.to() == to && m.from().is_none()
        });
        recorder.tell(Label("a1")).unwrap();
        recorder.tell(Label("a2")).unwrap();
        relay.tell(Label("b1")).unwrap();
        sim.run_for(Duration::from_secs(2));
        let got = sim.block_on(recorder.ask(Got)).unwrap();
        let labels: Vec<_> = got.iter().map(|(l, _)| *l).collect();
        assert_eq!(
            labels,
            ["b1", "a1", "a2"],
            "another sender's message is not held up; the delayed sender's next one is"
        );
        assert_eq!(got[0].1, Duration::ZERO);
        assert_eq!(got[1].1, Duration::from_secs(1));
    });
}

#[test]
fn a_lost_ask_times_out_in_virtual_time() {
    simulate(seeds(20), |sim| {
        let log = Arc::default();
        let c = counter(sim, &log);
        let start = sim.now();
        sim.inject(Fault::Drop, nth(c.id(), "::Get", 1));
        let reply = sim.block_on(c.ask(Get).timeout(Duration::from_secs(5)));
        assert_eq!(reply, Err(AskError::Timeout(Duration::from_secs(5))));
        assert_eq!(sim.now() - start, Duration::from_secs(5));
        assert_eq!(sim.dead_letter_count(), 0, "a loss is not a dead letter");
        // The next one gets through.
        assert_eq!(sim.block_on(c.ask(Get)), Ok(0));
    });
}

/// Many adds under random faults on the counter only: returns the trace.
fn faulty_run(seed: u64) -> (String, Vec<TraceEvent>, ActorId) {
    let mut sim = Simulation::new(seed);
    let log = Arc::default();
    let c = counter(&sim, &log);
    let id = c.id();
    sim.set_faults(
        Faults::none()
            .panic(0.03)
            .stop(0.0)
            .drop(0.02)
            .delay(0.1, Duration::from_millis(300))
            .only(move |m| m.to() == id && m.message_type().ends_with("::Add")),
    );
    for _ in 0..200 {
        c.tell(Add).unwrap();
    }
    sim.run_for(Duration::from_secs(1));
    let faults = sim
        .trace()
        .iter()
        .filter(|e| matches!(e, TraceEvent::Fault { .. }))
        .cloned()
        .collect();
    (sim.trace_text(), faults, id)
}

#[test]
fn random_faults_follow_the_seed_and_the_filter() {
    let _quiet = quiet_panics();
    let mut distinct = std::collections::HashSet::new();
    let (mut panics, mut drops, mut delays) = (0, 0, 0);
    for seed in 0..30 {
        let (trace, faults, id) = faulty_run(seed);
        assert_eq!(
            trace,
            faulty_run(seed).0,
            "seed {seed} ran differently twice"
        );
        for f in &faults {
            let TraceEvent::Fault { to, fault, .. } = f else {
                continue;
            };
            assert_eq!(*to, id, "only messages to the counter get faults");
            match fault {
                Fault::Panic => panics += 1,
                Fault::Drop => drops += 1,
                Fault::Delay(d) => {
                    assert!(*d > Duration::ZERO && *d <= Duration::from_millis(300));
                    delays += 1
                }
                Fault::Stop => panic!("stops were not asked for"),
            }
        }
        distinct.insert(format!("{faults:?}"));
    }
    assert!(
        panics > 0 && drops > 0 && delays > 0,
        "{panics} {drops} {delays}"
    );
    assert!(
        distinct.len() >= 25,
        "seeds pick different faults: {}",
        distinct.len()
    );
}

#[test]
fn no_fault_touches_a_graceful_stop_but_a_delay() {
    // The marker is no message: a panic, stop or loss chosen for it would
    // either be a lie in the trace or leave an actor that refuses every
    // message and never stops. Every seed, every fault the seed may pick.
    let _quiet = quiet_panics();
    simulate(seeds(100), |sim| {
        sim.set_faults(
            Faults::none()
                .panic(0.3)
                .stop(0.3)
                .drop(0.3)
                .only(|m| m.is_control()),
        );
        let log = Arc::default();
        let c = counter(sim, &log);
        sim.inject(Fault::Panic, |m| m.is_control());
        for _ in 0..3 {
            c.tell(Add).unwrap();
        }
        c.stop_gracefully();
        sim.run_until_idle();
        assert!(!c.is_alive());
        assert_eq!(*log.lock().unwrap(), ["stopped at 3"]);
        assert!(
            !sim.trace()
                .iter()
                .any(|e| matches!(e, TraceEvent::Fault { fault, .. } if !matches!(fault, Fault::Delay(_)))),
            "{}",
            sim.trace_text()
        );
    });
}
