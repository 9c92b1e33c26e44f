//! The SPEC §3 invariants, checked against a clean reference run and against the log itself.
//!
//! - every action of the clean run is delivered by the faulty run, with the same key and
//!   payload (`lost`); no other key, and no key with another payload (`wrong`);
//! - every key is acknowledged (2xx or 409) at least once; POSTs after the first
//!   acknowledgement are duplicates, counted, and allowed only up to the redeliveries the
//!   faulty processes counted after restarts, plus every POST after a state directory was
//!   wiped;
//! - the final value of every compacted dashboard and provisional finance key equals the
//!   clean run's, byte for byte;
//! - nothing is lost: the dead letters are exactly the records the shared normaliser
//!   rejects, and the dashboard totals equal a recomputation from the log (dedup by
//!   event id, money per store and currency).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rdkafka::message::Headers;
use rdkafka::Message;
use rust_decimal::Decimal;
use serde::Serialize;
use tidemark::kafka::reader::read_topic;
use tidemark::kafka::KafkaSettings;
use tidemark_topology::dashboard::DashboardRecord;
use tidemark_topology::event::EventKind;
use tidemark_topology::normalize::normalize_order;

use crate::history::RunTopics;

/// One POST as the endpoint saw it.
pub struct Post {
    pub body: Vec<u8>,
    /// The endpoint answered 2xx or 409 and the client could see it.
    pub acknowledged: bool,
}

/// What one run produced.
pub struct RunOutputs {
    /// Idempotency key → every POST made with it, in arrival order.
    pub actions: BTreeMap<String, Vec<Post>>,
    pub dashboard: BTreeMap<Vec<u8>, Vec<u8>>,
    pub finance: BTreeMap<Vec<u8>, Vec<u8>>,
    pub dead_letters: BTreeSet<(i32, i64)>,
    pub late: usize,
}

type Totals = BTreeMap<(String, String), (u64, Decimal, Decimal, Decimal)>;

pub fn collect(
    settings: &KafkaSettings,
    topics: &RunTopics,
    actions: BTreeMap<String, Vec<Post>>,
) -> anyhow::Result<RunOutputs> {
    let latest = |topic: &str| -> anyhow::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        Ok(read_topic(settings, topic)?
            .iter()
            .map(|m| (m.key().unwrap_or_default().to_vec(), m.payload().unwrap_or_default().to_vec()))
            .collect())
    };
    let dashboard = latest(&topics.dashboard)?;
    let finance = latest(&topics.finance)?;
    let mut dead_letters = BTreeSet::new();
    for m in read_topic(settings, &topics.dead_letter)? {
        let header = |name: &str| -> Option<String> {
            let h = m.headers()?;
            (0..h.count())
                .map(|i| h.get(i))
                .find(|h| h.key == name)?
                .value
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        if header("tidemark.source.topic").as_deref() == Some(topics.orders.as_str()) {
            let p = header("tidemark.source.partition").and_then(|v| v.parse().ok()).unwrap_or(-1);
            let o = header("tidemark.source.offset").and_then(|v| v.parse().ok()).unwrap_or(-1);
            dead_letters.insert((p, o));
        }
    }
    let late = read_topic(settings, &topics.late)?.len();
    Ok(RunOutputs { actions, dashboard, finance, dead_letters, late })
}

/// Ground truth from the log: rejected coordinates and dashboard totals.
pub fn expectations(settings: &KafkaSettings, orders: &str) -> anyhow::Result<(BTreeSet<(i32, i64)>, Totals)> {
    let mut rejected = BTreeSet::new();
    let mut totals: Totals = BTreeMap::new();
    let mut seen = HashSet::new();
    for m in read_topic(settings, orders)? {
        let append = m.timestamp().to_millis().unwrap_or(0);
        let e = match normalize_order(m.payload().unwrap_or_default(), append) {
            Ok(e) => e,
            Err(_) => {
                rejected.insert((m.partition(), m.offset()));
                continue;
            }
        };
        if !seen.insert(e.event_id.clone()) || e.kind == EventKind::Shipped {
            continue;
        }
        let Some(c) = e.currency else { continue };
        let t = totals.entry((e.store.clone(), c.code().to_string())).or_default();
        match e.kind {
            EventKind::Placed => {
                t.0 += 1;
                t.1 += e.lines_amount();
            }
            EventKind::Cancelled => t.2 += e.lines_amount(),
            EventKind::Refunded => t.3 += e.refund_amount.unwrap_or_default(),
            EventKind::Shipped => {}
        }
    }
    Ok((rejected, totals))
}

fn dashboard_totals(d: &BTreeMap<Vec<u8>, Vec<u8>>) -> Totals {
    let mut totals: Totals = BTreeMap::new();
    for v in d.values() {
        let Ok(r) = serde_json::from_slice::<DashboardRecord>(v) else { continue };
        let t = totals.entry((r.store, r.currency)).or_default();
        t.0 += r.figures.orders;
        t.1 += r.figures.gross;
        t.2 += r.figures.cancelled;
        t.3 += r.figures.refunded;
    }
    totals
}

#[derive(Debug, Default, Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    pub seed: u64,
    pub faults: Vec<String>,
    pub kills: u32,
    pub actions_checked: usize,
    pub lost: Vec<String>,
    pub wrong: Vec<String>,
    pub duplicate_posts: usize,
    /// Redeliveries the faulty pods logged (`tidemark_dispatch_redeliveries_total`).
    pub redeliveries: usize,
    pub allowed_duplicate_posts: usize,
    pub dashboard_keys: usize,
    pub dashboard_mismatches: usize,
    pub finance_keys: usize,
    pub finance_mismatches: usize,
    pub dead_letters_missing: usize,
    pub dead_letters_unexpected: usize,
    pub late_records: usize,
    pub totals_match: bool,
    pub passed: bool,
    pub error: Option<String>,
}

pub fn check(
    report: &mut ScenarioReport,
    reference: &RunOutputs,
    faulty: &RunOutputs,
    expected: &(BTreeSet<(i32, i64)>, Totals),
) {
    report.actions_checked = reference.actions.len();
    for (key, posts) in &reference.actions {
        match faulty.actions.get(key) {
            None => report.lost.push(key.clone()),
            Some(got) => {
                if got.iter().any(|p| p.body != posts[0].body) {
                    report.wrong.push(format!("{key}: payload differs from the clean run"));
                }
                if !got.iter().any(|p| p.acknowledged) {
                    report.lost.push(format!("{key}: never acknowledged by the endpoint"));
                }
            }
        }
    }
    for key in faulty.actions.keys().filter(|k| !reference.actions.contains_key(*k)) {
        report.wrong.push(format!("{key}: not produced by the clean run"));
    }
    // Retries after 5xx, timeouts and resets are not duplicates: the endpoint had not
    // acknowledged. A duplicate is a POST after the key was acknowledged once.
    report.duplicate_posts = faulty
        .actions
        .values()
        .map(|posts| posts.iter().position(|p| p.acknowledged).map_or(0, |first| posts.len() - first - 1))
        .sum();
    report.dashboard_keys = reference.dashboard.len();
    let keys: BTreeSet<&Vec<u8>> = reference.dashboard.keys().chain(faulty.dashboard.keys()).collect();
    report.dashboard_mismatches =
        keys.into_iter().filter(|k| reference.dashboard.get(*k) != faulty.dashboard.get(*k)).count();
    report.finance_keys = reference.finance.len();
    let keys: BTreeSet<&Vec<u8>> = reference.finance.keys().chain(faulty.finance.keys()).collect();
    report.finance_mismatches =
        keys.into_iter().filter(|k| reference.finance.get(*k) != faulty.finance.get(*k)).count();
    let (rejected, totals) = expected;
    report.dead_letters_missing = rejected.difference(&faulty.dead_letters).count();
    report.dead_letters_unexpected = faulty.dead_letters.difference(rejected).count();
    report.late_records = faulty.late;
    report.totals_match = dashboard_totals(&faulty.dashboard) == *totals;
    report.passed = report.error.is_none()
        && report.lost.is_empty()
        && report.wrong.is_empty()
        && report.duplicate_posts <= report.allowed_duplicate_posts
        && report.dashboard_mismatches == 0
        && report.finance_keys > 0
        && report.finance_mismatches == 0
        && report.dead_letters_missing == 0
        && report.dead_letters_unexpected == 0
        && report.totals_match;
}
