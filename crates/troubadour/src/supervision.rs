//! Supervision: which children restart when one fails, and how often
//! restarts may happen before the supervisor gives up — Erlang/OTP's
//! `supervisor` semantics.
//!
//! Every actor supervises the children it spawns. When a child fails (a
//! panic, `ctx.fail`, a kill, an exit signal from a link) and can be
//! restarted (it was spawned from a factory, see [`Restart`]), the child
//! stops taking messages and tells its parent, which consults
//! [`Actor::supervisor_strategy`](crate::Actor::supervisor_strategy):
//!
//! * the restart is counted; if more than `max_restarts` happened within
//!   `within`, the parent fails itself with
//!   [`ExitReason::RestartLimit`](crate::ExitReason::RestartLimit), which
//!   stops all its children and escalates to *its* supervisor;
//! * otherwise the children chosen by [`Strategy`] are restarted: each runs
//!   `before_restart`, stops its own children, is rebuilt from its factory
//!   and runs `after_restart`. Their [`ActorRef`](crate::ActorRef)s and
//!   mailboxes survive.
//!
//! A child that cannot be restarted (spawned from a value, or
//! [`Restart::Temporary`]) stops with the failure as its exit reason, which
//! its links and monitors receive. Top-level actors are supervised by the
//! system's guardian, one-for-one with the default intensity unless the
//! system is built with
//! [`guardian_strategy`](crate::ActorSystemBuilder::guardian_strategy); when
//! it gives up the actor stops with `RestartLimit`.
//!
//! Intensity is measured on the system's clock
//! ([`SystemHandle::now`](crate::SystemHandle::now)): under
//! [virtual time](crate::ActorSystemBuilder::virtual_time) restarts an hour
//! of virtual time apart are an hour apart, however fast the test runs. A
//! supervisor that is itself restarted starts with an empty restart history,
//! as in OTP.

use crate::exit::ActorId;
use crate::signal::ControlHandle;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which children restart when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Only the failed child.
    OneForOne,
    /// Every child.
    OneForAll,
    /// The failed child and every child spawned after it.
    RestForOne,
}

impl Strategy {
    pub(crate) fn affected(
        self,
        failed: ActorId,
        children: &BTreeMap<ActorId, Arc<dyn ControlHandle>>,
    ) -> Vec<Arc<dyn ControlHandle>> {
        match self {
            Strategy::OneForOne => children.get(&failed).cloned().into_iter().collect(),
            Strategy::OneForAll => children.values().cloned().collect(),
            Strategy::RestForOne => children.range(failed..).map(|(_, c)| c.clone()).collect(),
        }
    }
}

/// How a supervisor treats its failing children.
///
/// ```
/// use troubadour::{Strategy, SupervisorStrategy};
/// use std::time::Duration;
/// let s = SupervisorStrategy::new(Strategy::OneForAll).intensity(5, Duration::from_secs(10));
/// assert_eq!(s.max_restarts, 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupervisorStrategy {
    /// Which children restart.
    pub kind: Strategy,
    /// At most this many restarts ...
    pub max_restarts: u32,
    /// ... within this window; one more and the supervisor fails.
    pub within: Duration,
}

impl SupervisorStrategy {
    /// A strategy with the default intensity (3 restarts in 5 seconds).
    pub fn new(kind: Strategy) -> Self {
        SupervisorStrategy {
            kind,
            max_restarts: 3,
            within: Duration::from_secs(5),
        }
    }

    /// Sets the intensity: at most `max_restarts` within `within`.
    pub fn intensity(mut self, max_restarts: u32, within: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.within = within;
        self
    }
}

impl Default for SupervisorStrategy {
    /// One-for-one, at most 3 restarts in 5 seconds.
    fn default() -> Self {
        SupervisorStrategy::new(Strategy::OneForOne)
    }
}

/// When a child is restarted (Erlang's child `restart` type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Restart {
    /// Restarted after any exit it causes itself, normal ones included.
    Permanent,
    /// Restarted after a failure (not after a normal stop). The default for
    /// actors spawned from a factory.
    #[default]
    Transient,
    /// Never restarted. Actors spawned from a value are temporary.
    Temporary,
}

/// Restart timestamps within the current window.
#[derive(Default)]
pub(crate) struct RestartLog {
    times: VecDeque<Instant>,
}

impl RestartLog {
    /// Records a restart at `now` (the system's clock, never the wall
    /// clock: virtual time must decide alone); `false` if it exceeds the
    /// strategy's intensity.
    pub(crate) fn allow(&mut self, strategy: &SupervisorStrategy, now: Instant) -> bool {
        while let Some(&t) = self.times.front() {
            if now.duration_since(t) > strategy.within {
                self.times.pop_front();
            } else {
                break;
            }
        }
        self.times.push_back(now);
        self.times.len() as u32 <= strategy.max_restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intensity_allows_max_then_refuses() {
        let s = SupervisorStrategy::default().intensity(2, Duration::from_secs(60));
        let mut log = RestartLog::default();
        let now = Instant::now();
        assert!(log.allow(&s, now));
        assert!(log.allow(&s, now));
        assert!(!log.allow(&s, now));
    }

    #[test]
    fn restarts_older_than_the_window_are_forgotten() {
        let s = SupervisorStrategy::default().intensity(1, Duration::from_secs(5));
        let mut log = RestartLog::default();
        let start = Instant::now();
        assert!(log.allow(&s, start));
        assert!(log.allow(&s, start + Duration::from_secs(6)));
        assert!(!log.allow(&s, start + Duration::from_secs(7)));
    }

    #[test]
    fn zero_intensity_refuses_first_restart() {
        let s = SupervisorStrategy::default().intensity(0, Duration::from_secs(1));
        assert!(!RestartLog::default().allow(&s, Instant::now()));
    }
}
