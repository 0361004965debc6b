//! The dashboard and metrics over HTTP: one page with everything in it (no
//! CDN), a JSON API it reads, a live stream of overviews, and `/metrics`.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the dashboard page |
//! | `GET /metrics` | Prometheus text, or OpenMetrics when the scraper's `Accept` asks |
//! | `GET /api/overview` | [`Overview`](crate::Overview) as JSON |
//! | `GET /api/events` | server-sent events: an `overview` at each sample |
//! | `GET /api/children?parent=&kind=&offset=&limit=` | [`Children`](crate::Children) (`parent` omitted: the top level) |
//! | `GET /api/actor?id=` | [`ActorDetail`](crate::ActorDetail), `404` once it stopped |
//! | `GET /api/search?q=&limit=` | actors by name or kind |
//! | `GET /api/kind?kind=&limit=` | [`KindAcrossNodes`](crate::KindAcrossNodes): one kind on this node and every connected node |
//!
//! Mount it under a prefix (`Router::nest("/dashboard", observer.router())`)
//! or serve it on an address of its own ([`Observer::serve`]); the page
//! uses relative links, so both work. Nothing here exposes a message's
//! contents: dead letters show their type and reason only.

use crate::observer::Observer;
use crate::prometheus::Format;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use std::convert::Infallible;
use tokio::sync::broadcast;
use troubadour::ActorId;

const PAGE: &str = include_str!("../assets/dashboard.html");
/// Rows per page at most, whatever a request asks.
const MAX_PAGE: usize = 500;

impl Observer {
    /// The dashboard's routes (table in the [module docs](crate::http)).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/metrics", get(metrics))
            .route("/api/overview", get(overview))
            .route("/api/events", get(events))
            .route("/api/children", get(children))
            .route("/api/actor", get(actor))
            .route("/api/search", get(search))
            .route("/api/kind", get(kind))
            .with_state(self.clone())
    }

    /// Serves [`router`](Self::router) on `listener` until
    /// [`close`](Self::close) is called (or the listener fails). Bind it to
    /// loopback unless operators must reach it from elsewhere: the page
    /// shows the system's inner workings.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let mut closed = self.shared.closed.subscribe();
        axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                let _ = closed.wait_for(|c| *c).await;
            })
            .await
    }
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn metrics(State(observer): State<Observer>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    (
        [(header::CONTENT_TYPE, format.content_type())],
        observer.render_metrics(format).await,
    )
        .into_response()
}

async fn overview(State(observer): State<Observer>) -> Response {
    Json(&*observer.overview()).into_response()
}

async fn events(
    State(observer): State<Observer>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let first = serde_json::to_string(&*observer.overview()).unwrap_or_default();
    let rx = observer.shared.overviews.subscribe();
    let closed = observer.shared.closed.subscribe();
    let state = (Some(first), rx, closed);
    let stream = futures_util::stream::unfold(state, |(first, mut rx, mut closed)| async move {
        if let Some(json) = first {
            let event = Event::default().event("overview").data(json);
            return Some((Ok(event), (None, rx, closed)));
        }
        loop {
            let next = tokio::select! {
                n = rx.recv() => n,
                _ = closed.wait_for(|c| *c) => return None,
            };
            match next {
                Ok(json) => {
                    let event = Event::default().event("overview").data(&*json);
                    return Some((Ok(event), (None, rx, closed)));
                }
                // A slow browser skips to the newest overview.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
struct ChildrenQuery {
    parent: Option<u64>,
    kind: Option<String>,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}

async fn children(State(observer): State<Observer>, Query(q): Query<ChildrenQuery>) -> Response {
    let parent = match q.parent {
        None => None,
        Some(serial) => match ActorId::on(&observer.system().node(), serial) {
            Some(id) => Some(id),
            None => {
                return bad_request(format!(
                    "parent={serial} is not an actor serial of this node; take ids from /api/overview or /api/children"
                ))
            }
        },
    };
    let limit = q.limit.unwrap_or(50).min(MAX_PAGE);
    let kind = q.kind.as_deref().filter(|k| !k.is_empty());
    Json(observer.children(parent, kind, q.offset, limit)).into_response()
}

#[derive(Deserialize)]
struct ActorQuery {
    id: u64,
}

async fn actor(State(observer): State<Observer>, Query(q): Query<ActorQuery>) -> Response {
    match observer.actor(q.id) {
        Some(detail) => Json(detail).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "error": format!("no live actor {} on this node: it stopped, or the system does not observe its actors (ActorSystemBuilder::observe)", q.id)
            })),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct SearchQuery {
    q: String,
    limit: Option<usize>,
}

async fn search(State(observer): State<Observer>, Query(q): Query<SearchQuery>) -> Response {
    let limit = q.limit.unwrap_or(50).min(MAX_PAGE);
    Json(observer.search(&q.q, limit)).into_response()
}

#[derive(Deserialize)]
struct KindQuery {
    kind: String,
    limit: Option<usize>,
}

async fn kind(State(observer): State<Observer>, Query(q): Query<KindQuery>) -> Response {
    if q.kind.is_empty() {
        return bad_request(
            "kind= is empty: give a kind's full type name, as /api/overview lists them".into(),
        );
    }
    let limit = q.limit.unwrap_or(10).min(crate::kinds::MAX_ACTORS);
    Json(observer.kind_across_nodes(&q.kind, limit).await).into_response()
}
