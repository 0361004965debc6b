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
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

/// A registered name as the table keeps it. A short one (most are: the
/// realtime map's `vehicle/0018/00817` is 18 bytes) lies in the table's
/// entry itself, so a look-up compares it on the line it already loaded
/// for the entry; a `String` key sent each look-up to a second allocation,
/// one more cache miss for a table larger than the caches.
#[derive(Clone)]
enum Name {
    Inline { len: u8, bytes: [u8; Name::INLINE] },
    Heap(Box<str>),
}

impl Name {
    /// As many bytes as fit beside the length in a `String`'s 24.
    const INLINE: usize = 22;

    fn new(name: &str) -> Self {
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= Self::INLINE => {
                let mut bytes = [0; Self::INLINE];
                bytes[..name.len()].copy_from_slice(name.as_bytes());
                Name::Inline { len, bytes }
            }
            _ => Name::Heap(name.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Name::Heap(name) => name.as_bytes(),
        }
    }

    /// The name as text, for listing. The bytes were copied from a `str`,
    /// so the check never replaces anything; it is paid here, when names
    /// are listed, and never by a look-up (which compares bytes: [`Lookup`]).
    fn to_text(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

/// Hashes as the `str` it holds (`str`'s `Hash` writes the bytes and then
/// `0xff`), so that a [`Lookup`] of the same text finds it.
impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

/// A name being looked up: hashed as a [`Name`] of the same text, and
/// compared with one byte by byte.
struct Lookup<'a>(&'a str);

/// Exactly as [`Name`]'s, whatever the hasher does with `write_str`.
impl Hash for Lookup<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
        state.write_u8(0xff);
    }
}

impl papaya::Equivalent<Name> for Lookup<'_> {
    fn equivalent(&self, key: &Name) -> bool {
        self.0.as_bytes() == key.as_bytes()
    }
}

struct NameEntry {
    id: ActorId,
    control: Arc<dyn ControlHandle>,
    /// The `Arc<ActorCell<A>>`, for typed look-ups.
    typed: Arc<dyn Any + Send + Sync>,
}

type GroupKey = (String, TypeId);

#[derive(Default)]
pub(crate) struct Registry {
    /// Name → actor. Look-ups write nothing shared: under a lock, even a
    /// read lock writes its lock word, and two tokio threads looking up
    /// actors by name spent more time passing that word's cache line
    /// between them than looking up (decision 0035).
    by_name: papaya::HashMap<Name, NameEntry>,
    /// Each actor's names, for releasing them when it stops. Every change
    /// to the names holds this lock: changes run one at a time, so the two
    /// tables always agree; look-ups never take it.
    by_actor: Mutex<HashMap<ActorId, Vec<String>>>,
    groups: RwLock<HashMap<GroupKey, Box<dyn Any + Send + Sync>>>,
}

impl Registry {
    fn changing(&self) -> std::sync::MutexGuard<'_, HashMap<ActorId, Vec<String>>> {
        self.by_actor.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn register<A: Actor>(
        &self,
        name: String,
        actor: &ActorRef<A>,
    ) -> Result<(), RegistryError> {
        let cell = actor.cell();
        let mut by_actor = self.changing();
        let by_name = self.by_name.pin();
        if let Some(held) = by_name.get(&Lookup(&name)) {
            // A holder that stopped but has not been cleaned up yet (it is
            // mid-stop) no longer owns the name.
            if !held.control.is_stopped() {
                return Err(RegistryError::NameTaken(name));
            }
            let old = held.id;
            if let Some(list) = by_actor.get_mut(&old) {
                list.retain(|n| n != &name);
            }
        }
        if cell.is_closed() {
            return Err(RegistryError::Stopped);
        }
        cell.mark_named();
        by_actor.entry(cell.id).or_default().push(name.clone());
        by_name.insert(
            Name::new(&name),
            NameEntry {
                id: cell.id,
                control: cell.clone(),
                typed: cell.clone(),
            },
        );
        drop(by_actor);
        // The actor may have stopped between the check and the mark, after
        // its stop already cleaned the registry: undo for it.
        if cell.is_closed() {
            self.remove_actor(cell.id);
            return Err(RegistryError::Stopped);
        }
        Ok(())
    }

    pub(crate) fn unregister(&self, name: &str) -> bool {
        let mut by_actor = self.changing();
        let by_name = self.by_name.pin();
        match by_name.remove(&Lookup(name)) {
            Some(entry) => {
                if let Some(list) = by_actor.get_mut(&entry.id) {
                    list.retain(|n| n != name);
                    if list.is_empty() {
                        by_actor.remove(&entry.id);
                    }
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn whereis<A: Actor>(&self, name: &str) -> Option<ActorRef<A>> {
        let by_name = self.by_name.pin();
        let entry = by_name.get(&Lookup(name))?;
        if entry.control.is_stopped() {
            return None;
        }
        let cell = entry.typed.clone().downcast::<ActorCell<A>>().ok()?;
        Some(ActorRef::from_cell(cell))
    }

    /// Every registered name with its actor, sorted by name.
    pub(crate) fn names(&self) -> Vec<(String, ActorId)> {
        let mut all: Vec<_> = self
            .by_name
            .pin()
            .iter()
            .filter(|(_, e)| !e.control.is_stopped())
            .map(|(n, e)| (n.to_text(), e.id))
            .collect();
        all.sort();
        all
    }

    pub(crate) fn whereis_id(&self, name: &str) -> Option<ActorId> {
        self.by_name
            .pin()
            .get(&Lookup(name))
            .filter(|e| !e.control.is_stopped())
            .map(|e| e.id)
    }

    /// Releases every name an actor holds (it stopped).
    pub(crate) fn remove_actor(&self, id: ActorId) {
        let mut by_actor = self.changing();
        if let Some(list) = by_actor.remove(&id) {
            let by_name = self.by_name.pin();
            for n in list {
                if by_name.get(&Lookup(&n)).is_some_and(|e| e.id == id) {
                    by_name.remove(&Lookup(&n));
                }
            }
        }
    }

    /// Forgets every name and group (system shutdown).
    pub(crate) fn clear(&self) {
        let mut by_actor = self.changing();
        self.by_name.pin().clear();
        by_actor.clear();
        drop(by_actor);
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

#[cfg(test)]
mod tests {
    use super::{Lookup, Name};

    /// A `Name` must be found by a look-up of the text it holds, and only
    /// by that, at every length around the inline limit and with
    /// multi-byte characters across it.
    #[test]
    fn a_name_is_found_by_its_text() {
        let names: Vec<String> = (0..=Name::INLINE + 2)
            .map(|n| "v".repeat(n))
            .chain(["vehicle/0018/00817".into(), "ünïcødé/名前/ä".into()])
            .chain((0..6).map(|n| format!("{}é", "x".repeat(Name::INLINE - 3 + n))))
            .collect();
        let table = papaya::HashMap::new();
        let pinned = table.pin();
        for (i, n) in names.iter().enumerate() {
            pinned.insert(Name::new(n), i);
        }
        assert_eq!(pinned.len(), names.len());
        for (i, n) in names.iter().enumerate() {
            assert_eq!(pinned.get(&Lookup(n)), Some(&i), "{n:?}");
            assert_eq!(Name::new(n).to_text(), *n);
        }
        assert_eq!(pinned.get(&Lookup("vehicle/0018/00818")), None);
        assert_eq!(pinned.get(&Lookup("vehicle/0018/0081")), None);
        assert!(matches!(
            Name::new(&"v".repeat(Name::INLINE)),
            Name::Inline { .. }
        ));
        assert!(matches!(
            Name::new(&"v".repeat(Name::INLINE + 1)),
            Name::Heap(_)
        ));
        // No larger than the `String` it replaced: the entry stays as it was.
        assert_eq!(std::mem::size_of::<Name>(), std::mem::size_of::<String>());
    }
}
