//! What the process tests share: waiting for a condition, HTTP GETs to a
//! node that may be dead.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Waits for `what`; the limit only bounds a broken run.
pub fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "gave up waiting ({limit:?}) until {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP GET; `None` if the node does not answer (it may be dead).
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

pub fn get_json(addr: SocketAddr, path: &str) -> Option<(u16, Value)> {
    let (status, body) = get(addr, path)?;
    Some((status, serde_json::from_str(&body).ok()?))
}
