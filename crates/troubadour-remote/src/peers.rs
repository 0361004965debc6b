//! The other nodes as this one sees them: their connection's state and
//! what crossed it, for dashboards and metrics (`troubadour-observe`).
//!
//! Reading costs one lock per known node and a few relaxed loads; the
//! counting costs the connection a relaxed add or two per read and per
//! write, the frames sent being counted under the lock their encoding
//! holds anyway.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use crate::node::{RemoteStats, Shared};

/// The state of the connection to another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerState {
    /// A connection is up.
    Connected,
    /// A connection is being dialled (after a backoff when earlier
    /// attempts failed: see [`PeerStatus::failed_attempts`]).
    Connecting,
    /// The node cannot be dialled (it listens nowhere): what is sent to it
    /// waits for it to connect again.
    WaitingForNode,
    /// The last connection was lost; the next send dials again.
    Disconnected,
    /// The node is gone for good: it restarted as another incarnation, or
    /// stayed unreachable past `node_down_after`.
    Down,
}

impl PeerState {
    /// Every state, in the order above (for a metric with one series per
    /// state).
    pub const ALL: [PeerState; 5] = [
        PeerState::Connected,
        PeerState::Connecting,
        PeerState::WaitingForNode,
        PeerState::Disconnected,
        PeerState::Down,
    ];

    /// The state in `snake_case`, as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerState::Connected => "connected",
            PeerState::Connecting => "connecting",
            PeerState::WaitingForNode => "waiting_for_node",
            PeerState::Disconnected => "disconnected",
            PeerState::Down => "down",
        }
    }
}

impl std::fmt::Display for PeerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Another node this one knows, with what crossed all its connections
/// since this node first heard of it.
///
/// Bytes are the frames' bytes as the connection's stream took or gave
/// them (before TLS encryption, after decryption; the handshake's own
/// frames are not counted); frames as they were handed to the writer or
/// decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStatus {
    /// The node's name.
    pub node: String,
    /// Its incarnation (a restarted node is another one).
    pub incarnation: u64,
    /// Where it listens, if known.
    pub address: Option<SocketAddr>,
    /// Its connection's state.
    pub state: PeerState,
    /// Whether the live connection is mutual TLS.
    pub tls: bool,
    /// Consecutive failed attempts to dial it.
    pub failed_attempts: u32,
    /// Connections established with it.
    pub connections: u64,
    /// Bytes written to it.
    pub bytes_sent: u64,
    /// Bytes read from it.
    pub bytes_received: u64,
    /// Frames sent to it.
    pub frames_sent: u64,
    /// Frames received from it.
    pub frames_received: u64,
}

/// A handle on a [`Remote`](crate::Remote)'s counters and peers that an
/// exporter can keep (`troubadour_observe::Observer::with_remote`). It does
/// not keep the remote layer alive: after a shutdown it lists no peers.
///
/// ```no_run
/// # async fn f(remote: troubadour_remote::Remote) {
/// let view = remote.view();
/// for peer in view.peers() {
///     println!("{} {} sent {} bytes", peer.node, peer.state, peer.bytes_sent);
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct RemoteView {
    pub(crate) shared: Weak<Shared>,
    pub(crate) stats: Arc<RemoteStats>,
}

impl RemoteView {
    /// The refusal and loss counters.
    pub fn stats(&self) -> &RemoteStats {
        &self.stats
    }

    /// The nodes this one knows, by name then incarnation. A node declared
    /// down leaves the list (its connection's loss is counted in
    /// [`RemoteStats::connections_lost`]).
    pub fn peers(&self) -> Vec<PeerStatus> {
        self.shared
            .upgrade()
            .map(|shared| shared.peer_statuses())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for RemoteView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteView")
            .field("peers", &self.peers().len())
            .finish_non_exhaustive()
    }
}
