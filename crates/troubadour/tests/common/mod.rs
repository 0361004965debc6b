//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

/// How long a test waits for something that must happen before declaring a
/// hang. Not a speed assertion: a healthy run takes milliseconds.
pub const LIVENESS: Duration = Duration::from_secs(20);

/// A log that actors write to from any thread and the test reads in order.
pub fn log() -> (Sender<String>, Log) {
    let (tx, rx) = channel();
    (tx, Log(rx))
}

pub struct Log(pub Receiver<String>);

impl Log {
    /// The next entry; panics if none arrives (the system hung).
    pub fn next(&self) -> String {
        self.0
            .recv_timeout(LIVENESS)
            .expect("expected a log entry; the actor system appears hung")
    }

    /// Skips entries until one equals `want`; returns the skipped ones.
    pub fn until(&self, want: &str) -> Vec<String> {
        let mut skipped = vec![];
        loop {
            let e = self.next();
            if e == want {
                return skipped;
            }
            skipped.push(e);
        }
    }

    /// Entries already logged, without waiting.
    pub fn drain(&self) -> Vec<String> {
        self.0.try_iter().collect()
    }
}

/// Runs a future to completion on a fresh multi-threaded tokio runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// What a `Batcher` and its flush did, in order.
pub type BatchLog = std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>;

/// A flush that logs "flushed", for `troubadour::remote::at_turn_end`.
pub struct LoggedFlush(pub BatchLog);
impl troubadour::remote::TurnEnd for LoggedFlush {
    fn turn_ended(&self) {
        self.0.lock().unwrap().push("flushed");
    }
}

/// Sends "to another node": logs "handled" for each `Batch` and defers its
/// flush three times.
pub struct Batcher {
    pub log: BatchLog,
    pub flush: std::sync::Arc<dyn troubadour::remote::TurnEnd>,
}
impl troubadour::Actor for Batcher {}

impl Batcher {
    /// A batcher on `system`, with the log it and its flush write to, and
    /// the flush.
    pub fn spawn_on(
        system: &troubadour::ActorSystem,
    ) -> (
        troubadour::ActorRef<Batcher>,
        BatchLog,
        std::sync::Arc<dyn troubadour::remote::TurnEnd>,
    ) {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let flush: std::sync::Arc<dyn troubadour::remote::TurnEnd> =
            std::sync::Arc::new(LoggedFlush(log.clone()));
        let batcher = system
            .spawn(Batcher {
                log: log.clone(),
                flush: flush.clone(),
            })
            .unwrap();
        (batcher, log, flush)
    }
}

pub struct Batch;
impl troubadour::Message for Batch {
    type Reply = ();
}
impl troubadour::Handler<Batch> for Batcher {
    fn handle(&mut self, _: Batch, _: &mut troubadour::Context<Self>) {
        self.log.lock().unwrap().push("handled");
        for _ in 0..3 {
            assert!(
                troubadour::remote::at_turn_end(&self.flush),
                "a handler runs inside a turn"
            );
        }
    }
}
