//! The guardian: the supervisor of a system's top-level actors, and what
//! shutdown waits on.

use super::*;

/// Supervises top-level actors (those spawned from the system rather than
/// from an actor) one-for-one with the builder's intensity (by default 3
/// restarts in 5 s, counted per actor), and tracks them so shutdown can stop
/// them all.
///
/// The guardian holds a strong reference to every top-level actor: an actor
/// lives until it stops, whether or not anyone holds a reference to it (as
/// in Erlang and Akka). The references sit in a plain list, compacted once
/// as many actors have exited as remain, so exits cost amortized O(1) and a
/// live actor costs 16 bytes here instead of a map entry: idle actors are
/// counted in millions.
pub(crate) struct Guardian {
    state: Mutex<GuardianState>,
    live: AtomicUsize,
    all_stopped: Condvar,
    strategy: SupervisorStrategy,
}

struct GuardianState {
    children: Vec<Arc<dyn ControlHandle>>,
    exited_since_compaction: usize,
    restarts: HashMap<ActorId, RestartLog>,
    accepting: bool,
}

impl Guardian {
    pub(crate) fn new(strategy: SupervisorStrategy) -> Self {
        Guardian {
            state: Mutex::new(GuardianState {
                children: Vec::new(),
                exited_since_compaction: 0,
                restarts: HashMap::new(),
                accepting: true,
            }),
            live: AtomicUsize::new(0),
            all_stopped: Condvar::new(),
            strategy,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuardianState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn add(&self, child: Arc<dyn ControlHandle>) -> Result<(), SpawnError> {
        let mut state = self.lock();
        if !state.accepting {
            return Err(SpawnError::SystemShutdown);
        }
        state.children.push(child);
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn find(state: &GuardianState, id: ActorId) -> Option<Arc<dyn ControlHandle>> {
        state.children.iter().rev().find(|c| c.id() == id).cloned()
    }

    /// A top-level actor's signal to its parent.
    pub(crate) fn on_signal(&self, from: ActorId, signal: Signal, clock: &Timers) {
        match signal {
            Signal::ChildFailed { id, reason } => {
                // Read before taking the lock: the virtual clock has one too.
                let now = clock.now();
                let (child, verdict) = {
                    let mut state = self.lock();
                    let child = Self::find(&state, id);
                    let allowed = state.accepting
                        && state
                            .restarts
                            .entry(id)
                            .or_default()
                            .allow(&self.strategy, now);
                    (child, allowed)
                };
                let Some(child) = child else { return };
                // A permanent actor's normal exit (`ActorRef::stop`) is
                // restarted as OTP does, but it is no failure to warn about.
                // Logged with or without the `tracing` feature (which adds
                // per-message spans): a top-level failure is rare, and
                // without this line it would be silent.
                if reason.is_normal() {
                    tracing::info!(actor = %id, %reason, restart = verdict, "permanent top-level actor exited");
                } else {
                    tracing::warn!(actor = %id, %reason, restart = verdict, "top-level actor failed");
                }
                child.signal(if verdict {
                    Signal::Restart(reason)
                } else {
                    Signal::Stop(ExitReason::RestartLimit(Arc::new(reason)))
                });
            }
            Signal::ChildExited { .. } => {
                {
                    let mut state = self.lock();
                    state.restarts.remove(&from);
                    state.exited_since_compaction += 1;
                    if state.exited_since_compaction * 2 > state.children.len() {
                        state.children.retain(|c| !c.is_stopped());
                        state.exited_since_compaction = 0;
                        // Give memory back after a mass exit.
                        if state.children.capacity() > 4 * state.children.len() + 64 {
                            state.children.shrink_to_fit();
                        }
                    }
                }
                if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                    let mut state = self.lock();
                    if self.live.load(Ordering::SeqCst) == 0 {
                        state.children.retain(|c| !c.is_stopped());
                        state.children.shrink_to_fit();
                    }
                    self.all_stopped.notify_all();
                }
            }
            _ => {}
        }
    }

    /// Stops accepting top-level actors and asks the live ones to stop.
    pub(crate) fn stop_all(&self) {
        let children: Vec<_> = {
            let mut state = self.lock();
            state.accepting = false;
            state.children.clone()
        };
        // Newest first, as Erlang supervisors stop children in reverse start
        // order.
        for c in children.into_iter().rev() {
            c.signal(Signal::Stop(ExitReason::Shutdown));
        }
    }

    /// Drops the references to stopped actors (breaks the cycle cell →
    /// system → guardian → cell once the system is down).
    pub(crate) fn clear(&self) {
        let children = std::mem::take(&mut self.lock().children);
        drop(children);
    }

    pub(crate) fn kill_all(&self) {
        let children: Vec<_> = self.lock().children.clone();
        for c in children {
            c.signal(Signal::Kill);
        }
    }

    /// Waits until every top-level actor has stopped or the deadline passes;
    /// returns how many are left.
    pub(crate) fn wait_all_stopped(&self, deadline: Instant) -> usize {
        let mut state = self.lock();
        loop {
            let live = self.live.load(Ordering::SeqCst);
            if live == 0 {
                return 0;
            }
            let now = Instant::now();
            if now >= deadline {
                return live;
            }
            state = self
                .all_stopped
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
