//! What a loaded topology is: the validated model every other crate reads.

use super::{IdlePromise, RuleMode, SinkFormat};
use crate::expr::{Expr, Reads};
use crate::normalize::NormalizeLimits;
use crate::window::WindowPolicy;

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
    /// How often the stream publishes the aggregates' rows (dashboard and provisional
    /// partials, and from them the combined rows) that changed since it last did
    /// (`state.publish_interval`); 0: at every commit. Their state is committed at every
    /// commit either way.
    pub publish_interval_ms: u64,
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
    LowStock {
        threshold: i64,
        replenish_to: i64,
    },
    VelocitySpike {
        min_units: u64,
        factor: rust_decimal::Decimal,
        baseline_windows: u32,
    },
    /// A rule declared in the topology file (`kind = "expression"`, docs/rules.md).
    Expression(ExpressionRule),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub id: String,
    pub version: u32,
    pub mode: RuleMode,
    pub kind: RuleKind,
}

impl Rule {
    /// Whether the rule reads the SKU's stock snapshot (a per-snapshot rule always does: its
    /// key names the snapshot).
    pub fn reads_stock(&self) -> bool {
        match &self.kind {
            RuleKind::Oversell | RuleKind::LowStock { .. } => true,
            RuleKind::VelocitySpike { .. } => false,
            RuleKind::Expression(x) => x.trigger == RuleTrigger::PerSnapshot || x.reads().stock,
        }
    }

    /// How many windows before the current one the rule reads, if it reads windows at all.
    pub fn window_reach(&self) -> Option<u32> {
        match &self.kind {
            RuleKind::Oversell | RuleKind::LowStock { .. } => None,
            RuleKind::VelocitySpike { baseline_windows, .. } => Some(*baseline_windows),
            RuleKind::Expression(x) => x.reads().window.then_some(x.preceding_windows),
        }
    }
}

/// What an expression rule is "once per", which fixes its idempotency key exactly as for
/// the built-in rules: `…:snapshot:{as_of}` or `…:window:{window_start}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleTrigger {
    /// Checked on every update of the SKU once it has a snapshot; fires once per snapshot.
    PerSnapshot,
    /// Checked when a window gains placed units while open for actions; fires once per window.
    PerWindow,
}

impl RuleTrigger {
    pub const ALL: [RuleTrigger; 2] = [RuleTrigger::PerSnapshot, RuleTrigger::PerWindow];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleTrigger::PerSnapshot => "per_snapshot",
            RuleTrigger::PerWindow => "per_window",
        }
    }
}

/// What an action asks the receiver to do (the payload's `action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleAction {
    StopSale,
    Replenish,
    Notify,
}

impl RuleAction {
    pub const ALL: [RuleAction; 3] = [RuleAction::StopSale, RuleAction::Replenish, RuleAction::Notify];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::StopSale => "stop_sale",
            RuleAction::Replenish => "replenish",
            RuleAction::Notify => "notify",
        }
    }
}

/// A compiled `kind = "expression"` rule: its condition and the evidence its payload carries,
/// each type-checked when the topology was loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpressionRule {
    pub trigger: RuleTrigger,
    pub action: RuleAction,
    /// Windows before the current one that `preceding.*` covers.
    pub preceding_windows: u32,
    /// A `bool` expression: the rule fires when it is true.
    pub when: Expr,
    /// The payload's evidence, name by name, in declaration order.
    pub evidence: Vec<(String, Expr)>,
}

impl ExpressionRule {
    /// Everything the condition and the evidence read.
    pub fn reads(&self) -> Reads {
        self.evidence.iter().fold(self.when.reads(), |r, (_, e)| r.union(e.reads()))
    }
}
