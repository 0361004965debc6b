//! The actors of a cluster node: each vehicle a [`VirtualVehicle`] that
//! exists once in the whole cluster, on the node that owns its shard, and
//! one [`MapNode`] per node that draws that node's vehicles on everyone's
//! map.
//!
//! ```text
//! MQTT (shared) ─► any node ─entity(id).tell─► owner: VirtualVehicle ─► its MapNode
//! HTTP /vehicle ─► any node ─entity(id).ask──► owner: VirtualVehicle
//! HTTP /vehicles ─► any node ─► every MapNode (group "realtime-map.in-box")
//! MapNode ─batch every 250 ms─► every MapNode (group "realtime-map.map") ─► browsers
//! ```
//!
//! A vehicle keeps its latest state in memory and in the node's
//! write-behind ([`Durable`]): flushed in batches every few seconds, when
//! it passivates, and before its shard is handed to another node; a
//! vehicle activated elsewhere (after a handoff, or after its node died)
//! starts from what was flushed last.

use crate::fleet::{misrouted, Flush, GetState, MapBatch, MapChanges, Moved, VehicleState};
use crate::hfp::Position;
use crate::http::BoundingBox;
use crate::metrics::Metrics;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::broadcast;
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, Entity, EntityMessages, Group};
use troubadour_persistence::{Durable, WriteBehind};
use troubadour_remote::RemoteMessage;

impl RemoteMessage for Position {
    const NAME: &'static str = "realtime-map.Position";
}

impl RemoteMessage for GetState {
    const NAME: &'static str = "realtime-map.GetState";
}

/// What a vehicle leaves in the state store: its latest state, once it has
/// had a position. Its own shape, not the API's, so that the two evolve
/// apart (a change here is a new stored version).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    route: String,
    line: String,
    lat: f64,
    long: f64,
    speed: f64,
    heading: f64,
    timestamp: String,
    updates: u64,
}

impl Saved {
    fn of(state: &VehicleState) -> Saved {
        Saved {
            route: state.route.clone(),
            line: state.line.clone(),
            lat: state.lat,
            long: state.long,
            speed: state.speed,
            heading: state.heading,
            timestamp: state.timestamp.clone(),
            updates: state.updates,
        }
    }

    fn state(&self, id: &Arc<str>, node: &Arc<str>) -> VehicleState {
        VehicleState {
            id: id.clone(),
            route: self.route.clone(),
            line: self.line.clone(),
            lat: self.lat,
            long: self.long,
            speed: self.speed,
            heading: self.heading,
            timestamp: self.timestamp.clone(),
            updates: self.updates,
            node: Some(node.clone()),
        }
    }
}

/// One bus, as a virtual actor of the cluster.
pub struct VirtualVehicle {
    id: Arc<str>,
    state: Durable<Option<Saved>>,
    node: Arc<str>,
    map: ActorRef<MapNode>,
    behind: WriteBehind,
    metrics: Arc<Metrics>,
}

impl VirtualVehicle {
    /// The vehicle `id` on `node`, whose shard it owns at `epoch`, its
    /// state kept by `behind` (written with that epoch, so a node that
    /// lost the shard cannot overwrite what the new owner wrote), its moves
    /// drawn by `map`.
    pub fn new(
        id: &str,
        epoch: u64,
        node: Arc<str>,
        behind: &WriteBehind,
        map: ActorRef<MapNode>,
        metrics: Arc<Metrics>,
    ) -> Self {
        VirtualVehicle {
            id: id.into(),
            state: Durable::new(behind, state_key(id), None).epoch(epoch),
            node,
            map,
            behind: behind.clone(),
            metrics,
        }
    }
}

/// The key a vehicle's state is stored under.
pub fn state_key(id: &str) -> String {
    format!("vehicle/{id}")
}

impl Actor for VirtualVehicle {
    fn started(&mut self, _: &mut Context<Self>) {
        self.metrics.vehicles_spawned.fetch_add(1, Relaxed);
        self.metrics.vehicles_alive.fetch_add(1, Relaxed);
    }

    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(async move {
            self.state.loading().await?;
            // Back on the map at once, in this node's colour, rather than
            // at its next position.
            if let Some(saved) = self.state.as_ref() {
                let _ = self.map.tell(Seen(saved.state(&self.id, &self.node)));
            }
            Ok(())
        })
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Passivated, or its shard is moving: the latest state goes to the
        // store now rather than at the end of the period.
        self.behind.flush_soon();
        self.metrics.vehicles_passivated.fetch_add(1, Relaxed);
        self.metrics.vehicles_alive.fetch_sub(1, Relaxed);
        let _ = self.map.tell(Left(self.id.clone()));
    }
}

impl Handler<Position> for VirtualVehicle {
    fn handle(&mut self, p: Position, ctx: &mut Context<Self>) {
        self.metrics.positions_handled.fetch_add(1, Relaxed);
        if misrouted(&self.id, &p, ctx) {
            return;
        }
        if let Some(newer) = self.state.superseded_by() {
            // The store holds this vehicle's state from a newer owner of
            // its shard: this node lost the shard and has not noticed yet.
            tracing::warn!(vehicle = %self.id, newer, "stale vehicle activation stops");
            ctx.stop();
            return;
        }
        let updates = self.state.as_ref().map_or(0, |s| s.updates) + 1;
        let state = VehicleState {
            node: Some(self.node.clone()),
            ..VehicleState::new(p, updates)
        };
        self.state.update(|saved| *saved = Some(Saved::of(&state)));
        let _ = self.map.tell(Seen(state));
    }
}

impl Handler<GetState> for VirtualVehicle {
    fn handle(&mut self, _: GetState, ctx: &mut Context<Self>) -> Option<Arc<VehicleState>> {
        let state = self
            .state
            .as_ref()
            .map(|s| Arc::new(s.state(&self.id, &self.node)));
        if state.is_none() {
            // No position here or in the store: an id nobody reports
            // (a typo, a scan). It goes at once rather than after the idle
            // time, so asking for made-up ids cannot fill the cluster with
            // empty vehicles; a real bus comes back with its next position.
            ctx.stop();
        }
        state
    }
}

impl Entity for VirtualVehicle {
    const KIND: &'static str = "realtime-map.vehicle";

    fn messages(m: &mut EntityMessages<Self>) {
        m.handle::<Position>().handle::<GetState>();
    }
}

/// A vehicle of this node has a new state.
struct Seen(VehicleState);

impl Message for Seen {
    type Reply = ();
}

/// A vehicle of this node stopped (passivated, or moving to another node).
struct Left(Arc<str>);

impl Message for Left {
    type Reply = ();
}

/// One node's map changes, for every node's browsers: a [`MapBatch`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeBatch(pub String);

impl Message for NodeBatch {
    type Reply = ();
}

impl RemoteMessage for NodeBatch {
    const NAME: &'static str = "realtime-map.NodeBatch";
}

/// Asks a node for the states of its vehicles inside a box.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InBox(pub BoundingBox);

impl Message for InBox {
    type Reply = Vec<VehicleState>;
}

impl RemoteMessage for InBox {
    const NAME: &'static str = "realtime-map.InBox";
}

/// Asks a node how it stands in the cluster.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summarize;

impl Message for Summarize {
    type Reply = NodeSummary;
}

impl RemoteMessage for Summarize {
    const NAME: &'static str = "realtime-map.Summarize";
}

/// A node as the cluster view shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// The node's name.
    pub node: String,
    /// Where it serves HTTP.
    pub http: String,
    /// Whether its lease is valid (it hosts shards only then).
    pub lease_valid: bool,
    /// The members it sees up.
    pub members: Vec<String>,
    /// Shards it hosts.
    pub shards: usize,
    /// Vehicles active on it.
    pub vehicles: usize,
    /// Vehicles it activated since it started.
    pub activations: u64,
    /// Shards it took over from a node that was lost (not handed over).
    pub failovers: u64,
    /// Whether it hosts exactly the shards placement gives it.
    pub balanced: bool,
}

/// The group a [`MapNode`] is in while its node has browsers open: it
/// receives every node's batches. With no browser open anywhere, the
/// moves cross no network.
pub const MAP_GROUP: &str = "realtime-map.map";
/// The group every [`MapNode`] joins to answer box queries.
pub const IN_BOX_GROUP: &str = "realtime-map.in-box";
/// The group every [`MapNode`] joins to describe its node.
pub const SUMMARY_GROUP: &str = "realtime-map.summary";

/// How often a node sends its vehicles' moves to every node's browsers.
const MAP_BATCH_EVERY: Duration = Duration::from_millis(250);

/// One per node: knows where this node's vehicles are, sends their moves
/// to every node's browsers, and answers for this node in the cluster
/// view.
pub struct MapNode {
    node: Arc<str>,
    http: String,
    vehicles: HashMap<Arc<str>, VehicleState>,
    changes: MapChanges,
    /// This node's browsers.
    updates: broadcast::Sender<MapBatch>,
    /// In [`MAP_GROUP`]: this node had browsers open at the last batch.
    watched: bool,
    /// Set once the cluster has started (it needs the vehicles' factory,
    /// which needs this actor).
    cluster: Arc<OnceLock<Cluster>>,
    metrics: Arc<Metrics>,
}

impl MapNode {
    /// The map of node `node` (serving HTTP at `http`), whose browsers
    /// listen on `updates`.
    pub fn new(
        node: Arc<str>,
        http: String,
        updates: broadcast::Sender<MapBatch>,
        cluster: Arc<OnceLock<Cluster>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        MapNode {
            node,
            http,
            vehicles: HashMap::new(),
            changes: MapChanges::default(),
            updates,
            watched: false,
            cluster,
            metrics,
        }
    }

    fn feed(&self) -> Option<Group<NodeBatch>> {
        self.cluster.get().map(|c| c.group(MAP_GROUP))
    }
}

impl Actor for MapNode {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.send_interval(MAP_BATCH_EVERY, Flush);
    }
}

impl Handler<Seen> for MapNode {
    fn handle(&mut self, Seen(state): Seen, _: &mut Context<Self>) {
        self.changes.moved(Moved {
            id: state.id.clone(),
            lat: state.lat,
            long: state.long,
            heading: state.heading,
            line: state.line.clone(),
        });
        self.vehicles.insert(state.id.clone(), state);
    }
}

impl Handler<Left> for MapNode {
    fn handle(&mut self, Left(id): Left, _: &mut Context<Self>) {
        if self.vehicles.remove(&id).is_some() {
            self.changes.gone(id);
        }
    }
}

impl Handler<Flush> for MapNode {
    fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
        let Some(feed) = self.feed() else { return };
        // Take the others' batches only while someone here looks (a page
        // opened now draws /vehicles first, then the moves from the next
        // batch on).
        let watched = self.updates.receiver_count() > 0;
        if watched != self.watched {
            let me = ctx.myself();
            let changed = if watched {
                feed.join(&me)
            } else {
                feed.leave(&me)
            };
            match changed {
                Ok(()) => self.watched = watched,
                Err(e) => tracing::warn!("map feed: cannot change membership: {e}"),
            }
        }
        if let Some(batch) = self.changes.take_batch(Some(&self.node)) {
            // To the MapNodes of the nodes with browsers open, this one
            // included if it has some; to nobody if no node has.
            let _ = feed.broadcast(NodeBatch(batch.to_string()));
        }
    }
}

impl Handler<NodeBatch> for MapNode {
    fn handle(&mut self, NodeBatch(batch): NodeBatch, _: &mut Context<Self>) {
        self.metrics.map_batches_received.fetch_add(1, Relaxed);
        // No receivers is fine: the last browser closed since this node
        // left the feed.
        let _ = self.updates.send(batch.into());
    }
}

impl Handler<InBox> for MapNode {
    fn handle(&mut self, InBox(bbox): InBox, _: &mut Context<Self>) -> Vec<VehicleState> {
        self.vehicles
            .values()
            .filter(|s| bbox.contains(s.lat, s.long))
            .cloned()
            .collect()
    }
}

impl AsyncHandler<Summarize> for MapNode {
    async fn handle(&mut self, _: Summarize, _: &mut Context<Self>) -> NodeSummary {
        let mut summary = NodeSummary {
            node: self.node.to_string(),
            http: self.http.clone(),
            lease_valid: false,
            members: Vec::new(),
            shards: 0,
            vehicles: self.vehicles.len(),
            activations: self.metrics.vehicles_spawned.load(Relaxed),
            failovers: 0,
            balanced: false,
        };
        if let Some(cluster) = self.cluster.get() {
            if let Ok(status) = cluster.status().await {
                summary.lease_valid = status.lease_valid;
                summary.members = status.members;
                summary.shards = status.shards.len();
                summary.failovers = status.failovers;
                summary.balanced = status.balanced;
            }
        }
        summary
    }
}
