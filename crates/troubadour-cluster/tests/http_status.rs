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
    let system = ActorSystem::builder().name("solo").build();
    let remote = tls_remote(&system, &ca, "http-test", "solo", |b| b);
    let store = Arc::new(MemoryLeaseStore::new());
    let cluster = system
        .block_on(
            Cluster::builder(store)
                .shards(ShardCount::new(16).unwrap())
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
