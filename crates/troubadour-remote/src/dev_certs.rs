//! A certificate authority for tests, examples and benchmarks on one
//! machine (the `dev-certs` feature): a CA made on the spot with rcgen, and
//! node certificates for `localhost` and 127.0.0.1 issued from it.
//!
//! **Never for production**: the CA's key lives in memory and in whatever
//! files [`DevCa::write_node`] writes; a real cluster's CA key stays
//! offline, and its node certificates name the nodes' real addresses.
//!
//! ```
//! use troubadour_remote::dev_certs::DevCa;
//! let ca = DevCa::new("example CA (tests only)")?;
//! let tls = ca.tls("node-a")?; // a TlsConfig trusting this CA
//! # let _ = tls;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevocationReason,
    RevokedCertParams, SanType, SerialNumber,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Mutex;

use crate::connection::{ConfigError, TlsConfig};

/// A CA made for the occasion. See the [module docs](self).
pub struct DevCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
    /// The node name and serial number of every certificate issued, in
    /// order (serials count up from 1).
    issued: Mutex<Vec<(String, u64)>>,
}

impl DevCa {
    /// A new CA whose certificate's common name is `name`.
    pub fn new(name: &str) -> Result<DevCa, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(DevCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            issued: Mutex::new(Vec::new()),
        })
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A certificate for node `name` (its node name as a DNS subject
    /// alternative name, which the handshake requires), also valid for
    /// `localhost` and 127.0.0.1, common name `name`, as server and client:
    /// (certificate PEM, key PEM).
    pub fn node(&self, name: &str) -> Result<(String, String), rcgen::Error> {
        self.node_at(name, &[Ipv4Addr::LOCALHOST.into()])
    }

    /// As [`DevCa::node`], valid for the addresses `ips` instead of
    /// 127.0.0.1: a node that others dial at 127.0.0.2 needs a certificate
    /// valid for 127.0.0.2, since a dialler checks the certificate against
    /// the address it dialled.
    pub fn node_at(&self, name: &str, ips: &[IpAddr]) -> Result<(String, String), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_owned(), "localhost".to_owned()])?;
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let serial = issued.len() as u64 + 1;
        params.serial_number = Some(SerialNumber::from(serial));
        let cert = params.signed_by(&key, &self.issuer)?;
        issued.push((name.to_owned(), serial));
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A certificate revocation list (PEM) signed by this CA that revokes
    /// every certificate it issued so far to the nodes named in `nodes`,
    /// for [`TlsConfig::from_pem_with_revocations`]. Valid from 2000 to
    /// 4000, like the certificates.
    pub fn revocation_list(&self, nodes: &[&str]) -> Result<String, rcgen::Error> {
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let revoked_certs = issued
            .iter()
            .filter(|(name, _)| nodes.contains(&name.as_str()))
            .map(|&(_, serial)| RevokedCertParams {
                serial_number: SerialNumber::from(serial),
                revocation_time: date_time_ymd(2000, 1, 1),
                reason_code: Some(RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect();
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2000, 1, 1),
            next_update: date_time_ymd(4000, 1, 1),
            crl_number: SerialNumber::from(issued.len() as u64 + 1),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        params.signed_by(&self.issuer)?.pem()
    }

    /// The TLS configuration of a node `name` with a certificate from this
    /// CA, trusting `trust`'s certificate (usually this CA's own PEM).
    pub fn tls_trusting(&self, name: &str, trust: &str) -> Result<TlsConfig, DevCertError> {
        let (chain, key) = self.node(name)?;
        Ok(TlsConfig::from_pem(
            chain.as_bytes(),
            key.as_bytes(),
            trust.as_bytes(),
        )?)
    }

    /// The TLS configuration of a node `name` of this CA's cluster.
    pub fn tls(&self, name: &str) -> Result<TlsConfig, DevCertError> {
        self.tls_trusting(name, &self.pem)
    }

    /// Writes `ca.pem`, `<name>.pem` and `<name>.key` into `dir` (made if
    /// missing), for processes that read their certificates from files.
    pub fn write_node(&self, dir: &Path, name: &str) -> Result<(), DevCertError> {
        self.write_node_at(dir, name, &[Ipv4Addr::LOCALHOST.into()])
    }

    /// As [`DevCa::write_node`], with a certificate valid for `ips` (see
    /// [`DevCa::node_at`]).
    pub fn write_node_at(
        &self,
        dir: &Path,
        name: &str,
        ips: &[IpAddr],
    ) -> Result<(), DevCertError> {
        std::fs::create_dir_all(dir)?;
        let (cert, key) = self.node_at(name, ips)?;
        std::fs::write(dir.join("ca.pem"), &self.pem)?;
        std::fs::write(dir.join(format!("{name}.pem")), cert)?;
        std::fs::write(dir.join(format!("{name}.key")), key)?;
        Ok(())
    }
}

/// The TLS configuration of node `name` from the files
/// [`DevCa::write_node`] wrote into `dir` (`ca.pem`, `<name>.pem`,
/// `<name>.key`): what a node process started by a test or a benchmark
/// reads.
pub fn read_node(dir: &Path, name: &str) -> Result<TlsConfig, DevCertError> {
    let read = |file: &str| std::fs::read(dir.join(file));
    Ok(TlsConfig::from_pem(
        &read(&format!("{name}.pem"))?,
        &read(&format!("{name}.key"))?,
        &read("ca.pem")?,
    )?)
}

/// Why a development certificate could not be made, written or read.
#[derive(Debug)]
#[non_exhaustive]
pub enum DevCertError {
    /// rcgen refused.
    Generate(rcgen::Error),
    /// The PEM did not load into a TLS configuration.
    Config(ConfigError),
    /// Writing or reading the files failed.
    Io(std::io::Error),
}

impl std::fmt::Display for DevCertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DevCertError::Generate(e) => write!(f, "could not generate a certificate: {e}"),
            DevCertError::Config(e) => write!(f, "the generated certificate did not load: {e}"),
            DevCertError::Io(e) => write!(f, "could not write or read the certificate files: {e}"),
        }
    }
}

impl std::error::Error for DevCertError {}

impl From<rcgen::Error> for DevCertError {
    fn from(e: rcgen::Error) -> Self {
        DevCertError::Generate(e)
    }
}

impl From<ConfigError> for DevCertError {
    fn from(e: ConfigError) -> Self {
        DevCertError::Config(e)
    }
}

impl From<std::io::Error> for DevCertError {
    fn from(e: std::io::Error) -> Self {
        DevCertError::Io(e)
    }
}
