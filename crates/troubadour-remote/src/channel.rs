//! Control channels: the control lane, opened to extension crates. A
//! cluster's membership gossip, a shard's handoff: traffic that must not
//! wait behind user messages and that is not addressed to an actor. Each
//! channel has a name; what is sent on it reaches the handler the other
//! node registered under the same name, on the connection's reader (so a
//! handler hands the bytes on, to an actor for example, and returns).
//!
//! Channels carry bytes: the extension picks its own encoding and checks
//! what it decodes, as anything from the network must be. A frame for a
//! channel the receiving node has not opened is counted
//! (`RemoteStats::unknown_channel`) and dropped; the connection stays up.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock, Weak};
use troubadour::NodeId;

use crate::codec::type_id;
use crate::node::{Remote, RemoteError, Shared};

/// What a channel's handler is called with: the sending node and the
/// bytes it sent.
pub(crate) type ChannelHandler = Arc<dyn Fn(&NodeId, &[u8]) + Send + Sync>;

/// The channels a node opened, by the id of their name.
#[derive(Default)]
pub(crate) struct Channels(RwLock<HashMap<u64, ChannelHandler>>);

impl Channels {
    pub(crate) fn get(&self, id: u64) -> Option<ChannelHandler> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
}

impl Remote {
    /// Opens the control channel `name`: the control lane, opened to
    /// extension crates (a cluster's membership gossip, a shard's handoff:
    /// traffic that must not wait behind user messages and is not
    /// addressed to an actor). `on_receive` is called with every message
    /// other nodes send on the channel of the same name, on the
    /// connection's reader thread, so it must not block: hand the bytes on
    /// (to an actor) and return. Channels carry bytes; check what you
    /// decode, as anything from the network. A frame for a channel this
    /// node has not opened is counted (`RemoteStats::unknown_channel`) and
    /// dropped, and the connection stays up. Names are global: prefix
    /// them with your crate's name (`troubadour-cluster` uses
    /// `troubadour.cluster.`).
    ///
    /// Refused with [`RemoteError::NameTaken`] if this node opened `name`
    /// already.
    pub fn control_channel(
        &self,
        name: &'static str,
        on_receive: impl Fn(&NodeId, &[u8]) + Send + Sync + 'static,
    ) -> Result<ControlChannel, RemoteError> {
        let id = type_id(name);
        let mut channels = self
            .shared()
            .channels
            .0
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if channels.contains_key(&id) {
            return Err(RemoteError::NameTaken(name.to_string()));
        }
        channels.insert(id, Arc::new(on_receive));
        Ok(ControlChannel {
            shared: Arc::downgrade(self.shared()),
            id,
            name,
        })
    }
}

/// The sending side of a control channel. See [`Remote::control_channel`].
#[derive(Clone)]
pub struct ControlChannel {
    shared: Weak<Shared>,
    id: u64,
    name: &'static str,
}

impl ControlChannel {
    /// Sends `payload` to the channel of the same name on `to`, on the
    /// control lane, ahead of any user message queued for that node. Dials
    /// the node (at its address) if no connection is up; like a `tell`,
    /// it does not wait and gives no receipt: a connection lost before it
    /// went out loses it.
    pub fn send(&self, to: &NodeId, payload: &[u8]) -> Result<(), ChannelError> {
        self.send_at(to, None, payload)
    }

    /// [`send`](Self::send), telling the remote layer where `to` listens
    /// (as a membership protocol knows it): the node can then be dialled,
    /// and reached by lookups, even when its `NodeId` carries no address
    /// (it was first met on a connection it made).
    pub fn send_at(
        &self,
        to: &NodeId,
        listens_at: Option<std::net::SocketAddr>,
        payload: &[u8],
    ) -> Result<(), ChannelError> {
        let shared = self.shared.upgrade().ok_or(ChannelError::Closed)?;
        if shared.is_shut() {
            return Err(ChannelError::Closed);
        }
        if shared
            .endpoint
            .declared_down()
            .contains(to.name(), to.incarnation())
        {
            return Err(ChannelError::NodeDown(to.clone()));
        }
        let link = shared.link_for(to);
        if let Some(addr) = listens_at.or(to.address()) {
            link.set_dial(addr);
        }
        let peer = link
            .current()
            .ok_or_else(|| ChannelError::NodeDown(to.clone()))?;
        peer.queue_extension(self.id, payload);
        Ok(())
    }

    /// The channel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl fmt::Debug for ControlChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlChannel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why a control channel could not send.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChannelError {
    /// The node was declared down (or cannot be reached: its address is
    /// unknown and it has no connection). A new incarnation of it is
    /// another node.
    NodeDown(NodeId),
    /// This node's remote layer was shut down.
    Closed,
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::NodeDown(node) => write!(
                f,
                "node {node} is down or unreachable: send to its new incarnation, if it restarted"
            ),
            ChannelError::Closed => write!(
                f,
                "this node's remote layer was shut down; nothing can be sent"
            ),
        }
    }
}

impl std::error::Error for ChannelError {}
