//! The tolerant JSON layer: one pass of serde into borrowed structs whose fields accept any
//! JSON type ([`Json`], [`Obj`], [`Seq`]), so a wrong type is a value to judge, not a serde
//! error; check 1 (one JSON object, UTF-8, nesting) before anything is read.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, IgnoredAny};
use serde::{Deserialize, Deserializer};

use super::MAX_NESTING_DEPTH;
use crate::reject::{RejectReason, Rejection};

/// Check 1: one JSON object, read into `T`.
pub(super) fn parse_object<'a, T: Deserialize<'a>>(value: Option<&'a [u8]>) -> Result<T, Rejection> {
    parse_text(checked_text(value)?)
}

/// The first half of check 1: a value that is there, UTF-8 and not nested too deep.
///
/// UTF-8 is validated over the whole value first, because serde_json does not validate the
/// strings it skips; parsing then reads from a `str`, which spares serde_json validating the
/// strings it keeps.
pub(super) fn checked_text(value: Option<&[u8]>) -> Result<&str, Rejection> {
    let bytes = match value {
        None => return Err(not_json("no value (a tombstone)".into())),
        Some([]) => return Err(not_json("empty value".into())),
        Some(bytes) => bytes,
    };
    let text = simdutf8::compat::from_utf8(bytes)
        .map_err(|e| not_json(format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    if let Some(at) = too_deep(bytes) {
        return Err(not_json(format!("nested deeper than {MAX_NESTING_DEPTH} levels at byte {at}")));
    }
    Ok(text)
}

/// The second half of check 1: `text` (from [`checked_text`]) read by serde_json into `T`.
pub(super) fn parse_text<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, Rejection> {
    match serde_json::from_str::<Obj<T>>(text) {
        Ok(Obj::Ok(value)) => Ok(value),
        Ok(Obj::NotObject(kind)) => Err(not_json(format!("top level is {kind}, not an object"))),
        Err(e) => Err(not_json(e.to_string())),
    }
}

fn not_json(detail: String) -> Rejection {
    Rejection::new(RejectReason::NotJson, detail)
}

/// Where arrays and objects first nest deeper than [`MAX_NESTING_DEPTH`], if they do.
///
/// Exact for valid JSON; on invalid JSON the answer only chooses between two `not_json`
/// details. A value with no more brackets than the limit cannot nest that deep, so the
/// string-aware scan is skipped for every ordinary record.
pub(super) fn too_deep(bytes: &[u8]) -> Option<usize> {
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

/// Any JSON value, shallowly: scalars are kept, arrays and objects are skipped and only
/// their kind remembered. Integers that fit `i64` share one arm whatever the sign.
#[derive(Debug)]
pub(super) enum Json<'a> {
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
    pub(super) fn as_str(&self) -> Option<&str> {
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
pub(super) fn nullable<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Json<'a>>, D::Error> {
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
#[derive(Debug)]
pub(super) enum Obj<T> {
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
#[derive(Debug)]
pub(super) enum Seq<T> {
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
pub(super) fn required_list<T>(list: Option<Seq<T>>, name: &str) -> Result<Vec<T>, Rejection> {
    let problem = match list {
        Some(Seq::Items(items)) if !items.is_empty() => return Ok(items),
        Some(Seq::Items(_)) => "is empty",
        Some(Seq::NotArray) => "is not an array",
        None => "missing",
    };
    Err(Rejection::new(RejectReason::InvalidField, format!("{name} {problem}")))
}
