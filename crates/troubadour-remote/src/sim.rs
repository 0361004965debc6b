//! The hooks a simulated network drives (feature `simulation`; the test
//! kit's `SimNetwork` is the user): a [`Remote`] with no sockets, whose
//! connections are pairs of [`SimConnection`]s. The simulation moves the
//! bytes each end queued to the other end, when and if it decides, on
//! its own thread and its own (virtual) clock, so a seed replays a run.
//!
//! Everything above the bytes is the real remote layer: encoding into the
//! connection's buffers, dispatch, asks and their answers, links and
//! monitors, references in messages, and what losing a connection ends.
//! What is not simulated: TLS and the handshake (tested on real sockets),
//! heartbeats (the simulation decides when a silent connection counts as
//! lost) and reconnecting (a lost simulated connection stays lost).

use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::task::{Context, Poll};
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

    /// The actor `other` exposes as `name`, reached over `end` (this
    /// node's end of a connection to `other`). Answered at once, as a
    /// name service would: the simulation is about messages, not lookups.
    pub fn lookup_simulated<A: RemoteActor>(
        &self,
        end: &SimConnection,
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
        let id = troubadour::ActorId::on(&end.peer.node, serial)
            .ok_or_else(|| LookupError::NotFound("an invalid actor number".into()))?;
        Ok(proxy::<A>(&self.shared().system, id, end.peer.route()))
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
            decoder.feed(bytes);
            loop {
                match decoder.decode() {
                    Ok(Some(frame)) => self.peer.dispatch_frame(frame),
                    Ok(None) => return None,
                    Err(e) => return Some(e),
                }
            }
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
