//! A panic the runtime catches and supervises is reported like Erlang's
//! logger reports a crash: one structured `tracing` event naming the actor,
//! its kind and the reason, and not Rust's "thread panicked" message from a
//! worker thread. Panics anywhere else still reach the program's own panic
//! hook.
//!
//! The panic hook and the `tracing` subscriber are process-wide, so this
//! file is a test binary of its own and every test looks only for the
//! entries its own unique panic message produced.

mod common;

use common::LIVENESS;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use troubadour::prelude::*;
use troubadour::CrashReports;

/// What the program's own panic hook saw, and what the subscriber printed.
struct Seen {
    hook: Mutex<Vec<String>>,
    events: Arc<Mutex<Vec<u8>>>,
}

impl Seen {
    fn hook_saw(&self, needle: &str) -> bool {
        self.hook.lock().unwrap().iter().any(|m| m.contains(needle))
    }

    fn events_with(&self, needle: &str) -> Vec<String> {
        let bytes = self.events.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, once, a program panic hook that records messages and a
/// subscriber that writes events into a buffer; both before any system is
/// built, as a program would.
fn seen() -> &'static Seen {
    static SEEN: OnceLock<&'static Seen> = OnceLock::new();
    SEEN.get_or_init(|| {
        let seen: &'static Seen = Box::leak(Box::new(Seen {
            hook: Mutex::new(Vec::new()),
            events: Arc::new(Mutex::new(Vec::new())),
        }));
        // Records, then prints as Rust would (so failing assertions show).
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            seen.hook.lock().unwrap().push(msg);
            default(info);
        }));
        let events = seen.events.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Buffer(events.clone()))
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        seen
    })
}

struct Fragile;
impl Actor for Fragile {}

struct Boom(&'static str);
impl Message for Boom {
    type Reply = ();
}
impl Handler<Boom> for Fragile {
    fn handle(&mut self, Boom(why): Boom, _: &mut Context<Self>) {
        panic!("{why}")
    }
}

fn crash(system: &ActorSystem, why: &'static str) -> ActorId {
    let actor = system.spawn(Fragile).unwrap();
    let stopped = actor.wait_stopped();
    actor.tell(Boom(why)).unwrap();
    let reason = system
        .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
        .expect("the actor did not stop after panicking");
    assert_eq!(reason, ExitReason::Panicked(why.into()));
    actor.id()
}

#[test]
fn a_supervised_panic_is_one_tracing_event_naming_actor_kind_and_reason() {
    let seen = seen();
    let system = ActorSystem::builder().worker_threads(2).build();
    let id = crash(&system, "crash-report-unique-1");
    let events = seen.events_with("crash-report-unique-1");
    assert_eq!(events.len(), 1, "exactly one report per crash: {events:?}");
    let event = &events[0];
    assert!(event.contains("ERROR"), "{event}");
    assert!(event.contains("troubadour::crash"), "{event}");
    assert!(event.contains(&format!("actor={id}")), "{event}");
    assert!(event.contains("crash_reports::Fragile"), "{event}");
    assert!(event.contains("location="), "{event}");
    assert!(
        !seen.hook_saw("crash-report-unique-1"),
        "the program's panic hook must not print a supervised actor panic"
    );
}

#[test]
fn a_panic_in_a_stop_hook_is_reported_too() {
    struct FragileStop;
    impl Actor for FragileStop {
        fn stopped(&mut self, _: &mut Context<Self>) {
            panic!("crash-report-unique-2")
        }
    }
    let seen = seen();
    let system = ActorSystem::new();
    let actor = system.spawn(FragileStop).unwrap();
    let stopped = actor.wait_stopped();
    actor.stop();
    system
        .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
        .expect("the actor did not stop");
    assert_eq!(seen.events_with("crash-report-unique-2").len(), 1);
    assert!(!seen.hook_saw("crash-report-unique-2"));
}

/// A top-level actor spawned without a factory cannot be restarted: when
/// it fails (not a panic, which has its crash report) nobody but the log
/// hears of it, so the log must.
#[test]
fn a_failed_top_level_actor_without_a_factory_is_logged_with_its_reason() {
    struct Quitter;
    impl Actor for Quitter {}
    struct Quit;
    impl Message for Quit {
        type Reply = ();
    }
    impl Handler<Quit> for Quitter {
        fn handle(&mut self, _: Quit, ctx: &mut Context<Self>) {
            ctx.fail("crash-report-unique-7");
        }
    }
    let seen = seen();
    let system = ActorSystem::new();
    let actor = system.spawn(Quitter).unwrap();
    let stopped = actor.wait_stopped();
    actor.tell(Quit).unwrap();
    system
        .block_on(async { tokio::time::timeout(LIVENESS, stopped).await })
        .expect("the actor did not stop");
    let events = seen.events_with("crash-report-unique-7");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("WARN"), "{}", events[0]);
    assert!(
        events[0].contains(&format!("actor={}", actor.id())),
        "{}",
        events[0]
    );
    assert!(
        events[0].contains("top-level actor failed"),
        "{}",
        events[0]
    );
}

#[test]
fn panics_outside_actors_still_reach_the_program_s_hook() {
    let seen = seen();
    let _system = ActorSystem::new();
    let outside = std::thread::spawn(|| panic!("crash-report-unique-3")).join();
    assert!(outside.is_err());
    assert!(seen.hook_saw("crash-report-unique-3"));
    assert!(seen.events_with("crash-report-unique-3").is_empty());
}

#[test]
fn crash_reports_panic_hook_leaves_actor_panics_to_the_program_s_hook() {
    let seen = seen();
    let system = ActorSystem::builder()
        .crash_reports(CrashReports::PanicHook)
        .build();
    crash(&system, "crash-report-unique-4");
    assert!(seen.hook_saw("crash-report-unique-4"));
    assert!(seen.events_with("crash-report-unique-4").is_empty());
}

#[test]
fn a_local_actor_s_queued_handler_panic_is_reported_and_a_direct_call_s_is_the_caller_s() {
    let seen = seen();
    let system = ActorSystem::new();
    let mut local = LocalActor::new(&system, Fragile).unwrap();
    local
        .actor_ref()
        .unwrap()
        .tell(Boom("crash-report-unique-5"))
        .unwrap();
    local.run_pending();
    assert_eq!(seen.events_with("crash-report-unique-5").len(), 1);
    assert!(!seen.hook_saw("crash-report-unique-5"));

    let mut direct = LocalActor::new(&system, Fragile).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = direct.handle(Boom("crash-report-unique-6"));
    }));
    assert!(caught.is_err(), "a direct call's panic reaches its caller");
    assert!(seen.hook_saw("crash-report-unique-6"));
    assert!(seen.events_with("crash-report-unique-6").is_empty());
}
