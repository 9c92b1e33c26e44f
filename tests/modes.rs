//! Black-box tests of the three modes against a real Kafka broker: provisional finance in the
//! stream, `tidemark microbatch` (slices, crash and resume) and `tidemark shadow`.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use rdkafka::Message;
use rust_decimal::Decimal;
use serde_json::Value;
use tidemark_topology::event::EventKind;
use tidemark_topology::normalize::normalize_order;

/// 2 s of simulated time per record: 6,000 records span 3 h 20 min.
const PART: &[&str] = &["--events", "6000", "--rate", "0.5", "--event-bytes", "256"];

fn tidemark(args: &[&str], t: &Topo, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).args(["--bootstrap", &bootstrap(), "--topology"]).arg(&t.path);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn tidemark")
}

fn ok(out: Output, what: &str) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

type Money = (u64, u64, Decimal, Decimal, Decimal, Decimal);

fn decimal(v: &Value, f: &str) -> Decimal {
    v[f].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{f} of {v} is not a decimal string"))
}

fn tokyo_day(event_time_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(event_time_ms)
        .expect("time")
        .with_timezone(&chrono_tz::Asia::Tokyo)
        .date_naive()
        .to_string()
}

/// The SPEC's finance definitions over the whole log, written independently of the code
/// under test: normalise, count an event id once per partition, Tokyo date of event time,
/// sums per day, store and currency as `(orders, events, gross, cancelled, refunded, net)`.
fn recompute(orders: &str) -> BTreeMap<String, Money> {
    let mut want: BTreeMap<String, Money> = BTreeMap::new();
    let mut seen = HashSet::new();
    for m in read(orders) {
        let Ok(e) = normalize_order(m.payload().unwrap_or_default(), m.timestamp().to_millis().unwrap_or(0)) else {
            continue;
        };
        if !seen.insert((m.partition(), e.event_id.clone())) || e.kind == EventKind::Shipped {
            continue;
        }
        let Some(c) = e.currency else { continue };
        let w = want.entry(format!("{}|{}|{}", tokyo_day(e.event_time_ms), e.store, c.code())).or_default();
        w.1 += 1;
        match e.kind {
            EventKind::Placed => {
                w.0 += 1;
                w.2 += e.lines_amount();
            }
            EventKind::Cancelled => w.3 += e.lines_amount(),
            EventKind::Refunded => w.4 += e.refund_amount.unwrap_or_default(),
            EventKind::Shipped => {}
        }
        w.5 = w.2 - w.3 - w.4;
    }
    want
}

/// Latest provisional partials summed over source partitions, checking each row's `net`
/// and that `version` counts its events.
fn provisional_totals(topic: &str) -> BTreeMap<String, Money> {
    let mut got: BTreeMap<String, Money> = BTreeMap::new();
    for v in compacted(topic).values() {
        let r: Value = serde_json::from_slice(v).expect("provisional JSON");
        assert_eq!(decimal(&r, "net"), decimal(&r, "gross") - decimal(&r, "cancelled") - decimal(&r, "refunded"));
        assert_eq!(r["version"], r["events"], "{r}");
        let key = format!(
            "{}|{}|{}",
            r["day"].as_str().unwrap_or(""),
            r["store"].as_str().unwrap_or(""),
            r["currency"].as_str().unwrap_or("")
        );
        let w = got.entry(key).or_default();
        w.0 += r["orders"].as_u64().expect("orders");
        w.1 += r["events"].as_u64().expect("events");
        w.2 += decimal(&r, "gross");
        w.3 += decimal(&r, "cancelled");
        w.4 += decimal(&r, "refunded");
        w.5 += decimal(&r, "net");
    }
    got
}

#[test]
fn the_stream_publishes_provisional_finance_per_business_day_equal_to_an_independent_recomputation() {
    let orders = unique("modes-fin");
    let t = topology(&orders, &unique("run-modes-fin"));
    create_topics(&t);
    // 12,000 records from 2026-11-28T10:00Z: the Tokyo day changes at 15:00Z, inside the log,
    // with late events (up to 6 h) and duplicates on both sides.
    generate(
        &orders,
        &[
            "--events",
            "12000",
            "--rate",
            "0.5",
            "--event-bytes",
            "256",
            "--start",
            "2026-11-28T10:00:00Z",
            "--seed",
            "21",
        ],
    );
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&t, state.path(), &unique("g"));
    assert!(read(&t.late).is_empty(), "nothing here is beyond the 7 h retention");

    let got = provisional_totals(&t.finance_provisional);
    let want = recompute(&orders);
    let days: HashSet<&str> = want.keys().filter_map(|k| k.split('|').next()).collect();
    assert!(days.contains("2026-11-28") && days.contains("2026-11-29"), "the log spans two Tokyo days: {days:?}");
    assert_eq!(got, want);

    // Every record of a key carries a higher version than the one before: late events
    // revised rows in place instead of appending totals.
    let mut last: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut revised = 0;
    for m in read(&t.finance_provisional) {
        let v: Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("json");
        let version = v["version"].as_u64().expect("version");
        if let Some(prev) = last.insert(m.key().unwrap_or_default().to_vec(), version) {
            assert!(version > prev, "versions of {v} must increase ({prev} then {version})");
            revised += 1;
        }
    }
    assert!(revised > 0);
}

/// Report lines of a micro-batch run, by slice number.
fn slices(report: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(report).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).expect("report line JSON")).collect()
}

fn span(slice: &Value) -> i64 {
    slice["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .map(|r| r["to"].as_i64().unwrap_or(0) - r["from"].as_i64().unwrap_or(0))
        .sum()
}

#[test]
fn a_microbatch_killed_mid_slice_resumes_the_planned_slice_and_its_rows_equal_the_streams() {
    let orders = unique("modes-mb");
    let t = topology(&orders, &unique("run-modes-mb"));
    create_topics(&t);
    let (dash, fin) = (format!("{}.mb", t.dashboard), format!("{}.mb", t.finance_provisional));
    let state = tempfile::tempdir().expect("tmp");
    let report = state.path().join("slices.jsonl");
    let mb_state = state.path().join("mb");
    let mb = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["microbatch", "--every", "300ms", "--no-side-outputs", "--create-topics"];
        args.extend(["--dashboard-topic", &dash, "--finance-topic", &fin]);
        args.extend(["--report", report.to_str().expect("utf8 path")]);
        args.extend(["--state-dir", mb_state.to_str().expect("utf8 path")]);
        args.extend(extra);
        tidemark(&args, &t, env)
    };

    generate(&orders, &[PART, &["--seed", "31", "--start", "2026-11-28T00:00:00Z"]].concat());
    ok(mb(&["--max-slices", "1"], &[]), "first slice");
    generate(&orders, &[PART, &["--seed", "32", "--start", "2026-11-28T03:20:00Z"]].concat());
    let crashed = mb(&["--max-slices", "1"], &[("TIDEMARK_FAILPOINTS", "microbatch.before_flush=1")]);
    assert!(!crashed.status.success(), "the failpoint aborts the second slice after its rows were sent");
    assert_eq!(slices(&report).len(), 1, "the second slice never committed");
    // Appended after the crash: must not enter the resumed slice, only the next one.
    generate(&orders, &[PART, &["--seed", "33", "--start", "2026-11-28T06:40:00Z"]].concat());
    ok(mb(&["--exit-when-idle"], &[]), "resumed run");

    let s = slices(&report);
    let numbers: Vec<u64> = s.iter().map(|l| l["slice"].as_u64().unwrap_or(0)).collect();
    assert_eq!(numbers, [1, 2, 3, 4], "{s:?}");
    assert_eq!((s[1]["resumed"].as_bool(), s[2]["resumed"].as_bool()), (Some(true), Some(false)));
    let spans: Vec<i64> = s.iter().map(span).collect();
    assert_eq!(spans, [6000, 6000, 6000, 0], "one generated part per slice; the resumed slice kept its planned end");
    assert_eq!(span(&s[3]), 0);
    for l in &s {
        assert!(l["duration_ms"].is_u64() && l["deadline_ms"] == 300_000 && l["within_deadline"] == true, "{l}");
    }

    // The stream over the same log publishes the same final rows, byte for byte.
    run_to_end(&t, state.path().join("stream").as_path(), &unique("g"));
    assert_eq!(compacted(&dash), compacted(&t.dashboard));
    assert_eq!(compacted(&fin), compacted(&t.finance_provisional));
    // Each slice replaced rows with their final version in it: per key, versions never go
    // back (the re-run slice may repeat what the killed one had sent, byte for byte).
    let mut last: BTreeMap<Vec<u8>, (u64, Vec<u8>)> = BTreeMap::new();
    for m in read(&dash) {
        let value = m.payload().unwrap_or_default().to_vec();
        let v: Value = serde_json::from_slice(&value).expect("json");
        let version = v["version"].as_u64().expect("version");
        if let Some((prev, prev_value)) = last.insert(m.key().unwrap_or_default().to_vec(), (version, value.clone())) {
            assert!(version > prev || (version == prev && value == prev_value), "{v} after version {prev}");
        }
    }
}

#[test]
fn a_microbatch_that_is_behind_catches_up_in_slices_no_larger_than_its_cap_with_the_streams_rows() {
    let orders = unique("modes-mb-cap");
    let t = topology(&orders, &unique("run-modes-mb-cap"));
    create_topics(&t);
    let (dash, fin) = (format!("{}.mb", t.dashboard), format!("{}.mb", t.finance_provisional));
    let state = tempfile::tempdir().expect("tmp");
    let report = state.path().join("slices.jsonl");
    generate(&orders, &[PART, &["--seed", "34", "--start", "2026-11-28T00:00:00Z"]].concat());
    let args = [
        "microbatch",
        "--every",
        "300ms",
        "--no-side-outputs",
        "--create-topics",
        "--max-slice-records",
        "1000",
        "--exit-when-idle",
    ];
    let mb_state = state.path().join("mb");
    let paths = ["--dashboard-topic", &dash, "--finance-topic", &fin, "--state-dir", mb_state.to_str().expect("utf8")];
    ok(tidemark(&[&args[..], &paths, &["--report", report.to_str().expect("utf8")]].concat(), &t, &[]), "microbatch");

    // 1000 records a slice over 4 partitions: at most 250 of each, consecutive, and together
    // the whole log.
    let s = slices(&report);
    assert!(s.len() >= 7, "6000 records need at least 6 capped slices and an idle one: {s:?}");
    let mut next: BTreeMap<i64, i64> = BTreeMap::new();
    for l in &s {
        for r in l["ranges"].as_array().expect("ranges") {
            let (p, from, to) = (count(r, "partition") as i64, count(r, "from") as i64, count(r, "to") as i64);
            assert!(to - from <= 250, "partition {p} got {} records in slice {}", to - from, l["slice"]);
            assert_eq!(from, *next.get(&p).unwrap_or(&0), "slices of partition {p} are consecutive");
            next.insert(p, to);
        }
    }
    assert_eq!(s.iter().map(span).sum::<i64>(), 6000, "the slices cover the whole log");
    run_to_end(&t, state.path().join("stream").as_path(), &unique("g"));
    assert_eq!(compacted(&dash), compacted(&t.dashboard));
    assert_eq!(compacted(&fin), compacted(&t.finance_provisional));
}

fn produce_one(topic: &str, key: &[u8], value: &[u8]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = settings().client_config().create().expect("producer");
    producer.send(BaseRecord::to(topic).partition(0).key(key).payload(value)).expect("send");
    producer.flush(std::time::Duration::from_secs(30)).expect("flush");
}

#[test]
fn shadow_replay_finds_no_unexplained_mismatch_and_explains_events_beyond_retention() {
    let orders = unique("modes-shadow");
    let t = topology(&orders, &unique("run-modes-shadow"));
    // Rules that fire on this history, in shadow mode (no endpoint): the action path has keys.
    let text = std::fs::read_to_string(&t.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    std::fs::write(&t.path, text[..cut].to_string() + &firing_rules("shadow", "shadow", "shadow")).expect("write");
    create_topics(&t);
    let history = ["--events", "15000", "--rate", "0.5", "--event-bytes", "256", "--seed", "41"];
    generate(&orders, &[&history[..], &["--skus", "20", "--inventory-every", "150"]].concat());
    // 8 h behind everything else: past the 7 h window retention when it arrives.
    let v = r#"{"schema_version":1,"event_id":"very-late","order_id":"o-very-late","event_type":"order_placed","event_time":"2026-11-28T00:00:30Z","store":"tokyo-01","currency":"JPY","lines":[{"sku":"SKU-1","qty":1,"unit_price":"1000"}]}"#;
    produce_one(&orders, b"o-very-late", v.as_bytes());
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("shadow.json");
    let out = tidemark(
        &[
            "shadow",
            "--range",
            "end",
            "--slices",
            "5",
            "--stream-commit-records",
            "250",
            "--json",
            json.to_str().expect("utf8"),
        ],
        &t,
        &[],
    );
    let stdout = ok(out, "shadow");
    assert!(stdout.contains("result: every mismatch explained"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).expect("report file")).expect("report JSON");
    assert_eq!(r["unexplained"], 0);
    let comparisons = r["comparisons"].as_array().expect("comparisons");
    assert_eq!(comparisons.len(), 5);
    // Byte-identical: stream and micro-batch rows; the action path's keys and payloads at the
    // stream's cadence and in one whole turn.
    for c in [&comparisons[0], &comparisons[1], &comparisons[4]] {
        assert!(count(c, "mismatches") == 0 && count(c, "keys") > 0, "{comparisons:?}");
    }
    assert_eq!(comparisons[4]["name"], "actions per idempotency key: stream vs batch");
    let actions = &r["actions"];
    assert_eq!(actions["compared"], true, "{actions}");
    assert!(count(&actions["stream"], "turns") > count(&actions["batch"], "turns"), "{actions}");
    assert_eq!(count(&actions["stream"], "actions"), count(&comparisons[4], "keys"), "{actions}");
    assert_eq!(count(&actions["stream"], "buffered") + count(&actions["batch"], "buffered"), 0, "{actions}");
    // The very late sale: in the batch, not in the stream, in both the finance day and its
    // dashboard window, every differing field explained by the late output.
    let mismatches = r["mismatches"].as_array().expect("mismatches");
    let fin: Vec<&Value> = mismatches.iter().filter(|m| m["comparison"] == "finance batch/stream").collect();
    assert!(fin.iter().any(|m| m["key"] == "2026-11-28|tokyo-01|JPY" && m["field"] == "gross"), "{fin:?}");
    let dash = mismatches.iter().filter(|m| m["comparison"] == "dashboard batch/stream");
    assert!(dash.clone().any(|m| m["key"] == "2026-11-28T00:00:00.000Z|tokyo-01|JPY"), "{mismatches:?}");
    assert!(mismatches
        .iter()
        .all(|m| m["explained"] == true && m["reasons"][0].as_str().is_some_and(|s| s.starts_with("late_output: −"))));
    assert!(count(&r["stream"], "late_records") >= 1);
    let rev = &r["revisions_dashboard"];
    assert!(count(rev, "microbatch") < count(rev, "stream"), "{rev}");
    assert!(count(rev, "max_per_key_microbatch") <= 5, "{rev}");
}

#[test]
fn shadow_over_a_range_too_large_for_the_action_replay_says_the_actions_were_not_compared() {
    let orders = unique("modes-shadow-bound");
    let t = topology(&orders, &unique("run-modes-shadow-bound"));
    create_topics(&t);
    generate(&orders, &["--events", "2000", "--rate", "5", "--event-bytes", "256", "--seed", "43"]);
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("shadow.json");
    let out = tidemark(
        &["shadow", "--range", "end", "--actions-max-records", "1999", "--json", json.to_str().expect("utf8")],
        &t,
        &[],
    );
    let stdout = ok(out, "shadow");
    assert!(stdout.contains("actions:     NOT COMPARED: the orders range and the inventory log hold"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).expect("report file")).expect("report JSON");
    let actions = &r["actions"];
    assert_eq!(actions["compared"], false, "{actions}");
    let why = actions["not_compared"].as_str().expect("a reason");
    assert!(why.contains("more than --actions-max-records 1999"), "{why}");
    assert!(actions.get("stream").is_none() && actions.get("batch").is_none(), "{actions}");
    // The four other comparisons still run; none of them is about actions.
    let comparisons = r["comparisons"].as_array().expect("comparisons");
    assert_eq!(comparisons.len(), 4, "{comparisons:?}");
    assert!(comparisons.iter().all(|c| !c["name"].as_str().unwrap_or("").starts_with("actions")));
    assert_eq!(r["unexplained"], 0);
}

/// A count in a report: a missing or non-numeric field fails the test instead of comparing
/// as `None`, which orders below every `Some`.
fn count(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("`{field}` missing or not a count in {v}"))
}
