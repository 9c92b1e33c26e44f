//! Audit records: one per creation, attempt and outcome of a row, on the audit topic.

use std::time::Duration;

use rdkafka::producer::FutureRecord;
use serde::Serialize;
use tidemark_topology::config::RuleMode;
use tracing::error;

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

impl Ctx {
    pub(super) async fn audit(&self, row: &OutboxRow, event: &str, status: Option<u16>, reason: Option<String>) {
        let rec = AuditRecord::of(row, event, status, reason);
        let value = serde_json::to_vec(&rec).unwrap_or_default();
        let record = FutureRecord::to(&self.audit_topic).key(row.key.as_str()).payload(&value);
        if let Err((e, _)) = self.audit.send(record, Duration::from_secs(30)).await {
            error!(key = %row.key, error = %e, "audit record not delivered");
        }
    }
}
