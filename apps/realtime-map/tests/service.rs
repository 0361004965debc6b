//! The service end to end, in-process: positions published over MQTT,
//! answers read over HTTP.

use realtime_map::fleet::{vehicle_name, Vehicle};
use realtime_map::hfp::{self, Report};
use realtime_map::ingest::{self, Broker};
use realtime_map::{App, Config, SimulatorConfig};
use rumqttc::{AsyncClient, Event, Packet, QoS};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config() -> Config {
    Config {
        listen: ([127, 0, 0, 1], 0).into(),
        broker_listen: ([127, 0, 0, 1], 0).into(),
        mqtt: None,
        simulator: None,
        idle: Duration::from_secs(60),
        workers: Some(2),
        dashboard: realtime_map::Dashboard::Mounted,
        debug_faults: true,
    }
}

/// Waits for `what` to hold; the deadline only bounds a broken run.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..3_000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting (30 s) until {what}");
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(addr, "GET", path).await
}

/// One HTTP/1.1 request with an empty body; the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response[9..12].parse().expect("status code");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = get(addr, path).await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: `{body}`: {e}"));
    (status, json)
}

/// A publisher connected to the app's broker.
async fn publisher(broker: &Broker) -> AsyncClient {
    let (client, mut events) = ingest::client(broker, &format!("test-publisher-{}", rand_id()));
    let (connected, is_connected) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut connected = Some(connected);
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    if let Some(tx) = connected.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(_) => {}
                // Not listening yet: rumqttc reconnects on the next poll.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    is_connected
        .await
        .expect("publisher connects to the broker");
    client
}

fn rand_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn report(veh: u32, lat: f64, long: f64, unix_ms: i64) -> Report<'static> {
    Report {
        oper: 22,
        veh,
        route: "1055",
        line: "55",
        dir: 1,
        headsign: "Rautatientori",
        lat,
        long,
        speed: 7.5,
        heading: 45.0,
        unix_ms,
    }
}

async fn publish(client: &AsyncClient, r: &Report<'_>) {
    client
        .publish(r.topic(), QoS::AtLeastOnce, false, r.payload())
        .await
        .expect("publish");
}

async fn publish_raw(client: &AsyncClient, payload: &[u8]) {
    client
        .publish(
            "/hfp/v2/journey/ongoing/vp/bus/0001/00001/x/1/x/00:00/1/4/",
            QoS::AtLeastOnce,
            false,
            payload.to_vec(),
        )
        .await
        .expect("publish");
}

const T0: i64 = 1_795_248_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vehicles_answer_with_what_was_published() {
    let app = App::start(config()).await.expect("start");
    let http = app.http_addr();
    let client = publisher(app.broker()).await;
    for (i, (lat, long)) in [(60.17, 24.94), (60.171, 24.941), (60.172, 24.942)]
        .into_iter()
        .enumerate()
    {
        publish(&client, &report(1043, lat, long, T0 + i as i64 * 1000)).await;
    }
    publish(&client, &report(7, 60.25, 25.01, T0)).await;
    let m = app.metrics().clone();
    eventually("4 positions are applied", || {
        m.positions_handled.load(Relaxed) == 4
    })
    .await;

    let (status, v) = get_json(http, "/vehicle?id=22/1043").await;
    assert_eq!(status, 200, "{v}");
    let expected = serde_json::json!({
        "id": "22/1043", "route": "1055", "line": "55", "lat": 60.172, "long": 24.942,
        "speed": 7.5, "heading": 45.0, "timestamp": "2026-11-21T08:00:02.000Z", "updates": 3
    });
    assert_eq!(v, expected);

    let (status, v) = get_json(http, "/vehicle?id=22/9999").await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("no vehicle with id 22/9999"))
    );
    let (status, v) = get_json(http, "/vehicle").await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("missing query parameter id"))
    );
    let (status, _) = get_json(http, "/vehicle?id=").await;
    assert_eq!(status, 400);

    // Only 22/7 is north of 60.2.
    let (status, v) = get_json(http, "/vehicles?bbox=24.9,60.2,25.1,60.3").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["count"], 1);
    assert_eq!(v["vehicles"][0]["id"], "22/7");
    let (_, v) = get_json(http, "/vehicles?bbox=-180,-90,180,90").await;
    assert_eq!(v["count"], 2);
    for bad in [
        "/vehicles",
        "/vehicles?bbox=1,2,3",
        "/vehicles?bbox=25,60,24,61",
    ] {
        let (status, v) = get_json(http, bad).await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("bbox")),
            "{v}"
        );
    }

    let (status, text) = get(http, "/metrics").await;
    assert_eq!(status, 200);
    assert!(text.contains("realtime_map_vehicles_alive 2\n"), "{text}");
    assert!(
        text.contains("realtime_map_positions_handled_total 4\n"),
        "{text}"
    );
    assert!(text.contains("realtime_map_http_request_duration_seconds_count{route=\"/vehicle\"}"));
    assert_eq!(app.metrics().http_5xx(), 0);
    app.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_payloads_are_counted_and_break_nothing() {
    let app = App::start(config()).await.expect("start");
    let client = publisher(app.broker()).await;
    publish_raw(&client, b"garbage").await;
    publish_raw(&client, br#"{"VP":{"veh":1,"lat":60.0,"long":24.0}}"#).await;
    publish_raw(
        &client,
        br#"{"VP":{"oper":1,"veh":1,"lat":600.0,"long":24.0}}"#,
    )
    .await;
    publish(&client, &report(5, 60.2, 24.9, T0)).await;
    let m = app.metrics().clone();
    eventually("the valid position is applied", || {
        m.positions_handled.load(Relaxed) == 1
    })
    .await;
    eventually("3 malformed payloads are counted", || {
        m.malformed.load(Relaxed) == 3
    })
    .await;
    let (_, text) = get(app.http_addr(), "/metrics").await;
    assert!(
        text.contains("realtime_map_malformed_payloads_total 3\n"),
        "{text}"
    );
    let (status, v) = get_json(app.http_addr(), "/vehicle?id=22/5").await;
    assert_eq!((status, v["lat"].as_f64()), (200, Some(60.2)));
    app.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_vehicles_passivate_and_come_back_on_their_next_position() {
    let app = App::start(Config {
        idle: Duration::from_millis(200),
        ..config()
    })
    .await
    .expect("start");
    let client = publisher(app.broker()).await;
    let m = app.metrics().clone();
    publish(&client, &report(9, 60.2, 24.9, T0)).await;
    publish(&client, &report(9, 60.21, 24.91, T0 + 1000)).await;
    eventually("the vehicle is passivated", || {
        m.vehicles_passivated.load(Relaxed) == 1
    })
    .await;
    eventually("no vehicle is alive", || {
        m.vehicles_alive.load(Relaxed) == 0
    })
    .await;
    let (status, _) = get_json(app.http_addr(), "/vehicle?id=22/9").await;
    assert_eq!(status, 404, "a passivated vehicle is not running");

    publish(&client, &report(9, 60.22, 24.92, T0 + 2000)).await;
    eventually("it is created again", || {
        m.vehicles_spawned.load(Relaxed) == 2
    })
    .await;
    eventually("its position is applied", || {
        m.positions_handled.load(Relaxed) == 3
    })
    .await;
    let (status, v) = get_json(app.http_addr(), "/vehicle?id=22/9").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["lat"], 60.22);
    assert_eq!(v["updates"], 1, "a fresh incarnation: {v}");
    assert_eq!(app.system().dead_letter_count(), 0, "no position was lost");
    app.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_racing_a_passivation_reach_the_next_incarnation() {
    // Positions every 100 ms against a 50 ms idle time: passivations keep
    // overlapping with positions in flight. None may be lost.
    let app = App::start(Config {
        idle: Duration::from_millis(50),
        ..config()
    })
    .await
    .expect("start");
    let client = publisher(app.broker()).await;
    let m = app.metrics().clone();
    for i in 0..30 {
        publish(
            &client,
            &report(11, 60.2 + i as f64 * 1e-4, 24.9, T0 + i * 1000),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(if i % 3 == 0 { 100 } else { 5 })).await;
    }
    eventually("every position is applied", || {
        m.positions_handled.load(Relaxed) == 30
    })
    .await;
    assert!(
        m.vehicles_passivated.load(Relaxed) >= 1,
        "the test exercised passivation"
    );
    assert_eq!(
        app.system().dead_letter_count(),
        0,
        "no position went to a stopped vehicle"
    );
    app.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_vehicle_is_restarted_by_the_fleet() {
    let app = App::start(config()).await.expect("start");
    let client = publisher(app.broker()).await;
    let m = app.metrics().clone();
    publish(&client, &report(3, 60.2, 24.9, T0)).await;
    eventually("the vehicle exists", || {
        m.positions_handled.load(Relaxed) == 1
    })
    .await;
    let vehicle = app
        .system()
        .whereis::<Vehicle>(&vehicle_name("22/3"))
        .expect("registered under its name");
    // A position for another bus breaks the vehicle's invariant: it fails.
    let stray = hfp::parse(&report(4, 60.0, 24.0, T0).payload()).expect("valid");
    vehicle.tell(stray).expect("alive");
    eventually("the fleet restarts it", || {
        m.vehicle_restarts.load(Relaxed) == 1
    })
    .await;
    let (status, v) = get_json(app.http_addr(), "/vehicle?id=22/3").await;
    assert_eq!(status, 404, "state is rebuilt from the next position: {v}");

    publish(&client, &report(3, 60.3, 24.9, T0 + 1000)).await;
    eventually("the next position is applied", || {
        m.positions_handled.load(Relaxed) == 3
    })
    .await;
    let (status, v) = get_json(app.http_addr(), "/vehicle?id=22/3").await;
    assert_eq!(
        (status, v["lat"].as_f64(), v["updates"].as_u64()),
        (200, Some(60.3), Some(1))
    );
    let again = app
        .system()
        .whereis::<Vehicle>(&vehicle_name("22/3"))
        .expect("still registered");
    assert_eq!(
        again.id(),
        vehicle.id(),
        "a restart keeps the actor's identity"
    );
    assert_eq!(m.vehicles_spawned.load(Relaxed), 1);
    app.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_dashboard_shows_the_fleet_its_vehicles_and_a_panicked_one() {
    let app = App::start(config()).await.expect("start");
    let addr = app.http_addr();
    assert_eq!(app.dashboard_url(), format!("http://{addr}/dashboard"));
    let client = publisher(app.broker()).await;
    let m = app.metrics().clone();
    for veh in 1..=3 {
        publish(&client, &report(veh, 60.2, 24.9, T0)).await;
    }
    eventually("three vehicles exist", || {
        m.positions_handled.load(Relaxed) == 3
    })
    .await;

    let (status, page) = get(addr, "/dashboard").await;
    assert_eq!(status, 200);
    assert!(page.contains("Supervision tree"));
    let (status, _) = get(addr, "/dashboard/").await;
    assert_eq!(status, 308, "the trailing slash redirects to the page");

    // The fleet at the top level, its vehicles under it.
    let (_, top) = get_json(addr, "/dashboard/api/children").await;
    let fleet = top["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["short"] == "Fleet")
        .unwrap_or_else(|| panic!("no Fleet at the top level: {top}"))
        .clone();
    assert_eq!(fleet["count"], 1);
    let (_, fleets) = get_json(
        addr,
        &format!(
            "/dashboard/api/children?kind={}",
            fleet["kind"].as_str().unwrap()
        ),
    )
    .await;
    let fleet_id = fleets["actors"][0]["id"].as_u64().unwrap();
    assert_eq!(fleets["actors"][0]["name"], "fleet");
    let (_, vehicles) = get_json(addr, &format!("/dashboard/api/children?parent={fleet_id}")).await;
    assert_eq!(vehicles["groups"][0]["short"], "Vehicle");
    assert_eq!(vehicles["groups"][0]["count"], 3);

    // A vehicle made to panic is restarted by the fleet; the dashboard
    // shows the restart and why.
    let (status, body) = request(addr, "POST", "/debug/panic?id=22/2").await;
    assert_eq!(status, 202, "{body}");
    eventually("the fleet restarts it", || {
        m.vehicle_restarts.load(Relaxed) == 1
    })
    .await;
    let serial = app
        .system()
        .whereis::<Vehicle>(&vehicle_name("22/2"))
        .expect("registered")
        .id()
        .serial();
    let (status, detail) = get_json(addr, &format!("/dashboard/api/actor?id={serial}")).await;
    assert_eq!(status, 200);
    assert_eq!(detail["restarts"], 1, "{detail}");
    assert_eq!(detail["parent"], fleet_id);
    assert_eq!(
        detail["parent_label"], "fleet",
        "a named supervisor shows by name"
    );
    let reason = detail["last_failure"].as_str().unwrap_or_default();
    assert!(reason.contains("injected fault"), "{detail}");

    // /metrics carries the runtime's families beside the service's.
    let (_, metrics) = get(addr, "/metrics").await;
    assert!(metrics.contains("realtime_map_positions_handled_total"));
    let vehicles_alive = metrics
        .lines()
        .find(|l| l.starts_with("troubadour_actors_alive{kind=\"realtime_map::fleet::Vehicle\"}"))
        .unwrap_or_else(|| panic!("no runtime metrics for vehicles in:\n{metrics}"));
    assert!(vehicles_alive.ends_with(" 3"), "{vehicles_alive}");
    assert!(metrics.contains("troubadour_restarts_total{kind=\"realtime_map::fleet::Vehicle\"} 1"));
    app.shutdown().await.expect("clean shutdown");
}

/// Records every payload published on the broker, by vehicle id.
async fn record(broker: &Broker) -> Arc<Mutex<HashMap<String, Vec<hfp::Position>>>> {
    let seen: Arc<Mutex<HashMap<String, Vec<hfp::Position>>>> = Arc::default();
    let (client, mut events) = ingest::client(broker, &format!("test-recorder-{}", rand_id()));
    let (subscribed, is_subscribed) = tokio::sync::oneshot::channel();
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut subscribed = Some(subscribed);
        loop {
            let Ok(event) = events.poll().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match event {
                Event::Incoming(Packet::ConnAck(_)) => {
                    let _ = client.subscribe(hfp::TOPIC_FILTER, QoS::AtMostOnce).await;
                }
                Event::Incoming(Packet::SubAck(_)) => {
                    if let Some(tx) = subscribed.take() {
                        let _ = tx.send(());
                    }
                }
                Event::Incoming(Packet::Publish(p)) => {
                    if let Ok(pos) = hfp::parse(&p.payload) {
                        let mut seen = sink.lock().unwrap_or_else(|e| e.into_inner());
                        seen.entry(pos.id.to_string()).or_default().push(pos);
                    }
                }
                _ => {}
            }
        }
    });
    is_subscribed.await.expect("recorder subscribes");
    seen
}

/// Checks that the service's answer for every simulated vehicle is one of
/// the positions the simulator published for it.
async fn answers_match_published(app: &App, seen: &Mutex<HashMap<String, Vec<hfp::Position>>>) {
    for id in app.vehicle_ids() {
        let (status, v) = get_json(app.http_addr(), &format!("/vehicle?id={id}")).await;
        assert_eq!(status, 200, "{id}: {v}");
        // The recorder sees each publish at about the same time as the
        // service; give it a moment to catch up with the answer.
        let mut matching = None;
        for _ in 0..500 {
            matching = {
                let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                let published = seen.get(id).map(Vec::as_slice).unwrap_or_default();
                published
                    .iter()
                    .find(|p| p.timestamp == v["timestamp"])
                    .cloned()
            };
            if matching.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let p = matching
            .unwrap_or_else(|| panic!("{id}: answer {v} is none of the published positions"));
        assert_eq!(
            (v["lat"].as_f64(), v["long"].as_f64()),
            (Some(p.lat), Some(p.long)),
            "{id}"
        );
        assert_eq!(
            (v["route"].as_str(), v["line"].as_str()),
            (Some(&*p.route), Some(&*p.line))
        );
    }
}

/// Starts the service with `vehicles` simulated buses publishing to
/// `broker`, waits until each has an actor and has reported a few times,
/// and checks every answer against what was published.
async fn simulate_and_check(broker: Broker, vehicles: usize, seed: u64) -> App {
    let seen = record(&broker).await;
    let app = App::start(Config {
        mqtt: Some(broker),
        simulator: Some(SimulatorConfig {
            vehicles,
            seed,
            period: Duration::from_millis(200),
        }),
        ..config()
    })
    .await
    .expect("start");
    let m = app.metrics().clone();
    eventually("every simulated bus has an actor", || {
        m.vehicles_alive.load(Relaxed) == vehicles as i64
    })
    .await;
    eventually("each has reported a few times", || {
        m.positions_handled.load(Relaxed) >= 3 * vehicles as u64
    })
    .await;
    answers_match_published(&app, &seen).await;
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_buses_are_served_as_published() {
    // Publishing starts with the app, so record from an external broker
    // that exists before it: the embedded broker of a first app.
    let broker_app = App::start(config()).await.expect("broker");
    let broker = broker_app.broker().clone();
    let app = simulate_and_check(broker, 30, 5).await;
    let (_, v) = get_json(app.http_addr(), "/vehicles?bbox=-180,-90,180,90").await;
    assert_eq!(v["count"], 30);
    app.shutdown().await.expect("clean shutdown");
    broker_app.shutdown().await.expect("clean shutdown");
}

/// A mosquitto started for one test, stopped when dropped.
struct Mosquitto(std::process::Child);

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_against_a_real_mosquitto() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let binary = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect(
            "mosquitto is not installed: `apt-get install mosquitto` (scripts/test installs it)",
        );
    let _mosquitto = Mosquitto(
        std::process::Command::new(binary)
            .args(["-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start mosquitto"),
    );
    let broker: Broker = format!("mqtt://127.0.0.1:{port}").parse().expect("url");
    // mosquitto takes a moment to listen; the app's subscriber retries.
    let app = simulate_and_check(broker, 20, 9).await;
    app.shutdown().await.expect("clean shutdown");
}

/// The binary as a user runs it: it prints the URL, serves, and on Ctrl-C
/// (SIGINT) shuts down cleanly with exit status 0.
#[test]
fn the_binary_serves_and_stops_cleanly_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_realtime-map"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--broker-listen",
            "127.0.0.1:0",
            "--vehicles",
            "50",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the binary");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split_whitespace()
                .skip_while(|w| *w != "open")
                .nth(1)
                .map(str::to_string)
        })
        .expect("the binary prints `open <url>`");
    // The binary prints more after the URL (the dashboard's address): keep
    // reading, as a terminal would, so that it never writes into a closed
    // pipe (it would die of it, and every request here be refused).
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("the URL names an address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (status, page) = get(addr, "/").await;
        assert_eq!(status, 200);
        assert!(page.contains("<canvas"), "the map page is served");
        for _ in 0..3_000 {
            let (_, v) = get_json(addr, "/vehicles?bbox=-180,-90,180,90").await;
            if v["count"] == 50 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the 50 simulated buses did not all appear within 30 s");
    });
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("send SIGINT");
    assert!(interrupted.success());
    let status = child.wait().expect("wait for the binary");
    assert!(status.success(), "exit status after Ctrl-C: {status}");
}
