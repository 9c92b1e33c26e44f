//! [`TlsConfig`]: which certificates verify https endpoints, and the client certificate
//! presented to endpoints that require mutual TLS. Files are read once, when the
//! [`Dispatcher`](super::Dispatcher) is built; every problem names its key and file.

use std::path::{Path, PathBuf};

use reqwest::{Certificate, ClientBuilder, Identity};

use super::error::chain;
use super::DispatchError;

/// The built-in roots that verify an endpoint's certificate (the topology's
/// `[endpoints] trust`); [`TlsConfig::ca_file`] adds to any of them.
pub use tidemark_topology::config::Trust;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    pub trust: Trust,
    /// PEM bundle: one or more CA certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain, leaf first; set with `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, RSA or SEC1) of the client certificate.
    pub client_key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Reads the files and configures `builder`; pushes one line per problem.
    pub(crate) fn apply(&self, mut builder: ClientBuilder, problems: &mut Vec<String>) -> ClientBuilder {
        let (webpki, system) = match self.trust {
            Trust::Webpki => (true, false),
            Trust::System => (false, true),
            Trust::Both => (true, true),
            Trust::None => (false, false),
        };
        builder = builder.tls_built_in_webpki_certs(webpki).tls_built_in_native_certs(system);
        if system {
            system_store_check(self.trust == Trust::System && self.ca_file.is_none(), problems);
        }
        if self.trust == Trust::None && self.ca_file.is_none() {
            problems.push("trust `none` needs a CA file".into());
        }
        if let Some(path) = &self.ca_file {
            match read(path, "ca_file").and_then(|pem| ca_bundle(path, &pem)) {
                Ok(certs) => {
                    for cert in certs {
                        builder = builder.add_root_certificate(cert);
                    }
                }
                Err(problem) => problems.push(problem),
            }
        }
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(cert), Some(key)) => match identity(cert, key) {
                Ok(identity) => builder = builder.identity(identity),
                Err(found) => problems.extend(found),
            },
            (Some(_), None) => problems.push("client_cert_file is set without client_key_file".into()),
            (None, Some(_)) => problems.push("client_key_file is set without client_cert_file".into()),
            (None, None) => {}
        }
        builder
    }

    /// A client that does not build with these settings: rustls checks the client key only
    /// then, so the error names the configured files.
    pub(crate) fn build_error(&self, err: reqwest::Error) -> DispatchError {
        let files: Vec<String> = [
            ("ca_file", &self.ca_file),
            ("client_cert_file", &self.client_cert_file),
            ("client_key_file", &self.client_key_file),
        ]
        .into_iter()
        .filter_map(|(key, path)| path.as_ref().map(|p| format!("{key} {}", p.display())))
        .collect();
        if files.is_empty() {
            return DispatchError::Client(err);
        }
        DispatchError::Config { problems: vec![format!("TLS with {}: {}", files.join(", "), chain(&err))] }
    }
}

/// An image without ca-certificates has an empty system store, which would fail every
/// https endpoint as untrusted: refused at start when nothing else is trusted (`system`
/// without a CA file), a warning otherwise.
fn system_store_check(only_source: bool, problems: &mut Vec<String>) {
    let found = rustls_native_certs::load_native_certs();
    if !found.certs.is_empty() {
        return;
    }
    let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
    let why = if why.is_empty() { "no certificate found".to_string() } else { why.join("; ") };
    if only_source {
        problems.push(format!(
            "trust `system`: the system trust store is empty ({why}); install ca-certificates, or use trust \
             `webpki` or a ca_file"
        ));
    } else {
        tracing::warn!(reason = %why, "the system trust store is empty: trusting only the other roots configured");
    }
}

fn read(path: &Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key} {}: cannot read: {e}", path.display()))
}

fn ca_bundle(path: &Path, pem: &[u8]) -> Result<Vec<Certificate>, String> {
    let certs = Certificate::from_pem_bundle(pem)
        .map_err(|e| format!("ca_file {}: not a PEM certificate bundle: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("ca_file {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display()));
    }
    Ok(certs)
}

/// The client identity from its two files; the problems of both files at once.
fn identity(cert_path: &Path, key_path: &Path) -> Result<Identity, Vec<String>> {
    let mut problems = Vec::new();
    let cert = read(cert_path, "client_cert_file").map_err(|p| problems.push(p)).ok();
    let key = read(key_path, "client_key_file").map_err(|p| problems.push(p)).ok();
    if let Some(cert) = &cert {
        if !contains(cert, b"-----BEGIN CERTIFICATE-----") {
            problems.push(format!("client_cert_file {}: holds no PEM certificate", cert_path.display()));
        }
    }
    if let Some(key) = &key {
        if !contains(key, b"PRIVATE KEY-----") {
            problems.push(format!("client_key_file {}: holds no PEM private key", key_path.display()));
        }
    }
    let (Some(cert), Some(key), true) = (cert, key, problems.is_empty()) else { return Err(problems) };
    let mut pem = cert;
    pem.push(b'\n');
    pem.extend_from_slice(&key);
    // reqwest's message is about the combined PEM, which names neither file.
    Identity::from_pem(&pem).map_err(|e| {
        vec![format!(
            "client_cert_file {} with client_key_file {}: not a usable certificate and key: {e}",
            cert_path.display(),
            key_path.display()
        )]
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(tls: &TlsConfig) -> Vec<String> {
        let mut problems = Vec::new();
        let _ = tls.apply(reqwest::Client::builder(), &mut problems);
        problems
    }

    #[test]
    fn unreadable_or_empty_tls_files_are_reported_together_naming_each_file() {
        let not_pem = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_pem.path(), "hello").unwrap();
        let tls = TlsConfig {
            trust: Trust::Webpki,
            ca_file: Some(not_pem.path().to_owned()),
            client_cert_file: Some("/nonexistent/client.pem".into()),
            client_key_file: Some(not_pem.path().to_owned()),
        };
        let found = problems(&tls);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with(&format!("ca_file {}: holds no PEM certificate", not_pem.path().display())));
        assert!(found[1].starts_with("client_cert_file /nonexistent/client.pem: cannot read"), "{found:?}");
        assert!(found[2].contains("holds no PEM private key"), "{found:?}");
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_trust_none_needs_a_ca_file() {
        let tls = TlsConfig { trust: Trust::None, client_cert_file: Some("/c.pem".into()), ..TlsConfig::default() };
        assert_eq!(problems(&tls), ["trust `none` needs a CA file", "client_cert_file is set without client_key_file"]);
    }
}
