//! Named failpoints, always compiled in and activated only by the environment, so the chaos
//! suite kills the very binary users run.
//!
//! `TIDEMARK_FAILPOINTS="name=N[,name=N...]"` aborts the process (no destructors, no flush:
//! like SIGKILL) on the N-th time the named point is reached; `name=pause:MS` instead holds
//! the thread that reaches it for MS milliseconds, every time (a slow disk or object store).
//! Without the variable a hit costs one relaxed atomic load.
//!
//! Points: `commit.before_outputs_flushed`, `commit.after_outputs_before_state`,
//! `commit.after_state_before_group`, `restore.mid`, `dispatch.after_ack_before_mark`,
//! `batch.mid_close` and `batch.mid_adjust` (rows staged and validated, manifest not written),
//! `microbatch.after_plan`, `microbatch.before_flush` (rows sent, not acknowledged),
//! `microbatch.after_commit` and `assign.received` (an assignment received from the group,
//! possibly empty, and not applied yet); `import.<partition>` (e.g. `import.orders[0]`: a
//! snapshot import of that partition, before its files are read).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

enum Action {
    /// Abort on this hit.
    AbortAt(u64),
    /// Sleep this long on every hit.
    Pause(std::time::Duration),
}

struct Armed {
    action: Action,
    hits: AtomicU64,
}

fn armed() -> &'static HashMap<String, Armed> {
    static ARMED: OnceLock<HashMap<String, Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let Ok(spec) = std::env::var("TIDEMARK_FAILPOINTS") else { return HashMap::new() };
        spec.split(',')
            .filter_map(|item| {
                let (name, n) = item.trim().split_once('=')?;
                let action = match n.trim().strip_prefix("pause:") {
                    Some(ms) => Action::Pause(std::time::Duration::from_millis(ms.trim().parse().ok()?)),
                    None => Action::AbortAt(n.trim().parse().ok().filter(|n| *n > 0)?),
                };
                Some((name.trim().to_string(), Armed { action, hits: AtomicU64::new(0) }))
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
    let Some(p) = points.get(name) else { return };
    let hit = p.hits.fetch_add(1, Ordering::Relaxed) + 1;
    match p.action {
        Action::AbortAt(at) if hit == at => {
            eprintln!("tidemark: failpoint {name} reached (hit {at}): aborting");
            std::process::abort();
        }
        Action::AbortAt(_) => {}
        Action::Pause(d) => {
            eprintln!("tidemark: failpoint {name} reached (hit {hit}): pausing {} ms", d.as_millis());
            std::thread::sleep(d);
        }
    }
}
