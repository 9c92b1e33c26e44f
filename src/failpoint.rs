//! Named failpoints, always compiled in and activated only by the environment, so the chaos
//! suite kills the very binary users run.
//!
//! `TIDEMARK_FAILPOINTS="name=N[,name=N...]"` aborts the process (no destructors, no flush:
//! like SIGKILL) on the N-th time the named point is reached. Without the variable a hit
//! costs one relaxed atomic load.
//!
//! Points: `commit.before_outputs_flushed`, `commit.after_outputs_before_state`,
//! `commit.after_state_before_group`, `restore.mid`, `dispatch.after_ack_before_mark`,
//! `batch.mid_close` and `batch.mid_adjust` (rows staged and validated, manifest not written),
//! `microbatch.after_plan`, `microbatch.before_flush` (rows sent, not acknowledged),
//! `microbatch.after_commit` and `assign.received` (an assignment received from the group,
//! possibly empty, and not applied yet).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Armed {
    at: u64,
    hits: AtomicU64,
}

fn armed() -> &'static HashMap<String, Armed> {
    static ARMED: OnceLock<HashMap<String, Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let Ok(spec) = std::env::var("TIDEMARK_FAILPOINTS") else { return HashMap::new() };
        spec.split(',')
            .filter_map(|item| {
                let (name, n) = item.trim().split_once('=')?;
                let at = n.trim().parse().ok().filter(|n| *n > 0)?;
                Some((name.trim().to_string(), Armed { at, hits: AtomicU64::new(0) }))
            })
            .collect()
    })
}

/// Marks a point in the code where a crash must be survivable.
pub fn hit(name: &str) {
    let points = armed();
    if points.is_empty() {
        return;
    }
    if let Some(p) = points.get(name) {
        if p.hits.fetch_add(1, Ordering::Relaxed) + 1 == p.at {
            eprintln!("tidemark: failpoint {name} reached (hit {}): aborting", p.at);
            std::process::abort();
        }
    }
}
