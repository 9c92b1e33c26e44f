//! Graceful stop on SIGTERM/SIGINT for the long-running commands (`run`, `microbatch`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tracing::info;

/// Sets `stop` on SIGTERM or SIGINT; a second signal exits at once.
pub fn install_handler(rt: &tokio::runtime::Runtime, stop: Arc<AtomicBool>) {
    rt.spawn(async move {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
        for round in 0.. {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
            if round > 0 {
                eprintln!("tidemark: second signal, exiting without final commit");
                std::process::exit(130);
            }
            info!("signal received: finishing the batch, committing, leaving the group");
            stop.store(true, Ordering::Relaxed);
        }
    });
}
