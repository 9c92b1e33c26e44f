//! Versioned encoding of persisted values: one version byte, then bincode (standard config).
//!
//! Every value written by this crate goes through [`encode`], so a future change of layout
//! bumps [`VERSION`] and adds a migration in [`decode`] instead of misreading old bytes.
//!
//! Encoding can fail: bincode is not self-describing, so a serde shape it cannot write (a
//! map or sequence of unknown length, e.g. `#[serde(flatten)]`) is an error. [`encode`]
//! returns it; a lone version byte would decode as garbage or fail on restore, far from
//! the change that caused it.

use serde::{de::DeserializeOwned, Serialize};

use crate::StateError;

/// Layout version of every encoded value.
pub const VERSION: u8 = 1;

const BINCODE: bincode::config::Configuration = bincode::config::standard();

/// The version byte followed by the bincode encoding of `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StateError> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    bincode::serde::encode_into_std_write(value, &mut out, BINCODE)
        .map_err(|e| StateError::Encode { what: std::any::type_name::<T>(), detail: e.to_string() })?;
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, StateError> {
    match bytes.split_first() {
        Some((&VERSION, rest)) => bincode::serde::decode_from_slice(rest, BINCODE)
            .map(|(v, _)| v)
            .map_err(|e| StateError::Decode { what, detail: e.to_string() }),
        Some((&found, _)) => Err(StateError::Version { what, found, expected: VERSION }),
        None => Err(StateError::Decode { what, detail: "empty value".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Sample {
        // Decimals in persisted values must use the string form: bincode is not self-describing.
        #[serde(with = "rust_decimal::serde::str")]
        amount: Decimal,
        n: u64,
        name: String,
    }

    #[test]
    fn decimals_round_trip_through_the_versioned_encoding() {
        let s = Sample { amount: Decimal::new(123_456, 2), n: 7, name: "x".into() };
        let bytes = encode(&s).expect("encode");
        assert_eq!(bytes[0], VERSION);
        assert_eq!(decode::<Sample>("sample", &bytes).expect("decode"), s);
    }

    #[test]
    fn an_unknown_version_byte_is_refused_not_misread() {
        let mut bytes = encode(&5u64).expect("encode");
        bytes[0] = 99;
        assert!(matches!(decode::<u64>("n", &bytes), Err(StateError::Version { found: 99, .. })));
    }

    /// A shape bincode cannot write: a sequence whose length serde does not know up front.
    struct UnsizedSeq;

    impl serde::Serialize for UnsizedSeq {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(None)?;
            seq.serialize_element(&1u8)?;
            seq.end()
        }
    }

    #[test]
    fn a_value_bincode_cannot_write_is_an_error_not_a_lone_version_byte() {
        match encode(&UnsizedSeq) {
            Err(StateError::Encode { what, .. }) => assert!(what.ends_with("UnsizedSeq"), "{what}"),
            other => panic!("expected an encode error, got {other:?}"),
        }
    }
}
