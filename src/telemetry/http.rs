//! The HTTP endpoint of a running processor: metrics and probes, nothing that changes state
//! (pause and resume are on the admin listener, [`super::admin`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format |
//! | `GET /startupz` | 200 once the store is open and restore has begun, else 503 with the reason |
//! | `GET /healthz` | 200 once started while the stream loop turns (60 s between turns, 15 min during a restore), else 503 |
//! | `GET /readyz` | 200 once partitions are assigned and restored, their lag is known and their backlog age is within `--ready-max-lag-seconds`, else 503 with the reason |

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use super::{events, Progress};
use crate::engine::Stats;

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
        .route("/startupz", get(startupz))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(App { handle, stats, progress });
    axum::serve(listener, app).await
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn metrics(State(app): State<App>) -> String {
    events::publish(&app.stats, &app.progress);
    super::process::publish();
    app.handle.run_upkeep();
    app.handle.render()
}

fn answer(result: Result<(), String>, ok: &str) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, format!("{ok}\n")),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn startupz(State(app): State<App>) -> (StatusCode, String) {
    answer(app.progress.startup(), "started")
}

async fn healthz(State(app): State<App>) -> (StatusCode, String) {
    answer(app.progress.liveness(), "ok")
}

async fn readyz(State(app): State<App>) -> (StatusCode, String) {
    answer(app.progress.readiness(), "ready")
}
