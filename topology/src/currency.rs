//! ISO 4217 currencies known to tidemark and their minor-unit exponents.
//!
//! The set is closed on purpose: an amount in a currency we do not know the exponent of
//! cannot be converted between minor and major units exactly, so such events are rejected
//! (`unknown_currency`) instead of being guessed at.

use std::fmt;

use rust_decimal::Decimal;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A known ISO 4217 currency. Serialised as its code (`"JPY"`).
///
/// Ordering is by code, so maps keyed by currency iterate in a stable, readable order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    /// Upper-case ASCII; byte order is code order.
    code: [u8; 3],
    exponent: u8,
}

/// Known currencies, sorted by code.
const TABLE: [Currency; 20] = [
    c("AUD", 2),
    c("BHD", 3),
    c("BRL", 2),
    c("CAD", 2),
    c("CHF", 2),
    c("CNY", 2),
    c("DKK", 2),
    c("EUR", 2),
    c("GBP", 2),
    c("HKD", 2),
    c("INR", 2),
    c("JPY", 0),
    c("KRW", 0),
    c("KWD", 3),
    c("MXN", 2),
    c("NOK", 2),
    c("NZD", 2),
    c("SEK", 2),
    c("SGD", 2),
    c("USD", 2),
];

const fn c(code: &str, exponent: u8) -> Currency {
    let b = code.as_bytes();
    Currency { code: [b[0], b[1], b[2]], exponent }
}

impl Currency {
    /// Looks up an exact upper-case ISO 4217 code; `None` for anything not in the table.
    pub fn from_code(code: &str) -> Option<Currency> {
        // Fixed-size array equality compiles to integer compares, unlike `str` ordering,
        // which calls `memcmp`; this runs for every price of every v2 event.
        let code: [u8; 3] = code.as_bytes().try_into().ok()?;
        TABLE.iter().find(|known| known.code == code).copied()
    }

    /// Every currency tidemark knows, sorted by code.
    pub fn all() -> &'static [Currency] {
        &TABLE
    }

    pub fn code(&self) -> &str {
        // Always ASCII: every value comes from `TABLE`.
        std::str::from_utf8(&self.code).unwrap_or("???")
    }

    /// Number of fraction digits of the major unit (JPY 0, USD 2, KWD 3).
    pub fn exponent(&self) -> u32 {
        u32::from(self.exponent)
    }

    /// Converts an integer amount of minor units to major units at canonical scale.
    pub fn from_minor(&self, minor: i64) -> Decimal {
        Decimal::new(minor, self.exponent())
    }

    /// Parses a plain decimal string in major units (`-?[0-9]+(\.[0-9]+)?`) into canonical
    /// scale.
    ///
    /// Returns `None` for exponents, signs other than a leading `-`, whitespace, or more
    /// fraction digits than the currency has: `"19.800"` USD is refused rather than
    /// silently accepted, because a producer sending sub-minor precision is confused about
    /// units and rounding would hide it.
    pub fn parse_major(&self, s: &str) -> Option<Decimal> {
        let (negative, unsigned) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = match unsigned.split_once('.') {
            Some((int, frac)) if !frac.is_empty() => (int, frac),
            Some(_) => return None,
            None => (unsigned, ""),
        };
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        let frac_digits = u32::try_from(frac.len()).ok()?;
        if frac_digits > self.exponent() {
            return None;
        }
        let mut mantissa = if int.len() + frac.len() <= 18 {
            // Cannot overflow: 10^18 < 2^63. The common case, without 128-bit arithmetic.
            i128::from(int.bytes().chain(frac.bytes()).fold(0_i64, |m, b| m * 10 + i64::from(b - b'0')))
        } else {
            let mut m: i128 = 0;
            for b in int.bytes().chain(frac.bytes()) {
                m = m.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
            }
            m
        };
        mantissa = mantissa.checked_mul(10_i128.pow(self.exponent() - frac_digits))?;
        if negative {
            mantissa = -mantissa;
        }
        Decimal::try_from_i128_with_scale(mantissa, self.exponent()).ok()
    }

    /// Rescales to exactly `exponent` fraction digits, so equal amounts serialise equally
    /// (`19.8` and `19.80` would otherwise differ byte-wise in outputs and checksums).
    /// Extra digits are rounded half away from zero.
    pub fn canonical(&self, d: Decimal) -> Decimal {
        let mut d = d;
        d.rescale(self.exponent());
        d
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.code())
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CodeVisitor;
        impl de::Visitor<'_> for CodeVisitor {
            type Value = Currency;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a known ISO 4217 currency code")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Currency, E> {
                Currency::from_code(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        deserializer.deserialize_str(CodeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn cur(code: &str) -> Currency {
        Currency::from_code(code).expect("known currency")
    }

    fn dec(s: &str) -> Decimal {
        Decimal::from_str(s).expect("decimal literal")
    }

    #[test]
    fn table_is_sorted_unique_upper_case_ascii() {
        assert!(TABLE.windows(2).all(|w| w[0].code < w[1].code));
        for known in TABLE {
            assert!(known.code.iter().all(|b| b.is_ascii_uppercase()));
            assert_eq!(Currency::from_code(known.code()), Some(known));
            assert_eq!(known.code().len(), 3);
        }
    }

    #[test]
    fn exponents_follow_iso_4217() {
        for (code, exp) in [("JPY", 0), ("KRW", 0), ("USD", 2), ("EUR", 2), ("GBP", 2), ("KWD", 3), ("BHD", 3)] {
            assert_eq!(cur(code).exponent(), exp, "{code}");
        }
    }

    #[test]
    fn lookup_is_exact_and_case_sensitive() {
        assert_eq!(Currency::from_code("usd"), None);
        assert_eq!(Currency::from_code(" USD"), None);
        assert_eq!(Currency::from_code("XYZ"), None);
        assert_eq!(Currency::from_code(""), None);
        assert_eq!(cur("USD").code(), "USD");
    }

    #[test]
    fn from_minor_places_the_decimal_point_by_exponent() {
        assert_eq!(cur("USD").from_minor(198_000).to_string(), "1980.00");
        assert_eq!(cur("JPY").from_minor(1980).to_string(), "1980");
        assert_eq!(cur("KWD").from_minor(1).to_string(), "0.001");
        assert_eq!(cur("USD").from_minor(-5).to_string(), "-0.05");
    }

    #[test]
    fn parse_major_pads_to_canonical_scale() {
        assert_eq!(cur("USD").parse_major("19.8").map(|d| d.to_string()), Some("19.80".into()));
        assert_eq!(cur("USD").parse_major("7").map(|d| d.to_string()), Some("7.00".into()));
        assert_eq!(cur("JPY").parse_major("1980").map(|d| d.to_string()), Some("1980".into()));
        assert_eq!(cur("USD").parse_major("-0.5"), Some(dec("-0.50")));
        assert_eq!(cur("USD").parse_major("007.10"), Some(dec("7.10")));
    }

    #[test]
    fn parse_major_refuses_more_fraction_digits_than_the_currency_has() {
        assert_eq!(cur("JPY").parse_major("1980.0"), None);
        assert_eq!(cur("USD").parse_major("19.800"), None);
        assert_eq!(cur("KWD").parse_major("1.0001"), None);
        assert!(cur("KWD").parse_major("1.001").is_some());
    }

    #[test]
    fn parse_major_refuses_anything_but_a_plain_decimal() {
        for s in ["", "-", ".", "1.", ".5", "+1", "1e3", " 1", "1 ", "1,000", "0x10", "NaN", "--1", "1.-2"] {
            assert_eq!(cur("USD").parse_major(s), None, "{s:?}");
        }
    }

    #[test]
    fn parse_major_refuses_values_beyond_decimal_range_instead_of_panicking() {
        assert_eq!(cur("USD").parse_major(&"9".repeat(40)), None);
        assert_eq!(cur("USD").parse_major(&"9".repeat(28)), None);
    }

    #[test]
    fn canonical_rescales_up_and_rounds_down() {
        assert_eq!(cur("USD").canonical(dec("3")).to_string(), "3.00");
        assert_eq!(cur("USD").canonical(dec("3.005")).to_string(), "3.01");
        assert_eq!(cur("JPY").canonical(dec("10.00")).to_string(), "10");
    }

    #[test]
    fn serialises_as_the_bare_code_and_round_trips() {
        let json = serde_json::to_string(&cur("JPY")).expect("serialise");
        assert_eq!(json, "\"JPY\"");
        let back: Currency = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, cur("JPY"));
        assert!(serde_json::from_str::<Currency>("\"XYZ\"").is_err());
    }

    #[test]
    fn ordering_is_by_code() {
        assert!(cur("EUR") < cur("JPY"));
        assert!(cur("JPY") < cur("USD"));
    }
}
