//! The hooks a simulated network drives (feature `simulation`; the test
//! kit's `SimNetwork` is the user): a [`Remote`] with no sockets, whose
//! connections are pairs of [`SimConnection`]s. The simulation moves the
//! bytes each end queued to the other end, when and if it decides, on
//! its own thread and its own (virtual) clock, so a seed replays a run.
//!
//! Everything above the bytes is the real remote layer: encoding into the
//! connection's buffers, dispatch, asks and their answers, links and
//! monitors, references in messages, and what losing a connection ends.
//! Reconnecting is the real layer's too: after a loss, the next send to
//! the node makes a new connection and puts it on a list the simulation
//! takes ([`Remote::take_simulated_dials`]), with the backoff the real
//! layer would wait. The simulation then connects it
//! ([`SimDial::connect`], which finds a restarted node's new incarnation
//! as a real handshake would and declares the old one down) or fails it
//! ([`SimDial::fail`]: the node is declared down once dials have failed for
//! `node_down_after` of virtual time).
//!
//! What is not simulated: TLS and the handshake's bytes (tested on real
//! sockets), and heartbeats (the simulation decides when a silent
//! connection counts as lost).

use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use troubadour::remote::{proxy, with_ref_codec};
use troubadour::{ActorRef, NodeId, SystemHandle};

use crate::messages::RemoteActor;
use crate::node::{LookupError, Remote, RemoteBuilder, RemoteError};
use crate::peer::Peer;

impl RemoteBuilder {
    /// Starts `system`'s remote layer with no sockets, for a simulated
    /// network: connections are made with [`Remote::connect_simulated`].
    pub fn start_simulated(self, system: &SystemHandle) -> Result<Remote, RemoteError> {
        self.start_with(system, None, true)
    }
}

impl Remote {
    /// A simulated connection between this node and `other`: this node's
    /// end first. Nothing travels until the simulation moves it.
    pub fn connect_simulated(&self, other: &Remote) -> (SimConnection, SimConnection) {
        let a = self.shared().connect_simulated(other.shared());
        let b = other.shared().connect_simulated(self.shared());
        (SimConnection { peer: a }, SimConnection { peer: b })
    }

    /// The connections this node wants dialled since the last call (a
    /// send found its node's connection lost), in the order wanted.
    pub fn take_simulated_dials(&self) -> Vec<SimDial> {
        std::mem::take(
            &mut *self
                .shared()
                .sim_dials
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
        .into_iter()
        .map(|(peer, backoff)| SimDial { peer, backoff })
        .collect()
    }

    /// The actor `other` exposes as `name`, as a reference on this node.
    /// Answered at once, as a name service would: the simulation is about
    /// messages, not lookups. No connection is needed: the first send
    /// asks for one if none is up.
    pub fn lookup_simulated<A: RemoteActor>(
        &self,
        other: &Remote,
        name: &str,
    ) -> Result<ActorRef<A>, LookupError> {
        let (serial, export) = other
            .shared()
            .export_named(name)
            .ok_or_else(|| LookupError::NotFound(format!("nothing is exposed as {name:?}")))?;
        if export.actor_type != Some(A::NAME) {
            return Err(LookupError::NotFound(format!(
                "{name:?} is not a {}",
                A::NAME
            )));
        }
        let node = other.shared().system.node();
        if self
            .shared()
            .endpoint
            .declared_down()
            .contains(node.name(), node.incarnation())
        {
            return Err(LookupError::NoAnswer(format!(
                "node {} (incarnation {:#x}) was declared down",
                node.name(),
                node.incarnation()
            )));
        }
        let link = self.shared().link_for(&node);
        let id = troubadour::ActorId::on(&link.node, serial)
            .ok_or_else(|| LookupError::NotFound("an invalid actor number".into()))?;
        Ok(proxy::<A>(&self.shared().system, id, link.route()))
    }
}

/// One end of a simulated connection. See the [module docs](self).
pub struct SimConnection {
    peer: Arc<Peer>,
}

impl SimConnection {
    /// The node at the other end.
    pub fn peer_node(&self) -> NodeId {
        self.peer.node.clone()
    }

    /// The bytes this end queued since the last call (control frames
    /// first, as the real writer sends them), or `None`.
    pub fn take_outbound(&self) -> Option<Bytes> {
        let mut out = BytesMut::new();
        self.peer.take_outbound(&mut out);
        (!out.is_empty()).then(|| out.freeze())
    }

    /// Bytes from the other end arrive here: decoded and dispatched, as the
    /// real reader does. A framing error loses the connection.
    pub fn deliver(&self, bytes: &[u8]) {
        let Some(decoder) = &self.peer.sim_decoder else {
            return;
        };
        let codec = self.peer.codec();
        let failed = with_ref_codec(&codec, || {
            let mut decoder = decoder.lock().unwrap_or_else(|p| p.into_inner());
            self.peer.link.traffic.received.add(bytes.len() as u64, 0);
            decoder.feed(bytes);
            let mut frames = 0;
            let framing = loop {
                match decoder.decode() {
                    Ok(Some(frame)) => {
                        frames += 1;
                        self.peer.dispatch_frame(frame);
                    }
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            self.peer.link.traffic.received.add(0, frames);
            framing
        });
        if let Some(e) = failed {
            self.peer.lose_for(format!("framing error: {e}"));
        }
    }

    /// Polls the answers to incoming asks (each awaits a local actor's
    /// reply); returns how many are still waiting.
    pub fn poll_answers(&self, cx: &mut Context<'_>) -> usize {
        let Some(answers) = &self.peer.answers else {
            return 0;
        };
        let mut taken = std::mem::take(&mut *answers.lock().unwrap_or_else(|p| p.into_inner()));
        taken.retain_mut(|f| f.as_mut().poll(cx) == Poll::Pending);
        let mut answers = answers.lock().unwrap_or_else(|p| p.into_inner());
        // Answers added while polling stay behind the older ones.
        taken.append(&mut answers);
        *answers = taken;
        answers.len()
    }

    /// The connection is lost (a partition outlasted the heartbeat
    /// timeout, or the other node crashed): what waits on it ends.
    pub fn lose(&self, reason: &str) {
        self.peer.lose_for(reason.to_string());
    }

    /// Whether it is lost.
    pub fn is_lost(&self) -> bool {
        self.peer.is_lost()
    }
}

/// A connection a node wants dialled (see the [module docs](self)): what
/// is sent to the node meanwhile waits in it.
pub struct SimDial {
    peer: Arc<Peer>,
    backoff: Duration,
}

/// Why a simulated dial did not connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimDialRefused {
    /// Another incarnation of the node answered: it restarted, and the one
    /// dialled is declared down for good.
    NodeRestarted,
    /// The node dialled had declared the dialling node down: it never
    /// accepts that incarnation again.
    DeclaredDown,
    /// The connection was closed before the dial (a shutdown).
    Closed,
}

impl SimDial {
    /// The node to dial (name and incarnation).
    pub fn target(&self) -> NodeId {
        self.peer.node.clone()
    }

    /// How long the real layer would wait before this attempt (it doubles
    /// with each failed one).
    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    /// Connects to `other`, the node now at the target's place: the
    /// dialling node's end first. Refused, as a real handshake would be, if
    /// `other` is another incarnation or has declared the dialling node
    /// down.
    pub fn connect(self, other: &Remote) -> Result<(SimConnection, SimConnection), SimDialRefused> {
        if self.peer.is_lost() {
            return Err(SimDialRefused::Closed);
        }
        let theirs = other.shared();
        let mine = &self.peer.shared;
        if theirs.system.node().incarnation() != self.peer.node.incarnation() {
            self.peer.link.declare_down();
            self.peer
                .lose_for("the node restarted: another incarnation answered".into());
            return Err(SimDialRefused::NodeRestarted);
        }
        let me = mine.system.node();
        if theirs
            .endpoint
            .declared_down()
            .contains(me.name(), me.incarnation())
        {
            self.peer
                .lose_for("the node refused this incarnation, which it declared down".into());
            return Err(SimDialRefused::DeclaredDown);
        }
        self.peer.established();
        let accepted = theirs.connect_simulated(mine);
        Ok((
            SimConnection { peer: self.peer },
            SimConnection { peer: accepted },
        ))
    }

    /// The dial failed (the node is unreachable or gone): what waited in
    /// the connection ends as on a lost one, and the failure counts
    /// towards declaring the node down.
    pub fn fail(self, reason: &str) {
        self.peer.link.failed();
        self.peer.lose_for(format!("dialling failed: {reason}"));
    }
}
