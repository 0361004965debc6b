//! A system on the network: [`Remote`] listens, dials, exposes local
//! actors by name and looks up other nodes' actors, handing out ordinary
//! `ActorRef`s for them.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use troubadour::remote::{proxy, RefTarget, Resolved, WireRef};
use troubadour::{ActorRef, NodeId, SystemHandle};

use crate::codec::DEFAULT_MAX_DEPTH;
use crate::connection::{ConfigError, ConnectError, Connection, Endpoint, Listener, Security};
use crate::frame::Limits;
use crate::link::NodeLink;
use crate::messages::{export_actor, Encoders, Export, ExportActorFn, RemoteActor, RemoteMessage};
use crate::peer::Peer;
use crate::peers::{PeerStatus, RemoteView};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Settings of a [`Remote`] beyond security and messages.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    pub outbound_queue_bytes: usize,
    pub max_depth: usize,
    pub remote_ask_limit: Duration,
    pub lookup_timeout: Duration,
    /// `None`: a lost node is declared down only when another
    /// incarnation answers at its address.
    pub node_down_after: Option<Duration>,
    pub turns_on_io_thread: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(5),
            outbound_queue_bytes: 8 * 1024 * 1024,
            max_depth: DEFAULT_MAX_DEPTH,
            remote_ask_limit: Duration::from_secs(300),
            lookup_timeout: Duration::from_secs(10),
            node_down_after: Some(Duration::from_secs(30)),
            turns_on_io_thread: true,
        }
    }
}

/// Counters of what the remote layer refused or lost, per reason. Every
/// frame dropped on the receiving side is counted in exactly one of them.
#[derive(Debug, Default)]
pub struct RemoteStats {
    /// Frames whose message type the receiving actor does not accept.
    pub unknown_type: AtomicU64,
    /// Frames whose payload did not decode (or was nested too deep).
    pub undecodable: AtomicU64,
    /// Frames for an actor that is not exposed here or has stopped.
    pub no_such_actor: AtomicU64,
    /// Frames refused by the receiving actor's full bounded mailbox.
    pub mailbox_full: AtomicU64,
    /// Connections closed for a framing error.
    pub framing_errors: AtomicU64,
    /// Connections lost, for any reason.
    pub connections_lost: AtomicU64,
    /// Incoming connections refused in TLS or the handshake.
    pub handshakes_refused: AtomicU64,
    /// Control-channel messages for a channel this node has not opened.
    pub unknown_channel: AtomicU64,
}

impl RemoteStats {
    /// A counter's current value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The frames refused on the receiving side, by reason (`unknown_type`,
    /// `undecodable`, `no_such_actor`, `mailbox_full`, `unknown_channel`),
    /// for a metric labelled by reason.
    pub fn frames_refused(&self) -> [(&'static str, u64); 5] {
        [
            ("unknown_type", Self::get(&self.unknown_type)),
            ("undecodable", Self::get(&self.undecodable)),
            ("no_such_actor", Self::get(&self.no_such_actor)),
            ("mailbox_full", Self::get(&self.mailbox_full)),
            ("unknown_channel", Self::get(&self.unknown_channel)),
        ]
    }
}

/// What every connection of one [`Remote`] shares.
pub(crate) struct Shared {
    pub system: SystemHandle,
    pub runtime: tokio::runtime::Handle,
    pub endpoint: Endpoint,
    pub limits: Limits,
    pub config: Config,
    pub encoders: Encoders,
    pub actor_types: HashMap<TypeId, ExportActorFn>,
    pub stats: Arc<RemoteStats>,
    /// Where other nodes are told to dial this one (`RemoteBuilder::advertise`,
    /// else the listen address).
    pub advertised_addr: Option<SocketAddr>,
    /// This node's name and advertised address as references carry them.
    wire_name: String,
    wire_address: Option<String>,
    /// No sockets: connections are made and driven by a simulation.
    pub simulated: bool,
    exports: RwLock<Exports>,
    peers: Mutex<Peers>,
    shut: std::sync::atomic::AtomicBool,
    /// Control channels opened by extension crates (`channel.rs`).
    pub channels: crate::channel::Channels,
    /// In a simulation: connections waiting to be dialled, with the
    /// backoff before the attempt; the simulation takes them (`sim.rs`).
    pub sim_dials: Mutex<Vec<(Arc<Peer>, Duration)>>,
    /// Nodes this one is cut off from (feature `faults`): their
    /// connections are closed once established, either way.
    #[cfg(feature = "faults")]
    cut_off: Mutex<std::collections::BTreeSet<String>>,
}

#[derive(Default)]
struct Exports {
    by_serial: HashMap<u64, Arc<Export>>,
    by_name: HashMap<String, u64>,
    /// Size after the last sweep of stopped actors.
    swept_at: usize,
}

impl Exports {
    /// Enters an export made because a reference was sent. Exports of
    /// actors that have stopped since are swept whenever the table has
    /// doubled, so references sent once do not pile up.
    fn insert_lazily(&mut self, serial: u64, export: Arc<Export>) {
        self.by_serial.insert(serial, export);
        if self.by_serial.len() > 2 * self.swept_at.max(512) {
            let named: std::collections::HashSet<u64> = self.by_name.values().copied().collect();
            self.by_serial.retain(|serial, e| {
                named.contains(serial) || e.control.as_ref().is_none_or(|c| !c.is_stopped())
            });
            self.swept_at = self.by_serial.len();
        }
    }
}

#[derive(Default)]
struct Peers {
    /// Every node known, by name and incarnation.
    links: HashMap<(String, u64), Arc<NodeLink>>,
    /// Nodes this node dialled, by the address dialled.
    dialled: HashMap<SocketAddr, Arc<NodeLink>>,
    /// Every connection not yet lost (for shutdown).
    all: Vec<Arc<Peer>>,
}

impl Shared {
    pub(crate) fn export(&self, serial: u64) -> Option<Arc<Export>> {
        self.exports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_serial
            .get(&serial)
            .cloned()
    }

    pub(crate) fn export_named(&self, name: &str) -> Option<(u64, Arc<Export>)> {
        let exports = self.exports.read().unwrap_or_else(|p| p.into_inner());
        let serial = *exports.by_name.get(name)?;
        Some((serial, exports.by_serial.get(&serial)?.clone()))
    }

    /// The wire form of a reference being sent: a local actor is exported
    /// (the first time), a proxy names its own node.
    pub(crate) fn encode_ref(&self, target: RefTarget<'_>) -> Result<WireRef<'_>, String> {
        let (id, wire_node) = match &target {
            RefTarget::Actor { id, .. } | RefTarget::Recipient { id, .. } => (*id, id.node()),
            _ => return Err("a kind of reference this version cannot send".into()),
        };
        let local = self.system.node();
        if wire_node != local {
            return Ok(WireRef {
                node: wire_node.name().to_string().into(),
                incarnation: wire_node.incarnation(),
                address: wire_node.address().map(|a| a.to_string().into()),
                serial: id.serial(),
            });
        }
        let serial = id.serial();
        let wire = WireRef {
            node: self.wire_name.as_str().into(),
            incarnation: local.incarnation(),
            address: self.wire_address.as_deref().map(Into::into),
            serial,
        };
        // Exported already (the common case for a reply-to sent again and
        // again): a read lock.
        if let Some(e) = self.export(serial) {
            let done = match &target {
                RefTarget::Actor { .. } => e.actor_type.is_some(),
                RefTarget::Recipient { message_type, .. } => self
                    .encoders
                    .get(*message_type)
                    .is_some_and(|enc| e.handlers.contains_key(&enc.wire_id)),
                _ => false,
            };
            if done {
                return Ok(wire);
            }
        }
        let mut exports = self.exports.write().unwrap_or_else(|p| p.into_inner());
        let existing = exports.by_serial.get(&serial).cloned();
        match target {
            RefTarget::Actor {
                actor_type,
                type_name,
                actor,
                ..
            } => {
                if existing.as_ref().is_none_or(|e| e.actor_type.is_none()) {
                    let make = self.actor_types.get(&actor_type).ok_or_else(|| {
                        format!(
                            "a reference to a local {type_name} cannot be sent: register its \
                             type with `RemoteBuilder::actor::<{type_name}>()` (it must be a \
                             RemoteActor)"
                        )
                    })?;
                    let mut export = make(actor)
                        .ok_or("the reference is not of its registered type")?
                        .map_err(|e| e.to_string())?;
                    if let Some(old) = existing {
                        // Recipients exported earlier stay reachable.
                        for (k, v) in &old.handlers {
                            export.handlers.entry(*k).or_insert_with(|| v.clone());
                        }
                        for (k, v) in &old.references {
                            export.references.entry(*k).or_insert_with(|| v.clone());
                        }
                    }
                    exports.insert_lazily(serial, Arc::new(export));
                }
            }
            RefTarget::Recipient {
                message_type,
                type_name,
                recipient,
                ..
            } => {
                let encoder = self.encoders.get(message_type).ok_or_else(|| {
                    format!(
                        "a Recipient<{type_name}> cannot be sent: {type_name} is not \
                         registered with the remote layer"
                    )
                })?;
                if existing
                    .as_ref()
                    .is_none_or(|e| !e.handlers.contains_key(&encoder.wire_id))
                {
                    let export = (encoder.export_recipient)(existing.as_deref(), recipient)
                        .ok_or("the reference is not of its registered type")?;
                    exports.insert_lazily(serial, Arc::new(export));
                }
            }
            _ => unreachable!("checked above"),
        }
        Ok(wire)
    }

    /// What a received reference stands for: an actor of this node, of the
    /// peer it came from, or of a third node this one is connected to.
    pub(crate) fn resolve_ref(
        self: &Arc<Self>,
        wire: &WireRef<'_>,
        want: TypeId,
        from: &Arc<NodeLink>,
    ) -> Result<Resolved, String> {
        let local = self.system.node();
        if wire.node == local.name() && wire.incarnation == local.incarnation() {
            let export = self.export(wire.serial).ok_or_else(|| {
                format!(
                    "the reference names actor {} of this node, which is not exported here",
                    wire.serial
                )
            })?;
            let (make, source) = export.references.get(&want).ok_or(
                "the reference names an actor of this node of another type, or that does not take this message",
            )?;
            return make(&**source)
                .map(Resolved::Local)
                .ok_or_else(|| "the exported reference has another type".to_string());
        }
        let link = if from.node.name() == wire.node && from.node.incarnation() == wire.incarnation {
            from.clone()
        } else {
            // A third node: connected already, or dialled on the first send.
            let address = wire.address.as_deref().and_then(|a| a.parse().ok());
            let node = NodeId::remote(&wire.node, address, wire.incarnation)
                .map_err(|e| format!("the reference names an impossible node: {e}"))?;
            if self
                .endpoint
                .declared_down()
                .contains(&wire.node, wire.incarnation)
            {
                return Err(format!(
                    "the reference names node {}, which is down",
                    wire.node
                ));
            }
            let link = self.link_for(&node);
            if let Some(a) = address {
                link.set_dial(a);
            }
            link
        };
        let id = troubadour::ActorId::on(&link.node, wire.serial)
            .ok_or_else(|| format!("invalid actor number {} in a reference", wire.serial))?;
        Ok(Resolved::Remote {
            id,
            route: link.route(),
        })
    }

    /// Every node known, by name then incarnation (`peers.rs`).
    pub(crate) fn peer_statuses(&self) -> Vec<crate::peers::PeerStatus> {
        let links: Vec<Arc<NodeLink>> = lock(&self.peers).links.values().cloned().collect();
        let mut all: Vec<_> = links.iter().map(|l| l.status()).collect();
        all.sort_by(|a, b| (&a.node, a.incarnation).cmp(&(&b.node, b.incarnation)));
        all
    }

    /// A new connection joins the list a shutdown closes.
    pub(crate) fn track(&self, peer: &Arc<Peer>) {
        lock(&self.peers).all.push(peer.clone());
    }

    /// A lost connection leaves the list of live ones.
    pub(crate) fn forget(&self, peer: &Peer) {
        lock(&self.peers).all.retain(|p| !std::ptr::eq(&**p, peer));
    }

    /// A node declared down leaves the tables, so a lookup of its address
    /// dials anew (and finds whichever node listens there now).
    pub(crate) fn forget_link(&self, link: &NodeLink) {
        let mut peers = lock(&self.peers);
        peers.links.retain(|_, l| !std::ptr::eq(&**l, link));
        peers.dialled.retain(|_, l| !std::ptr::eq(&**l, link));
    }

    /// The link of `node`, made on first sight.
    pub(crate) fn link_for(self: &Arc<Self>, node: &NodeId) -> Arc<NodeLink> {
        lock(&self.peers)
            .links
            .entry((node.name().to_string(), node.incarnation()))
            .or_insert_with(|| NodeLink::new(node.clone(), self))
            .clone()
    }

    /// This node's end of a simulated connection to `other` (`sim.rs`).
    #[cfg(feature = "simulation")]
    pub(crate) fn connect_simulated(self: &Arc<Self>, other: &Arc<Shared>) -> Arc<Peer> {
        let link = self.link_for(&other.system.node());
        let peer = Peer::new(self, link.clone());
        link.install(&peer);
        peer.established();
        peer
    }

    /// Whether this node's remote layer was shut down: nothing reconnects.
    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(Ordering::Acquire)
    }
}

/// Why a [`Remote`] could not start, or a registration was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum RemoteError {
    /// Two message types (or a message and another name) share a stable
    /// name's type id; give one of them another name.
    NameClash {
        /// The name registered first.
        first: &'static str,
        /// The name that clashed with it.
        second: &'static str,
    },
    /// Names starting with `troubadour.system.` are the remote layer's own.
    ReservedName(&'static str),
    /// Binding the listen address failed, or plaintext was asked for on an
    /// address that is not loopback.
    Listen(ConnectError),
    /// The name is already exposed on this node; unexpose it first.
    NameTaken(String),
    /// The actor has stopped; there is nothing to expose.
    Stopped,
    /// The system's actor is not on this node (a proxy cannot be exposed).
    NotLocal,
    /// It listens on an unspecified address (`0.0.0.0`, `[::]`) and no
    /// address to advertise was given.
    NoAdvertisedAddress(SocketAddr),
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteError::NameClash { first, second } => write!(
                f,
                "the remote names {first:?} and {second:?} give the same type id (or one name \
                 is registered for two types); rename one of them"
            ),
            RemoteError::ReservedName(n) => write!(
                f,
                "the remote name {n:?} starts with \"troubadour.system.\", which is reserved; \
                 choose another"
            ),
            RemoteError::Listen(e) => write!(f, "could not listen: {e}"),
            RemoteError::NameTaken(n) => write!(
                f,
                "an actor is already exposed as {n:?} on this node; call `unexpose` first"
            ),
            RemoteError::Stopped => write!(f, "the actor has stopped, so it cannot be exposed"),
            RemoteError::NotLocal => write!(
                f,
                "the actor is on another node; only this node's actors can be exposed here"
            ),
            RemoteError::NoAdvertisedAddress(listen) => write!(
                f,
                "listening on {listen}, an address no other node can dial: give the address \
                 they reach this node at with `RemoteBuilder::advertise` (for example the pod's \
                 IP and the same port)"
            ),
        }
    }
}

impl std::error::Error for RemoteError {}

/// Why [`Remote::lookup`] found no actor.
#[derive(Debug)]
#[non_exhaustive]
pub enum LookupError {
    /// No connection to the node: TLS, the handshake or TCP failed.
    Connect(ConnectError),
    /// The node answered that it exposes nothing under the name, or an
    /// actor of another type.
    NotFound(String),
    /// The connection was lost, or the node did not answer in time.
    NoAnswer(String),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::Connect(e) => write!(f, "lookup failed: could not connect: {e}"),
            LookupError::NotFound(reason) => write!(f, "lookup failed: {reason}"),
            LookupError::NoAnswer(reason) => {
                write!(f, "lookup failed: the node did not answer: {reason}")
            }
        }
    }
}

impl std::error::Error for LookupError {}

/// Builds a [`Remote`]: the cluster's name and security, the messages
/// this node sends and receives, limits.
pub struct RemoteBuilder {
    cluster: String,
    security: Security,
    listen: Option<SocketAddr>,
    advertise: Option<SocketAddr>,
    limits: Limits,
    config: Config,
    encoders: Encoders,
    actor_types: HashMap<TypeId, ExportActorFn>,
    error: Option<RemoteError>,
    handshake_timeout: Option<Duration>,
}

impl RemoteBuilder {
    /// Registers `M` for sending (its encoder) and, on the actors whose
    /// [`RemoteActor::accepts`] lists it, for receiving.
    pub fn register<M: RemoteMessage>(mut self) -> Self {
        if let Err(e) = self.encoders.register::<M>() {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Lets references to local actors of type `A` travel inside messages:
    /// an `ActorRef<A>` sent to another node exports the actor (the first
    /// time) for the messages its [`RemoteActor::accepts`] lists.
    pub fn actor<A: RemoteActor>(mut self) -> Self {
        self.actor_types
            .insert(TypeId::of::<A>(), export_actor::<A> as ExportActorFn);
        self
    }

    /// Listens for other nodes on `addr` (port 0: the system picks one;
    /// see [`Remote::local_addr`]). Without it the node only dials.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// The address other nodes reach this one at, when it is not the
    /// listen address: listening on every interface (`0.0.0.0:7355`) in a
    /// pod or a container, or behind address translation. References to
    /// this node's actors and its membership carry it. Without it, a node
    /// listening on an unspecified address refuses to start
    /// ([`RemoteError::NoAdvertisedAddress`]), since no peer could dial
    /// `0.0.0.0`.
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// The frame caps (both nodes should use the same; the default user cap
    /// is 256 KiB, the large lane's 16 MiB).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How many bytes may wait to be written to one peer before `tell` is
    /// refused with `Full` (default 8 MiB).
    pub fn outbound_queue_bytes(mut self, bytes: usize) -> Self {
        self.config.outbound_queue_bytes = bytes;
        self
    }

    /// Heartbeats: sent after `interval` of idleness; a connection silent
    /// for `timeout` is lost (defaults 1 s and 5 s).
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.config.heartbeat_interval = interval;
        self.config.heartbeat_timeout = timeout;
        self
    }

    /// How long reconnecting to a lost node may fail before the node is
    /// declared down for good (default 30 s).
    pub fn node_down_after(mut self, after: Duration) -> Self {
        self.config.node_down_after = Some(after);
        self
    }

    /// Declares a lost node down only when its address answers with
    /// another incarnation (it restarted: a new node), never for being
    /// silent: reconnects go on at the backoff's pace (5 s at most) for as
    /// long as something is sent to it, and a node cut off by a partition
    /// of any length is reached again once the network heals.
    ///
    /// For a layer above that decides itself who is up, as a cluster's
    /// membership does (a member wrongly declared down must be able to
    /// come back); `troubadour_cluster::with_cluster` sets it. What waits
    /// for a silent node stays bounded by the outbound queue, and asks end
    /// by their time-outs.
    pub fn node_down_only_when_replaced(mut self) -> Self {
        self.config.node_down_after = None;
        self
    }

    /// How long TCP, TLS and the handshake may take (default 10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = Some(timeout);
        self
    }

    /// How long this node waits for a local actor's reply to a remote ask
    /// before answering that none came (default 300 s; the asker's own
    /// timeout usually ends it first).
    pub fn remote_ask_limit(mut self, limit: Duration) -> Self {
        self.config.remote_ask_limit = limit;
        self
    }

    /// Whether the actor a received message wakes may run its turn on the
    /// connection's I/O thread, right after the message is read, instead of
    /// waking a worker for it (default `true`): a round trip then wakes no
    /// worker on either side (decision 0022). Actors whose turns are slow
    /// go to the workers by themselves, and troubadour's own waits
    /// (`ask(..).wait()`) hand the I/O thread on first. Turn it off if
    /// handlers of remotely reached actors call tokio's
    /// `Handle::block_on` themselves (which panics on a tokio thread) or
    /// block the thread in long system calls without
    /// `SpawnOptions::blocking`.
    pub fn turns_on_io_thread(mut self, enabled: bool) -> Self {
        self.config.turns_on_io_thread = enabled;
        self
    }

    /// Starts networking `system`: binds the listen address and accepts
    /// connections on the system's tokio runtime.
    pub async fn start(mut self, system: &SystemHandle) -> Result<Remote, RemoteError> {
        // A registration error is reported before anything is bound.
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if let (Some(listen), None) = (self.listen, self.advertise) {
            if listen.ip().is_unspecified() {
                return Err(RemoteError::NoAdvertisedAddress(listen));
            }
        }
        let listener = match self.listen {
            Some(addr) => Some(
                self.endpoint(system)
                    .listen(addr)
                    .await
                    .map_err(RemoteError::Listen)?,
            ),
            None => None,
        };
        self.start_with(system, listener, false)
    }

    fn endpoint(&self, system: &SystemHandle) -> Endpoint {
        let node = system.node();
        let mut endpoint = Endpoint::new(
            self.cluster.clone(),
            node.name(),
            node.incarnation(),
            self.security.clone(),
        )
        .with_limits(self.limits);
        if let Some(t) = self.handshake_timeout {
            endpoint = endpoint.with_handshake_timeout(t);
        }
        endpoint
    }

    pub(crate) fn start_with(
        self,
        system: &SystemHandle,
        listener: Option<Listener>,
        simulated: bool,
    ) -> Result<Remote, RemoteError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let endpoint = self.endpoint(system);
        let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        // What other nodes are told to dial.
        let advertised = self.advertise.or(local_addr);
        let shared = Arc::new(Shared {
            system: system.clone(),
            runtime: system.tokio_handle().clone(),
            endpoint,
            limits: self.limits,
            config: self.config,
            encoders: self.encoders,
            actor_types: self.actor_types,
            stats: Arc::default(),
            advertised_addr: advertised,
            wire_name: system.node().name().to_string(),
            wire_address: advertised.map(|a| a.to_string()),
            simulated,
            exports: RwLock::new(Exports::default()),
            peers: Mutex::new(Peers::default()),
            shut: std::sync::atomic::AtomicBool::new(false),
            sim_dials: Mutex::new(Vec::new()),
            channels: Default::default(),
            #[cfg(feature = "faults")]
            cut_off: Mutex::new(Default::default()),
        });
        let accept_task = listener.map(|l| shared.runtime.spawn(accept_loop(shared.clone(), l)));
        if let (Some(addr), false) = (local_addr, simulated) {
            let node = system.node();
            lock(&IN_PROCESS_LISTENERS).insert((node.name().to_string(), node.incarnation()), addr);
        }
        Ok(Remote {
            shared,
            local_addr,
            accept_task,
        })
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: Listener) {
    loop {
        let incoming = match listener.accept().await {
            Ok(i) => i,
            // Out of file descriptors and the like: wait and go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        // Each handshake in a task of its own: a stalling peer holds up
        // only itself.
        tokio::spawn(async move {
            match incoming.establish().await {
                Ok(conn) => {
                    let _ = attach(&shared, conn, None);
                }
                Err(_) => {
                    shared
                        .stats
                        .handshakes_refused
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

/// Enters an established connection's node and starts its tasks;
/// `dialled`: the address this node dialled to reach it.
pub(crate) fn attach(
    shared: &Arc<Shared>,
    conn: Connection,
    dialled: Option<SocketAddr>,
) -> Option<Arc<Peer>> {
    let (stream, decoder, identity) = conn.into_parts();
    // Cut off (a test's fault): the stream closes here, after the
    // handshake, as a link that breaks at once would.
    #[cfg(feature = "faults")]
    if lock(&shared.cut_off).contains(&identity.node_name) {
        return None;
    }
    let node = NodeId::remote(&identity.node_name, dialled, identity.incarnation).ok()?;
    let link = shared.link_for(&node);
    // What waited for this node (one we cannot dial) goes out on this
    // connection.
    let peer = link
        .take_waiting()
        .unwrap_or_else(|| Peer::new(shared, link.clone()));
    peer.run(stream, decoder);
    link.install(&peer);
    if let Some(addr) = dialled {
        link.set_dial(addr);
        lock(&shared.peers).dialled.insert(addr, link);
    }
    Some(peer)
}

/// A system on the network. See the [crate docs](crate).
pub struct Remote {
    shared: Arc<Shared>,
    local_addr: Option<SocketAddr>,
    accept_task: Option<tokio::task::JoinHandle<()>>,
}

impl Remote {
    /// A builder for a node of cluster `cluster` with `security`: mutual
    /// TLS from the cluster's CA ([`Security::Tls`]), or plaintext bound to
    /// loopback ([`Security::PlaintextLoopbackOnly`], for benchmarks).
    pub fn builder(cluster: impl Into<String>, security: Security) -> RemoteBuilder {
        RemoteBuilder {
            cluster: cluster.into(),
            security,
            listen: None,
            advertise: None,
            limits: Limits::default(),
            config: Config::default(),
            encoders: Encoders::default(),
            actor_types: HashMap::new(),
            error: None,
            handshake_timeout: None,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The address it listens on, if it listens.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The address other nodes are told to dial: the one given to
    /// [`RemoteBuilder::advertise`], else the listen address.
    pub fn advertised_addr(&self) -> Option<SocketAddr> {
        self.shared.advertised_addr
    }

    /// The refusal and loss counters.
    pub fn stats(&self) -> &RemoteStats {
        &self.shared.stats
    }

    /// Publishes new certificate revocation lists (PEM `X509 CRL`
    /// sections, replacing those in use) without a restart: every
    /// handshake from now on checks them, in both directions, and every
    /// live connection whose peer they revoke is closed at once (what
    /// waited on it ends as for any lost connection: asks with
    /// `ConnectionLost`, monitors and links with `NoConnection`). Returns
    /// how many connections were closed. The revoked node's reconnects are
    /// refused from then on; the lists of the other nodes of the cluster
    /// must be reloaded too for them to refuse it.
    ///
    /// ```no_run
    /// # async fn example(remote: troubadour_remote::Remote) -> Result<(), Box<dyn std::error::Error>> {
    /// let crl = std::fs::read("/etc/cluster/revoked.pem")?;
    /// let closed = remote.reload_revocations(&crl)?;
    /// println!("{closed} connections to revoked nodes closed");
    /// # Ok(()) }
    /// ```
    pub fn reload_revocations(&self, revocation_lists: &[u8]) -> Result<usize, ConfigError> {
        let tls = self.shared.endpoint.tls().ok_or(ConfigError::NotTls)?;
        tls.reload_revocations(revocation_lists)?;
        let peers: Vec<Arc<Peer>> = lock(&self.shared.peers).all.clone();
        let mut closed = 0;
        for peer in peers {
            let chain = peer.certificates();
            if chain.is_empty() || peer.is_lost() {
                continue;
            }
            if let Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)) =
                tls.check_chain(&chain)
            {
                peer.lose_for("the peer's certificate was revoked".into());
                closed += 1;
            }
        }
        Ok(closed)
    }

    /// Cuts this node off from the nodes named `names`, as a partition
    /// would (feature `faults`, for tests of real processes): their
    /// connections close now, and every later one closes as soon as it is
    /// established, whichever side dialled, until
    /// [`heal_links`](Self::heal_links). The other side sees its links
    /// break and its dials fail, so a cut made on one side cuts the pair;
    /// cutting both sides makes the partition independent of who dials.
    /// Returns how many connections it closed.
    #[cfg(feature = "faults")]
    pub fn cut_links_to(&self, names: &[&str]) -> usize {
        lock(&self.shared.cut_off).extend(names.iter().map(|n| n.to_string()));
        let peers: Vec<Arc<Peer>> = lock(&self.shared.peers).all.clone();
        let mut closed = 0;
        for peer in peers {
            if !peer.is_lost() && names.contains(&peer.node.name()) {
                peer.lose_for("cut off by a test's fault switch".into());
                closed += 1;
            }
        }
        closed
    }

    /// Ends every cut [`cut_links_to`](Self::cut_links_to) made: links
    /// come back as the nodes dial each other again (feature `faults`).
    #[cfg(feature = "faults")]
    pub fn heal_links(&self) {
        lock(&self.shared.cut_off).clear();
    }

    /// Whether `M` was registered with this remote layer
    /// ([`RemoteBuilder::register`]): only then can an `M`, or a
    /// `Recipient<M>`, be sent to another node.
    pub fn is_registered<M: RemoteMessage>(&self) -> bool {
        self.shared
            .encoders
            .get(std::any::TypeId::of::<M>())
            .is_some()
    }

    /// The other nodes this one knows: their connection's state, and the
    /// bytes and frames that crossed it.
    pub fn peers(&self) -> Vec<PeerStatus> {
        self.shared.peer_statuses()
    }

    /// The counters and peers, as a handle an exporter can keep
    /// (`troubadour_observe::Observer::with_remote`).
    pub fn view(&self) -> RemoteView {
        RemoteView {
            shared: Arc::downgrade(&self.shared),
            stats: self.shared.stats.clone(),
        }
    }

    /// Makes `actor` reachable from other nodes under `name`, for the
    /// messages its [`RemoteActor::accepts`] lists.
    pub fn expose<A: RemoteActor>(
        &self,
        name: &str,
        actor: &ActorRef<A>,
    ) -> Result<(), RemoteError> {
        if !actor.is_alive() {
            return Err(RemoteError::Stopped);
        }
        if actor.id().node() != self.shared.system.node() {
            return Err(RemoteError::NotLocal);
        }
        let export = Arc::new(Export::of_actor(actor)?);
        let serial = actor.id().serial();
        let mut exports = self
            .shared
            .exports
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if exports.by_name.contains_key(name) {
            return Err(RemoteError::NameTaken(name.to_string()));
        }
        exports.by_name.insert(name.to_string(), serial);
        exports.by_serial.insert(serial, export);
        Ok(())
    }

    /// Removes the name; the actor is no longer reachable through it (nor,
    /// unless exposed under another name, at all). `false` if the name was
    /// not exposed.
    pub fn unexpose(&self, name: &str) -> bool {
        let mut exports = self
            .shared
            .exports
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let Some(serial) = exports.by_name.remove(name) else {
            return false;
        };
        if !exports.by_name.values().any(|s| *s == serial) {
            exports.by_serial.remove(&serial);
        }
        true
    }

    /// The actor the node at `addr` exposes under `name`, as an ordinary
    /// `ActorRef<A>`: `tell`, `ask`, `monitor`, `link`, `stop` work as for
    /// a local actor. Dials the node if this one has no connection to it
    /// yet; with TLS, its certificate must be valid for `addr`'s IP.
    pub async fn lookup<A: RemoteActor>(
        &self,
        addr: SocketAddr,
        name: &str,
    ) -> Result<ActorRef<A>, LookupError> {
        let peer = self.peer(addr).await.map_err(LookupError::Connect)?;
        lookup_on::<A>(&self.shared, &peer, name, self.shared.config.lookup_timeout).await
    }

    /// A handle that looks actors up on nodes already known by their
    /// [`NodeId`] (from a reference, membership, a handshake), for code
    /// that holds no `Remote`.
    pub fn node_lookup(&self) -> NodeLookup {
        NodeLookup {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Connects to the node listening at `addr` (or finds the connection
    /// up already) and says which node it is: name, address and
    /// incarnation. For bootstrapping from addresses (a cluster's seeds).
    pub async fn connect(&self, addr: SocketAddr) -> Result<NodeId, ConnectError> {
        Ok(self.peer(addr).await?.node.clone())
    }

    /// Whether the connection to the node at `addr` is encrypted (mutual
    /// TLS); `None` without one.
    pub fn is_tls(&self, addr: SocketAddr) -> Option<bool> {
        let link = lock(&self.shared.peers).dialled.get(&addr).cloned()?;
        link.live().map(|p| p.is_tls())
    }

    /// Closes every connection (their asks end with `ConnectionLost`,
    /// their monitors and links fire with `NoConnection`) and stops
    /// listening.
    pub fn shutdown(&self) {
        self.shared.shut.store(true, Ordering::Release);
        if let Some(t) = &self.accept_task {
            t.abort();
        }
        let peers: Vec<Arc<Peer>> = lock(&self.shared.peers).all.clone();
        for p in peers {
            p.close();
        }
        // A connection holds this node's shared state and its node's link
        // holds the connection: forget both, or neither is ever freed (nor
        // the system and its runtime behind them).
        let links: Vec<Arc<NodeLink>> = {
            let mut peers = lock(&self.shared.peers);
            peers.dialled.clear();
            let mut links: Vec<_> = peers.links.drain().collect();
            // In a fixed order, so a simulation replays.
            links.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            links.into_iter().map(|(_, link)| link).collect()
        };
        for link in links {
            link.forget_connection();
        }
        lock(&self.shared.sim_dials).clear();
    }

    async fn peer(&self, addr: SocketAddr) -> Result<Arc<Peer>, ConnectError> {
        dial(&self.shared, addr).await
    }
}

/// The connection to the node listening at `addr`: the one up, or a new one.
async fn dial(shared: &Arc<Shared>, addr: SocketAddr) -> Result<Arc<Peer>, ConnectError> {
    let known = lock(&shared.peers).dialled.get(&addr).cloned();
    if let Some(peer) = known.and_then(|link| link.current()) {
        return Ok(peer);
    }
    let server_name = addr.ip().to_string();
    let conn = shared.endpoint.connect(addr, &server_name).await?;
    attach(shared, conn, Some(addr)).ok_or(ConnectError::Closed)
}

/// Looks actors up on nodes known by their [`NodeId`]. See
/// [`Remote::node_lookup`].
#[derive(Clone)]
pub struct NodeLookup {
    shared: std::sync::Weak<Shared>,
}

impl NodeLookup {
    /// Connects to the node listening at `addr` (a seed a discovery found)
    /// and says which node it is, as [`Remote::connect`] does.
    pub async fn connect(&self, addr: SocketAddr) -> Result<NodeId, ConnectError> {
        let shared = self.shared.upgrade().ok_or(ConnectError::Closed)?;
        Ok(dial(&shared, addr).await?.node.clone())
    }

    /// The actor `node` exposes under `name`, as an ordinary `ActorRef<A>`.
    /// Dials the node (at its address) if no connection is up. Ends with
    /// `NoAnswer` if the connection is lost first, or (on real sockets)
    /// after the lookup timeout.
    pub async fn lookup<A: RemoteActor>(
        &self,
        node: &NodeId,
        name: &str,
    ) -> Result<ActorRef<A>, LookupError> {
        let shared = self
            .shared
            .upgrade()
            .ok_or_else(|| LookupError::NoAnswer("this node's remote layer is gone".into()))?;
        if shared
            .endpoint
            .declared_down()
            .contains(node.name(), node.incarnation())
        {
            return Err(LookupError::NoAnswer(format!(
                "node {node} was declared down"
            )));
        }
        let link = shared.link_for(node);
        if let Some(addr) = address_of(node) {
            link.set_dial(addr);
        }
        let peer = link.current().ok_or_else(|| {
            LookupError::NoAnswer(format!("node {node} is down or its address is unknown"))
        })?;
        // On a simulated network, time is virtual: the lookup ends when
        // the answer comes or the connection is lost.
        let timeout = if shared.simulated {
            Duration::MAX
        } else {
            shared.config.lookup_timeout
        };
        lookup_on::<A>(&shared, &peer, name, timeout).await
    }
}

/// Asks the node at the other end of `peer` for the actor it exposes as
/// `name`, and makes its proxy.
async fn lookup_on<A: RemoteActor>(
    shared: &Shared,
    peer: &Arc<Peer>,
    name: &str,
    timeout: Duration,
) -> Result<ActorRef<A>, LookupError> {
    let serial = peer
        .lookup(name, A::NAME, timeout)
        .await
        .map_err(|reason| {
            if peer.is_lost() || reason.starts_with("no answer") {
                LookupError::NoAnswer(reason)
            } else {
                LookupError::NotFound(reason)
            }
        })?;
    let id = troubadour::ActorId::on(&peer.node, serial).ok_or_else(|| {
        LookupError::NotFound(format!(
            "the node answered with an invalid actor number {serial}"
        ))
    })?;
    Ok(proxy::<A>(&shared.system, id, peer.route()))
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.shutdown();
        let node = self.shared.system.node();
        lock(&IN_PROCESS_LISTENERS).remove(&(node.name().to_string(), node.incarnation()));
    }
}

/// Where the nodes of this process listen, by (name, incarnation). A
/// `NodeId` is one per node in the whole process, and a node of this
/// process has the one its system made, which names no address; several
/// nodes in one process (tests, examples, a process hosting two systems)
/// reach each other through sockets all the same, so a node found by its
/// `NodeId` alone (a cluster member) is dialled at the address found here.
static IN_PROCESS_LISTENERS: std::sync::LazyLock<Mutex<HashMap<(String, u64), SocketAddr>>> =
    std::sync::LazyLock::new(Default::default);

/// Where `node` listens: the address it names, or, for a node of this
/// process, the one its remote layer listens on.
fn address_of(node: &NodeId) -> Option<SocketAddr> {
    node.address().or_else(|| {
        lock(&IN_PROCESS_LISTENERS)
            .get(&(node.name().to_string(), node.incarnation()))
            .copied()
    })
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("node", &self.shared.system.node())
            .field("local_addr", &self.local_addr)
            .finish()
    }
}
