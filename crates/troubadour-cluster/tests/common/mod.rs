//! What the real-socket cluster tests share: a node's remote layer on
//! loopback with mutual TLS, fast failure detection, and waiting for a
//! condition under a hang guard.
#![allow(dead_code)]

use std::time::Duration;
use troubadour::prelude::*;
use troubadour_cluster::{with_cluster, MembershipConfig};
use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::{Remote, RemoteBuilder, Security};

pub const GUARD: Duration = Duration::from_secs(60);

/// Node `name`'s remote layer for a cluster named `cluster`, on
/// 127.0.0.1 with a certificate from `ca`; `configure` registers what the
/// test sends.
pub fn tls_remote(
    system: &ActorSystem,
    ca: &DevCa,
    cluster: &str,
    name: &str,
    configure: impl FnOnce(RemoteBuilder) -> RemoteBuilder,
) -> Remote {
    let builder = with_cluster(Remote::builder(
        cluster,
        Security::Tls(ca.tls(name).unwrap()),
    ));
    system
        .block_on(
            configure(builder)
                .listen("127.0.0.1:0".parse().unwrap())
                .start(system),
        )
        .unwrap()
}

/// Failure detection for three nodes on loopback: a lost node is down
/// within about a second.
pub fn fast_membership() -> MembershipConfig {
    MembershipConfig::expected_size(3)
        .probe_period(Duration::from_millis(200))
        .probe_rtt(Duration::from_millis(100))
        .suspect_to_down_after(Duration::from_secs(1))
}

/// Waits until `cond` holds; fails the test after `GUARD`.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < GUARD, "hang guard: {what} never held");
        std::thread::sleep(Duration::from_millis(20));
    }
}
