//! Outbox scans: pending rows re-queued at start, on assignment and after a lost
//! hand-over; expired final rows deleted.

use std::sync::Arc;

use metrics::counter;
use tidemark_state::{codec, PartitionId, StateError, Store};
use tracing::error;

use super::deliver::start;
use super::{Ctx, MAX_STARTED};
use crate::engine::outbox::{OutboxRow, RowState};

/// Rows of one partition's outbox still `Pending` (never shadow rows): actions that were
/// committed and have not reached a final state. Unreadable rows are skipped, as the
/// runtime's scan skips them (and logs them).
pub fn pending_in_outbox(store: &Store, id: PartitionId) -> Result<usize, StateError> {
    store.outbox_pending_count(id)
}

/// Most expired rows deleted per partition and scan (the rest go at the next one).
const MAX_EXPIRED_PER_SCAN: usize = 10_000;

/// Re-queues the pending rows of a partition (start, assignment, lost hand-over), at most
/// [`MAX_STARTED`] in flight, and deletes expired final rows. Pending rows are read through
/// the store's pending index and expired ones through its expiry index: final rows are
/// never read or decoded. True when pending rows were left for the next scan.
pub(super) async fn scan(ctx: &Arc<Ctx>, id: PartitionId) -> bool {
    let store = Arc::clone(&ctx.store);
    let retention_ms = ctx.retention_ms;
    let read = tokio::task::spawn_blocking(move || {
        let expired = store.outbox_expire(id, retention_ms, MAX_EXPIRED_PER_SCAN)?;
        store.outbox_pending(id).map(|rows| (expired, rows))
    })
    .await;
    let Ok(Ok((expired, rows))) = read else {
        error!(partition = %id, "cannot scan the outbox");
        return true;
    };
    if expired > 0 {
        counter!("tidemark_outbox_expired_total").increment(expired as u64);
    }
    let mut more = expired >= MAX_EXPIRED_PER_SCAN;
    for (_, bytes) in rows {
        let row = match codec::decode::<OutboxRow>("outbox row", &bytes) {
            Ok(row) if row.state == RowState::Pending => row,
            Ok(_) => continue,
            Err(e) => {
                error!(partition = %id, error = %e, "unreadable outbox row");
                continue;
            }
        };
        let busy = ctx.in_flight.lock().map(|f| f.len() >= MAX_STARTED).unwrap_or(true);
        if busy {
            more = true;
            break;
        }
        start(ctx, id, row, true);
    }
    more
}
