//! What a simulation records: every send, delivery, fault and turn, in the
//! order they happened, so a failing seed can be read as a story.

use crate::faults::Fault;
use std::fmt::{self, Write as _};
use std::time::Duration;
use troubadour::ActorId;

/// One line of a simulation's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A message was sent and is now in flight. `message` numbers it for
    /// the later [`Deliver`](Self::Deliver) or [`Fault`](Self::Fault).
    Send {
        /// The message's number in this run.
        message: u64,
        /// The sending actor; `None` for the test itself or a timer.
        from: Option<ActorId>,
        /// The receiver.
        to: ActorId,
        /// The message's type name.
        kind: &'static str,
        /// `true` for an `ask`.
        ask: bool,
    },
    /// A message entered its receiver's mailbox.
    Deliver {
        /// Its number (see [`Send`](Self::Send)).
        message: u64,
        /// The receiver.
        to: ActorId,
    },
    /// A fault was injected at a message.
    Fault {
        /// The message's number.
        message: u64,
        /// The receiver.
        to: ActorId,
        /// What happened.
        fault: Fault,
    },
    /// `actor` ran one turn, chosen among `ready` ready actors, with at
    /// most `budget` messages.
    Turn {
        /// Who ran.
        actor: ActorId,
        /// How many were ready.
        ready: usize,
        /// Its message budget.
        budget: u32,
    },
    /// The virtual clock moved to this offset from the start.
    Clock(Duration),
    /// A line the test wrote with [`Simulation::note`](crate::Simulation::note).
    Note(String),
}

/// The short form of a type name: `bank::Withdraw` for
/// `my_crate::bank::Withdraw`, keeping generic arguments readable.
fn short(kind: &str) -> &str {
    let head = kind.split('<').next().unwrap_or(kind);
    let cut = head.rmatch_indices("::").nth(1).map_or(0, |(i, _)| i + 2);
    &kind[cut..]
}

struct Who(Option<ActorId>);

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id}"),
            None => f.write_str("test"),
        }
    }
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceEvent::Send {
                message,
                from,
                to,
                kind,
                ask,
            } => {
                let verb = if *ask { "ask " } else { "tell" };
                write!(
                    f,
                    "send  #{message} {} -> {to} {verb} {}",
                    Who(*from),
                    short(kind)
                )
            }
            TraceEvent::Deliver { message, to } => write!(f, "deliv #{message} -> {to}"),
            TraceEvent::Fault { message, to, fault } => {
                write!(f, "FAULT #{message} -> {to}: {fault}")
            }
            TraceEvent::Turn {
                actor,
                ready,
                budget,
            } => write!(f, "turn  {actor} (1 of {ready} ready, budget {budget})"),
            TraceEvent::Clock(t) => write!(f, "clock +{t:?}"),
            TraceEvent::Note(s) => write!(f, "note  {s}"),
        }
    }
}

/// The trace as text, one numbered event per line.
pub(crate) fn render(events: &[TraceEvent]) -> String {
    let mut out = String::new();
    for (i, e) in events.iter().enumerate() {
        let _ = writeln!(out, "{i:>6} {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn type_names_keep_their_last_two_segments() {
        assert_eq!(short("bank::Withdraw"), "bank::Withdraw");
        assert_eq!(short("my_crate::bank::Withdraw"), "bank::Withdraw");
        assert_eq!(short("Ping"), "Ping");
        assert_eq!(short("a::b::Wrap<c::d::Inner>"), "b::Wrap<c::d::Inner>");
    }
}
