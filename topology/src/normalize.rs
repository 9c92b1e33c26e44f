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
//! tree is built.
//!
//! Hostile input cannot exhaust the stack: no deserialiser here nests more than a few levels
//! (arrays and objects below them are skipped by serde_json's iterative `IgnoredAny`), and
//! nesting deeper than [`MAX_NESTING_DEPTH`] is refused before parsing by a scan that only
//! runs when the value holds that many brackets at all.

#[cfg(test)]
mod hostile_tests;
mod v1;
mod v2;

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use chrono::DateTime;
use rust_decimal::Decimal;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, IgnoredAny};
use serde::{Deserialize, Deserializer};

use crate::currency::Currency;
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
    let mut raw: RawOrder<'_> = parse_object(value)?;
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
#[derive(Deserialize)]
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

/// Check 1: one JSON object, read into `T`.
///
/// UTF-8 is validated over the whole value first, because serde_json does not validate the
/// strings it skips; parsing then reads from a `str`, which spares serde_json validating the
/// strings it keeps.
fn parse_object<'a, T: Deserialize<'a>>(value: Option<&'a [u8]>) -> Result<T, Rejection> {
    let not_json = |detail: String| Rejection::new(RejectReason::NotJson, detail);
    let bytes = match value {
        None => return Err(not_json("no value (a tombstone)".into())),
        Some([]) => return Err(not_json("empty value".into())),
        Some(bytes) => bytes,
    };
    let text =
        std::str::from_utf8(bytes).map_err(|e| not_json(format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    if let Some(at) = too_deep(bytes) {
        return Err(not_json(format!("nested deeper than {MAX_NESTING_DEPTH} levels at byte {at}")));
    }
    match serde_json::from_str::<Obj<T>>(text) {
        Ok(Obj::Ok(value)) => Ok(value),
        Ok(Obj::NotObject(kind)) => Err(not_json(format!("top level is {kind}, not an object"))),
        Err(e) => Err(not_json(e.to_string())),
    }
}

/// Where arrays and objects first nest deeper than [`MAX_NESTING_DEPTH`], if they do.
///
/// Exact for valid JSON; on invalid JSON the answer only chooses between two `not_json`
/// details. A value with no more brackets than the limit cannot nest that deep, so the
/// string-aware scan is skipped for every ordinary record.
fn too_deep(bytes: &[u8]) -> Option<usize> {
    // `[` and `{` are the only bytes with `b | 0x20 == b'{'`; counting per 255-byte chunk
    // into a `u8` lets the compiler compare 16 or 32 bytes at a time.
    let openings: usize = bytes
        .chunks(255)
        .map(|chunk| usize::from(chunk.iter().map(|b| u8::from(b | 0x20 == b'{')).fold(0u8, u8::wrapping_add)))
        .sum();
    if openings <= MAX_NESTING_DEPTH {
        return None;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (at, b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING_DEPTH {
                    return Some(at);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Collects failures of checks 6–12 and keeps the highest-ranked one.
struct Checks {
    first: Option<Rejection>,
    max_identifier_bytes: usize,
}

impl Checks {
    fn new(limits: NormalizeLimits) -> Checks {
        Checks { first: None, max_identifier_bytes: limits.max_identifier_bytes }
    }

    /// Records an `invalid_identifier` failure unless `value` is an identifier.
    fn identifier(&mut self, value: &str, name: &dyn fmt::Display) {
        if let Err(rejection) = identifier(value, name, self.max_identifier_bytes) {
            self.fail(rejection);
        }
    }

    /// A required identifier field: missing, not a string or blank is `invalid_field`, and
    /// anything but an identifier `invalid_identifier`. `None` only in the first case.
    fn required_identifier(&mut self, value: Option<Json<'_>>, name: &dyn fmt::Display) -> Option<String> {
        let value = self.ok(text(value, name, RejectReason::InvalidField))?;
        self.identifier(&value, name);
        Some(value)
    }

    fn fail(&mut self, rejection: Rejection) {
        let earlier = self.first.as_ref().is_none_or(|kept| rank(rejection.reason) < rank(kept.reason));
        if earlier {
            self.first = Some(rejection);
        }
    }

    /// Records a failure and yields `None`, so checking can go on with the other fields.
    fn ok<T>(&mut self, result: Result<T, Rejection>) -> Option<T> {
        result.map_err(|r| self.fail(r)).ok()
    }

    fn future(&mut self, event_time_ms: i64, append_time_ms: i64) {
        if event_time_ms > append_time_ms.saturating_add(MAX_FUTURE_SKEW_MS) {
            self.fail(Rejection::new(
                RejectReason::EventTimeInFuture,
                format!("event time {event_time_ms} ms is more than 1 h after append time {append_time_ms} ms"),
            ));
        }
    }

    /// Checks the money total of the lines against [`MAX_EVENT_AMOUNT`].
    fn lines_total(&mut self, mut prices: impl Iterator<Item = (u32, Decimal)>, list: &str) {
        let total = prices.try_fold(Decimal::ZERO, |sum, (qty, price)| {
            price.checked_mul(Decimal::from(qty)).and_then(|amount| sum.checked_add(amount))
        });
        if total.is_none_or(|t| t > MAX_AMOUNT) {
            self.fail(Rejection::new(RejectReason::InvalidAmount, format!("{list} total exceeds {MAX_EVENT_AMOUNT}")));
        }
    }

    fn finish<T>(self, value: T) -> Result<T, Rejection> {
        match self.first {
            Some(rejection) => Err(rejection),
            None => Ok(value),
        }
    }
}

fn rank(reason: RejectReason) -> usize {
    CHECK_ORDER.iter().position(|r| *r == reason).unwrap_or(CHECK_ORDER.len())
}

/// Path of a field inside a list, e.g. `lines[1].qty`.
struct At<'p>(&'p str, usize, &'p str);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}].{}", self.0, self.1, self.2)
    }
}

/// `name = value` or `name missing`, for rejection details.
fn describe(name: &dyn fmt::Display, value: Option<&Json<'_>>) -> String {
    match value {
        Some(v) => format!("{name} = {v}"),
        None => format!("{name} missing"),
    }
}

/// A required, non-blank string field; `reason` is what its absence is reported as.
fn text(value: Option<Json<'_>>, name: &dyn fmt::Display, reason: RejectReason) -> Result<String, Rejection> {
    match value {
        Some(Json::Str(s)) if !s.trim().is_empty() => Ok(s.into_owned()),
        Some(Json::Str(s)) => Err(Rejection::new(reason, format!("{name} = {s:?} is blank"))),
        other => Err(Rejection::new(
            reason,
            describe(name, other.as_ref()) + if other.is_some() { " is not a string" } else { "" },
        )),
    }
}

/// Accepts `value` if it is an [identifier](self#identifiers) of at most `max_bytes` bytes;
/// otherwise an `invalid_identifier` naming the field and the first problem.
fn identifier(value: &str, name: &dyn fmt::Display, max_bytes: usize) -> Result<(), Rejection> {
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
fn quantity(value: Option<&Json<'_>>, name: &dyn fmt::Display) -> Result<u32, Rejection> {
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
fn currency(value: Option<&Json<'_>>, name: &dyn fmt::Display) -> Result<Currency, Rejection> {
    value
        .and_then(Json::as_str)
        .and_then(Currency::from_code)
        .ok_or_else(|| Rejection::new(RejectReason::UnknownCurrency, describe(name, value)))
}

/// Rejects negative amounts and amounts beyond [`MAX_EVENT_AMOUNT`].
fn bounded(amount: Decimal, name: &dyn fmt::Display, raw: &Json<'_>) -> Result<Decimal, Rejection> {
    let problem = if amount.is_sign_negative() && !amount.is_zero() {
        "is negative"
    } else if amount > MAX_AMOUNT {
        "exceeds the per-event maximum"
    } else {
        return Ok(amount);
    };
    Err(Rejection::new(RejectReason::InvalidAmount, format!("{name} = {raw} {problem}")))
}

fn rfc3339_ms(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

/// Any JSON value, shallowly: scalars are kept, arrays and objects are skipped and only
/// their kind remembered. Integers that fit `i64` share one arm whatever the sign.
#[derive(Debug)]
enum Json<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer above `i64::MAX`: too big for any field, kept only to be reported.
    BigInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    Array,
    Object,
}

impl Json<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Short rendering for rejection details: strings are quoted and cut at 40 characters so a
/// hostile value cannot blow up dead-letter headers or logs.
impl fmt::Display for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_CHARS: usize = 40;
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Int(n) => write!(f, "{n}"),
            Json::BigInt(n) => write!(f, "{n}"),
            Json::Float(x) => write!(f, "{x}"),
            Json::Str(s) => match s.char_indices().nth(MAX_CHARS) {
                Some((cut, _)) => write!(f, "{:?}…", &s[..cut]),
                None => write!(f, "{s:?}"),
            },
            Json::Array => f.write_str("[…]"),
            Json::Object => f.write_str("{…}"),
        }
    }
}

/// Field deserialiser: `null` reads as missing. Used with `#[serde(default)]` instead of
/// plain `Option<Json>`, which would peek for `null` once more per field on the hot path.
fn nullable<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Json<'a>>, D::Error> {
    Json::deserialize(d).map(|v| match v {
        Json::Null => None,
        v => Some(v),
    })
}

impl<'de: 'a, 'a> Deserialize<'de> for Json<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor(PhantomData))
    }
}

struct JsonVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> de::Visitor<'de> for JsonVisitor<'a> {
    type Value = Json<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json<'a>, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json<'a>, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json<'a>, E> {
        Ok(Json::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json<'a>, E> {
        Ok(i64::try_from(v).map_or(Json::BigInt(v), Json::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json<'a>, E> {
        Ok(Json::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'a>, E> {
        Ok(Json::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json<'a>, E> {
        Ok(Json::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Json<'a>, E> {
        Ok(Json::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'a>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Json::Array)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Json<'a>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Json::Object)
    }
}

/// An object parsed into `T`, or the kind of JSON value it was instead (`null`, `an array`...).
enum Obj<T> {
    Ok(T),
    NotObject(&'static str),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjVisitor(PhantomData))
    }
}

struct ObjVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> de::Visitor<'de> for ObjVisitor<T> {
    type Value = Obj<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Obj::Ok)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Obj<T>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Obj::NotObject("an array"))
    }
    fn visit_unit<E>(self) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("null"))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("a number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Obj<T>, E> {
        Ok(Obj::NotObject("a string"))
    }
}

/// An array of `T`, or a note that the value was some other JSON type.
enum Seq<T> {
    Items(Vec<T>),
    NotArray,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Seq<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SeqVisitor(PhantomData))
    }
}

struct SeqVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> de::Visitor<'de> for SeqVisitor<T> {
    type Value = Seq<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Seq<T>, A::Error> {
        // serde_json gives no size hint; start big enough for a typical order to skip regrowth.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(8).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Seq::Items(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Seq<T>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Seq::NotArray)
    }
    fn visit_unit<E>(self) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
    fn visit_str<E>(self, _: &str) -> Result<Seq<T>, E> {
        Ok(Seq::NotArray)
    }
}

/// The list of lines a non-refund event must carry: present, an array, not empty.
fn required_list<T>(list: Option<Seq<T>>, name: &str) -> Result<Vec<T>, Rejection> {
    let problem = match list {
        Some(Seq::Items(items)) if !items.is_empty() => return Ok(items),
        Some(Seq::Items(_)) => "is empty",
        Some(Seq::NotArray) => "is not an array",
        None => "missing",
    };
    Err(Rejection::new(RejectReason::InvalidField, format!("{name} {problem}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;
    use serde_json::{json, Value};

    /// 2026-11-28T15:00:00Z.
    const APPEND: i64 = 1_795_878_000_000;

    fn run(v: &Value) -> Result<CanonicalEvent, Rejection> {
        normalize_order(&serde_json::to_vec(v).expect("serialise"), APPEND)
    }

    fn reason(v: &Value) -> RejectReason {
        run(v).expect_err("should be rejected").reason
    }

    fn v1(kind: &str) -> Value {
        let mut v = json!({"schema_version":1,"event_id":"e-1","order_id":"o-1",
            "event_type":kind,"event_time":"2026-11-28T23:59:59.120+09:00","store":"tokyo-01",
            "currency":"USD","lines":[{"sku":"SKU-1","qty":2,"unit_price":"19.8"},
                                     {"sku":"SKU-2","qty":1,"unit_price":"5"}]});
        if kind == "order_refunded" {
            v["amount"] = json!("12.5");
            v.as_object_mut().map(|o| o.remove("lines"));
        }
        v
    }

    fn v2(kind: &str) -> Value {
        let mut v = json!({"schema_version":2,"event_id":"e-1","order_id":"o-1","type":kind,
            "occurred_at_ms":1_795_877_999_120_i64,"store_id":"tokyo-01","channel":"web",
            "items":[{"sku":"SKU-1","quantity":2,"price":{"amount_minor":1980,"currency":"USD"}},
                     {"sku":"SKU-2","quantity":1,"price":{"amount_minor":500,"currency":"USD"}}]});
        if kind == "ORDER_REFUNDED" {
            v["refund"] = json!({"amount_minor":1250,"currency":"USD"});
            v.as_object_mut().map(|o| o.remove("items"));
        }
        v
    }

    #[test]
    fn max_amount_constant_matches_its_integer() {
        assert_eq!(MAX_AMOUNT, Decimal::from(MAX_EVENT_AMOUNT));
    }

    #[test]
    fn check_order_ranks_every_reason_exactly_once() {
        for r in RejectReason::ALL {
            assert_eq!(CHECK_ORDER.iter().filter(|x| **x == r).count(), 1, "{r}");
        }
    }

    #[test]
    fn v1_and_v2_encodings_of_the_same_order_are_equal_but_for_version_and_channel() {
        for (k1, k2) in [
            ("order_placed", "ORDER_PLACED"),
            ("order_cancelled", "ORDER_CANCELLED"),
            ("order_shipped", "ORDER_SHIPPED"),
            ("order_refunded", "ORDER_REFUNDED"),
        ] {
            let a = run(&v1(k1)).expect("v1 accepted");
            let mut b = run(&v2(k2)).expect("v2 accepted");
            assert_eq!(b.schema_version, 2);
            assert_eq!(b.channel.as_deref(), Some("web"));
            b.schema_version = 1;
            b.channel = None;
            assert_eq!(a, b, "{k1}");
        }
    }

    #[test]
    fn placed_event_is_canonical() {
        let e = run(&v1("order_placed")).expect("accepted");
        assert_eq!(e.kind, EventKind::Placed);
        assert_eq!(e.event_time_ms, 1_795_877_999_120);
        assert_eq!(e.currency, Currency::from_code("USD"));
        assert_eq!(e.units(), 3);
        assert_eq!(e.lines_amount().to_string(), "44.60");
        assert_eq!(e.refund_amount, None);
    }

    #[test]
    fn malformed_bytes_are_not_json() {
        for bytes in [
            &b""[..],
            b"{",
            b"{\"schema_version\":1} trailing",
            b"[1,2]",
            b"\"a string\"",
            b"null",
            b"{\"event_id\":\"\xff\"}",
            b"{\"event_id\":\"a\",\"event_id\":\"b\"}",
        ] {
            let r = normalize_order(bytes, APPEND).expect_err("rejected");
            assert_eq!(r.reason, RejectReason::NotJson, "{bytes:?}");
        }
    }

    #[test]
    fn schema_version_must_be_the_integer_1_or_2() {
        for sv in [json!(3), json!("1"), json!(1.0), json!(null), json!(-1)] {
            let mut v = v1("order_placed");
            v["schema_version"] = sv.clone();
            assert_eq!(reason(&v), RejectReason::UnknownSchemaVersion, "{sv}");
        }
    }

    #[test]
    fn event_id_missing_blank_or_not_a_string_is_missing_event_id() {
        for id in [json!(null), json!(""), json!("  \t"), json!(42)] {
            let mut v = v2("ORDER_PLACED");
            v["event_id"] = id.clone();
            assert_eq!(reason(&v), RejectReason::MissingEventId, "{id}");
        }
    }

    #[test]
    fn higher_ranked_reason_wins_whatever_the_field_order() {
        // unknown currency + zero quantity + future time: currency ranks first.
        let mut v = v1("order_placed");
        v["currency"] = json!("XYZ");
        v["lines"][1]["qty"] = json!(0);
        v["event_time"] = json!("2030-01-01T00:00:00Z");
        assert_eq!(reason(&v), RejectReason::UnknownCurrency);
        // zero quantity on a later line beats a bad price on an earlier one.
        let mut v = v1("order_placed");
        v["lines"][0]["unit_price"] = json!("-1");
        v["lines"][1]["qty"] = json!(-3);
        assert_eq!(reason(&v), RejectReason::NonPositiveQuantity);
        // future time beats a missing store.
        let mut v = v2("ORDER_PLACED");
        v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS + 1);
        v.as_object_mut().map(|o| o.remove("store_id"));
        assert_eq!(reason(&v), RejectReason::EventTimeInFuture);
        // schema version is judged before event id.
        let mut v = v2("ORDER_PLACED");
        v["schema_version"] = json!(9);
        v["event_id"] = json!("");
        assert_eq!(reason(&v), RejectReason::UnknownSchemaVersion);
    }

    #[test]
    fn reordering_fields_does_not_change_the_rejection() {
        let forward = br#"{"schema_version":1,"event_id":"e","order_id":"o","event_type":"order_placed","event_time":"2026-11-28T14:00:00Z","store":"s","currency":"USD","lines":[{"sku":"a","qty":1,"unit_price":"1.234"},{"sku":"b","qty":0,"unit_price":"1"}]}"#;
        let backward = br#"{"lines":[{"unit_price":"1.234","qty":1,"sku":"a"},{"unit_price":"1","qty":0,"sku":"b"}],"currency":"USD","store":"s","event_time":"2026-11-28T14:00:00Z","event_type":"order_placed","order_id":"o","event_id":"e","schema_version":1}"#;
        let a = normalize_order(forward, APPEND).expect_err("rejected");
        let b = normalize_order(backward, APPEND).expect_err("rejected");
        assert_eq!(a, b);
        assert_eq!(a.reason, RejectReason::NonPositiveQuantity);
        assert_eq!(a.detail, "lines[1].qty = 0");
    }

    #[test]
    fn event_time_up_to_one_hour_after_append_is_accepted() {
        let mut v = v2("ORDER_PLACED");
        v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS);
        assert!(run(&v).is_ok());
        v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS + 1);
        assert_eq!(reason(&v), RejectReason::EventTimeInFuture);
    }

    #[test]
    fn future_check_uses_append_time_not_the_clock() {
        let mut v = v2("ORDER_PLACED");
        v["occurred_at_ms"] = json!(4_000_000_000_000_i64); // year 2096
        let bytes = serde_json::to_vec(&v).expect("serialise");
        assert!(normalize_order(&bytes, 4_000_000_000_000).is_ok());
        assert!(normalize_order(&bytes, APPEND).is_err());
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let mut v = v1("order_placed");
        v["coupon"] = json!({"code":"X","nested":[1,2,{"a":null}]});
        v["lines"][0]["gift_wrap"] = json!(true);
        v["items"] = json!("v2 field on a v1 event");
        assert_eq!(run(&v).expect("accepted"), run(&v1("order_placed")).expect("accepted"));
    }

    #[test]
    fn escaped_strings_are_decoded() {
        let bytes = br#"{"schema_version":2,"event_id":"e-\u0031","order_id":"o-\"1\"","type":"ORDER_SHIPPED","occurred_at_ms":0,"store_id":"s","items":[{"sku":"SKU-\u0041","quantity":1}]}"#;
        let e = normalize_order(bytes, APPEND).expect("accepted");
        assert_eq!(e.event_id, "e-1");
        assert_eq!(e.order_id, "o-\"1\"");
        assert_eq!(e.lines[0].sku, "SKU-A");
    }

    #[test]
    fn missing_structure_is_invalid_field() {
        for field in ["order_id", "store", "lines"] {
            let mut v = v1("order_placed");
            v.as_object_mut().map(|o| o.remove(field));
            assert_eq!(reason(&v), RejectReason::InvalidField, "{field}");
        }
        let mut v = v1("order_placed");
        v["lines"] = json!([]);
        assert_eq!(reason(&v), RejectReason::InvalidField);
        v["lines"] = json!(["SKU-1"]);
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }

    #[test]
    fn quantity_that_is_not_a_u32_is_invalid_field() {
        for q in [json!(1.5), json!("2"), json!(4_294_967_296_u64), json!(null)] {
            let mut v = v2("ORDER_PLACED");
            v["items"][0]["quantity"] = q.clone();
            assert_eq!(reason(&v), RejectReason::InvalidField, "{q}");
        }
        for q in [json!(0), json!(-1), json!(-0.5)] {
            let mut v = v2("ORDER_PLACED");
            v["items"][0]["quantity"] = q.clone();
            assert_eq!(reason(&v), RejectReason::NonPositiveQuantity, "{q}");
        }
    }

    #[test]
    fn event_money_above_the_maximum_is_invalid_amount() {
        let mut v = v1("order_placed");
        v["lines"][0]["unit_price"] = json!("499999999999990");
        assert!(run(&v).is_ok());
        v["lines"][0]["qty"] = json!(3);
        assert_eq!(reason(&v), RejectReason::InvalidAmount);
        let mut v = v2("ORDER_PLACED");
        v["items"][0]["quantity"] = json!(u32::MAX);
        v["items"][0]["price"]["amount_minor"] = json!(i64::MAX);
        assert_eq!(reason(&v), RejectReason::InvalidAmount);
    }

    #[test]
    fn rejection_detail_names_the_field_and_cuts_long_values() {
        let mut v = v1("order_placed");
        v["event_type"] = json!("x".repeat(10_000));
        let r = run(&v).expect_err("rejected");
        assert_eq!(r.reason, RejectReason::UnknownEventType);
        assert!(r.detail.starts_with("event_type = \"xxx"));
        assert!(r.detail.len() < 80, "{}", r.detail);
    }

    #[test]
    fn inventory_snapshot_is_parsed_with_any_offset() {
        let s = normalize_inventory(br#"{"sku":"SKU-1","on_hand":120,"as_of":"2026-11-28T23:00:00+09:00"}"#)
            .expect("accepted");
        assert_eq!(s, InventorySnapshot { sku: "SKU-1".into(), on_hand: 120, as_of_ms: 1_795_874_400_000 });
    }

    #[test]
    fn inventory_snapshot_rejections() {
        let cases: [(&[u8], RejectReason); 7] = [
            (b"nope", RejectReason::NotJson),
            (br#"{"sku":"SKU-1","on_hand":1}"#, RejectReason::UnparsableTime),
            (br#"{"sku":"SKU-1","on_hand":1,"as_of":"yesterday"}"#, RejectReason::UnparsableTime),
            (br#"{"sku":"","on_hand":1,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
            (br#"{"sku":"SKU-1","on_hand":-1,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
            (br#"{"sku":"SKU-1","on_hand":1.5,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
            (br#"{"sku":"SKU-1","as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
        ];
        for (bytes, expected) in cases {
            let r = normalize_inventory(bytes).expect_err("rejected");
            assert_eq!(r.reason, expected, "{}", String::from_utf8_lossy(bytes));
        }
    }
}
