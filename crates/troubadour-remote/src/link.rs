//! One other node as this node knows it, across its connections: the
//! [`Route`] every proxy of its actors sends through, which survives a lost
//! connection and reconnects.
//!
//! A connection is a [`Peer`]; when it is lost, everything waiting on it
//! ends at once (asks with `ConnectionLost`, monitors and links with
//! `NoConnection`, as Erlang does on a lost connection). The node is not
//! gone for that: the next send to one of its actors opens a new
//! connection to the address it listens on (known from dialling it, or
//! from its `Hello`), after a backoff that doubles with every failed
//! attempt (100 ms up to 5 s). Messages sent meanwhile wait in the new
//! connection's bounded buffer.
//!
//! The node is declared down, for good, when a reconnect finds another
//! incarnation at its address (it restarted: a new node) or when attempts
//! have failed for longer than `node_down_after` (30 s by default, on the
//! system's clock, so virtual time in a simulation; never, where the layer
//! above decides who is up: `RemoteBuilder::node_down_only_when_replaced`).
//!
//! On a simulated network the simulation dials: a new connection goes on
//! the list it takes (`Shared::sim_dials`) with its backoff, and the
//! simulation connects it or fails it on its virtual clock.
//!
//! A node that listens nowhere (it only dials, like a client process)
//! cannot be dialled back. What is sent to its actors while it has no
//! connection waits in a connection that has no socket yet, and the node's
//! next connection to this one (its handshake names the same incarnation)
//! takes it over, buffer and all. If none comes within `node_down_after`
//! of that first send, the node is declared down as above. Its
//! incarnation goes into the endpoint's `DeclaredDown` set, so its
//! handshakes are refused from then on, and its proxies refuse sends as
//! stopped actors do (dead letters).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use troubadour::remote::{Outgoing, OutgoingSignal, Refusal, Route};
use troubadour::{ActorId, ExitReason, NodeId};

use crate::node::Shared;
use crate::peer::Peer;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(crate) struct NodeLink {
    pub(crate) node: NodeId,
    shared: Weak<Shared>,
    state: Mutex<LinkState>,
    down: AtomicBool,
    /// What crossed all its connections so far.
    pub(crate) traffic: Traffic,
}

/// Bytes and frames to and from one node, across its connections. The
/// sending side's counters and the receiving side's are on their own cache
/// lines: a node's reader thread and the threads that write to it do not
/// make each other's counters bounce.
#[derive(Default)]
pub(crate) struct Traffic {
    pub(crate) sent: Counted,
    pub(crate) received: Counted,
    /// Connections established with the node.
    pub(crate) connections: AtomicU64,
}

/// One direction's bytes and frames.
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct Counted {
    pub(crate) bytes: AtomicU64,
    pub(crate) frames: AtomicU64,
}

impl Counted {
    pub(crate) fn add(&self, bytes: u64, frames: u64) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        if frames > 0 {
            self.frames.fetch_add(frames, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct LinkState {
    /// The connection in use: established, or being dialled.
    current: Option<Arc<Peer>>,
    /// Where the node listens, if known.
    dial: Option<SocketAddr>,
    /// Consecutive failed attempts, and since when.
    failures: u32,
    failing_since: Option<std::time::Instant>,
    /// `current` has no socket yet: it waits for the node, which cannot
    /// be dialled, to connect to us again.
    waiting: bool,
}

impl NodeLink {
    pub(crate) fn new(node: NodeId, shared: &Arc<Shared>) -> Arc<NodeLink> {
        Arc::new(NodeLink {
            node,
            shared: Arc::downgrade(shared),
            state: Mutex::new(LinkState::default()),
            down: AtomicBool::new(false),
            traffic: Traffic::default(),
        })
    }

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    pub(crate) fn dial_addr(&self) -> Option<SocketAddr> {
        lock(&self.state).dial
    }

    /// Learns where the node listens (first answer wins).
    pub(crate) fn set_dial(&self, addr: SocketAddr) {
        lock(&self.state).dial.get_or_insert(addr);
    }

    /// Makes an established connection the one in use, unless a live one
    /// is (then both stay up and this one only serves what the peer sends
    /// on it).
    pub(crate) fn install(&self, peer: &Arc<Peer>) {
        let mut s = lock(&self.state);
        if s.current.as_ref().is_none_or(|c| c.is_lost()) {
            s.current = Some(peer.clone());
        }
    }

    /// The connection to send on: the live one, or a new one being dialled
    /// (after the backoff); `None` when the node is down or its address is
    /// unknown.
    pub(crate) fn current(self: &Arc<Self>) -> Option<Arc<Peer>> {
        if self.is_down() {
            return None;
        }
        let shared = self.shared.upgrade()?;
        let mut s = lock(&self.state);
        if let Some(c) = &s.current {
            if !c.is_lost() {
                return Some(c.clone());
            }
        }
        if shared.is_shut() {
            return None;
        }
        let backoff = match s.failures {
            0 => Duration::ZERO,
            n => (FIRST_BACKOFF * 2u32.saturating_pow(n - 1)).min(MAX_BACKOFF),
        };
        if shared.simulated {
            // The simulation dials: it takes the connection from the list,
            // and connects it or fails it, on its virtual clock.
            let peer = Peer::new(&shared, self.clone());
            s.current = Some(peer.clone());
            drop(s);
            lock(&shared.sim_dials).push((peer.clone(), backoff));
            return Some(peer);
        }
        let Some(addr) = s.dial else {
            let peer = Peer::new(&shared, self.clone());
            s.current = Some(peer.clone());
            s.waiting = true;
            drop(s);
            self.expect_redial(&shared, &peer);
            return Some(peer);
        };
        let peer = Peer::new(&shared, self.clone());
        s.current = Some(peer.clone());
        drop(s);
        peer.dial(addr, backoff);
        Some(peer)
    }

    /// Declares the node down if `peer` still waits for it after
    /// `node_down_after`.
    fn expect_redial(self: &Arc<Self>, shared: &Arc<Shared>, peer: &Arc<Peer>) {
        let link = self.clone();
        let peer = peer.clone();
        let Some(after) = shared.config.node_down_after else {
            return;
        };
        shared.runtime.spawn(async move {
            tokio::time::sleep(after).await;
            let still_waiting = {
                let s = lock(&link.state);
                s.waiting && s.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &peer))
            };
            if still_waiting {
                link.declare_down();
            }
        });
    }

    /// The connection waiting for this node to connect again, if one is
    /// (see the module docs): an incoming connection of the node takes it
    /// over.
    pub(crate) fn take_waiting(&self) -> Option<Arc<Peer>> {
        let mut s = lock(&self.state);
        if !s.waiting {
            return None;
        }
        s.waiting = false;
        s.current.clone().filter(|c| !c.is_lost())
    }

    /// Whether sends to the node wait for it to connect again.
    fn is_waiting(&self) -> bool {
        lock(&self.state).waiting
    }

    /// Whether the node is on a simulated network, which can always try
    /// to dial it.
    fn is_simulated(&self) -> bool {
        self.shared.upgrade().is_some_and(|s| s.simulated)
    }

    /// A connection was established: the failure count starts over.
    pub(crate) fn connected(&self) {
        self.traffic.connections.fetch_add(1, Ordering::Relaxed);
        let mut s = lock(&self.state);
        s.failures = 0;
        s.failing_since = None;
    }

    /// A dial failed; past `node_down_after` of failures the node is
    /// declared down.
    pub(crate) fn failed(&self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        // The system's clock: virtual in a simulation, so the simulated
        // network decides when `node_down_after` has passed.
        let now = shared.system.now();
        let give_up = {
            let mut s = lock(&self.state);
            s.failures += 1;
            let since = *s.failing_since.get_or_insert(now);
            shared
                .config
                .node_down_after
                .is_some_and(|after| now.saturating_duration_since(since) >= after)
        };
        if give_up {
            self.declare_down();
        }
    }

    /// The node is gone for good (see the module docs).
    pub(crate) fn declare_down(&self) {
        if self.down.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            shared
                .endpoint
                .declared_down()
                .declare(self.node.name(), self.node.incarnation());
            shared.forget_link(self);
        }
        let current = lock(&self.state).current.take();
        if let Some(peer) = current {
            peer.close();
        }
    }

    /// Drops the connection (the node's remote layer shut down).
    pub(crate) fn forget_connection(&self) {
        let current = lock(&self.state).current.take();
        drop(current);
    }

    /// The connection in use, if one is, without dialling.
    pub(crate) fn live(&self) -> Option<Arc<Peer>> {
        lock(&self.state)
            .current
            .as_ref()
            .filter(|p| !p.is_lost())
            .cloned()
    }

    /// What a dashboard shows of the node (`peers.rs`).
    pub(crate) fn status(&self) -> crate::peers::PeerStatus {
        use crate::peers::{PeerState, PeerStatus};
        let (state, failed_attempts, tls) = {
            let s = lock(&self.state);
            let live = s.current.as_ref().filter(|p| !p.is_lost());
            let state = if self.is_down() {
                PeerState::Down
            } else if live.is_some_and(|p| p.is_running()) {
                PeerState::Connected
            } else if s.waiting {
                PeerState::WaitingForNode
            } else if live.is_some() {
                PeerState::Connecting
            } else {
                PeerState::Disconnected
            };
            (state, s.failures, live.is_some_and(|p| p.is_tls()))
        };
        let t = &self.traffic;
        PeerStatus {
            node: self.node.name().to_string(),
            incarnation: self.node.incarnation(),
            address: self.dial_addr(),
            state,
            tls,
            failed_attempts,
            connections: t.connections.load(Ordering::Relaxed),
            bytes_sent: t.sent.bytes.load(Ordering::Relaxed),
            bytes_received: t.received.bytes.load(Ordering::Relaxed),
            frames_sent: t.sent.frames.load(Ordering::Relaxed),
            frames_received: t.received.frames.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn route(self: &Arc<Self>) -> Arc<dyn Route> {
        Arc::new(NodeRoute(self.clone()))
    }
}

/// The route of every proxy for an actor of one node.
struct NodeRoute(Arc<NodeLink>);

impl Route for NodeRoute {
    fn send(&self, message: &mut Outgoing<'_>) -> Result<(), Refusal> {
        match self.0.current() {
            Some(peer) => peer.send_message(message),
            None => Err(Refusal::Stopped),
        }
    }

    fn signal(&self, to: ActorId, signal: OutgoingSignal) {
        match self.0.current() {
            Some(peer) => peer.send_signal(to, signal),
            None => match signal {
                OutgoingSignal::Link(local) => local.exit(to, ExitReason::NoConnection),
                OutgoingSignal::Monitor(w) => w.notify(to, ExitReason::NoConnection),
                _ => {}
            },
        }
    }

    fn is_alive(&self, _: ActorId) -> bool {
        !self.0.is_down()
            && (self.0.live().is_some()
                || self.0.dial_addr().is_some()
                || self.0.is_waiting()
                || self.0.is_simulated())
    }

    fn room(&self, _: ActorId) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if let Some(peer) = self.0.live() {
                peer.room().await;
            }
        })
    }
}
