//! Audit records: one per creation, attempt and outcome of a row, on the audit topic.

use std::time::Duration;

use rdkafka::producer::FutureRecord;
use serde::Serialize;
use tidemark_topology::config::RuleMode;
use tracing::{error, warn};

use super::Ctx;
use crate::engine::outbox::OutboxRow;

/// One record on the audit topic (docs/formats.md, "Audit topic"); also written by
/// `tidemark actions resend`.
#[derive(Serialize)]
pub struct AuditRecord<'a> {
    key: &'a str,
    event: &'a str,
    mode: RuleMode,
    rule_id: &'a str,
    rule_version: u32,
    action: &'a str,
    sku: &'a str,
    attempt: u32,
    status: Option<u16>,
    reason: Option<String>,
    /// Wall clock: the audit says when things happened, unlike the deterministic outputs.
    at: String,
}

impl<'a> AuditRecord<'a> {
    /// The audit record of `event` for `row`, stamped now.
    pub fn of(row: &'a OutboxRow, event: &'a str, status: Option<u16>, reason: Option<String>) -> Self {
        AuditRecord {
            key: &row.key,
            event,
            mode: row.mode,
            rule_id: &row.rule_id,
            rule_version: row.rule_version,
            action: &row.action,
            sku: &row.sku,
            attempt: row.attempts,
            status,
            reason,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

/// The longest pause between two tries of an outcome's audit record.
const OUTCOME_RETRY_CAP: Duration = Duration::from_secs(30);

impl Ctx {
    /// Audits `event` for `row` without waiting for the broker: the record is queued now (so
    /// it stays ahead of the row's later audit records), and a failure is logged when it
    /// comes. For `created`, which nothing reads back: a POST never waits for it.
    pub(super) fn audit_queued(&self, row: &OutboxRow, event: &str) {
        let rec = AuditRecord::of(row, event, None, None);
        let value = serde_json::to_vec(&rec).unwrap_or_default();
        let record = FutureRecord::to(&self.audit_topic).key(row.key.as_str()).payload(&value);
        match self.audit.send_result(record) {
            Ok(delivery) => {
                let key = row.key.clone();
                let event = event.to_string();
                tokio::spawn(async move {
                    if let Ok(Err((e, _))) = delivery.await {
                        error!(%key, event, error = %e, "audit record not delivered");
                    }
                });
            }
            Err((e, _)) => error!(key = %row.key, event, error = %e, "audit record not queued"),
        }
    }

    /// Audits `event` for `row`. A final outcome (an `attempt` that settled the row, or
    /// `settled`) is what standbys and later owners learn the outcome from: it is produced
    /// again, with growing pauses, until the broker has it or the process stops. Other events
    /// (created, retries, shadow) are logged when lost and not tried again.
    /// True when the broker has the record.
    pub(super) async fn audit(
        &self,
        row: &OutboxRow,
        event: &str,
        status: Option<u16>,
        reason: Option<String>,
    ) -> bool {
        let outcome = event == "settled" || super::outcome_of(event, status, reason.as_deref()).is_some();
        let rec = AuditRecord::of(row, event, status, reason);
        let value = serde_json::to_vec(&rec).unwrap_or_default();
        let mut pause = Duration::from_millis(200);
        loop {
            let record = FutureRecord::to(&self.audit_topic).key(row.key.as_str()).payload(&value);
            let Err((e, _)) = self.audit.send(record, Duration::from_secs(30)).await else { return true };
            if !outcome || self.stop.load(std::sync::atomic::Ordering::Relaxed) {
                error!(key = %row.key, event, error = %e, "audit record not delivered");
                return false;
            }
            crate::telemetry::actions::audit_retried();
            warn!(key = %row.key, event, error = %e, retry_in = ?pause, "outcome audit record not delivered; producing it again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(OUTCOME_RETRY_CAP);
        }
    }
}
