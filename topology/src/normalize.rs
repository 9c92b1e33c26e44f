//! The one shared layer that turns `orders` and `inventory` record bytes into canonical
//! types. Every mode (stream, micro-batch, batch close) calls these functions, so a record
//! is accepted or rejected — and for the same reason — whichever mode reads it.
//!
//! # Check order
//!
//! A record can break several rules at once; the reason reported must not depend on the
//! order fields appear in the JSON or on which mode reads it. Reasons are therefore ranked
//! ([`CHECK_ORDER`]) and the earliest one that applies wins:
//!
//! 1. `not_json` — not one JSON object: no value at all (a tombstone), an empty value,
//!    invalid UTF-8 anywhere (also inside values that are otherwise ignored), nesting deeper
//!    than [`MAX_NESTING_DEPTH`] anywhere, a syntax error, trailing data, a duplicated key, or
//!    a top level that is not an object (`null` included).
//! 2. `unknown_schema_version` — `schema_version` missing or not the integer 1 or 2.
//! 3. `missing_event_id` — `event_id` missing, not a string, or blank.
//! 4. `unknown_event_type` — v1 `event_type` / v2 `type` missing or not one of the four.
//! 5. `unparsable_time` — v1 `event_time` not RFC 3339; v2 `occurred_at_ms` not an integer
//!    or outside the representable calendar.
//! 6. `invalid_identifier` — `event_id`, `order_id`, store (v1 `store`, v2 `store_id`) or a
//!    line's sku that is not an [identifier](#identifiers). Ranked first among the checks
//!    below: these are the values the record is keyed, deduplicated and acted on by, so a
//!    hostile one is reported as such whatever else is wrong with the record.
//! 7. `unknown_currency` — a currency code not in [`Currency`]'s table, or no currency where
//!    the event carries money.
//! 8. `mixed_currencies` — v2 prices in more than one currency.
//! 9. `non_positive_quantity` — a line quantity ≤ 0.
//! 10. `invalid_amount` — a price or refund that is not a decimal string (v1) / integer of
//!     minor units (v2), is negative, has more fraction digits than the currency, or makes
//!     the event's money exceed [`MAX_EVENT_AMOUNT`].
//! 11. `event_time_in_future` — event time later than append time + [`MAX_FUTURE_SKEW_MS`].
//! 12. `invalid_field` — anything else structural: `order_id`/store blank or missing, no
//!     lines (placed, cancelled, shipped), a line that is not an object, a blank sku, a
//!     quantity that is not an integer or exceeds `u32`, a placed/cancelled line without a
//!     price, a refund without an amount, a non-string `channel`.
//!
//! Steps 1–5 decide how to read the rest, so they stop at the first failure. Steps 6–12 are
//! all evaluated and the highest-ranked failure is reported; among failures of the same
//! reason the first checked wins (`event_id`, `order_id`, store, `channel`, lines in order,
//! refund).
//!
//! # Identifiers
//!
//! Identifiers are printable ASCII — bytes 0x21..=0x7E, and the space 0x20 between them but
//! not first or last — of at most [`NormalizeLimits::max_identifier_bytes`] bytes (default
//! [`DEFAULT_MAX_IDENTIFIER_BYTES`], the topology file's `sources.max_identifier_bytes`).
//! A sku ends up in action keys, sent as the `Idempotency-Key` HTTP header, and every
//! identifier in Kafka keys, state keys and logs: restricting them to visible ASCII makes
//! every key a valid header value in any HTTP stack, and rules out control characters,
//! bidirectional overrides and look-alike Unicode spellings (`é` composed or not) of one
//! identifier. A blank or non-string identifier keeps its older reason (`missing_event_id`,
//! `invalid_field`); the detail of an `invalid_identifier` names the field and the problem,
//! e.g. `lines[1].sku: contains a control character (0x07) at byte 3` or
//! `event_id: 300 bytes, limit 256`.
//!
//! Fields a version does not define are ignored (forward compatibility), and so are lines on
//! a refund and a refund amount on any other event type: they carry no meaning in the
//! canonical model. A field whose value is `null` counts as missing.
//!
//! # Parsing
//!
//! Records are deserialised in one pass into borrowed structs whose fields accept any JSON
//! type (`Json`, `Obj`, `Seq`); a wrong type becomes a value to judge in its turn
//! rather than a serde error, which would lose the ranking above. No `serde_json::Value`
//! tree is built. Order records take a fast path first (`fast`): a hand-written reader for
//! well-formed records without escapes or floats in kept fields, which fills the same structs
//! or hands the record to serde_json untouched; a differential test holds the two to the same
//! answer.
//!
//! Hostile input cannot exhaust the stack: no deserialiser here nests more than a few levels
//! (arrays and objects below them are skipped by serde_json's iterative `IgnoredAny`, or by
//! the fast path down to 64 levels, below which it leaves the record to serde_json), and
//! nesting deeper than [`MAX_NESTING_DEPTH`] is refused before parsing by a scan that only
//! runs when the value holds that many brackets at all.

mod checks;
mod fast;
#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod hostile_tests;
mod json;
#[cfg(test)]
mod tests;
mod v1;
mod v2;

use checks::{describe, identifier, rfc3339_ms, text, Checks};
use json::{checked_text, nullable, parse_object, parse_text, Json, Obj, Seq};

use rust_decimal::Decimal;
use serde::Deserialize;

use crate::event::{CanonicalEvent, InventorySnapshot};
use crate::reject::{RejectReason, Rejection};

/// How far an event's own time may lie after its record's broker append time.
///
/// Judged against `append_time_ms` (the record's LogAppendTime), never the processing
/// clock, so a replay next month rejects exactly what the live run rejected.
pub const MAX_FUTURE_SKEW_MS: i64 = 3_600_000;

/// Upper bound, in major units, on an event's line total and on a refund.
///
/// Far above any real order, yet small enough that sums over trillions of events stay
/// inside `Decimal`'s 96-bit mantissa, so downstream aggregation cannot overflow.
pub const MAX_EVENT_AMOUNT: i64 = 1_000_000_000_000_000;

/// [`MAX_EVENT_AMOUNT`] as a `Decimal`, built once rather than per comparison.
const MAX_AMOUNT: Decimal = Decimal::from_parts(MAX_EVENT_AMOUNT as u32, (MAX_EVENT_AMOUNT >> 32) as u32, 0, false, 0);

/// Default of [`NormalizeLimits::max_identifier_bytes`].
pub const DEFAULT_MAX_IDENTIFIER_BYTES: usize = 256;

/// Deepest nesting of arrays and objects accepted anywhere in a record, the same as
/// serde_json's own recursion limit; deeper is `not_json`.
pub const MAX_NESTING_DEPTH: usize = 128;

/// The part of normalisation the topology file may change (`[sources]`); everything else is
/// fixed by the record formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormalizeLimits {
    /// Longest [identifier](self#identifiers) accepted, in bytes.
    pub max_identifier_bytes: usize,
}

impl Default for NormalizeLimits {
    fn default() -> Self {
        NormalizeLimits { max_identifier_bytes: DEFAULT_MAX_IDENTIFIER_BYTES }
    }
}

/// Rejection reasons by rank: when a record breaks several rules, the earliest reported.
pub const CHECK_ORDER: [RejectReason; 12] = [
    RejectReason::NotJson,
    RejectReason::UnknownSchemaVersion,
    RejectReason::MissingEventId,
    RejectReason::UnknownEventType,
    RejectReason::UnparsableTime,
    RejectReason::InvalidIdentifier,
    RejectReason::UnknownCurrency,
    RejectReason::MixedCurrencies,
    RejectReason::NonPositiveQuantity,
    RejectReason::InvalidAmount,
    RejectReason::EventTimeInFuture,
    RejectReason::InvalidField,
];

/// Normalises one `orders` record value (schema v1 or v2) into a canonical event, with the
/// default [`NormalizeLimits`]; see [`normalize_order_with`].
pub fn normalize_order(bytes: &[u8], append_time_ms: i64) -> Result<CanonicalEvent, Rejection> {
    normalize_order_with(Some(bytes), append_time_ms, NormalizeLimits::default())
}

/// Normalises one `orders` record value (schema v1 or v2) into a canonical event.
///
/// `value` is the record value as the broker delivered it: `None` is a tombstone, rejected as
/// `not_json`. `append_time_ms` is the broker's LogAppendTime of the source record. Events
/// whose time is later than append + 1 h are rejected (`EventTimeInFuture`); never use the
/// processing clock.
pub fn normalize_order_with(
    value: Option<&[u8]>,
    append_time_ms: i64,
    limits: NormalizeLimits,
) -> Result<CanonicalEvent, Rejection> {
    let json = checked_text(value)?;
    let mut raw: RawOrder<'_> = match fast::order(json) {
        Some(raw) => raw,
        None => parse_text(json)?,
    };
    let version = match &raw.schema_version {
        Some(Json::Int(1)) => 1,
        Some(Json::Int(2)) => 2,
        other => {
            return Err(Rejection::new(RejectReason::UnknownSchemaVersion, describe(&"schema_version", other.as_ref())))
        }
    };
    let event_id = text(raw.event_id.take(), &"event_id", RejectReason::MissingEventId)?;
    let mut checks = Checks::new(limits);
    checks.identifier(&event_id, &"event_id");
    if version == 1 {
        v1::normalize(raw, event_id, append_time_ms, checks)
    } else {
        v2::normalize(raw, event_id, append_time_ms, checks)
    }
}

/// Normalises one `inventory` record value with the default [`NormalizeLimits`]; see
/// [`normalize_inventory_with`].
pub fn normalize_inventory(bytes: &[u8]) -> Result<InventorySnapshot, Rejection> {
    normalize_inventory_with(Some(bytes), NormalizeLimits::default())
}

/// Normalises one `inventory` record value, e.g.
/// `{"sku":"SKU-1","on_hand":120,"as_of":"2026-11-28T14:00:00Z"}`.
///
/// `value` is the record value as the broker delivered it: `None` is a tombstone (on this
/// compacted topic, a producer deleting a sku's row), rejected as `not_json`, since only a
/// snapshot says what is in stock.
///
/// Order: `not_json` (as for orders), then `unparsable_time` (`as_of` not RFC 3339), then
/// `invalid_field` for a missing, non-string or blank sku, then `invalid_identifier` for a
/// sku that is not an [identifier](self#identifiers), then `invalid_field` for `on_hand`
/// missing, not an integer or negative (a warehouse count below zero is a producer bug, and
/// accepting it would trigger oversell actions on bad data).
pub fn normalize_inventory_with(value: Option<&[u8]>, limits: NormalizeLimits) -> Result<InventorySnapshot, Rejection> {
    let raw: RawInventory<'_> = parse_object(value)?;
    let as_of_ms = match raw.as_of.as_ref().and_then(Json::as_str).and_then(rfc3339_ms) {
        Some(ms) => ms,
        None => return Err(Rejection::new(RejectReason::UnparsableTime, describe(&"as_of", raw.as_of.as_ref()))),
    };
    let sku = text(raw.sku, &"sku", RejectReason::InvalidField)?;
    identifier(&sku, &"sku", limits.max_identifier_bytes)?;
    let on_hand = match &raw.on_hand {
        Some(Json::Int(n)) if *n >= 0 => Some(*n),
        _ => None,
    };
    let Some(on_hand) = on_hand else {
        return Err(Rejection::new(
            RejectReason::InvalidField,
            format!("{} is not a non-negative integer", describe(&"on_hand", raw.on_hand.as_ref())),
        ));
    };
    Ok(InventorySnapshot { sku, on_hand, as_of_ms })
}

/// Every field either version defines, so a record is parsed once whatever its version.
#[derive(Debug, Default, Deserialize)]
struct RawOrder<'a> {
    #[serde(borrow, default, deserialize_with = "nullable")]
    schema_version: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    event_id: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    order_id: Option<Json<'a>>,
    // schema v1
    #[serde(borrow, default, deserialize_with = "nullable")]
    event_type: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    event_time: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    store: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    currency: Option<Json<'a>>,
    #[serde(borrow)]
    lines: Option<Seq<Obj<v1::RawLine<'a>>>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    amount: Option<Json<'a>>,
    // schema v2
    #[serde(borrow, default, deserialize_with = "nullable", rename = "type")]
    type_: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    occurred_at_ms: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    store_id: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    channel: Option<Json<'a>>,
    #[serde(borrow)]
    items: Option<Seq<Obj<v2::RawItem<'a>>>>,
    #[serde(borrow)]
    refund: Option<Obj<v2::RawMoney<'a>>>,
}

#[derive(Deserialize)]
struct RawInventory<'a> {
    #[serde(borrow, default, deserialize_with = "nullable")]
    sku: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    on_hand: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    as_of: Option<Json<'a>>,
}
