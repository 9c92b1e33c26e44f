//! The admin listener: `POST /pause` and `POST /resume`, apart from the metrics port.
//!
//! | route | answer |
//! |---|---|
//! | `POST /pause` | 200: consumption stops (state, metrics and probes stay up) |
//! | `POST /resume` | 200: consumption restarts |
//! | `GET /paused` | 200 with `true` or `false` |
//! | any, without the right `Authorization: Bearer <token>` when a token is set | 401 |
//!
//! One POST stops actions for every SKU the pod owns, so the listener is loopback by default
//! (`kubectl exec` / `kubectl port-forward` reach it) and refuses to start on any other
//! address without a token. The token file is read again on every request, so a rotated
//! Secret takes effect without a restart. Every change and every refused request is logged
//! under the `tidemark::audit` target with the peer address.
//!
//! A pause survives a restart: it is remembered as a file in the state directory (the pod's
//! volume), so a pod that crashes or is rescheduled while an operator holds it paused does not
//! resume on its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::Progress;

/// The name of the file in the state directory that marks a pause in force.
pub const PAUSE_FILE: &str = "tidemark-paused.json";

/// `--admin-addr` and `--admin-token-file`, checked.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    /// Whether the address was chosen by the operator; a default address in use elsewhere
    /// (several processes on one host) only disables the listener.
    pub explicit: bool,
    pub token_file: Option<PathBuf>,
    /// The state directory, where a pause is remembered.
    pub state_dir: Option<PathBuf>,
}

impl Config {
    /// Refuses a non-loopback address without a token, and a token file that cannot be read
    /// or is empty.
    pub fn check(&self) -> Result<Option<String>, String> {
        let token = match &self.token_file {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        if token.is_none() && !self.addr.ip().is_loopback() {
            return Err(format!(
                "--admin-addr {} is not a loopback address: pass --admin-token-file (a bearer token from a Secret), \
                 or keep the admin listener on 127.0.0.1",
                self.addr
            ));
        }
        Ok(token)
    }
}

fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--admin-token-file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("--admin-token-file {}: empty", path.display()));
    }
    Ok(token.to_string())
}

/// Equal tokens, compared in time independent of where they differ (and of their lengths:
/// the digests are compared, not the tokens).
pub fn tokens_match(given: &str, expected: &str) -> bool {
    let (a, b) = (Sha256::digest(given.as_bytes()), Sha256::digest(expected.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Restores a pause remembered in `state_dir`; returns whether one was.
pub fn restore_pause(state_dir: &Path, progress: &Progress) -> bool {
    let path = state_dir.join(PAUSE_FILE);
    if !path.exists() {
        return false;
    }
    let detail = std::fs::read_to_string(&path).unwrap_or_default();
    progress.paused.store(true, Ordering::Relaxed);
    warn!(target: "tidemark::audit", file = %path.display(), detail = %detail.trim(),
        "consumption stays paused: a pause was in force before the restart (POST /resume on the admin listener)");
    true
}

#[derive(Clone)]
struct Admin {
    progress: Arc<Progress>,
    token_file: Option<PathBuf>,
    /// The last token read; used when the file is briefly unreadable (a Secret update swaps
    /// a symlink).
    token: Arc<Mutex<Option<String>>>,
    state_dir: Option<PathBuf>,
}

impl Admin {
    fn current_token(&self) -> Option<String> {
        let path = self.token_file.as_ref()?;
        let mut cached = match self.token.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match read_token(path) {
            Ok(t) => *cached = Some(t),
            Err(e) => warn!(error = %e, "admin token file unreadable: the previous token stays in force"),
        }
        cached.clone()
    }

    /// Records the pause state in the state directory; a failure is logged, never fatal
    /// (the pause itself is in force).
    fn persist(&self, paused: bool, peer: SocketAddr) {
        let Some(dir) = &self.state_dir else { return };
        let path = dir.join(PAUSE_FILE);
        let result = if paused {
            let body = serde_json::json!({
                "paused_at": chrono::Utc::now().to_rfc3339(),
                "by": peer.to_string(),
            })
            .to_string();
            let tmp = dir.join(format!("{PAUSE_FILE}.tmp"));
            std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, &path))
        } else {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        if let Err(e) = result {
            warn!(target: "tidemark::audit", file = %path.display(), error = %e,
                "cannot remember the pause state: a restart will not keep it");
        }
    }
}

/// Binds the admin listener, or returns `None` when a default address is taken.
pub async fn bind(cfg: &Config) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    match tokio::net::TcpListener::bind(cfg.addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if !cfg.explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            warn!(addr = %cfg.addr, "admin listener off: its default address is in use (pass --admin-addr)");
            Ok(None)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("binding --admin-addr {}", cfg.addr))),
    }
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: Config,
    token: Option<String>,
    progress: Arc<Progress>,
) -> std::io::Result<()> {
    let admin = Admin {
        progress,
        token_file: cfg.token_file.clone(),
        token: Arc::new(Mutex::new(token)),
        state_dir: cfg.state_dir.clone(),
    };
    let app = router(admin);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
}

fn router(admin: Admin) -> Router {
    Router::new()
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/paused", get(paused))
        .route_layer(middleware::from_fn_with_state(admin.clone(), authorize))
        .with_state(admin)
}

async fn authorize(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(expected) = admin.current_token() {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let ok = given.is_some_and(|g| tokens_match(g, &expected));
        if !ok {
            warn!(target: "tidemark::audit", peer = %peer, method = %req.method(), path = %req.uri().path(),
                credentials = if given.is_some() { "wrong token" } else { "none" }, "admin request refused");
            return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "unauthorized\n")
                .into_response();
        }
    }
    next.run(req).await
}

async fn pause(State(admin): State<Admin>, ConnectInfo(peer): ConnectInfo<SocketAddr>) -> &'static str {
    let was = admin.progress.paused.swap(true, Ordering::Relaxed);
    admin.persist(true, peer);
    info!(target: "tidemark::audit", peer = %peer, already = was, "admin: consumption paused");
    "paused\n"
}

async fn resume(State(admin): State<Admin>, ConnectInfo(peer): ConnectInfo<SocketAddr>) -> &'static str {
    let was = admin.progress.paused.swap(false, Ordering::Relaxed);
    admin.persist(false, peer);
    info!(target: "tidemark::audit", peer = %peer, was_paused = was, "admin: consumption resumed");
    "resumed\n"
}

async fn paused(State(admin): State<Admin>) -> String {
    format!("{}\n", admin.progress.paused.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(addr: &str, token_file: Option<PathBuf>) -> Config {
        Config { addr: addr.parse().expect("addr"), explicit: true, token_file, state_dir: None }
    }

    #[test]
    fn a_non_loopback_address_without_a_token_is_refused() {
        assert!(cfg("0.0.0.0:9091", None).check().is_err());
        assert!(cfg("10.1.2.3:9091", None).check().is_err());
        assert_eq!(cfg("127.0.0.1:9091", None).check(), Ok(None));
        assert_eq!(cfg("[::1]:9091", None).check(), Ok(None));
    }

    #[test]
    fn a_token_file_is_read_trimmed_and_an_empty_one_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("token");
        std::fs::write(&f, "s3cret\n").expect("write");
        assert_eq!(cfg("0.0.0.0:9091", Some(f.clone())).check(), Ok(Some("s3cret".into())));
        std::fs::write(&f, " \n").expect("write");
        assert!(cfg("0.0.0.0:9091", Some(f)).check().is_err());
        assert!(cfg("0.0.0.0:9091", Some(dir.path().join("missing"))).check().is_err());
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abd", "abc"));
        assert!(!tokens_match("ab", "abc"));
        assert!(!tokens_match("", "abc"));
    }

    #[test]
    fn a_remembered_pause_is_restored() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = Progress::default();
        assert!(!restore_pause(dir.path(), &p));
        std::fs::write(dir.path().join(PAUSE_FILE), "{}").expect("write");
        assert!(restore_pause(dir.path(), &p));
        assert!(p.paused.load(Ordering::Relaxed));
    }
}
