//! How the records of a combined sink are written (`format` of `sinks.dashboard_combined` and
//! `sinks.finance_provisional_combined`): tidemark's schemaless JSON, or Kafka Connect's JSON
//! envelope ([`crate::connect_json`]). The rows themselves are the same either way; only
//! their bytes on the topic differ, chosen when they are produced.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SinkFormat {
    /// Key `window_start|store|currency` (UTF-8), value the row's JSON (docs/formats.md).
    #[default]
    Json,
    /// Key and value in Kafka Connect's JsonConverter envelope (`{"schema":…,"payload":…}`),
    /// both structs, money as Connect decimals: what a JDBC sink reads without a transform.
    ConnectJson,
}

impl SinkFormat {
    pub const ALL: [SinkFormat; 2] = [SinkFormat::Json, SinkFormat::ConnectJson];

    /// The name in topology files.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkFormat::Json => "json",
            SinkFormat::ConnectJson => "connect-json",
        }
    }
}

impl fmt::Display for SinkFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a sink format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownSinkFormat(pub String);

impl fmt::Display for UnknownSinkFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown format `{}` (expected json | connect-json)", self.0)
    }
}

impl std::error::Error for UnknownSinkFormat {}

impl FromStr for SinkFormat {
    type Err = UnknownSinkFormat;

    fn from_str(s: &str) -> Result<SinkFormat, UnknownSinkFormat> {
        SinkFormat::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| UnknownSinkFormat(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_reads_back_from_its_name_and_nothing_else_is_a_format() {
        for f in SinkFormat::ALL {
            assert_eq!(f.as_str().parse::<SinkFormat>(), Ok(f));
        }
        assert_eq!("avro".parse::<SinkFormat>(), Err(UnknownSinkFormat("avro".into())));
        assert_eq!(SinkFormat::default(), SinkFormat::Json);
    }
}
