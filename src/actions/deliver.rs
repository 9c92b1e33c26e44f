//! Delivery of one row: start (audit, redelivery count), attempts with backoff, and the
//! durable outcome.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tidemark_state::{codec, PartitionId};
use tracing::error;

use super::{record, Counted, Ctx, POSTING_LOG, REDELIVERY_LOG, STORED_LOG};
use crate::dispatch::{Delivery, Outcome, Target};
use crate::engine::outbox::{OutboxRow, RowState};
use crate::failpoint;
use crate::telemetry::events::{Segment, LATENCY};

/// Delivery tasks are at their cap ([`super::MAX_STARTED`]): a new pending row waits in the
/// outbox for a scan.
pub(super) fn at_capacity(ctx: &Ctx) -> bool {
    ctx.in_flight.lock().map(|f| f.len() >= super::MAX_STARTED).unwrap_or(true)
}

/// Logs [`STORED_LOG`] once a final outcome is stored where every later owner finds it: in
/// the outbox and on the audit topic (standbys and snapshot restores read it there). A crash
/// before this line is the crash window in which the key may be POSTed again.
fn stored_log(row: &OutboxRow, stored_and_audited: bool) {
    if stored_and_audited {
        tracing::info!(key = %row.key, state = ?row.state, "{STORED_LOG}");
    }
}

pub(super) fn start(ctx: &Arc<Ctx>, id: PartitionId, row: OutboxRow, from_scan: bool) {
    let counted = if from_scan { Counted::count(&ctx.backlog, &row) } else { Counted::adopt(&ctx.backlog, &row) };
    {
        let Ok(mut f) = ctx.in_flight.lock() else { return };
        if f.contains_key(&row.key) {
            return;
        }
        if row.state == RowState::Pending {
            f.insert(row.key.clone(), row.committed_wall_ms);
        }
    }
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        let _counted = counted;
        if !from_scan {
            ctx.audit_queued(&row, "created");
        }
        if row.state == RowState::Shadow {
            ctx.audit(&row, "shadow", None, None).await;
            return;
        }
        // A scan reads a page of pending rows, then starts them: a row whose delivery (from
        // the stream's hand-over) ended in between is no longer in flight, and would be sent
        // again without any crash. Its stored state says so (stored before it left the
        // in-flight list, read here after this start entered it).
        if from_scan && row.state == RowState::Pending && ctx.final_since_read(id, &row.key).await {
            if let Ok(mut f) = ctx.in_flight.lock() {
                f.remove(&row.key);
            }
            return;
        }
        if row.state == RowState::Pending {
            if let Some(outcome) = ctx.settled.take(&row.key) {
                ctx.settle(id, row, outcome).await;
                return;
            }
        }
        if from_scan && row.attempts > 0 {
            crate::telemetry::actions::redelivered();
            // The log outlives the process: chaos counts these lines, including those of
            // processes killed before their metrics could be scraped.
            tracing::info!(key = %row.key, attempts = row.attempts, "{REDELIVERY_LOG}");
        }
        ctx.deliver(id, row).await;
    });
}

impl Ctx {
    pub(super) async fn deliver(&self, id: PartitionId, mut row: OutboxRow) {
        // Shadow rows are recorded with the Shadow state and never reach delivery.
        let Some(target) = Target::of(row.mode) else { return };
        let mut first = true;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            // A place for the request first, then the gate: an attempt waiting for a place
            // (behind a slow endpoint) is not under way, so a hand-over neither waits for it
            // nor lets it POST once the partition is gone.
            let Ok(permit) = self.dispatcher.permit().await else { break };
            // Held until the outcome is stored: a rebalance hands the partition over only
            // once no attempt is under way. Not owned any more: the next owner sends it.
            let Some(attempt) = self.gate.enter(id.partition) else { break };
            row.attempts += 1;
            // The attempt count before the POST, without an fsync of its own: the row is
            // durable since its SKU commit, a process crash keeps this write, and a host crash
            // that loses it makes the row's next POST a repeat of this one, as any crash
            // before the outcome is stored does. The outcome is stored with fsync.
            if !self.write_row(id, &row, false).await {
                break;
            }
            // With the line below, the log says which POSTs a crash may repeat: one this
            // process made and whose outcome it had not stored when it died (chaos ties every
            // repeated key to such a crash).
            tracing::info!(key = %row.key, attempt = row.attempts, "{POSTING_LOG}");
            let now = chrono::Utc::now().timestamp_millis();
            if first && row.committed_wall_ms > 0 {
                record(Segment::CommitToDispatch, now - row.committed_wall_ms);
                first = false;
            }
            let started = Instant::now();
            let delivery = Delivery {
                key: row.key.clone(),
                target,
                body: row.payload.clone(),
                attempt: row.attempts - 1,
                source_append_ms: row.source_append_ms,
            };
            let outcome = self.dispatcher.attempt_with(&permit, &delivery).await;
            drop(permit);
            crate::telemetry::events::observe(LATENCY, Segment::DispatchToAck, started.elapsed().as_secs_f64());
            crate::telemetry::actions::dispatched(outcome.label());
            match outcome {
                // Record the outcome before anything else: the time between the endpoint's
                // answer and this write is the only window in which a crash repeats a POST.
                Outcome::Delivered { status } => {
                    failpoint::hit("dispatch.after_ack_before_mark");
                    row.state = RowState::Delivered { status };
                    let stored = self.finish(id, &row).await;
                    let audited = self.audit(&row, "attempt", Some(status), Some("delivered".into())).await;
                    stored_log(&row, stored && audited);
                    break;
                }
                Outcome::Conflict => {
                    failpoint::hit("dispatch.after_ack_before_mark");
                    row.state = RowState::Conflict;
                    let stored = self.finish(id, &row).await;
                    let audited = self.audit(&row, "attempt", Some(409), Some("conflict".into())).await;
                    stored_log(&row, stored && audited);
                    break;
                }
                Outcome::PermanentFailure { status, body_snippet } => {
                    let audited = self
                        .audit(&row, "attempt", Some(status), Some(format!("permanent failure: {body_snippet}")))
                        .await;
                    row.state = RowState::Failed { status };
                    self.dead_letter(&row, status).await;
                    let stored = self.finish(id, &row).await;
                    stored_log(&row, stored && audited);
                    break;
                }
                Outcome::Retry { reason, after } => {
                    self.audit(&row, "attempt", None, Some(format!("retry: {reason}"))).await;
                    drop(attempt);
                    // `after` is already the jittered, capped backoff for this attempt count.
                    tokio::time::sleep(after).await;
                }
            }
        }
        if let Ok(mut f) = self.in_flight.lock() {
            f.remove(&row.key);
        }
    }

    /// A row whose outcome the audit topic recorded before its partition was restored from a
    /// snapshot (see [`super::settled`]): stored with that outcome and audited, not sent.
    async fn settle(&self, id: PartitionId, mut row: OutboxRow, outcome: RowState) {
        row.state = outcome;
        if self.persist(id, &row).await {
            crate::telemetry::actions::settled_from_audit();
            let status = match outcome {
                RowState::Delivered { status } | RowState::Failed { status } => Some(status),
                RowState::Conflict => Some(409),
                RowState::Pending | RowState::Shadow => None,
            };
            let reason = "completed before the partition was restored from a snapshot; not sent again";
            self.audit(&row, "settled", status, Some(reason.into())).await;
        }
        if let Ok(mut f) = self.in_flight.lock() {
            f.remove(&row.key);
        }
    }

    /// Stores a row's final state; true when it is durable.
    async fn finish(&self, id: PartitionId, row: &OutboxRow) -> bool {
        let stored = self.persist(id, row).await;
        if stored {
            record(Segment::EndToEnd, chrono::Utc::now().timestamp_millis() - row.source_append_ms);
            tracing::debug!(key = %row.key, state = ?row.state, attempts = row.attempts, "action settled");
        }
        stored
    }

    /// Durable row update, off the async threads (it fsyncs).
    pub(super) async fn persist(&self, id: PartitionId, row: &OutboxRow) -> bool {
        self.write_row(id, row, true).await
    }

    /// Whether the stored row of `key` has reached a final state (see [`start`]). A row that
    /// cannot be read counts as pending: the scan read it a moment ago.
    async fn final_since_read(&self, id: PartitionId, key: &str) -> bool {
        let (store, key) = (Arc::clone(&self.store), key.to_string());
        match tokio::task::spawn_blocking(move || store.outbox_get(id, &key)).await {
            Ok(Ok(Some(bytes))) => {
                codec::decode::<OutboxRow>("outbox row", &bytes).is_ok_and(|r| r.state != RowState::Pending)
            }
            _ => false,
        }
    }

    /// Row update, off the async threads; with `synced`, durable (fsync) when it returns.
    async fn write_row(&self, id: PartitionId, row: &OutboxRow, synced: bool) -> bool {
        let store = Arc::clone(&self.store);
        let key = row.key.clone();
        let bytes = match codec::encode(row) {
            Ok(bytes) => bytes,
            Err(e) => {
                error!(key = %row.key, error = %e, "cannot encode the outbox row");
                return false;
            }
        };
        let index = row.index();
        let write = move || {
            if synced {
                store.outbox_update(id, &key, &bytes, index)
            } else {
                store.outbox_update_unsynced(id, &key, &bytes, index)
            }
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                error!(key = %row.key, error = %e, "cannot update the outbox row");
                false
            }
            Err(e) => {
                error!(key = %row.key, error = %e, "outbox update task failed");
                false
            }
        }
    }
}
