//! Permanently failed actions go to the action dead-letter topic.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use tracing::error;

use super::Ctx;
use crate::engine::outbox::OutboxRow;

impl Ctx {
    pub(super) async fn dead_letter(&self, row: &OutboxRow, status: u16) {
        let headers = OwnedHeaders::new()
            .insert(Header { key: "tidemark.reason", value: Some("permanent_failure") })
            .insert(Header { key: "tidemark.status", value: Some(&status.to_string()) })
            .insert(Header { key: "tidemark.mode", value: Some(row.mode.as_str()) });
        let record =
            FutureRecord::to(&self.dead_letter_topic).key(row.key.as_str()).payload(&row.payload).headers(headers);
        if let Err((e, _)) = self.audit.send(record, Duration::from_secs(30)).await {
            error!(key = %row.key, error = %e, "action dead letter not delivered");
        }
    }
}
