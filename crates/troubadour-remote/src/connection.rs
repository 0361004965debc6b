//! Establishing a connection: TCP, mutual TLS, then the handshake exchange.
//!
//! An [`Endpoint`] is one node's side of every connection it makes or
//! accepts: its cluster name, node name and incarnation, how it secures
//! connections ([`Security`]), the handshake timeout and the frame caps.
//! [`Endpoint::connect`] dials a peer, [`Endpoint::listen`] binds a
//! [`Listener`] whose [`Incoming`] connections are established with
//! [`Incoming::establish`]. Either way the result is a [`Connection`]
//! whose peer has:
//!
//! 1. presented a certificate chain signed by the cluster's CA (both
//!    sides: the accepting side requires a client certificate, the dialling
//!    side verifies the server's against the CA and the name it dialled),
//!    over TLS 1.3 only;
//! 2. sent, as its first frame, a [`Handshake`] with our cluster name, our
//!    [`PROTOCOL_VERSION`], and a `(node name, incarnation)` that was not
//!    declared down ([`DeclaredDown`]), the node name being one its
//!    certificate is issued for (a DNS subject alternative name), so no
//!    member of the cluster can speak for another;
//!
//! 3. accepted ours: each side sends its handshake as soon as TLS is up,
//!    checks the peer's on its own evidence, and answers with a verdict
//!    frame (accepted, or refused with the reason); a connection exists
//!    only when both accepted, and a refused side learns why
//!    ([`ConnectError::PeerRefused`]);
//!
//! all within the handshake timeout. Nothing the peer sends after its handshake frame is
//! decoded here: those bytes stay in the [`FrameDecoder`] handed over by
//! [`Connection::into_parts`], for the message lanes to come.
//!
//! Plaintext exists only as [`Security::PlaintextLoopbackOnly`], which
//! refuses to dial, bind or accept anything but a loopback address.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use troubadour_remote::connection::{ConnectError, Endpoint, Security};
//!
//! // With certificates: Security::Tls(TlsConfig::from_pem(chain, key, ca)?).
//! let a = Endpoint::new("demo", "a", 1, Security::PlaintextLoopbackOnly);
//! let b = Endpoint::new("demo", "b", 7, Security::PlaintextLoopbackOnly);
//! let listener = a.listen("127.0.0.1:0".parse()?).await?;
//! let addr = listener.local_addr()?;
//! let accepting = tokio::spawn(async move {
//!     listener.accept().await.map_err(ConnectError::Io)?.establish().await
//! });
//! let to_a = b.connect(addr, "localhost").await?;
//! let to_b = accepting.await??;
//! assert_eq!(to_a.peer().node_name, "a");
//! assert_eq!((to_b.peer().node_name.as_str(), to_b.peer().incarnation), ("b", 7));
//! # Ok(())
//! # }
//! ```
//!
//! Unlike Erlang's distribution, where any peer that knows the cookie is
//! trusted (and the cookie travels in a challenge anyone on the path can
//! attack offline), the peer proves itself with a certificate from the
//! cluster's CA, and its node name must be one its certificate was issued
//! for (a DNS subject alternative name), checked on every connection in
//! both directions.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{AlertDescription, ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::codec::{decode_payload, serialize_into, DecodeError, DEFAULT_MAX_DEPTH};
use crate::frame::{
    encode_frame, encode_frame_with, EncodeError, Frame, FrameDecoder, FrameError, Header, Kind,
    Limits,
};
use crate::handshake::{Handshake, HANDSHAKE_ACCEPTED, HANDSHAKE_REFUSED, PROTOCOL_VERSION};

/// The longest refusal reason sent to a peer, in bytes.
const MAX_REASON: usize = 1024;

/// Default time a peer has to finish TCP, TLS and the handshake exchange.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// This node's TLS material, read from PEM: its certificate chain, its
/// private key, and the cluster's CA certificate(s). Clones share it: a
/// [`reload_revocations`](Self::reload_revocations) through any of them
/// applies to every connection made after it.
#[derive(Clone)]
pub struct TlsConfig {
    material: Arc<Material>,
    built: Arc<RwLock<Built>>,
}

/// What never changes: this node's chain and key, the cluster's CA.
struct Material {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
}

/// The rustls configurations built from the material, the revocation lists
/// of the moment and the way peers are identified.
struct Built {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    /// The accepting side's check of a peer's chain and revocation, also
    /// used to check live connections again when the lists change.
    client_verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    crls: Vec<CertificateRevocationListDer<'static>>,
    by_node_name: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configs hold the private key: never print them.
        f.write_str("TlsConfig { .. }")
    }
}

impl TlsConfig {
    /// Builds the TLS configuration from PEM text: `cert_chain` is this
    /// node's certificate first, then any intermediates; `key` its private
    /// key (PKCS#8, PKCS#1 or SEC1); `cluster_ca` the CA certificate(s) a
    /// peer's chain must lead to. Only TLS 1.3 is offered, with the `ring`
    /// provider.
    pub fn from_pem(
        cert_chain: &[u8],
        key: &[u8],
        cluster_ca: &[u8],
    ) -> Result<TlsConfig, ConfigError> {
        Self::build(cert_chain, key, cluster_ca, Vec::new())
    }

    /// As [`from_pem`](Self::from_pem), and refuses every peer whose
    /// certificate one of `revocation_lists` (PEM `X509 CRL` sections,
    /// signed by the CA that issued the certificates they revoke) lists:
    /// the way to shut out a node whose key leaked before its certificate
    /// expires. Both directions check: a revoked node can neither dial nor
    /// be dialled, and the refusal is
    /// [`ConnectError::PeerCertificateRefused`] with reason `Revoked`.
    ///
    /// The node certificates' own revocation is checked, against lists
    /// of the CA that issued them; a certificate whose issuer has no list
    /// here is refused (`UnknownRevocationStatus`), so a list must be given
    /// for every CA that issues node certificates. A list past its next
    /// update is still used; publish a new one with
    /// [`Remote::reload_revocations`](crate::Remote::reload_revocations),
    /// which also closes live connections to the nodes it revokes.
    ///
    /// ```
    /// # #[cfg(feature = "dev-certs")] {
    /// use troubadour_remote::dev_certs::DevCa;
    /// use troubadour_remote::TlsConfig;
    ///
    /// let ca = DevCa::new("example CA (tests only)")?;
    /// let (cert, key) = ca.node("node-a")?;
    /// let _leaked = ca.node("node-b")?;
    /// let crl = ca.revocation_list(&["node-b"])?;
    /// let tls = TlsConfig::from_pem_with_revocations(
    ///     cert.as_bytes(),
    ///     key.as_bytes(),
    ///     ca.pem().as_bytes(),
    ///     crl.as_bytes(),
    /// )?;
    /// # let _ = tls;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_pem_with_revocations(
        cert_chain: &[u8],
        key: &[u8],
        cluster_ca: &[u8],
        revocation_lists: &[u8],
    ) -> Result<TlsConfig, ConfigError> {
        Self::build(cert_chain, key, cluster_ca, read_crls(revocation_lists)?)
    }

    /// Replaces the revocation lists (PEM `X509 CRL` sections, as for
    /// [`from_pem_with_revocations`](Self::from_pem_with_revocations)) for
    /// every handshake from now on, on every clone of this configuration.
    /// Connections already up are not touched:
    /// [`Remote::reload_revocations`](crate::Remote::reload_revocations)
    /// also closes those whose peer the new lists revoke. On an error the
    /// lists in use stay.
    pub fn reload_revocations(&self, revocation_lists: &[u8]) -> Result<(), ConfigError> {
        let crls = read_crls(revocation_lists)?;
        let by_node_name = self.built().by_node_name;
        let built = build_configs(&self.material, crls, by_node_name)?;
        *self.built.write().unwrap_or_else(|p| p.into_inner()) = built;
        Ok(())
    }

    /// Whether `chain` (a peer's, end entity first) passes the checks a
    /// new connection's would now: `Err` with rustls's reason otherwise
    /// (`CertificateError::Revoked` for a revoked one).
    pub(crate) fn check_chain(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Result<(), rustls::Error> {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return Err(rustls::Error::NoCertificatesPresented);
        };
        let verifier = self.built().client_verifier.clone();
        verifier
            .verify_client_cert(
                end_entity,
                intermediates,
                rustls::pki_types::UnixTime::now(),
            )
            .map(|_| ())
    }

    fn built(&self) -> std::sync::RwLockReadGuard<'_, Built> {
        self.built.read().unwrap_or_else(|p| p.into_inner())
    }

    fn client(&self) -> Arc<ClientConfig> {
        self.built().client.clone()
    }

    fn server(&self) -> Arc<ServerConfig> {
        self.built().server.clone()
    }

    fn build(
        cert_chain: &[u8],
        key: &[u8],
        cluster_ca: &[u8],
        crls: Vec<CertificateRevocationListDer<'static>>,
    ) -> Result<TlsConfig, ConfigError> {
        let chain = CertificateDer::pem_slice_iter(cert_chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConfigError::Pem {
                what: "certificate chain",
                error: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(ConfigError::Pem {
                what: "certificate chain",
                error: "no CERTIFICATE section found".into(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| ConfigError::Pem {
            what: "private key",
            error: e.to_string(),
        })?;
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(cluster_ca) {
            let ca = ca.map_err(|e| ConfigError::Pem {
                what: "cluster CA",
                error: e.to_string(),
            })?;
            roots.add(ca).map_err(|e| ConfigError::Tls(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(ConfigError::Pem {
                what: "cluster CA",
                error: "no CERTIFICATE section found".into(),
            });
        }
        let material = Arc::new(Material {
            chain,
            key,
            roots: Arc::new(roots),
        });
        let built = build_configs(&material, crls, false)?;
        Ok(TlsConfig {
            material,
            built: Arc::new(RwLock::new(built)),
        })
    }

    /// Identifies the nodes this one dials by the node name each announces
    /// in the handshake, not by the address dialled: the certificate must
    /// still lead to the cluster's CA (and not be revoked), and must be
    /// issued for that node name (a DNS subject alternative name, checked
    /// on every connection in both directions), but need not name the
    /// address. For nodes whose addresses change and are not known when
    /// certificates are issued: Kubernetes pods, DHCP. The default checks
    /// both the dialled address and the node name.
    ///
    /// ```
    /// # #[cfg(feature = "dev-certs")] {
    /// use troubadour_remote::dev_certs::DevCa;
    /// use troubadour_remote::TlsConfig;
    ///
    /// let ca = DevCa::new("example CA (tests only)")?;
    /// let (cert, key) = ca.node_at("realtime-map-0", &[])?; // no address in it
    /// let tls = TlsConfig::from_pem(cert.as_bytes(), key.as_bytes(), ca.pem().as_bytes())?
    ///     .identify_peers_by_node_name();
    /// # let _ = tls;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn identify_peers_by_node_name(self) -> TlsConfig {
        {
            let mut built = self.built.write().unwrap_or_else(|p| p.into_inner());
            // The same material and lists built once already: this cannot
            // fail, and if it did the configuration in use would stay.
            if let Ok(by_name) = build_configs(&self.material, built.crls.clone(), true) {
                *built = by_name;
            }
        }
        self
    }
}

/// Reads PEM revocation lists: at least one.
fn read_crls(pem: &[u8]) -> Result<Vec<CertificateRevocationListDer<'static>>, ConfigError> {
    let crls = CertificateRevocationListDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Pem {
            what: "revocation list",
            error: e.to_string(),
        })?;
    if crls.is_empty() {
        return Err(ConfigError::Pem {
            what: "revocation list",
            error: "no X509 CRL section found".into(),
        });
    }
    Ok(crls)
}

/// Both sides' rustls configurations: TLS 1.3 only, the `ring` provider,
/// webpki's verifiers over the cluster's CA (and `crls`, for the node
/// certificates only, when there are any).
fn build_configs(
    material: &Material,
    crls: Vec<CertificateRevocationListDer<'static>>,
    by_node_name: bool,
) -> Result<Built, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = |e: rustls::Error| ConfigError::Tls(e.to_string());
    let mut clients =
        WebPkiClientVerifier::builder_with_provider(material.roots.clone(), provider.clone());
    let mut servers =
        WebPkiServerVerifier::builder_with_provider(material.roots.clone(), provider.clone());
    if !crls.is_empty() {
        clients = clients
            .with_crls(crls.clone())
            .only_check_end_entity_revocation();
        servers = servers
            .with_crls(crls.clone())
            .only_check_end_entity_revocation();
    }
    let client_verifier = clients
        .build()
        .map_err(|e| ConfigError::Tls(e.to_string()))?;
    let server_verifier = servers
        .build()
        .map_err(|e| ConfigError::Tls(e.to_string()))?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_client_cert_verifier(client_verifier.clone())
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .map_err(tls)?;
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_webpki_verifier(server_verifier.clone())
        .with_client_auth_cert(material.chain.clone(), material.key.clone_key())
        .map_err(tls)?;
    if by_node_name {
        client
            .dangerous()
            .set_certificate_verifier(Arc::new(ChainThenNodeName(server_verifier)));
    }
    Ok(Built {
        client: Arc::new(client),
        server: Arc::new(server),
        client_verifier,
        crls,
        by_node_name,
    })
}

/// The dialler's check with [`TlsConfig::identify_peers_by_node_name`]:
/// webpki's, which verifies the chain to the cluster's CA and revocation
/// before the name, with a certificate not valid for the dialled address
/// let through. The name that matters, the node's, is checked once the
/// handshake has announced it (`Stream::check_certificate_names`).
#[derive(Debug)]
struct ChainThenNodeName(Arc<WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainThenNodeName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // Reached only once the chain and revocation checks passed
            // (webpki checks the name last); the tests hold it to that.
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Why a configuration could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A PEM input did not parse or held nothing usable.
    Pem {
        /// Which input.
        what: &'static str,
        /// The parser's complaint.
        error: String,
    },
    /// rustls refused the material (a key that does not match the
    /// certificate, a CA certificate or revocation list it cannot use).
    Tls(String),
    /// The remote layer runs without TLS (plaintext on loopback): there
    /// are no certificates to revoke.
    NotTls,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Pem { what, error } => {
                write!(f, "the {what} PEM could not be read: {error}; pass the PEM file's contents")
            }
            ConfigError::Tls(e) => write!(
                f,
                "rustls refused the TLS material: {e}; check that the key belongs to the certificate"
            ),
            ConfigError::NotTls => f.write_str(
                "this remote layer runs in plaintext, so it has no certificates to revoke; \
                 build it with Security::Tls to use revocation lists",
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How an [`Endpoint`] secures its connections.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Security {
    /// Mutual TLS with certificates from the cluster's CA: the default and
    /// the only choice for anything but loopback.
    Tls(TlsConfig),
    /// No encryption and no authentication. An explicit opt-in for
    /// benchmarks and tests on one machine: dialling, binding or accepting
    /// a non-loopback address fails with
    /// [`ConnectError::PlaintextNotLoopback`].
    PlaintextLoopbackOnly,
}

/// The `(node name, incarnation)` pairs declared down, shared by every
/// connection of the endpoints it is given to. A declared incarnation is
/// refused in every later handshake: a restarted process is a new node
/// with a new incarnation, and the old one never comes back.
#[derive(Clone, Debug, Default)]
pub struct DeclaredDown {
    set: Arc<RwLock<HashSet<(String, u64)>>>,
}

impl DeclaredDown {
    /// An empty set.
    pub fn new() -> DeclaredDown {
        DeclaredDown::default()
    }

    /// Declares `incarnation` of `node_name` down, for good.
    pub fn declare(&self, node_name: &str, incarnation: u64) {
        self.set
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((node_name.to_owned(), incarnation));
    }

    /// Whether `incarnation` of `node_name` was declared down.
    pub fn contains(&self, node_name: &str, incarnation: u64) -> bool {
        self.set
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(node_name.to_owned(), incarnation))
    }
}

/// One node's side of its connections.
#[derive(Clone, Debug)]
pub struct Endpoint {
    cluster: String,
    node_name: String,
    incarnation: u64,
    security: Security,
    handshake_timeout: Duration,
    limits: Limits,
    down: DeclaredDown,
}

impl Endpoint {
    /// An endpoint for node `node_name`, incarnation `incarnation`, in
    /// cluster `cluster`, with the default handshake timeout and caps.
    pub fn new(
        cluster: impl Into<String>,
        node_name: impl Into<String>,
        incarnation: u64,
        security: Security,
    ) -> Endpoint {
        Endpoint {
            cluster: cluster.into(),
            node_name: node_name.into(),
            incarnation,
            security,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            limits: Limits::default(),
            down: DeclaredDown::new(),
        }
    }

    /// Sets the time a peer has to finish TCP, TLS and the handshake.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Endpoint {
        self.handshake_timeout = timeout;
        self
    }

    /// Sets the frame caps (both nodes should use the same).
    pub fn with_limits(mut self, limits: Limits) -> Endpoint {
        self.limits = limits;
        self
    }

    /// Shares `down` with this endpoint: handshakes from an incarnation in
    /// it are refused.
    pub fn with_declared_down(mut self, down: DeclaredDown) -> Endpoint {
        self.down = down;
        self
    }

    /// The set of incarnations this endpoint refuses.
    pub fn declared_down(&self) -> &DeclaredDown {
        &self.down
    }

    /// Its TLS configuration; `None` for plaintext.
    pub fn tls(&self) -> Option<&TlsConfig> {
        match &self.security {
            Security::Tls(tls) => Some(tls),
            Security::PlaintextLoopbackOnly => None,
        }
    }

    fn handshake(&self) -> Handshake {
        Handshake {
            cluster: self.cluster.clone(),
            protocol_version: PROTOCOL_VERSION,
            node_name: self.node_name.clone(),
            incarnation: self.incarnation,
        }
    }

    fn check_plaintext(&self, addr: SocketAddr) -> Result<(), ConnectError> {
        match self.security {
            Security::PlaintextLoopbackOnly if !addr.ip().is_loopback() => {
                Err(ConnectError::PlaintextNotLoopback { addr })
            }
            _ => Ok(()),
        }
    }

    /// Dials `addr` and establishes a connection. With TLS, the server's
    /// certificate must be valid for `server_name` (a DNS name or an IP
    /// address in its subject alternative names) and signed by the
    /// cluster's CA.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<Connection, ConnectError> {
        self.check_plaintext(addr)?;
        let name = match self.security {
            Security::Tls(_) => Some(
                ServerName::try_from(server_name.to_owned())
                    .map_err(|_| ConnectError::BadServerName(server_name.to_owned()))?,
            ),
            Security::PlaintextLoopbackOnly => None,
        };
        self.timed(async {
            let tcp = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
            let _ = tcp.set_nodelay(true);
            let stream = match (&self.security, name) {
                (Security::Tls(tls), Some(name)) => {
                    let tls = TlsConnector::from(tls.client())
                        .connect(name, tcp)
                        .await
                        .map_err(classify)?;
                    Stream::Tls(Box::new(tls.into()))
                }
                _ => Stream::Plain(tcp),
            };
            self.exchange(stream, addr).await
        })
        .await
    }

    /// Binds a listener on `addr`.
    pub async fn listen(&self, addr: SocketAddr) -> Result<Listener, ConnectError> {
        self.check_plaintext(addr)?;
        let tcp = TcpListener::bind(addr).await.map_err(ConnectError::Io)?;
        Ok(Listener {
            tcp,
            endpoint: self.clone(),
        })
    }

    async fn timed<F>(&self, work: F) -> Result<Connection, ConnectError>
    where
        F: std::future::Future<Output = Result<Connection, ConnectError>>,
    {
        tokio::time::timeout(self.handshake_timeout, work)
            .await
            .unwrap_or(Err(ConnectError::Timeout {
                after: self.handshake_timeout,
            }))
    }

    /// Sends our handshake, reads the peer's first frame, and checks it.
    async fn exchange(
        &self,
        mut stream: Stream,
        addr: SocketAddr,
    ) -> Result<Connection, ConnectError> {
        let mut out = Vec::new();
        self.handshake()
            .encode(&mut out, &self.limits)
            .map_err(ConnectError::Encode)?;
        stream.write_all(&out).await.map_err(classify)?;
        stream.flush().await.map_err(classify)?;

        let mut decoder = FrameDecoder::new(self.limits);
        let frame = read_frame(&mut stream, &mut decoder).await?;
        let theirs = match Handshake::decode(&frame) {
            None => {
                return Err(ConnectError::NotAHandshake {
                    kind: frame.header.kind,
                })
            }
            Some(Err(e)) => return Err(ConnectError::BadHandshake(e)),
            Some(Ok(h)) => h,
        };
        let verdict = self
            .check(&theirs)
            .and_then(|()| stream.check_certificate_names(&theirs.node_name));
        let mut out = Vec::new();
        match &verdict {
            Ok(()) => encode_frame(
                &mut out,
                &Header::control(HANDSHAKE_ACCEPTED, 0, 0),
                &[],
                &self.limits,
            ),
            Err(refusal) => {
                let mut reason = refusal.to_string();
                if reason.len() > MAX_REASON {
                    let mut end = MAX_REASON;
                    while !reason.is_char_boundary(end) {
                        end -= 1;
                    }
                    reason.truncate(end);
                }
                encode_frame_with(
                    &mut out,
                    &Header::control(HANDSHAKE_REFUSED, 0, 0),
                    &self.limits,
                    |out, max| serialize_into(out, &reason, max),
                )
                .map(drop)
            }
        }
        .map_err(ConnectError::Encode)?;
        let sent = async {
            stream.write_all(&out).await?;
            stream.flush().await
        }
        .await;
        if let Err(refusal) = verdict {
            // Best effort: the peer learns why, and TLS ends with
            // close_notify rather than a bare reset.
            if sent.is_ok() {
                let _ = stream.shutdown().await;
            }
            return Err(refusal);
        }
        sent.map_err(classify)?;

        let frame = read_frame(&mut stream, &mut decoder).await?;
        match (frame.header.kind, frame.header.code) {
            (Kind::Control, HANDSHAKE_ACCEPTED) => {}
            (Kind::Control, HANDSHAKE_REFUSED) => {
                let reason = decode_payload::<String>(&frame.payload, DEFAULT_MAX_DEPTH)
                    .unwrap_or_else(|e| format!("(a reason that did not decode: {e})"));
                return Err(ConnectError::PeerRefused { reason });
            }
            (kind, code) => return Err(ConnectError::NoVerdict { kind, code }),
        }
        let certificate = stream.peer_certificate();
        Ok(Connection {
            stream,
            decoder,
            peer: PeerIdentity {
                node_name: theirs.node_name,
                incarnation: theirs.incarnation,
                addr,
                certificate,
            },
        })
    }

    /// Whether the peer's handshake is acceptable.
    fn check(&self, theirs: &Handshake) -> Result<(), ConnectError> {
        if theirs.protocol_version != PROTOCOL_VERSION {
            return Err(ConnectError::ProtocolMismatch {
                ours: PROTOCOL_VERSION,
                theirs: theirs.protocol_version,
            });
        }
        if theirs.cluster != self.cluster {
            return Err(ConnectError::ClusterMismatch {
                ours: self.cluster.clone(),
                theirs: theirs.cluster.clone(),
            });
        }
        if self.down.contains(&theirs.node_name, theirs.incarnation) {
            return Err(ConnectError::IncarnationDown {
                node_name: theirs.node_name.clone(),
                incarnation: theirs.incarnation,
            });
        }
        Ok(())
    }
}

/// Reads the next whole frame. `read_buf` grows the buffer by what
/// arrived (tens of bytes at a time), never by what a header announced,
/// and the decoder refuses a length over its lane's cap from the header.
async fn read_frame(
    stream: &mut Stream,
    decoder: &mut FrameDecoder,
) -> Result<Frame, ConnectError> {
    loop {
        if let Some(frame) = decoder.decode().map_err(ConnectError::Framing)? {
            return Ok(frame);
        }
        let n = stream
            .read_buf(decoder.buffer_mut())
            .await
            .map_err(classify)?;
        if n == 0 {
            decoder.finish().map_err(ConnectError::Framing)?;
            return Err(ConnectError::Closed);
        }
    }
}

/// A bound listener; see [`Listener::accept`].
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    endpoint: Endpoint,
}

impl Listener {
    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Waits for the next TCP connection. Nothing is read from it yet:
    /// call [`Incoming::establish`], in a task of its own, so that a peer
    /// stalling its handshake holds up only itself.
    pub async fn accept(&self) -> io::Result<Incoming> {
        let (tcp, addr) = self.tcp.accept().await?;
        Ok(Incoming {
            tcp,
            addr,
            endpoint: self.endpoint.clone(),
        })
    }
}

/// An accepted TCP connection whose TLS and handshake are still to come.
#[derive(Debug)]
pub struct Incoming {
    tcp: TcpStream,
    addr: SocketAddr,
    endpoint: Endpoint,
}

impl Incoming {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs TLS (requiring a client certificate from the cluster's CA) and
    /// the handshake exchange, within the endpoint's handshake timeout.
    pub async fn establish(self) -> Result<Connection, ConnectError> {
        let Incoming {
            tcp,
            addr,
            endpoint,
        } = self;
        endpoint.check_plaintext(addr)?;
        let _ = tcp.set_nodelay(true);
        endpoint
            .timed(async {
                let stream = match &endpoint.security {
                    Security::Tls(tls) => {
                        let tls = TlsAcceptor::from(tls.server())
                            .accept(tcp)
                            .await
                            .map_err(classify)?;
                        Stream::Tls(Box::new(tls.into()))
                    }
                    Security::PlaintextLoopbackOnly => Stream::Plain(tcp),
                };
                endpoint.exchange(stream, addr).await
            })
            .await
    }
}

/// Who the peer of an established connection is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The node name from its handshake.
    pub node_name: String,
    /// The incarnation from its handshake.
    pub incarnation: u64,
    /// Its socket address.
    pub addr: SocketAddr,
    /// Its end-entity certificate (DER), verified against the cluster's CA;
    /// `None` on a plaintext connection.
    pub certificate: Option<CertificateDer<'static>>,
}

/// An established connection: the peer passed TLS and the handshake.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    decoder: FrameDecoder,
    peer: PeerIdentity,
}

impl Connection {
    /// The peer.
    pub fn peer(&self) -> &PeerIdentity {
        &self.peer
    }

    /// Whether the connection is encrypted and mutually authenticated.
    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }

    /// The stream and the frame decoder, which holds whatever the peer sent
    /// after its handshake, not yet decoded.
    pub fn into_parts(self) -> (Stream, FrameDecoder, PeerIdentity) {
        (self.stream, self.decoder, self.peer)
    }
}

/// A connection's byte stream, TLS or (loopback only) plaintext.
#[derive(Debug)]
#[non_exhaustive]
pub enum Stream {
    /// Mutual TLS.
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
    /// Plaintext, on loopback.
    Plain(TcpStream),
}

impl Stream {
    /// The TCP socket under the stream.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tls(tls) => tls.get_ref().0,
            Stream::Plain(tcp) => tcp,
        }
    }

    /// Whether the peer's certificate is issued for `node_name` (a DNS
    /// subject alternative name; webpki's matching, case-insensitive). Its
    /// chain was verified against the cluster's CA by TLS already. Nothing
    /// to check on a plaintext connection.
    fn check_certificate_names(&self, node_name: &str) -> Result<(), ConnectError> {
        let Some(cert) = self.peer_certificate() else {
            return Ok(());
        };
        let refused = || ConnectError::NameNotInCertificate {
            node_name: node_name.to_owned(),
        };
        let name = ServerName::try_from(node_name).map_err(|_| refused())?;
        let cert = webpki::EndEntityCert::try_from(&cert).map_err(|_| refused())?;
        cert.verify_is_valid_for_subject_name(&name)
            .map_err(|_| refused())
    }

    /// The peer's certificate chain, end entity first; empty on a
    /// plaintext stream.
    pub(crate) fn peer_chain(&self) -> Vec<CertificateDer<'static>> {
        match self {
            Stream::Tls(tls) => {
                let (_, conn) = tls.get_ref();
                conn.peer_certificates()
                    .map(|chain| chain.iter().map(|c| c.clone().into_owned()).collect())
                    .unwrap_or_default()
            }
            Stream::Plain(_) => Vec::new(),
        }
    }

    fn peer_certificate(&self) -> Option<CertificateDer<'static>> {
        match self {
            Stream::Tls(tls) => {
                let (_, conn) = tls.get_ref();
                conn.peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|c| c.clone().into_owned())
            }
            Stream::Plain(_) => None,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Sorts an I/O error from TLS into the refusals a user can act on.
fn classify(e: io::Error) -> ConnectError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::NoCertificatesPresented) => ConnectError::PeerCertificateMissing,
        Some(rustls::Error::InvalidCertificate(reason)) => ConnectError::PeerCertificateRefused {
            reason: reason.clone(),
        },
        Some(rustls::Error::AlertReceived(alert)) => ConnectError::RefusedByPeer { alert: *alert },
        _ if e.kind() == io::ErrorKind::UnexpectedEof => ConnectError::Closed,
        _ => ConnectError::Io(e),
    }
}

/// Why a connection was not established. Each refusal names its reason and
/// what to do about it.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The peer presented no certificate (we accepted its connection and
    /// require one).
    PeerCertificateMissing,
    /// The peer's certificate failed verification: most often
    /// `UnknownIssuer`, a certificate not signed by the cluster's CA.
    PeerCertificateRefused {
        /// What rustls found wrong.
        reason: rustls::CertificateError,
    },
    /// The peer ended TLS with an alert: it refused our certificate (or
    /// has none we accept).
    RefusedByPeer {
        /// The alert it sent.
        alert: AlertDescription,
    },
    /// The peer's handshake names another cluster.
    ClusterMismatch {
        /// Our cluster name.
        ours: String,
        /// The peer's.
        theirs: String,
    },
    /// The peer speaks another protocol version.
    ProtocolMismatch {
        /// Ours, [`PROTOCOL_VERSION`].
        ours: u16,
        /// The peer's.
        theirs: u16,
    },
    /// The peer's handshake names a node its certificate is not issued
    /// for: a node's certificate must carry its node name as a DNS subject
    /// alternative name, so that a member of the cluster cannot speak for
    /// another.
    NameNotInCertificate {
        /// The node name from the peer's handshake.
        node_name: String,
    },
    /// The peer's incarnation was declared down ([`DeclaredDown`]).
    IncarnationDown {
        /// The peer's node name.
        node_name: String,
        /// Its incarnation.
        incarnation: u64,
    },
    /// The peer checked our handshake and refused it, saying why (its own
    /// error's text, at most 1 KiB).
    PeerRefused {
        /// The peer's reason.
        reason: String,
    },
    /// After the handshakes, the peer sent something other than its
    /// verdict on ours.
    NoVerdict {
        /// The frame's kind.
        kind: Kind,
        /// Its code.
        code: u64,
    },
    /// The peer's first frame was not a handshake.
    NotAHandshake {
        /// What it was.
        kind: Kind,
    },
    /// The peer's handshake frame did not decode.
    BadHandshake(DecodeError),
    /// The peer's bytes are not frames (a frame over its lane's cap
    /// included); the connection is closed.
    Framing(FrameError),
    /// TCP, TLS and the handshake did not finish within the timeout.
    Timeout {
        /// The endpoint's handshake timeout.
        after: Duration,
    },
    /// Plaintext was asked for a non-loopback address.
    PlaintextNotLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// `server_name` is neither a DNS name nor an IP address.
    BadServerName(String),
    /// Our own handshake could not be encoded (a cluster or node name over
    /// the control lane's cap).
    Encode(EncodeError),
    /// The peer closed the connection during the handshake.
    Closed,
    /// Any other I/O or TLS failure.
    Io(io::Error),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::PeerCertificateMissing => f.write_str(
                "the peer presented no certificate; every node needs one signed by the cluster CA",
            ),
            ConnectError::PeerCertificateRefused {
                reason: rustls::CertificateError::Revoked,
            } => f.write_str(
                "the peer's certificate is revoked (listed in this node's revocation list); \
                 the peer needs a new certificate from the cluster's CA",
            ),
            ConnectError::PeerCertificateRefused { reason } => write!(
                f,
                "the peer's certificate was refused ({reason:?}); it must be signed by this \
                 cluster's CA and valid for the name dialled"
            ),
            ConnectError::RefusedByPeer { alert } => write!(
                f,
                "the peer refused the TLS handshake ({alert:?}); check that this node's \
                 certificate is signed by the CA the peer trusts"
            ),
            ConnectError::ClusterMismatch { ours, theirs } => write!(
                f,
                "the peer belongs to cluster {theirs:?}, not {ours:?}; check the address dialled \
                 or both nodes' cluster names"
            ),
            ConnectError::ProtocolMismatch { ours, theirs } => write!(
                f,
                "the peer speaks protocol version {theirs}, this node {ours}; run compatible \
                 troubadour-remote versions"
            ),
            ConnectError::NameNotInCertificate { node_name } => write!(
                f,
                "the peer says it is node {node_name:?}, but its certificate (signed by the \
                 cluster's CA) is not issued for that name; give each node a certificate with its \
                 node name as a DNS subject alternative name (as `dev_certs::DevCa::node` does)"
            ),
            ConnectError::IncarnationDown {
                node_name,
                incarnation,
            } => write!(
                f,
                "incarnation {incarnation} of node {node_name:?} was declared down and is never \
                 accepted again; restart that node so it gets a new incarnation"
            ),
            ConnectError::PeerRefused { reason } => {
                write!(f, "the peer refused this node's handshake: {reason:?}")
            }
            ConnectError::NoVerdict { kind, code } => write!(
                f,
                "the peer answered our handshake with a {kind} frame (code {code}), not its \
                 verdict; it does not follow the protocol"
            ),
            ConnectError::NotAHandshake { kind } => write!(
                f,
                "the peer's first frame was a {kind} frame, not a handshake; it does not follow \
                 the protocol"
            ),
            ConnectError::BadHandshake(e) => write!(f, "the peer's handshake did not decode: {e}"),
            ConnectError::Framing(e) => write!(f, "framing error during the handshake: {e}"),
            ConnectError::Timeout { after } => write!(
                f,
                "the peer did not finish the handshake within {after:?}; it may be stalled, not a \
                 troubadour node, or the timeout too short for the network"
            ),
            ConnectError::PlaintextNotLoopback { addr } => write!(
                f,
                "plaintext refused for {addr}: it is allowed on loopback only; use Security::Tls"
            ),
            ConnectError::BadServerName(name) => {
                write!(f, "{name:?} is neither a DNS name nor an IP address")
            }
            ConnectError::Encode(e) => write!(f, "our handshake could not be encoded: {e}"),
            ConnectError::Closed => {
                f.write_str("the peer closed the connection during the handshake")
            }
            ConnectError::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Io(e) => Some(e),
            ConnectError::Framing(e) => Some(e),
            ConnectError::BadHandshake(e) => Some(e),
            ConnectError::Encode(e) => Some(e),
            _ => None,
        }
    }
}
