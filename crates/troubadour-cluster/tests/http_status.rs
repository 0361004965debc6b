//! The operator's view over HTTP/JSON: what a dashboard and a load
//! balancer's health check read from a node.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use troubadour::prelude::*;
use troubadour_cluster::{Cluster, MemoryLeaseStore, ShardCount};
use troubadour_remote::dev_certs::DevCa;

mod common;
use common::{eventually, tls_remote};

/// `GET path` over HTTP/1.1: (status code, body).
fn get(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    (code, serde_json::from_str(body).unwrap())
}

#[test]
fn status_and_health_say_what_the_node_hosts_and_whether_it_may_serve() {
    let ca = DevCa::new("http test CA").unwrap();
    let solo = served(&ca, "solo", &Arc::new(MemoryLeaseStore::new()));
    let (system, cluster, addr) = (&solo.system, &solo.cluster, solo.addr);

    // Alone, the node takes every shard once its lease is granted.
    eventually("the node hosts all 16 shards", || {
        let (_, s) = get(addr, "/status");
        s["shards"].as_array().is_some_and(|a| a.len() == 16)
    });
    let (code, s) = get(addr, "/status");
    assert_eq!(code, 200);
    assert_eq!(s["node"], "solo");
    assert_eq!(s["lease_valid"], true);
    assert_eq!(s["members"], serde_json::json!(["solo"]));
    assert!(s["shards"][0]["epoch"].as_u64().unwrap() >= 1, "{s}");
    let (code, h) = get(addr, "/health");
    assert_eq!((code, &h["lease_valid"]), (200, &serde_json::json!(true)));

    // Once it has left, it may serve nothing: the health check says so.
    system.block_on(cluster.leave()).unwrap();
    let (code, h) = get(addr, "/health");
    assert_eq!(code, 503, "{h}");
    assert_eq!(h["lease_valid"], false);
}

/// A node and its HTTP view, on a lease store shared with others.
struct Served {
    system: ActorSystem,
    remote: troubadour_remote::Remote,
    cluster: Cluster,
    addr: SocketAddr,
}

fn served(ca: &DevCa, name: &str, store: &Arc<MemoryLeaseStore>) -> Served {
    let system = ActorSystem::builder().name(name).build();
    let remote = tls_remote(&system, ca, "ready-test", name, |b| b);
    let cluster = system
        .block_on(
            Cluster::builder(store.clone())
                .shards(ShardCount::new(16).unwrap())
                .lease(
                    std::time::Duration::from_secs(3),
                    std::time::Duration::from_millis(300),
                )
                .membership(common::fast_membership())
                .start(&system, &remote),
        )
        .unwrap();
    let listener = system
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    system
        .tokio_handle()
        .spawn(troubadour_cluster::http::serve(cluster.clone(), listener));
    Served {
        system,
        remote,
        cluster,
        addr,
    }
}

/// Readiness waits for the node's share of the shards: a node is ready
/// once it hosts every shard placement gives it; a node that left is not.
#[test]
fn ready_means_the_node_hosts_its_share_of_the_shards() {
    let ca = DevCa::new("ready test CA").unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let a = served(&ca, "a", &store);
    eventually("a alone is ready", || get(a.addr, "/ready").0 == 200);
    let (_, s) = get(a.addr, "/ready");
    assert_eq!(s["shards"].as_array().unwrap().len(), 16, "{s}");
    assert_eq!(s["shards_awaited"], 0);

    // A second node joins: ready once it hosts its share; both together
    // host every shard once.
    let b = served(&ca, "b", &store);
    let seed = a.remote.local_addr().unwrap();
    b.system
        .block_on(b.cluster.membership().join_addresses(&b.remote, &[seed]));
    eventually("both ready with the shards spread", || {
        let (ca_, sa) = get(a.addr, "/ready");
        let (cb, sb) = get(b.addr, "/ready");
        let hosted = |s: &serde_json::Value| s["shards"].as_array().map_or(0, |a| a.len());
        ca_ == 200 && cb == 200 && hosted(&sb) > 0 && hosted(&sa) + hosted(&sb) == 16
    });
    let (_, sb) = get(b.addr, "/ready");
    assert_eq!(sb["shards_awaited"], 0, "{sb}");

    // B leaves: not ready any more; A takes everything back and is ready.
    b.system.block_on(b.cluster.leave()).unwrap();
    let (code, sb) = get(b.addr, "/ready");
    assert_eq!(code, 503, "{sb}");
    eventually("a hosts all 16 again", || {
        let (code, s) = get(a.addr, "/ready");
        code == 200 && s["shards"].as_array().is_some_and(|x| x.len() == 16)
    });
    drop(a);
}
