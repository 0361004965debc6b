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
//!   [`ExitReason::RestartLimit`], which
//!   stops all its children and escalates to *its* supervisor;
//! * otherwise the children chosen by [`Strategy`] are restarted: each runs
//!   `before_restart`, stops its own children, is rebuilt from its factory
//!   and runs `after_restart`. Their [`ActorRef`](crate::ActorRef)s and
//!   mailboxes survive.
//!
//! One-for-all and rest-for-one restart as an OTP supervisor does: the
//! affected children are terminated one at a time in reverse start order
//! (each finishes `before_restart` and the stop of its own children before
//! the next begins), then started again one at a time in start order (each
//! `after_restart` returns before the next child is built), because later
//! children may depend on earlier ones. A child that is never restarted
//! (spawned from a value, or [`Restart::Temporary`]) is stopped with
//! [`ExitReason::Shutdown`] and not started
//! again. Failures of other children reported while such a restart is under
//! way are decided when it is done, each counted against the intensity (one
//! of a child the restart terminated anyway is forgotten, as OTP ignores an
//! exit from a pid it has already replaced). Unlike an OTP supervisor, the
//! supervising actor keeps handling its own messages meanwhile.
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

use crate::api::exit::{ActorId, ExitReason};
use std::collections::{BTreeMap, VecDeque};

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
    /// The children a failure of `failed` touches, in start order. Generic
    /// over the child handle: supervision is policy, and knows nothing of
    /// how children are signalled.
    pub(crate) fn affected<C: Clone>(
        self,
        failed: ActorId,
        children: &BTreeMap<ActorId, C>,
    ) -> Vec<C> {
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

/// A one-for-all or rest-for-one restart under way in a supervisor: the
/// children still to terminate (next first: reverse start order), then
/// those to start again (start order), and the one whose answer it waits
/// for. Only data; the supervisor's cell drives it (`cell/lifecycle.rs`).
pub(crate) struct RestartPlan<C> {
    pub(crate) reason: ExitReason,
    to_stop: VecDeque<C>,
    to_start: VecDeque<C>,
    waiting: Option<(ActorId, Stage)>,
    /// Failures of children reported meanwhile, decided afterwards.
    deferred: Vec<(ActorId, ExitReason)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    Stop,
    Start,
}

/// What a [`RestartPlan`] does next.
pub(crate) enum Step<C> {
    Stop(C),
    Start(C),
    /// Done: decide these deferred failures now.
    Done(Vec<(ActorId, ExitReason)>),
}

/// What a plan needs of a child handle.
pub(crate) trait ChildId {
    fn child_id(&self) -> ActorId;
}

impl<C: ChildId + Clone> RestartPlan<C> {
    /// `affected` in start order.
    pub(crate) fn new(reason: ExitReason, affected: Vec<C>) -> Self {
        RestartPlan {
            reason,
            to_stop: affected.iter().rev().cloned().collect(),
            to_start: affected.into(),
            waiting: None,
            deferred: Vec::new(),
        }
    }

    /// The next step; it is then waited for until [`answered`](Self::answered).
    pub(crate) fn next(&mut self) -> Step<C> {
        if let Some(child) = self.to_stop.pop_front() {
            self.waiting = Some((child.child_id(), Stage::Stop));
            return Step::Stop(child);
        }
        if let Some(child) = self.to_start.pop_front() {
            self.waiting = Some((child.child_id(), Stage::Start));
            return Step::Start(child);
        }
        self.waiting = None;
        Step::Done(std::mem::take(&mut self.deferred))
    }

    /// A child answered (or reported what ends its step: its exit, or a
    /// failure while starting). `true` if that was the step waited for, so
    /// the next one may begin.
    pub(crate) fn answered(&mut self, id: ActorId, stage: Stage) -> bool {
        if self.waiting == Some((id, stage)) {
            self.waiting = None;
            true
        } else {
            false
        }
    }

    /// A child failed while the plan runs. `true` if its start was waited
    /// for: a failed start ends that step too (the failure is decided after
    /// the plan, as a new one).
    pub(crate) fn failed(&mut self, id: ActorId, reason: ExitReason) -> bool {
        self.deferred.push((id, reason));
        self.answered(id, Stage::Start)
    }

    /// A child has been terminated by the plan: whatever it reported before
    /// is answered by its restart.
    pub(crate) fn parked(&mut self, id: ActorId) -> bool {
        self.deferred.retain(|(d, _)| *d != id);
        self.answered(id, Stage::Stop)
    }

    /// A child has stopped for good: nothing more to do with it. `true` if
    /// its step was waited for.
    pub(crate) fn exited(&mut self, id: ActorId) -> bool {
        self.to_stop.retain(|c| c.child_id() != id);
        self.to_start.retain(|c| c.child_id() != id);
        self.deferred.retain(|(d, _)| *d != id);
        matches!(self.waiting, Some((w, _)) if w == id) && {
            self.waiting = None;
            true
        }
    }
}

/// When a child is restarted (Erlang's child `restart` type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Restart {
    /// Restarted after any exit, normal ones included: a failure, its own
    /// [`Context::stop`](crate::Context::stop), or
    /// [`ActorRef::stop`](crate::ActorRef::stop) from anyone (OTP). Only its
    /// supervisor stops it for good:
    /// [`Context::terminate_child`](crate::Context::terminate_child),
    /// [`SystemHandle::terminate`](crate::SystemHandle::terminate), or the
    /// stop of the supervisor or the system; and a graceful stop
    /// ([`ActorRef::stop_gracefully`](crate::ActorRef::stop_gracefully)),
    /// which seals its mailbox for good.
    Permanent,
    /// Restarted after a failure (not after a normal stop). The default for
    /// actors spawned from a factory.
    #[default]
    Transient,
    /// Never restarted, also not when a sibling's failure restarts it under
    /// one-for-all or rest-for-one (it is stopped then, as in OTP). Actors
    /// spawned from a value are temporary.
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

    impl ChildId for u64 {
        fn child_id(&self) -> ActorId {
            ActorId(*self)
        }
    }

    fn plan(affected: Vec<u64>) -> RestartPlan<u64> {
        RestartPlan::new(ExitReason::Normal, affected)
    }

    fn step(p: &mut RestartPlan<u64>) -> String {
        match p.next() {
            Step::Stop(c) => format!("stop {c}"),
            Step::Start(c) => format!("start {c}"),
            Step::Done(d) => format!("done {}", d.len()),
        }
    }

    #[test]
    fn a_plan_stops_in_reverse_start_order_then_starts_in_start_order() {
        let mut p = plan(vec![1, 2, 3]);
        let mut seen = vec![];
        for id in [3, 2, 1] {
            seen.push(step(&mut p));
            assert!(!p.parked(ActorId(9)), "only the waited-for child advances");
            assert!(p.parked(ActorId(id)));
        }
        for id in [1, 2, 3] {
            seen.push(step(&mut p));
            assert!(p.answered(ActorId(id), Stage::Start));
        }
        seen.push(step(&mut p));
        assert_eq!(
            seen,
            ["stop 3", "stop 2", "stop 1", "start 1", "start 2", "start 3", "done 0"]
        );
    }

    #[test]
    fn an_exited_child_leaves_the_plan_and_failures_wait_for_its_end() {
        let mut p = plan(vec![1, 2, 3]);
        assert_eq!(step(&mut p), "stop 3");
        // 2 stops for good meanwhile; 1 fails before it is terminated.
        assert!(!p.exited(ActorId(2)));
        assert!(!p.failed(ActorId(1), ExitReason::Killed));
        assert!(p.parked(ActorId(3)));
        assert_eq!(step(&mut p), "stop 1");
        // Terminated by the plan: its earlier failure is answered.
        assert!(p.parked(ActorId(1)));
        assert_eq!(step(&mut p), "start 1");
        // A failed start ends the step; the failure is decided afterwards.
        assert!(p.failed(ActorId(1), ExitReason::Killed));
        assert_eq!(step(&mut p), "start 3");
        assert!(p.exited(ActorId(3)));
        assert_eq!(step(&mut p), "done 1");
    }

    #[test]
    fn zero_intensity_refuses_first_restart() {
        let s = SupervisorStrategy::default().intensity(0, Duration::from_secs(1));
        assert!(!RestartLog::default().allow(&s, Instant::now()));
    }
}
