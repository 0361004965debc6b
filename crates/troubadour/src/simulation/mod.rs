//! The seam between senders and mailboxes: a [`divert::Divert`] installed
//! on a system receives every send as an [`in_flight::InFlight`] and
//! decides its delivery. The test kit's simulation implements it today
//! (through `hold_messages`), the remote layer next. Nothing here runs on a
//! system without a divert.

pub mod divert;
#[cfg(feature = "simulation")]
pub(crate) mod faults;
pub(crate) mod in_flight;
