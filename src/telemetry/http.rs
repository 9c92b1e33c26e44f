//! The HTTP endpoint of a running processor.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format |
//! | `GET /healthz` | 200 while the stream loop turns (at most 60 s between turns), else 503 |
//! | `GET /readyz` | 200 once partitions are assigned, restored and their lag is known, else 503 with the reason |
//! | `POST /pause`, `POST /resume` | stop / restart consuming (state, metrics and probes stay up) |

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use super::{events, Progress};
use crate::engine::Stats;

/// Loop turns can be as far apart as a broker outage's flush wait; liveness only fails when
/// the loop is truly wedged.
const MAX_SILENCE_MS: i64 = 60_000;

#[derive(Clone)]
struct App {
    handle: PrometheusHandle,
    stats: Arc<Stats>,
    progress: Arc<Progress>,
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    stats: Arc<Stats>,
    progress: Arc<Progress>,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .with_state(App { handle, stats, progress });
    axum::serve(listener, app).await
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn metrics(State(app): State<App>) -> String {
    events::publish(&app.stats, &app.progress);
    app.handle.run_upkeep();
    app.handle.render()
}

async fn healthz(State(app): State<App>) -> (StatusCode, String) {
    let silent = app.progress.since_heartbeat_ms();
    if silent <= MAX_SILENCE_MS {
        (StatusCode::OK, "ok\n".into())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("stream loop silent for {silent} ms\n"))
    }
}

async fn readyz(State(app): State<App>) -> (StatusCode, String) {
    match app.progress.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn pause(State(app): State<App>) -> &'static str {
    app.progress.paused.store(true, Ordering::Relaxed);
    "paused\n"
}

async fn resume(State(app): State<App>) -> &'static str {
    app.progress.paused.store(false, Ordering::Relaxed);
    "resumed\n"
}
