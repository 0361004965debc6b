//! Discovery of seed nodes: DNS (A/AAAA and SRV, answered by a name
//! server the test runs on loopback, speaking the DNS wire format through
//! hickory's own codec), the Kubernetes API (a stand-in API server that
//! answers the pod list as the real one does), and nodes that find each
//! other through discovery alone, started before any record names them.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::discovery::{
    Discovery, DiscoveryError, DnsSeeds, KubernetesSeeds, StaticSeeds,
};
use troubadour_cluster::{Cluster, ClusterBuilder, MemoryLeaseStore, ShardCount};
use troubadour_remote::dev_certs::DevCa;

use hickory_resolver::proto::op::{Message as DnsMessage, MessageType, OpCode, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, SRV};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

mod common;
use common::{eventually, fast_membership, tls_remote};

// ---- a name server on loopback ---------------------------------------------

/// The records the test's name server answers with, by (name, type).
type Zone = Arc<Mutex<HashMap<(String, RecordType), Vec<RData>>>>;

fn a(ip: [u8; 4]) -> RData {
    RData::A(A(Ipv4Addr::from(ip)))
}

fn srv(priority: u16, port: u16, target: &str) -> RData {
    RData::SRV(SRV::new(
        priority,
        0,
        port,
        Name::from_ascii(target).unwrap(),
    ))
}

/// Serves `zone` over UDP on 127.0.0.1 until the runtime ends; a name it
/// has no records for is NXDOMAIN.
async fn name_server(zone: Zone) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = DnsMessage::from_vec(&buf[..n]) else {
                continue;
            };
            let mut answer =
                DnsMessage::new(query.metadata.id, MessageType::Response, OpCode::Query);
            answer.metadata.recursion_desired = query.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.metadata.authoritative = true;
            let mut known = false;
            for q in &query.queries {
                answer.add_query(q.clone());
                let name = q.name.to_ascii().trim_end_matches('.').to_lowercase();
                let zone = zone.lock().unwrap();
                if zone.keys().any(|(n, _)| *n == name) {
                    known = true;
                }
                for rdata in zone.get(&(name, q.query_type)).into_iter().flatten() {
                    answer.add_answer(Record::from_rdata(q.name.clone(), 1, rdata.clone()));
                }
            }
            if !known {
                answer.metadata.response_code = ResponseCode::NXDomain;
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
        }
    });
    addr
}

fn zone(records: &[(&str, RecordType, RData)]) -> Zone {
    let mut map: HashMap<(String, RecordType), Vec<RData>> = HashMap::new();
    for (name, kind, rdata) in records {
        map.entry((name.to_string(), *kind))
            .or_default()
            .push(rdata.clone());
    }
    Arc::new(Mutex::new(map))
}

#[tokio::test]
async fn dns_gives_every_address_of_a_name_at_the_port() {
    let server = name_server(zone(&[
        ("nodes.test", RecordType::A, a([127, 0, 0, 2])),
        ("nodes.test", RecordType::A, a([127, 0, 0, 3])),
    ]))
    .await;
    let seeds = DnsSeeds::addresses("nodes.test", 7100)
        .unwrap()
        .through(server)
        .unwrap();
    let mut found = seeds.seeds().await.unwrap();
    found.sort();
    assert_eq!(
        found,
        ["127.0.0.2:7100", "127.0.0.3:7100"].map(|s| s.parse::<SocketAddr>().unwrap())
    );
}

#[tokio::test]
async fn dns_srv_gives_each_targets_addresses_at_its_port_most_preferred_first() {
    let server = name_server(zone(&[
        (
            "_cluster._tcp.nodes.test",
            RecordType::SRV,
            srv(20, 7001, "a.nodes.test."),
        ),
        (
            "_cluster._tcp.nodes.test",
            RecordType::SRV,
            srv(10, 7002, "b.nodes.test."),
        ),
        ("a.nodes.test", RecordType::A, a([127, 0, 0, 3])),
        ("b.nodes.test", RecordType::A, a([127, 0, 0, 4])),
    ]))
    .await;
    let seeds = DnsSeeds::srv("_cluster._tcp.nodes.test")
        .unwrap()
        .through(server)
        .unwrap();
    assert_eq!(
        seeds.seeds().await.unwrap(),
        ["127.0.0.4:7002", "127.0.0.3:7001"].map(|s| s.parse::<SocketAddr>().unwrap())
    );
}

#[tokio::test]
async fn an_unknown_name_is_an_error_that_names_it() {
    let server = name_server(zone(&[("nodes.test", RecordType::A, a([127, 0, 0, 2]))])).await;
    let seeds = DnsSeeds::addresses("nowhere.test", 7100)
        .unwrap()
        .through(server)
        .unwrap();
    match seeds.seeds().await {
        Err(e @ DiscoveryError::Dns { .. }) => {
            let said = e.to_string();
            assert!(said.contains("nowhere.test"), "{said}");
        }
        other => panic!("looking up an unknown name gave {other:?}"),
    }
}

// ---- a Kubernetes API server stand-in ----------------------------------------

/// Answers `GET /api/v1/namespaces/prod/pods` with four pods labelled
/// `app=vehicles` (two running with an IP, one pending without, one
/// running but being deleted), only for that label selector; anything
/// else in `prod` is an empty list, and another namespace is forbidden,
/// as the API server says it to a service account without the right.
async fn api_server() -> SocketAddr {
    use axum::extract::{Path, Query};
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Json;

    async fn pods(
        Path(namespace): Path<String>,
        Query(query): Query<HashMap<String, String>>,
    ) -> (StatusCode, Json<serde_json::Value>) {
        if namespace != "prod" {
            return (
                StatusCode::FORBIDDEN,
                Json(serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure",
                    "message": format!("pods is forbidden: User \"system:serviceaccount:prod:vehicles\" cannot list resource \"pods\" in API group \"\" in the namespace \"{namespace}\""),
                    "reason": "Forbidden", "code": 403
                })),
            );
        }
        let pod = |name: &str, phase: &str, ip: Option<&str>, deleting: bool| {
            let mut metadata = serde_json::json!({
                "name": name, "namespace": "prod", "labels": {"app": "vehicles"}
            });
            if deleting {
                metadata["deletionTimestamp"] = "2026-11-25T00:00:00Z".into();
            }
            let mut status = serde_json::json!({ "phase": phase });
            if let Some(ip) = ip {
                status["podIP"] = ip.into();
            }
            serde_json::json!({ "metadata": metadata, "status": status })
        };
        let items = if query.get("labelSelector").map(String::as_str) == Some("app=vehicles") {
            vec![
                pod("vehicles-0", "Running", Some("10.1.0.7"), false),
                pod("vehicles-1", "Pending", None, false),
                pod("vehicles-2", "Running", Some("10.1.0.9"), true),
                pod("vehicles-3", "Running", Some("10.1.0.4"), false),
            ]
        } else {
            Vec::new()
        };
        (
            StatusCode::OK,
            Json(serde_json::json!({
                "kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "7"},
                "items": items
            })),
        )
    }

    let app = axum::Router::new().route("/api/v1/namespaces/{namespace}/pods", get(pods));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn client(api: SocketAddr) -> kube::Client {
    let config = kube::Config::new(format!("http://{api}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn kubernetes_gives_the_running_pods_that_match_the_selector() {
    let api = api_server().await;
    let seeds = KubernetesSeeds::with_client(client(api), "prod", "app=vehicles", 7100);
    assert_eq!(
        seeds.seeds().await.unwrap(),
        ["10.1.0.4:7100", "10.1.0.7:7100"].map(|s| s.parse::<SocketAddr>().unwrap())
    );
    let other = KubernetesSeeds::with_client(client(api), "prod", "app=other", 7100);
    assert_eq!(other.seeds().await.unwrap(), Vec::<SocketAddr>::new());
}

#[tokio::test]
async fn a_forbidden_pod_list_says_what_to_fix() {
    let api = api_server().await;
    let seeds = KubernetesSeeds::with_client(client(api), "staging", "app=vehicles", 7100);
    match seeds.seeds().await {
        Err(e @ DiscoveryError::Kubernetes(_)) => {
            let said = e.to_string();
            assert!(said.contains("forbidden"), "{said}");
            assert!(said.contains("service account"), "{said}");
        }
        other => panic!("a forbidden list gave {other:?}"),
    }
}

// ---- nodes that find each other --------------------------------------------

struct Node {
    system: ActorSystem,
    remote: troubadour_remote::Remote,
    cluster: Cluster,
}

fn node(
    ca: &DevCa,
    name: &str,
    store: &Arc<MemoryLeaseStore>,
    configure: impl FnOnce(ClusterBuilder) -> ClusterBuilder,
) -> Node {
    let system = ActorSystem::builder().name(name).build();
    let remote = tls_remote(&system, ca, "discovered", name, |b| b);
    let builder = Cluster::builder(store.clone())
        .shards(ShardCount::new(16).unwrap())
        .membership(fast_membership());
    let starting = configure(builder).start(&system, &remote);
    let cluster = system.block_on(starting).unwrap();
    Node {
        system,
        remote,
        cluster,
    }
}

fn members(n: &Node) -> usize {
    n.cluster.membership().members().len()
}

/// Three nodes start before DNS names any of them: each is alone. Once
/// the SRV records appear, each node's next look finds the others, and
/// all three are one cluster.
#[test]
fn nodes_started_before_their_records_find_each_other_through_dns() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The lookups run on this runtime (the seeds are made in it).
    let _in_runtime = runtime.enter();
    let records = zone(&[]);
    let server = runtime.block_on(name_server(records.clone()));
    let ca = DevCa::new("discovery test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let nodes: Vec<Node> = ["d0", "d1", "d2"]
        .iter()
        .map(|name| {
            let seeds = DnsSeeds::srv("_cluster._tcp.discovered.test")
                .unwrap()
                .through(server)
                .unwrap();
            node(&ca, name, &store, |b| {
                b.discovery(seeds)
                    .discovery_every(Duration::from_millis(200))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        nodes.iter().all(|n| members(n) == 1),
        "nobody was named yet"
    );
    {
        let mut zone = records.lock().unwrap();
        for (i, n) in nodes.iter().enumerate() {
            let port = n.remote.local_addr().unwrap().port();
            let target = format!("n{i}.discovered.test");
            zone.entry(("_cluster._tcp.discovered.test".into(), RecordType::SRV))
                .or_default()
                .push(srv(10, port, &format!("{target}.")));
            zone.entry((target, RecordType::A))
                .or_default()
                .push(a([127, 0, 0, 1]));
        }
    }
    eventually("the three nodes are one cluster", || {
        nodes.iter().all(|n| members(n) == 3)
    });
}

/// A static list through the builder: the second node joins the first.
#[test]
fn a_static_list_joins_the_node_at_start() {
    let ca = DevCa::new("discovery test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let first = node(&ca, "s0", &store, |b| b);
    let at = first.remote.local_addr().unwrap();
    let second = node(&ca, "s1", &store, |b| b.discovery(StaticSeeds::new([at])));
    eventually("the second node joined the first", || {
        members(&first) == 2 && members(&second) == 2
    });
    drop((first.system, second.system));
}
