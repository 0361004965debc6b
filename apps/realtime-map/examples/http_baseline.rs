//! The benchmark's baseline: the same HTTP stack (axum, same query parsing,
//! same JSON) answering `/vehicle` from a read-only map, with no actors and
//! no MQTT. What this does on a machine bounds what any actor-backed
//! service can do there; `bench/realtime-map/run --impl axum-baseline`
//! measures it beside the services.
//!
//! `cargo run --release -p realtime-map --example http_baseline -- --listen 127.0.0.1:8081 --vehicles 2000`

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use realtime_map::fleet::VehicleState;
use realtime_map::simulator::Simulation;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;

type Table = Arc<HashMap<String, VehicleState>>;

#[derive(Deserialize)]
struct VehicleQuery {
    id: Option<String>,
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn vehicle(State(table): State<Table>, Query(q): Query<VehicleQuery>) -> Response {
    match q.id.as_deref().map(|id| (id, table.get(id))) {
        Some((_, Some(state))) => json(
            StatusCode::OK,
            serde_json::to_vec(state).unwrap_or_default(),
        ),
        Some((id, None)) => json(
            StatusCode::NOT_FOUND,
            format!(r#"{{"error":"no vehicle with id {id}"}}"#).into_bytes(),
        ),
        None => json(
            StatusCode::BAD_REQUEST,
            br#"{"error":"missing query parameter id"}"#.to_vec(),
        ),
    }
}

/// Only what the benchmark's readiness check needs: how many vehicles.
async fn vehicles(State(table): State<Table>) -> Response {
    json(
        StatusCode::OK,
        format!(r#"{{"count":{},"vehicles":[]}}"#, table.len()).into_bytes(),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen = "127.0.0.1:8081".to_string();
    let mut vehicles_n = 2_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            ("--vehicles", Some(v)) => vehicles_n = v.parse()?,
            _ => {
                return Err(format!(
                    "usage: http_baseline [--listen ADDR] [--vehicles N]; got `{a}`"
                )
                .into())
            }
        }
    }
    let mut sim = Simulation::new(vehicles_n, 2026);
    let table: HashMap<String, VehicleState> = (0..sim.len())
        .map(|i| {
            let r = sim.step(i, 1.0, 1_795_248_000_000);
            let p = realtime_map::hfp::parse(&r.payload()).expect("simulated payloads parse");
            let id = p.id.to_string();
            (id, VehicleState::new(p, 1))
        })
        .collect();
    let app = Router::new()
        .route("/vehicle", get(vehicle))
        .route("/vehicles", get(vehicles))
        .with_state(Arc::new(table));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
