//! An event-sourced counter, the stores to run it on, and a store that
//! holds recovery until the test lets it go.
#![allow(dead_code)]

// The test suite's PostgreSQL server (Debian's, in a temporary directory),
// shared with the cluster's tests.
#[path = "../../../troubadour-cluster/tests/postgres/mod.rs"]
pub mod postgres;

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use troubadour::prelude::*;
use troubadour_persistence::store::StoreFuture;
use troubadour_persistence::*;

/// How long a test waits for something that must happen before declaring
/// a hang. Not a speed assertion.
pub const LIVENESS: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum CounterEvent {
    Added(u64),
}
impl Event for CounterEvent {
    const TYPE: &'static str = "test.CounterEvent";
}

/// The counter's state: the total, and every amount in order (so that a
/// lost, duplicated or reordered event shows).
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq)]
pub struct Total {
    pub sum: u64,
    pub amounts: Vec<u64>,
}
impl EventSourced for Total {
    type Event = CounterEvent;
    fn apply(&mut self, CounterEvent::Added(n): &CounterEvent) {
        self.sum += n;
        self.amounts.push(*n);
    }
}

pub struct Counter {
    pub total: Persistent<Total>,
}

impl Counter {
    pub fn new(persistence: &Persistence, id: &str) -> Self {
        Counter {
            total: Persistent::new(persistence, id, Total::default()),
        }
    }
}

impl Actor for Counter {
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.total.recovery())
    }
}

/// Adds amounts atomically; replies with the sum once they are durable.
pub struct Add(pub Vec<u64>);
impl Message for Add {
    type Reply = Result<u64, PersistError>;
}
impl AsyncHandler<Add> for Counter {
    async fn handle(
        &mut self,
        Add(amounts): Add,
        ctx: &mut Context<Self>,
    ) -> Result<u64, PersistError> {
        let events = amounts.into_iter().map(CounterEvent::Added).collect();
        self.total.persist_all(events, ctx).await?;
        Ok(self.total.sum)
    }
}

pub struct Get;
impl Message for Get {
    type Reply = (Total, u64);
}
impl Handler<Get> for Counter {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> (Total, u64) {
        (self.total.state().clone(), self.total.sequence())
    }
}

pub struct Snapshot;
impl Message for Snapshot {
    type Reply = Result<(), JournalError>;
}
impl AsyncHandler<Snapshot> for Counter {
    async fn handle(&mut self, _: Snapshot, _: &mut Context<Self>) -> Result<(), JournalError> {
        self.total.snapshot().await
    }
}

/// A store whose `fence` (the first step of a recovery) waits until the
/// test opens the gate; everything else passes through.
#[derive(Clone)]
pub struct GatedStore {
    pub inner: MemoryStore,
    open: Arc<Mutex<watch::Sender<bool>>>,
    gate: watch::Receiver<bool>,
}

impl GatedStore {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        GatedStore {
            inner: MemoryStore::new(),
            open: Arc::new(Mutex::new(tx)),
            gate: rx,
        }
    }
    pub fn open(&self) {
        let _ = self.open.lock().unwrap().send(true);
    }
}

impl Journal for GatedStore {
    fn fence(&self, id: &str, epoch: u64) -> StoreFuture<'_, Fenced> {
        let mut gate = self.gate.clone();
        let id = id.to_string();
        Box::pin(async move {
            let _ = gate.wait_for(|open| *open).await;
            self.inner.fence(&id, epoch).await
        })
    }
    fn append(&self, append: Append) -> StoreFuture<'_, ()> {
        self.inner.append(append)
    }
    fn replay(&self, id: &str, from: u64, max: usize) -> StoreFuture<'_, Vec<EventRecord>> {
        self.inner.replay(id, from, max)
    }
    fn delete_to(&self, id: &str, to: u64) -> StoreFuture<'_, ()> {
        self.inner.delete_to(id, to)
    }
}

/// Checks a journal's history: numbered 1..=n without a gap, epochs
/// never going down. Returns the amounts in journal order.
pub fn linear_history(records: &[EventRecord]) -> Vec<u64> {
    let mut epoch = 0;
    let mut amounts = vec![];
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.sequence, i as u64 + 1, "the journal has a gap or a fork");
        assert!(r.epoch >= epoch, "an older writer wrote after a newer one");
        epoch = r.epoch;
        let CounterEvent::Added(n) = r.event.decode::<CounterEvent>().unwrap();
        amounts.push(n);
    }
    amounts
}

static SERVER: Mutex<std::sync::Weak<postgres::Server>> = Mutex::new(std::sync::Weak::new());
static DATABASES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A fresh database on a PostgreSQL server shared by the tests running at
/// the same time (stopped when the last of them lets go), and a runtime
/// for its connections.
pub struct PgDatabase {
    pub url: String,
    pub runtime: tokio::runtime::Runtime,
    _server: Arc<postgres::Server>,
}

impl PgDatabase {
    pub fn new() -> PgDatabase {
        let server = {
            let mut shared = SERVER.lock().unwrap();
            match shared.upgrade() {
                Some(s) => s,
                None => {
                    let s = Arc::new(postgres::Server::start());
                    *shared = Arc::downgrade(&s);
                    s
                }
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let name = format!(
            "t{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let admin = server.url();
        runtime.block_on(async {
            let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
        });
        let url = format!("{}{}", admin.trim_end_matches("postgres"), name);
        PgDatabase {
            url,
            runtime,
            _server: server,
        }
    }

    /// Persistence over a new connection pool to this database.
    pub fn persistence(&self) -> Persistence {
        let store = self
            .runtime
            .block_on(PostgresStore::connect(&self.url))
            .unwrap();
        Persistence::new(store.clone(), store)
    }
}
