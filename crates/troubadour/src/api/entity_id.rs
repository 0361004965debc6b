//! The identity of a virtual actor: its kind and its id within the kind.

use std::borrow::Cow;
use std::fmt;

/// Who an actor is beyond this activation: a virtual actor's kind and its
/// id within the kind (Orleans' grain id, Akka's entity type and entity
/// id). Its [`ActorId`](crate::ActorId) names one activation on one node;
/// an `EntityId` names the same actor across passivations, restarts and
/// nodes, so state keyed by it (durable reminders, a journal) outlives
/// each activation.
///
/// Set by the layer that activates the actor (the cluster does it for
/// every entity; a single-process program may do it with
/// [`SpawnOptions::entity`](crate::SpawnOptions::entity)) and read from
/// within with [`Context::entity`](crate::Context::entity): for extension
/// crates that key per-actor state by it.
///
/// ```
/// use troubadour::EntityId;
/// let vehicle = EntityId::new("vehicle", "0012.01214");
/// assert_eq!((vehicle.kind(), vehicle.id()), ("vehicle", "0012.01214"));
/// assert_eq!(vehicle.to_string(), "vehicle/0012.01214");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityId {
    kind: Cow<'static, str>,
    id: String,
}

impl EntityId {
    /// The actor `id` of kind `kind`.
    pub fn new(kind: impl Into<Cow<'static, str>>, id: impl Into<String>) -> Self {
        EntityId {
            kind: kind.into(),
            id: id.into(),
        }
    }

    /// The kind's name.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The id within the kind.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.id)
    }
}
