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
    /// shadow | notify | act
    pub mode: String,
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
