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

impl Checkpoint {
    /// Moves past one input record. `false` when the record is below the checkpoint, i.e.
    /// already reflected in the state (a re-delivery after a seek or rebalance).
    pub fn advance(&mut self, offset: i64, append_ms: i64) -> bool {
        if offset < self.next_offset {
            return false;
        }
        self.next_offset = offset + 1;
        self.max_append_ms = self.max_append_ms.max(append_ms);
        self.records += 1;
        true
    }

    /// Moves past a fence record (`tidemark_topology::fence`): its append time raises the
    /// effective append time, so the promise it carries holds for every later record, but it
    /// is no input record. `false` when it is below the checkpoint.
    pub fn pass_fence(&mut self, offset: i64, append_ms: i64) -> bool {
        if offset < self.next_offset {
            return false;
        }
        self.next_offset = offset + 1;
        self.max_append_ms = self.max_append_ms.max(append_ms);
        true
    }

    /// Moves past offsets that held no record for the application: transaction markers,
    /// aborted records, or (only when an operator accepted the gap) records deleted by
    /// retention. `false` when `offset` is not ahead of the checkpoint.
    pub fn skip_to(&mut self, offset: i64) -> bool {
        if offset <= self.next_offset {
            return false;
        }
        self.next_offset = offset;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_skips_records_below_the_checkpoint_and_keeps_the_append_time_maximum() {
        let mut c = Checkpoint { next_offset: 5, ..Checkpoint::default() };
        assert!(!c.advance(4, 100));
        assert!(c.advance(7, 100));
        assert!(c.advance(8, 50));
        assert_eq!((c.next_offset, c.max_append_ms, c.records), (9, 100, 2));
    }

    #[test]
    fn a_fence_moves_the_offset_and_the_append_time_but_counts_no_record() {
        let mut c = Checkpoint { next_offset: 5, max_append_ms: 100, records: 3, ..Checkpoint::default() };
        assert!(!c.pass_fence(4, 900));
        assert!(c.pass_fence(6, 900));
        assert!(c.pass_fence(7, 800));
        assert_eq!((c.next_offset, c.max_append_ms, c.records), (8, 900, 3));
    }

    #[test]
    fn skipping_moves_the_next_offset_forward_only_and_counts_no_record() {
        let mut c = Checkpoint { next_offset: 5, records: 3, ..Checkpoint::default() };
        assert!(!c.skip_to(5));
        assert!(!c.skip_to(2));
        assert!(c.skip_to(9));
        assert_eq!((c.next_offset, c.records), (9, 3));
    }
}
