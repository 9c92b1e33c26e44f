//! Action intents: what a rule decided, its idempotency key, and the canonical POST body.
//!
//! # Keys
//!
//! `{rule_id}:v{version}:{sku}:snapshot:{as_of}` for the stock rules (`oversell`,
//! `low_stock`, `per_snapshot` expression rules) and
//! `{rule_id}:v{version}:{sku}:window:{window_start}` for `velocity_spike` and `per_window`
//! expression rules,
//! times in RFC 3339 UTC with milliseconds. The time suffix has a fixed shape, so a SKU
//! containing `:` cannot make two keys collide.
//!
//! # Payload
//!
//! [`ActionIntent::payload_json`] is the body the dispatcher POSTs. Fields appear in this
//! order; absent evidence fields are omitted, never `null`:
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `action_id` | string | the idempotency key (also sent as `Idempotency-Key`) |
//! | `action` | string | `stop_sale` \| `replenish` \| `notify` |
//! | `rule` | object | `{"id": string, "version": integer}` |
//! | `sku` | string | the SKU the action concerns |
//! | `trigger` | object | `{"type":"snapshot","as_of":time}` or `{"type":"window","start":time,"end":time}` |
//! | `evidence` | object | see below |
//! | `created_at` | time | event time of the input that fired the rule (never the wall clock) |
//!
//! Evidence, in this order: `on_hand`, `as_of` (time), `units_placed_since`,
//! `units_cancelled_since`, `available`, `threshold`, `replenish_to`, `suggested_quantity`
//! (stock rules); `window_units`, `baseline_windows`, `baseline_units`, `baseline_mean`
//! (decimal string, 2 places), `factor` (decimal string), `min_units` (velocity). Counts are
//! integers. An expression rule's evidence is its named values instead, in the order the
//! topology declares them (types in [`crate::expr::NamedValue`], docs/rules.md). The body carries neither the rule mode nor any broker time, so it is identical
//! across replays and whatever mode the rule runs in.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::config::{Rule, RuleKind, RuleMode};
use crate::dashboard::rfc3339_ms;
use crate::expr::NamedValue;

/// One action a rule decided on. Persisted in the outbox, so every field encodes with a
/// non-self-describing format (bincode).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ActionIntent {
    /// Idempotency key, a pure function of (rule id, rule version, sku, snapshot or window).
    pub key: String,
    pub rule_id: String,
    pub rule_version: u32,
    /// How the dispatcher treats the intent; persisted as its name, see [`RuleMode`].
    pub mode: RuleMode,
    /// `stop_sale` | `replenish` | `notify`.
    pub action: String,
    pub sku: String,
    pub trigger: Trigger,
    pub evidence: Evidence,
    /// Event time of the input that fired the rule (a snapshot's `as_of` for snapshots).
    pub created_at_ms: i64,
    /// Broker append time of that input, for latency measurement only: not in key or payload.
    pub source_append_ms: i64,
}

/// What an intent is "once per": one snapshot of the SKU, or one event-time window.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Snapshot {
        as_of_ms: i64,
    },
    /// Half-open `[start_ms, end_ms)`.
    Window {
        start_ms: i64,
        end_ms: i64,
    },
}

/// The numbers a rule decided on; each rule fills the fields that apply to it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    pub on_hand: Option<i64>,
    pub as_of_ms: Option<i64>,
    pub units_placed_since: Option<u64>,
    pub units_cancelled_since: Option<u64>,
    pub available: Option<i64>,
    pub threshold: Option<i64>,
    pub replenish_to: Option<i64>,
    pub suggested_quantity: Option<i64>,
    pub window_units: Option<u64>,
    pub baseline_windows: Option<u32>,
    pub baseline_units: Option<u64>,
    #[serde(with = "rust_decimal::serde::str_option")]
    pub baseline_mean: Option<Decimal>,
    #[serde(with = "rust_decimal::serde::str_option")]
    pub factor: Option<Decimal>,
    pub min_units: Option<u64>,
    /// An expression rule's evidence, name by name in declaration order, written after the
    /// fields above (which an expression rule leaves empty).
    #[serde(default)]
    pub named: Vec<(String, NamedValue)>,
}

impl ActionIntent {
    /// The canonical POST body (see the module documentation): equal intents give equal bytes.
    pub fn payload_json(&self) -> Vec<u8> {
        let e = &self.evidence;
        let payload = Payload {
            action_id: &self.key,
            action: &self.action,
            rule: PayloadRule { id: &self.rule_id, version: self.rule_version },
            sku: &self.sku,
            trigger: match self.trigger {
                Trigger::Snapshot { as_of_ms } => PayloadTrigger::Snapshot { as_of: rfc3339_ms(as_of_ms) },
                Trigger::Window { start_ms, end_ms } => {
                    PayloadTrigger::Window { start: rfc3339_ms(start_ms), end: rfc3339_ms(end_ms) }
                }
            },
            evidence: PayloadEvidence {
                on_hand: e.on_hand,
                as_of: e.as_of_ms.map(rfc3339_ms),
                units_placed_since: e.units_placed_since,
                units_cancelled_since: e.units_cancelled_since,
                available: e.available,
                threshold: e.threshold,
                replenish_to: e.replenish_to,
                suggested_quantity: e.suggested_quantity,
                window_units: e.window_units,
                baseline_windows: e.baseline_windows,
                baseline_units: e.baseline_units,
                baseline_mean: e.baseline_mean.map(|d| d.to_string()),
                factor: e.factor.map(|d| d.to_string()),
                min_units: e.min_units,
                named: Named(&e.named),
            },
            created_at: rfc3339_ms(self.created_at_ms),
        };
        // A struct of strings and integers always serialises.
        serde_json::to_vec(&payload).unwrap_or_default()
    }
}

#[derive(Serialize)]
struct Payload<'a> {
    action_id: &'a str,
    action: &'a str,
    rule: PayloadRule<'a>,
    sku: &'a str,
    trigger: PayloadTrigger,
    evidence: PayloadEvidence<'a>,
    created_at: String,
}

#[derive(Serialize)]
struct PayloadRule<'a> {
    id: &'a str,
    version: u32,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum PayloadTrigger {
    Snapshot { as_of: String },
    Window { start: String, end: String },
}

#[derive(Serialize)]
struct PayloadEvidence<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    on_hand: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    as_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    units_placed_since: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    units_cancelled_since: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    threshold: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replenish_to: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suggested_quantity: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_units: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_windows: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_units: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_mean: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    factor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_units: Option<u64>,
    #[serde(flatten)]
    named: Named<'a>,
}

/// Named evidence as further fields of the evidence object, each in its payload form.
struct Named<'a>(&'a [(String, NamedValue)]);

impl Serialize for Named<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, &InPayload(value))?;
        }
        map.end()
    }
}

struct InPayload<'a>(&'a NamedValue);

impl Serialize for InPayload<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_payload(s)
    }
}

/// The action a rule kind asks for.
pub fn action_str(kind: &RuleKind) -> &'static str {
    match kind {
        RuleKind::Oversell => "stop_sale",
        RuleKind::LowStock { .. } => "replenish",
        RuleKind::VelocitySpike { .. } => "notify",
        RuleKind::Expression(x) => x.action.as_str(),
    }
}

/// The idempotency key of `rule` for `sku` and `trigger` (format in the module documentation).
pub fn key(rule: &Rule, sku: &str, trigger: Trigger) -> String {
    let (what, at_ms) = match trigger {
        Trigger::Snapshot { as_of_ms } => ("snapshot", as_of_ms),
        Trigger::Window { start_ms, .. } => ("window", start_ms),
    };
    format!("{}:v{}:{}:{}:{}", rule.id, rule.version, sku, what, rfc3339_ms(at_ms))
}
