//! What users hold and implement: the actor traits and messages, references
//! and the context a handler gets, direct dispatch and function actors,
//! identities, exit reasons, errors and supervision policy.
//!
//! These types are thin faces of the runtime (`crate::runtime`): a
//! reference wraps an actor cell, a context wraps the running turn.

pub(crate) mod actor;
pub(crate) mod actor_ref;
pub(crate) mod context;
pub(crate) mod direct;
pub(crate) mod entity_id;
pub(crate) mod error;
pub(crate) mod exit;
pub(crate) mod fn_actor;
pub(crate) mod handle_here;
pub(crate) mod inbox;
pub(crate) mod node_id;
pub mod supervision;
