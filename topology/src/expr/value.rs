//! Run-time values, and the owned form an action's evidence keeps.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize, Serializer};

use crate::dashboard::rfc3339_ms;

/// A value during evaluation; strings borrow from the expression or the SKU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Int(i64),
    Decimal(Decimal),
    Bool(bool),
    Str(&'a str),
    /// Milliseconds since the Unix epoch, UTC.
    Time(i64),
}

impl Value<'_> {
    pub fn to_named(self) -> NamedValue {
        match self {
            Value::Int(i) => NamedValue::Int(i),
            Value::Decimal(d) => NamedValue::Decimal(d),
            Value::Bool(b) => NamedValue::Bool(b),
            Value::Str(s) => NamedValue::Str(s.to_string()),
            Value::Time(t) => NamedValue::Time(t),
        }
    }
}

/// A value in an action's evidence. In the payload: an int is a JSON integer, a decimal a
/// JSON string (as `factor` is), a bool a JSON boolean, a string a string, a time an
/// RFC 3339 UTC string with milliseconds (as `as_of` is). Persisted forms (bincode, JSON)
/// use the derived tagged encoding; [`NamedValue::serialize_payload`] writes the payload form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum NamedValue {
    Int(i64),
    Decimal(#[serde(with = "rust_decimal::serde::str")] Decimal),
    Bool(bool),
    Str(String),
    Time(i64),
}

impl NamedValue {
    pub fn serialize_payload<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NamedValue::Int(i) => s.serialize_i64(*i),
            NamedValue::Decimal(d) => s.serialize_str(&d.to_string()),
            NamedValue::Bool(b) => s.serialize_bool(*b),
            NamedValue::Str(v) => s.serialize_str(v),
            NamedValue::Time(t) => s.serialize_str(&rfc3339_ms(*t)),
        }
    }
}
