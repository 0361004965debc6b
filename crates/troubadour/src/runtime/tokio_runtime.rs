//! The tokio runtime a system runs on: the caller's, or a small one of its
//! own. Handlers run inside it (so they can `tokio::spawn`), and real-time
//! waits (ask timeouts, `SystemHandle::sleep`) are tokio timers on it.
//!
//! A system's own runtime is shut down with the system, and polling a tokio
//! timer of a shut-down runtime panics inside tokio. So whoever polls one
//! holds [`TokioRuntime::alive`]'s read lock and checks it first, and the
//! shutdown flips it under the write lock: no poll runs during or after it.

use std::sync::{Mutex, RwLock, RwLockReadGuard};

pub(crate) struct TokioRuntime {
    handle: tokio::runtime::Handle,
    /// `Some` when the system started its own runtime.
    own: Mutex<Option<tokio::runtime::Runtime>>,
    alive: RwLock<bool>,
}

impl TokioRuntime {
    /// The caller's runtime: it lives as long as the caller keeps it.
    pub(crate) fn borrowed(handle: tokio::runtime::Handle) -> Self {
        TokioRuntime {
            handle,
            own: Mutex::new(None),
            alive: RwLock::new(true),
        }
    }

    /// A runtime of the system's own, shut down with it.
    pub(crate) fn own(runtime: tokio::runtime::Runtime) -> Self {
        TokioRuntime {
            handle: runtime.handle().clone(),
            own: Mutex::new(Some(runtime)),
            alive: RwLock::new(true),
        }
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Held while polling a tokio timer; `false` once the runtime is gone.
    pub(crate) fn alive(&self) -> RwLockReadGuard<'_, bool> {
        self.alive.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Shuts the system's own runtime down (a borrowed one is left alone).
    pub(crate) fn shut_down(&self) {
        let own = self.own.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(runtime) = own {
            let mut alive = self.alive.write().unwrap_or_else(|p| p.into_inner());
            *alive = false;
            runtime.shutdown_background();
        }
    }
}
