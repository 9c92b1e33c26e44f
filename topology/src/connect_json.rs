//! Kafka Connect's JSON envelope for the combined rows (`format = "connect-json"` on a combined
//! sink, [`crate::config::SinkFormat`]): what Connect's `JsonConverter` with
//! `schemas.enable=true` reads, so a JDBC sink writes the rows into typed columns and upserts
//! them by primary key without a transform.
//!
//! - Key and value are both `{"schema":{…},"payload":{…}}` with a `struct` schema. The key
//!   struct holds the aggregate key's fields (window or day, store, currency); a sink with
//!   `primary.key.mode=record_key` makes them the primary key.
//! - Money (`gross`, `cancelled`, `refunded`, `net`) is Connect's `Decimal` logical type with
//!   the fixed scale [`MONEY_SCALE`] (3, the largest minor-unit exponent tidemark knows: BHD,
//!   KWD) and precision [`MONEY_PRECISION`], written as a JSON number with exactly three
//!   fraction digits (`650.000`): `JsonConverter` reads a number as an exact `BigDecimal`
//!   (as it writes them with `decimal.format=NUMERIC`), and the sink creates `numeric(38,3)`.
//!   Every amount is exact at its currency's scale, so widening it to three digits is exact.
//! - Counts and the version are `int64`, `partitions` `int32`; times and days stay the
//!   strings of the JSON format (RFC 3339 UTC to the millisecond, ISO dates), so they sort.
//! - The bytes are a pure function of the row: fields in the order of [`RowSchema::fields`],
//!   the schema the same for every record, so the same log gives byte-identical records.
//!
//! The rows are computed as in the JSON format and wrapped only when produced
//! (`kafka::sink`), so the tasks and their state do not depend on the format.

use std::str::FromStr;

use rust_decimal::Decimal;
use serde_json::{Map, Value};

/// Fraction digits of every money field.
pub const MONEY_SCALE: u32 = 3;
/// Total digits of every money field (`connect.decimal.precision`).
pub const MONEY_PRECISION: u32 = 38;
/// Connect's logical type name of a decimal.
pub const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// The Connect type of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    String,
    Int32,
    Int64,
    /// `Decimal` at [`MONEY_SCALE`]; a decimal string in the JSON row.
    Money,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub ty: FieldType,
}

const fn f(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty }
}

/// The Connect schema of one kind of combined row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSchema {
    /// The value struct's schema name.
    pub name: &'static str,
    /// The key struct's schema name.
    pub key_name: &'static str,
    /// The key's fields, in order; each is a string field of the value too.
    pub key: &'static [&'static str],
    /// Every field of the value, in order: the JSON format's order (docs/formats.md).
    pub fields: &'static [Field],
}

use FieldType::{Int32, Int64, Money, String as Text};

/// A combined dashboard row ([`crate::combine::DashboardCombined`]).
pub const DASHBOARD_COMBINED: RowSchema = RowSchema {
    name: "tidemark.DashboardCombined",
    key_name: "tidemark.DashboardCombinedKey",
    key: &["window_start", "store", "currency"],
    fields: &[
        f("window_start", Text),
        f("window_end", Text),
        f("store", Text),
        f("currency", Text),
        f("partitions", Int32),
        f("orders", Int64),
        f("units", Int64),
        f("gross", Money),
        f("cancelled", Money),
        f("refunded", Money),
        f("net", Money),
        f("version", Int64),
        f("as_of", Text),
    ],
};

/// A combined provisional finance row ([`crate::combine::FinanceCombined`]).
pub const FINANCE_COMBINED: RowSchema = RowSchema {
    name: "tidemark.FinanceProvisionalCombined",
    key_name: "tidemark.FinanceProvisionalCombinedKey",
    key: &["day", "store", "currency"],
    fields: &[
        f("day", Text),
        f("store", Text),
        f("currency", Text),
        f("partitions", Int32),
        f("orders", Int64),
        f("events", Int64),
        f("gross", Money),
        f("cancelled", Money),
        f("refunded", Money),
        f("net", Money),
        f("version", Int64),
        f("as_of", Text),
    ],
};

/// A row that does not fit its schema: a change to the row type without one here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("{schema}: the row is not a JSON object ({detail})")]
    NotAnObject { schema: &'static str, detail: String },
    #[error("{schema}: field `{field}` is missing")]
    Missing { schema: &'static str, field: &'static str },
    #[error("{schema}: field `{field}` is not in the Connect schema")]
    Unknown { schema: &'static str, field: String },
    #[error("{schema}: field `{field}`: {problem}")]
    Bad { schema: &'static str, field: &'static str, problem: String },
}

/// A combined row's key and value in Connect's envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl RowSchema {
    /// Wraps one row, as the JSON format writes it, into its key and value envelopes.
    pub fn wrap(&self, row: &[u8]) -> Result<Envelope, EnvelopeError> {
        let not_object = |detail: String| EnvelopeError::NotAnObject { schema: self.name, detail };
        let row: Map<String, Value> = serde_json::from_slice(row).map_err(|e| not_object(e.to_string()))?;
        if let Some(extra) = row.keys().find(|k| !self.fields.iter().any(|f| f.name == k.as_str())) {
            return Err(EnvelopeError::Unknown { schema: self.name, field: extra.clone() });
        }
        let mut payload = Vec::with_capacity(self.fields.len());
        for field in self.fields {
            let v = row.get(field.name).ok_or(EnvelopeError::Missing { schema: self.name, field: field.name })?;
            payload.push((field.name, self.payload_value(field, v)?));
        }
        let key_fields: Vec<Field> = self.key.iter().map(|name| f(name, Text)).collect();
        let key_payload: Vec<(&str, String)> =
            payload.iter().filter(|(name, _)| self.key.contains(name)).map(|(name, v)| (*name, v.clone())).collect();
        Ok(Envelope {
            key: envelope(self.key_name, &key_fields, &key_payload),
            value: envelope(self.name, self.fields, &payload),
        })
    }

    /// One field's JSON text in the payload.
    fn payload_value(&self, field: &Field, v: &Value) -> Result<String, EnvelopeError> {
        let bad = |problem: String| EnvelopeError::Bad { schema: self.name, field: field.name, problem };
        match field.ty {
            Text => v.as_str().map(json_string).ok_or_else(|| bad(format!("expected a string, found {v}"))),
            Int32 => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(|n| n.to_string())
                .ok_or_else(|| bad(format!("expected a 32-bit integer, found {v}"))),
            Int64 => {
                v.as_i64().map(|n| n.to_string()).ok_or_else(|| bad(format!("expected a 64-bit integer, found {v}")))
            }
            Money => {
                let text = v.as_str().ok_or_else(|| bad(format!("expected a decimal string, found {v}")))?;
                let d = Decimal::from_str(text).map_err(|e| bad(format!("`{text}` is not a decimal ({e})")))?;
                money(d).ok_or_else(|| bad(format!("`{text}` does not fit scale {MONEY_SCALE}")))
            }
        }
    }
}

/// `d` as a JSON number with exactly [`MONEY_SCALE`] fraction digits; `None` when that would
/// round it or does not fit.
fn money(d: Decimal) -> Option<String> {
    if d.scale() > MONEY_SCALE && d.normalize().scale() > MONEY_SCALE {
        return None;
    }
    let mut wide = d;
    wide.rescale(MONEY_SCALE);
    (wide.scale() == MONEY_SCALE && wide == d).then(|| wide.to_string())
}

fn json_string(s: &str) -> String {
    // Serialising a string cannot fail: it needs no map keys and no I/O.
    serde_json::to_string(s).unwrap_or_default()
}

/// `{"schema":<struct schema>,"payload":{…}}`; payload values are JSON texts already.
fn envelope(name: &str, fields: &[Field], payload: &[(&str, String)]) -> Vec<u8> {
    let mut out = String::with_capacity(256 + 96 * fields.len());
    out.push_str("{\"schema\":");
    struct_schema(&mut out, name, fields);
    out.push_str(",\"payload\":{");
    for (i, (field, value)) in payload.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_string(field));
        out.push(':');
        out.push_str(value);
    }
    out.push_str("}}");
    out.into_bytes()
}

fn struct_schema(out: &mut String, name: &str, fields: &[Field]) {
    out.push_str("{\"type\":\"struct\",\"name\":");
    out.push_str(&json_string(name));
    out.push_str(",\"version\":1,\"optional\":false,\"fields\":[");
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"field\":");
        out.push_str(&json_string(field.name));
        out.push_str(match field.ty {
            Text => ",\"type\":\"string\",\"optional\":false}",
            Int32 => ",\"type\":\"int32\",\"optional\":false}",
            Int64 => ",\"type\":\"int64\",\"optional\":false}",
            Money => "",
        });
        if field.ty == Money {
            out.push_str(&format!(
                ",\"type\":\"bytes\",\"optional\":false,\"name\":\"{DECIMAL}\",\"version\":1,\"parameters\":\
                 {{\"scale\":\"{MONEY_SCALE}\",\"connect.decimal.precision\":\"{MONEY_PRECISION}\"}}}}"
            ));
        }
    }
    out.push_str("]}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::combine::{DashboardCombined, FinanceCombined};
    use crate::figures::Figures;

    fn dashboard_row(gross: &str, refunded: &str) -> DashboardCombined {
        let gross: Decimal = gross.parse().expect("decimal");
        let refunded: Decimal = refunded.parse().expect("decimal");
        DashboardCombined {
            window_start: "2026-11-28T14:59:00.000Z".into(),
            window_end: "2026-11-28T15:00:00.000Z".into(),
            store: "tokyo-01".into(),
            currency: "JPY".into(),
            partitions: 2,
            figures: Figures::new(5, 10, gross, Decimal::ZERO, refunded),
            net: gross - refunded,
            version: 6,
            as_of: "2026-11-28T14:59:03.000Z".into(),
        }
    }

    fn wrap_dashboard(row: &DashboardCombined) -> Envelope {
        DASHBOARD_COMBINED.wrap(&serde_json::to_vec(row).expect("json")).expect("wraps")
    }

    #[test]
    fn a_combined_dashboard_row_becomes_a_key_struct_and_a_value_struct_with_decimal_money() {
        let e = wrap_dashboard(&dashboard_row("650", "0"));
        assert_eq!(
            String::from_utf8(e.key).expect("utf8"),
            r#"{"schema":{"type":"struct","name":"tidemark.DashboardCombinedKey","version":1,"optional":false,"fields":[{"field":"window_start","type":"string","optional":false},{"field":"store","type":"string","optional":false},{"field":"currency","type":"string","optional":false}]},"payload":{"window_start":"2026-11-28T14:59:00.000Z","store":"tokyo-01","currency":"JPY"}}"#
        );
        let money = |f: &str| {
            format!(
                r#"{{"field":"{f}","type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{{"scale":"3","connect.decimal.precision":"38"}}}}"#
            )
        };
        let text = |f: &str| format!(r#"{{"field":"{f}","type":"string","optional":false}}"#);
        let int = |f: &str, t: &str| format!(r#"{{"field":"{f}","type":"{t}","optional":false}}"#);
        let fields = [
            text("window_start"),
            text("window_end"),
            text("store"),
            text("currency"),
            int("partitions", "int32"),
            int("orders", "int64"),
            int("units", "int64"),
            money("gross"),
            money("cancelled"),
            money("refunded"),
            money("net"),
            int("version", "int64"),
            text("as_of"),
        ]
        .join(",");
        let want = format!(
            r#"{{"schema":{{"type":"struct","name":"tidemark.DashboardCombined","version":1,"optional":false,"fields":[{fields}]}},"payload":{{"window_start":"2026-11-28T14:59:00.000Z","window_end":"2026-11-28T15:00:00.000Z","store":"tokyo-01","currency":"JPY","partitions":2,"orders":5,"units":10,"gross":650.000,"cancelled":0.000,"refunded":0.000,"net":650.000,"version":6,"as_of":"2026-11-28T14:59:03.000Z"}}}}"#
        );
        assert_eq!(String::from_utf8(e.value).expect("utf8"), want);
    }

    #[test]
    fn money_keeps_every_digit_at_three_fraction_digits_whatever_the_currency_scale() {
        for (amount, written) in [
            ("1234.5", "1234.500"),
            ("0.125", "0.125"),
            ("-19.99", "-19.990"),
            ("99999999999999999999999.999", "99999999999999999999999.999"),
        ] {
            let e = wrap_dashboard(&dashboard_row(amount, "0"));
            let v: Value = serde_json::from_slice(&e.value).expect("json");
            let payload = String::from_utf8(e.value).expect("utf8");
            assert!(payload.contains(&format!("\"gross\":{written},")), "{amount}: {payload}");
            assert!(v["payload"]["gross"].is_number(), "a JSON number, not a string");
        }
    }

    #[test]
    fn an_amount_finer_than_three_digits_is_refused_rather_than_rounded() {
        let mut row = serde_json::to_value(dashboard_row("1", "0")).expect("json");
        row["gross"] = Value::from("0.0001");
        let err = DASHBOARD_COMBINED.wrap(&serde_json::to_vec(&row).expect("json")).expect_err("refused");
        assert!(matches!(err, EnvelopeError::Bad { field: "gross", .. }), "{err}");
        assert_eq!(money("2.5000".parse().expect("d")), Some("2.500".into()), "trailing zeros are not digits lost");
    }

    #[test]
    fn a_field_the_schema_does_not_know_or_a_missing_one_is_an_error_not_a_dropped_column() {
        let mut row = serde_json::to_value(dashboard_row("1", "0")).expect("json");
        row["discount"] = Value::from("1");
        let err = DASHBOARD_COMBINED.wrap(&serde_json::to_vec(&row).expect("json")).expect_err("unknown");
        assert_eq!(err, EnvelopeError::Unknown { schema: DASHBOARD_COMBINED.name, field: "discount".into() });
        let mut row = serde_json::to_value(dashboard_row("1", "0")).expect("json");
        row.as_object_mut().expect("object").remove("units");
        let err = DASHBOARD_COMBINED.wrap(&serde_json::to_vec(&row).expect("json")).expect_err("missing");
        assert_eq!(err, EnvelopeError::Missing { schema: DASHBOARD_COMBINED.name, field: "units" });
    }

    fn finance_row() -> FinanceCombined {
        FinanceCombined {
            day: "2026-11-29".into(),
            store: "tokyo-01".into(),
            currency: "KWD".into(),
            partitions: 1,
            figures: Figures::new(1, 2, "1.250".parse().expect("d"), Decimal::ZERO, Decimal::ZERO),
            net: "1.250".parse().expect("d"),
            version: 2,
            as_of: "2026-11-29T00:00:01.000Z".into(),
        }
    }

    #[test]
    fn the_schemas_name_every_field_of_their_rows_in_the_rows_own_order() {
        let rows = [
            (DASHBOARD_COMBINED, serde_json::to_string(&dashboard_row("1", "0")).expect("json")),
            (FINANCE_COMBINED, serde_json::to_string(&finance_row()).expect("json")),
        ];
        for (schema, row) in rows {
            let names: Vec<&str> = schema.fields.iter().map(|f| f.name).collect();
            let keys: std::collections::BTreeSet<String> =
                serde_json::from_str::<Map<String, Value>>(&row).expect("object").keys().cloned().collect();
            let fields: std::collections::BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
            assert_eq!(keys, fields, "{}: the schema names exactly the row's fields", schema.name);
            let at: Vec<usize> = names.iter().map(|n| row.find(&format!("\"{n}\":")).expect("field")).collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{}: fields in the JSON format's order: {row}", schema.name);
            assert!(schema.key.iter().all(|k| names.contains(k)), "{}: key fields are value fields", schema.name);
            let once = schema.wrap(row.as_bytes()).expect("wraps");
            assert_eq!(schema.wrap(row.as_bytes()).expect("wraps"), once, "the same row gives the same bytes");
        }
    }
}
