//! The topology file: a TOML document naming sources, sinks, state, windows and rules.
//!
//! Loading happens in two passes, as a compiler would: the text is read into raw structs
//! (syntax and type errors carry line and column; every unknown key is collected), then the
//! raw structs are checked as a whole and compiled into [`Topology`]. All errors of a pass
//! are reported together with the path of the key they concern.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::normalize::{NormalizeLimits, DEFAULT_MAX_IDENTIFIER_BYTES};
use crate::window::WindowPolicy;

mod idle_promise;
mod rule_mode;
mod sink_format;
pub use idle_promise::{IdlePromise, UnknownIdlePromise};
pub use rule_mode::{RuleMode, UnknownRuleMode};
pub use sink_format::{SinkFormat, UnknownSinkFormat};

/// Largest `sources.max_identifier_bytes` accepted: a sku travels in the action key, an HTTP
/// header, and servers commonly refuse header lines beyond 8 KiB.
pub const MAX_IDENTIFIER_BYTES_LIMIT: usize = 4096;

/// A validated topology, with durations in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub name: String,
    pub orders: TopicSpec,
    pub inventory: TopicSpec,
    /// What normalisation of both inputs accepts (`[sources]`); pass it to the
    /// `normalize::*_with` functions.
    pub normalize: NormalizeLimits,
    pub dashboard: TopicSpec,
    pub dead_letter: TopicSpec,
    pub late: TopicSpec,
    /// Append-only record of every action attempt and outcome.
    pub audit: TopicSpec,
    /// Actions that failed permanently (4xx other than 409).
    pub action_dead_letter: TopicSpec,
    /// Internal topic that re-keys order lines and stock snapshots by SKU.
    pub sku_repartition: TopicSpec,
    /// Rows of finance closes and adjustments, staged under their run id (compacted).
    /// Provisional finance rows the stream revises as events arrive (compacted).
    pub finance_provisional: TopicSpec,
    pub finance_close: TopicSpec,
    /// One record per published close or adjustment: what readers look up first (compacted).
    pub finance_manifest: TopicSpec,
    /// One row per window × store × currency: the sum of the dashboard partials (compacted).
    pub dashboard_combined: TopicSpec,
    /// How its records are written (`sinks.dashboard_combined.format`).
    pub dashboard_combined_format: SinkFormat,
    /// One row per day × store × currency: the sum of the provisional partials (compacted).
    pub finance_provisional_combined: TopicSpec,
    /// How its records are written (`sinks.finance_provisional_combined.format`).
    pub finance_provisional_combined_format: SinkFormat,
    /// Internal topic that re-keys dashboard and provisional partials by aggregate key, with
    /// each orders partition's progress, so one task sums every partition's latest partial.
    pub combine_repartition: TopicSpec,
    /// How far the broker's clock may run behind ours: bounds an idle upstream's promise
    /// about future append times, and so the extra latency of the SKU merge.
    pub idle_skew_ms: i64,
    /// How an idle upstream partition promises progress (`internal.idle_promise`).
    pub idle_promise: IdlePromise,
    pub endpoints: Endpoints,
    pub dedup_retention_ms: i64,
    pub commit_interval_ms: u64,
    /// How long a batch lingers, once the previous commit is durable, before it is committed
    /// (`state.commit_linger`); `commit_interval_ms` is the longest it waits.
    pub commit_linger_ms: u64,
    pub max_batch_records: usize,
    pub dashboard_window: WindowPolicy,
    pub finance_time_zone: chrono_tz::Tz,
    pub rules: Vec<Rule>,
}

/// Where actions are sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub action_url: Option<String>,
    pub notify_url: Option<String>,
    pub timeout_ms: i64,
    pub max_in_flight: usize,
    /// Certificates that verify https endpoints.
    pub trust: Trust,
    /// PEM bundle of CA certificates trusted in addition to `trust`.
    pub ca_file: Option<String>,
    /// PEM client certificate (chain) and its private key, for endpoints that require mTLS.
    pub client_cert_file: Option<String>,
    pub client_key_file: Option<String>,
    /// Whether `act` and `notify` rules may run without a webhook signing secret.
    pub allow_unsigned: bool,
}

/// The built-in roots that verify an endpoint's certificate; `ca_file` adds to any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// The Mozilla roots compiled into tidemark: the same in every image.
    #[default]
    Webpki,
    /// The operating system's store (e.g. /etc/ssl/certs), read at start.
    System,
    Both,
    /// Only `ca_file`.
    None,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    pub partitions: i32,
    pub compacted: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RuleKind {
    Oversell,
    LowStock { threshold: i64, replenish_to: i64 },
    VelocitySpike { min_units: u64, factor: rust_decimal::Decimal, baseline_windows: u32 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub id: String,
    pub version: u32,
    pub mode: RuleMode,
    pub kind: RuleKind,
}

/// One problem in a topology file, located by key path and, where known, line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub line_col: Option<(usize, usize)>,
    pub message: String,
}

/// Every problem found in one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    pub origin: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {} error(s)", self.origin, self.errors.len())?;
        for e in &self.errors {
            match e.line_col {
                Some((l, c)) => writeln!(f, "  {}:{}:{}: {}: {}", self.origin, l, c, e.path, e.message)?,
                None => writeln!(f, "  {}: {}: {}", self.origin, e.path, e.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The example topology shipped with tidemark, used by `tidemark demo`.
pub const EXAMPLE: &str = include_str!("../examples/orders.toml");

pub fn load(path: &Path) -> Result<Topology, ConfigErrors> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        origin: origin.clone(),
        errors: vec![ConfigError { path: String::new(), line_col: None, message: format!("cannot read: {e}") }],
    })?;
    parse(&text, &origin)
}

pub fn parse(text: &str, origin: &str) -> Result<Topology, ConfigErrors> {
    let fail = |errors| ConfigErrors { origin: origin.to_string(), errors };
    let (raw, mut errors) = deserialize(text);
    let Some((raw, unknown)) = raw else { return Err(fail(errors)) };
    errors.extend(unknown.into_iter().map(|path| ConfigError {
        path,
        line_col: None,
        message: "unknown key".to_string(),
    }));
    let typed = errors.len();
    let mut checked = Vec::new();
    let topology = compile(raw, &mut checked);
    // A key with a type error was checked with a stand-in value: its other complaints are noise.
    let bad_types: Vec<String> = errors[..typed].iter().map(|e| e.path.clone()).collect();
    errors.extend(checked.into_iter().filter(|e| !bad_types.contains(&e.path)));
    if errors.is_empty() {
        Ok(topology)
    } else {
        Err(fail(errors))
    }
}

/// Type errors found while reading the file into [`RawTopology`], all of them: serde stops at
/// the first, so each bad value is located (its key path from the error's span, its line and
/// column in the original text), replaced by a stand-in of the expected type, and the text is
/// read again. Returns the raw topology with the unknown keys when every type error could be
/// stood in for (the errors then hold the type errors), or `None` with what stopped it.
#[allow(clippy::type_complexity)]
fn deserialize(text: &str) -> (Option<(RawTopology, Vec<String>)>, Vec<ConfigError>) {
    let original = toml_edit::ImDocument::parse(text).ok();
    let mut errors = Vec::new();
    let mut current = text.to_string();
    // Each round stands in for one value; a file has far fewer keys than this.
    for _ in 0..256 {
        let mut unknown = Vec::new();
        let e = match serde_ignored::deserialize(toml::Deserializer::new(&current), |p| unknown.push(p.to_string())) {
            Ok(raw) => return (Some((raw, unknown)), errors),
            Err(e) => e,
        };
        let message = e.message().trim().to_string();
        let doc = e.span().and_then(|_| toml_edit::ImDocument::parse(current.clone()).ok());
        let located = e.span().zip(doc.as_ref()).and_then(|(span, doc)| path_at(doc.as_table(), span.start));
        let Some(path) = located else {
            let line_col = e.span().map(|s| line_col(&current, s.start));
            errors.push(ConfigError { path: String::new(), line_col, message });
            return (None, errors);
        };
        let at = original.as_ref().and_then(|d| span_of(d.as_item(), &path)).map(|start| line_col(text, start));
        let line_col = at.or_else(|| e.span().map(|s| line_col(&current, s.start)));
        let stand_in = stand_in(&message);
        errors.push(ConfigError { path: display_path(&path), line_col, message });
        let (Some(stand_in), Some(doc)) = (stand_in, doc) else { return (None, errors) };
        let mut doc = doc.into_mut();
        if !replace(doc.as_item_mut(), &path, stand_in) {
            return (None, errors);
        }
        current = doc.to_string();
    }
    (None, errors)
}

/// One step of a key path: a key of a table, or an index into an array (of tables).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn display_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn contains(span: Option<std::ops::Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.start <= offset && offset < s.end.max(s.start + 1))
}

/// The path of the innermost value whose span holds `offset`.
fn path_at(table: &toml_edit::Table, offset: usize) -> Option<Vec<Step>> {
    for (key, item) in table.iter() {
        let here = vec![Step::Key(key.to_string())];
        let found = match item {
            toml_edit::Item::Table(t) => path_at(t, offset),
            toml_edit::Item::ArrayOfTables(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, t)| path_at(t, offset).map(|p| std::iter::once(Step::Index(i)).chain(p).collect())),
            toml_edit::Item::Value(v) => value_path_at(v, offset),
            toml_edit::Item::None => None,
        };
        if let Some(rest) = found {
            return Some(here.into_iter().chain(rest).collect());
        }
    }
    None
}

/// Within a value: `Some(vec![])` for the value itself, deeper steps inside arrays and
/// inline tables.
fn value_path_at(v: &toml_edit::Value, offset: usize) -> Option<Vec<Step>> {
    match v {
        toml_edit::Value::Array(a) => {
            let inner = a.iter().enumerate().find_map(|(i, v)| {
                value_path_at(v, offset).map(|p| std::iter::once(Step::Index(i)).chain(p).collect())
            });
            inner.or_else(|| contains(v.span(), offset).then(Vec::new))
        }
        toml_edit::Value::InlineTable(t) => {
            let inner = t.iter().find_map(|(k, v)| {
                value_path_at(v, offset).map(|p| std::iter::once(Step::Key(k.to_string())).chain(p).collect())
            });
            inner.or_else(|| contains(v.span(), offset).then(Vec::new))
        }
        _ => contains(v.span(), offset).then(Vec::new),
    }
}

/// Where the value at `path` starts in a parsed document.
fn span_of(root: &toml_edit::Item, path: &[Step]) -> Option<usize> {
    let mut item = root;
    for step in path {
        item = match step {
            Step::Key(k) => item.get(k.as_str())?,
            Step::Index(i) => item.get(*i)?,
        };
    }
    item.span().map(|s| s.start)
}

/// Sets the value at `path`; false when the path does not lead to a value.
fn replace(root: &mut toml_edit::Item, path: &[Step], value: toml_edit::Value) -> bool {
    let mut item = root;
    for step in path {
        let next = match step {
            Step::Key(k) => item.get_mut(k.as_str()),
            Step::Index(i) => item.get_mut(*i),
        };
        let Some(next) = next else { return false };
        item = next;
    }
    if item.is_value() {
        *item = toml_edit::Item::Value(value);
        true
    } else {
        false
    }
}

/// A value of the type a serde message says was expected (`invalid type: string "four",
/// expected i32`), or `None` when it names no plain type.
fn stand_in(message: &str) -> Option<toml_edit::Value> {
    if !(message.starts_with("invalid type") || message.starts_with("invalid value")) {
        return None;
    }
    let expected = message.rsplit_once("expected ")?.1;
    let integer = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "usize", "isize", "integer"];
    if integer.iter().any(|t| expected.starts_with(t)) {
        Some(toml_edit::Value::from(0i64))
    } else if expected.starts_with("f32") || expected.starts_with("f64") || expected.contains("float") {
        Some(toml_edit::Value::from(0.0f64))
    } else if expected.contains("string") {
        Some(toml_edit::Value::from(""))
    } else if expected.contains("bool") {
        Some(toml_edit::Value::from(false))
    } else if expected.contains("sequence") {
        Some(toml_edit::Value::Array(toml_edit::Array::new()))
    } else {
        None
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[derive(Deserialize)]
struct RawTopology {
    name: String,
    sources: RawSources,
    sinks: RawSinks,
    internal: RawInternal,
    #[serde(default)]
    endpoints: RawEndpoints,
    #[serde(default)]
    state: RawState,
    windows: RawWindows,
    #[serde(default)]
    finance: RawFinance,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Deserialize)]
struct RawSources {
    orders: RawTopic,
    inventory: RawTopic,
    #[serde(default = "default_max_identifier_bytes")]
    max_identifier_bytes: i64,
}

fn default_max_identifier_bytes() -> i64 {
    DEFAULT_MAX_IDENTIFIER_BYTES as i64
}

#[derive(Deserialize)]
struct RawSinks {
    dashboard: RawTopic,
    dead_letter: RawTopic,
    late: RawTopic,
    audit: RawTopic,
    action_dead_letter: RawTopic,
    finance_provisional: RawTopic,
    finance_close: RawTopic,
    finance_manifest: RawTopic,
    dashboard_combined: RawCombinedTopic,
    finance_provisional_combined: RawCombinedTopic,
}

#[derive(Deserialize)]
struct RawInternal {
    sku_repartition: RawTopic,
    combine_repartition: RawTopic,
    #[serde(default = "default_idle_skew")]
    idle_skew: String,
    #[serde(default = "default_idle_promise")]
    idle_promise: String,
    #[serde(default = "default_fence_every")]
    fence_every: String,
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
struct RawEndpoints {
    action_url: Option<String>,
    notify_url: Option<String>,
    #[serde(default = "default_endpoint_timeout")]
    timeout: String,
    #[serde(default = "default_max_in_flight")]
    max_in_flight: i64,
    #[serde(default = "default_trust")]
    trust: String,
    ca_file: Option<String>,
    client_cert_file: Option<String>,
    client_key_file: Option<String>,
    #[serde(default)]
    allow_unsigned: bool,
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
struct RawTopic {
    topic: String,
    #[serde(default = "default_partitions")]
    partitions: i32,
    #[serde(default)]
    compacted: bool,
}

fn default_partitions() -> i32 {
    4
}

/// A combined sink: a topic with the format its records are written in.
#[derive(Deserialize)]
struct RawCombinedTopic {
    topic: String,
    #[serde(default = "default_partitions")]
    partitions: i32,
    #[serde(default)]
    compacted: bool,
    /// Parsed by the second pass, like a rule's mode.
    #[serde(default = "default_sink_format")]
    format: String,
}

fn default_sink_format() -> String {
    SinkFormat::default().as_str().to_string()
}

#[derive(Deserialize)]
struct RawState {
    #[serde(default = "default_dedup_retention")]
    dedup_retention: String,
    #[serde(default = "default_commit_interval")]
    commit_interval: String,
    #[serde(default = "default_commit_linger")]
    commit_linger: String,
    #[serde(default = "default_max_batch")]
    max_batch_records: i64,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            dedup_retention: default_dedup_retention(),
            commit_interval: default_commit_interval(),
            commit_linger: default_commit_linger(),
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
fn default_max_batch() -> i64 {
    20_000
}

#[derive(Deserialize)]
struct RawWindows {
    dashboard: RawWindow,
}

#[derive(Deserialize)]
struct RawWindow {
    size: String,
    #[serde(default = "zero")]
    allowed_lateness: String,
    #[serde(default = "default_grace")]
    grace: String,
    #[serde(default = "default_retention")]
    retention: String,
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
struct RawFinance {
    #[serde(default = "default_tz")]
    time_zone: String,
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
struct RawRule {
    id: String,
    version: i64,
    /// Parsed by the second pass ([`RuleMode::from_str`](std::str::FromStr)), so a wrong
    /// mode is reported with every other error instead of ending the first pass alone.
    mode: String,
    #[serde(default)]
    params: BTreeMap<String, toml::Value>,
}

/// Collects errors instead of stopping at the first.
struct Checker<'a> {
    errors: &'a mut Vec<ConfigError>,
}

impl Checker<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError { path: path.into(), line_col: None, message: message.into() });
    }

    /// `None` (and an error) when the text is not a duration.
    fn duration_ms(&mut self, path: &str, text: &str) -> Option<i64> {
        match humantime::parse_duration(text) {
            Ok(d) => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => {
                self.error(path, format!("`{text}` is not a duration ({e}); write e.g. \"200ms\", \"2m\", \"7d\""));
                None
            }
        }
    }

    /// A duration that must be positive; one error per problem, never two for one key.
    fn positive_ms(&mut self, path: &str, text: &str) -> Option<i64> {
        let ms = self.duration_ms(path, text)?;
        if ms <= 0 {
            self.error(path, "must be positive");
            return None;
        }
        Some(ms)
    }

    fn topic(&mut self, path: &str, raw: RawTopic) -> TopicSpec {
        if raw.topic.trim().is_empty() || raw.topic.len() > 249 || !raw.topic.chars().all(valid_topic_char) {
            self.error(format!("{path}.topic"), format!("`{}` is not a valid Kafka topic name", raw.topic));
        }
        if raw.partitions < 1 {
            self.error(format!("{path}.partitions"), "must be at least 1");
        }
        TopicSpec { topic: raw.topic, partitions: raw.partitions, compacted: raw.compacted }
    }

    /// A combined sink's topic and format.
    fn combined(&mut self, path: &str, raw: RawCombinedTopic) -> (TopicSpec, SinkFormat) {
        let format = raw.format.parse::<SinkFormat>().unwrap_or_else(|e| {
            self.error(format!("{path}.format"), e.to_string());
            SinkFormat::default()
        });
        let topic = RawTopic { topic: raw.topic, partitions: raw.partitions, compacted: raw.compacted };
        (self.topic(path, topic), format)
    }

    fn int_param(&mut self, path: &str, params: &BTreeMap<String, toml::Value>, key: &str, default: i64) -> i64 {
        match params.get(key) {
            None => default,
            Some(toml::Value::Integer(i)) if *i >= 0 => *i,
            Some(v) => {
                self.error(format!("{path}.params.{key}"), format!("expected a non-negative integer, found {v}"));
                default
            }
        }
    }

    fn rule(&mut self, index: usize, raw: RawRule) -> Option<Rule> {
        let path = format!("rules[{index}]");
        let mode = match raw.mode.parse::<RuleMode>() {
            Ok(mode) => Some(mode),
            Err(e) => {
                self.error(format!("{path}.mode"), e.to_string());
                None
            }
        };
        let version = match u32::try_from(raw.version) {
            Ok(v) if v >= 1 => Some(v),
            _ => {
                self.error(format!("{path}.version"), "must be a positive integer");
                None
            }
        };
        let p = &raw.params;
        let (kind, allowed): (Option<RuleKind>, &[&str]) = match raw.id.as_str() {
            "oversell" => (Some(RuleKind::Oversell), &[]),
            "low_stock" => (
                Some(RuleKind::LowStock {
                    threshold: self.int_param(&path, p, "threshold", 10),
                    replenish_to: self.int_param(&path, p, "replenish_to", 100),
                }),
                &["threshold", "replenish_to"],
            ),
            "velocity_spike" => {
                let factor = match p.get("factor") {
                    None => Some(rust_decimal::Decimal::from(3)),
                    Some(toml::Value::String(s)) => s.parse().ok(),
                    Some(toml::Value::Integer(i)) => Some(rust_decimal::Decimal::from(*i)),
                    Some(_) => None,
                };
                let factor = factor.filter(|f| f.is_sign_positive()).unwrap_or_else(|| {
                    self.error(format!("{path}.params.factor"), "expected a positive decimal, e.g. \"3.0\"");
                    rust_decimal::Decimal::ONE
                });
                let baseline = self.int_param(&path, p, "baseline_windows", 15);
                if baseline == 0 {
                    self.error(format!("{path}.params.baseline_windows"), "must be at least 1");
                }
                (
                    Some(RuleKind::VelocitySpike {
                        min_units: self.int_param(&path, p, "min_units", 50).unsigned_abs(),
                        factor,
                        baseline_windows: u32::try_from(baseline).unwrap_or(15),
                    }),
                    &["min_units", "factor", "baseline_windows"],
                )
            }
            other => {
                self.error(
                    format!("{path}.id"),
                    format!("unknown rule `{other}` (expected oversell | low_stock | velocity_spike)"),
                );
                (None, &[])
            }
        };
        for key in p.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.error(format!("{path}.params.{key}"), format!("unknown parameter for rule `{}`", raw.id));
        }
        Some(Rule { id: raw.id, version: version?, mode: mode?, kind: kind? })
    }
}

fn valid_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn compile(raw: RawTopology, errors: &mut Vec<ConfigError>) -> Topology {
    let mut c = Checker { errors };
    if raw.name.trim().is_empty() {
        c.error("name", "must not be empty");
    }
    let orders = c.topic("sources.orders", raw.sources.orders);
    let inventory = c.topic("sources.inventory", raw.sources.inventory);
    let max_identifier_bytes = usize::try_from(raw.sources.max_identifier_bytes)
        .ok()
        .filter(|n| (1..=MAX_IDENTIFIER_BYTES_LIMIT).contains(n))
        .unwrap_or_else(|| {
            c.error(
                "sources.max_identifier_bytes",
                format!("must be between 1 and {MAX_IDENTIFIER_BYTES_LIMIT} (a sku is sent in an HTTP header)"),
            );
            DEFAULT_MAX_IDENTIFIER_BYTES
        });
    let dashboard = c.topic("sinks.dashboard", raw.sinks.dashboard);
    let dead_letter = c.topic("sinks.dead_letter", raw.sinks.dead_letter);
    let late = c.topic("sinks.late", raw.sinks.late);
    let audit = c.topic("sinks.audit", raw.sinks.audit);
    let action_dead_letter = c.topic("sinks.action_dead_letter", raw.sinks.action_dead_letter);
    let finance_provisional = c.topic("sinks.finance_provisional", raw.sinks.finance_provisional);
    let finance_close = c.topic("sinks.finance_close", raw.sinks.finance_close);
    let finance_manifest = c.topic("sinks.finance_manifest", raw.sinks.finance_manifest);
    let (dashboard_combined, dashboard_combined_format) =
        c.combined("sinks.dashboard_combined", raw.sinks.dashboard_combined);
    let (finance_provisional_combined, finance_provisional_combined_format) =
        c.combined("sinks.finance_provisional_combined", raw.sinks.finance_provisional_combined);
    let sku_repartition = c.topic("internal.sku_repartition", raw.internal.sku_repartition);
    let combine_repartition = c.topic("internal.combine_repartition", raw.internal.combine_repartition);
    let idle_skew_ms = c.duration_ms("internal.idle_skew", &raw.internal.idle_skew).unwrap_or(2_000);
    let fence_every_ms = c.positive_ms("internal.fence_every", &raw.internal.fence_every).unwrap_or(20);
    let idle_promise = IdlePromise::parse(&raw.internal.idle_promise, fence_every_ms).unwrap_or_else(|e| {
        c.error("internal.idle_promise", e.to_string());
        IdlePromise::default()
    });
    let endpoint_timeout = c.positive_ms("endpoints.timeout", &raw.endpoints.timeout).unwrap_or(5_000);
    for (path, url) in
        [("endpoints.action_url", &raw.endpoints.action_url), ("endpoints.notify_url", &raw.endpoints.notify_url)]
    {
        if let Some(u) = url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                c.error(path, format!("`{u}` is not an http(s) URL"));
            }
        }
    }
    let max_in_flight = usize::try_from(raw.endpoints.max_in_flight).unwrap_or(0);
    let trust = match raw.endpoints.trust.as_str() {
        "webpki" => Trust::Webpki,
        "system" => Trust::System,
        "both" => Trust::Both,
        "none" => Trust::None,
        other => {
            c.error("endpoints.trust", format!("unknown trust `{other}` (expected webpki | system | both | none)"));
            Trust::Webpki
        }
    };
    if trust == Trust::None && raw.endpoints.ca_file.is_none() {
        c.error("endpoints.trust", "`none` trusts only endpoints.ca_file, which is not set");
    }
    for (path, file) in [
        ("endpoints.ca_file", &raw.endpoints.ca_file),
        ("endpoints.client_cert_file", &raw.endpoints.client_cert_file),
        ("endpoints.client_key_file", &raw.endpoints.client_key_file),
    ] {
        if file.as_deref().is_some_and(|f| f.trim().is_empty()) {
            c.error(path, "must not be empty; leave the key out instead");
        }
    }
    match (&raw.endpoints.client_cert_file, &raw.endpoints.client_key_file) {
        (Some(_), None) => c.error("endpoints.client_key_file", "must be set with endpoints.client_cert_file"),
        (None, Some(_)) => c.error("endpoints.client_cert_file", "must be set with endpoints.client_key_file"),
        _ => {}
    }
    if max_in_flight == 0 {
        c.error("endpoints.max_in_flight", "must be a positive integer");
    }
    let mut seen = BTreeMap::new();
    for (path, t) in [
        ("sources.orders", &orders),
        ("sources.inventory", &inventory),
        ("sinks.dashboard", &dashboard),
        ("sinks.dead_letter", &dead_letter),
        ("sinks.late", &late),
        ("sinks.audit", &audit),
        ("sinks.action_dead_letter", &action_dead_letter),
        ("sinks.finance_provisional", &finance_provisional),
        ("sinks.finance_close", &finance_close),
        ("sinks.finance_manifest", &finance_manifest),
        ("sinks.dashboard_combined", &dashboard_combined),
        ("sinks.finance_provisional_combined", &finance_provisional_combined),
        ("internal.sku_repartition", &sku_repartition),
        ("internal.combine_repartition", &combine_repartition),
    ] {
        if let Some(first) = seen.insert(t.topic.clone(), path) {
            c.error(format!("{path}.topic"), format!("topic `{}` is also used by {first}", t.topic));
        }
    }
    if !dashboard.compacted {
        c.error("sinks.dashboard.compacted", "the dashboard topic holds upserts and must be compacted");
    }
    for (path, spec, what) in [
        ("sinks.finance_provisional.compacted", &finance_provisional, "provisional rows are upserts"),
        ("sinks.finance_close.compacted", &finance_close, "finance rows are keyed by run id"),
        ("sinks.finance_manifest.compacted", &finance_manifest, "readers take the latest manifest per key"),
        ("sinks.dashboard_combined.compacted", &dashboard_combined, "combined rows are upserts"),
        ("sinks.finance_provisional_combined.compacted", &finance_provisional_combined, "combined rows are upserts"),
    ] {
        if !spec.compacted {
            c.error(path, format!("{what}: the topic must be compacted"));
        }
    }

    let dedup_retention = c.duration_ms("state.dedup_retention", &raw.state.dedup_retention);
    let commit_interval = c.positive_ms("state.commit_interval", &raw.state.commit_interval);
    let commit_linger = c.duration_ms("state.commit_linger", &raw.state.commit_linger);
    if let (Some(linger), Some(interval)) = (commit_linger, commit_interval) {
        if linger > interval {
            c.error("state.commit_linger", format!("must not exceed state.commit_interval ({interval} ms)"));
        }
    }
    let max_batch_records = usize::try_from(raw.state.max_batch_records).unwrap_or(0);
    if max_batch_records == 0 {
        c.error("state.max_batch_records", "must be a positive integer");
    }

    let w = &raw.windows.dashboard;
    let size = c.positive_ms("windows.dashboard.size", &w.size);
    let allowed_lateness = c.duration_ms("windows.dashboard.allowed_lateness", &w.allowed_lateness);
    let grace = c.duration_ms("windows.dashboard.grace", &w.grace);
    let retention = c.duration_ms("windows.dashboard.retention", &w.retention);
    if let (Some(grace), Some(retention)) = (grace, retention) {
        if retention < grace {
            c.error("windows.dashboard.retention", "must be at least the grace period");
        }
    }
    if let (Some(dedup), Some(retention)) = (dedup_retention, retention) {
        if dedup <= retention {
            c.error(
                "state.dedup_retention",
                "must exceed windows.dashboard.retention, or a late duplicate could be counted twice",
            );
        }
    }
    let dedup_retention_ms = dedup_retention.unwrap_or(0);
    let commit_interval_ms = commit_interval.unwrap_or(1);
    let dashboard_window = WindowPolicy {
        size_ms: size.unwrap_or(1),
        allowed_lateness_ms: allowed_lateness.unwrap_or(0),
        grace_ms: grace.unwrap_or(0),
        retention_ms: retention.unwrap_or(0),
    };

    let finance_time_zone = raw.finance.time_zone.parse::<chrono_tz::Tz>().unwrap_or_else(|_| {
        c.error("finance.time_zone", format!("`{}` is not an IANA time zone", raw.finance.time_zone));
        chrono_tz::Tz::UTC
    });

    let mut rules = Vec::new();
    let mut rule_ids = BTreeMap::new();
    for (i, raw_rule) in raw.rules.into_iter().enumerate() {
        if let Some(first) = rule_ids.insert(raw_rule.id.clone(), i) {
            c.error(format!("rules[{i}].id"), format!("rule `{}` is already declared at rules[{first}]", raw_rule.id));
        }
        if let Some(rule) = c.rule(i, raw_rule) {
            rules.push(rule);
        }
    }

    for (i, rule) in rules.iter().enumerate() {
        let missing = match rule.mode {
            RuleMode::Act => raw.endpoints.action_url.is_none().then_some("endpoints.action_url"),
            RuleMode::Notify => raw.endpoints.notify_url.is_none().then_some("endpoints.notify_url"),
            RuleMode::Shadow => None,
        };
        if let Some(key) = missing {
            c.error(format!("rules[{i}].mode"), format!("mode needs {key} to be set"));
        }
    }

    Topology {
        name: raw.name,
        orders,
        inventory,
        normalize: NormalizeLimits { max_identifier_bytes },
        dashboard,
        dead_letter,
        late,
        audit,
        action_dead_letter,
        sku_repartition,
        finance_provisional,
        finance_close,
        finance_manifest,
        dashboard_combined,
        dashboard_combined_format,
        finance_provisional_combined,
        finance_provisional_combined_format,
        combine_repartition,
        idle_skew_ms,
        idle_promise,
        endpoints: Endpoints {
            action_url: raw.endpoints.action_url,
            notify_url: raw.endpoints.notify_url,
            timeout_ms: endpoint_timeout,
            max_in_flight: max_in_flight.max(1),
            trust,
            ca_file: raw.endpoints.ca_file,
            client_cert_file: raw.endpoints.client_cert_file,
            client_key_file: raw.endpoints.client_key_file,
            allow_unsigned: raw.endpoints.allow_unsigned,
        },
        dedup_retention_ms,
        commit_interval_ms: u64::try_from(commit_interval_ms).unwrap_or(0),
        commit_linger_ms: commit_linger.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
        max_batch_records,
        dashboard_window,
        finance_time_zone,
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_is_valid() {
        let t = parse(EXAMPLE, "orders.toml").expect("example must validate");
        assert_eq!(t.dashboard_window.size_ms, 60_000);
        assert_eq!(t.dedup_retention_ms, 7 * 24 * 3_600_000);
        assert_eq!(t.rules.len(), 3);
        assert_eq!(t.finance_time_zone, chrono_tz::Asia::Tokyo);
    }

    #[test]
    fn every_error_is_reported_at_once_with_its_path() {
        let text = EXAMPLE
            .replace("partitions = 4\n\n[sources.inventory]", "partitons = 4\n\n[sources.inventory]")
            .replace("commit_interval = \"200ms\"", "commit_interval = \"soon\"")
            .replace("time_zone = \"Asia/Tokyo\"", "time_zone = \"Mars/Olympus\"")
            .replacen("mode = \"shadow\"", "mode = \"acts\"", 1);
        let err = parse(&text, "bad.toml").expect_err("must fail");
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"sources.orders.partitons"), "{err}");
        assert!(paths.contains(&"state.commit_interval"), "{err}");
        assert!(paths.contains(&"finance.time_zone"), "{err}");
        assert!(paths.contains(&"rules[0].mode"), "{err}");
        assert!(err.to_string().starts_with("bad.toml: 4 error(s)"), "{err}");
    }

    #[test]
    fn a_commit_linger_defaults_to_2ms_and_may_not_exceed_the_commit_interval() {
        let t = parse(EXAMPLE, "t.toml").expect("valid");
        assert_eq!((t.commit_interval_ms, t.commit_linger_ms), (200, 2));
        let without = EXAMPLE.replace("commit_linger = \"2ms\"\n", "");
        assert_ne!(without, EXAMPLE);
        assert_eq!(parse(&without, "t.toml").expect("valid").commit_linger_ms, 2);
        let whole = EXAMPLE.replace("commit_linger = \"2ms\"", "commit_linger = \"200ms\"");
        assert_eq!(parse(&whole, "t.toml").expect("valid").commit_linger_ms, 200);
        let longer = EXAMPLE.replace("commit_linger = \"2ms\"", "commit_linger = \"1s\"");
        let err = parse(&longer, "t.toml").expect_err("longer than the interval");
        assert_eq!(err.errors[0].path, "state.commit_linger", "{err}");
        assert!(err.to_string().contains("must not exceed state.commit_interval (200 ms)"), "{err}");
    }

    #[test]
    fn the_idle_promise_is_the_clock_unless_fences_are_asked_for() {
        let t = parse(EXAMPLE, "t.toml").expect("valid");
        assert_eq!(t.idle_promise, IdlePromise::Clock);
        let fenced = EXAMPLE.replace("idle_promise = \"clock\"", "idle_promise = \"fence\"");
        assert_eq!(parse(&fenced, "t.toml").expect("valid").idle_promise, IdlePromise::Fence { every_ms: 20 });
        let bad = EXAMPLE.replace("idle_promise = \"clock\"", "idle_promise = \"sometimes\"");
        let err = parse(&bad, "t.toml").expect_err("unknown");
        assert_eq!(err.errors[0].path, "internal.idle_promise", "{err}");
        assert!(err.to_string().contains("expected clock | fence"), "{err}");
    }

    #[test]
    fn max_identifier_bytes_defaults_to_256_and_is_bounded() {
        let t = parse(EXAMPLE, "t.toml").expect("valid");
        assert_eq!(t.normalize, NormalizeLimits::default());
        assert_eq!(t.normalize.max_identifier_bytes, 256);
        let without = EXAMPLE.replace("max_identifier_bytes = 256\n", "");
        assert_ne!(without, EXAMPLE);
        assert_eq!(parse(&without, "t.toml").expect("valid").normalize.max_identifier_bytes, 256);
        let set = EXAMPLE.replace("max_identifier_bytes = 256", "max_identifier_bytes = 64");
        assert_eq!(parse(&set, "t.toml").expect("valid").normalize.max_identifier_bytes, 64);
        for bad in ["0", "-1", "4097"] {
            let text = EXAMPLE.replace("max_identifier_bytes = 256", &format!("max_identifier_bytes = {bad}"));
            let err = parse(&text, "t.toml").expect_err("must fail");
            assert_eq!(err.errors[0].path, "sources.max_identifier_bytes", "{bad}: {err}");
        }
    }

    #[test]
    fn a_type_error_carries_line_and_column() {
        let text = EXAMPLE.replace("max_batch_records = 20000", "max_batch_records = \"many\"");
        let err = parse(&text, "t.toml").expect_err("must fail");
        let (line, _) = err.errors[0].line_col.expect("located");
        assert_eq!(text.lines().nth(line - 1).map(|l| l.starts_with("max_batch_records")), Some(true), "{err}");
    }

    #[test]
    fn three_type_errors_are_reported_at_once_each_with_its_key_path_and_line() {
        let text = EXAMPLE
            .replace("max_batch_records = 20000", "max_batch_records = \"many\"")
            .replacen("partitions = 4", "partitions = \"four\"", 1)
            .replace("allow_unsigned = false", "allow_unsigned = \"no\"");
        let err = parse(&text, "t.toml").expect_err("must fail");
        let located: Vec<(&str, usize)> =
            err.errors.iter().filter_map(|e| Some((e.path.as_str(), e.line_col?.0))).collect();
        let line_of = |key: &str| text.lines().position(|l| l.starts_with(key)).map(|i| i + 1);
        assert_eq!(
            located,
            vec![
                ("sources.orders.partitions", line_of("partitions = \"four\"").unwrap_or(0)),
                ("endpoints.allow_unsigned", line_of("allow_unsigned").unwrap_or(0)),
                ("state.max_batch_records", line_of("max_batch_records").unwrap_or(0)),
            ],
            "{err}"
        );
        assert_eq!(err.errors.len(), 3, "the stand-in values add no errors of their own: {err}");
        assert!(err.to_string().contains("invalid type: string \"four\", expected i32"), "{err}");
    }

    #[test]
    fn a_type_error_inside_a_rule_is_located_by_its_index() {
        let text = EXAMPLE.replacen("version = 1", "version = \"one\"", 1);
        let err = parse(&text, "t.toml").expect_err("must fail");
        assert_eq!(err.errors[0].path, "rules[0].version", "{err}");
    }

    #[test]
    fn a_topology_without_an_endpoints_table_gets_the_documented_defaults() {
        let start = EXAMPLE.find("[endpoints]").expect("endpoints table");
        let last = "allow_unsigned = false";
        let end = EXAMPLE[start..].find(last).expect("last key") + start + last.len();
        let text = format!("{}{}", &EXAMPLE[..start], &EXAMPLE[end..]);
        let t = parse(&text, "t.toml").expect("valid without [endpoints]");
        assert_eq!((t.endpoints.timeout_ms, t.endpoints.max_in_flight), (5_000, 32));
        assert_eq!((t.endpoints.trust, t.endpoints.allow_unsigned), (Trust::Webpki, false));
    }

    #[test]
    fn a_rule_that_calls_an_endpoint_needs_its_url() {
        let text = EXAMPLE.replacen("mode = \"shadow\"", "mode = \"act\"", 1);
        let err = parse(&text, "t.toml").expect_err("must fail");
        assert_eq!(err.errors[0].path, "rules[0].mode", "{err}");
        let with_url = text
            .replace("# action_url = \"https://inventory.internal/actions\"", "action_url = \"http://127.0.0.1:1/a\"");
        assert!(parse(&with_url, "t.toml").is_ok());
    }

    #[test]
    fn webhook_tls_and_signing_keys_default_to_webpki_and_signed_and_are_checked_together() {
        let t = parse(EXAMPLE, "t.toml").expect("valid");
        assert_eq!(t.endpoints.trust, Trust::Webpki);
        assert_eq!((t.endpoints.ca_file.as_deref(), t.endpoints.client_cert_file.as_deref()), (None, None));
        assert!(!t.endpoints.allow_unsigned);
        let set = EXAMPLE.replace("trust = \"webpki\"", "trust = \"both\"").replace(
            "allow_unsigned = false",
            "allow_unsigned = true\nca_file = \"/ca.pem\"\nclient_cert_file = \"/c.pem\"\nclient_key_file = \"/k.pem\"",
        );
        let t = parse(&set, "t.toml").expect("valid");
        assert_eq!(t.endpoints.trust, Trust::Both);
        assert_eq!(t.endpoints.ca_file.as_deref(), Some("/ca.pem"));
        assert_eq!(t.endpoints.client_key_file.as_deref(), Some("/k.pem"));
        assert!(t.endpoints.allow_unsigned);
        let bad = EXAMPLE
            .replace("trust = \"webpki\"", "trust = \"none\"")
            .replace("allow_unsigned = false", "client_cert_file = \"/c.pem\"\nca = \"x\"");
        let err = parse(&bad, "t.toml").expect_err("must fail");
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["endpoints.ca", "endpoints.trust", "endpoints.client_key_file"], "{err}");
        let unknown = EXAMPLE.replace("trust = \"webpki\"", "trust = \"os\"");
        assert_eq!(parse(&unknown, "t.toml").expect_err("must fail").errors[0].path, "endpoints.trust");
    }

    #[test]
    fn finance_topics_must_be_compacted_and_distinct() {
        let text = EXAMPLE
            .replace(
                "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true }",
                "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = false }",
            )
            .replace("topic = \"tidemark.finance-manifest\"", "topic = \"tidemark.finance-close\"");
        let err = parse(&text, "t.toml").expect_err("must fail");
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["sinks.finance_manifest.topic", "sinks.finance_close.compacted"], "{err}");
    }

    #[test]
    fn dedup_retention_must_outlive_window_retention() {
        let text = EXAMPLE.replace("dedup_retention = \"7d\"", "dedup_retention = \"1h\"");
        let err = parse(&text, "t.toml").expect_err("must fail");
        assert_eq!(err.errors[0].path, "state.dedup_retention");
    }

    #[test]
    fn unknown_rule_parameters_and_duplicate_ids_are_rejected() {
        let text = format!(
            "{EXAMPLE}\n[[rules]]\nid = \"oversell\"\nversion = 2\nmode = \"shadow\"\nparams = {{ limit = 3 }}\n"
        );
        let err = parse(&text, "t.toml").expect_err("must fail");
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["rules[3].id", "rules[3].params.limit"], "{err}");
    }

    #[test]
    fn a_combined_sink_is_written_as_json_unless_its_format_says_connect_json() {
        let t = parse(EXAMPLE, "orders.toml").expect("valid");
        assert_eq!(
            (t.dashboard_combined_format, t.finance_provisional_combined_format),
            (SinkFormat::Json, SinkFormat::Json)
        );
        let text = EXAMPLE.replace(
            "topic = \"tidemark.dashboard-combined\", partitions = 4, compacted = true",
            "topic = \"tidemark.dashboard-combined\", partitions = 4, compacted = true, format = \"connect-json\"",
        );
        let t = parse(&text, "t.toml").expect("valid");
        assert_eq!(t.dashboard_combined_format, SinkFormat::ConnectJson);
        assert_eq!(t.finance_provisional_combined_format, SinkFormat::Json, "chosen per sink");
    }

    #[test]
    fn an_unknown_format_and_a_format_on_a_sink_that_has_none_are_reported_with_their_paths() {
        let text = EXAMPLE
            .replace(
                "topic = \"tidemark.finance-provisional-combined\", partitions = 4, compacted = true",
                "topic = \"tidemark.finance-provisional-combined\", partitions = 4, compacted = true, format = \"avro\"",
            )
            .replace(
                "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true }",
                "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true, format = \"connect-json\" }",
            );
        let err = parse(&text, "t.toml").expect_err("must fail");
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["sinks.finance_close.format", "sinks.finance_provisional_combined.format"], "{err}");
        assert!(err.to_string().contains("unknown format `avro` (expected json | connect-json)"), "{err}");
    }
}
