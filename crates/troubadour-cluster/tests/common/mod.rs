//! What the cluster tests share: a node's remote layer on loopback with
//! mutual TLS, fast failure detection, waiting for a condition under a
//! hang guard, and awaiting many asks at once.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
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

/// Whether `cluster` sees `members` members and balanced shards.
pub fn settled_at(
    system: &ActorSystem,
    cluster: &troubadour_cluster::Cluster,
    members: usize,
) -> bool {
    let status = system.block_on(cluster.status());
    status.is_ok_and(|s| s.members.len() == members && s.balanced)
}

/// Waits until `cond` holds; fails the test after `GUARD`.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < GUARD, "hang guard: {what} never held");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Awaits every future at once; their outputs in order.
pub fn all<F: Future + Unpin>(futures: Vec<F>) -> impl Future<Output = Vec<F::Output>> {
    let mut pending: Vec<Option<F>> = futures.into_iter().map(Some).collect();
    let mut done: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        for (f, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(fut) = f {
                if let Poll::Ready(v) = Pin::new(fut).poll(cx) {
                    *out = Some(v);
                    *f = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            Poll::Ready(done.iter_mut().map(|o| o.take().unwrap()).collect())
        } else {
            Poll::Pending
        }
    })
}
