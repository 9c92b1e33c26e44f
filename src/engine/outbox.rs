//! Outbox rows: one per action idempotency key, written in the same commit as the state and
//! input offsets that produced the action, then updated by the dispatcher as it delivers.
//!
//! Lifecycle: `Pending` → `Delivered` (2xx) | `Conflict` (409: the endpoint already had it)
//! | `Failed` (other 4xx); `Shadow` rows are recorded and audited but never sent. A row is
//! never deleted while its key may be produced again, so a key is acted on at most once:
//! only final rows whose event time is more than the dedup retention (default 7 d) behind
//! the newest final row of their partition are deleted (by the action runtime, through the
//! store's event-time index; pending rows are found through its pending index). Inputs
//! that old are past every window's retention and every duplicate's dedup horizon.

use serde::{Deserialize, Serialize};
use tidemark_topology::config::RuleMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowState {
    Pending,
    Delivered { status: u16 },
    Conflict,
    Failed { status: u16 },
    Shadow,
}

impl RowState {
    pub fn is_final(&self) -> bool {
        !matches!(self, RowState::Pending)
    }
}

impl OutboxRow {
    /// Where the row belongs in the store's outbox indexes: pending rows are found by the
    /// runtime's scans, final ones expire by event time (see `tidemark_state::outbox`).
    pub fn index(&self) -> tidemark_state::OutboxIndex {
        if self.state.is_final() {
            tidemark_state::OutboxIndex::Final { created_at_ms: self.created_at_ms }
        } else {
            tidemark_state::OutboxIndex::Pending
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRow {
    pub key: String,
    pub rule_id: String,
    pub rule_version: u32,
    /// Persisted as its name, the bytes a `String` mode had (see [`RuleMode`]).
    pub mode: RuleMode,
    pub action: String,
    pub sku: String,
    /// The exact POST body; identical on every attempt and every replay.
    pub payload: Vec<u8>,
    pub state: RowState,
    pub attempts: u32,
    /// Event time of the input that fired the action.
    pub created_at_ms: i64,
    /// Broker append time of that input (latency measurement only).
    pub source_append_ms: i64,
    /// Wall clock when the row became durable (latency measurement only).
    pub committed_wall_ms: i64,
}

impl OutboxRow {
    /// A pending `act` row with this key, for tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn sample(key: &str) -> Self {
        OutboxRow {
            key: key.into(),
            rule_id: "r".into(),
            rule_version: 1,
            mode: RuleMode::Act,
            action: "notify".into(),
            sku: "SKU-1".into(),
            payload: b"{}".to_vec(),
            state: RowState::Pending,
            attempts: 0,
            created_at_ms: 5,
            source_append_ms: 5,
            committed_wall_ms: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_state::codec;

    /// The row as stores written before the mode became an enum hold it.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct StringModeRow {
        key: String,
        rule_id: String,
        rule_version: u32,
        mode: String,
        action: String,
        sku: String,
        payload: Vec<u8>,
        state: RowState,
        attempts: u32,
        created_at_ms: i64,
        source_append_ms: i64,
        committed_wall_ms: i64,
    }

    fn string_mode_row(mode: &str) -> StringModeRow {
        StringModeRow {
            key: "oversell:v1:SKU-1:snapshot:2026-11-28T14:59:00.000Z".into(),
            rule_id: "oversell".into(),
            rule_version: 1,
            mode: mode.into(),
            action: "stop_sale".into(),
            sku: "SKU-1".into(),
            payload: b"{}".to_vec(),
            state: RowState::Delivered { status: 200 },
            attempts: 2,
            created_at_ms: 1_764_341_940_000,
            source_append_ms: 1_764_341_941_000,
            committed_wall_ms: 1_764_341_942_000,
        }
    }

    #[test]
    fn an_outbox_row_stored_with_a_string_mode_decodes_and_reencodes_byte_for_byte() {
        for mode in RuleMode::ALL {
            let old = string_mode_row(mode.as_str());
            let stored = codec::encode(&old).expect("encode");
            let row: OutboxRow = codec::decode("outbox row", &stored).expect("decode");
            assert_eq!((row.mode, row.attempts, row.key.as_str()), (mode, 2, old.key.as_str()));
            assert_eq!(codec::encode(&row).expect("encode"), stored, "{mode}");
            assert_eq!(codec::decode::<StringModeRow>("old row", &stored).expect("decode old"), old);
        }
    }
}
