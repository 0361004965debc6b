//! Establishing connections over 127.0.0.1: mutual TLS with certificates
//! made here by rcgen, the handshake exchange, and every refusal.
//!
//! Waits in the tests are hang guards only ([`GUARD`]); the one timeout
//! under test is the endpoint's own, configured short.

mod common;

use common::Ca;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use troubadour_remote::codec::{decode_payload, DEFAULT_MAX_DEPTH};
use troubadour_remote::connection::{
    ConfigError, ConnectError, Connection, DeclaredDown, Endpoint, Listener, Security, TlsConfig,
};
use troubadour_remote::frame::{
    FrameDecoder, FrameError, Header, Kind, Lane, Limits, HEADER_LEN, MAGIC, VERSION,
};
use troubadour_remote::handshake::{Handshake, HANDSHAKE_REFUSED, PROTOCOL_VERSION};

/// Hang guard: far longer than anything here takes.
const GUARD: Duration = Duration::from_secs(60);
const CLUSTER: &str = "test-cluster";

fn endpoint(cluster: &str, name: &str, incarnation: u64, tls: TlsConfig) -> Endpoint {
    Endpoint::new(cluster, name, incarnation, Security::Tls(tls))
}

fn localhost() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

async fn guard<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(GUARD, f).await.expect("hang guard")
}

/// Binds `ep` on loopback and establishes the first incoming connection
/// in a task; returns the listener's address and the task.
async fn serve_one(
    ep: &Endpoint,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<Connection, ConnectError>>,
) {
    let listener: Listener = ep.listen(localhost()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { listener.accept().await.unwrap().establish().await });
    (addr, task)
}

/// A raw TLS client (not an `Endpoint`): `cert` is its (chain, key) or
/// none; it trusts `ca`.
async fn raw_client(
    addr: SocketAddr,
    ca: &Ca,
    cert: Option<(String, String)>,
) -> TlsStream<TcpStream> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match cert {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(chain.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

fn handshake_bytes(h: &Handshake) -> Vec<u8> {
    let mut out = Vec::new();
    h.encode(&mut out, &Limits::default()).unwrap();
    out
}

#[tokio::test]
async fn good_handshake_reports_each_peer_to_the_other() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 11, ca.tls("a", &ca));
    let b = endpoint(CLUSTER, "b", 22, ca.tls("b", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let dialled = guard(b.connect(addr, "localhost")).await.unwrap();
    let accepted = guard(accepted).await.unwrap().unwrap();

    assert!(dialled.is_tls() && accepted.is_tls());
    assert_eq!(dialled.peer().node_name, "a");
    assert_eq!(dialled.peer().incarnation, 11);
    assert!(dialled.peer().certificate.is_some());
    assert_eq!(accepted.peer().node_name, "b");
    assert_eq!(accepted.peer().incarnation, 22);
    assert!(accepted.peer().certificate.is_some());

    // The established streams carry bytes both ways.
    let (mut ds, _, _) = dialled.into_parts();
    let (mut acc, _, _) = accepted.into_parts();
    guard(ds.write_all(b"ping")).await.unwrap();
    let mut buf = [0u8; 4];
    guard(acc.read_exact(&mut buf)).await.unwrap();
    assert_eq!(&buf, b"ping");
}

#[tokio::test]
async fn a_peer_without_a_certificate_is_refused() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let (addr, accepted) = serve_one(&a).await;

    // TLS 1.3: the client's side finishes before the server checked it;
    // the refusal is the server's.
    let mut client = guard(raw_client(addr, &ca, None)).await;
    let _ = guard(client.write_all(&handshake_bytes(&Handshake {
        cluster: CLUSTER.into(),
        protocol_version: PROTOCOL_VERSION,
        node_name: "anonymous".into(),
        incarnation: 1,
    })))
    .await;
    let _ = guard(client.read(&mut [0u8; 64])).await;

    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectError::PeerCertificateMissing), "{err}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let ca = Ca::new("cluster CA");
    let other = Ca::new("another CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    // Trusts our CA (so it accepts a's certificate) but its own is other's.
    let intruder = endpoint(CLUSTER, "intruder", 1, other.tls("intruder", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let dialled = guard(intruder.connect(addr, "localhost")).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::UnknownIssuer
            }
        ),
        "{err}"
    );
    // The dialling side learns it was refused, and never has a connection.
    let err = dialled.unwrap_err();
    assert!(matches!(err, ConnectError::RefusedByPeer { .. }), "{err}");
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let ca = Ca::new("cluster CA");
    let other = Ca::new("another CA");
    let impostor = endpoint(CLUSTER, "impostor", 1, other.tls("impostor", &ca));
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let (addr, _accepted) = serve_one(&impostor).await;

    let err = guard(b.connect(addr, "localhost")).await.unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::UnknownIssuer
            }
        ),
        "{err}"
    );
}

/// A node whose certificate the cluster revoked is refused both ways: it
/// can neither dial a node that holds the revocation list nor be dialled
/// by one. A node the list does not name still connects both ways.
#[tokio::test]
async fn a_revoked_certificate_is_refused_by_both_sides() {
    let ca = Ca::new("cluster CA");
    let revoked = endpoint(CLUSTER, "revoked", 1, ca.tls("revoked", &ca));
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let list = ca.revocation_list(&["revoked"]);
    let a = endpoint(CLUSTER, "a", 1, ca.tls_revoking("a", &list));
    let is_revoked = |err: &ConnectError| {
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::Revoked
            }
        )
    };

    // The revoked node dials `a`.
    let (addr, accepted) = serve_one(&a).await;
    let dialled = guard(revoked.connect(addr, "localhost")).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(is_revoked(&err), "{err}");
    assert!(err.to_string().contains("revoked"), "{err}");
    let err = dialled.unwrap_err();
    assert!(matches!(err, ConnectError::RefusedByPeer { .. }), "{err}");

    // `a` dials the revoked node.
    let (addr, _accepted) = serve_one(&revoked).await;
    let err = guard(a.connect(addr, "localhost")).await.unwrap_err();
    assert!(is_revoked(&err), "{err}");

    // `b`, not on the list, connects either way.
    let (addr, accepted) = serve_one(&a).await;
    let dialled = guard(b.connect(addr, "localhost")).await.unwrap();
    assert_eq!(dialled.peer().node_name, "a");
    assert_eq!(
        guard(accepted).await.unwrap().unwrap().peer().node_name,
        "b"
    );
    let (addr, accepted) = serve_one(&b).await;
    let dialled = guard(a.connect(addr, "localhost")).await.unwrap();
    assert_eq!(dialled.peer().node_name, "b");
    guard(accepted).await.unwrap().unwrap();
}

/// Revocation lists reloaded into a configuration an endpoint already
/// holds apply to its next handshakes (clones share them); lists that do
/// not parse leave those in use.
#[tokio::test]
async fn reloaded_revocation_lists_apply_to_the_next_handshakes() {
    let ca = Ca::new("cluster CA");
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let tls = ca.tls("a", &ca);
    let a = endpoint(CLUSTER, "a", 1, tls.clone());
    let (addr, accepted) = serve_one(&a).await;
    guard(b.connect(addr, "localhost")).await.unwrap();
    guard(accepted).await.unwrap().unwrap();

    tls.reload_revocations(ca.revocation_list(&["b"]).as_bytes())
        .unwrap();
    let refused = |err: &ConnectError| {
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::Revoked
            }
        )
    };
    let (addr, accepted) = serve_one(&a).await;
    let _ = guard(b.connect(addr, "localhost")).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(refused(&err), "{err}");
    // And when `a` dials.
    let (addr, _accepted) = serve_one(&b).await;
    let err = guard(a.connect(addr, "localhost")).await.unwrap_err();
    assert!(refused(&err), "{err}");

    let err = tls.reload_revocations(b"no list here").unwrap_err();
    assert!(err.to_string().contains("revocation list"), "{err}");
    let (addr, accepted) = serve_one(&a).await;
    let _ = guard(b.connect(addr, "localhost")).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(refused(&err), "the lists in use stay: {err}");

    // A list revoking nobody lets `b` in again.
    tls.reload_revocations(ca.revocation_list(&[]).as_bytes())
        .unwrap();
    let (addr, accepted) = serve_one(&a).await;
    guard(b.connect(addr, "localhost")).await.unwrap();
    guard(accepted).await.unwrap().unwrap();
}

/// A revocation list that is not from the CA that issued a peer's
/// certificate says nothing about it: the peer is refused, not waved
/// through.
#[tokio::test]
async fn a_peer_whose_issuer_has_no_revocation_list_here_is_refused() {
    let ca = Ca::new("cluster CA");
    let other = Ca::new("another CA");
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let a = endpoint(
        CLUSTER,
        "a",
        1,
        ca.tls_revoking("a", &other.revocation_list(&[])),
    );
    let (addr, accepted) = serve_one(&a).await;
    let _ = guard(b.connect(addr, "localhost")).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::UnknownRevocationStatus
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn another_clusters_node_is_refused_by_both_sides() {
    let ca = Ca::new("shared CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let b = endpoint("other-cluster", "b", 1, ca.tls("b", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let dialled = guard(b.connect(addr, "localhost")).await.unwrap_err();
    let accepted = guard(accepted).await.unwrap().unwrap_err();
    match accepted {
        ConnectError::ClusterMismatch { ours, theirs } => {
            assert_eq!(ours, CLUSTER);
            assert_eq!(theirs, "other-cluster");
        }
        e => panic!("expected a cluster mismatch, got {e}"),
    }
    match dialled {
        ConnectError::ClusterMismatch { ours, theirs } => {
            assert_eq!(ours, "other-cluster");
            assert_eq!(theirs, CLUSTER);
        }
        e => panic!("expected a cluster mismatch, got {e}"),
    }
}

/// A member of the cluster cannot speak for another node: the name in the
/// handshake must be one the certificate is issued for, checked by both
/// sides.
#[tokio::test]
async fn a_node_whose_certificate_names_another_node_is_refused_by_both_sides() {
    let ca = Ca::new("shared CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    // Mallory holds a genuine certificate of the cluster, issued for
    // "mallory", and claims to be "b".
    let mallory = endpoint(CLUSTER, "b", 1, ca.tls("mallory", &ca));
    let (addr, accepted) = serve_one(&a).await;
    let dialled = guard(mallory.connect(addr, "localhost")).await.unwrap_err();
    match guard(accepted).await.unwrap().unwrap_err() {
        ConnectError::NameNotInCertificate { node_name } => assert_eq!(node_name, "b"),
        e => panic!("expected the name to be refused, got {e}"),
    }
    assert!(
        matches!(&dialled, ConnectError::PeerRefused { reason } if reason.contains("is not issued for that name")),
        "{dialled}"
    );

    // The other way round: a listener that claims a name its certificate
    // does not carry is refused by whoever dials it.
    let impostor = endpoint(CLUSTER, "a", 2, ca.tls("mallory", &ca));
    let honest = endpoint(CLUSTER, "c", 1, ca.tls("c", &ca));
    let (addr, accepted) = serve_one(&impostor).await;
    match guard(honest.connect(addr, "localhost")).await.unwrap_err() {
        ConnectError::NameNotInCertificate { node_name } => assert_eq!(node_name, "a"),
        e => panic!("expected the name to be refused, got {e}"),
    }
    let _ = guard(accepted).await;

    // With matching names both sides accept.
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let (addr, accepted) = serve_one(&a).await;
    let conn = guard(b.connect(addr, "localhost")).await.unwrap();
    assert_eq!(conn.peer().node_name, "a");
    assert_eq!(
        guard(accepted).await.unwrap().unwrap().peer().node_name,
        "b"
    );
}

/// Why the other side's certificate was refused, if it was.
fn refusal(err: &ConnectError) -> Option<&CertificateError> {
    match err {
        ConnectError::PeerCertificateRefused { reason } => Some(reason),
        _ => None,
    }
}

/// Where certificates cannot name the addresses (pods), the dialler can
/// identify the other side by the node name it announces instead: the
/// chain must still lead to the cluster's CA and the certificate must
/// still carry that node name; only the dialled address need not be in it.
#[tokio::test]
async fn identified_by_node_name_a_certificate_without_the_address_is_accepted_and_nothing_else() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls_without_address("a"));
    let by_address = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let by_name = endpoint(
        CLUSTER,
        "b",
        2,
        ca.tls("b", &ca).identify_peers_by_node_name(),
    );

    // By default the dialled address must be in the certificate.
    let (addr, _accepted) = serve_one(&a).await;
    let err = guard(by_address.connect(addr, "127.0.0.1"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refusal(&err),
            Some(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{err}"
    );
    // By node name: accepted, and it is `a`.
    let (addr, accepted) = serve_one(&a).await;
    let conn = guard(by_name.connect(addr, "127.0.0.1")).await.unwrap();
    assert_eq!(conn.peer().node_name, "a");
    assert_eq!(
        guard(accepted).await.unwrap().unwrap().peer().node_name,
        "b"
    );

    // A certificate from another CA is still refused, whatever it names.
    let other = Ca::new("another CA");
    let stranger = endpoint(CLUSTER, "a", 3, other.tls_without_address("a"));
    let (addr, _accepted) = serve_one(&stranger).await;
    let err = guard(by_name.connect(addr, "127.0.0.1")).await.unwrap_err();
    assert_eq!(
        refusal(&err),
        Some(&CertificateError::UnknownIssuer),
        "{err}"
    );

    // A cluster certificate announcing a node name it does not carry is
    // still refused.
    let impostor = endpoint(CLUSTER, "c", 1, ca.tls_without_address("mallory"));
    let (addr, _accepted) = serve_one(&impostor).await;
    match guard(by_name.connect(addr, "127.0.0.1")).await.unwrap_err() {
        ConnectError::NameNotInCertificate { node_name } => assert_eq!(node_name, "c"),
        e => panic!("expected the name to be refused, got {e}"),
    }

    // A revoked certificate is still refused.
    let revoked = endpoint(CLUSTER, "revoked", 1, ca.tls_without_address("revoked"));
    let list = ca.revocation_list(&["revoked"]);
    let checking = endpoint(
        CLUSTER,
        "d",
        1,
        ca.tls_revoking("d", &list).identify_peers_by_node_name(),
    );
    let (addr, _accepted) = serve_one(&revoked).await;
    let err = guard(checking.connect(addr, "127.0.0.1"))
        .await
        .unwrap_err();
    assert_eq!(refusal(&err), Some(&CertificateError::Revoked), "{err}");
}

#[tokio::test]
async fn another_protocol_version_is_refused() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let mut client = guard(raw_client(addr, &ca, Some(ca.node("future")))).await;
    guard(client.write_all(&handshake_bytes(&Handshake {
        cluster: CLUSTER.into(),
        protocol_version: PROTOCOL_VERSION + 1,
        node_name: "future".into(),
        incarnation: 1,
    })))
    .await
    .unwrap();

    let err = guard(accepted).await.unwrap().unwrap_err();
    match err {
        ConnectError::ProtocolMismatch { ours, theirs } => {
            assert_eq!(ours, PROTOCOL_VERSION);
            assert_eq!(theirs, PROTOCOL_VERSION + 1);
        }
        e => panic!("expected a protocol mismatch, got {e}"),
    }
    // The peer receives a's handshake, then the refusal with its reason.
    let mut wire = Vec::new();
    guard(client.read_to_end(&mut wire)).await.unwrap();
    let mut decoder = FrameDecoder::new(Limits::default());
    decoder.feed(&wire);
    let first = decoder.decode().unwrap().unwrap();
    assert_eq!(Handshake::decode(&first).unwrap().unwrap().node_name, "a");
    let verdict = decoder.decode().unwrap().unwrap();
    assert_eq!(
        (verdict.header.kind, verdict.header.code),
        (Kind::Control, HANDSHAKE_REFUSED)
    );
    let reason: String = decode_payload(&verdict.payload, DEFAULT_MAX_DEPTH).unwrap();
    assert!(reason.contains("protocol version"), "{reason}");
}

#[tokio::test]
async fn an_incarnation_declared_down_is_refused_and_a_new_one_accepted() {
    let ca = Ca::new("cluster CA");
    let down = DeclaredDown::new();
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca)).with_declared_down(down.clone());
    down.declare("b", 7);

    let old_b = endpoint(CLUSTER, "b", 7, ca.tls("b", &ca));
    let (addr, accepted) = serve_one(&a).await;
    let dialled = guard(old_b.connect(addr, "localhost")).await;
    match guard(accepted).await.unwrap().unwrap_err() {
        ConnectError::IncarnationDown {
            node_name,
            incarnation,
        } => {
            assert_eq!(node_name, "b");
            assert_eq!(incarnation, 7);
        }
        e => panic!("expected the incarnation refused, got {e}"),
    }
    // The refused side has no connection, and is told why.
    match dialled {
        Err(ConnectError::PeerRefused { reason }) => {
            assert!(reason.contains("declared down"), "{reason}")
        }
        Err(e) => panic!("expected the peer's refusal, got {e}"),
        Ok(conn) => panic!("refused, yet connected to {:?}", conn.peer()),
    }

    // The restarted process is a new node and is accepted.
    let new_b = endpoint(CLUSTER, "b", 8, ca.tls("b", &ca));
    let (addr, accepted) = serve_one(&a).await;
    guard(new_b.connect(addr, "localhost")).await.unwrap();
    let conn = guard(accepted).await.unwrap().unwrap();
    assert_eq!(conn.peer().incarnation, 8);
}

#[tokio::test]
async fn a_gigabyte_handshake_frame_is_refused_from_its_header() {
    let ca = Ca::new("cluster CA");
    // The endpoint's timeout is long: a refusal must come from the length
    // check, not from waiting for a payload that never comes.
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca)).with_handshake_timeout(GUARD * 2);
    let (addr, accepted) = serve_one(&a).await;

    let mut client = guard(raw_client(addr, &ca, Some(ca.node("hostile")))).await;
    let mut header = [0u8; HEADER_LEN];
    header[0] = MAGIC;
    header[1] = VERSION;
    header[2] = Lane::Control as u8;
    header[3] = Kind::Handshake as u8;
    header[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    guard(client.write_all(&header)).await.unwrap();
    guard(client.flush()).await.unwrap();

    let err = guard(accepted).await.unwrap().unwrap_err();
    match err {
        ConnectError::Framing(FrameError::TooLong { lane, len, .. }) => {
            assert_eq!(lane, Lane::Control);
            assert_eq!(len, 1 << 30);
        }
        e => panic!("expected the length refused, got {e}"),
    }
    drop(client);
}

#[tokio::test]
async fn a_message_before_the_handshake_is_refused_undecoded() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let mut client = guard(raw_client(addr, &ca, Some(ca.node("eager")))).await;
    let mut frame = Vec::new();
    troubadour_remote::frame::encode_frame(
        &mut frame,
        &Header::message(42, 0, 0),
        b"hi",
        &Limits::default(),
    )
    .unwrap();
    guard(client.write_all(&frame)).await.unwrap();

    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::NotAHandshake {
                kind: Kind::Message
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_peer_that_answers_the_handshake_with_a_message_is_refused() {
    let ca = Ca::new("cluster CA");
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let (addr, accepted) = serve_one(&a).await;

    let mut client = guard(raw_client(addr, &ca, Some(ca.node("pushy")))).await;
    let mut wire = handshake_bytes(&Handshake {
        cluster: CLUSTER.into(),
        protocol_version: PROTOCOL_VERSION,
        node_name: "pushy".into(),
        incarnation: 1,
    });
    // A message where its verdict on a's handshake belongs.
    troubadour_remote::frame::encode_frame(
        &mut wire,
        &Header::message(42, 0, 0),
        b"hi",
        &Limits::default(),
    )
    .unwrap();
    guard(client.write_all(&wire)).await.unwrap();

    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::NoVerdict {
                kind: Kind::Message,
                code: 42
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_peer_stalling_after_tls_hits_the_handshake_timeout() {
    let ca = Ca::new("cluster CA");
    let timeout = Duration::from_millis(200);
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca)).with_handshake_timeout(timeout);
    let (addr, accepted) = serve_one(&a).await;

    // Completes TLS, then never sends its handshake.
    let client = guard(raw_client(addr, &ca, Some(ca.node("stalled")))).await;
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(
        matches!(err, ConnectError::Timeout { after } if after == timeout),
        "{err}"
    );
    drop(client);
}

#[tokio::test]
async fn a_peer_trickling_its_handshake_hits_the_handshake_timeout() {
    let ca = Ca::new("cluster CA");
    let timeout = Duration::from_millis(200);
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca)).with_handshake_timeout(timeout);
    let (addr, accepted) = serve_one(&a).await;

    // Slowloris: every byte arrives, each well within the timeout, but the
    // whole frame takes longer than it (about 50 bytes, 20 ms apart).
    let mut client = guard(raw_client(addr, &ca, Some(ca.node("slow")))).await;
    let bytes = handshake_bytes(&Handshake {
        cluster: CLUSTER.into(),
        protocol_version: PROTOCOL_VERSION,
        node_name: "slow".into(),
        incarnation: 1,
    });
    let trickle = tokio::spawn(async move {
        for byte in bytes {
            if client.write_all(&[byte]).await.is_err() || client.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Keep the connection open until the test ends.
        let _ = client.read(&mut [0u8; 1]).await;
    });
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectError::Timeout { .. }), "{err}");
    trickle.abort();
}

#[tokio::test]
async fn pem_that_is_not_a_certificate_is_a_typed_error() {
    let ca = Ca::new("cluster CA");
    let (chain, key) = ca.node("a");
    let err = TlsConfig::from_pem(b"not pem", key.as_bytes(), ca.pem.as_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Pem {
                what: "certificate chain",
                ..
            }
        ),
        "{err}"
    );
    let err = TlsConfig::from_pem(chain.as_bytes(), key.as_bytes(), b"").unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Pem {
                what: "cluster CA",
                ..
            }
        ),
        "{err}"
    );
    // A key that is not the certificate's.
    let (_, other_key) = ca.node("b");
    let err =
        TlsConfig::from_pem(chain.as_bytes(), other_key.as_bytes(), ca.pem.as_bytes()).unwrap_err();
    assert!(matches!(err, ConfigError::Tls(_)), "{err}");
    // A revocation list that holds no list.
    let (chain, key) = ca.node("c");
    let err = TlsConfig::from_pem_with_revocations(
        chain.as_bytes(),
        key.as_bytes(),
        ca.pem.as_bytes(),
        ca.pem.as_bytes(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Pem {
                what: "revocation list",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_peer_stalling_before_tls_hits_the_handshake_timeout() {
    let ca = Ca::new("cluster CA");
    let timeout = Duration::from_millis(200);
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca)).with_handshake_timeout(timeout);
    let (addr, accepted) = serve_one(&a).await;

    // Opens TCP and sends nothing.
    let tcp = guard(TcpStream::connect(addr)).await.unwrap();
    let err = guard(accepted).await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectError::Timeout { .. }), "{err}");
    drop(tcp);
}

#[tokio::test]
async fn plaintext_works_on_loopback_only() {
    let a = Endpoint::new(CLUSTER, "a", 1, Security::PlaintextLoopbackOnly);
    let b = Endpoint::new(CLUSTER, "b", 2, Security::PlaintextLoopbackOnly);
    let (addr, accepted) = serve_one(&a).await;
    let dialled = guard(b.connect(addr, "localhost")).await.unwrap();
    let accepted = guard(accepted).await.unwrap().unwrap();
    assert!(!dialled.is_tls());
    assert_eq!(dialled.peer().node_name, "a");
    assert_eq!(accepted.peer().node_name, "b");
    assert_eq!(accepted.peer().certificate, None);

    // A documentation-range address: refused before any packet is sent.
    let remote: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let err = guard(b.connect(remote, "node")).await.unwrap_err();
    assert!(
        matches!(err, ConnectError::PlaintextNotLoopback { addr } if addr == remote),
        "{err}"
    );
    let err = guard(b.listen("0.0.0.0:0".parse().unwrap()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConnectError::PlaintextNotLoopback { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_server_certificate_for_another_name_is_refused() {
    let ca = Ca::new("cluster CA");
    // a's certificate names localhost and 127.0.0.1 only.
    let a = endpoint(CLUSTER, "a", 1, ca.tls("a", &ca));
    let b = endpoint(CLUSTER, "b", 1, ca.tls("b", &ca));
    let (addr, _accepted) = serve_one(&a).await;

    let err = guard(b.connect(addr, "node-x.example")).await.unwrap_err();
    assert!(
        matches!(
            err,
            ConnectError::PeerCertificateRefused {
                reason: CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. }
            }
        ),
        "{err}"
    );
}
