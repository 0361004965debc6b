//! Cluster-wide groups, like Erlang's `pg`: an actor joins a named group
//! from its own node, every node learns of it, and a message sent to the
//! group reaches every member wherever it runs. A member leaves when it
//! asks, when it stops, or when its node goes down.
//!
//! Each node runs one [`Groups`] actor. It owns the joins of its node's
//! actors and keeps a replica of every other node's: when a node comes up
//! it is sent a reset and then every local membership, and after that each
//! local join and leave as it happens. The remote layer keeps each pair's
//! messages in order, so a replica applies them in the order they were
//! made; a node that goes down (or leaves) takes its members with it. There
//! is no consensus and no store: like `pg`, the view is eventually
//! consistent (a node learns of a join one message later), which is what a
//! fan-out of notifications needs, and never the basis for ownership (that
//! is what entities and the lease store are for).
//!
//! Members travel as [`Recipient`]s of the group's message type, inside one
//! registered envelope ([`GroupUpdate`]) and decoded by the message type's
//! registered name, as entity messages are: every node registers the group
//! message types it uses ([`ClusterBuilder::group`](crate::ClusterBuilder::group)).

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::{ActorId, Down, Handles, NodeId};
use troubadour_remote::{Accepts, LookupError, NodeLookup, RemoteActor, RemoteMessage};

use crate::entity::next;
use crate::lease::NodeKey;
use crate::membership::MemberEvent;
use crate::tasks::{Poll, Task, Tasks};

/// The name every node's groups actor is exposed under.
pub(crate) const GROUPS: &str = "troubadour.cluster.groups";

/// A group: its name and the type of the messages its members take.
type GroupKey = (String, &'static str);

// ---- the members of one group, whatever their message type -------------------

/// A list of members of one message type, behind a trait so that one actor
/// keeps groups of every type.
trait MemberList: Send {
    fn as_any(&self) -> &(dyn Any + Send);
    fn len(&self) -> usize;
    fn ids(&self) -> Vec<ActorId>;
    /// Appends `other`'s members (of the same type).
    fn append(&mut self, other: Box<dyn MemberList>);
    /// Removes one instance of each member of `other`.
    fn remove_each(&mut self, other: &dyn MemberList);
    /// Removes every instance of `id`: the removed ones.
    fn remove_all(&mut self, id: ActorId) -> Box<dyn MemberList>;
    /// Removes one instance of `id`: the removed one, if any.
    fn remove_one(&mut self, id: ActorId) -> Option<Box<dyn MemberList>>;
    fn clone_list(&self) -> Box<dyn MemberList>;
    fn to_serialize(&self) -> &dyn erased_serde::Serialize;
}

struct Members<M: Message>(Vec<Recipient<M>>);

impl<M: RemoteMessage> MemberList for Members<M> {
    fn as_any(&self) -> &(dyn Any + Send) {
        self
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn ids(&self) -> Vec<ActorId> {
        self.0.iter().map(Recipient::id).collect()
    }
    fn append(&mut self, other: Box<dyn MemberList>) {
        if let Some(o) = other.as_any().downcast_ref::<Members<M>>() {
            self.0.extend(o.0.iter().cloned());
        }
    }
    fn remove_each(&mut self, other: &dyn MemberList) {
        for id in other.ids() {
            if let Some(i) = self.0.iter().position(|r| r.id() == id) {
                self.0.remove(i);
            }
        }
    }
    fn remove_all(&mut self, id: ActorId) -> Box<dyn MemberList> {
        let (gone, kept) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|r| r.id() == id);
        self.0 = kept;
        Box::new(Members::<M>(gone))
    }
    fn remove_one(&mut self, id: ActorId) -> Option<Box<dyn MemberList>> {
        let i = self.0.iter().position(|r| r.id() == id)?;
        Some(Box::new(Members::<M>(vec![self.0.remove(i)])))
    }
    fn clone_list(&self) -> Box<dyn MemberList> {
        Box::new(Members::<M>(self.0.clone()))
    }
    fn to_serialize(&self) -> &dyn erased_serde::Serialize {
        &self.0
    }
}

// ---- the registry of group message types -------------------------------------

type DecodeMembers =
    fn(&mut dyn erased_serde::Deserializer<'_>) -> Result<Box<dyn MemberList>, erased_serde::Error>;

struct MemberCodec {
    name: &'static str,
    type_id: TypeId,
    decode: DecodeMembers,
}

static CODECS: LazyLock<RwLock<HashMap<&'static str, &'static MemberCodec>>> =
    LazyLock::new(Default::default);

/// Enters `M` as a group message type (once per type); a second type under
/// the same name is refused.
pub(crate) fn register_group_message<M: RemoteMessage>() -> Result<(), String> {
    let mut codecs = CODECS.write().unwrap_or_else(|p| p.into_inner());
    match codecs.get(M::NAME) {
        Some(c) if c.type_id == TypeId::of::<M>() => Ok(()),
        Some(_) => Err(format!(
            "two group message types are named {:?}; give one of them another name",
            M::NAME
        )),
        None => {
            codecs.insert(
                M::NAME,
                Box::leak(Box::new(MemberCodec {
                    name: M::NAME,
                    type_id: TypeId::of::<M>(),
                    decode: |d| {
                        let members = erased_serde::deserialize::<Vec<Recipient<M>>>(d)?;
                        Ok(Box::new(Members(members)))
                    },
                })),
            );
            Ok(())
        }
    }
}

fn codec_named(name: &str) -> Option<&'static MemberCodec> {
    CODECS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .copied()
}

// ---- what travels between nodes ----------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Forget what was known of the sender: its full state follows.
    Reset = 0,
    Join = 1,
    Leave = 2,
    /// As `Reset`, and send your full state back: the sender (re)started
    /// following the receiver (it saw it come up, perhaps again after a
    /// wrong `down` that made it drop the receiver's members), and the
    /// receiver may not know that it must send it everything again.
    ResetAndAsk = 3,
}

impl Op {
    fn is_reset(self) -> bool {
        matches!(self, Op::Reset | Op::ResetAndAsk)
    }
}

/// One change of a node's memberships, sent to every other node's groups
/// actor, in order.
pub(crate) struct GroupUpdate {
    from: String,
    incarnation: u64,
    op: Op,
    group: String,
    codec: Option<&'static MemberCodec>,
    members: Option<Box<dyn MemberList>>,
}

impl Message for GroupUpdate {
    type Reply = ();
}

impl RemoteMessage for GroupUpdate {
    const NAME: &'static str = "troubadour.cluster.GroupUpdate";
}

struct ErasedMembers<'a>(&'a dyn erased_serde::Serialize);

impl Serialize for ErasedMembers<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        erased_serde::serialize(self.0, s)
    }
}

impl Serialize for GroupUpdate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(6)?;
        t.serialize_element(&self.from)?;
        t.serialize_element(&self.incarnation)?;
        t.serialize_element(&(self.op as u8))?;
        if !self.op.is_reset() {
            let (Some(codec), Some(members)) = (self.codec, &self.members) else {
                return Err(serde::ser::Error::custom("a join or leave without members"));
            };
            t.serialize_element(&self.group)?;
            t.serialize_element(codec.name)?;
            t.serialize_element(&ErasedMembers(members.to_serialize()))?;
        }
        t.end()
    }
}

struct MembersSeed(DecodeMembers);

impl<'de> DeserializeSeed<'de> for MembersSeed {
    type Value = Box<dyn MemberList>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let mut erased = <dyn erased_serde::Deserializer<'_>>::erase(d);
        (self.0)(&mut erased).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for GroupUpdate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct UpdateVisitor;
        impl<'de> Visitor<'de> for UpdateVisitor {
            type Value = GroupUpdate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a group update")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GroupUpdate, A::Error> {
                let from: String = next(&mut seq, "node")?;
                let incarnation: u64 = next(&mut seq, "incarnation")?;
                let op = match next::<u8, _>(&mut seq, "operation")? {
                    0 => Op::Reset,
                    1 => Op::Join,
                    2 => Op::Leave,
                    3 => Op::ResetAndAsk,
                    n => return Err(de::Error::custom(format!("unknown group operation {n}"))),
                };
                if op.is_reset() {
                    return Ok(GroupUpdate {
                        from,
                        incarnation,
                        op,
                        group: String::new(),
                        codec: None,
                        members: None,
                    });
                }
                let group: String = next(&mut seq, "group")?;
                let name: String = next(&mut seq, "message name")?;
                let codec = codec_named(&name).ok_or_else(|| {
                    de::Error::custom(format!(
                        "group {group:?} takes messages named {name:?}, which this node did not \
                         register: call ClusterBuilder::group::<M>() on every node"
                    ))
                })?;
                let members = seq
                    .next_element_seed(MembersSeed(codec.decode))?
                    .ok_or_else(|| de::Error::custom("the update ended before its members"))?;
                Ok(GroupUpdate {
                    from,
                    incarnation,
                    op,
                    group,
                    codec: Some(codec),
                    members: Some(members),
                })
            }
        }
        d.deserialize_tuple(6, UpdateVisitor)
    }
}

// ---- the actor -----------------------------------------------------------------

/// Another node's groups actor, as this one reaches it.
enum Peer {
    /// Being looked up: the updates for it wait, in order.
    Resolving(VecDeque<GroupUpdate>),
    Ready(ActorRef<Groups>),
}

pub(crate) enum Event {
    Found(NodeKey, Result<ActorRef<Groups>, LookupError>),
}

/// One node's groups: its own members, and its replica of the others'.
pub(crate) struct Groups {
    me: NodeId,
    lookup: NodeLookup,
    // Ordered maps where an iteration sends something: the same order on
    // every run, so a seed replays a simulation.
    members: BTreeMap<NodeKey, NodeId>,
    /// Nodes seen down: what they sent and is still arriving is void.
    gone: BTreeSet<NodeKey>,
    peers: BTreeMap<NodeKey, Peer>,
    local: BTreeMap<GroupKey, Box<dyn MemberList>>,
    remote: BTreeMap<GroupKey, BTreeMap<NodeKey, Box<dyn MemberList>>>,
    /// The groups each local member is in, for when it stops.
    watched: HashMap<ActorId, Vec<GroupKey>>,
    /// The other nodes' groups actors this one monitors: a lost
    /// connection may have lost updates in flight (its node is not down
    /// for that), so the two start over with their full states.
    followed: HashMap<ActorId, NodeKey>,
    tasks: Tasks<Event>,
}

impl Groups {
    pub(crate) fn new(me: NodeId, lookup: NodeLookup) -> Groups {
        Groups {
            me,
            lookup,
            members: BTreeMap::new(),
            gone: BTreeSet::new(),
            peers: BTreeMap::new(),
            local: BTreeMap::new(),
            remote: BTreeMap::new(),
            watched: HashMap::new(),
            followed: HashMap::new(),
            tasks: Tasks::default(),
        }
    }

    fn update(&self, op: Op, key: &GroupKey, members: Option<Box<dyn MemberList>>) -> GroupUpdate {
        GroupUpdate {
            from: self.me.name().to_string(),
            incarnation: self.me.incarnation(),
            op,
            group: key.0.clone(),
            codec: codec_named(key.1),
            members,
        }
    }

    /// Everything a node that just came up needs: a reset (asking for its
    /// own state back when `ask`), then every local membership.
    fn full_state(&self, ask: bool) -> VecDeque<GroupUpdate> {
        let reset = if ask { Op::ResetAndAsk } else { Op::Reset };
        let mut updates = VecDeque::from([self.update(reset, &(String::new(), ""), None)]);
        for (key, list) in &self.local {
            if list.len() > 0 {
                updates.push_back(self.update(Op::Join, key, Some(list.clone_list())));
            }
        }
        updates
    }

    fn send(&mut self, peer: &NodeKey, update: GroupUpdate) {
        match self.peers.get_mut(peer) {
            Some(Peer::Ready(groups)) => {
                if let Err(e) = groups.tell(update) {
                    tracing::warn!(target: "troubadour::cluster", node = %peer.name, error = %e, "a group update was not sent");
                }
            }
            Some(Peer::Resolving(queue)) => queue.push_back(update),
            None => {}
        }
    }

    /// Sends a change of a local membership to every other node.
    fn publish(&mut self, op: Op, key: &GroupKey, members: &dyn MemberList) {
        let peers: Vec<NodeKey> = self.peers.keys().cloned().collect();
        for peer in peers {
            let update = self.update(op, key, Some(members.clone_list()));
            self.send(&peer, update);
        }
    }

    fn resolve(&mut self, key: NodeKey, node: NodeId, ctx: &mut Context<Self>) {
        self.peers
            .insert(key.clone(), Peer::Resolving(self.full_state(true)));
        let lookup = self.lookup.clone();
        let task: Task<Event> = Box::pin(async move {
            let found = lookup.lookup::<Groups>(&node, GROUPS).await;
            Event::Found(key, found)
        });
        if let Some(event) = self.tasks.start(&ctx.myself(), task) {
            self.on_event(event, ctx);
        }
    }

    fn on_event(&mut self, event: Event, ctx: &mut Context<Self>) {
        let Event::Found(key, found) = event;
        // Only the lookup awaited: an earlier one that comes back late (two
        // were started, a retry and a node seen up again) must not take the
        // place of the peer found since.
        if !matches!(self.peers.get(&key), Some(Peer::Resolving(_))) {
            return;
        }
        let Some(Peer::Resolving(queue)) = self.peers.remove(&key) else {
            return;
        };
        match found {
            Ok(groups) => {
                ctx.monitor(&groups);
                self.followed.insert(groups.id(), key.clone());
                for update in queue {
                    if let Err(e) = groups.tell(update) {
                        tracing::warn!(target: "troubadour::cluster", node = %key.name, error = %e, "a group update was not sent");
                    }
                }
                self.peers.insert(key, Peer::Ready(groups));
            }
            Err(e) => {
                // Still a member: try again, with the state as it is then.
                if self.members.contains_key(&key) {
                    tracing::debug!(target: "troubadour::cluster", node = %key.name, error = %e, "groups of a node not reached yet");
                    ctx.send_after(RETRY, Retry(key));
                }
            }
        }
    }

    fn remove_local(&mut self, id: ActorId, key: &GroupKey, all: bool) {
        let Some(list) = self.local.get_mut(key) else {
            return;
        };
        let gone = if all {
            Some(list.remove_all(id))
        } else {
            list.remove_one(id)
        };
        if list.len() == 0 {
            self.local.remove(key);
        }
        if let Some(gone) = gone.filter(|g| g.len() > 0) {
            self.publish(Op::Leave, key, &*gone);
        }
    }

    /// Drops every member `node` had in every group; how many there were.
    fn forget(&mut self, node: &NodeKey) -> usize {
        let mut removed = 0;
        self.remote.retain(|_, by_node| {
            removed += by_node.remove(node).map_or(0, |l| l.len());
            !by_node.is_empty()
        });
        removed
    }

    fn members_of(&self, key: &GroupKey) -> Vec<&dyn MemberList> {
        let mut lists: Vec<&dyn MemberList> = Vec::new();
        if let Some(l) = self.local.get(key) {
            lists.push(&**l);
        }
        if let Some(by_node) = self.remote.get(key) {
            lists.extend(by_node.values().map(|l| &**l));
        }
        lists
    }
}

impl Actor for Groups {}

/// How long before another node's groups actor is looked up again.
const RETRY: Duration = Duration::from_millis(500);

/// Look the node's groups actor up again.
#[derive(Clone)]
struct Retry(NodeKey);
impl Message for Retry {
    type Reply = ();
}

impl Handler<Retry> for Groups {
    fn handle(&mut self, Retry(key): Retry, ctx: &mut Context<Self>) {
        if let Some(node) = self.members.get(&key).cloned() {
            if !self.peers.contains_key(&key) {
                self.resolve(key, node, ctx);
            }
        }
    }
}

impl Handler<Poll> for Groups {
    fn handle(&mut self, Poll(key): Poll, ctx: &mut Context<Self>) {
        if let Some(event) = self.tasks.poll(&ctx.myself(), key) {
            self.on_event(event, ctx);
        }
    }
}

impl Handler<MemberEvent> for Groups {
    fn handle(&mut self, event: MemberEvent, ctx: &mut Context<Self>) {
        match event {
            MemberEvent::Up(node) => {
                let key = NodeKey::new(node.name(), node.incarnation());
                if node == self.me || self.members.contains_key(&key) {
                    return;
                }
                // Back after a wrong `down` (a partition), under the same
                // incarnation: what it sends from now on counts again.
                self.gone.remove(&key);
                self.members.insert(key.clone(), node.clone());
                self.resolve(key, node, ctx);
            }
            MemberEvent::Down(node) => {
                let key = NodeKey::new(node.name(), node.incarnation());
                self.members.remove(&key);
                self.peers.remove(&key);
                self.gone.insert(key.clone());
                let removed = self.forget(&key);
                if removed > 0 {
                    tracing::info!(target: "troubadour::cluster", node = %key.name, members = removed, "group members of a node that went down removed");
                }
            }
        }
    }
}

impl Handler<GroupUpdate> for Groups {
    fn handle(&mut self, u: GroupUpdate, _: &mut Context<Self>) {
        let from = NodeKey::new(&u.from, u.incarnation);
        // A node seen down: what it sent is void. (One not seen up yet is
        // taken at its word: its updates may overtake the gossip about it.)
        if self.gone.contains(&from) {
            return;
        }
        match (u.op, u.codec, u.members) {
            (op, _, _) if op.is_reset() => {
                self.forget(&from);
                // Asked back: if ready, send everything again, behind what
                // went before. Resolving: the state it will get is taken
                // then. Not known yet: it is sent when the node is seen up.
                if op == Op::ResetAndAsk && matches!(self.peers.get(&from), Some(Peer::Ready(_))) {
                    for update in self.full_state(false) {
                        self.send(&from, update);
                    }
                }
            }
            (Op::Join, Some(codec), Some(members)) => {
                let lists = self.remote.entry((u.group, codec.name)).or_default();
                match lists.get_mut(&from) {
                    Some(list) => list.append(members),
                    None => {
                        lists.insert(from, members);
                    }
                }
            }
            (Op::Leave, Some(codec), Some(members)) => {
                let key = (u.group, codec.name);
                if let Some(lists) = self.remote.get_mut(&key) {
                    if let Some(list) = lists.get_mut(&from) {
                        list.remove_each(&*members);
                        if list.len() == 0 {
                            lists.remove(&from);
                        }
                    }
                    if lists.is_empty() {
                        self.remote.remove(&key);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Handler<Down> for Groups {
    fn handle(&mut self, down: Down, ctx: &mut Context<Self>) {
        if let Some(key) = self.followed.remove(&down.id) {
            // The connection to that node was lost (or its groups actor
            // stopped): look it up again while it is a member, which
            // exchanges full states.
            if matches!(self.peers.get(&key), Some(Peer::Ready(g)) if g.id() == down.id) {
                self.peers.remove(&key);
            }
            if self.members.contains_key(&key) {
                ctx.send_after(RETRY, Retry(key));
            }
            return;
        }
        for key in self.watched.remove(&down.id).unwrap_or_default() {
            self.remove_local(down.id, &key, true);
        }
    }
}

impl RemoteActor for Groups {
    const NAME: &'static str = "troubadour.cluster.Groups";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<GroupUpdate>();
    }
}

// ---- what a node's own code asks of its groups actor ----------------------------

type Watch = Box<dyn FnOnce(&mut Context<Groups>) + Send>;

/// Tells a message to every member of the lists: how many took it.
type SendToAll = Box<dyn FnOnce(&[&dyn MemberList]) -> usize + Send>;

pub(crate) struct Join {
    key: GroupKey,
    member: Box<dyn MemberList>,
    id: ActorId,
    watch: Watch,
}
impl Message for Join {
    type Reply = ();
}

impl Handler<Join> for Groups {
    fn handle(&mut self, j: Join, ctx: &mut Context<Self>) {
        let groups = self.watched.entry(j.id).or_default();
        if groups.is_empty() {
            (j.watch)(ctx);
        }
        if !groups.contains(&j.key) {
            groups.push(j.key.clone());
        }
        self.publish(Op::Join, &j.key, &*j.member);
        match self.local.get_mut(&j.key) {
            Some(list) => list.append(j.member),
            None => {
                self.local.insert(j.key, j.member);
            }
        }
    }
}

pub(crate) struct Leave {
    key: GroupKey,
    id: ActorId,
}
impl Message for Leave {
    type Reply = ();
}

impl Handler<Leave> for Groups {
    fn handle(&mut self, l: Leave, _: &mut Context<Self>) {
        self.remove_local(l.id, &l.key, false);
        let still = self
            .local
            .get(&l.key)
            .is_some_and(|m| m.ids().contains(&l.id));
        if !still {
            if let Some(groups) = self.watched.get_mut(&l.id) {
                groups.retain(|k| *k != l.key);
            }
        }
    }
}

/// Every member of a group, local and remote: a `Vec<Recipient<M>>`, boxed.
pub(crate) struct MembersOf(GroupKey);
impl Message for MembersOf {
    type Reply = Vec<Box<dyn Any + Send>>;
}

impl Handler<MembersOf> for Groups {
    fn handle(
        &mut self,
        MembersOf(key): MembersOf,
        _: &mut Context<Self>,
    ) -> Vec<Box<dyn Any + Send>> {
        self.members_of(&key)
            .into_iter()
            .map(|l| {
                let copy = l.clone_list();
                let any: Box<dyn Any + Send> = Box::new(copy);
                any
            })
            .collect()
    }
}

/// Sends a message to every member of a group, in this actor's turn, so
/// that what one sender broadcasts reaches each member in the order sent.
pub(crate) struct Broadcast {
    key: GroupKey,
    send: SendToAll,
}
impl Message for Broadcast {
    type Reply = usize;
}

impl Handler<Broadcast> for Groups {
    fn handle(&mut self, b: Broadcast, _: &mut Context<Self>) -> usize {
        let lists = self.members_of(&b.key);
        (b.send)(&lists)
    }
}

// ---- the user's handle ---------------------------------------------------------------

/// A cluster-wide group of actors that take `M`, by name: see
/// [`Cluster::group`](crate::Cluster::group).
pub struct Group<M> {
    name: String,
    groups: ActorRef<Groups>,
    me: NodeId,
    _m: PhantomData<fn(M)>,
}

impl<M> Clone for Group<M> {
    fn clone(&self) -> Self {
        Group {
            name: self.name.clone(),
            groups: self.groups.clone(),
            me: self.me.clone(),
            _m: PhantomData,
        }
    }
}

impl<M> fmt::Debug for Group<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Group({})", self.name)
    }
}

/// Why a group operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupError {
    /// Only an actor of this node joins or leaves through this node (as in
    /// Erlang's `pg`): join on the node the actor runs on.
    NotLocal,
    /// The message type was not registered as a group message type, or
    /// another type took its name: call `ClusterBuilder::group::<M>()`
    /// on every node.
    Unregistered(String),
    /// This node's groups actor has stopped (the system is shutting down).
    Stopped,
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::NotLocal => f.write_str(
                "only an actor of this node can join or leave a group here: do it on the actor's own node",
            ),
            GroupError::Unregistered(why) => write!(f, "the group's message type is not usable: {why}"),
            GroupError::Stopped => {
                f.write_str("the node's groups have stopped: the actor system is shutting down")
            }
        }
    }
}

impl std::error::Error for GroupError {}

impl<M: RemoteMessage> Group<M> {
    pub(crate) fn new(name: String, groups: ActorRef<Groups>, me: NodeId) -> Group<M> {
        Group {
            name,
            groups,
            me,
            _m: PhantomData,
        }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn key(&self) -> Result<GroupKey, GroupError> {
        register_group_message::<M>().map_err(GroupError::Unregistered)?;
        Ok((self.name.clone(), M::NAME))
    }

    /// `actor` (of this node) joins the group; every node learns of it. An
    /// actor that joins twice is a member twice (and receives each
    /// broadcast twice) until it leaves twice, as in `pg`. It leaves by
    /// itself when it stops.
    pub fn join<A, K>(&self, actor: &ActorRef<A>) -> Result<(), GroupError>
    where
        A: Handles<M, K>,
        K: 'static,
    {
        if actor.id().node() != self.me {
            return Err(GroupError::NotLocal);
        }
        let watched = actor.clone();
        self.groups
            .tell(Join {
                key: self.key()?,
                member: Box::new(Members::<M>(vec![actor.recipient::<M, K>()])),
                id: actor.id(),
                watch: Box::new(move |ctx| ctx.monitor(&watched)),
            })
            .map_err(|_| GroupError::Stopped)
    }

    /// `actor` leaves the group once (a no-op if it is not a member).
    pub fn leave<A: Actor>(&self, actor: &ActorRef<A>) -> Result<(), GroupError> {
        if actor.id().node() != self.me {
            return Err(GroupError::NotLocal);
        }
        self.groups
            .tell(Leave {
                key: self.key()?,
                id: actor.id(),
            })
            .map_err(|_| GroupError::Stopped)
    }

    /// Every member as this node knows them now: its own, and the other
    /// nodes' as far as their updates have arrived.
    pub async fn members(&self) -> Result<Vec<Recipient<M>>, GroupError> {
        let lists = self
            .groups
            .ask(MembersOf(self.key()?))
            .await
            .map_err(|_| GroupError::Stopped)?;
        let mut out = Vec::new();
        for l in lists {
            if let Ok(list) = l.downcast::<Box<dyn MemberList>>() {
                if let Some(m) = list.as_any().downcast_ref::<Members<M>>() {
                    out.extend(m.0.iter().cloned());
                }
            }
        }
        Ok(out)
    }

    /// Tells `msg` to every member this node knows of, wherever it runs; the
    /// members this node has not heard of yet (a join on another node one
    /// message away) miss it. What one sender broadcasts reaches each
    /// member in the order it was sent. Members whose mailbox refuses the
    /// message (full, or stopped meanwhile) miss it too.
    pub fn broadcast(&self, msg: M) -> Result<(), GroupError>
    where
        M: Clone,
    {
        self.groups
            .tell(Broadcast {
                key: self.key()?,
                send: Box::new(move |lists| {
                    let mut sent = 0;
                    for l in lists {
                        if let Some(m) = l.as_any().downcast_ref::<Members<M>>() {
                            for r in &m.0 {
                                sent += usize::from(r.tell(msg.clone()).is_ok());
                            }
                        }
                    }
                    sent
                }),
            })
            .map_err(|_| GroupError::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Clone)]
    struct Note;
    impl Message for Note {
        type Reply = ();
    }
    impl RemoteMessage for Note {
        const NAME: &'static str = "groups.test.Note";
    }

    #[derive(Serialize, Deserialize, Clone)]
    struct Other;
    impl Message for Other {
        type Reply = ();
    }
    impl RemoteMessage for Other {
        const NAME: &'static str = "groups.test.Note";
    }

    #[test]
    fn two_types_under_one_name_are_refused() {
        assert_eq!(register_group_message::<Note>(), Ok(()));
        assert_eq!(register_group_message::<Note>(), Ok(()));
        assert!(register_group_message::<Other>().is_err());
    }

    #[test]
    fn an_update_for_an_unregistered_type_does_not_decode() {
        #[derive(Serialize)]
        struct Forged(&'static str, u64, u8, &'static str, &'static str, Vec<u8>);
        let bytes =
            postcard::to_allocvec(&Forged("a", 1, 1, "g", "groups.test.Nobody", vec![])).unwrap();
        assert!(postcard::from_bytes::<GroupUpdate>(&bytes).is_err());
        let reset = postcard::to_allocvec(&("a", 1u64, 0u8)).unwrap();
        let u = postcard::from_bytes::<GroupUpdate>(&reset).unwrap();
        assert_eq!(u.op, Op::Reset);
        let bad = postcard::to_allocvec(&("a", 1u64, 7u8)).unwrap();
        assert!(postcard::from_bytes::<GroupUpdate>(&bad).is_err());
    }
}
