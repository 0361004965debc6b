//! The operator's view of a node over HTTP/JSON (feature `http`), for a
//! dashboard, a load balancer's health check or a person with `curl`:
//!
//! * `GET /status`: the node's [`ClusterStatus`](crate::ClusterStatus) as JSON (members as
//!   membership sees them, which of them hold a lease, the shards hosted
//!   here with their epochs, the lease's health, whether the node has its
//!   share);
//! * `GET /health`: `200` while the node's lease is valid and it is not
//!   leaving (it may serve its shards), `503` otherwise, with the same
//!   JSON, so a probe sees why;
//! * `GET /ready`: `200` once, besides, the node hosts every shard
//!   placement gives it (`shards_awaited` is 0), `503` while it waits for
//!   them: a readiness probe that lets traffic in when the node serves its
//!   share. A node handing shards over to a newcomer stays ready (it
//!   still serves what it holds), so a joining node never makes the
//!   others unready.
//!
//! Every node serves its own part; a cluster view is every node's.
//!
//! ```no_run
//! # async fn run(cluster: troubadour_cluster::Cluster) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
//! troubadour_cluster::http::serve(cluster, listener).await
//! # }
//! ```

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::cluster::Cluster;

/// The routes `/status`, `/health` and `/ready` for `cluster`, to mount in a
/// service of your own or to [`serve`].
pub fn router(cluster: Cluster) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(cluster)
}

/// Serves [`router`] on `listener` until the process ends (or the
/// listener fails).
pub async fn serve(cluster: Cluster, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router(cluster)).await
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({
        "error": format!("the node's region did not answer: {e}; the actor system may be shutting down"),
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn status(State(cluster): State<Cluster>) -> Response {
    match cluster.status().await {
        Ok(s) => Json(s).into_response(),
        Err(e) => unavailable(e),
    }
}

async fn ready(State(cluster): State<Cluster>) -> Response {
    match cluster.status().await {
        Ok(s) => {
            let code = if s.lease_valid && !s.leaving && s.shards_awaited == Some(0) {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (code, Json(s)).into_response()
        }
        Err(e) => unavailable(e),
    }
}

async fn health(State(cluster): State<Cluster>) -> Response {
    match cluster.status().await {
        Ok(s) => {
            let code = if s.lease_valid && !s.leaving {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (code, Json(s)).into_response()
        }
        Err(e) => unavailable(e),
    }
}
