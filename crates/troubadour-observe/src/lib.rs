//! See inside a running troubadour system: Prometheus metrics and a live
//! dashboard of its actors, in a couple of lines.
//!
//! ```no_run
//! use troubadour::ActorSystem;
//! use troubadour_observe::Observer;
//! # async fn run() -> std::io::Result<()> {
//! // `observe()` keeps the table of live actors the dashboard reads.
//! let system = ActorSystem::builder().observe().build();
//! let observer = Observer::new(system.handle());
//! // Its own address (loopback: the page shows the system's insides) ...
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
//! tokio::spawn({
//!     let observer = observer.clone();
//!     async move { observer.serve(listener).await }
//! });
//! // ... or mounted in an application's own router.
//! let app: axum::Router = axum::Router::new().nest("/dashboard", observer.router());
//! # let _ = app;
//! # Ok(()) }
//! ```
//!
//! What it shows (Erlang's observer and the Orleans dashboard are the
//! model): the supervision tree, expandable, with a supervisor's children
//! grouped by kind and paged, so a fleet of thousands opens in one click;
//! per actor its messages handled and rate, sampled mailbox depth,
//! restarts and last failure; the hottest actors; per kind the totals;
//! dead letters as they happen (type and reason, never contents); the
//! scheduler's workers and armed timers. The page updates over
//! server-sent events once a second.
//!
//! Layers: [`prometheus`] writes the exposition formats; [`observer`]
//! samples the system while someone watches; [`kinds`] answers for one
//! kind of actor on this node and asks the other nodes; [`http`] serves
//! it all.
//!
//! Features: `remote` (the other nodes' connections and traffic, and the
//! kind view across nodes: `Observer::with_remote`), `cluster`
//! (membership, shards, leases: `Observer::with_cluster`), `persistence`
//! (a store's writes and latency: `Observer::with_store`), `otlp` (spans,
//! one tree per request across actors and nodes, and the runtime's metrics
//! to an OpenTelemetry collector: `otlp::Telemetry`).

#![warn(missing_docs)]

pub mod http;
pub mod kinds;
pub mod observer;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod prometheus;

pub use kinds::{KindAcrossNodes, KindActor, KindOnNode};
pub use observer::{
    ActorDetail, ActorRow, Children, ClusterNode, ClusterPanel, DeadLetterRow, Group, KindRow,
    Observer, ObserverConfig, Overview,
};
