//! # realtime-map
//!
//! A live bus map built on troubadour: vehicle positions stream in over
//! MQTT in the shape of Helsinki's HFP feed, each vehicle is an actor that
//! keeps its latest state, and an HTTP server answers from those actors.
//!
//! ```text
//! MQTT ──► ingest ──tell──► Fleet ──tell──► Vehicle (one per bus)
//!                                              ▲
//! HTTP GET /vehicle?id= ── whereis + ask ──────┘
//! ```
//!
//! Run it with `cargo run --release -p realtime-map` and open the printed
//! URL. [`App::start`] runs the same service inside a test.

pub mod app;
pub mod broker;
pub mod fleet;
pub mod hfp;
pub mod http;
pub mod ingest;
pub mod launcher;
pub mod metrics;
pub mod node;
pub mod sharded;
pub mod simulator;

pub use app::{App, Config, Dashboard, SimulatorConfig, StartError};
