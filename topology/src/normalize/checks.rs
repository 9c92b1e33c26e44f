//! Checks 6–12 of the [check order](super#check-order): the failures of one record
//! collected, the highest-ranked one kept, and the field checks they are made of.

use std::fmt;

use chrono::DateTime;
use compact_str::CompactString;
use rust_decimal::Decimal;

use super::json::Json;
use super::{NormalizeLimits, CHECK_ORDER, MAX_AMOUNT, MAX_EVENT_AMOUNT, MAX_FUTURE_SKEW_MS};
use crate::currency::Currency;
use crate::reject::{RejectReason, Rejection};

/// Collects failures of checks 6–12 and keeps the highest-ranked one.
pub(super) struct Checks {
    first: Option<Rejection>,
    max_identifier_bytes: usize,
}

impl Checks {
    pub(super) fn new(limits: NormalizeLimits) -> Checks {
        Checks { first: None, max_identifier_bytes: limits.max_identifier_bytes }
    }

    /// Records an `invalid_identifier` failure unless `value` is an identifier.
    pub(super) fn identifier(&mut self, value: &str, name: &dyn fmt::Display) {
        if let Err(rejection) = identifier(value, name, self.max_identifier_bytes) {
            self.fail(rejection);
        }
    }

    /// A required identifier field: missing, not a string or blank is `invalid_field`, and
    /// anything but an identifier `invalid_identifier`. `None` only in the first case.
    pub(super) fn required_identifier(
        &mut self,
        value: Option<Json<'_>>,
        name: &dyn fmt::Display,
    ) -> Option<CompactString> {
        let value = self.ok(text(value, name, RejectReason::InvalidField))?;
        self.identifier(&value, name);
        Some(value)
    }

    pub(super) fn fail(&mut self, rejection: Rejection) {
        let earlier = self.first.as_ref().is_none_or(|kept| rank(rejection.reason) < rank(kept.reason));
        if earlier {
            self.first = Some(rejection);
        }
    }

    /// Records a failure and yields `None`, so checking can go on with the other fields.
    pub(super) fn ok<T>(&mut self, result: Result<T, Rejection>) -> Option<T> {
        result.map_err(|r| self.fail(r)).ok()
    }

    pub(super) fn future(&mut self, event_time_ms: i64, append_time_ms: i64) {
        if event_time_ms > append_time_ms.saturating_add(MAX_FUTURE_SKEW_MS) {
            self.fail(Rejection::new(
                RejectReason::EventTimeInFuture,
                format!("event time {event_time_ms} ms is more than 1 h after append time {append_time_ms} ms"),
            ));
        }
    }

    /// Checks the money total of the lines against [`MAX_EVENT_AMOUNT`].
    pub(super) fn lines_total(&mut self, mut prices: impl Iterator<Item = (u32, Decimal)>, list: &str) {
        let total = prices.try_fold(Decimal::ZERO, |sum, (qty, price)| {
            price.checked_mul(Decimal::from(qty)).and_then(|amount| sum.checked_add(amount))
        });
        if total.is_none_or(|t| t > MAX_AMOUNT) {
            self.fail(Rejection::new(RejectReason::InvalidAmount, format!("{list} total exceeds {MAX_EVENT_AMOUNT}")));
        }
    }

    pub(super) fn finish<T>(self, value: T) -> Result<T, Rejection> {
        match self.first {
            Some(rejection) => Err(rejection),
            None => Ok(value),
        }
    }
}

pub(super) fn rank(reason: RejectReason) -> usize {
    CHECK_ORDER.iter().position(|r| *r == reason).unwrap_or(CHECK_ORDER.len())
}

/// Path of a field inside a list, e.g. `lines[1].qty`.
pub(super) struct At<'p>(pub(super) &'p str, pub(super) usize, pub(super) &'p str);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}].{}", self.0, self.1, self.2)
    }
}

/// `name = value` or `name missing`, for rejection details.
pub(super) fn describe(name: &dyn fmt::Display, value: Option<&Json<'_>>) -> String {
    match value {
        Some(v) => format!("{name} = {v}"),
        None => format!("{name} missing"),
    }
}

/// A required, non-blank string field; `reason` is what its absence is reported as.
pub(super) fn text(
    value: Option<Json<'_>>,
    name: &dyn fmt::Display,
    reason: RejectReason,
) -> Result<CompactString, Rejection> {
    match value {
        // Up to 24 bytes (an id, a store, a SKU) without allocating.
        Some(Json::Str(s)) if !s.trim().is_empty() => Ok(CompactString::from(s)),
        Some(Json::Str(s)) => Err(Rejection::new(reason, format!("{name} = {s:?} is blank"))),
        other => Err(Rejection::new(
            reason,
            describe(name, other.as_ref()) + if other.is_some() { " is not a string" } else { "" },
        )),
    }
}

/// Accepts `value` if it is an [identifier](self#identifiers) of at most `max_bytes` bytes;
/// otherwise an `invalid_identifier` naming the field and the first problem.
pub(super) fn identifier(value: &str, name: &dyn fmt::Display, max_bytes: usize) -> Result<(), Rejection> {
    let problem = if value.len() > max_bytes {
        format!("{} bytes, limit {max_bytes}", value.len())
    } else if let Some((at, c)) = value.char_indices().find(|(_, c)| !matches!(c, ' '..='~')) {
        if c.is_control() {
            let code = if c.is_ascii() { format!("0x{:02X}", u32::from(c)) } else { format!("U+{:04X}", u32::from(c)) };
            format!("contains a control character ({code}) at byte {at}")
        } else {
            format!("contains U+{:04X}, which is not printable ASCII, at byte {at}", u32::from(c))
        }
    } else if value.starts_with(' ') || value.ends_with(' ') {
        "starts or ends with a space".to_string()
    } else {
        return Ok(());
    };
    Err(Rejection::new(RejectReason::InvalidIdentifier, format!("{name}: {problem}")))
}

/// A line quantity: ≤ 0 is `non_positive_quantity`; anything else that is not a `u32`
/// is `invalid_field`.
pub(super) fn quantity(value: Option<&Json<'_>>, name: &dyn fmt::Display) -> Result<u32, Rejection> {
    let non_positive = || Rejection::new(RejectReason::NonPositiveQuantity, describe(name, value));
    match value {
        Some(Json::Int(n)) if *n <= 0 => Err(non_positive()),
        Some(Json::Float(f)) if *f <= 0.0 => Err(non_positive()),
        Some(Json::BigInt(_)) => {
            Err(Rejection::new(RejectReason::InvalidField, format!("{} exceeds {}", describe(name, value), u32::MAX)))
        }
        Some(Json::Int(n)) => u32::try_from(*n).map_err(|_| {
            Rejection::new(RejectReason::InvalidField, format!("{} exceeds {}", describe(name, value), u32::MAX))
        }),
        Some(_) => {
            Err(Rejection::new(RejectReason::InvalidField, format!("{} is not an integer", describe(name, value))))
        }
        None => Err(Rejection::new(RejectReason::InvalidField, describe(name, value))),
    }
}

/// A currency code field; missing counts as unknown, since amounts cannot be read without it.
pub(super) fn currency(value: Option<&Json<'_>>, name: &dyn fmt::Display) -> Result<Currency, Rejection> {
    value
        .and_then(Json::as_str)
        .and_then(Currency::from_code)
        .ok_or_else(|| Rejection::new(RejectReason::UnknownCurrency, describe(name, value)))
}

/// Rejects negative amounts and amounts beyond [`MAX_EVENT_AMOUNT`].
pub(super) fn bounded(amount: Decimal, name: &dyn fmt::Display, raw: &Json<'_>) -> Result<Decimal, Rejection> {
    let problem = if amount.is_sign_negative() && !amount.is_zero() {
        "is negative"
    } else if amount > MAX_AMOUNT {
        "exceeds the per-event maximum"
    } else {
        return Ok(amount);
    };
    Err(Rejection::new(RejectReason::InvalidAmount, format!("{name} = {raw} {problem}")))
}

pub(super) fn rfc3339_ms(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}
