//! The second pass: raw structs checked as a whole and compiled into [`Topology`], one
//! function per section, in the order of the file. Errors are collected, never returned
//! early, so one run reports every problem.

use std::collections::BTreeMap;

use super::checker::Checker;
use super::locate::Source;
use super::raw::{RawEndpoints, RawFinance, RawInternal, RawSinks, RawSources, RawState, RawTopology, RawWindows};
use super::rules::rules;
use super::{ConfigError, Endpoints, IdlePromise, TopicSpec, Topology, Trust, MAX_IDENTIFIER_BYTES_LIMIT};
use crate::normalize::{NormalizeLimits, DEFAULT_MAX_IDENTIFIER_BYTES};
use crate::window::WindowPolicy;

pub(super) fn compile(raw: RawTopology, source: &Source, errors: &mut Vec<ConfigError>) -> Topology {
    let mut c = Checker { errors, source };
    if raw.name.trim().is_empty() {
        c.error("name", "must not be empty");
    }
    let sources = sources(&mut c, raw.sources);
    let sinks = sinks(&mut c, raw.sinks);
    let internal = internal(&mut c, raw.internal);
    let endpoint_settings = endpoints(&mut c, &raw.endpoints);
    topics(&mut c, &sources, &sinks, &internal);
    let state = state(&mut c, raw.state);
    let window = windows(&mut c, &raw.windows);
    if let (Some(dedup), Some(retention)) = (state.dedup_retention, window.retention) {
        if dedup <= retention {
            c.error(
                "state.dedup_retention",
                "must exceed windows.dashboard.retention, or a late duplicate could be counted twice",
            );
        }
    }
    let finance_time_zone = finance(&mut c, &raw.finance);
    let rules = rules(&mut c, raw.rules, &raw.endpoints, &window);

    Topology {
        name: raw.name,
        orders: sources.orders,
        inventory: sources.inventory,
        normalize: NormalizeLimits { max_identifier_bytes: sources.max_identifier_bytes },
        dashboard: sinks.dashboard,
        dead_letter: sinks.dead_letter,
        late: sinks.late,
        audit: sinks.audit,
        action_dead_letter: sinks.action_dead_letter,
        sku_repartition: internal.sku_repartition,
        finance_provisional: sinks.finance_provisional,
        finance_close: sinks.finance_close,
        finance_manifest: sinks.finance_manifest,
        dashboard_combined: sinks.dashboard_combined.0,
        dashboard_combined_format: sinks.dashboard_combined.1,
        finance_provisional_combined: sinks.finance_provisional_combined.0,
        finance_provisional_combined_format: sinks.finance_provisional_combined.1,
        combine_repartition: internal.combine_repartition,
        idle_skew_ms: internal.idle_skew_ms,
        idle_promise: internal.idle_promise,
        endpoints: Endpoints {
            action_url: raw.endpoints.action_url,
            notify_url: raw.endpoints.notify_url,
            timeout_ms: endpoint_settings.timeout_ms,
            max_in_flight: endpoint_settings.max_in_flight.max(1),
            trust: endpoint_settings.trust,
            ca_file: raw.endpoints.ca_file,
            client_cert_file: raw.endpoints.client_cert_file,
            client_key_file: raw.endpoints.client_key_file,
            allow_unsigned: raw.endpoints.allow_unsigned,
        },
        dedup_retention_ms: state.dedup_retention.unwrap_or(0),
        commit_interval_ms: u64::try_from(state.commit_interval.unwrap_or(1)).unwrap_or(0),
        commit_linger_ms: state.commit_linger.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
        publish_interval_ms: state.publish_interval.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
        max_batch_records: state.max_batch_records,
        dashboard_window: WindowPolicy {
            size_ms: window.size.unwrap_or(1),
            allowed_lateness_ms: window.allowed_lateness.unwrap_or(0),
            grace_ms: window.grace.unwrap_or(0),
            retention_ms: window.retention.unwrap_or(0),
        },
        finance_time_zone,
        rules,
    }
}

struct Sources {
    orders: TopicSpec,
    inventory: TopicSpec,
    max_identifier_bytes: usize,
}

fn sources(c: &mut Checker, raw: RawSources) -> Sources {
    let orders = c.topic("sources.orders", raw.orders);
    let inventory = c.topic("sources.inventory", raw.inventory);
    let max_identifier_bytes = usize::try_from(raw.max_identifier_bytes)
        .ok()
        .filter(|n| (1..=MAX_IDENTIFIER_BYTES_LIMIT).contains(n))
        .unwrap_or_else(|| {
            c.error(
                "sources.max_identifier_bytes",
                format!("must be between 1 and {MAX_IDENTIFIER_BYTES_LIMIT} (a sku is sent in an HTTP header)"),
            );
            DEFAULT_MAX_IDENTIFIER_BYTES
        });
    Sources { orders, inventory, max_identifier_bytes }
}

struct Sinks {
    dashboard: TopicSpec,
    dead_letter: TopicSpec,
    late: TopicSpec,
    audit: TopicSpec,
    action_dead_letter: TopicSpec,
    finance_provisional: TopicSpec,
    finance_close: TopicSpec,
    finance_manifest: TopicSpec,
    dashboard_combined: (TopicSpec, super::SinkFormat),
    finance_provisional_combined: (TopicSpec, super::SinkFormat),
}

fn sinks(c: &mut Checker, raw: RawSinks) -> Sinks {
    Sinks {
        dashboard: c.topic("sinks.dashboard", raw.dashboard),
        dead_letter: c.topic("sinks.dead_letter", raw.dead_letter),
        late: c.topic("sinks.late", raw.late),
        audit: c.topic("sinks.audit", raw.audit),
        action_dead_letter: c.topic("sinks.action_dead_letter", raw.action_dead_letter),
        finance_provisional: c.topic("sinks.finance_provisional", raw.finance_provisional),
        finance_close: c.topic("sinks.finance_close", raw.finance_close),
        finance_manifest: c.topic("sinks.finance_manifest", raw.finance_manifest),
        dashboard_combined: c.combined("sinks.dashboard_combined", raw.dashboard_combined),
        finance_provisional_combined: c
            .combined("sinks.finance_provisional_combined", raw.finance_provisional_combined),
    }
}

struct Internal {
    sku_repartition: TopicSpec,
    combine_repartition: TopicSpec,
    idle_skew_ms: i64,
    idle_promise: IdlePromise,
}

fn internal(c: &mut Checker, raw: RawInternal) -> Internal {
    let sku_repartition = c.topic("internal.sku_repartition", raw.sku_repartition);
    let combine_repartition = c.topic("internal.combine_repartition", raw.combine_repartition);
    let idle_skew_ms = c.duration_ms("internal.idle_skew", &raw.idle_skew).unwrap_or(2_000);
    let fence_every_ms = c.positive_ms("internal.fence_every", &raw.fence_every).unwrap_or(20);
    let idle_promise = IdlePromise::parse(&raw.idle_promise, fence_every_ms).unwrap_or_else(|e| {
        c.error("internal.idle_promise", e.to_string());
        IdlePromise::default()
    });
    Internal { sku_repartition, combine_repartition, idle_skew_ms, idle_promise }
}

/// What `[endpoints]` holds besides the strings taken over as they are.
struct EndpointSettings {
    timeout_ms: i64,
    max_in_flight: usize,
    trust: Trust,
}

fn endpoints(c: &mut Checker, raw: &RawEndpoints) -> EndpointSettings {
    let timeout_ms = c.positive_ms("endpoints.timeout", &raw.timeout).unwrap_or(5_000);
    for (path, url) in [("endpoints.action_url", &raw.action_url), ("endpoints.notify_url", &raw.notify_url)] {
        if let Some(u) = url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                c.error(path, format!("`{u}` is not an http(s) URL"));
            }
        }
    }
    let max_in_flight = usize::try_from(raw.max_in_flight).unwrap_or(0);
    let trust = match raw.trust.as_str() {
        "webpki" => Trust::Webpki,
        "system" => Trust::System,
        "both" => Trust::Both,
        "none" => Trust::None,
        other => {
            c.error("endpoints.trust", format!("unknown trust `{other}` (expected webpki | system | both | none)"));
            Trust::Webpki
        }
    };
    if trust == Trust::None && raw.ca_file.is_none() {
        c.error("endpoints.trust", "`none` trusts only endpoints.ca_file, which is not set");
    }
    for (path, file) in [
        ("endpoints.ca_file", &raw.ca_file),
        ("endpoints.client_cert_file", &raw.client_cert_file),
        ("endpoints.client_key_file", &raw.client_key_file),
    ] {
        if file.as_deref().is_some_and(|f| f.trim().is_empty()) {
            c.error(path, "must not be empty; leave the key out instead");
        }
    }
    match (&raw.client_cert_file, &raw.client_key_file) {
        (Some(_), None) => c.error("endpoints.client_key_file", "must be set with endpoints.client_cert_file"),
        (None, Some(_)) => c.error("endpoints.client_cert_file", "must be set with endpoints.client_key_file"),
        _ => {}
    }
    if max_in_flight == 0 {
        c.error("endpoints.max_in_flight", "must be a positive integer");
    }
    EndpointSettings { timeout_ms, max_in_flight, trust }
}

/// Across sections: every topic distinct, and the upsert topics compacted.
fn topics(c: &mut Checker, sources: &Sources, sinks: &Sinks, internal: &Internal) {
    let mut seen = BTreeMap::new();
    for (path, t) in [
        ("sources.orders", &sources.orders),
        ("sources.inventory", &sources.inventory),
        ("sinks.dashboard", &sinks.dashboard),
        ("sinks.dead_letter", &sinks.dead_letter),
        ("sinks.late", &sinks.late),
        ("sinks.audit", &sinks.audit),
        ("sinks.action_dead_letter", &sinks.action_dead_letter),
        ("sinks.finance_provisional", &sinks.finance_provisional),
        ("sinks.finance_close", &sinks.finance_close),
        ("sinks.finance_manifest", &sinks.finance_manifest),
        ("sinks.dashboard_combined", &sinks.dashboard_combined.0),
        ("sinks.finance_provisional_combined", &sinks.finance_provisional_combined.0),
        ("internal.sku_repartition", &internal.sku_repartition),
        ("internal.combine_repartition", &internal.combine_repartition),
    ] {
        if let Some(first) = seen.insert(t.topic.clone(), path) {
            c.error(format!("{path}.topic"), format!("topic `{}` is also used by {first}", t.topic));
        }
    }
    if !sinks.dashboard.compacted {
        c.error("sinks.dashboard.compacted", "the dashboard topic holds upserts and must be compacted");
    }
    for (path, spec, what) in [
        ("sinks.finance_provisional.compacted", &sinks.finance_provisional, "provisional rows are upserts"),
        ("sinks.finance_close.compacted", &sinks.finance_close, "finance rows are keyed by run id"),
        ("sinks.finance_manifest.compacted", &sinks.finance_manifest, "readers take the latest manifest per key"),
        ("sinks.dashboard_combined.compacted", &sinks.dashboard_combined.0, "combined rows are upserts"),
        (
            "sinks.finance_provisional_combined.compacted",
            &sinks.finance_provisional_combined.0,
            "combined rows are upserts",
        ),
    ] {
        if !spec.compacted {
            c.error(path, format!("{what}: the topic must be compacted"));
        }
    }
}

/// `[state]`, durations in milliseconds (`None` where a value was wrong and reported).
struct State {
    dedup_retention: Option<i64>,
    commit_interval: Option<i64>,
    commit_linger: Option<i64>,
    publish_interval: Option<i64>,
    max_batch_records: usize,
}

fn state(c: &mut Checker, raw: RawState) -> State {
    let dedup_retention = c.duration_ms("state.dedup_retention", &raw.dedup_retention);
    let commit_interval = c.positive_ms("state.commit_interval", &raw.commit_interval);
    let commit_linger = c.duration_ms("state.commit_linger", &raw.commit_linger);
    if let (Some(linger), Some(interval)) = (commit_linger, commit_interval) {
        if linger > interval {
            c.error("state.commit_linger", format!("must not exceed state.commit_interval ({interval} ms)"));
        }
    }
    let publish_interval = c.duration_ms("state.publish_interval", &raw.publish_interval);
    let max_batch_records = usize::try_from(raw.max_batch_records).unwrap_or(0);
    if max_batch_records == 0 {
        c.error("state.max_batch_records", "must be a positive integer");
    }
    State { dedup_retention, commit_interval, commit_linger, publish_interval, max_batch_records }
}

/// `[windows.dashboard]` in milliseconds (`None` where a value was wrong and reported).
pub(super) struct Window {
    pub(super) size: Option<i64>,
    pub(super) allowed_lateness: Option<i64>,
    pub(super) grace: Option<i64>,
    pub(super) retention: Option<i64>,
}

fn windows(c: &mut Checker, raw: &RawWindows) -> Window {
    let w = &raw.dashboard;
    let size = c.positive_ms("windows.dashboard.size", &w.size);
    let allowed_lateness = c.duration_ms("windows.dashboard.allowed_lateness", &w.allowed_lateness);
    let grace = c.duration_ms("windows.dashboard.grace", &w.grace);
    let retention = c.duration_ms("windows.dashboard.retention", &w.retention);
    if let (Some(grace), Some(retention)) = (grace, retention) {
        if retention < grace {
            c.error("windows.dashboard.retention", "must be at least the grace period");
        }
    }
    Window { size, allowed_lateness, grace, retention }
}

fn finance(c: &mut Checker, raw: &RawFinance) -> chrono_tz::Tz {
    raw.time_zone.parse::<chrono_tz::Tz>().unwrap_or_else(|_| {
        c.error("finance.time_zone", format!("`{}` is not an IANA time zone", raw.time_zone));
        chrono_tz::Tz::UTC
    })
}
