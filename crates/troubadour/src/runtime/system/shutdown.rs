//! `ActorSystem`, the owner of a system, and its orderly shutdown.

use super::*;

/// The owner of a running actor system. Dropping it shuts the system down
/// (with a 5 s deadline); call [`shutdown`](Self::shutdown) to choose the
/// deadline and see the outcome. Everything else is on [`SystemHandle`],
/// which this dereferences to.
///
/// ```
/// use troubadour::prelude::*;
/// let system = ActorSystem::new();
/// # struct A; impl Actor for A {}
/// let a = system.spawn(A)?;
/// system.shutdown(std::time::Duration::from_secs(1))?;
/// assert!(!a.is_alive());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ActorSystem {
    pub(super) handle: SystemHandle,
    pub(super) default_deadline: Duration,
}

impl Default for ActorSystem {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for ActorSystem {
    type Target = SystemHandle;
    fn deref(&self) -> &SystemHandle {
        &self.handle
    }
}

impl ActorSystem {
    /// A system with one worker thread per core, unbounded mailboxes and a
    /// 5 s default ask timeout.
    pub fn new() -> Self {
        ActorSystemBuilder::default().build()
    }

    /// Configures a system.
    pub fn builder() -> ActorSystemBuilder {
        ActorSystemBuilder::default()
    }

    /// A handle for other threads or tasks.
    pub fn handle(&self) -> SystemHandle {
        self.handle.clone()
    }

    /// Stops every actor, children before parents, waiting up to `deadline`.
    /// Pending `ask`s end with [`AskError::NoReply`](crate::AskError::NoReply)
    /// and later spawns fail with [`SpawnError::SystemShutdown`]. Actors
    /// still running at the deadline are killed and reported. The deadline
    /// holds even for a handler that never returns (blocked in a system
    /// call, looping): its worker thread is left behind, detached, and ends
    /// when the handler does; asks still waiting then end with
    /// [`AskError::SystemShutdown`](crate::AskError::SystemShutdown).
    /// Calling it again is harmless.
    pub fn shutdown(&self, deadline: Duration) -> Result<(), ShutdownError> {
        let core = &self.handle.core;
        if core.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let on_worker = core.scheduler.is_worker_thread();
        // Held messages were sent before the shutdown: they reach their
        // actors (and are drained to dead letters with them), and later
        // sends are no longer held.
        if let Some(outbox) = &core.outbox {
            for held in outbox.take() {
                held.deliver();
            }
        }
        core.guardian.stop_all();
        let until = Instant::now() + deadline;
        let mut left = if core.scheduler.is_manual() {
            // Nobody else runs actors: drive the stops here, in order.
            while core.scheduler.run_one(&mut |_| (0, u32::MAX)).is_some() {}
            core.guardian.wait_all_stopped(Instant::now())
        } else if on_worker {
            0
        } else {
            core.guardian.wait_all_stopped(until)
        };
        if left > 0 {
            core.guardian.kill_all();
            left = core
                .guardian
                .wait_all_stopped(Instant::now() + Duration::from_millis(100));
        }
        core.timers.shutdown();
        // The deadline holds even for a handler that never returns: its
        // worker is left behind rather than joined (and counted above,
        // since its actor could not stop).
        core.scheduler
            .shutdown(Some(Instant::now() + Duration::from_millis(100)));
        core.guardian.clear();
        core.registry.clear();
        core.extensions.clear();
        core.dead_letters.clear();
        core.tokio.shut_down();
        if left > 0 {
            Err(ShutdownError::DeadlineExceeded {
                still_running: left,
            })
        } else {
            Ok(())
        }
    }
}

impl Drop for ActorSystem {
    fn drop(&mut self) {
        let _ = self.shutdown(self.default_deadline);
    }
}
