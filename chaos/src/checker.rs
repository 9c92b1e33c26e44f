//! The SPEC §3 invariants, checked against a clean reference run and against the log itself.
//!
//! - every action of the clean run is delivered by the faulty run, with the same key and
//!   payload (`lost`); no other key, and no key with another payload (`wrong`);
//! - every key is acknowledged (2xx or 409) at least once; POSTs after the first
//!   acknowledgement are duplicates, counted, and a key may have them only if a crash caught
//!   it: a pod process died (SIGKILL, failpoint abort, an exit nobody asked for) after the
//!   key's first acknowledged POST arrived, and that process's own log shows it posting the
//!   key with no stored outcome after (see [`judge`], [`at_risk`]). Any other duplicated key
//!   fails the scenario; a graceful stop excuses nothing;
//! - the final value of every compacted dashboard and provisional finance key equals the
//!   clean run's, byte for byte;
//! - nothing is lost: the dead letters are exactly the records the shared normaliser
//!   rejects, and the dashboard totals equal a recomputation from the log (dedup by
//!   event id, money per store and currency).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

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
    /// When the endpoint had read the whole request.
    pub arrived: Instant,
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
        // A fence (a run with `idle_promise = "fence"`) is no input record.
        if tidemark_topology::fence::is_fence(m.payload()) {
            continue;
        }
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
        let t = totals.entry((e.store.to_string(), c.code().to_string())).or_default();
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

/// How long after the harness saw a process gone the endpoint may still read a request that
/// process wrote before it died (the bytes wait in the socket until the endpoint's task runs).
/// A restarted process needs far longer than this to open its store, be assigned its
/// partitions and POST.
pub const IN_TRANSIT: Duration = Duration::from_millis(250);

/// One line of a pod's log that matters to duplicates.
#[derive(Debug, PartialEq, Eq)]
pub enum Logged {
    /// `tidemark::actions::POSTING_LOG`: the process is about to POST this key.
    Posting(String),
    /// `tidemark::actions::STORED_LOG`: the key's final outcome is durably stored.
    Stored(String),
}

/// Reads a `POSTING_LOG` or `STORED_LOG` line of tracing's default format, e.g.
/// `…  INFO tidemark::actions::deliver: action posting key=oversell:v1:SKU 7:snapshot:… attempt=2`
/// or `… action outcome stored key=… state=Delivered { status: 200 }`. The key is rendered with
/// `Display`, unquoted, and may hold any printable ASCII, spaces, `:`, `|` and `=` included:
/// it runs to the last ` attempt=` (` state=`), the field logged after it. A key rendered
/// with `Debug` (quoted) is unescaped.
pub fn parse_logged(line: &str) -> Option<Logged> {
    use tidemark::actions::{POSTING_LOG, STORED_LOG};
    if let Some(key) = key_field(line, POSTING_LOG, "attempt") {
        return Some(Logged::Posting(key));
    }
    key_field(line, STORED_LOG, "state").map(Logged::Stored)
}

/// The `key` field logged right after `message`, followed by the field `next`.
fn key_field(line: &str, message: &str, next: &str) -> Option<String> {
    let marker = format!("{message} key=");
    let rest = &line[line.find(&marker)? + marker.len()..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return unquote(quoted);
    }
    // A line cut short (none of it after the key) keeps what it has: a key that matches
    // nothing else.
    let end = rest.rfind(&format!(" {next}=")).unwrap_or(rest.len());
    Some(rest[..end].to_string())
}

/// The string of a Rust `Debug`-quoted literal whose opening quote is gone; `None` without a
/// closing quote.
fn unquote(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// The keys a process had under way when its log ends: a `POSTING_LOG` line after the key's
/// last `STORED_LOG` line (or with none). `log` is that one process's output, from its start
/// to its end (a pod's log file holds every process it ran, appended).
pub fn at_risk(log: &str) -> BTreeSet<String> {
    let mut posted = BTreeSet::new();
    for logged in log.lines().filter_map(parse_logged) {
        match logged {
            Logged::Posting(key) => {
                posted.insert(key);
            }
            Logged::Stored(key) => {
                posted.remove(&key);
            }
        }
    }
    posted
}

/// The end of one pod process, as the harness saw it and the process's own log tells it.
#[derive(Debug, Clone)]
pub struct ProcessEnd {
    /// What ended it and when, for the report: `SIGKILL f7-1 at 12.3 s`.
    pub what: String,
    /// When the harness saw the process gone.
    pub at: Instant,
    /// A crash — SIGKILL, a failpoint abort, an exit nobody asked for — may repeat the POSTs
    /// it had under way. A graceful stop (SIGTERM, clean exit) is not one: it excuses nothing.
    pub crash: bool,
    /// [`at_risk`] of its log.
    pub at_risk: BTreeSet<String>,
}

/// A key POSTed again after its first acknowledgement, with the crash that excuses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExcusedKey {
    pub key: String,
    /// Every POST with this key.
    pub posts: usize,
    /// POSTs after the first acknowledged one.
    pub repeated: usize,
    /// The earliest crash after the first acknowledgement that had the key under way.
    pub crash: String,
}

/// A key POSTed again after its first acknowledgement with no crash to excuse it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnexcusedKey {
    pub key: String,
    /// Every POST with this key.
    pub posts: usize,
    /// POSTs after the first acknowledged one.
    pub repeated: usize,
    /// Process ends that had the key under way and do not excuse it: graceful stops, or
    /// crashes before its first acknowledgement arrived.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub under_way_at: Vec<String>,
}

/// Every duplicated key, excused or not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Duplicates {
    /// POSTs after their key's first acknowledged one, over every key.
    pub posts: usize,
    pub excused: Vec<ExcusedKey>,
    pub unexcused: Vec<UnexcusedKey>,
}

/// Ties every duplicate POST to a crash. A key POSTed after its first acknowledged POST is
/// excused only by a crash `c` with the key in `c.at_risk` (the dead process had posted it and
/// not stored its outcome) and `c.at` no earlier than that first acknowledgement's arrival
/// (less [`IN_TRANSIT`]): the crash fell between the acknowledgement and the stored outcome.
/// POSTs before the first acknowledgement are retries (5xx, timeouts, resets), not duplicates.
pub fn judge(actions: &BTreeMap<String, Vec<Post>>, ends: &[ProcessEnd]) -> Duplicates {
    let mut d = Duplicates::default();
    for (key, posts) in actions {
        let Some(first) = posts.iter().position(|p| p.acknowledged) else { continue };
        let repeated = posts.len() - first - 1;
        if repeated == 0 {
            continue;
        }
        d.posts += repeated;
        let acked = posts[first].arrived;
        let after_ack = |e: &ProcessEnd| e.at.checked_add(IN_TRANSIT).is_none_or(|limit| acked <= limit);
        let mut caught: Vec<&ProcessEnd> = ends.iter().filter(|e| e.at_risk.contains(key)).collect();
        caught.sort_by_key(|e| e.at);
        match caught.iter().find(|e| e.crash && after_ack(e)) {
            Some(c) => {
                d.excused.push(ExcusedKey { key: key.clone(), posts: posts.len(), repeated, crash: c.what.clone() })
            }
            None => d.unexcused.push(UnexcusedKey {
                key: key.clone(),
                posts: posts.len(),
                repeated,
                under_way_at: caught.iter().map(|e| e.what.clone()).collect(),
            }),
        }
    }
    d
}

/// A process end in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndSummary {
    pub what: String,
    pub crash: bool,
    /// Keys it had posted with no stored outcome.
    pub keys_under_way: usize,
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
    /// POSTs after their key's first acknowledged one (see [`judge`]).
    pub duplicate_posts: usize,
    /// Duplicated keys that a crash caught under way, each with that crash.
    pub duplicate_keys_excused: Vec<ExcusedKey>,
    /// Duplicated keys no crash explains: any fails the scenario.
    pub duplicate_keys_unexcused: Vec<UnexcusedKey>,
    /// Every faulty pod process the harness saw end (crash or graceful stop).
    pub process_ends: Vec<EndSummary>,
    /// Redeliveries the faulty pods logged (`tidemark_dispatch_redeliveries_total`), for
    /// reading only: whether a repeat is allowed is decided key by key.
    pub redeliveries: usize,
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
    ends: &[ProcessEnd],
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
    // acknowledged. A duplicate is a POST after the key was acknowledged once, and needs a
    // crash that caught the key under way.
    let duplicates = judge(&faulty.actions, ends);
    report.duplicate_posts = duplicates.posts;
    report.duplicate_keys_excused = duplicates.excused;
    report.duplicate_keys_unexcused = duplicates.unexcused;
    report.process_ends = ends
        .iter()
        .map(|e| EndSummary { what: e.what.clone(), crash: e.crash, keys_under_way: e.at_risk.len() })
        .collect();
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
        && report.duplicate_keys_unexcused.is_empty()
        && report.dashboard_mismatches == 0
        && report.finance_keys > 0
        && report.finance_mismatches == 0
        && report.dead_letters_missing == 0
        && report.dead_letters_unexpected == 0
        && report.totals_match;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys as `topology::sku::intent::key` builds them; skus are printable ASCII with inner
    /// spaces allowed, so a key may hold `|`, `=` and even the next field's name.
    const KEYS: [&str; 4] = [
        "oversell:v1:SKU-1:snapshot:2026-11-28T14:59:00.000Z",
        "low_stock:v3:A|B=c:window:2026-11-28T15:00:00.000Z",
        "velocity_spike:v1:SKU 7 x:window:2026-11-28T15:00:00.000Z",
        "oversell:v1:odd attempt=9 state=x:snapshot:2026-11-28T14:59:00.000Z",
    ];

    fn posting(key: &str, attempt: u32) -> String {
        format!(
            "2026-11-28T15:00:01.123456Z  INFO tidemark::actions::deliver: action posting key={key} attempt={attempt}"
        )
    }

    fn stored(key: &str, state: &str) -> String {
        format!("2026-11-28T15:00:01.223456Z  INFO tidemark::actions::deliver: action outcome stored key={key} state={state}")
    }

    #[test]
    fn a_posting_line_gives_its_key_whatever_characters_the_key_holds() {
        for key in KEYS {
            assert_eq!(parse_logged(&posting(key, 2)), Some(Logged::Posting(key.to_string())), "{key}");
        }
    }

    #[test]
    fn a_stored_line_gives_its_key_before_the_debug_rendered_state() {
        for state in ["Delivered { status: 200 }", "Conflict", "Failed { status: 400 }"] {
            for key in KEYS {
                assert_eq!(parse_logged(&stored(key, state)), Some(Logged::Stored(key.to_string())), "{key} {state}");
            }
        }
    }

    #[test]
    fn a_key_logged_quoted_is_read_unescaped() {
        let line = r#"x  INFO tidemark::actions::deliver: action posting key="a:v1:say \"hi\" \\ there:w:t" attempt=1"#;
        assert_eq!(parse_logged(line), Some(Logged::Posting(r#"a:v1:say "hi" \ there:w:t"#.to_string())));
    }

    #[test]
    fn other_lines_are_not_read() {
        for line in [
            "x  INFO tidemark::actions::deliver: action redelivered after restart key=k attempts=2",
            "x  INFO tidemark::stream: restored partition=orders[0] next_offset=10 took_ms=1",
            "",
        ] {
            assert_eq!(parse_logged(line), None, "{line}");
        }
    }

    #[test]
    fn keys_posted_and_not_stored_when_the_process_ended_are_at_risk() {
        let [a, b, c, d] = KEYS;
        let log = [
            posting(a, 1),
            stored(a, "Delivered { status: 200 }"),
            // Posted, 503, posted again, stored: done.
            posting(b, 1),
            posting(b, 2),
            stored(b, "Conflict"),
            // Posted, never stored.
            posting(c, 1),
            // Stored, then (a redelivery) posted again and not stored.
            stored(d, "Delivered { status: 200 }"),
            posting(d, 2),
            "x  INFO tidemark::stream: restored partition=orders[0] next_offset=10 took_ms=1".to_string(),
        ]
        .join("\n");
        assert_eq!(at_risk(&log), BTreeSet::from([c.to_string(), d.to_string()]));
        assert!(at_risk("").is_empty());
    }

    fn post(arrived: Instant, acknowledged: bool) -> Post {
        Post { body: b"{}".to_vec(), acknowledged, arrived }
    }

    fn end(what: &str, at: Instant, crash: bool, keys: &[&str]) -> ProcessEnd {
        ProcessEnd { what: what.to_string(), at, crash, at_risk: keys.iter().map(|k| k.to_string()).collect() }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_key_posted_again_after_a_crash_that_caught_it_unstored_is_excused() {
        let t0 = Instant::now();
        let actions = BTreeMap::from([("k".to_string(), vec![post(secs(t0, 1), true), post(secs(t0, 5), true)])]);
        let ends = [
            end("SIGTERM p-0 at 0.5 s", t0, false, &[]),
            end("SIGKILL p-0 at 2.0 s", secs(t0, 2), true, &["k"]),
            end("SIGKILL p-0 at 3.0 s", secs(t0, 3), true, &["k"]),
        ];
        let d = judge(&actions, &ends);
        assert_eq!(d.posts, 1);
        assert!(d.unexcused.is_empty());
        assert_eq!(
            d.excused,
            vec![ExcusedKey { key: "k".into(), posts: 2, repeated: 1, crash: "SIGKILL p-0 at 2.0 s".into() }]
        );
    }

    #[test]
    fn a_key_posted_again_with_no_crash_between_its_ack_and_its_stored_outcome_fails_the_scenario() {
        let t0 = Instant::now();
        let actions = BTreeMap::from([(
            "k".to_string(),
            vec![post(secs(t0, 1), true), post(secs(t0, 6), true), post(secs(t0, 7), false)],
        )]);
        // A crash after the ack, but the key's outcome was stored by then.
        let ends = [end("SIGKILL p-0 at 2.0 s", secs(t0, 2), true, &["other"])];
        let d = judge(&actions, &ends);
        assert_eq!(d.posts, 2);
        assert!(d.excused.is_empty());
        assert_eq!(d.unexcused, vec![UnexcusedKey { key: "k".into(), posts: 3, repeated: 2, under_way_at: vec![] }]);
    }

    #[test]
    fn a_crash_before_the_keys_first_acknowledgement_does_not_excuse_it() {
        let t0 = Instant::now();
        // Posted and killed unanswered at 2 s; acknowledged at 5 s by the next process, then
        // posted again at 9 s with no crash since.
        let actions = BTreeMap::from([(
            "k".to_string(),
            vec![post(secs(t0, 1), false), post(secs(t0, 5), true), post(secs(t0, 9), true)],
        )]);
        let ends = [end("SIGKILL p-0 at 2.0 s", secs(t0, 2), true, &["k"])];
        let d = judge(&actions, &ends);
        assert!(d.excused.is_empty());
        assert_eq!(d.unexcused[0].under_way_at, vec!["SIGKILL p-0 at 2.0 s".to_string()]);
    }

    #[test]
    fn a_request_the_endpoint_reads_just_after_the_kill_still_counts_as_before_it() {
        let t0 = Instant::now();
        let killed = secs(t0, 2);
        let just_after = killed + IN_TRANSIT - Duration::from_millis(1);
        let actions = BTreeMap::from([("k".to_string(), vec![post(just_after, true), post(secs(t0, 4), true)])]);
        let d = judge(&actions, &[end("SIGKILL p-0 at 2.0 s", killed, true, &["k"])]);
        assert_eq!(d.excused.len(), 1);
        let late = killed + IN_TRANSIT + Duration::from_millis(1);
        let actions = BTreeMap::from([("k".to_string(), vec![post(late, true), post(secs(t0, 4), true)])]);
        assert_eq!(judge(&actions, &[end("SIGKILL p-0 at 2.0 s", killed, true, &["k"])]).unexcused.len(), 1);
    }

    #[test]
    fn a_graceful_stop_with_the_key_under_way_excuses_nothing_and_is_named() {
        let t0 = Instant::now();
        let actions = BTreeMap::from([("k".to_string(), vec![post(secs(t0, 1), true), post(secs(t0, 3), true)])]);
        let d = judge(&actions, &[end("SIGTERM p-0 at 2.0 s: clean exit", secs(t0, 2), false, &["k"])]);
        assert!(d.excused.is_empty());
        assert_eq!(d.unexcused[0].under_way_at, vec!["SIGTERM p-0 at 2.0 s: clean exit".to_string()]);
    }

    #[test]
    fn retries_before_the_first_acknowledgement_are_not_duplicates() {
        let t0 = Instant::now();
        let actions = BTreeMap::from([
            ("retried".to_string(), vec![post(t0, false), post(secs(t0, 1), false), post(secs(t0, 2), true)]),
            ("never".to_string(), vec![post(t0, false)]),
        ]);
        assert_eq!(judge(&actions, &[]), Duplicates::default());
    }
}
