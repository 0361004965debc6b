//! The observer over HTTP, as an operator's tools meet it: a Prometheus
//! scraper reads `/metrics` (checked with a Prometheus text parser, and
//! in OpenMetrics when asked), the dashboard's page loads with nothing
//! from elsewhere, and its API shows the supervision tree, an actor's
//! restarts with the reason, a search by name, and a live stream.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use troubadour::prelude::*;
use troubadour_observe::Observer;

struct Worker;
impl Actor for Worker {}

struct Work;
impl Message for Work {
    type Reply = ();
}
impl Handler<Work> for Worker {
    fn handle(&mut self, _: Work, _: &mut Context<Self>) {}
}

struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for Worker {
    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!("the worker tripped on a loose cable");
    }
}

/// Spawns `n` named workers, restarted when they fail, and hands them out.
struct Foreman {
    n: usize,
    workers: Vec<ActorRef<Worker>>,
}
impl Actor for Foreman {
    fn started(&mut self, ctx: &mut Context<Self>) {
        for i in 0..self.n {
            let options = SpawnOptions::new()
                .name(format!("worker/{i}"))
                .restart(Restart::Transient);
            self.workers
                .push(ctx.spawn_factory_with_options(options, || Worker).unwrap());
        }
    }
}
struct Workers;
impl Message for Workers {
    type Reply = Vec<ActorRef<Worker>>;
}
impl Handler<Workers> for Foreman {
    fn handle(&mut self, _: Workers, _: &mut Context<Self>) -> Vec<ActorRef<Worker>> {
        self.workers.clone()
    }
}

/// A plain HTTP/1.1 GET; returns the status, the headers and the body.
async fn get(addr: std::net::SocketAddr, path: &str, accept: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

async fn json(addr: std::net::SocketAddr, path: &str) -> serde_json::Value {
    let (status, _, body) = get(addr, path, "application/json").await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// A Prometheus text exposition, parsed.
#[cfg(feature = "remote")]
struct Scraped<'a> {
    text: &'a str,
    scrape: prometheus_parse::Scrape,
}

#[cfg(feature = "remote")]
impl<'a> Scraped<'a> {
    fn parse(text: &'a str) -> Scraped<'a> {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("parses as Prometheus text");
        Scraped { text, scrape }
    }

    /// The value of the sample of `name` with (at least) `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name}: untyped {other:?}"),
            })
            .unwrap_or_else(|| panic!("{name} {labels:?} missing in:\n{}", self.text))
    }
}

struct Running {
    system: ActorSystem,
    observer: Observer,
    addr: std::net::SocketAddr,
    foreman: ActorRef<Foreman>,
    workers: Vec<ActorRef<Worker>>,
}

async fn start(observe: bool) -> Running {
    let builder = ActorSystem::builder().worker_threads(2);
    let system = if observe { builder.observe() } else { builder }.build();
    let observer = Observer::new(system.handle());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn({
        let observer = observer.clone();
        async move { observer.serve(listener).await }
    });
    let foreman = system
        .spawn(Foreman {
            n: 3,
            workers: Vec::new(),
        })
        .unwrap();
    let workers = foreman.ask(Workers).await.unwrap();
    Running {
        system,
        observer,
        addr,
        foreman,
        workers,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_scraper_reads_the_runtime_metrics() {
    let r = start(true).await;
    for _ in 0..7 {
        r.workers[0].tell(Work).unwrap();
    }
    r.workers[0].ask(Work).await.unwrap();

    // The reply to the ask leaves during the turn that handled the eight
    // messages, and a turn's count is added when the turn ends: a scrape
    // may run in between, as a real scraper's may. Scrape until the turn
    // has ended, and check that scrape.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (head, body, scrape) = loop {
        let (status, head, body) = get(r.addr, "/metrics", "text/plain").await;
        assert_eq!(status, 200);
        let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
            .expect("the exposition parses as Prometheus text");
        let turn_ended = scrape.samples.iter().any(|s| {
            s.metric == "troubadour_messages_handled_total"
                && s.labels
                    .get("kind")
                    .is_some_and(|v| v.ends_with("::Worker"))
                && matches!(s.value, prometheus_parse::Value::Counter(v) if v >= 8.0)
        });
        if turn_ended || std::time::Instant::now() > deadline {
            break (head, body, scrape);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let value = |name: &str, label: (&str, &str)| {
        scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name && s.labels.get(label.0).is_some_and(|v| v.ends_with(label.1))
            })
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name} has an untyped value {other:?}: TYPE line missing"),
            })
            .unwrap_or_else(|| panic!("{name}{{{}=~{}}} missing from:\n{body}", label.0, label.1))
    };
    assert_eq!(
        value("troubadour_messages_handled_total", ("kind", "::Worker")),
        8.0
    );
    assert_eq!(value("troubadour_actors_alive", ("kind", "::Worker")), 3.0);
    assert_eq!(value("troubadour_actors_alive", ("kind", "::Foreman")), 1.0);
    assert_eq!(
        value(
            "troubadour_dead_letters_total",
            ("reason", "recipient_stopped")
        ),
        0.0
    );
    for family in [
        "troubadour_restarts_total",
        "troubadour_mailbox_depth",
        "troubadour_scheduler_workers",
        "troubadour_timers_armed",
    ] {
        assert!(scrape.docs.contains_key(family), "no HELP for {family}");
    }
    let workers: f64 = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "troubadour_scheduler_workers")
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v) => v,
            _ => panic!("workers are a gauge"),
        })
        .sum();
    assert_eq!(workers, 2.0, "busy + searching + parked = the workers");

    // OpenMetrics when the scraper asks for it.
    let (_, head, body) = get(
        r.addr,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    )
    .await;
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE troubadour_messages_handled counter\n"));
    assert!(body.contains("troubadour_messages_handled_total{kind="));
    r.observer.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_tree_a_restart_with_its_reason_and_finds_by_name() {
    let r = start(true).await;
    let (status, head, page) = get(r.addr, "/", "text/html").await;
    assert_eq!(status, 200);
    assert!(head.contains("text/html"));
    assert!(page.contains("Supervision tree"));
    assert!(
        !page.contains("http://") && !page.contains("https://") && !page.contains("//cdn"),
        "the page must load nothing from elsewhere"
    );

    // The top level: the foreman (one), with its workers under it.
    let top = json(r.addr, "/api/children").await;
    let groups = top["groups"].as_array().unwrap();
    let foreman_group = groups
        .iter()
        .find(|g| g["short"] == "Foreman")
        .unwrap_or_else(|| panic!("no Foreman at the top level: {top}"));
    assert_eq!(foreman_group["count"], 1);
    let foreman_serial = r.foreman.id().serial();
    let children = json(r.addr, &format!("/api/children?parent={foreman_serial}")).await;
    assert_eq!(children["groups"][0]["short"], "Worker");
    assert_eq!(children["groups"][0]["count"], 3);
    assert_eq!(children["total"], 3);
    let paged = json(
        r.addr,
        &format!("/api/children?parent={foreman_serial}&limit=2"),
    )
    .await;
    assert_eq!(
        paged["actors"].as_array().unwrap().len(),
        2,
        "a page of two"
    );
    assert_eq!(paged["total"], 3);
    let foreman = json(r.addr, &format!("/api/actor?id={foreman_serial}")).await;
    assert_eq!(foreman["children"][0]["short"], "Worker", "{foreman}");
    assert_eq!(foreman["children"][0]["count"], 3);

    // A worker panics; its supervisor restarts it.
    let victim = &r.workers[1];
    victim.tell(Crash).unwrap();
    victim
        .ask(Work)
        .await
        .expect("answered by the restarted worker");
    let detail = json(r.addr, &format!("/api/actor?id={}", victim.id().serial())).await;
    assert_eq!(detail["restarts"], 1, "{detail}");
    assert_eq!(detail["failures"], 1);
    let reason = detail["last_failure"].as_str().unwrap();
    assert!(reason.contains("tripped on a loose cable"), "{reason}");
    assert_eq!(detail["names"][0], "worker/1");
    assert_eq!(detail["parent"], foreman_serial);
    assert!(
        detail["parent_label"]
            .as_str()
            .unwrap()
            .starts_with("Foreman <"),
        "an unnamed supervisor shows as its kind and id: {detail}"
    );

    let found = json(r.addr, "/api/search?q=WORKER/2").await;
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["id"], r.workers[2].id().serial());

    // A stopped actor is gone, with a reason that says what to do.
    r.workers[2].stop();
    r.workers[2].wait_stopped().await;
    let (status, _, body) = get(
        r.addr,
        &format!("/api/actor?id={}", r.workers[2].id().serial()),
        "*/*",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = get(r.addr, "/api/children?parent=notanumber", "*/*").await;
    assert_eq!(status, 400);
    r.observer.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stream_sends_overviews_with_counters_that_move() {
    let r = start(true).await;
    let mut stream = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let request = format!(
        "GET /api/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
        r.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Reads events until `until` holds for one overview's JSON.
    let mut buffer = String::new();
    let mut next_overview = async |stream: &mut tokio::net::TcpStream| loop {
        if let Some(start) = buffer.find("event: overview\ndata: ") {
            let rest = &buffer[start + "event: overview\ndata: ".len()..];
            if let Some(end) = rest.find('\n') {
                let json: serde_json::Value = serde_json::from_str(&rest[..end]).unwrap();
                buffer = rest[end..].to_string();
                return json;
            }
        }
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
            .await
            .expect("an overview at least every interval")
            .unwrap();
        assert!(n > 0, "the stream ended early");
        buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
    };
    let first = next_overview(&mut stream).await;
    assert_eq!(first["actors"], 4, "{first}");
    let handled = |o: &serde_json::Value| {
        o["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["short"] == "Worker")
            .map_or(0, |k| k["handled"].as_u64().unwrap())
    };
    let before = handled(&first);
    for _ in 0..50 {
        r.workers[0].tell(Work).unwrap();
    }
    r.workers[0].ask(Work).await.unwrap();
    loop {
        let o = next_overview(&mut stream).await;
        if handled(&o) >= before + 51 {
            let hottest = o["hottest"].as_array().unwrap();
            if hottest
                .iter()
                .any(|a| a["id"] == r.workers[0].id().serial())
            {
                break;
            }
        }
    }
    // Closing the observer ends the stream, so a graceful shutdown of the
    // server is not held up by an open page.
    r.observer.close();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest))
        .await
        .expect("the stream ends when the observer closes")
        .unwrap();
    drop(r.system);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_observe_the_system_wide_figures_are_still_served() {
    let r = start(false).await;
    r.workers[0].stop();
    r.workers[0].wait_stopped().await;
    let _ = r.workers[0].tell(Work);
    let (_, _, body) = get(r.addr, "/metrics", "text/plain").await;
    assert!(
        !body.contains("troubadour_actors_alive"),
        "no per-kind families"
    );
    assert!(
        body.contains("troubadour_dead_letters_total{reason=\"recipient_stopped\"} 1"),
        "{body}"
    );
    let overview = json(r.addr, "/api/overview").await;
    assert_eq!(overview["observing"], false);
    r.observer.close();
}

/// The remote layer's and the cluster's families parse as Prometheus text
/// too, with the values they were given.
#[cfg(all(feature = "remote", feature = "cluster"))]
#[test]
fn remote_and_cluster_families_parse_as_prometheus_text() {
    use std::sync::atomic::Ordering;
    use troubadour_observe::prometheus::{render_cluster, render_remote, Format};
    let stats = troubadour_remote::RemoteStats::default();
    stats.undecodable.store(2, Ordering::Relaxed);
    stats.connections_lost.store(5, Ordering::Relaxed);
    let status = troubadour_cluster::ClusterStatus {
        node: "node1".into(),
        incarnation: 7,
        lease_valid: true,
        lease_left_ms: Some(2_500),
        leaving: false,
        members: vec!["node1".into(), "node2".into()],
        members_with_lease: vec!["node2".into()],
        shards: vec![troubadour_cluster::ShardStatus { shard: 3, epoch: 5 }],
        entities: 12,
        waiting: 0,
        balanced: true,
        shards_awaited: Some(0),
        failovers: 4,
        activations: 30,
        passivations: 18,
        flushes_given_up: 2,
        lease_renewals: 100,
        lease_renewal_failures: 1,
        lease_renewal_micros_total: 250_000,
        last_lease_renewal_micros: Some(1_500),
        owners: vec![
            troubadour_cluster::OwnerStatus {
                node: "node1".into(),
                incarnation: 7,
                shards: 1,
                lease_valid: true,
            },
            troubadour_cluster::OwnerStatus {
                node: "node2".into(),
                incarnation: 9,
                shards: 63,
                lease_valid: true,
            },
        ],
    };
    let mut text = String::new();
    render_remote(&stats, &[], Format::Text, &mut text);
    render_cluster(&status, Format::Text, &mut text);
    let scraped = Scraped::parse(&text);
    let value = |name: &str, labels: &[(&str, &str)]| scraped.value(name, labels);
    assert_eq!(
        value(
            "troubadour_remote_frames_refused_total",
            &[("reason", "undecodable")]
        ),
        2.0
    );
    assert_eq!(value("troubadour_remote_connections_lost_total", &[]), 5.0);
    assert_eq!(
        value("troubadour_cluster_members", &[("node", "node1")]),
        2.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_shards_owned",
            &[("node", "node1"), ("owner", "node2")]
        ),
        63.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_shard_epoch",
            &[("node", "node1"), ("shard", "3")]
        ),
        5.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_lease_left_seconds",
            &[("node", "node1")]
        ),
        2.5
    );
    assert_eq!(
        value("troubadour_cluster_failovers_total", &[("node", "node1")]),
        4.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_passivations_total",
            &[("node", "node1")]
        ),
        18.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_flushes_given_up_total",
            &[("node", "node1")]
        ),
        2.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_lease_renewals_total",
            &[("node", "node1"), ("outcome", "failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "troubadour_cluster_lease_renewal_seconds_total",
            &[("node", "node1")]
        ),
        0.25
    );
    assert_eq!(
        value(
            "troubadour_cluster_lease_renewal_last_seconds",
            &[("node", "node1")]
        ),
        0.0015
    );
}

/// A store's counters after real writes: events and group commits
/// counted, write latency and batch sizes as Prometheus histograms that
/// parse, a refused write counted as refused.
#[cfg(feature = "persistence")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stores_writes_are_counted_and_parse_as_prometheus_histograms() {
    use troubadour_observe::prometheus::{render_stores, Format};
    use troubadour_persistence::{Append, Journal, SqliteStore, StoredEvent};
    let dir = std::env::temp_dir().join(format!("troubadour-observe-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(dir.join("journal.db")).unwrap();
    let event = |n: u8| StoredEvent {
        type_name: "test.Added".into(),
        version: 1,
        codec: "postcard".into(),
        payload: vec![n],
    };
    store.fence("cart-1", 1).await.unwrap();
    for seq in 1..=3u64 {
        store
            .append(Append {
                persistence_id: "cart-1".into(),
                epoch: 1,
                first_sequence: seq * 2 - 1,
                events: vec![event(1), event(2)],
            })
            .await
            .unwrap();
    }
    // A stale writer is refused by the journal's rules.
    let stale = store
        .append(Append {
            persistence_id: "cart-1".into(),
            epoch: 0,
            first_sequence: 7,
            events: vec![event(3)],
        })
        .await;
    assert!(stale.is_err());
    let stats = store.stats();
    let mut text = String::new();
    render_stores(&[&stats], Format::Text, &mut text);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("parses as Prometheus text");
    let counter = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("store") == Some("sqlite"))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) => v,
                ref other => panic!("{name} is {other:?}, not a counter"),
            })
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
    };
    assert_eq!(counter("troubadour_persistence_events_total"), 6.0);
    assert_eq!(counter("troubadour_persistence_refused_writes_total"), 1.0);
    assert!(counter("troubadour_persistence_commits_total") >= 1.0);
    let histogram = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => buckets.clone(),
                other => panic!("{name} is {other:?}, not a histogram"),
            })
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
    };
    let latency = histogram("troubadour_persistence_write_seconds");
    let all = latency.last().expect("an +Inf bucket");
    assert!(all.less_than.is_infinite());
    assert_eq!(
        all.count, 5.0,
        "the fence, three appends and the refused one"
    );
    let batches = histogram("troubadour_persistence_batch_writes");
    assert!(
        batches.windows(2).all(|w| w[0].count <= w[1].count),
        "cumulative"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// With the remote layer, `/metrics` carries one series per peer for its
/// connection's state and the bytes and frames both ways, and the
/// overview's network panel lists the peer as connected.
#[cfg(feature = "remote")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_peer_of_a_remote_node_has_its_state_and_traffic_in_metrics_and_the_overview() {
    use troubadour_remote::{Remote, Security};
    let alpha = ActorSystem::builder()
        .name("alpha")
        .worker_threads(1)
        .build();
    let beta = ActorSystem::builder()
        .name("beta")
        .worker_threads(1)
        .build();
    let builder = || {
        Remote::builder("observed", Security::PlaintextLoopbackOnly)
            .listen("127.0.0.1:0".parse().unwrap())
    };
    let alpha_remote = builder().start(&alpha).await.unwrap();
    let beta_remote = builder().start(&beta).await.unwrap();
    let beta_node = alpha_remote
        .connect(beta_remote.local_addr().unwrap())
        .await
        .unwrap();
    assert_eq!(beta_node.name(), "beta");
    let observer = Observer::new(alpha.handle()).with_remote(&alpha_remote);
    // The connection's `Hello` has gone both ways.
    let started = std::time::Instant::now();
    while alpha_remote
        .peers()
        .first()
        .is_none_or(|p| p.frames_sent == 0 || p.frames_received == 0)
    {
        assert!(started.elapsed() < Duration::from_secs(30), "hang guard");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let peer = alpha_remote.peers().remove(0);
    let incarnation = format!("{:#x}", beta.node().incarnation());

    let text = observer
        .render_metrics(troubadour_observe::prometheus::Format::Text)
        .await;
    let scraped = Scraped::parse(&text);
    let value = |name: &str, labels: &[(&str, &str)]| scraped.value(name, labels);
    let of_beta = [("peer", "beta"), ("incarnation", incarnation.as_str())];
    let state = |state: &str| {
        value(
            "troubadour_remote_peer_state",
            &[of_beta[0], of_beta[1], ("state", state)],
        )
    };
    assert_eq!(state("connected"), 1.0);
    assert_eq!(state("disconnected"), 0.0);
    assert_eq!(state("down"), 0.0);
    assert_eq!(
        value("troubadour_remote_connections_established_total", &of_beta),
        1.0
    );
    // Counters only grow: at least what was read before rendering.
    assert!(value("troubadour_remote_frames_sent_total", &of_beta) >= peer.frames_sent as f64);
    assert!(value("troubadour_remote_bytes_sent_total", &of_beta) >= peer.bytes_sent as f64);
    assert!(
        value("troubadour_remote_bytes_received_total", &of_beta) >= peer.bytes_received as f64
    );
    assert!(peer.bytes_sent >= 32, "a frame's header at least: {peer:?}");

    let overview = serde_json::to_value(&*observer.overview()).unwrap();
    let peers = overview["network"]["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 1, "{overview}");
    assert_eq!(peers[0]["node"], "beta");
    assert_eq!(peers[0]["state"], "connected");
    assert_eq!(peers[0]["tls"], false);
    assert!(peers[0]["frames_received"].as_u64().unwrap() >= 1);
    observer.close();
    alpha_remote.shutdown();
    beta_remote.shutdown();
}

/// In a cluster, the dashboard's kind view asks every connected node's
/// observer for its actors of the kind: per node how many and the
/// busiest; a node with no observer is listed as unanswered, not waited
/// for forever.
#[cfg(feature = "remote")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_actors_of_a_kind_are_shown_per_node_across_connected_nodes() {
    use troubadour_remote::{Remote, Security};
    let system = |name: &str| {
        ActorSystem::builder()
            .name(name)
            .worker_threads(1)
            .observe()
            .build()
    };
    let (alpha, beta, gamma) = (system("alpha"), system("beta"), system("gamma"));
    let builder = || {
        Remote::builder("observed", Security::PlaintextLoopbackOnly)
            .listen("127.0.0.1:0".parse().unwrap())
    };
    let alpha_remote = builder().start(&alpha).await.unwrap();
    let beta_remote = builder().start(&beta).await.unwrap();
    let gamma_remote = builder().start(&gamma).await.unwrap();
    for other in [&beta_remote, &gamma_remote] {
        alpha_remote
            .connect(other.local_addr().unwrap())
            .await
            .unwrap();
    }
    let alpha_observer = Observer::new(alpha.handle()).with_remote(&alpha_remote);
    let beta_observer = Observer::new(beta.handle()).with_remote(&beta_remote);
    // Gamma has no observer: it cannot answer.
    let workers = |system: &ActorSystem, n: usize| -> Vec<ActorRef<Worker>> {
        (0..n).map(|_| system.spawn(Worker).unwrap()).collect()
    };
    let _on_alpha = workers(&alpha, 1);
    let on_beta = workers(&beta, 3);
    for _ in 0..5 {
        on_beta[1].tell(Work).unwrap();
    }
    on_beta[1].ask(Work).await.unwrap();
    let kind = std::any::type_name::<Worker>();
    // The asked message is counted as its turn ends, just after its reply.
    let started = std::time::Instant::now();
    while beta
        .metrics()
        .kinds
        .iter()
        .find(|k| k.kind == kind)
        .is_none_or(|k| k.messages_handled < 6)
    {
        assert!(started.elapsed() < Duration::from_secs(30), "hang guard");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let view = alpha_observer.kind_across_nodes(kind, 2).await;
    assert_eq!(view.kind, kind);
    let names: Vec<&str> = view.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"], "{view:?}");
    assert!(view.nodes[0].here && !view.nodes[1].here);
    assert_eq!(view.nodes[0].alive, 1);
    let beta_view = &view.nodes[1];
    assert_eq!(beta_view.alive, 3);
    assert_eq!(beta_view.handled, 6);
    assert_eq!(beta_view.actors.len(), 2, "the limit: {beta_view:?}");
    // Busiest first: the worker that handled the six messages.
    assert_eq!(beta_view.actors[0].id, on_beta[1].id().serial());
    assert_eq!(beta_view.actors[0].handled, 6);
    assert_eq!(view.unanswered, ["gamma"]);

    // The same over HTTP, as the page asks.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn({
        let observer = alpha_observer.clone();
        async move { observer.serve(listener).await }
    });
    let path = format!("/api/kind?kind={}", kind.replace(':', "%3A"));
    let body = json(addr, &path).await;
    assert_eq!(body["nodes"][1]["node"], "beta");
    assert_eq!(body["nodes"][1]["alive"], 3);
    let (status, _, _) = get(addr, "/api/kind?kind=", "application/json").await;
    assert_eq!(status, 400);
    alpha_observer.close();
    beta_observer.close();
    for r in [alpha_remote, beta_remote, gamma_remote] {
        r.shutdown();
    }
}
