//! The dispatcher against real TLS endpoints on 127.0.0.1 whose certificates come from a CA
//! generated here: reached with that CA configured, refused clearly without it; and an
//! endpoint that requires a client certificate (mTLS), reached only when one is configured.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tidemark::dispatch::{Delivery, Dispatcher, Endpoints, Outcome, RetryPolicy, Signer, Target, TlsConfig, Trust};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A CA, and the certificates and keys it signed, as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A leaf certificate and its key, in DER for the server and as PEM files for the client.
struct Leaf {
    cert: CertificateDer<'static>,
    key: Vec<u8>,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&ca_key).expect("CA");
        let pki = Pki { dir: tempfile::tempdir().expect("tmp"), ca, ca_key };
        std::fs::write(pki.ca_file(), pki.ca.pem()).expect("write CA");
        pki
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn leaf(&self, file: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, file);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).expect("leaf");
        let (cert_file, key_file) =
            (self.dir.path().join(format!("{file}.pem")), self.dir.path().join(format!("{file}.key")));
        std::fs::write(&cert_file, cert.pem()).expect("write cert");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        Leaf { cert: cert.der().clone(), key: key.serialize_der(), cert_file, key_file }
    }
}

/// An HTTPS endpoint answering 200 to every request it can read; it records the paths of
/// the requests and how many handshakes failed.
struct TlsServer {
    url: reqwest::Url,
    paths: Arc<Mutex<Vec<String>>>,
    failed_handshakes: Arc<Mutex<usize>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsServer {
    /// Serves with `leaf`; requires a client certificate signed by `client_ca` if given.
    async fn start(leaf: &Leaf, client_ca: Option<&Pki>) -> TlsServer {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = match client_ca {
            Some(pki) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(pki.ca.der().clone()).expect("client CA");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                    .build()
                    .expect("verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key.clone()));
        let config = builder.with_single_cert(vec![leaf.cert.clone()], key).expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = reqwest::Url::parse(&format!("https://{}/", listener.local_addr().expect("addr"))).expect("url");
        let (paths, failed_handshakes): (Arc<Mutex<Vec<String>>>, Arc<Mutex<usize>>) = Default::default();
        let (p, f) = (Arc::clone(&paths), Arc::clone(&failed_handshakes));
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, p, f) = (acceptor.clone(), Arc::clone(&p), Arc::clone(&f));
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => serve(tls, p).await,
                        Err(_) => *f.lock().expect("lock") += 1,
                    }
                });
            }
        });
        TlsServer { url, paths, failed_handshakes, accept }
    }

    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.url.clone();
        url.set_path(path);
        url
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().expect("lock").clone()
    }

    fn failed_handshakes(&self) -> usize {
        *self.failed_handshakes.lock().expect("lock")
    }
}

/// HTTP/1.1 with `Content-Length` bodies, keep-alive, 200 to everything.
async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(stream: S, paths: Arc<Mutex<Vec<String>>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match stream.read_line(&mut line).await {
            Ok(n) if n > 0 => {}
            // The client hung up, or the TLS layer refused it (no client certificate).
            _ => return,
        }
        let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
        let mut length = 0;
        loop {
            line.clear();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        paths.lock().expect("lock").push(path);
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if stream.write_all(answer.as_bytes()).await.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}

fn dispatcher(server: &TlsServer, tls: &TlsConfig) -> Dispatcher {
    let endpoints =
        Endpoints { action_url: Some(server.url("/act")), notify_url: None, timeout: Duration::from_secs(5) };
    let retry = RetryPolicy { base: Duration::from_millis(1), cap: Duration::from_millis(5), max_attempts: None };
    let signer = Signer::from_secret(b"a-secret", "test").expect("signer");
    Dispatcher::with_tls(endpoints, tls, Some(signer), retry, 2).expect("dispatcher")
}

fn delivery() -> Delivery {
    Delivery {
        key: "oversell:1:SKU-1:snap-1".into(),
        target: Target::Act,
        body: b"{}".to_vec(),
        attempt: 0,
        source_append_ms: 0,
    }
}

fn with_ca(pki: &Pki) -> TlsConfig {
    TlsConfig { ca_file: Some(pki.ca_file()), ..TlsConfig::default() }
}

fn with_client(pki: &Pki, client: &Leaf) -> TlsConfig {
    TlsConfig {
        client_cert_file: Some(client.cert_file.clone()),
        client_key_file: Some(client.key_file.clone()),
        ..with_ca(pki)
    }
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Makes one attempt and returns its outcome and what it logged.
async fn attempt_logged(dispatcher: &Dispatcher) -> (Outcome, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    let outcome = {
        let _guard = tracing::subscriber::set_default(subscriber);
        dispatcher.attempt(&delivery()).await
    };
    let logs = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    (outcome, logs)
}

fn is_tls_retry(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Retry { reason, .. } if reason == "tls")
}

#[tokio::test]
async fn an_endpoint_with_a_private_ca_is_reached_with_the_ca_file_and_refused_clearly_without_it() {
    let pki = Pki::new("tidemark test CA");
    let server =
        TlsServer::start(&pki.leaf("server", &["127.0.0.1", "localhost"], ExtendedKeyUsagePurpose::ServerAuth), None)
            .await;

    let (outcome, logs) = attempt_logged(&dispatcher(&server, &TlsConfig::default())).await;
    assert!(is_tls_retry(&outcome), "the action stays pending: {outcome:?}");
    assert!(logs.contains("ERROR") && logs.contains("TLS failure"), "{logs}");
    assert!(logs.contains("not trusted: check endpoints.trust and endpoints.ca_file"), "{logs}");
    assert!(logs.contains("UnknownIssuer"), "{logs}");
    assert!(server.paths().is_empty());

    // The system store does not know the generated CA either (an empty one is refused at start).
    if !rustls_native_certs::load_native_certs().certs.is_empty() {
        let system = TlsConfig { trust: Trust::System, ..TlsConfig::default() };
        assert!(is_tls_retry(&dispatcher(&server, &system).attempt(&delivery()).await));
    }

    for trust in [Trust::Webpki, Trust::System, Trust::Both, Trust::None] {
        let tls = TlsConfig { trust, ..with_ca(&pki) };
        let outcome = dispatcher(&server, &tls).attempt(&delivery()).await;
        assert_eq!(outcome, Outcome::Delivered { status: 200 }, "{trust:?}");
    }
    assert_eq!(server.paths(), ["/act"; 4]);
}

#[tokio::test]
async fn tls_failures_are_logged_as_errors_at_a_bounded_rate_and_every_attempt_still_fails() {
    let pki = Pki::new("tidemark test CA");
    let server = TlsServer::start(&pki.leaf("server", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth), None).await;
    let dispatcher = dispatcher(&server, &TlsConfig::default());
    let (first, logs) = attempt_logged(&dispatcher).await;
    let (second, later) = attempt_logged(&dispatcher).await;
    assert!(is_tls_retry(&first) && is_tls_retry(&second));
    assert!(logs.contains("ERROR") && logs.contains("suppressed=0"), "{logs}");
    assert!(!later.contains("ERROR"), "a second failure within 10 s is not another error line: {later}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_a_tls_failure_even_from_a_trusted_ca() {
    let pki = Pki::new("tidemark test CA");
    let server =
        TlsServer::start(&pki.leaf("server", &["inventory.internal"], ExtendedKeyUsagePurpose::ServerAuth), None).await;
    let (outcome, logs) = attempt_logged(&dispatcher(&server, &with_ca(&pki))).await;
    assert!(is_tls_retry(&outcome), "{outcome:?}");
    assert!(logs.contains("not valid for name") && logs.contains("does not name the host of its URL"), "{logs}");
    assert!(server.paths().is_empty());
}

#[tokio::test]
async fn an_endpoint_that_requires_a_client_certificate_is_reached_only_with_one_from_its_ca() {
    let pki = Pki::new("tidemark test CA");
    let server_leaf = pki.leaf("server", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let server = TlsServer::start(&server_leaf, Some(&pki)).await;

    let (outcome, logs) = attempt_logged(&dispatcher(&server, &with_ca(&pki))).await;
    assert!(is_tls_retry(&outcome), "without a client certificate: {outcome:?}");
    assert!(logs.contains("refused our client certificate"), "{logs}");
    assert!(server.paths().is_empty());
    assert_eq!(server.failed_handshakes(), 1);

    let stranger = Pki::new("another CA");
    let foreign = stranger.leaf("client", &["tidemark"], ExtendedKeyUsagePurpose::ClientAuth);
    let outcome = dispatcher(&server, &with_client(&pki, &foreign)).attempt(&delivery()).await;
    assert!(is_tls_retry(&outcome), "with a client certificate from another CA: {outcome:?}");
    assert!(server.paths().is_empty());

    let client = pki.leaf("client", &["tidemark"], ExtendedKeyUsagePurpose::ClientAuth);
    let outcome = dispatcher(&server, &with_client(&pki, &client)).attempt(&delivery()).await;
    assert_eq!(outcome, Outcome::Delivered { status: 200 });
    assert_eq!(server.paths(), ["/act"]);
}

#[test]
fn a_client_key_that_does_not_parse_is_refused_at_start_naming_both_files() {
    let pki = Pki::new("tidemark test CA");
    let client = pki.leaf("client", &["tidemark"], ExtendedKeyUsagePurpose::ClientAuth);
    let garbled = pki.dir.path().join("garbled.key");
    std::fs::write(&garbled, "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n").expect("write");
    let tls = TlsConfig { client_key_file: Some(garbled.clone()), ..with_client(&pki, &client) };
    let endpoints = Endpoints { action_url: None, notify_url: None, timeout: Duration::from_secs(1) };
    let err = Dispatcher::with_tls(endpoints, &tls, None, RetryPolicy::default(), 1).expect_err("must fail");
    let shown = err.to_string();
    assert!(shown.contains(&display(&client.cert_file)) && shown.contains(&display(&garbled)), "{shown}");
}

fn display(path: &Path) -> String {
    path.display().to_string()
}
