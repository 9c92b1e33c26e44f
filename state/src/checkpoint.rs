//! What one partition persists about its progress, in the same write as its state.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The next input offset to process: every record below it is reflected in the state.
    pub next_offset: i64,
    /// Max event time applied (drives the watermark).
    pub max_event_ms: Option<i64>,
    /// Max broker append time seen (drives dedup expiry).
    pub max_append_ms: i64,
    /// Input records processed since the state was created.
    pub records: u64,
}
