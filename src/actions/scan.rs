//! Outbox scans: pending rows re-queued at start, on assignment and after a lost
//! hand-over; expired final rows deleted.

use std::sync::Arc;

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
/// the store's pending index, one page of at most the room left in flight after `cursor`
/// (the last key the previous scan of the partition reached, `None`: from the start), and
/// expired ones through its expiry index: final rows are never read or decoded, and a
/// backlog of any size is never loaded whole. True when pending rows were left for the
/// next scan (which goes on after `cursor`).
pub(super) async fn scan(ctx: &Arc<Ctx>, id: PartitionId, cursor: &mut Option<Vec<u8>>) -> bool {
    let store = Arc::clone(&ctx.store);
    let retention_ms = ctx.retention_ms;
    let room = ctx.in_flight.lock().map(|f| MAX_STARTED.saturating_sub(f.len())).unwrap_or(0);
    if room == 0 {
        return true;
    }
    let after = cursor.clone();
    let read = tokio::task::spawn_blocking(move || {
        let expired = store.outbox_expire(id, retention_ms, MAX_EXPIRED_PER_SCAN)?;
        store.outbox_pending_page(id, after.as_deref(), room).map(|rows| (expired, rows))
    })
    .await;
    let Ok(Ok((expired, rows))) = read else {
        error!(partition = %id, "cannot scan the outbox");
        return true;
    };
    if expired > 0 {
        crate::telemetry::actions::outbox_expired(expired);
    }
    let mut more = expired >= MAX_EXPIRED_PER_SCAN;
    // A full page may have more behind it: the next scan goes on from its last key. A short
    // one reached the partition's end: the next starts over (rows in flight are skipped).
    *cursor = if rows.len() >= room { rows.last().map(|(k, _)| k.clone()) } else { None };
    more |= cursor.is_some();
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
