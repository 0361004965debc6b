//! Helpers shared by the integration tests: the test CA.
#![allow(dead_code)]

use troubadour_remote::dev_certs::DevCa;
use troubadour_remote::TlsConfig;

/// A CA made for one test, and node certificates issued from it.
pub struct Ca {
    pub pem: String,
    ca: DevCa,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let ca = DevCa::new(name).unwrap();
        Ca {
            pem: ca.pem().to_string(),
            ca,
        }
    }

    /// A node certificate for `localhost` and 127.0.0.1: (chain PEM, key PEM).
    pub fn node(&self, name: &str) -> (String, String) {
        self.ca.node(name).unwrap()
    }

    /// Writes `ca.pem`, `<name>.pem`, `<name>.key` into `dir`.
    pub fn write_node(&self, dir: &std::path::Path, name: &str) {
        self.ca.write_node(dir, name).unwrap()
    }

    /// TLS config for a node with a certificate from this CA, trusting `trust`.
    pub fn tls(&self, name: &str, trust: &Ca) -> TlsConfig {
        self.ca.tls_trusting(name, &trust.pem).unwrap()
    }

    /// TLS config for a node whose certificate names only the node (and
    /// `localhost`), no address: as for pods whose addresses are not
    /// known when certificates are issued.
    pub fn tls_without_address(&self, name: &str) -> TlsConfig {
        let (cert, key) = self.ca.node_at(name, &[]).unwrap();
        TlsConfig::from_pem(cert.as_bytes(), key.as_bytes(), self.pem.as_bytes()).unwrap()
    }

    /// A revocation list (PEM) revoking what this CA issued to `nodes`.
    pub fn revocation_list(&self, nodes: &[&str]) -> String {
        self.ca.revocation_list(nodes).unwrap()
    }

    /// TLS config for a node of this CA's cluster that refuses whatever
    /// `revocation_list` revokes.
    pub fn tls_revoking(&self, name: &str, revocation_list: &str) -> TlsConfig {
        let (cert, key) = self.node(name);
        TlsConfig::from_pem_with_revocations(
            cert.as_bytes(),
            key.as_bytes(),
            self.pem.as_bytes(),
            revocation_list.as_bytes(),
        )
        .unwrap()
    }
}
