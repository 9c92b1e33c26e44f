//! The file as written: serde structs with the documented defaults. Values that need more
//! than a type to be valid (durations, names of modes and formats) stay strings here and
//! are checked by the second pass, so each wrong one is reported with every other error.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{IdlePromise, SinkFormat};
use crate::normalize::DEFAULT_MAX_IDENTIFIER_BYTES;

#[derive(Deserialize)]
pub(super) struct RawTopology {
    pub(super) name: String,
    pub(super) sources: RawSources,
    pub(super) sinks: RawSinks,
    pub(super) internal: RawInternal,
    #[serde(default)]
    pub(super) endpoints: RawEndpoints,
    #[serde(default)]
    pub(super) state: RawState,
    pub(super) windows: RawWindows,
    #[serde(default)]
    pub(super) finance: RawFinance,
    #[serde(default)]
    pub(super) rules: Vec<RawRule>,
}

#[derive(Deserialize)]
pub(super) struct RawSources {
    pub(super) orders: RawTopic,
    pub(super) inventory: RawTopic,
    #[serde(default = "default_max_identifier_bytes")]
    pub(super) max_identifier_bytes: i64,
}

fn default_max_identifier_bytes() -> i64 {
    DEFAULT_MAX_IDENTIFIER_BYTES as i64
}

#[derive(Deserialize)]
pub(super) struct RawSinks {
    pub(super) dashboard: RawTopic,
    pub(super) dead_letter: RawTopic,
    pub(super) late: RawTopic,
    pub(super) audit: RawTopic,
    pub(super) action_dead_letter: RawTopic,
    pub(super) finance_provisional: RawTopic,
    pub(super) finance_close: RawTopic,
    pub(super) finance_manifest: RawTopic,
    pub(super) dashboard_combined: RawCombinedTopic,
    pub(super) finance_provisional_combined: RawCombinedTopic,
}

#[derive(Deserialize)]
pub(super) struct RawInternal {
    pub(super) sku_repartition: RawTopic,
    pub(super) combine_repartition: RawTopic,
    #[serde(default = "default_idle_skew")]
    pub(super) idle_skew: String,
    #[serde(default = "default_idle_promise")]
    pub(super) idle_promise: String,
    #[serde(default = "default_fence_every")]
    pub(super) fence_every: String,
}

fn default_idle_promise() -> String {
    IdlePromise::default().as_str().into()
}

fn default_fence_every() -> String {
    "20ms".into()
}

fn default_idle_skew() -> String {
    "2s".into()
}

#[derive(Deserialize)]
pub(super) struct RawEndpoints {
    pub(super) action_url: Option<String>,
    pub(super) notify_url: Option<String>,
    #[serde(default = "default_endpoint_timeout")]
    pub(super) timeout: String,
    #[serde(default = "default_max_in_flight")]
    pub(super) max_in_flight: i64,
    #[serde(default = "default_trust")]
    pub(super) trust: String,
    pub(super) ca_file: Option<String>,
    pub(super) client_cert_file: Option<String>,
    pub(super) client_key_file: Option<String>,
    #[serde(default)]
    pub(super) allow_unsigned: bool,
}

/// An absent `[endpoints]` table means every field at its default (not empty strings).
impl Default for RawEndpoints {
    fn default() -> Self {
        RawEndpoints {
            action_url: None,
            notify_url: None,
            timeout: default_endpoint_timeout(),
            max_in_flight: default_max_in_flight(),
            trust: default_trust(),
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            allow_unsigned: false,
        }
    }
}

fn default_trust() -> String {
    "webpki".into()
}

fn default_endpoint_timeout() -> String {
    "5s".into()
}
fn default_max_in_flight() -> i64 {
    32
}

#[derive(Deserialize)]
pub(super) struct RawTopic {
    pub(super) topic: String,
    #[serde(default = "default_partitions")]
    pub(super) partitions: i32,
    #[serde(default)]
    pub(super) compacted: bool,
}

fn default_partitions() -> i32 {
    4
}

/// A combined sink: a topic with the format its records are written in.
#[derive(Deserialize)]
pub(super) struct RawCombinedTopic {
    pub(super) topic: String,
    #[serde(default = "default_partitions")]
    pub(super) partitions: i32,
    #[serde(default)]
    pub(super) compacted: bool,
    /// Parsed by the second pass, like a rule's mode.
    #[serde(default = "default_sink_format")]
    pub(super) format: String,
}

fn default_sink_format() -> String {
    SinkFormat::default().as_str().to_string()
}

#[derive(Deserialize)]
pub(super) struct RawState {
    #[serde(default = "default_dedup_retention")]
    pub(super) dedup_retention: String,
    #[serde(default = "default_commit_interval")]
    pub(super) commit_interval: String,
    #[serde(default = "default_commit_linger")]
    pub(super) commit_linger: String,
    #[serde(default = "default_publish_interval")]
    pub(super) publish_interval: String,
    #[serde(default = "default_max_batch")]
    pub(super) max_batch_records: i64,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            dedup_retention: default_dedup_retention(),
            commit_interval: default_commit_interval(),
            commit_linger: default_commit_linger(),
            publish_interval: default_publish_interval(),
            max_batch_records: default_max_batch(),
        }
    }
}

fn default_dedup_retention() -> String {
    "7d".into()
}
fn default_commit_interval() -> String {
    "200ms".into()
}
fn default_commit_linger() -> String {
    "2ms".into()
}
fn default_publish_interval() -> String {
    "1s".into()
}
fn default_max_batch() -> i64 {
    20_000
}

#[derive(Deserialize)]
pub(super) struct RawWindows {
    pub(super) dashboard: RawWindow,
}

#[derive(Deserialize)]
pub(super) struct RawWindow {
    pub(super) size: String,
    #[serde(default = "zero")]
    pub(super) allowed_lateness: String,
    #[serde(default = "default_grace")]
    pub(super) grace: String,
    #[serde(default = "default_retention")]
    pub(super) retention: String,
}

fn zero() -> String {
    "0s".into()
}
fn default_grace() -> String {
    "2m".into()
}
fn default_retention() -> String {
    "7h".into()
}

#[derive(Deserialize)]
pub(super) struct RawFinance {
    #[serde(default = "default_tz")]
    pub(super) time_zone: String,
}

impl Default for RawFinance {
    fn default() -> Self {
        RawFinance { time_zone: default_tz() }
    }
}

fn default_tz() -> String {
    "Asia/Tokyo".into()
}

#[derive(Deserialize)]
pub(super) struct RawRule {
    pub(super) id: String,
    pub(super) version: i64,
    /// Parsed by the second pass ([`RuleMode::from_str`](std::str::FromStr)), so a wrong
    /// mode is reported with every other error instead of ending the first pass alone.
    pub(super) mode: String,
    #[serde(default)]
    pub(super) params: BTreeMap<String, toml::Value>,
    /// `expression` for a rule declared as expressions; absent for a built-in rule.
    pub(super) kind: Option<String>,
    pub(super) trigger: Option<String>,
    pub(super) action: Option<String>,
    pub(super) when: Option<String>,
    pub(super) preceding_windows: Option<i64>,
    pub(super) evidence: Option<OrderedStrings>,
}

/// A table of strings in the order the file declares them (an expression rule's evidence is
/// written in that order; the `toml` map would sort it).
#[derive(Default)]
pub(super) struct OrderedStrings(pub(super) Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedStrings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OrderedStrings, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = OrderedStrings;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of expression strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OrderedStrings, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(OrderedStrings(out))
            }
        }
        d.deserialize_map(Entries)
    }
}
