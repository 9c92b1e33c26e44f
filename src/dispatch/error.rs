//! Errors of the dispatcher, classified by whether trying again can help.
//!
//! Configuration errors ([`Secret`](DispatchError::Secret), [`Config`](DispatchError::Config),
//! [`Client`](DispatchError::Client)) stop startup. Per-attempt errors become an
//! [`Outcome`](super::Outcome): retriable ones a `Retry`, the rest a `PermanentFailure`.

use std::time::Duration;

use thiserror::Error;

use super::outcome::{classify_status, StatusClass};
use super::Target;

#[derive(Debug, Error)]
pub enum DispatchError {
    /// The webhook secret is configured but unusable. Not retriable: fix the configuration.
    #[error("webhook secret from {origin}: {detail}")]
    Secret { origin: String, detail: String },
    /// Endpoints, limits or retry policy are invalid; lists every problem. Not retriable.
    #[error("dispatcher configuration: {}", problems.join("; "))]
    Config { problems: Vec<String> },
    /// The HTTP client could not be built (TLS backend). Not retriable.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// A delivery targets an endpoint with no URL. Retriable in the sense that the row stays
    /// in the outbox: a restart with the endpoint configured delivers it; dead-lettering it
    /// would lose an action to a configuration slip.
    #[error("no {0} endpoint configured")]
    NoEndpoint(Target),
    /// The key cannot be sent as a header value (control characters). Not retriable: the
    /// same key fails the same way every time.
    #[error("idempotency key is not a valid header value")]
    InvalidKey,
    /// The request did not complete within the endpoint timeout. Retriable.
    #[error("no complete response within {0:?}")]
    Timeout(Duration),
    /// No connection could be opened (refused, DNS). Retriable.
    #[error("connect: {0}")]
    Connect(String),
    /// The TLS handshake failed: the endpoint's certificate is not trusted (unknown CA,
    /// wrong name, expired) or it refused ours (mTLS). A configuration problem on one side
    /// or the other, not a fault of the action: retriable, so the row stays in the outbox
    /// until the trust roots or certificates are fixed, and logged as an error (at a bounded
    /// rate) so it is never a silent retry loop.
    #[error("TLS: {0}")]
    Tls(String),
    /// The connection was reset or closed before a complete response. Retriable: the
    /// endpoint may or may not have acted, and the idempotency key makes a repeat safe.
    #[error("connection {kind}: {detail}")]
    Connection { kind: ConnectionLoss, detail: String },
    /// The response body of a non-2xx answer could not be read. Retriable: a cut-off
    /// answer is not trusted to dead-letter an action.
    #[error("reading the response body: {0}")]
    Body(String),
    /// Any other failure while sending. Retriable.
    #[error("request: {0}")]
    Transport(String),
    /// The endpoint answered with a status that is not 2xx or 409. Retriable for 5xx, 408
    /// and 429; permanent for every other status.
    #[error("status {status}")]
    Status { status: u16, body_snippet: String },
}

/// How a connection was lost before a response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionLoss {
    Reset,
    Closed,
}

impl std::fmt::Display for ConnectionLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnectionLoss::Reset => "reset",
            ConnectionLoss::Closed => "closed",
        })
    }
}

impl DispatchError {
    /// Whether the same request may succeed later.
    pub fn is_retriable(&self) -> bool {
        match self {
            DispatchError::Secret { .. }
            | DispatchError::Config { .. }
            | DispatchError::Client(_)
            | DispatchError::InvalidKey => false,
            DispatchError::NoEndpoint(_)
            | DispatchError::Timeout(_)
            | DispatchError::Connect(_)
            | DispatchError::Tls(_)
            | DispatchError::Connection { .. }
            | DispatchError::Body(_)
            | DispatchError::Transport(_) => true,
            DispatchError::Status { status, .. } => classify_status(*status) == StatusClass::Retriable,
        }
    }

    /// A short, bounded-cardinality reason for logs and the audit record: `status 503`,
    /// `timeout`, `connection reset`, ...
    pub fn reason(&self) -> String {
        match self {
            DispatchError::Secret { .. } => "secret".into(),
            DispatchError::Config { .. } => "configuration".into(),
            DispatchError::Client(_) => "client".into(),
            DispatchError::NoEndpoint(target) => format!("no {target} endpoint"),
            DispatchError::InvalidKey => "invalid key".into(),
            DispatchError::Timeout(_) => "timeout".into(),
            DispatchError::Connect(_) => "connect error".into(),
            DispatchError::Tls(_) => "tls".into(),
            DispatchError::Connection { kind, .. } => format!("connection {kind}"),
            DispatchError::Body(_) => "body read error".into(),
            DispatchError::Transport(_) => "request error".into(),
            DispatchError::Status { status, .. } => format!("status {status}"),
        }
    }

    /// The HTTP status, or 0 when no response arrived.
    pub fn status(&self) -> u16 {
        match self {
            DispatchError::Status { status, .. } => *status,
            _ => 0,
        }
    }

    /// Classifies a reqwest failure of `send` or of reading the body. The URL is stripped
    /// from details: it may carry credentials.
    pub(crate) fn from_reqwest(err: reqwest::Error, timeout: Duration) -> Self {
        let err = err.without_url();
        let detail = chain(&err);
        if err.is_timeout() || io_kind(&err) == Some(std::io::ErrorKind::TimedOut) {
            return DispatchError::Timeout(timeout);
        }
        // Before `is_connect`: a certificate problem is a connect error too, and with TLS 1.3
        // the server's refusal of a client certificate only arrives with the first read.
        if let Some(tls) = tls_error(&err) {
            return DispatchError::Tls(tls_detail(tls));
        }
        if err.is_connect() {
            return DispatchError::Connect(detail);
        }
        if err.is_body() || err.is_decode() {
            return DispatchError::Body(detail);
        }
        match io_kind(&err) {
            Some(
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe,
            ) => DispatchError::Connection { kind: ConnectionLoss::Reset, detail },
            Some(std::io::ErrorKind::UnexpectedEof) => {
                DispatchError::Connection { kind: ConnectionLoss::Closed, detail }
            }
            // hyper reports a peer that hung up mid-exchange as "connection closed before
            // message completed", without an io::Error underneath.
            _ if detail.contains("closed") => DispatchError::Connection { kind: ConnectionLoss::Closed, detail },
            _ => DispatchError::Transport(detail),
        }
    }
}

/// The innermost io::Error kind in the source chain, if any.
fn io_kind(err: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut found = None;
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            found = Some(io.kind());
        }
        current = e.source();
    }
    found
}

/// The rustls error in the source chain, if any. `io::Error::source` skips the error it
/// wraps (and tokio-rustls's io::Error sits inside another), so io::Errors are unwrapped.
fn tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = match e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// The rustls message, with a hint at the setting that usually fixes it.
fn tls_detail(err: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError, Error as E};
    let hint = match err {
        E::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }) => {
            "the endpoint's certificate does not name the host of its URL"
        }
        E::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "the endpoint's certificate has expired"
        }
        E::InvalidCertificate(_) => {
            "the endpoint's certificate is not trusted: check endpoints.trust and endpoints.ca_file"
        }
        E::AlertReceived(A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::AccessDenied) => {
            "the endpoint refused our client certificate: check endpoints.client_cert_file and client_key_file"
        }
        _ => "the TLS handshake failed",
    };
    format!("{err} ({hint})")
}

/// "outer: inner: innermost", for logs.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut current = err.source();
    while let Some(e) = current {
        out.push_str(": ");
        out.push_str(&e.to_string());
        current = e.source();
    }
    out
}
