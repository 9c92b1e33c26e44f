//! Action metrics: the dispatch of outbox rows (`tidemark_dispatch_*`), the outbox itself
//! (`tidemark_outbox_*`) and the audit topic (`tidemark_audit_*`). The series that exist from
//! the start are registered in [`super::events::install`].

use metrics::{counter, gauge};

use super::events::DISPATCH;

/// A row a scan started again after an earlier attempt (a redelivery).
pub fn redelivered() {
    counter!("tidemark_dispatch_redeliveries_total").increment(1);
}

/// One attempt's outcome, `outcome` one of [`super::events::DISPATCH_OUTCOMES`]
/// (`dispatch::Outcome::label`).
pub fn dispatched(outcome: &'static str) {
    counter!(DISPATCH, "outcome" => outcome).increment(1);
}

/// A row stored with the outcome the audit topic recorded, not sent.
pub fn settled_from_audit() {
    counter!("tidemark_dispatch_settled_from_audit_total").increment(1);
}

/// Makes the audit recall series exist (at 0).
pub fn recalls_started() {
    for outcome in ["ok", "failed"] {
        counter!("tidemark_audit_recalls_total", "outcome" => outcome).absolute(0);
    }
}

/// A read of the audit topic before dispatching assigned SKU partitions: `ok`, or `failed`
/// once the attempts are spent.
pub fn recalled(ok: bool) {
    counter!("tidemark_audit_recalls_total", "outcome" => if ok { "ok" } else { "failed" }).increment(1);
}

/// An outcome audit record produced again after a failed delivery.
pub fn audit_retried() {
    counter!("tidemark_audit_retries_total").increment(1);
}

/// A pending row left for a scan to start (the delivery tasks are at capacity).
pub fn outbox_deferred() {
    counter!("tidemark_outbox_deferred_total").increment(1);
}

/// The rows in flight and the age of the oldest, in seconds.
pub fn outbox_pending(rows: usize, oldest_age_seconds: f64) {
    gauge!("tidemark_outbox_pending").set(rows as f64);
    gauge!("tidemark_outbox_oldest_pending_age_seconds").set(oldest_age_seconds);
}

/// Final rows past retention deleted by a scan.
pub fn outbox_expired(rows: usize) {
    counter!("tidemark_outbox_expired_total").increment(rows as u64);
}
