//! How a rule's actions are treated: recorded only, sent as notifications, or acted on.
//!
//! The mode is persisted on every outbox row (bincode) and published on audit records and
//! dead letters as its lowercase name. [`RuleMode`] serialises as exactly that string, so
//! rows written when the mode was a `String` decode unchanged, and the names live here
//! only: the topology file, the outbox, the audit topic and the CLI all go through
//! [`RuleMode::as_str`] and [`RuleMode::from_str`](std::str::FromStr).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleMode {
    /// Recorded and audited, never sent.
    Shadow,
    /// Sent to the notify endpoint.
    Notify,
    /// Sent to the action endpoint.
    Act,
}

impl RuleMode {
    pub const ALL: [RuleMode; 3] = [RuleMode::Shadow, RuleMode::Notify, RuleMode::Act];

    /// The name in topology files, on outbox rows and on audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleMode::Shadow => "shadow",
            RuleMode::Notify => "notify",
            RuleMode::Act => "act",
        }
    }
}

impl fmt::Display for RuleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a rule mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRuleMode(pub String);

impl fmt::Display for UnknownRuleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown mode `{}` (expected shadow | notify | act)", self.0)
    }
}

impl std::error::Error for UnknownRuleMode {}

impl FromStr for RuleMode {
    type Err = UnknownRuleMode;

    fn from_str(s: &str) -> Result<RuleMode, UnknownRuleMode> {
        RuleMode::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| UnknownRuleMode(s.to_string()))
    }
}

impl Serialize for RuleMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RuleMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RuleMode, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = RuleMode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rule mode: shadow | notify | act")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RuleMode, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BINCODE: bincode::config::Configuration = bincode::config::standard();

    /// A persisted row as it was written while the mode travelled as a `String`.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct OldRow {
        key: String,
        mode: String,
        attempts: u32,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct NewRow {
        key: String,
        mode: RuleMode,
        attempts: u32,
    }

    #[test]
    fn a_row_written_with_a_string_mode_decodes_as_the_enum_and_encodes_to_the_same_bytes() {
        for mode in RuleMode::ALL {
            let old = OldRow { key: "k".into(), mode: mode.as_str().into(), attempts: 3 };
            let bytes = bincode::serde::encode_to_vec(&old, BINCODE).expect("encode old");
            let (new, _): (NewRow, usize) = bincode::serde::decode_from_slice(&bytes, BINCODE).expect("decode new");
            assert_eq!(new, NewRow { key: "k".into(), mode, attempts: 3 });
            assert_eq!(bincode::serde::encode_to_vec(&new, BINCODE).expect("encode new"), bytes);
            let (back, _): (OldRow, usize) = bincode::serde::decode_from_slice(&bytes, BINCODE).expect("decode old");
            assert_eq!(back, old);
        }
    }

    #[test]
    fn an_unknown_persisted_or_configured_mode_is_refused_with_its_name() {
        let old = OldRow { key: "k".into(), mode: "acts".into(), attempts: 0 };
        let bytes = bincode::serde::encode_to_vec(&old, BINCODE).expect("encode");
        let err = bincode::serde::decode_from_slice::<NewRow, _>(&bytes, BINCODE).expect_err("refused");
        assert!(err.to_string().contains("unknown mode `acts`"), "{err}");
        assert_eq!("Act".parse::<RuleMode>(), Err(UnknownRuleMode("Act".into())));
    }

    #[test]
    fn the_json_form_is_the_lowercase_name() {
        assert_eq!(serde_json::to_string(&RuleMode::Notify).expect("json"), r#""notify""#);
        assert_eq!(serde_json::from_str::<RuleMode>(r#""shadow""#).expect("json"), RuleMode::Shadow);
    }
}
