//! Connection pools to PostgreSQL for troubadour's stores (the journal of
//! `troubadour-persistence`, the leases of `troubadour-cluster`), from a
//! URL as libpq spells it, TLS included:
//!
//! * no `sslmode`, `sslmode=disable` or `sslmode=prefer` without a CA:
//!   plaintext, as before (for a database on the same host or a private
//!   network);
//! * `sslmode=require`, `verify-ca` or `verify-full` with
//!   `sslrootcert=<PEM file>`: TLS (rustls) is required and the server's
//!   certificate must chain to that CA and name the host of the URL;
//! * `sslmode=prefer` with `sslrootcert`: TLS verified as above when the
//!   server offers it, plaintext when it does not.
//!
//! Unlike libpq's `require`, which encrypts without checking whom it talks
//! to, every TLS connection here verifies the server: `require` without
//! `sslrootcert` is an error that says so.
//!
//! ```no_run
//! # fn run() -> Result<(), troubadour_postgres::SettingsError> {
//! let pool = troubadour_postgres::pool(
//!     "postgres://journal@db.internal/journal?sslmode=verify-full&sslrootcert=/etc/troubadour/db-ca.pem",
//! )?;
//! # Ok(()) }
//! ```

use deadpool_postgres::{Config, ManagerConfig, Pool, RecyclingMethod, Runtime};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::fmt;
use std::sync::Arc;

/// A connection URL that cannot be used: what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

/// How a URL asks for TLS.
#[derive(Debug, PartialEq, Eq)]
struct Tls {
    /// The URL tokio-postgres reads: `sslrootcert` taken out, the
    /// `verify-*` modes written as `require` (the verification is ours).
    url: String,
    /// The CA file, if the URL names one.
    root_cert: Option<String>,
    /// TLS must be used.
    required: bool,
}

fn read_url(url: &str) -> Result<Tls, SettingsError> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let mut root_cert = None;
    let mut mode = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", path)) => root_cert = Some(path.to_string()),
            Some(("sslmode", m)) => mode = Some(m.to_string()),
            _ => kept.push(pair.to_string()),
        }
    }
    let required = match mode.as_deref() {
        None | Some("disable") | Some("prefer") => false,
        Some("require") | Some("verify-ca") | Some("verify-full") => true,
        Some(other) => {
            return Err(SettingsError(format!(
                "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
            )))
        }
    };
    if required && root_cert.is_none() {
        return Err(SettingsError(format!(
            "sslmode={} needs sslrootcert=<PEM file of the CA that signed the server's \
             certificate>: troubadour verifies every TLS server",
            mode.unwrap_or_default()
        )));
    }
    let tokio_mode = match (mode.as_deref(), root_cert.is_some()) {
        (Some("disable"), _) => Some("disable"),
        (_, true) => Some(if required { "require" } else { "prefer" }),
        // No CA: no mode, or `prefer` (a required mode without one was
        // refused above).
        (m, false) => m,
    };
    if let Some(m) = tokio_mode {
        kept.push(format!("sslmode={m}"));
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(Tls {
        url,
        root_cert: root_cert.filter(|_| mode.as_deref() != Some("disable")),
        required,
    })
}

/// An error and its causes, outermost first: tokio-postgres says only
/// `db error` and keeps the server's message (a refused connection's
/// reason, say) in its source.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

/// The rustls client that trusts only the CA in `path`.
fn client_config(path: &str) -> Result<rustls::ClientConfig, SettingsError> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| SettingsError(format!("cannot read sslrootcert {path}: {e}")))?;
    for cert in certs {
        let cert = cert.map_err(|e| {
            SettingsError(format!("sslrootcert {path} is not PEM certificates: {e}"))
        })?;
        roots
            .add(cert)
            .map_err(|e| SettingsError(format!("sslrootcert {path}: unusable certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(SettingsError(format!(
            "sslrootcert {path} holds no certificate"
        )));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SettingsError(format!("TLS settings: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A pool of connections to the database at `url` (see the crate's
/// documentation for its TLS parameters) that checks a connection before
/// handing it out again, so it reconnects after a server restart. Connects
/// lazily: the first use reports an unreachable server.
pub fn pool(url: &str) -> Result<Pool, SettingsError> {
    let tls = read_url(url)?;
    let mut config = Config::new();
    config.url = Some(tls.url);
    config.manager = Some(ManagerConfig {
        recycling_method: RecyclingMethod::Verified,
    });
    let made = match tls.root_cert {
        Some(path) => config.create_pool(
            Some(Runtime::Tokio1),
            tokio_postgres_rustls::MakeRustlsConnect::new(client_config(&path)?),
        ),
        None => config.create_pool(Some(Runtime::Tokio1), tokio_postgres::NoTls),
    };
    made.map_err(|e| SettingsError(format!("bad PostgreSQL settings: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(url: &str) -> Result<(String, Option<String>, bool), SettingsError> {
        read_url(url).map(|t| (t.url, t.root_cert, t.required))
    }

    #[test]
    fn plain_urls_stay_as_they_are() {
        assert_eq!(
            read("postgres://u@h/db"),
            Ok(("postgres://u@h/db".into(), None, false))
        );
        assert_eq!(
            read("postgres://u@h/db?connect_timeout=3"),
            Ok(("postgres://u@h/db?connect_timeout=3".into(), None, false))
        );
        assert_eq!(
            read("postgres://u@h/db?sslmode=disable&sslrootcert=/ca.pem"),
            Ok(("postgres://u@h/db?sslmode=disable".into(), None, false))
        );
    }

    #[test]
    fn verified_modes_require_tls_with_the_named_ca() {
        for mode in ["require", "verify-ca", "verify-full"] {
            assert_eq!(
                read(&format!(
                    "postgres://u@h/db?sslmode={mode}&sslrootcert=/ca.pem&application_name=x"
                )),
                Ok((
                    "postgres://u@h/db?application_name=x&sslmode=require".into(),
                    Some("/ca.pem".into()),
                    true
                ))
            );
        }
        assert_eq!(
            read("postgres://u@h/db?sslrootcert=/ca.pem"),
            Ok((
                "postgres://u@h/db?sslmode=prefer".into(),
                Some("/ca.pem".into()),
                false
            ))
        );
    }

    #[test]
    fn tls_without_a_ca_or_an_unknown_mode_is_an_error_that_says_what_to_do() {
        let e = read("postgres://u@h/db?sslmode=require").unwrap_err();
        assert!(e.0.contains("needs sslrootcert="), "{e}");
        let e = read("postgres://u@h/db?sslmode=allow").unwrap_err();
        assert!(e.0.contains("sslmode=allow is not one of"), "{e}");
        let e =
            pool("postgres://u@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem").unwrap_err();
        assert!(
            e.0.contains("cannot read sslrootcert /nonexistent/ca.pem"),
            "{e}"
        );
    }
}
