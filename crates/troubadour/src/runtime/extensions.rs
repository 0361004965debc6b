//! Values extension crates attach to a system (a reminder service, a
//! cluster), one per type, for actors to find again through
//! [`Context::system`](crate::Context::system): Akka's extensions,
//! without a registry of ids. Read and written off the message path (at
//! set-up and when an actor asks for one), so a lock is enough.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Value = Arc<dyn Any + Send + Sync>;

#[derive(Default)]
pub(crate) struct Extensions {
    values: RwLock<HashMap<TypeId, Value>>,
}

impl Extensions {
    pub(crate) fn set<T: Send + Sync + 'static>(&self, value: T) -> Option<Arc<T>> {
        let old = self
            .values
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(TypeId::of::<T>(), Arc::new(value));
        old.map(|v| v.downcast().expect("an extension is keyed by its own type"))
    }

    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let value = self
            .values
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&TypeId::of::<T>())?
            .clone();
        Some(
            value
                .downcast()
                .expect("an extension is keyed by its own type"),
        )
    }

    /// Drops every value: at shutdown, since a value may hold handles of
    /// the system it is attached to (a reminder service's deliverers hold
    /// a cluster), a cycle nothing else would break.
    pub(crate) fn clear(&self) {
        let values = std::mem::take(&mut *self.values.write().unwrap_or_else(|e| e.into_inner()));
        // Outside the lock: a value's drop may reach the system again.
        drop(values);
    }
}
