//! Names (one name → one live actor) and groups (one name → many
//! recipients of one message type, for fan-out).

use crate::api::actor::{Actor, Message};
use crate::api::actor_ref::{ActorRef, Recipient};
use crate::api::error::RegistryError;
use crate::api::exit::ActorId;
use crate::runtime::cell::ActorCell;
use crate::runtime::signal::ControlHandle;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

struct NameEntry {
    id: ActorId,
    control: Arc<dyn ControlHandle>,
    /// The `Arc<ActorCell<A>>`, for typed look-ups.
    typed: Arc<dyn Any + Send + Sync>,
}

#[derive(Default)]
struct Names {
    by_name: HashMap<String, NameEntry>,
    by_actor: HashMap<ActorId, Vec<String>>,
}

type GroupKey = (String, TypeId);

#[derive(Default)]
pub(crate) struct Registry {
    names: RwLock<Names>,
    groups: RwLock<HashMap<GroupKey, Box<dyn Any + Send + Sync>>>,
}

impl Registry {
    pub(crate) fn register<A: Actor>(
        &self,
        name: String,
        actor: &ActorRef<A>,
    ) -> Result<(), RegistryError> {
        let cell = actor.cell();
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = names.by_name.get(&name) {
            // A holder that stopped but has not been cleaned up yet (it is
            // mid-stop) no longer owns the name.
            if !held.control.is_stopped() {
                return Err(RegistryError::NameTaken(name));
            }
            let old = held.id;
            if let Some(list) = names.by_actor.get_mut(&old) {
                list.retain(|n| n != &name);
            }
        }
        if cell.is_closed() {
            return Err(RegistryError::Stopped);
        }
        cell.mark_named();
        names
            .by_actor
            .entry(cell.id)
            .or_default()
            .push(name.clone());
        names.by_name.insert(
            name,
            NameEntry {
                id: cell.id,
                control: cell.clone(),
                typed: cell.clone(),
            },
        );
        drop(names);
        // The actor may have stopped between the check and the mark, after
        // its stop already cleaned the registry: undo for it.
        if cell.is_closed() {
            self.remove_actor(cell.id);
            return Err(RegistryError::Stopped);
        }
        Ok(())
    }

    pub(crate) fn unregister(&self, name: &str) -> bool {
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        match names.by_name.remove(name) {
            Some(entry) => {
                if let Some(list) = names.by_actor.get_mut(&entry.id) {
                    list.retain(|n| n != name);
                    if list.is_empty() {
                        names.by_actor.remove(&entry.id);
                    }
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn whereis<A: Actor>(&self, name: &str) -> Option<ActorRef<A>> {
        let names = self.names.read().unwrap_or_else(|p| p.into_inner());
        let entry = names.by_name.get(name)?;
        if entry.control.is_stopped() {
            return None;
        }
        let cell = entry.typed.clone().downcast::<ActorCell<A>>().ok()?;
        Some(ActorRef::from_cell(cell))
    }

    /// Every registered name with its actor, sorted by name.
    pub(crate) fn names(&self) -> Vec<(String, ActorId)> {
        let names = self.names.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = names
            .by_name
            .iter()
            .filter(|(_, e)| !e.control.is_stopped())
            .map(|(n, e)| (n.clone(), e.id))
            .collect();
        all.sort();
        all
    }

    pub(crate) fn whereis_id(&self, name: &str) -> Option<ActorId> {
        let names = self.names.read().unwrap_or_else(|p| p.into_inner());
        names
            .by_name
            .get(name)
            .filter(|e| !e.control.is_stopped())
            .map(|e| e.id)
    }

    /// Releases every name an actor holds (it stopped).
    pub(crate) fn remove_actor(&self, id: ActorId) {
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = names.by_actor.remove(&id) {
            for n in list {
                if names.by_name.get(&n).is_some_and(|e| e.id == id) {
                    names.by_name.remove(&n);
                }
            }
        }
    }

    /// Forgets every name and group (system shutdown).
    pub(crate) fn clear(&self) {
        *self.names.write().unwrap_or_else(|p| p.into_inner()) = Names::default();
        self.groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    pub(crate) fn join<M: Message>(&self, group: &str, member: Recipient<M>) {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        let members = groups
            .entry((group.to_owned(), TypeId::of::<M>()))
            .or_insert_with(|| Box::new(Vec::<Recipient<M>>::new()));
        if let Some(list) = members.downcast_mut::<Vec<Recipient<M>>>() {
            list.retain(|r| r.is_alive() && r.id() != member.id());
            list.push(member);
        }
    }

    pub(crate) fn leave<M: Message>(&self, group: &str, id: ActorId) -> bool {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        let key = (group.to_owned(), TypeId::of::<M>());
        let Some(list) = groups
            .get_mut(&key)
            .and_then(|m| m.downcast_mut::<Vec<Recipient<M>>>())
        else {
            return false;
        };
        let before = list.len();
        list.retain(|r| r.id() != id);
        before != list.len()
    }

    /// Live members, in join order. Members that stopped are dropped.
    pub(crate) fn members<M: Message>(&self, group: &str) -> Vec<Recipient<M>> {
        let key = (group.to_owned(), TypeId::of::<M>());
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        match groups
            .get_mut(&key)
            .and_then(|m| m.downcast_mut::<Vec<Recipient<M>>>())
        {
            Some(list) => {
                list.retain(|r| r.is_alive());
                list.clone()
            }
            None => Vec::new(),
        }
    }
}
