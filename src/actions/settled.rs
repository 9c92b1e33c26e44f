//! Actions that reached a final outcome before their partition was restored from a snapshot.
//!
//! A partition restored from a snapshot replays its input from the snapshot's offsets, and
//! re-derives every action created since, with the same key and payload. Those that were
//! delivered after the snapshot was taken are on the audit topic; the restore reads it
//! (see `snapshot::restore`) and lists their outcomes here. A row with such a key is
//! recorded with that outcome and audited as `settled`, not sent again. A standby's audit
//! tail (see [`super::standby`]) lists here the outcomes of rows it has not derived yet.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::outbox::RowState;

/// An outcome not used within this long is dropped, unless [`Settled::keeping_for`] says
/// otherwise (the runtime keeps them for the dedup retention: a standby or a replay that is
/// hours behind still re-derives the row, and an outcome dropped before that is a second POST).
/// Memory stays bounded: the reads on assignment keep only the assigned partitions' outcomes
/// ([`super::recall`]), and each outcome goes once its row is derived.
const KEEP_FOR: Duration = Duration::from_secs(3600);

/// Expired outcomes are looked for at most this often (a standby's audit tail adds them one
/// by one, and a walk over all of them per addition would cost more than the tail itself).
const PURGE_EVERY: Duration = Duration::from_secs(60);

pub struct Settled {
    outcomes: Mutex<Outcomes>,
    keep_for: Duration,
}

impl Default for Settled {
    fn default() -> Self {
        Settled::keeping_for(KEEP_FOR)
    }
}

#[derive(Default)]
struct Outcomes {
    by_key: HashMap<String, (RowState, Instant)>,
    purged_at: Option<Instant>,
}

impl Outcomes {
    fn purge(&mut self, now: Instant, keep_for: Duration) {
        if self.purged_at.is_some_and(|at| now.saturating_duration_since(at) < PURGE_EVERY) {
            return;
        }
        self.purged_at = Some(now);
        self.by_key.retain(|_, (_, at)| now.saturating_duration_since(*at) < keep_for);
    }
}

/// What an audit record says about an action (docs/formats.md, "Audit topic").
#[derive(serde::Deserialize)]
struct AuditView {
    key: String,
    event: String,
    status: Option<u16>,
    reason: Option<String>,
    #[serde(default)]
    sku: String,
}

/// The final outcome one audit record states: the action's key, its SKU, the outcome.
#[derive(Debug, PartialEq, Eq)]
pub struct AuditOutcome {
    pub key: String,
    pub sku: String,
    pub state: RowState,
}

/// The action key and final outcome an audit record's payload states, if it states one.
pub fn outcome_in(payload: &[u8]) -> Option<(String, RowState)> {
    audit_outcome_in(payload).map(|o| (o.key, o.state))
}

/// What one audit record means for recalling outcomes: a final outcome, or an operator's
/// re-send (`tidemark actions resend`: the row is pending again, whatever came before).
#[derive(Debug, PartialEq, Eq)]
pub enum AuditEvent {
    Outcome(AuditOutcome),
    Resend { key: String },
}

/// The [`AuditEvent`] a payload states, if any: parsed once.
pub fn audit_event_in(payload: &[u8]) -> Option<AuditEvent> {
    let v: AuditView = serde_json::from_slice(payload).ok()?;
    if v.event == "resend" {
        return Some(AuditEvent::Resend { key: v.key });
    }
    let state = outcome_of(&v.event, v.status, v.reason.as_deref())?;
    Some(AuditEvent::Outcome(AuditOutcome { key: v.key, sku: v.sku, state }))
}

/// [`outcome_in`] with the action's SKU (which names its SKU partition).
pub fn audit_outcome_in(payload: &[u8]) -> Option<AuditOutcome> {
    match audit_event_in(payload)? {
        AuditEvent::Outcome(o) => Some(o),
        AuditEvent::Resend { .. } => None,
    }
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
    /// Outcomes not used within `keep_for` are dropped.
    pub fn keeping_for(keep_for: Duration) -> Self {
        Settled { outcomes: Mutex::default(), keep_for }
    }

    /// Adds the outcomes of one audit read, after dropping those kept too long.
    pub fn extend(&self, outcomes: impl IntoIterator<Item = (String, RowState)>) {
        self.extend_at(outcomes, Instant::now());
    }

    fn extend_at(&self, outcomes: impl IntoIterator<Item = (String, RowState)>, now: Instant) {
        if let Ok(mut m) = self.outcomes.lock() {
            m.purge(now, self.keep_for);
            m.by_key.extend(outcomes.into_iter().map(|(k, state)| (k, (state, now))));
        }
    }

    /// Adds one outcome (a standby's audit tail).
    pub fn insert(&self, key: String, state: RowState) {
        self.extend([(key, state)]);
    }

    /// The recorded outcome of `key`, removed: each is used once.
    pub fn take(&self, key: &str) -> Option<RowState> {
        self.outcomes.lock().ok().and_then(|mut m| m.by_key.remove(key)).map(|(state, _)| state)
    }

    pub fn len(&self) -> usize {
        self.outcomes.lock().map(|m| m.by_key.len()).unwrap_or(0)
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
    fn outcomes_older_than_an_hour_are_dropped_when_others_arrive() {
        let s = Settled::default();
        let t0 = Instant::now();
        s.extend_at([("old".to_string(), RowState::Conflict)], t0);
        s.extend_at([("new".to_string(), RowState::Conflict)], t0 + KEEP_FOR + Duration::from_secs(1));
        assert_eq!(s.take("old"), None);
        assert_eq!(s.take("new"), Some(RowState::Conflict));
    }

    #[test]
    fn outcomes_are_kept_as_long_as_configured() {
        let s = Settled::keeping_for(Duration::from_secs(7 * 24 * 3600));
        let t0 = Instant::now();
        s.extend_at([("old".to_string(), RowState::Conflict)], t0);
        s.extend_at([("new".to_string(), RowState::Conflict)], t0 + KEEP_FOR * 5);
        assert_eq!(s.take("old"), Some(RowState::Conflict), "five hours are within a week");
    }

    #[test]
    fn an_audit_payload_states_its_key_sku_and_final_outcome() {
        let p = br#"{"key":"k1","event":"attempt","status":200,"reason":"delivered","attempt":1,"sku":"SKU-7"}"#;
        let want = AuditOutcome { key: "k1".into(), sku: "SKU-7".into(), state: RowState::Delivered { status: 200 } };
        assert_eq!(audit_outcome_in(p), Some(want));
    }

    #[test]
    fn a_resend_record_names_its_key_and_states_no_outcome() {
        let p = br#"{"key":"k1","event":"resend","status":422,"reason":"endpoint fixed","sku":"S"}"#;
        assert_eq!(audit_event_in(p), Some(AuditEvent::Resend { key: "k1".to_string() }));
        assert_eq!(outcome_in(p), None);
        let attempt = br#"{"key":"k1","event":"attempt","status":200,"reason":"delivered"}"#;
        assert!(matches!(audit_event_in(attempt), Some(AuditEvent::Outcome(_))), "an outcome, not a re-send");
    }

    #[test]
    fn an_audit_payload_states_its_key_and_final_outcome() {
        let delivered = br#"{"key":"k1","event":"attempt","status":200,"reason":"delivered","attempt":1}"#;
        assert_eq!(outcome_in(delivered), Some(("k1".to_string(), RowState::Delivered { status: 200 })));
        assert_eq!(outcome_in(br#"{"key":"k1","event":"created","status":null,"reason":null}"#), None);
        assert_eq!(outcome_in(b"not json"), None);
    }

    #[test]
    fn an_outcome_is_taken_once() {
        let s = Settled::default();
        s.extend([("k".to_string(), RowState::Conflict)]);
        assert_eq!(s.take("k"), Some(RowState::Conflict));
        assert_eq!(s.take("k"), None);
        assert!(s.is_empty());
    }
}
