//! Answers out: the HTTP API, the metrics, and the live map page.
//!
//! Every vehicle answer comes from the vehicle's actor: in one process the
//! handler looks the actor up by its registered name and `ask`s it; in a
//! cluster it asks the virtual actor, wherever it lives.

use crate::fleet::{
    with_vehicle_name, Fleet, GetState, InjectedPanic, ListVehicles, MapBatch, Vehicle,
    VehicleState,
};
use crate::metrics::{Metrics, Route};
use crate::sharded::{InBox, NodeSummary, Summarize, VirtualVehicle, IN_BOX_GROUP, SUMMARY_GROUP};
use crate::simulator::ROUTES;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use troubadour::{handle_here, ActorRef, AskError, SystemHandle};
use troubadour_cluster::Cluster;
use troubadour_observe::Observer;

/// How long a request waits for a vehicle's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// Where answers about vehicles come from.
#[derive(Clone)]
pub enum Vehicles {
    /// One process: each vehicle found by its registered name; the fleet
    /// lists them all.
    Local(ActorRef<Fleet>),
    /// A cluster: each vehicle a virtual actor asked wherever it lives;
    /// boxes and the cluster view asked of every node.
    Cluster(Cluster),
}

/// What the handlers share.
#[derive(Clone)]
pub struct Shared {
    /// The node's actor system.
    pub system: SystemHandle,
    /// Where vehicles are found.
    pub vehicles: Vehicles,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Map changes, for `/events`.
    pub updates: broadcast::Sender<MapBatch>,
    /// Turns true on shutdown; ends event streams.
    pub stop: watch::Receiver<bool>,
    /// Watches the runtime: its families in `/metrics`, and the dashboard.
    pub observer: Observer,
    /// Mount the dashboard at `/dashboard` (not when it is served on an
    /// address of its own).
    pub mount_dashboard: bool,
    /// Serve `POST /debug/panic?id=` (one process only).
    pub debug_faults: bool,
}

/// The service's routes; in a cluster also `/cluster` (every node's
/// summary) and `/cluster/node/{status,health}` (this node's, for
/// operators and readiness probes); the runtime's dashboard under
/// `/dashboard` unless it has an address of its own.
pub fn router(shared: Shared) -> Router {
    let mut routes = Router::new()
        .route("/", get(index))
        .route("/vehicle", get(vehicle))
        .route("/vehicles", get(vehicles))
        .route("/metrics", get(metrics))
        .route("/routes", get(routes))
        .route("/events", get(events));
    if shared.debug_faults && matches!(shared.vehicles, Vehicles::Local(_)) {
        routes = routes.route("/debug/panic", post(inject_panic));
    }
    let dashboard = shared.mount_dashboard.then(|| shared.observer.clone());
    let routes = match &shared.vehicles {
        Vehicles::Local(_) => routes.with_state(Arc::new(shared)),
        Vehicles::Cluster(cluster) => {
            let node = troubadour_cluster::http::router(cluster.clone());
            routes
                .route("/cluster", get(cluster_view))
                .with_state(Arc::new(shared))
                .nest("/cluster/node", node)
        }
    };
    match dashboard {
        Some(observer) => routes
            .route("/dashboard/", get(to_dashboard))
            .nest("/dashboard", observer.router()),
        None => routes,
    }
}

async fn to_dashboard() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, "/dashboard")],
    )
        .into_response()
}

/// `POST /debug/panic?id=`: the vehicle's actor panics on its next turn
/// (`--debug-faults` only).
async fn inject_panic(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<VehicleQuery>, QueryRejection>,
) -> Response {
    let Some(id) = query
        .ok()
        .and_then(|Query(q)| q.id)
        .filter(|id| !id.is_empty())
    else {
        return error(StatusCode::BAD_REQUEST, "missing query parameter id");
    };
    match with_vehicle_name(&id, |name| shared.system.whereis::<Vehicle>(name)) {
        None => error(StatusCode::NOT_FOUND, format!("no vehicle with id {id}")),
        Some(actor) => match actor.tell(InjectedPanic) {
            Ok(()) => json(
                StatusCode::ACCEPTED,
                &serde_json::json!({ "panicking": id, "actor": actor.id().serial() }),
            ),
            Err(e) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("vehicle {id} took no message ({e}); try again"),
            ),
        },
    }
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {e}"),
        ),
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    #[derive(Serialize)]
    struct Error {
        error: String,
    }
    let body = serde_json::to_vec(&Error {
        error: message.into(),
    })
    .unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn ask_failed(id: &str, e: AskError) -> Response {
    match e {
        AskError::Timeout(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "vehicle {id} did not answer within {} ms",
                ASK_TIMEOUT.as_millis()
            ),
        ),
        // Passivated or restarted between the look-up and the answer.
        other => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("vehicle {id} could not answer ({other}); try again"),
        ),
    }
}

#[derive(Deserialize)]
struct VehicleQuery {
    id: Option<String>,
}

async fn vehicle(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<VehicleQuery>, QueryRejection>,
) -> Response {
    let started = Instant::now();
    let response = match query
        .ok()
        .and_then(|Query(q)| q.id)
        .filter(|id| !id.is_empty())
    {
        None => error(StatusCode::BAD_REQUEST, "missing query parameter id"),
        Some(id) => match &shared.vehicles {
            Vehicles::Local(_) => {
                match with_vehicle_name(&id, |name| shared.system.whereis::<Vehicle>(name)) {
                    None => error(StatusCode::NOT_FOUND, format!("no vehicle with id {id}")),
                    // A quick read: the turn runs on this thread when the
                    // vehicle is idle, with no worker woken (decision 0033).
                    Some(actor) => match handle_here(|| actor.ask(GetState))
                        .timeout(ASK_TIMEOUT)
                        .await
                    {
                        Ok(Some(state)) => json(StatusCode::OK, &state),
                        Ok(None) => error(
                            StatusCode::NOT_FOUND,
                            format!("vehicle {id} has no position since it restarted"),
                        ),
                        Err(e) => ask_failed(&id, e),
                    },
                }
            }
            // Every id names a virtual actor; one that never had a
            // position (here or in the store) has no state.
            Vehicles::Cluster(cluster) => match cluster
                .entity::<VirtualVehicle>(id.clone())
                .ask(GetState)
                .timeout(ASK_TIMEOUT)
                .await
            {
                Ok(Some(state)) => json(StatusCode::OK, &state),
                Ok(None) => error(StatusCode::NOT_FOUND, format!("no vehicle with id {id}")),
                Err(e) => ask_failed(&id, e),
            },
        },
    };
    shared.metrics.answered(
        Route::Vehicle,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// A box on the map: `minlon,minlat,maxlon,maxlat`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoundingBox {
    min_long: f64,
    min_lat: f64,
    max_long: f64,
    max_lat: f64,
}

impl std::str::FromStr for BoundingBox {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("bbox must be minlon,minlat,maxlon,maxlat in degrees (for example 24.9,60.15,25.0,60.2); got `{s}`")
        };
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [min_long, min_lat, max_long, max_lat] = v[..] else {
            return Err(bad());
        };
        if v.iter().any(|x| !x.is_finite()) || min_long > max_long || min_lat > max_lat {
            return Err(bad());
        }
        Ok(BoundingBox {
            min_long,
            min_lat,
            max_long,
            max_lat,
        })
    }
}

impl BoundingBox {
    /// Whether the point is inside, edges included.
    pub fn contains(&self, lat: f64, long: f64) -> bool {
        (self.min_lat..=self.max_lat).contains(&lat)
            && (self.min_long..=self.max_long).contains(&long)
    }
}

#[derive(Deserialize)]
struct VehiclesQuery {
    bbox: Option<String>,
}

async fn vehicles(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<VehiclesQuery>, QueryRejection>,
) -> Response {
    let started = Instant::now();
    let response = match query.ok().and_then(|Query(q)| q.bbox) {
        None => error(
            StatusCode::BAD_REQUEST,
            "missing query parameter bbox=minlon,minlat,maxlon,maxlat",
        ),
        Some(bbox) => match bbox.parse::<BoundingBox>() {
            Err(why) => error(StatusCode::BAD_REQUEST, why),
            Ok(bbox) => in_box(&shared, bbox).await,
        },
    };
    shared.metrics.answered(
        Route::Vehicles,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

async fn in_box(shared: &Shared, bbox: BoundingBox) -> Response {
    let (mut inside, missing) = match &shared.vehicles {
        Vehicles::Local(fleet) => match local_in_box(fleet, bbox).await {
            Ok(inside) => (inside, 0),
            Err(response) => return response,
        },
        Vehicles::Cluster(cluster) => cluster_in_box(cluster, bbox).await,
    };
    inside.sort_by(|a, b| a.id.cmp(&b.id));
    #[derive(Serialize)]
    struct Answer {
        count: usize,
        vehicles: Vec<VehicleState>,
        /// Nodes that did not answer in time (their vehicles are missing).
        #[serde(skip_serializing_if = "is_zero")]
        nodes_missing: usize,
    }
    json(
        StatusCode::OK,
        &Answer {
            count: inside.len(),
            vehicles: inside,
            nodes_missing: missing,
        },
    )
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Asks every vehicle the fleet lists.
async fn local_in_box(
    fleet: &ActorRef<Fleet>,
    bbox: BoundingBox,
) -> Result<Vec<VehicleState>, Response> {
    let actors = match fleet.ask(ListVehicles).timeout(ASK_TIMEOUT).await {
        Ok(actors) => actors,
        Err(e) => {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the fleet did not answer: {e}"),
            ))
        }
    };
    let answers =
        futures_util::future::join_all(actors.iter().map(|a| a.ask(GetState).timeout(ASK_TIMEOUT)))
            .await;
    // A vehicle that passivated or restarted meanwhile has nothing to show.
    Ok(answers
        .into_iter()
        .filter_map(|a| a.ok().flatten())
        .filter(|s| bbox.contains(s.lat, s.long))
        .map(Arc::unwrap_or_clone)
        .collect())
}

/// Asks every node for its vehicles inside the box; also says how many
/// nodes did not answer.
async fn cluster_in_box(cluster: &Cluster, bbox: BoundingBox) -> (Vec<VehicleState>, usize) {
    let nodes = cluster
        .group::<InBox>(IN_BOX_GROUP)
        .members()
        .await
        .unwrap_or_default();
    let answers = futures_util::future::join_all(
        nodes
            .iter()
            .map(|n| n.ask(InBox(bbox)).timeout(ASK_TIMEOUT)),
    )
    .await;
    let missing = answers.iter().filter(|a| a.is_err()).count();
    (answers.into_iter().flatten().flatten().collect(), missing)
}

/// `GET /cluster`: every node's summary, as each answers it.
async fn cluster_view(State(shared): State<Arc<Shared>>) -> Response {
    let Vehicles::Cluster(cluster) = &shared.vehicles else {
        return error(StatusCode::NOT_FOUND, "this service is not a cluster");
    };
    let nodes = cluster
        .group::<Summarize>(SUMMARY_GROUP)
        .members()
        .await
        .unwrap_or_default();
    let answers =
        futures_util::future::join_all(nodes.iter().map(|n| n.ask(Summarize).timeout(ASK_TIMEOUT)))
            .await;
    let mut nodes: Vec<NodeSummary> = answers.into_iter().flatten().collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    #[derive(Serialize)]
    struct View {
        nodes: Vec<NodeSummary>,
    }
    json(StatusCode::OK, &View { nodes })
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let mut text = shared.metrics.render(shared.system.dead_letter_count());
    // The runtime's own families (`troubadour_*`: actors, the remote
    // layer and the cluster in a node), beside the service's.
    text.push_str(
        &shared
            .observer
            .render_metrics(troubadour_observe::prometheus::Format::Text)
            .await,
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn routes() -> Response {
    json(StatusCode::OK, &ROUTES)
}

async fn index() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("../assets/index.html"),
    )
        .into_response()
}

async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let state = (shared.updates.subscribe(), shared.stop.clone());
    let stream = futures_util::stream::unfold(state, |(mut rx, mut stop)| async move {
        loop {
            let batch = tokio::select! {
                b = rx.recv() => b,
                _ = stop.changed() => return None,
            };
            match batch {
                Ok(batch) => {
                    let event = Event::default().event("batch").data(&*batch);
                    return Some((Ok(event), (rx, stop)));
                }
                // A slow browser misses some moves; the next batch has
                // every vehicle that moved since.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::BoundingBox;

    #[test]
    fn bounding_boxes_parse_and_reject_nonsense() {
        let b: BoundingBox = "24.9,60.15,25.0,60.2".parse().unwrap();
        assert!(b.contains(60.17, 24.95));
        assert!(b.contains(60.15, 24.9), "edges are inside");
        assert!(!b.contains(60.21, 24.95));
        for bad in [
            "",
            "1,2,3",
            "1,2,3,4,5",
            "a,b,c,d",
            "25,60,24,61",
            "24,61,25,60",
            "NaN,1,2,3",
        ] {
            assert!(bad.parse::<BoundingBox>().is_err(), "{bad}");
        }
    }
}
