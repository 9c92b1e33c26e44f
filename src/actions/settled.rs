//! Actions that reached a final outcome before their partition was restored from a snapshot.
//!
//! A partition restored from a snapshot replays its input from the snapshot's offsets, and
//! re-derives every action created since, with the same key and payload. Those that were
//! delivered after the snapshot was taken are on the audit topic; the restore reads it
//! (see `snapshot::restore`) and lists their outcomes here. A row with such a key is
//! recorded with that outcome and audited as `settled`, not sent again.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::engine::outbox::RowState;

#[derive(Default)]
pub struct Settled {
    outcomes: Mutex<HashMap<String, RowState>>,
}

/// The final outcome an audit record states, if it states one: an `attempt` that was
/// delivered (2xx), a conflict (409), or a permanent failure.
pub fn outcome_of(event: &str, status: Option<u16>, reason: Option<&str>) -> Option<RowState> {
    if event != "attempt" {
        return None;
    }
    match (status, reason) {
        (Some(s), Some("delivered")) => Some(RowState::Delivered { status: s }),
        (Some(_), Some("conflict")) => Some(RowState::Conflict),
        (Some(s), Some(r)) if r.starts_with("permanent failure") => Some(RowState::Failed { status: s }),
        _ => None,
    }
}

impl Settled {
    pub fn insert(&self, key: String, state: RowState) {
        if let Ok(mut m) = self.outcomes.lock() {
            m.insert(key, state);
        }
    }

    /// The recorded outcome of `key`, removed: each is used once.
    pub fn take(&self, key: &str) -> Option<RowState> {
        self.outcomes.lock().ok().and_then(|mut m| m.remove(key))
    }

    pub fn len(&self) -> usize {
        self.outcomes.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_attempts_state_an_outcome() {
        assert_eq!(outcome_of("attempt", Some(200), Some("delivered")), Some(RowState::Delivered { status: 200 }));
        assert_eq!(outcome_of("attempt", Some(409), Some("conflict")), Some(RowState::Conflict));
        assert_eq!(
            outcome_of("attempt", Some(422), Some("permanent failure: bad sku")),
            Some(RowState::Failed { status: 422 })
        );
        assert_eq!(outcome_of("attempt", None, Some("retry: 503")), None);
        assert_eq!(outcome_of("created", None, None), None);
        assert_eq!(outcome_of("shadow", None, None), None);
    }

    #[test]
    fn an_outcome_is_taken_once() {
        let s = Settled::default();
        s.insert("k".into(), RowState::Conflict);
        assert_eq!(s.take("k"), Some(RowState::Conflict));
        assert_eq!(s.take("k"), None);
        assert!(s.is_empty());
    }
}
