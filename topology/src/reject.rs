//! Machine-readable reasons a source record is dead-lettered.
//!
//! The codes are a contract with whoever reads the dead-letter topic and the metric labels,
//! so they are fixed strings rather than `Debug` output.

use std::fmt;

/// Why a record was rejected. Bounded set: safe as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    NotJson,
    MissingEventId,
    UnknownSchemaVersion,
    UnknownEventType,
    UnparsableTime,
    NonPositiveQuantity,
    UnknownCurrency,
    MixedCurrencies,
    EventTimeInFuture,
    InvalidAmount,
    InvalidField,
    /// An identifier (`event_id`, `order_id`, store, a sku) that is not printable ASCII or is
    /// longer than the configured limit.
    InvalidIdentifier,
}

impl RejectReason {
    pub const ALL: [RejectReason; 12] = [
        RejectReason::NotJson,
        RejectReason::MissingEventId,
        RejectReason::UnknownSchemaVersion,
        RejectReason::UnknownEventType,
        RejectReason::UnparsableTime,
        RejectReason::NonPositiveQuantity,
        RejectReason::UnknownCurrency,
        RejectReason::MixedCurrencies,
        RejectReason::EventTimeInFuture,
        RejectReason::InvalidAmount,
        RejectReason::InvalidField,
        RejectReason::InvalidIdentifier,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::NotJson => "not_json",
            RejectReason::MissingEventId => "missing_event_id",
            RejectReason::UnknownSchemaVersion => "unknown_schema_version",
            RejectReason::UnknownEventType => "unknown_event_type",
            RejectReason::UnparsableTime => "unparsable_time",
            RejectReason::NonPositiveQuantity => "non_positive_quantity",
            RejectReason::UnknownCurrency => "unknown_currency",
            RejectReason::MixedCurrencies => "mixed_currencies",
            RejectReason::EventTimeInFuture => "event_time_in_future",
            RejectReason::InvalidAmount => "invalid_amount",
            RejectReason::InvalidField => "invalid_field",
            RejectReason::InvalidIdentifier => "invalid_identifier",
        }
    }

    /// Inverse of [`RejectReason::as_str`].
    pub fn from_str_code(s: &str) -> Option<RejectReason> {
        RejectReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected record: the reason plus a short detail naming the offending field and value
/// (e.g. `lines[1].qty = 0`), so a dead letter can be understood without the original bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct Rejection {
    pub reason: RejectReason,
    pub detail: String,
}

impl Rejection {
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Rejection {
        Rejection { reason, detail: detail.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_reason_is_listed_once_and_codes_round_trip() {
        let codes: HashSet<&str> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(codes.len(), RejectReason::ALL.len());
        for r in RejectReason::ALL {
            assert_eq!(RejectReason::from_str_code(r.as_str()), Some(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(RejectReason::from_str_code("NotJson"), None);
    }

    #[test]
    fn codes_are_snake_case_metric_labels() {
        for r in RejectReason::ALL {
            assert!(r.as_str().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn rejection_displays_reason_then_detail() {
        let r = Rejection::new(RejectReason::NonPositiveQuantity, "lines[1].qty = 0");
        assert_eq!(r.to_string(), "non_positive_quantity: lines[1].qty = 0");
    }
}
