//! Persistence for troubadour: event-sourced actors whose state survives
//! restarts, crashes and (in a cluster) moves to another node.
//!
//! An actor keeps its state in a [`Persistent`], recovers it from
//! [`Actor::activate`](troubadour::Actor::activate) (so messages wait
//! until it is back) and changes it only by persisting events from an
//! [`AsyncHandler`](troubadour::AsyncHandler): `persist` makes the event
//! durable, then applies it, and the handler replies after that, so a
//! caller's `Ok` means stored.
//!
//! The stores sit behind two traits, [`Journal`] and [`SnapshotStore`],
//! whose rules (linear, gap-free, fenced by epoch, durable when answered)
//! are in the [`store`] module: [`SqliteStore`] is the embedded default,
//! with group commit; `PostgresStore` (feature `postgres`) for production;
//! [`MemoryStore`] is for tests.
//!
//! For state that need not be a history, [`Durable`] keeps an actor's
//! state in memory and [`WriteBehind`] writes the latest of every changed
//! one in batches (a [`StateStore`]), every period and when asked.
//!
//! Layers, imports running downwards: `persistent`, `write_behind` (the
//! actor's side) →
//! `store` (the traits) → `sqlite`, `memory` (implementations) → `event`,
//! `error` (rows and errors).

mod batch;
mod error;
mod event;
mod memory;
mod persistent;
#[cfg(feature = "postgres")]
mod postgres;
mod reliable;
mod reminders;
mod sqlite;
mod sqlite_batch;
pub mod stats;
pub mod store;
mod write_behind;

pub use error::{DecodeError, JournalError, PersistError, RecoveryError, ReminderError};
pub use event::{Event, StoredEvent, POSTCARD};
pub use memory::MemoryStore;
pub use persistent::{EventSourced, Persistence, Persistent, SnapshotPolicy};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use reliable::{
    Ack, Deduplicated, Delivered, Delivery, DurableProducer, Outbox, OutboxEvent, Produce,
    ProduceDurably, ReliableProducer, Unconfirmed,
};
pub use reminders::{ActorReminders, Remind, Reminder, ReminderRecord, ReminderStore, Reminders};
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};
pub use stats::StoreStats;
pub use store::{Append, EventRecord, Fenced, Journal, SnapshotRecord, SnapshotStore};
pub use write_behind::{ClaimedState, Durable, StateStore, StateWrite, Superseded, WriteBehind};
