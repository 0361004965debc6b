//! An actor's lifecycle: control signals, stop (children first), failure
//! and restart, and the parent's side of supervision. Runs on the actor's
//! own turn, under the same consumer-role rule as the rest of the cell.

use super::{ActorCell, AfterChildren, Extras, Phase, Request, HAS_ACTOR};
use crate::api::actor::Actor;
use crate::api::exit::{ActorId, Down, ExitReason, Exited};
use crate::api::supervision::{Restart, RestartLog, RestartPlan, Step, Strategy};
use crate::primitives::mailbox::{Pop, SignalStack};
use crate::primitives::run_state::{CLOSED, DETACHED, EXITED_NORMAL, NAMED};
use crate::runtime::dead_letters::DeadLetterReason;
use crate::runtime::envelope::Envelope;
use crate::runtime::signal::{ControlHandle, Signal, SignalNode, Watcher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

impl<A: Actor> ActorCell<A> {
    /// Applies every queued control signal, in the order sent.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    #[inline(always)]
    pub(super) unsafe fn process_signals(self: &Arc<Self>) {
        // Nearly every turn finds none: the check stays in the turn, the
        // work (and its frame) out of line.
        if !self.signals.looks_empty() {
            // SAFETY: as for this function (its contract).
            unsafe { self.process_queued_signals() }
        }
    }

    /// [`process_signals`](Self::process_signals) for a caller that saw
    /// the stack non-empty.
    ///
    /// # Safety
    /// As for `process_signals`.
    #[inline(never)]
    pub(super) unsafe fn process_queued_signals(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let mut node = self.signals.take_all();
            while !node.is_null() {
                let next = SignalStack::next_of(node);
                let signal = SignalNode::unbox(node);
                node = next;
                // Some signals run user code (a restart runs the factory and
                // `after_restart`, a child's failure `supervisor_strategy`). A
                // panic there fails this actor like a panic in a handler, and the
                // rest of the batch is still processed: every signal sent is
                // handled or answers its waiter, none is leaked by an unwind.
                let handled = catch_unwind(AssertUnwindSafe(|| {
                    if self.phase() == Phase::Stopped {
                        self.signal_after_stop(signal);
                    } else {
                        self.handle_signal(signal);
                    }
                }));
                if let Err(payload) = handled {
                    self.fail_from_panic(payload);
                }
            }
        }
    }

    /// Applies one control signal.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn handle_signal(self: &Arc<Self>, signal: Signal) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match signal {
                Signal::Stop(reason) => self.begin_stop(reason),
                Signal::RequestStop => {
                    let reason = ExitReason::Normal;
                    if !self.restartable(&reason) {
                        self.begin_stop(reason);
                    } else if self.phase() == Phase::Running {
                        // A permanent actor's exit, normal or not, is restarted
                        // by its supervisor (OTP).
                        self.abnormal(reason, false);
                    }
                    // Otherwise it has failed, or is being restarted or stopped
                    // already: what is under way answers the request.
                }
                Signal::Kill => self.abnormal(ExitReason::Killed, true),
                Signal::Exit { from, reason } => self.on_exit_signal(from, reason),
                Signal::Link(other) => self.add_link(other),
                Signal::Unlink(id) => self.extras().links.retain(|l| l.id() != id),
                Signal::Watch(w) => self.extras().watchers.push(w),
                Signal::Unwatch(watcher) => self
                    .extras()
                    .watchers
                    .retain(|w| !matches!(w, Watcher::Actor { watcher: id, .. } if *id == watcher)),
                Signal::ChildFailed { id, reason } => self.on_child_failed(id, reason),
                Signal::ChildExited { id, .. } => {
                    let extras = self.extras();
                    extras.children.remove(&id);
                    extras.terminating.retain(|t| *t != id);
                    if extras.plan.as_mut().is_some_and(|p| p.exited(id)) {
                        self.advance_plan();
                    }
                    let extras = self.extras();
                    if self.phase() == Phase::Draining && extras.children.is_empty() {
                        self.after_children();
                    }
                }
                Signal::Restart(reason) => self.restart(reason),
                Signal::StopForRestart(reason) => self.stop_for_restart(reason),
                Signal::StartNow(reason) => {
                    if self.phase() == Phase::Parked {
                        self.rebuild(reason);
                    }
                    // Also when not parked (it is running, or going away and its
                    // exit will follow): the plan must never wait for nothing.
                    self.tell_parent(Signal::ChildStarted { id: self.id });
                }
                Signal::ChildParked { id } => {
                    if self.extras().plan.as_mut().is_some_and(|p| p.parked(id)) {
                        self.advance_plan();
                    }
                }
                Signal::ChildStarted { id } => {
                    let stage = crate::api::supervision::Stage::Start;
                    if self
                        .extras()
                        .plan
                        .as_mut()
                        .is_some_and(|p| p.answered(id, stage))
                    {
                        self.advance_plan();
                    }
                }
            }
        }
    }

    /// Takes the next step of the restart plan under way: one child told to
    /// terminate or to start, whose answer the plan then waits for; or, at
    /// the end, the failures reported meanwhile are decided.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn advance_plan(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let Some(plan) = self.extras().plan.as_mut() else {
                return;
            };
            let reason = plan.reason.clone();
            match plan.next() {
                Step::Stop(child) => child.signal(Signal::StopForRestart(reason)),
                Step::Start(child) => child.signal(Signal::StartNow(reason)),
                Step::Done(deferred) => {
                    self.extras().plan = None;
                    for (id, reason) in deferred {
                        // May begin another plan, which defers the rest again.
                        self.handle_signal(Signal::ChildFailed { id, reason });
                    }
                }
            }
        }
    }

    /// The child's side of a one-for-all or rest-for-one step: terminate
    /// for a restart and tell the supervisor (`Signal::StopForRestart`).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn stop_for_restart(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.phase() {
                Phase::Stopped => {}
                Phase::Parked => self.tell_parent(Signal::ChildParked { id: self.id }),
                Phase::Draining => {
                    // A stop under way wins (its exit answers the supervisor); a
                    // restart under way parks instead of rebuilding.
                    let then = &mut self.extras().then;
                    if !matches!(then, Some(AfterChildren::Stop(_))) {
                        *then = Some(AfterChildren::Park);
                    }
                }
                Phase::Starting | Phase::Running | Phase::Failed => {
                    let restarted = self
                        .extras_opt()
                        .is_some_and(|e| e.factory.is_some() && e.restart != Restart::Temporary);
                    if !restarted {
                        // OTP: a temporary child is terminated, not restarted.
                        self.begin_stop(ExitReason::Shutdown);
                        return;
                    }
                    self.drop_suspended();
                    self.guarded_hook(|a, c| a.before_restart(&reason, c));
                    if !self.stop_children_then(AfterChildren::Park) {
                        self.park();
                    }
                }
            }
        }
    }

    /// Terminated for a restart: no instance until `StartNow`.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn park(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.drop_actor();
            *self.request.get() = Request::None;
            self.set_phase(Phase::Parked);
            self.tell_parent(Signal::ChildParked { id: self.id });
        }
    }

    /// Signals that reach an actor that has already stopped.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn signal_after_stop(self: &Arc<Self>, signal: Signal) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let reason = if self.run.load() & EXITED_NORMAL != 0 {
                ExitReason::Normal
            } else {
                self.extras_opt()
                    .and_then(|e| e.exit_reason.clone())
                    .unwrap_or(ExitReason::NoProc)
            };
            match signal {
                Signal::Watch(w) => deliver_down(w, self.id, reason),
                Signal::Link(other) => other.signal(Signal::Exit {
                    from: self.id,
                    reason: ExitReason::NoProc,
                }),
                _ => {}
            }
        }
    }

    /// Links are a set (Erlang: linking again does nothing), so one exit
    /// sends one exit signal.
    ///
    /// # Safety
    /// The caller holds the consumer role (the actor's own turn).
    pub(crate) unsafe fn add_link(&self, other: Arc<dyn ControlHandle>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let links = &mut self.extras().links;
            if links.iter().all(|l| l.id() != other.id()) {
                links.push(other);
            }
        }
    }

    /// An exit signal from a linked actor: trapped as a message, or fails this one.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn on_exit_signal(self: &Arc<Self>, from: ActorId, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let extras = self.extras();
            extras.links.retain(|l| l.id() != from);
            // Only `kill` itself is untrappable (it never comes here); a linked
            // actor's `Killed` is an exit reason like any other (Erlang: the
            // reason `killed` is trappable by linked processes).
            if extras.trap_exits {
                if let Some(make) = extras.exited_vtable {
                    // A trapped exit becomes a message at the mailbox's tail:
                    // behind everything the dead actor sent before it died
                    // (Erlang orders all signals between a pair of processes),
                    // and past a bounded mailbox's bound, as a system message.
                    let exited = make(Exited { id: from, reason });
                    if let Some(bound) = self.config.as_ref().and_then(|c| c.bound.as_ref()) {
                        // Cannot be closed: we are running, not stopped.
                        let _ = bound.take_for_system();
                    }
                    self.enqueue(exited);
                    return;
                }
            }
            if reason != ExitReason::Normal {
                self.abnormal(reason, false);
            }
        }
    }

    /// The actor dies or fails for `reason`. A restartable actor waits in
    /// `Failed` for its supervisor; others stop. `brutal` (kill) skips hooks
    /// and does not wait for children.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn abnormal(self: &Arc<Self>, reason: ExitReason, brutal: bool) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.phase() {
                Phase::Stopped => return,
                // Terminated for a restart its supervisor is carrying out: it
                // has no instance, and the restart follows.
                Phase::Parked => return,
                // Being terminated for such a restart, waiting for its children:
                // it parks when they are gone, and the supervisor waits for
                // that; failing now would leave the restart waiting for ever.
                Phase::Draining if matches!(self.extras().then, Some(AfterChildren::Park)) => {
                    if brutal {
                        self.drop_actor();
                    }
                    return;
                }
                Phase::Failed => {
                    // Already failed and waiting for its supervisor, who has been
                    // told once: another exit is not a second failure (it would
                    // count twice against the intensity). A kill still takes
                    // effect: the failed instance goes without further hooks, and
                    // the supervisor's decision (restart or stop) follows.
                    if brutal {
                        self.drop_suspended();
                        self.drop_actor();
                    }
                    return;
                }
                _ => {}
            }
            if let Some(stats) = self.stats().filter(|_| !reason.is_normal()) {
                stats.record_failure(&reason);
            }
            self.drop_suspended();
            if brutal {
                self.drop_actor();
            }
            if self.restartable(&reason)
                && !matches!(self.extras().then, Some(AfterChildren::Stop(_)))
            {
                // Timers armed so far go stale now, not at the restart: the
                // supervisor may take a while to decide, and ticks sent
                // meanwhile would reach the next incarnation.
                self.run.new_incarnation();
                self.set_phase(Phase::Failed);
                // A restart of our children under way stops here; our
                // supervisor's decision stops or restarts them all.
                self.extras().plan = None;
                self.tell_parent(Signal::ChildFailed {
                    id: self.id,
                    reason,
                });
            } else {
                // A top-level actor that cannot restart has nobody to tell
                // but the log (a child's parent and watchers hear of it).
                // A panic has had its crash report already.
                if self.extras_opt().and_then(|e| e.parent.as_ref()).is_none()
                    && !reason.is_normal()
                    && !matches!(reason, ExitReason::Killed | ExitReason::Panicked(_))
                {
                    tracing::warn!(actor = %self.id, %reason, "top-level actor failed and stops (it has no factory to restart it from)");
                }
                if brutal {
                    self.kill_children();
                    self.finish_stop(reason);
                } else {
                    self.begin_stop(reason);
                }
            }
        }
    }

    /// The actor stopped itself: a stop, or a restart for a permanent one.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn self_stop(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if self.restartable(&reason) {
                // A permanent actor that stops itself is restarted.
                self.abnormal(reason, false);
            } else {
                self.begin_stop(reason);
            }
        }
    }

    /// Whether a failure for `reason` waits for the supervisor's decision.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn restartable(&self, reason: &ExitReason) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.extras_opt() {
                Some(e) if e.factory.is_some() => match e.restart {
                    Restart::Permanent => true,
                    Restart::Transient => !reason.is_normal(),
                    Restart::Temporary => false,
                },
                _ => false,
            }
        }
    }

    /// Drops a suspended handler's future (and the `&mut A` it holds).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn drop_suspended(&self) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if let Some(e) = self.extras_opt() {
                // Whatever drops the handler (stop, kill, restart, failure)
                // stops or waits for the children itself.
                e.deferred_failures.clear();
                if let Some(fut) = e.suspended.take() {
                    if catch_unwind(AssertUnwindSafe(|| drop(fut))).is_err() {
                        self.report_crash();
                    }
                }
            }
        }
    }

    /// Stop: `stopping` hook, stop children and wait for them, then finish.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(crate) unsafe fn begin_stop(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.phase() {
                Phase::Stopped => return,
                Phase::Draining => {
                    // Already waiting for children; a stop wins over a restart.
                    self.extras().then = Some(AfterChildren::Stop(reason));
                    return;
                }
                _ => {}
            }
            self.drop_suspended();
            // `stopping` runs on a live instance that has started: not on a
            // failed one, nor on one that never ran (a spawn that could not get
            // its thread).
            let reason = match self.phase() {
                Phase::Failed | Phase::Starting => reason,
                _ => self.guarded_hook(|a, c| a.stopping(c)).unwrap_or(reason),
            };
            if self.stop_children_then(AfterChildren::Stop(reason.clone())) {
                return;
            }
            self.finish_stop(reason);
        }
    }

    /// Cancels timers (by starting a new incarnation, which makes every
    /// timer armed so far stale) and asks every child to stop. `true` if
    /// there are children to wait for: the phase is then `Draining` and
    /// `then` runs when the last one has exited (`after_children`).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    unsafe fn stop_children_then(&self, then: AfterChildren) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.run.new_incarnation();
            let Some(extras) = self.extras_opt() else {
                return false;
            };
            // Whatever restart of the children was under way: they all stop.
            extras.plan = None;
            if extras.children.is_empty() {
                return false;
            }
            for child in extras.children.values() {
                Arc::clone(child).signal(Signal::Stop(ExitReason::Shutdown));
            }
            extras.then = Some(then);
            self.set_phase(Phase::Draining);
            true
        }
    }

    /// Kills every child, without waiting for them.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn kill_children(&self) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if let Some(extras) = self.extras_opt() {
                for child in std::mem::take(&mut extras.children).into_values() {
                    child.signal(Signal::Kill);
                }
            }
        }
    }

    /// The children have all stopped: finish the stop or the restart that
    /// waited for them.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn after_children(self: &Arc<Self>) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.extras().then.take() {
                Some(AfterChildren::Stop(reason)) => self.finish_stop(reason),
                Some(AfterChildren::Restart(reason)) => self.rebuild(reason),
                Some(AfterChildren::Park) => self.park(),
                None => {}
            }
        }
    }

    /// The end: hooks, drop the actor, close the mailbox, tell everyone.
    ///
    /// A panic in `stopped` (or in the actor's `Drop`) does not stop the
    /// stop; it becomes the exit reason, so watchers, links and waiters learn
    /// that the actor crashed (Erlang: a crash in `terminate` is the exit
    /// reason).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn finish_stop(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let mut reason = reason;
            if self.phase() != Phase::Starting {
                if let Some(panicked) = self.guarded_hook(|a, c| a.stopped(c)) {
                    reason = panicked;
                }
            }
            if let Some(panicked) = self.drop_actor() {
                reason = panicked;
            }
            self.set_phase(Phase::Stopped);
            self.run.set(CLOSED);
            if self.run.load() & NAMED != 0 {
                self.system.registry.remove_actor(self.id);
            }
            let extras = (*self.extras.get()).take().map(|b| *b).unwrap_or_default();
            let Extras {
                parent,
                links,
                watchers,
                mut stash,
                mut replay,
                ..
            } = extras;
            while let Some(env) = replay.pop_front().or_else(|| stash.pop_front()) {
                self.system.dead_letters.record(
                    self.id,
                    Envelope::discard(env),
                    DeadLetterReason::DiscardedAtStop,
                );
            }
            if let Some(bound) = self.config.as_ref().and_then(|c| c.bound.as_ref()) {
                // Wakes senders waiting for room: they get `Stopped`.
                bound.close();
            }
            self.drain_mailbox(DeadLetterReason::DiscardedAtStop);
            if let (Some(stats), Some(live)) = (self.stats(), self.system.live.as_ref()) {
                live.remove(stats);
            }
            for w in watchers {
                deliver_down(w, self.id, reason.clone());
            }
            for l in links {
                l.signal(Signal::Exit {
                    from: self.id,
                    reason: reason.clone(),
                });
            }
            // Kept for monitors that arrive late; a normal exit needs no
            // allocation to remember.
            if reason == ExitReason::Normal {
                self.run.set(EXITED_NORMAL);
            } else {
                self.extras().exit_reason = Some(reason.clone());
            }
            if self.run.load() & DETACHED != 0 {
                return;
            }
            let exited = Signal::ChildExited { id: self.id };
            match parent {
                Some(p) => p.signal(exited),
                None => self.system.to_guardian(self.id, exited),
            }
        }
    }

    /// Every queued message becomes a dead letter.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn drain_mailbox(&self, reason: DeadLetterReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            loop {
                match self.mailbox.pop() {
                    Pop::Data { node, retired } => {
                        Self::free_retired(retired);
                        let env = self.popped(node);
                        self.discard_queued_node(env, reason);
                    }
                    // Only a `Consumer` hands a node out again.
                    Pop::Again(node) => self.discard_queued_node(self.popped(node), reason),
                    Pop::Empty => return,
                    Pop::Inconsistent => std::thread::yield_now(),
                }
            }
        }
    }

    /// Called by whoever owns a stopped actor's consumer role.
    ///
    /// # Safety
    /// The caller holds the consumer role.
    pub(super) unsafe fn drain_closed(self: &Arc<Self>) {
        // SAFETY: the caller holds the consumer role.
        unsafe {
            self.process_signals();
            // Whatever is queued now came after the stop's own drain.
            self.drain_mailbox(DeadLetterReason::RecipientStopped);
        }
    }

    /// Parent → child restart: hooks, stop children, rebuild from factory.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn restart(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if matches!(self.phase(), Phase::Stopped | Phase::Draining) {
                // Stopped, or a stop or restart is under way: that one wins.
                return;
            }
            if self.extras_opt().is_none_or(|e| e.factory.is_none()) {
                // Cannot restart (spawned from a value): stop instead.
                let stop_reason = if self.phase() == Phase::Failed {
                    reason
                } else {
                    ExitReason::Shutdown
                };
                self.begin_stop(stop_reason);
                return;
            }
            self.drop_suspended();
            self.guarded_hook(|a, c| a.before_restart(&reason, c));
            if self.stop_children_then(AfterChildren::Restart(reason.clone())) {
                return;
            }
            self.rebuild(reason);
        }
    }

    /// Builds a fresh actor from the factory and runs `after_restart`.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn rebuild(self: &Arc<Self>, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            self.drop_actor();
            *self.request.get() = Request::None;
            if let Some(stats) = self.stats() {
                stats.record_restart();
            }
            // A fresh instance supervises with a fresh history (OTP: a restarted
            // supervisor starts counting restarts from zero), or one more crash
            // of a child right after an escalation would escalate again.
            let extras = self.extras();
            extras.restarts = RestartLog::default();
            if extras.unstash_on_restart {
                // As `unstash_all` would: ahead of the mailbox, behind what is
                // already waiting to be replayed.
                let extras = self.extras_for_turn();
                let mut stash = std::mem::take(&mut extras.stash);
                extras.replay.append(&mut stash);
            }
            // Running from here on: a panic in the factory or in
            // `after_restart` is a new failure of this actor (caught where the
            // signal is processed), which its supervisor decides on again.
            self.set_phase(Phase::Running);
            let factory = self
                .extras()
                .factory
                .as_mut()
                .expect("restart without factory");
            let fresh = factory();
            (*self.actor.get()).write(fresh);
            self.flags.set(HAS_ACTOR, true);
            self.actor_mut().after_restart(&reason, &mut self.context());
            if self.phase() == Phase::Running && *self.request.get() == Request::None {
                self.activate();
            }
            self.after_user_code();
        }
    }

    /// Decides the children's failures that waited for a suspended
    /// handler, in the order they arrived. `true` if the actor keeps
    /// running (a decision may fail it: too many restarts).
    ///
    /// # Safety
    /// The caller holds the actor's consumer role, and no async handler is
    /// suspended in it.
    pub(super) unsafe fn decide_deferred_failures(self: &Arc<Self>) -> bool {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            let deferred = match self.extras_opt() {
                Some(e) if !e.deferred_failures.is_empty() => {
                    std::mem::take(&mut e.deferred_failures)
                }
                _ => return self.phase() == Phase::Running,
            };
            for (child, reason) in deferred {
                self.on_child_failed(child, reason);
            }
            self.phase() == Phase::Running
        }
    }

    /// The supervisor's side: restart (per strategy) or escalate.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn on_child_failed(self: &Arc<Self>, child: ActorId, reason: ExitReason) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            if !matches!(self.phase(), Phase::Running | Phase::Starting) {
                // We are stopping or failed ourselves; the child is stopped with us.
                return;
            }
            let extras = self.extras();
            if let Some(plan) = extras.plan.as_mut() {
                // One thing at a time, as an OTP supervisor: decided after
                // the restart under way, whichever path the failure took
                // (a signal, or a decision deferred by a suspended handler).
                if plan.failed(child, reason) {
                    self.advance_plan();
                }
                return;
            }
            if !extras.children.contains_key(&child) || extras.terminating.contains(&child) {
                // Gone, or being terminated for good: nothing to decide.
                return;
            }
            if self.has_suspended() {
                // The strategy is the actor's to say, and a suspended async
                // handler holds the actor: decide when it has finished (or
                // forget it if the handler is dropped by a stop or restart,
                // which stops the children too). One message at a time.
                self.extras().deferred_failures.push((child, reason));
                return;
            }
            let strategy = self.actor_mut().supervisor_strategy();
            let extras = self.extras();
            if !extras.restarts.allow(&strategy, self.system.timers.now()) {
                // Too many restarts: fail ourselves and let our supervisor decide.
                self.abnormal(ExitReason::RestartLimit(Arc::new(reason)), false);
                return;
            }
            let affected = strategy.kind.affected(child, &extras.children);
            match strategy.kind {
                Strategy::OneForOne => {
                    for target in affected {
                        target.signal(Signal::Restart(reason.clone()));
                    }
                }
                // Terminate in reverse start order, then start in start order,
                // one child at a time (OTP): later children may depend on
                // earlier ones.
                Strategy::OneForAll | Strategy::RestForOne => {
                    extras.plan = Some(Box::new(RestartPlan::new(reason, affected)));
                    self.advance_plan();
                }
            }
        }
    }

    /// Signals the parent, or the guardian for a top-level actor.
    ///
    /// # Safety
    /// The caller holds the actor's consumer role (`mailbox.rs`): it took
    /// it and has not given it up, or owns the cell through a `LocalActor`.
    pub(super) unsafe fn tell_parent(self: &Arc<Self>, signal: Signal) {
        // SAFETY: we hold the consumer role (this function's contract).
        unsafe {
            match self.extras_opt().and_then(|e| e.parent.clone()) {
                Some(p) => p.signal(signal),
                None => self.system.to_guardian(self.id, signal),
            }
        }
    }
}

pub(crate) fn deliver_down(w: Watcher, id: ActorId, reason: ExitReason) {
    match w {
        Watcher::Actor { down, .. } => {
            // A system message: past the watcher's bound, never dropped
            // while it lives (a stopped watcher counts a dead letter).
            let _ = down.tell_system(Down { id, reason });
        }
        Watcher::Waiter(tx) => {
            let _ = tx.send(reason);
        }
    }
}
