//! One kind of actor across the nodes: how many are alive on each node,
//! how busy they are, and the busiest of them, for the dashboard's kind
//! view ("where are my `Vehicle`s, and which node works hardest?").
//!
//! This node answers from its own table; with the remote layer (feature
//! `remote`, `Observer::with_remote`) it also asks every node it is
//! connected to, over the control channel `troubadour.observe.kind`, and
//! waits for their answers up to [`ASK_TIMEOUT`]: a node that does not
//! answer (it has no observer, or is slow) is listed as unanswered, never
//! waited for longer. Requests and answers are JSON, checked as anything
//! from the network: a malformed one is dropped.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use troubadour::ActorSample;

use crate::observer::{Observer, Shared};

/// How long the other nodes' answers are waited for.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Busiest actors listed per node, at most.
pub const MAX_ACTORS: usize = 50;

/// One kind on every node that answered.
#[derive(Clone, Debug, Serialize)]
pub struct KindAcrossNodes {
    /// The kind's full type name.
    pub kind: String,
    /// This node first, then the others by name.
    pub nodes: Vec<KindOnNode>,
    /// Nodes asked that did not answer within [`ASK_TIMEOUT`].
    pub unanswered: Vec<String>,
}

/// One kind on one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindOnNode {
    /// The node.
    pub node: String,
    /// Whether it is the node that was asked first.
    #[serde(default)]
    pub here: bool,
    /// Actors of the kind alive there.
    pub alive: u64,
    /// Their messages handled per second, summed, over the node's last
    /// sample interval.
    pub rate: f64,
    /// Messages they handled, summed.
    pub handled: u64,
    /// The busiest of them, busiest first.
    pub actors: Vec<KindActor>,
}

/// One actor in a [`KindOnNode`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindActor {
    /// How its id prints (`<name.serial>`).
    pub label: String,
    /// Its serial on its node.
    pub id: u64,
    /// Its registered name, if any.
    pub name: Option<String>,
    /// Messages handled.
    pub handled: u64,
    /// Messages per second over the node's last interval.
    pub rate: f64,
    /// Sampled mailbox depth.
    pub mailbox_depth: u32,
    /// Restarts.
    pub restarts: u32,
}

impl Shared {
    /// The actors of `kind` on this node: counts, and the `limit` busiest.
    pub(crate) fn kind_here(&self, kind: &str, limit: usize) -> KindOnNode {
        self.touch();
        let mut samples: Vec<ActorSample> = Vec::new();
        self.system.for_each_actor(|a| {
            if a.kind == kind {
                samples.push(a);
            }
        });
        let rates = self.rates_of(&samples);
        let alive = samples.len() as u64;
        let handled = samples.iter().map(|s| s.messages_handled).sum();
        let rate = rates.iter().sum();
        let rated = samples.into_iter().zip(rates).collect();
        let rated = crate::observer::busiest(rated, limit.min(MAX_ACTORS));
        let named = self.names(!rated.is_empty());
        KindOnNode {
            node: self.system.node().name().to_string(),
            here: false,
            alive,
            rate,
            handled,
            actors: rated
                .into_iter()
                .map(|(s, rate)| KindActor {
                    label: s.id.to_string(),
                    id: s.id.serial(),
                    name: named.get(&s.id).cloned(),
                    handled: s.messages_handled,
                    rate,
                    mailbox_depth: s.mailbox_depth,
                    restarts: s.restarts,
                })
                .collect(),
        }
    }
}

impl Observer {
    /// The actors of `kind` (a full type name, as the overview's kinds
    /// give it) on this node and, with the remote layer, on every node it
    /// is connected to: per node how many, how busy, and the `limit`
    /// busiest (at most [`MAX_ACTORS`]).
    pub async fn kind_across_nodes(&self, kind: &str, limit: usize) -> KindAcrossNodes {
        let mut here = self.shared.kind_here(kind, limit);
        here.here = true;
        #[cfg(feature = "remote")]
        let (others, unanswered) = remote::ask_all(&self.shared, kind, limit).await;
        #[cfg(not(feature = "remote"))]
        let (others, unanswered): (Vec<KindOnNode>, Vec<String>) = (Vec::new(), Vec::new());
        let mut nodes = vec![here];
        nodes.extend(others);
        KindAcrossNodes {
            kind: kind.to_string(),
            nodes,
            unanswered,
        }
    }
}

/// The control channel's side: asking the other nodes, answering them.
#[cfg(feature = "remote")]
pub(crate) mod remote {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, OnceLock, Weak};
    use tokio::sync::oneshot;
    use troubadour::NodeId;
    use troubadour_remote::{ControlChannel, PeerState, Remote};

    /// The channel's name.
    pub(crate) const CHANNEL: &str = "troubadour.observe.kind";

    /// What travels on the channel.
    #[derive(Serialize, Deserialize)]
    enum Wire {
        Ask { id: u64, kind: String, limit: u16 },
        Answer { id: u64, on_node: KindOnNode },
    }

    /// This observer's end of the channel.
    #[derive(Default)]
    pub(crate) struct KindChannel {
        channel: OnceLock<ControlChannel>,
        next: AtomicU64,
        /// Asks waiting for an answer: id → (the node asked, where the
        /// answer goes).
        waiting: Mutex<HashMap<u64, (String, oneshot::Sender<KindOnNode>)>>,
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the channel on `remote`; returns why not if it cannot (another
    /// observer opened it on this node).
    pub(crate) fn open(shared: &Arc<Shared>, remote: &Remote) -> Result<(), String> {
        let me = Arc::downgrade(shared);
        let runtime = shared.system.tokio_handle().clone();
        let channel = remote
            .control_channel(CHANNEL, move |from, bytes| {
                receive(&me, &runtime, from, bytes)
            })
            .map_err(|e| e.to_string())?;
        let _ = shared.kinds.channel.set(channel);
        Ok(())
    }

    /// On the connection's reader thread: hands an ask to a task (a walk of
    /// the actor table is no work for a reader), completes an answer.
    fn receive(me: &Weak<Shared>, runtime: &tokio::runtime::Handle, from: &NodeId, bytes: &[u8]) {
        let Some(shared) = me.upgrade() else { return };
        match serde_json::from_slice::<Wire>(bytes) {
            Ok(Wire::Ask { id, kind, limit }) => {
                let from = from.clone();
                runtime.spawn(async move {
                    let on_node = shared.kind_here(&kind, usize::from(limit));
                    let answer = Wire::Answer { id, on_node };
                    if let (Some(channel), Ok(bytes)) =
                        (shared.kinds.channel.get(), serde_json::to_vec(&answer))
                    {
                        let _ = channel.send(&from, &bytes);
                    }
                });
            }
            Ok(Wire::Answer { id, mut on_node }) => {
                let mut waiting = lock(&shared.kinds.waiting);
                // Only the node asked answers for itself.
                if waiting
                    .get(&id)
                    .is_some_and(|(node, _)| node == from.name())
                {
                    if let Some((_, tx)) = waiting.remove(&id) {
                        on_node.here = false;
                        on_node.node = from.name().to_string();
                        on_node.actors.truncate(MAX_ACTORS);
                        let _ = tx.send(on_node);
                    }
                }
            }
            Err(_) => {}
        }
    }

    /// Asks every connected node; returns the answers by node name, and
    /// the nodes that did not answer in time.
    pub(crate) async fn ask_all(
        shared: &Arc<Shared>,
        kind: &str,
        limit: usize,
    ) -> (Vec<KindOnNode>, Vec<String>) {
        let (Some(channel), Some(view)) = (shared.kinds.channel.get(), shared.remote.get()) else {
            return (Vec::new(), Vec::new());
        };
        let limit = limit.min(MAX_ACTORS) as u16;
        let mut asked = Vec::new();
        for peer in view.peers() {
            if peer.state != PeerState::Connected {
                continue;
            }
            let Ok(node) = NodeId::remote(&peer.node, peer.address, peer.incarnation) else {
                continue;
            };
            let id = shared.kinds.next.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            lock(&shared.kinds.waiting).insert(id, (peer.node.clone(), tx));
            let ask = Wire::Ask {
                id,
                kind: kind.to_string(),
                limit,
            };
            let sent = serde_json::to_vec(&ask)
                .ok()
                .is_some_and(|bytes| channel.send(&node, &bytes).is_ok());
            if sent {
                asked.push((id, peer.node, rx));
            } else {
                lock(&shared.kinds.waiting).remove(&id);
            }
        }
        let deadline = tokio::time::Instant::now() + ASK_TIMEOUT;
        let mut answers = Vec::new();
        let mut unanswered = Vec::new();
        for (id, node, rx) in asked {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(answer)) => answers.push(answer),
                _ => {
                    lock(&shared.kinds.waiting).remove(&id);
                    unanswered.push(node);
                }
            }
        }
        answers.sort_by(|a, b| a.node.cmp(&b.node));
        unanswered.sort();
        (answers, unanswered)
    }
}
