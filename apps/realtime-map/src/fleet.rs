//! The actors: one [`Vehicle`] per bus, keeping its latest state, under one
//! [`Fleet`] that routes positions to them, creates them on a first
//! position, and supervises them.
//!
//! Passivation follows Akka's sharding protocol, so that no position is lost
//! to a vehicle that is stopping: after `idle` without a position a vehicle
//! asks the fleet to passivate it; the fleet stops routing to it, buffers
//! what arrives for it, and tells it to stop through its mailbox (behind
//! every position already sent). When the vehicle is down, buffered
//! positions go to a fresh incarnation.
//!
//! A vehicle that fails is restarted by the fleet (one-for-one) with empty
//! state, and fills again from the next position.

use crate::hfp::Position;
use crate::metrics::Metrics;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use troubadour::prelude::*;

/// What a vehicle's registered name starts with; its id follows.
const VEHICLE_NAME_PREFIX: &str = "vehicle/";

/// The name a vehicle actor is registered under, for look-ups by id.
pub fn vehicle_name(id: &str) -> String {
    [VEHICLE_NAME_PREFIX, id].concat()
}

/// Calls `f` with [`vehicle_name`]`(id)`, built on the stack when it fits
/// in 64 bytes (every id of the feed does): a look-up per request need not
/// allocate a name only to drop it.
pub fn with_vehicle_name<R>(id: &str, f: impl FnOnce(&str) -> R) -> R {
    let mut buf = [0u8; 64];
    let (prefix, len) = (
        VEHICLE_NAME_PREFIX.len(),
        VEHICLE_NAME_PREFIX.len() + id.len(),
    );
    if len > buf.len() {
        return f(&vehicle_name(id));
    }
    buf[..prefix].copy_from_slice(VEHICLE_NAME_PREFIX.as_bytes());
    buf[prefix..len].copy_from_slice(id.as_bytes());
    f(std::str::from_utf8(&buf[..len]).expect("two strings joined are UTF-8"))
}

impl Message for Position {
    type Reply = ();
}

/// A vehicle's latest state, as `GET /vehicle` answers it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct VehicleState {
    /// `<oper>/<veh>`.
    pub id: Arc<str>,
    /// Route id.
    pub route: String,
    /// The line shown to passengers.
    pub line: String,
    /// Latitude.
    pub lat: f64,
    /// Longitude.
    pub long: f64,
    /// m/s.
    pub speed: f64,
    /// Degrees.
    pub heading: f64,
    /// The vehicle's own timestamp of this position.
    pub timestamp: String,
    /// Positions this actor (this incarnation) has applied; in a cluster,
    /// since the vehicle's first activation, carried across nodes.
    pub updates: u64,
    /// In a cluster, the node that answered (the vehicle's owner); absent
    /// from the JSON of a single process.
    #[serde(default)]
    pub node: Option<Arc<str>>,
}

impl Serialize for VehicleState {
    /// JSON leaves `node` out when there is none (one process: the API is
    /// as it was before clusters); compact formats, such as the remote
    /// layer's, have no optional fields and always carry it.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let with_node = self.node.is_some() || !s.is_human_readable();
        let mut v = s.serialize_struct("VehicleState", 9 + usize::from(with_node))?;
        v.serialize_field("id", &self.id)?;
        v.serialize_field("route", &self.route)?;
        v.serialize_field("line", &self.line)?;
        v.serialize_field("lat", &self.lat)?;
        v.serialize_field("long", &self.long)?;
        v.serialize_field("speed", &self.speed)?;
        v.serialize_field("heading", &self.heading)?;
        v.serialize_field("timestamp", &self.timestamp)?;
        v.serialize_field("updates", &self.updates)?;
        if with_node {
            v.serialize_field("node", &self.node)?;
        } else {
            v.skip_field("node")?;
        }
        v.end()
    }
}

impl VehicleState {
    /// The state after `p`, the `updates`-th position.
    pub fn new(p: Position, updates: u64) -> Self {
        VehicleState {
            id: p.id,
            route: p.route,
            line: p.line,
            lat: p.lat,
            long: p.long,
            speed: p.speed,
            heading: p.heading,
            timestamp: p.timestamp,
            updates,
            node: None,
        }
    }
}

/// One bus.
pub struct Vehicle {
    id: Arc<str>,
    /// Shared with the answers to `GetState`: an ask copies a pointer, not
    /// the strings.
    state: Option<Arc<VehicleState>>,
    updates: u64,
    last_position: Instant,
    idle: Duration,
    /// Set once this vehicle has asked to be passivated.
    passivating: bool,
    fleet: ActorRef<Fleet>,
    metrics: Arc<Metrics>,
}

impl Vehicle {
    fn new(id: Arc<str>, idle: Duration, fleet: ActorRef<Fleet>, metrics: Arc<Metrics>) -> Self {
        Vehicle {
            id,
            state: None,
            updates: 0,
            // Set again from the system's clock in `started`.
            last_position: Instant::now(),
            idle,
            passivating: false,
            fleet,
            metrics,
        }
    }
}

/// Checked at a quarter of the idle time, so passivation happens between
/// `idle` and `1.25 × idle` after the last position.
#[derive(Clone)]
struct CheckIdle;

impl Message for CheckIdle {
    type Reply = ();
}

impl Actor for Vehicle {
    fn started(&mut self, ctx: &mut Context<Self>) {
        // The system's clock, so a test on virtual time controls idleness.
        self.last_position = ctx.now();
        let every = (self.idle / 4).max(Duration::from_millis(5));
        ctx.send_interval(every, CheckIdle);
    }

    fn after_restart(&mut self, _: &ExitReason, ctx: &mut Context<Self>) {
        self.metrics.vehicle_restarts.fetch_add(1, Relaxed);
        self.started(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.metrics.vehicles_alive.fetch_sub(1, Relaxed);
    }
}

/// Fails the vehicle `own` if it was sent another bus's position: positions
/// are routed by id (by the fleet, or in a cluster by the shard), so this
/// means the routing is broken and the actor's state can't be trusted.
pub(crate) fn misrouted<A: Actor>(own: &str, p: &Position, ctx: &mut Context<A>) -> bool {
    if *p.id == *own {
        return false;
    }
    ctx.fail(format!(
        "vehicle {own} was sent a position of vehicle {}",
        p.id
    ));
    true
}

impl Handler<Position> for Vehicle {
    fn handle(&mut self, p: Position, ctx: &mut Context<Self>) {
        self.metrics.positions_handled.fetch_add(1, Relaxed);
        if misrouted(&self.id, &p, ctx) {
            return;
        }
        self.last_position = ctx.now();
        self.updates += 1;
        self.state = Some(Arc::new(VehicleState::new(p, self.updates)));
    }
}

impl Handler<CheckIdle> for Vehicle {
    fn handle(&mut self, _: CheckIdle, ctx: &mut Context<Self>) {
        if !self.passivating && ctx.now() - self.last_position >= self.idle {
            self.passivating = true;
            // If the fleet is gone, so is this vehicle (it is the parent).
            let _ = self.fleet.tell(Passivate(ctx.id()));
        }
    }
}

/// The fleet's answer to [`Passivate`], queued behind every position it
/// routed to this vehicle.
struct StopNow;

impl Message for StopNow {
    type Reply = ();
}

impl Handler<StopNow> for Vehicle {
    fn handle(&mut self, _: StopNow, ctx: &mut Context<Self>) {
        self.metrics.vehicles_passivated.fetch_add(1, Relaxed);
        ctx.stop();
    }
}

/// Makes a vehicle's actor panic: the `--debug-faults` route's fault, for
/// watching supervision on the dashboard. The fleet restarts the vehicle,
/// which answers again after its next position.
pub struct InjectedPanic;

impl Message for InjectedPanic {
    type Reply = ();
}

impl Handler<InjectedPanic> for Vehicle {
    fn handle(&mut self, _: InjectedPanic, _: &mut Context<Self>) {
        panic!("injected fault: POST /debug/panic (--debug-faults)");
    }
}

/// Asks a vehicle for its state: `None` right after a restart, until its
/// next position.
#[derive(Debug, Serialize, Deserialize)]
pub struct GetState;

impl Message for GetState {
    type Reply = Option<Arc<VehicleState>>;
}

impl Handler<GetState> for Vehicle {
    fn handle(&mut self, _: GetState, _: &mut Context<Self>) -> Option<Arc<VehicleState>> {
        self.state.clone()
    }
}

/// A change on the map, streamed to browsers.
#[derive(Clone, Debug, Serialize)]
pub struct Moved {
    /// Vehicle id.
    pub id: Arc<str>,
    /// Latitude.
    pub lat: f64,
    /// Longitude.
    pub long: f64,
    /// Heading, degrees.
    pub heading: f64,
    /// Line shown to passengers.
    pub line: String,
}

impl Moved {
    /// Where `p` puts its vehicle.
    pub fn of(p: &Position) -> Moved {
        Moved {
            id: p.id.clone(),
            lat: p.lat,
            long: p.long,
            heading: p.heading,
            line: p.line.clone(),
        }
    }
}

/// What changed since the previous batch: JSON
/// `{"node":…,"moved":[{id,lat,long,heading,line}…],"gone":[id…]}`, where
/// `node` (in a cluster) is the node whose vehicles these are.
pub type MapBatch = Arc<str>;

/// The map's changes since the last batch: the latest move of each
/// vehicle that moved, and the vehicles that went away.
#[derive(Default)]
pub struct MapChanges {
    moved: HashMap<Arc<str>, Moved>,
    gone: Vec<Arc<str>>,
}

impl MapChanges {
    /// A vehicle moved (replacing its earlier move in this batch).
    pub fn moved(&mut self, m: Moved) {
        self.moved.insert(m.id.clone(), m);
    }

    /// A vehicle went away (passivated, or moved to another node).
    pub fn gone(&mut self, id: Arc<str>) {
        self.moved.remove(&id);
        self.gone.push(id);
    }

    /// The batch to send, if anything changed, and a fresh start.
    pub fn take_batch(&mut self, node: Option<&str>) -> Option<MapBatch> {
        if self.moved.is_empty() && self.gone.is_empty() {
            return None;
        }
        #[derive(Serialize)]
        struct Batch<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            node: Option<&'a str>,
            moved: Vec<&'a Moved>,
            gone: &'a [Arc<str>],
        }
        let batch = Batch {
            node,
            moved: self.moved.values().collect(),
            gone: &self.gone,
        };
        let json = serde_json::to_string(&batch).ok();
        self.moved.clear();
        self.gone.clear();
        json.map(Into::into)
    }
}

/// A vehicle asks to be stopped for being idle.
struct Passivate(ActorId);

impl Message for Passivate {
    type Reply = ();
}

/// The fleet's view of one vehicle actor.
struct Entry {
    actor: ActorRef<Vehicle>,
    /// `Some` while it is passivating: positions that arrived meanwhile,
    /// for its next incarnation.
    buffered: Option<Vec<Position>>,
}

/// Routes positions to vehicles and supervises them.
pub struct Fleet {
    vehicles: HashMap<Arc<str>, Entry>,
    /// Which vehicle an actor is, for its `Down`.
    ids: HashMap<ActorId, Arc<str>>,
    idle: Duration,
    metrics: Arc<Metrics>,
    updates: broadcast::Sender<MapBatch>,
    changes: MapChanges,
}

/// How often the map's changes are sent to browsers.
const MAP_BATCH_EVERY: Duration = Duration::from_millis(250);

impl Fleet {
    /// A fleet whose vehicles passivate after `idle`, and whose map changes
    /// go to `updates`.
    pub fn new(
        idle: Duration,
        metrics: Arc<Metrics>,
        updates: broadcast::Sender<MapBatch>,
    ) -> Self {
        Fleet {
            vehicles: HashMap::new(),
            ids: HashMap::new(),
            idle,
            metrics,
            updates,
            changes: MapChanges::default(),
        }
    }

    /// Creates the vehicle `id` and hands it `positions`, in order.
    fn spawn_vehicle(&mut self, id: Arc<str>, positions: Vec<Position>, ctx: &mut Context<Self>) {
        let (idle, metrics, fleet) = (self.idle, self.metrics.clone(), ctx.myself());
        let factory_id = id.clone();
        let spawned = ctx.spawn_factory_with_options(
            SpawnOptions::new()
                .name(vehicle_name(&id))
                .restart(Restart::Transient),
            move || Vehicle::new(factory_id.clone(), idle, fleet.clone(), metrics.clone()),
        );
        let vehicle = match spawned {
            Ok(vehicle) => vehicle,
            Err(e) => {
                // Only while the system shuts down.
                let dropped = positions.len() as u64;
                self.metrics.positions_handled.fetch_add(dropped, Relaxed);
                tracing::debug!("could not create vehicle {id}: {e}");
                return;
            }
        };
        ctx.monitor(&vehicle);
        self.metrics.vehicles_spawned.fetch_add(1, Relaxed);
        self.metrics.vehicles_alive.fetch_add(1, Relaxed);
        for p in positions {
            if vehicle.tell(p).is_err() {
                self.metrics.positions_handled.fetch_add(1, Relaxed);
            }
        }
        self.ids.insert(vehicle.id(), id.clone());
        self.vehicles.insert(
            id,
            Entry {
                actor: vehicle,
                buffered: None,
            },
        );
    }

    fn note_moved(&mut self, p: &Position) {
        if self.updates.receiver_count() > 0 {
            self.changes.moved(Moved::of(p));
        }
    }
}

impl Actor for Fleet {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.send_interval(MAP_BATCH_EVERY, Flush);
    }

    fn supervisor_strategy(&self) -> SupervisorStrategy {
        // Vehicles fail independently; a burst of failures across a large
        // fleet is not a reason to take every vehicle down.
        SupervisorStrategy::new(Strategy::OneForOne).intensity(1_000, Duration::from_secs(10))
    }
}

impl Handler<Position> for Fleet {
    fn handle(&mut self, p: Position, ctx: &mut Context<Self>) {
        self.metrics.positions_routed.fetch_add(1, Relaxed);
        self.note_moved(&p);
        let Some(entry) = self.vehicles.get_mut(&p.id) else {
            self.spawn_vehicle(p.id.clone(), vec![p], ctx);
            return;
        };
        if let Some(buffer) = &mut entry.buffered {
            buffer.push(p);
            return;
        }
        match entry.actor.tell(p) {
            Ok(()) => {}
            // Vehicle mailboxes are unbounded, and a vehicle only stops
            // through the fleet, so this is a vehicle that was killed: its
            // `Down` is on the way. Keep the position for the next one.
            Err(e) => {
                entry
                    .buffered
                    .get_or_insert_with(Vec::new)
                    .push(e.into_message());
            }
        }
    }
}

impl Handler<Passivate> for Fleet {
    fn handle(&mut self, Passivate(actor): Passivate, _: &mut Context<Self>) {
        let Some(entry) = self
            .ids
            .get(&actor)
            .and_then(|id| self.vehicles.get_mut(id))
        else {
            return;
        };
        if entry.buffered.is_none() {
            entry.buffered = Some(Vec::new());
            // Behind every position already routed to it.
            let _ = entry.actor.tell(StopNow);
        }
    }
}

impl Handler<Down> for Fleet {
    fn handle(&mut self, down: Down, ctx: &mut Context<Self>) {
        let Some(id) = self.ids.remove(&down.id) else {
            return;
        };
        let buffered = self
            .vehicles
            .remove(&id)
            .and_then(|e| e.buffered)
            .unwrap_or_default();
        if !down.reason.is_normal() {
            tracing::warn!("vehicle {id} stopped: {}", down.reason);
        }
        if !buffered.is_empty() {
            self.spawn_vehicle(id, buffered, ctx);
            return;
        }
        if self.updates.receiver_count() > 0 {
            self.changes.gone(id);
        }
    }
}

/// Time to send the map's changes since the last flush to browsers.
#[derive(Clone)]
pub(crate) struct Flush;

impl Message for Flush {
    type Reply = ();
}

impl Handler<Flush> for Fleet {
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) {
        if let Some(batch) = self.changes.take_batch(None) {
            // No receivers is fine: nobody is looking at the map.
            let _ = self.updates.send(batch);
        }
    }
}

/// Asks the fleet for every live vehicle.
pub struct ListVehicles;

impl Message for ListVehicles {
    type Reply = Vec<ActorRef<Vehicle>>;
}

impl Handler<ListVehicles> for Fleet {
    fn handle(&mut self, _: ListVehicles, _: &mut Context<Self>) -> Vec<ActorRef<Vehicle>> {
        self.vehicles.values().map(|e| e.actor.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{vehicle_name, with_vehicle_name, VehicleState};

    #[test]
    fn a_vehicle_is_looked_up_by_the_name_it_registers() {
        for id in [
            "22/1043",
            "",
            "ä/ö",
            &"x".repeat(56),
            &"y".repeat(57),
            &"z".repeat(300),
        ] {
            assert_eq!(with_vehicle_name(id, str::to_owned), vehicle_name(id));
        }
        assert_eq!(vehicle_name("22/1043"), "vehicle/22/1043");
    }

    fn state(node: Option<&str>) -> VehicleState {
        VehicleState {
            id: "22/1043".into(),
            route: "1055".into(),
            line: "55".into(),
            lat: 60.17,
            long: 24.94,
            speed: 7.5,
            heading: 45.0,
            timestamp: "2026-11-21T08:00:00.000Z".into(),
            updates: 3,
            node: node.map(Into::into),
        }
    }

    #[test]
    fn json_names_the_node_only_in_a_cluster() {
        let single = serde_json::to_value(state(None)).unwrap();
        assert!(single.get("node").is_none(), "{single}");
        let clustered = serde_json::to_value(state(Some("node2"))).unwrap();
        assert_eq!(clustered["node"], "node2");
        let back: VehicleState = serde_json::from_value(single).unwrap();
        assert_eq!(back, state(None));
    }

    #[test]
    fn states_round_trip_in_the_remote_layer_s_compact_format() {
        for s in [state(None), state(Some("node1"))] {
            let bytes = postcard::to_allocvec(&s).unwrap();
            let back: VehicleState = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(back, s);
        }
    }
}
