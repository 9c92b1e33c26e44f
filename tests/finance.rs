//! Black-box tests of the finance close (`tidemark batch close|adjust|show`) against a real
//! Kafka broker.
//!
//! The generated history starts at 2026-11-28T00:00:00Z and advances 2 s of simulated time
//! per record (`--rate 0.5`): 40,000 records span until about 22:13Z, so the end of the
//! Tokyo business day 2026-11-28 (15:00Z) falls inside it, with late events and duplicates
//! on both sides.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Output};
use std::time::Duration;

use chrono::NaiveDate;
use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;
use rust_decimal::Decimal;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tidemark_topology::event::EventKind;
use tidemark_topology::normalize::normalize_order;

const DAY: &str = "2026-11-28";
const GEN: &[&str] = &["--events", "40000", "--rate", "0.5", "--event-bytes", "256"];

/// `tidemark batch <sub> --topology T --business-day DAY <args>` with extra environment.
fn batch(t: &Topo, sub: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(["batch", sub, "--bootstrap", &bootstrap(), "--business-day", DAY, "--topology"]).arg(&t.path).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn tidemark batch")
}

fn batch_ok(t: &Topo, sub: &str, args: &[&str]) -> (String, String) {
    let out = batch(t, sub, args, &[]);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "batch {sub} {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    (stdout, stderr)
}

/// A manifest as printed by `close`/`adjust`: parsed, and its exact bytes.
struct Printed {
    json: Value,
    bytes: Vec<u8>,
}

fn printed(stdout: &str) -> Printed {
    let line = stdout.trim_end_matches('\n');
    Printed { json: serde_json::from_str(line).expect("a manifest on stdout"), bytes: line.as_bytes().to_vec() }
}

/// Closes the day and returns the manifest it printed.
fn close(t: &Topo, args: &[&str]) -> Printed {
    printed(&batch_ok(t, "close", args).0)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A fresh orders topic with `GEN` generated into it; returns the topology and gen's summary.
fn history(name: &str, seed: &str) -> (Topo, Value) {
    let orders = unique(name);
    let t = topology(&orders, &unique(&format!("run-{name}")));
    create_topics(&t);
    let summary = generate(&orders, &[GEN, &["--seed", seed]].concat());
    (t, summary)
}

/// The published manifest of the day, as bytes.
fn published(t: &Topo, key: &str) -> Option<Vec<u8>> {
    compacted(&t.finance_manifest).remove(key.as_bytes())
}

/// The latest rows under a run's prefix: key → value.
fn rows(t: &Topo, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    compacted(&t.finance_close)
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).expect("utf8 key"), v))
        .filter(|(k, _)| k.starts_with(&format!("{prefix}|")))
        .collect()
}

type Totals = BTreeMap<(String, String), (u64, Decimal, Decimal, Decimal)>;

/// The rows as `(store, currency) → (orders, gross, cancelled, refunded)`, checking `net`.
fn totals(rows: &BTreeMap<String, Vec<u8>>) -> Totals {
    rows.values()
        .map(|v| {
            let r: Value = serde_json::from_slice(v).expect("row JSON");
            let d = |f: &str| r[f].as_str().and_then(|s| s.parse::<Decimal>().ok()).expect("decimal string");
            assert_eq!(d("net"), d("gross") - d("cancelled") - d("refunded"), "net of {r}");
            assert_eq!(r["day"], DAY);
            let key = (
                r["store"].as_str().unwrap_or_default().to_string(),
                r["currency"].as_str().unwrap_or_default().to_string(),
            );
            (key, (r["orders"].as_u64().expect("orders"), d("gross"), d("cancelled"), d("refunded")))
        })
        .collect()
}

fn tokyo_day(event_time_ms: i64) -> NaiveDate {
    chrono::DateTime::from_timestamp_millis(event_time_ms)
        .expect("time")
        .with_timezone(&chrono_tz::Asia::Tokyo)
        .date_naive()
}

/// The SPEC definitions applied to the whole log, written independently of the code under
/// test: normalise, drop event ids already seen in the partition, keep Tokyo day `DAY`,
/// sum per store and currency. Also returns how many counted events fell on other days.
fn recompute(orders: &str) -> (Totals, u64) {
    let day: NaiveDate = DAY.parse().expect("day");
    let mut want = Totals::new();
    let mut other_days = 0;
    let mut seen = HashSet::new();
    for m in read(orders) {
        let append = m.timestamp().to_millis().unwrap_or(0);
        let Ok(e) = normalize_order(m.payload().unwrap_or_default(), append) else { continue };
        if !seen.insert((m.partition(), e.event_id.clone())) {
            continue;
        }
        if tokyo_day(e.event_time_ms) != day {
            other_days += 1;
            continue;
        }
        let Some(c) = e.currency.filter(|_| e.kind != EventKind::Shipped) else { continue };
        let w = want.entry((e.store.to_string(), c.code().to_string())).or_default();
        match e.kind {
            EventKind::Placed => {
                w.0 += 1;
                w.1 += e.lines_amount();
            }
            EventKind::Cancelled => w.2 += e.lines_amount(),
            EventKind::Refunded => w.3 += e.refund_amount.unwrap_or_default(),
            EventKind::Shipped => {}
        }
    }
    (want, other_days)
}

/// `p:high watermark / 2` for every partition.
fn half_of_each_partition(topic: &str) -> String {
    let consumer: BaseConsumer = settings().client_config().create().expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let parts: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
    parts
        .iter()
        .map(|p| {
            let (_, high) = consumer.fetch_watermarks(topic, *p, Duration::from_secs(10)).expect("watermarks");
            format!("{p}:{}", high / 2)
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn produce(topic: &str, records: &[(i32, Vec<u8>, Vec<u8>)]) {
    let producer: BaseProducer =
        settings().client_config().set("enable.idempotence", "true").create().expect("producer");
    for (p, key, value) in records {
        producer.send(BaseRecord::to(topic).partition(*p).key(&key[..]).payload(&value[..])).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn ranges(manifest: &Value) -> String {
    let r = manifest["input"]["ranges"].as_array().expect("ranges");
    let side = |f: &str| r.iter().map(|x| format!("{}:{}", x["partition"], x[f])).collect::<Vec<_>>().join(",");
    format!("{}|{}", side("from"), side("to"))
}

#[test]
fn a_published_close_equals_an_independent_recomputation_of_the_day_from_the_log() {
    let (t, summary) = history("fin-close", "11");

    // The default cutoff (end of day + 7 h = 2026-11-28T22:00Z) precedes every append of this
    // log: the range is empty, and an empty close is refused.
    let out = batch(&t, "close", &[], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no rows"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(published(&t, "close|2026-11-28"), None, "nothing may be published");

    let published_run = close(&t, &["--cutoff", &now()]);
    let manifest = &published_run.json;
    let run_id = manifest["run_id"].as_str().expect("run id");
    assert_eq!(published(&t, "close|2026-11-28"), Some(published_run.bytes.clone()));
    let got = rows(&t, &format!("{run_id}|{DAY}"));
    assert_eq!(manifest["row_count"].as_u64(), Some(got.len() as u64));

    let (want, other_days) = recompute(&t.orders);
    assert!(want.len() >= 12 && other_days > 1000, "the history must cross the Tokyo day boundary");
    assert_eq!(totals(&got), want, "published rows differ from the recomputation");

    // Every record is accounted for once; what the generator broke or duplicated is counted.
    let a = &manifest["accounting"];
    assert_eq!(a["records"], summary["orders_records"]);
    assert_eq!(a["duplicates"], summary["duplicates"]);
    assert_eq!(a["dead_letters"], summary["malformed"]);
    assert_eq!(a["out_of_day"].as_u64(), Some(other_days));
    assert_eq!(a["offset_gaps"], 0);
    let parts = ["applied", "no_money", "duplicates", "out_of_day"].map(|f| a[f].as_u64().expect("count"));
    let dead: u64 = a["dead_letters"].as_object().expect("map").values().filter_map(Value::as_u64).sum();
    assert_eq!(parts.iter().sum::<u64>() + dead, a["records"].as_u64().expect("records"));
}

#[test]
fn a_rerun_over_the_same_range_gives_the_same_run_id_checksum_and_byte_identical_rows() {
    let (t, _) = history("fin-rerun", "12");
    let first = close(&t, &["--cutoff", &now()]);
    let (from, to) = ranges(&first.json).split_once('|').map(|(f, t)| (f.to_string(), t.to_string())).expect("ranges");
    // The same range given explicitly, later: the same run.
    let second = close(&t, &["--from", &from, "--to", &to]);
    assert_eq!(second.json["run_id"], first.json["run_id"]);
    assert_eq!(second.json["checksum"], first.json["checksum"]);
    assert_eq!(second.bytes, first.bytes, "the manifest is derived from data only");

    let prefix = format!("{}|{DAY}", first.json["run_id"].as_str().expect("id"));
    let mut writes: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    for m in read(&t.finance_close) {
        if m.key().unwrap_or_default().starts_with(prefix.as_bytes()) {
            writes
                .entry(m.key().unwrap_or_default().to_vec())
                .or_default()
                .push(m.payload().unwrap_or_default().to_vec());
        }
    }
    assert!(!writes.is_empty());
    for (key, values) in &writes {
        assert_eq!(values.len(), 2, "each row is staged once per run");
        assert_eq!(values[0], values[1], "row {} differs between the runs", String::from_utf8_lossy(key));
    }

    // The checksum is SHA-256 of the rows as `batch show --format rows` prints them.
    let (printed, _) = batch_ok(&t, "show", &["--format", "rows"]);
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(printed.as_bytes())));
    assert_eq!(Some(digest.as_str()), first.json["checksum"].as_str());
    let (table, _) = batch_ok(&t, "show", &[]);
    assert!(table.contains("(verified)") && table.contains("tokyo-01"), "{table}");
}

#[test]
fn a_close_killed_between_staging_and_publishing_leaves_the_previous_close_visible_and_a_rerun_completes() {
    let (t, _) = history("fin-kill", "13");
    let old = close(&t, &["--to", &half_of_each_partition(&t.orders)]);
    assert_eq!(published(&t, "close|2026-11-28").as_ref(), Some(&old.bytes));

    let cutoff = now();
    let out = batch(&t, "close", &["--cutoff", &cutoff], &[("TIDEMARK_FAILPOINTS", "batch.mid_close=1")]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && stderr.contains("failpoint batch.mid_close"), "{stderr}");
    let new_id = stderr.split(": run ").nth(1).and_then(|s| s.split_whitespace().next()).expect("run id in stderr");
    assert_ne!(new_id, old.json["run_id"].as_str().expect("id"));
    // The new rows are staged, but readers still follow the old manifest to the old rows.
    assert!(!rows(&t, &format!("{new_id}|{DAY}")).is_empty(), "rows are staged before the publish");
    assert_eq!(published(&t, "close|2026-11-28"), Some(old.bytes), "the manifest must not change");
    let (shown, _) = batch_ok(&t, "show", &["--format", "json"]);
    let shown: Value = serde_json::from_str(&shown).expect("json");
    assert_eq!(shown["close"]["manifest"], old.json);

    let new = close(&t, &["--cutoff", &cutoff]);
    assert_eq!(new.json["run_id"].as_str(), Some(new_id), "the rerun is the same run");
    assert_eq!(published(&t, "close|2026-11-28"), Some(new.bytes));
    let (want, _) = recompute(&t.orders);
    assert_eq!(totals(&rows(&t, &format!("{new_id}|{DAY}"))), want);
}

#[test]
fn a_late_event_appended_after_the_cutoff_appears_only_in_an_adjustment_that_references_the_original_close() {
    let (t, _) = history("fin-adjust", "14");
    let original = close(&t, &["--cutoff", &now()]);
    let original_id = original.json["run_id"].as_str().expect("id").to_string();
    let original_rows = rows(&t, &format!("{original_id}|{DAY}"));

    // After the cutoff: a late sale of the closed day, a copy of an event the close already
    // counted, and an event of the next day.
    let day: NaiveDate = DAY.parse().expect("day");
    let counted = read(&t.orders)
        .into_iter()
        .find(|m| {
            normalize_order(m.payload().unwrap_or_default(), m.timestamp().to_millis().unwrap_or(0))
                .is_ok_and(|e| e.kind == EventKind::Placed && tokyo_day(e.event_time_ms) == day)
        })
        .expect("a counted sale");
    let event = |id: &str, time: &str| {
        format!(r#"{{"schema_version":1,"event_id":"{id}","order_id":"o-{id}","event_type":"order_placed","event_time":"{time}","store":"tokyo-01","currency":"JPY","lines":[{{"sku":"SKU-1","qty":2,"unit_price":"1980"}}]}}"#).into_bytes()
    };
    produce(
        &t.orders,
        &[
            (0, b"o-late-1".to_vec(), event("late-1", "2026-11-28T10:00:00+09:00")),
            (
                counted.partition(),
                counted.key().unwrap_or_default().to_vec(),
                counted.payload().unwrap_or_default().to_vec(),
            ),
            (1, b"o-next-1".to_vec(), event("next-1", "2026-11-29T10:00:00+09:00")),
        ],
    );

    let (stdout, _) = batch_ok(&t, "adjust", &[]);
    let adjustment = printed(&stdout);
    let adj = &adjustment.json;
    let adj_id = adj["run_id"].as_str().expect("id");
    assert_eq!(adj["kind"], "adjustment");
    assert_eq!(adj["original_run_id"].as_str(), Some(original_id.as_str()));
    assert_eq!(adj["previous_run_id"].as_str(), Some(original_id.as_str()));
    assert_eq!(adj["definition_version"], original.json["definition_version"]);
    let (_, original_to) =
        ranges(&original.json).split_once('|').map(|(f, t)| (f.to_string(), t.to_string())).expect("r");
    let (adj_from, _) = ranges(adj).split_once('|').map(|(f, t)| (f.to_string(), t.to_string())).expect("r");
    assert_eq!(adj_from, original_to, "the adjustment starts where the close ended");
    let a = &adj["accounting"];
    assert_eq!(
        (a["records"].as_u64(), a["applied"].as_u64(), a["duplicates"].as_u64(), a["out_of_day"].as_u64()),
        (Some(3), Some(1), Some(1), Some(1))
    );
    assert_eq!(published(&t, &format!("adjust|{DAY}|{adj_id}")), Some(adjustment.bytes.clone()));

    // The delta is the late sale alone; the close is untouched.
    let delta = rows(&t, &format!("adj|{original_id}|{adj_id}"));
    assert_eq!(
        delta.values().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>(),
        [
            r#"{"day":"2026-11-28","store":"tokyo-01","currency":"JPY","orders":1,"events":1,"gross":"3960","cancelled":"0","refunded":"0","net":"3960"}"#
        ]
    );
    assert_eq!(published(&t, "close|2026-11-28"), Some(original.bytes));
    assert_eq!(rows(&t, &format!("{original_id}|{DAY}")), original_rows);

    // Nothing new: no second adjustment. The reader's view adds the delta to the close.
    let (_, stderr) = batch_ok(&t, "adjust", &[]);
    assert!(stderr.contains("nothing appended"), "{stderr}");
    let (shown, _) = batch_ok(&t, "show", &["--format", "json"]);
    let shown: Value = serde_json::from_str(&shown).expect("json");
    assert_eq!(shown["adjustments"].as_array().map(Vec::len), Some(1));
    let key = ("tokyo-01".to_string(), "JPY".to_string());
    let before = totals(&original_rows)[&key].1;
    let after = shown["adjusted"].as_array().expect("adjusted").iter().find(|r| r["store"] == "tokyo-01").expect("row");
    assert_eq!(after["gross"].as_str().and_then(|s| s.parse::<Decimal>().ok()), Some(before + Decimal::from(3960)));
}

#[test]
fn shadow_replay_matches_the_stream_dashboard_and_gives_every_difference_its_reason() {
    // 30,000 records end near 16:40Z: the stream's watermark then keeps Tokyo-day events
    // after about 09:40Z inside the 7 h window retention and sends earlier ones to `late`.
    let orders = unique("fin-shadow");
    let t = topology(&orders, &unique("run-fin-shadow"));
    create_topics(&t);
    generate(&orders, &["--events", "30000", "--rate", "0.5", "--event-bytes", "256", "--seed", "15"]);
    let sale = |id: &str, time: &str, qty: u32, price: u32| {
        let v = format!(
            r#"{{"schema_version":1,"event_id":"{id}","order_id":"o-{id}","event_type":"order_placed","event_time":"{time}","store":"tokyo-01","currency":"JPY","lines":[{{"sku":"SKU-1","qty":{qty},"unit_price":"{price}"}}]}}"#
        );
        (0, format!("o-{id}").into_bytes(), v.into_bytes())
    };
    // Beyond the stream's retention, before the close: only the batch counts it.
    produce(&orders, &[sale("too-late", "2026-11-28T05:00:00Z", 1, 1000)]);
    let state = tempfile::tempdir().expect("tmp");
    let group = unique("g");
    run_to_end(&t, state.path(), &group);
    assert!(!read(&t.late).is_empty(), "the stream must have sent the very late sale to the late topic");
    close(&t, &["--cutoff", &now()]);
    // Within retention, after the close: only the stream counts it, until an adjustment.
    produce(&orders, &[sale("after-close", "2026-11-28T14:00:00Z", 2, 1980)]);
    run_to_end(&t, state.path(), &group);

    let report = |t: &Topo| -> Value {
        let (stdout, _) = batch_ok(t, "shadow", &["--format", "json"]);
        serde_json::from_str(stdout.trim()).expect("shadow JSON")
    };
    let first = report(&t);
    assert_eq!(first["unexplained"], 0, "{first}");
    let mismatches = first["mismatches"].as_array().expect("mismatches");
    assert!(mismatches.iter().all(|m| m["store"] == "tokyo-01" && m["currency"] == "JPY"), "{first}");
    let gross = mismatches.iter().find(|m| m["field"] == "gross").expect("gross differs");
    let reasons = gross["reasons"].to_string();
    assert!(reasons.contains("after_close: +3960") && reasons.contains("late_output: −1000"), "{reasons}");
    let events = mismatches.iter().find(|m| m["field"] == "events");
    assert!(events.is_none(), "one event more and one less per side leave `events` equal: {first}");

    // After the adjustment only the late output remains.
    batch_ok(&t, "adjust", &[]);
    let second = report(&t);
    assert_eq!(second["unexplained"], 0, "{second}");
    let gross = second["mismatches"].as_array().and_then(|m| m.iter().find(|m| m["field"] == "gross").cloned());
    let reasons = gross.expect("gross still differs")["reasons"].to_string();
    assert!(reasons.contains("late_output: −1000") && !reasons.contains("after_close"), "{reasons}");
}
