//! What the stores' group commit shares: a write's answer held until its
//! transaction's commit decides it, and which errors are refusals.

use crate::error::JournalError;
use crate::store::Fenced;
use crate::write_behind::{ClaimedState, Superseded};
use tokio::sync::oneshot;

/// Where a write's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

/// Refusals by the journal's rules, decided before anything is written:
/// the rest of the batch stands.
pub(crate) fn is_refusal(e: &JournalError) -> bool {
    matches!(
        e,
        JournalError::Fenced { .. } | JournalError::SequenceConflict { .. }
    )
}

/// Events kept by a committed batch: those of the writes that were not
/// refused (`answers` are in the batch's order, one per write).
pub(crate) fn events_kept(events_per_write: &[u64], answers: &[Pending]) -> u64 {
    events_per_write
        .iter()
        .zip(answers)
        .filter(|(_, a)| a.error().is_none())
        .map(|(n, _)| n)
        .sum()
}

/// Writes of a batch refused by the journal's rules.
pub(crate) fn refusals(answers: &[Pending]) -> u64 {
    answers
        .iter()
        .filter(|a| a.error().is_some_and(is_refusal))
        .count() as u64
}

/// An answer held until the transaction's commit decides it.
pub(crate) enum Pending {
    Fence(Reply<Fenced>, Result<Fenced, JournalError>),
    Unit(Reply<()>, Result<(), JournalError>),
    Count(Reply<i64>, Result<i64, JournalError>),
    States(
        Reply<Vec<Superseded>>,
        Result<Vec<Superseded>, JournalError>,
    ),
    Claim(Reply<ClaimedState>, Result<ClaimedState, JournalError>),
}

impl Pending {
    pub(crate) fn error(&self) -> Option<&JournalError> {
        match self {
            Pending::Fence(_, r) => r.as_ref().err(),
            Pending::Unit(_, r) => r.as_ref().err(),
            Pending::Count(_, r) => r.as_ref().err(),
            Pending::States(_, r) => r.as_ref().err(),
            Pending::Claim(_, r) => r.as_ref().err(),
        }
    }

    /// Answers; a write that was not refused, inside a transaction that
    /// did not commit (`failed`), gets that failure instead.
    pub(crate) fn answer(self, failed: Option<&JournalError>) {
        match self {
            Pending::Fence(tx, r) => {
                let _ = tx.send(decided(r, failed));
            }
            Pending::Unit(tx, r) => {
                let _ = tx.send(decided(r, failed));
            }
            Pending::Count(tx, r) => {
                let _ = tx.send(decided(r, failed));
            }
            Pending::States(tx, r) => {
                let _ = tx.send(decided(r, failed));
            }
            Pending::Claim(tx, r) => {
                let _ = tx.send(decided(r, failed));
            }
        }
    }
}

fn decided<T>(
    r: Result<T, JournalError>,
    failed: Option<&JournalError>,
) -> Result<T, JournalError> {
    match (r, failed) {
        (Err(e), _) if is_refusal(&e) => Err(e),
        (_, Some(f)) => Err(f.clone()),
        (r, None) => r,
    }
}
