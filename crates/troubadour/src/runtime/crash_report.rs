//! Crash reports: a panic that the runtime catches and supervises is
//! reported once, as one structured `tracing` event, the way Erlang's
//! logger reports a crashed process, instead of Rust's default panic
//! message (and, with `RUST_BACKTRACE=1`, a full backtrace) printed from a
//! worker thread as if the program had crashed.
//!
//! How: the first system built installs a process-wide panic hook that
//! wraps the one already installed. On a thread that is running actors for
//! a system whose reports are [`CrashReports::Tracing`] (a worker, a
//! blocking actor's own thread, a manually scheduled or `LocalActor` turn),
//! the hook only records the panic (message, location, backtrace if
//! `RUST_BACKTRACE` asks for one) in a thread-local. The place that catches
//! the unwind knows which actor it was and emits the report from that
//! record. Every other panic goes to the previous hook, unchanged. Nothing
//! of this is on the message path: the thread's role is set once per
//! thread (or per rare manual turn), and the record is read only after a
//! panic.
//!
//! With no `tracing` subscriber installed, the report is one line on
//! stderr, so a crash is never silent.

use crate::api::exit::ActorId;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::{Cell, RefCell};
use std::sync::Once;

/// How an [`ActorSystem`](crate::ActorSystem) reports a panic in an actor
/// that it catches and supervises. Chosen with
/// [`ActorSystemBuilder::crash_reports`](crate::ActorSystemBuilder::crash_reports).
///
/// ```
/// use troubadour::{ActorSystem, CrashReports};
/// // Keep Rust's own panic output (and backtraces) for actor panics too.
/// let system = ActorSystem::builder().crash_reports(CrashReports::PanicHook).build();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CrashReports {
    /// One `tracing` event at `ERROR` level, target `troubadour::crash`,
    /// with the fields `actor` (its id), `kind` (its type), `reason` (the
    /// panic message), `location` (file:line:column of the panic) and,
    /// when `RUST_BACKTRACE` asks for one, `backtrace`. Without a `tracing`
    /// subscriber, the same as one line on stderr. Filter or route it like
    /// any other event (e.g. `RUST_LOG=troubadour::crash=off` with
    /// `tracing-subscriber`'s `EnvFilter`). The default.
    #[default]
    Tracing,
    /// Leave actor panics to the process's panic hook (Rust's default
    /// message on stderr, or whatever hook the program installed), as if
    /// troubadour did not catch them.
    PanicHook,
}

/// What the hook saw of a panic on an actor thread.
struct Record {
    message: String,
    location: String,
    backtrace: Option<Backtrace>,
}

thread_local! {
    /// Set while this thread runs actors of a system that reports crashes
    /// itself.
    static ACTOR_THREAD: Cell<bool> = const { Cell::new(false) };
    /// The last panic the hook recorded here, until its catcher reports it.
    static LAST: RefCell<Option<Record>> = const { RefCell::new(None) };
}

/// Installs the hook, once per process. Called by every system's build:
/// cheap after the first time.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !ACTOR_THREAD.with(Cell::get) {
                return previous(info);
            }
            let message = crate::api::exit::panic_message(info.payload()).to_string();
            let location = info
                .location()
                .map(|l| l.to_string())
                .unwrap_or_else(|| "an unknown location".to_owned());
            let backtrace = Backtrace::capture();
            let backtrace = (backtrace.status() == BacktraceStatus::Captured).then_some(backtrace);
            let earlier = LAST.with(|last| {
                last.borrow_mut().replace(Record {
                    message,
                    location,
                    backtrace,
                })
            });
            // A panic that nobody reported (caught somewhere that does not
            // report, or a second panic while unwinding): never lose it.
            if let Some(earlier) = earlier {
                emit(None, "", &earlier);
            }
        }));
    });
}

/// Marks this thread as one that runs actors for a system with `mode`
/// until the returned guard is dropped (or for the thread's life, if it is
/// kept there). On drop, a panic recorded and never reported (one that
/// escaped every catcher) is reported as it is.
pub(crate) fn actor_thread(mode: CrashReports) -> ActorThread {
    let was = ACTOR_THREAD.with(|t| t.replace(mode == CrashReports::Tracing));
    ActorThread { was }
}

/// See [`actor_thread`].
pub(crate) struct ActorThread {
    was: bool,
}

impl Drop for ActorThread {
    fn drop(&mut self) {
        ACTOR_THREAD.with(|t| t.set(self.was));
        if !self.was {
            if let Some(left) = LAST.with(|last| last.borrow_mut().take()) {
                emit(None, "", &left);
            }
        }
    }
}

/// Reports the panic just caught on this thread in actor `id` of type
/// `kind`. Does nothing if the hook recorded none (the thread reports
/// through the process's hook, which has already printed it).
pub(crate) fn report(id: ActorId, kind: &'static str) {
    if let Some(record) = LAST.with(|last| last.borrow_mut().take()) {
        emit(Some(id), kind, &record);
    }
}

/// `id` is `None` for a panic that no actor's catcher claimed.
fn emit(id: Option<ActorId>, kind: &'static str, record: &Record) {
    let actor = match id {
        Some(id) => format!("actor {id} ({kind})"),
        None => "a troubadour thread, outside any actor's turn,".to_owned(),
    };
    let backtrace = record.backtrace.as_ref().map(|b| b.to_string());
    let mut delivered = false;
    tracing::dispatcher::get_default(|dispatch| {
        if dispatch.is::<tracing::subscriber::NoSubscriber>() {
            return;
        }
        delivered = true;
        tracing::error!(
            target: "troubadour::crash",
            actor = id.map(tracing::field::display),
            kind,
            reason = %record.message,
            location = %record.location,
            backtrace = backtrace.as_deref(),
            "actor panicked; its supervisor decides what happens next"
        );
    });
    if !delivered {
        eprintln!(
            "troubadour: {actor} panicked at {}: {}{}",
            record.location,
            record.message,
            backtrace.map(|b| format!("\n{b}")).unwrap_or_default()
        );
    }
}
