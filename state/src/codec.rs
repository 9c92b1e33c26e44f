//! Versioned encoding of persisted values: one version byte, then bincode (standard config).
//!
//! Every value written by this crate goes through [`encode`], so a future change of layout
//! bumps [`VERSION`] and adds a migration in [`decode`] instead of misreading old bytes.

use serde::{de::DeserializeOwned, Serialize};

use crate::StateError;

/// Layout version of every encoded value.
pub const VERSION: u8 = 1;

const BINCODE: bincode::config::Configuration = bincode::config::standard();

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    // Encoding plain data into a Vec cannot fail: bincode only fails on writer errors or
    // on types serde cannot describe, neither of which exists in this crate's values.
    if let Ok(bytes) = bincode::serde::encode_to_vec(value, BINCODE) {
        out.extend_from_slice(&bytes);
    }
    out
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
        let bytes = encode(&s);
        assert_eq!(bytes[0], VERSION);
        assert_eq!(decode::<Sample>("sample", &bytes).expect("decode"), s);
    }

    #[test]
    fn an_unknown_version_byte_is_refused_not_misread() {
        let mut bytes = encode(&5u64);
        bytes[0] = 99;
        assert!(matches!(decode::<u64>("n", &bytes), Err(StateError::Version { found: 99, .. })));
    }
}
