//! The stores reach PostgreSQL over TLS, verified against the CA the URL
//! names (`sslmode=verify-full&sslrootcert=…`, as libpq spells it): a
//! server that accepts only TLS (Debian's PostgreSQL, started by the test,
//! its certificate made for 127.0.0.1 by a test CA) serves the lease store
//! and the journal; a plaintext URL, a URL that trusts another CA and a
//! URL that asks for TLS without naming a CA are each refused with an
//! error that says why.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use troubadour_cluster::{LeaseStore, NodeKey, PostgresLeaseStore, ShardCount, ShardId};
use troubadour_persistence::{Journal, PostgresStore};
use troubadour_remote::dev_certs::DevCa;

mod postgres;
use postgres::Server;

const TTL: Duration = Duration::from_secs(10);

struct TlsServer {
    server: Server,
    ca_file: tempfile::NamedTempFile,
    other_ca_file: tempfile::NamedTempFile,
}

fn tls_server() -> TlsServer {
    let ca = DevCa::new("database CA").unwrap();
    let (cert, key) = ca
        .node_at("db", &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
        .unwrap();
    let server = Server::start_tls(&cert, &key);
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), ca.pem()).unwrap();
    let other_ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        other_ca_file.path(),
        DevCa::new("another CA").unwrap().pem(),
    )
    .unwrap();
    TlsServer {
        server,
        ca_file,
        other_ca_file,
    }
}

fn with_ca(url: &str, ca: &tempfile::NamedTempFile) -> String {
    format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca.path().display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_store_and_the_journal_work_over_verified_tls() {
    let t = tls_server();
    let url = with_ca(&t.server.url(), &t.ca_file);

    let leases = PostgresLeaseStore::connect(&url).await.unwrap();
    let node = NodeKey::new("a", 1);
    leases.join(ShardCount::new(4).unwrap()).await.unwrap();
    leases.renew(&node, TTL).await.unwrap();
    let claimed = leases.claim(ShardId::new(1), &node, 0).await.unwrap();
    assert_eq!(claimed.epoch, 1);

    let journal = PostgresStore::connect(&url).await.unwrap();
    let fenced = journal.fence("account-1", 1).await.unwrap();
    assert_eq!(fenced.highest, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_another_ca_and_tls_without_a_ca_are_refused() {
    let t = tls_server();

    // The server takes TLS only.
    let plain = PostgresLeaseStore::connect(&t.server.url())
        .await
        .err()
        .unwrap();
    assert!(plain.to_string().contains("no encryption"), "{plain}");

    // A server whose certificate another CA signed is not trusted.
    let stranger = PostgresStore::connect(&with_ca(&t.server.url(), &t.other_ca_file))
        .await
        .err()
        .unwrap();
    assert!(
        stranger.to_string().to_lowercase().contains("certificate"),
        "{stranger}"
    );

    // TLS that verifies nobody is not offered.
    let unverified = PostgresLeaseStore::connect(&format!("{}?sslmode=require", t.server.url()))
        .await
        .err()
        .unwrap();
    assert!(
        unverified.to_string().contains("needs sslrootcert="),
        "{unverified}"
    );
}
