//! A downstream consumer of the combined topics (SPEC §6, issue 19), against the real broker:
//! a plain Kafka consumer that upserts each record by key into SQLite, keeping a record only
//! if its version is greater than the stored one (what a Kafka Connect JDBC sink with an
//! upsert on a version column does). Its table must equal `tidemark query dashboard`, which
//! sums the partials itself, and must end the same after a crash and replay.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use rusqlite::{params, Connection};

const GEN: &[&str] = &["--events", "20000", "--rate", "100", "--seed", "19", "--event-bytes", "256"];

fn dashboard_combined(t: &Topo) -> String {
    format!("{}-combined", t.dashboard)
}

fn finance_combined(t: &Topo) -> String {
    format!("{}-combined", t.finance_provisional)
}

/// Reads `topic` from the beginning to its current end with a plain consumer and upserts
/// every record into a SQLite table `(key PRIMARY KEY, version, value)`, only when the
/// record's version is greater than the stored one. Returns the table, by key.
fn upsert_into_sqlite(topic: &str) -> BTreeMap<String, (i64, String)> {
    let db = Connection::open_in_memory().expect("sqlite");
    db.execute_batch("CREATE TABLE rows (key TEXT PRIMARY KEY, version INTEGER NOT NULL, value TEXT NOT NULL)")
        .expect("create table");
    let consumer: BaseConsumer = settings()
        .client_config()
        .set("group.id", unique("downstream"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).expect("metadata");
    let mut tpl = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in md.topics().iter().filter(|t| t.name() == topic).flat_map(|t| t.partitions()) {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(30)).expect("watermarks");
        if high > low {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning).expect("tpl");
            ends.insert(p.id(), high);
        }
    }
    assert!(!ends.is_empty(), "{topic} is empty");
    consumer.assign(&tpl).expect("assign");
    let mut upsert = db
        .prepare(
            "INSERT INTO rows (key, version, value) VALUES (?1, ?2, ?3)
             ON CONFLICT(key) DO UPDATE SET version = excluded.version, value = excluded.value
             WHERE excluded.version > rows.version",
        )
        .expect("prepare");
    let started = Instant::now();
    while !ends.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(120), "reading {topic} took too long");
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else { continue };
        let msg = msg.expect("message");
        let key = String::from_utf8(msg.key().expect("a combined row has a key").to_vec()).expect("utf8 key");
        let value = String::from_utf8(msg.payload().expect("a combined row has a value").to_vec()).expect("utf8");
        let json: serde_json::Value = serde_json::from_str(&value).expect("JSON value");
        let version = json["version"].as_i64().expect("version");
        upsert.execute(params![key, version, value]).expect("upsert");
        if msg.offset() + 1 >= ends.get(&msg.partition()).copied().unwrap_or(0) {
            ends.remove(&msg.partition());
        }
    }
    drop(upsert);
    let mut stmt = db.prepare("SELECT key, version, value FROM rows").expect("select");
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, (r.get::<_, i64>(1)?, r.get::<_, String>(2)?))))
        .expect("query")
        .collect::<Result<BTreeMap<_, _>, _>>()
        .expect("rows");
    rows
}

/// `tidemark query dashboard --format json`, one line per window/store/currency, keyed the
/// way the combined topic is: `window_start|store|currency`.
fn query_dashboard(t: &Topo) -> BTreeMap<String, String> {
    let out = Command::new(BIN)
        .args(["query", "dashboard", "--format", "json", "--bootstrap", &bootstrap(), "--topology"])
        .arg(&t.path)
        .output()
        .expect("query");
    assert!(out.status.success(), "query failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            let key = format!("{}|{}|{}", v["window_start"], v["store"], v["currency"]).replace('"', "");
            (key, line.to_string())
        })
        .collect()
}

/// Equal maps, or a failure naming the first few keys that differ (the tables are large).
fn assert_same<V: PartialEq + std::fmt::Debug>(got: &BTreeMap<String, V>, want: &BTreeMap<String, V>, what: &str) {
    let differing: Vec<String> = got
        .keys()
        .chain(want.keys())
        .filter(|k| got.get(*k) != want.get(*k))
        .take(3)
        .map(|k| format!("{k}:\n  got  {:?}\n  want {:?}", got.get(k), want.get(k)))
        .collect();
    assert!(differing.is_empty(), "{what}: {} vs {} rows, differing:\n{}", got.len(), want.len(), differing.join("\n"));
}

fn values(table: &BTreeMap<String, (i64, String)>) -> BTreeMap<String, String> {
    table.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect()
}

#[test]
fn an_upsert_consumer_of_the_combined_dashboard_topic_ends_with_what_query_dashboard_prints() {
    let orders = unique("down");
    let t = topology(&orders, &unique("run-down"));
    create_topics(&t);
    generate(&orders, GEN);
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&t, state.path(), &unique("g"));

    let table = upsert_into_sqlite(&dashboard_combined(&t));
    let query = query_dashboard(&t);
    assert!(query.len() > 10, "the log should fill many windows: {}", query.len());
    assert_same(&values(&table), &query, "the upserted table against `tidemark query dashboard`");
    // One row per window × store × currency: no key carries a source partition.
    assert!(table.keys().all(|k| k.split('|').count() == 3), "combined keys are window|store|currency");

    // The provisional finance rows combine the same way: per day, the sum of the partials.
    let finance = upsert_into_sqlite(&finance_combined(&t));
    let mut summed: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for v in compacted(&t.finance_provisional).values() {
        let r: tidemark_topology::provisional::ProvisionalRecord = serde_json::from_slice(v).expect("partial");
        let s = summed.entry(format!("{}|{}|{}", r.day, r.store, r.currency)).or_default();
        s.0 += r.figures.events();
        s.1 += r.version;
    }
    let combined: BTreeMap<String, (u64, u64)> = finance
        .iter()
        .map(|(k, (_, v))| {
            let r: tidemark_topology::combine::FinanceCombined = serde_json::from_str(v).expect("combined");
            (k.clone(), (r.figures.events(), r.version))
        })
        .collect();
    assert_eq!(combined, summed, "combined finance rows are the sums of the partials");
}

/// A second log over the same windows: few events per key and source partition, so after a
/// restart most keys get a new partial from only some partitions, and their combined rows
/// are right only if the partials taken before the restart were kept in the state.
const GEN_MORE: &[&str] = &["--events", "600", "--rate", "3", "--seed", "20", "--event-bytes", "256"];

#[test]
fn after_a_restart_a_crash_and_a_replay_the_rows_a_consumer_keeps_are_byte_identical_to_a_clean_run() {
    let orders = unique("down-kill");
    let clean = topology(&orders, &unique("run-clean"));
    let killed = topology(&orders, &unique("run-killed"));
    create_topics(&clean);
    create_topics(&killed);
    let state = tempfile::tempdir().expect("tmp");
    let (dir, group) = (state.path().join("killed"), unique("g"));
    generate(&orders, GEN);
    // A clean stop and a restart: the combine state of the first log comes from the store.
    run_to_end(&killed, &dir, &group);
    generate(&orders, GEN_MORE);
    run_to_end(&clean, &state.path().join("clean"), &unique("g"));

    // The restarts replay and re-send partials and combined rows the log already holds.
    crash_twice_then_run_to_end(&killed, &dir, &group);

    for (name, topic) in [("dashboard", dashboard_combined as fn(&Topo) -> String), ("finance", finance_combined)] {
        let after_crash = upsert_into_sqlite(&topic(&killed));
        let uninterrupted = upsert_into_sqlite(&topic(&clean));
        assert!(!uninterrupted.is_empty());
        assert_same(&after_crash, &uninterrupted, &format!("{name}: the consumer's table after a restart and a crash"));
        assert_eq!(compacted(&topic(&killed)), compacted(&topic(&clean)), "{name}: last record per key differs");
    }
    assert_eq!(values(&upsert_into_sqlite(&dashboard_combined(&killed))), query_dashboard(&killed));
}
