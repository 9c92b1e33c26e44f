//! The downstream pipeline users run (SPEC §6): tidemark's combined topics written as
//! `connect-json` → Kafka Connect 4.4.0 standalone with the Debezium JDBC sink 3.5.0.Final →
//! PostgreSQL 15, upserting by the record key, with no transform. The table must equal
//! `tidemark query dashboard` on every key with numeric money columns, and again after a
//! crash and a replay, during which no row's version may ever go back (the version guard of
//! scripts/connect/version-guard.sql, docs/connect.md).
//!
//! Connect, the sink and PostgreSQL come from scripts/connect/install.sh (run by
//! scripts/test.sh); this test starts a throwaway cluster and worker of its own. Without them
//! it fails, unless TIDEMARK_ALLOW_SKIP_CONNECT_JDBC=1 says skipping is allowed.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::message::OwnedMessage;
use rdkafka::Message;
use rust_decimal::Decimal;
use tidemark_topology::combine::{DashboardCombined, FinanceCombined, Latest};
use tidemark_topology::figures::Figures;
use tidemark_topology::provisional::ProvisionalRecord;

const GEN: &[&str] = &["--events", "8000", "--rate", "100", "--seed", "37", "--event-bytes", "256"];
const DASHBOARD_COLUMNS: &str =
    "window_start, window_end, store, currency, partitions, orders, units, gross, cancelled, refunded, net, version, as_of";
const FINANCE_COLUMNS: &str =
    "day, store, currency, partitions, orders, events, gross, cancelled, refunded, net, version, as_of";

fn script(name: &str) -> PathBuf {
    repo_path(&format!("scripts/connect/{name}"))
}

/// Whether scripts/connect/install.sh finds every piece; with its report when not.
fn prerequisites() -> Result<(), String> {
    let out = Command::new("bash").arg(script("install.sh")).arg("--check").output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn run_script(name: &str, args: &[&str], env: &[(&str, String)]) {
    let out = Command::new("bash")
        .arg(script(name))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run script");
    assert!(out.status.success(), "{name} {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A throwaway PostgreSQL cluster (scripts/connect/postgres.sh), stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
}

impl Postgres {
    fn start() -> Postgres {
        let pg = Postgres { dir: tempfile::tempdir().expect("tmp"), port: free_port() };
        run_script("postgres.sh", &["start"], &pg.env());
        pg
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("PG_DIR", self.dir.path().display().to_string()), ("PG_PORT", self.port.to_string())]
    }

    fn sql(&self) -> Sql {
        Sql { port: self.port }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script("postgres.sh")).arg("stop").envs(self.env()).output();
    }
}

/// psql against the cluster on `port`, database `tidemark`.
#[derive(Clone, Copy)]
struct Sql {
    port: u16,
}

impl Sql {
    fn psql(&self) -> Command {
        let bin = std::env::var("TIDEMARK_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
        let mut c = Command::new(format!("{bin}/psql"));
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "tidemark", "-d", "tidemark"]).args([
            "-X",
            "-A",
            "-t",
            "-q",
            "-F",
            "\t",
            "-v",
            "ON_ERROR_STOP=1",
        ]);
        c
    }

    /// Rows of `sql`, tab-separated fields.
    fn query(&self, sql: &str) -> Vec<Vec<String>> {
        self.rows(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let out = self.psql().args(["-c", sql]).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| l.split('\t').map(str::to_string).collect()).collect())
    }

    /// Whether the sink has created `table` yet.
    fn exists(&self, table: &str) -> bool {
        let rows = self.query(&format!("SELECT to_regclass('{table}') IS NOT NULL"));
        rows.first().and_then(|r| r.first()).is_some_and(|v| v == "t")
    }

    /// Installs the version guard on `table`, as docs/connect.md says.
    fn guard(&self, table: &str) {
        let out = self.psql().args(["-v", &format!("table={table}"), "-f"]).arg(script("version-guard.sql")).output();
        let out = out.expect("psql");
        assert!(out.status.success(), "version guard on {table}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A Kafka Connect standalone worker (scripts/connect/connect.sh), stopped when dropped.
struct Connect {
    dir: tempfile::TempDir,
    port: u16,
}

impl Connect {
    fn start() -> Connect {
        let c = Connect { dir: tempfile::tempdir().expect("tmp"), port: free_port() };
        run_script(
            "connect.sh",
            &["start"],
            &[("BOOTSTRAP", bootstrap()), ("CONNECT_PORT", c.port.to_string())]
                .into_iter()
                .chain(c.env())
                .collect::<Vec<_>>(),
        );
        c
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("CONNECT_DIR", self.dir.path().display().to_string())]
    }

    /// Adds the JDBC sink of docs/connect.md for `topic` into `table`.
    fn add_sink(&self, topic: &str, table: &str, pg: &Postgres) -> String {
        let name = unique(table);
        let config = serde_json::json!({
            "name": name,
            "config": {
                "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                "tasks.max": "1",
                "topics": topic,
                "connection.url": format!("jdbc:postgresql://127.0.0.1:{}/tidemark", pg.port),
                "connection.username": "tidemark",
                "connection.password": "unused",
                "insert.mode": "upsert",
                "primary.key.mode": "record_key",
                "schema.evolution": "basic",
                "collection.name.format": table,
            }
        });
        let (status, body) = post_json(self.port, "/connectors", &config.to_string());
        assert_eq!(status, 201, "adding the sink for {topic}: {body}");
        wait_for(Duration::from_secs(60), &format!("sink {name} running"), || {
            let (_, body) = http("GET", self.port, &format!("/connectors/{name}/status"))?;
            let s: serde_json::Value = serde_json::from_str(&body).ok()?;
            let failed = s["tasks"].as_array().into_iter().flatten().find(|t| t["state"] == "FAILED");
            assert!(failed.is_none(), "sink {name} failed: {}\n{}", s, self.log_tail());
            (s["tasks"][0]["state"] == "RUNNING").then_some(())
        });
        name
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("connect.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script("connect.sh")).arg("stop").envs(self.env()).output();
    }
}

fn post_json(port: u16, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect REST");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// A topology whose combined sinks are written as `connect-json`.
fn connect_topology(orders: &str, run: &str) -> Topo {
    let t = topology(orders, run);
    let text = std::fs::read_to_string(&t.path).expect("read topology");
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            let combined = l.starts_with("dashboard_combined =") || l.starts_with("finance_provisional_combined =");
            if combined {
                l.replacen(" }", ", format = \"connect-json\" }", 1)
            } else if l.starts_with("publish_interval =") {
                // Rows published at every commit: keys take several versions, which the
                // replay below produces again behind the final ones.
                "publish_interval = \"0s\"".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&t.path, text.join("\n") + "\n").expect("write topology");
    t
}

fn combined_topic(partial_topic: &str) -> String {
    format!("{partial_topic}-combined")
}

/// `tidemark query dashboard --format json`, by `window_start|store|currency`.
fn query_dashboard(t: &Topo) -> BTreeMap<String, DashboardCombined> {
    let out = Command::new(BIN)
        .args(["query", "dashboard", "--format", "json", "--bootstrap", &bootstrap(), "--topology"])
        .arg(&t.path)
        .output()
        .expect("query");
    assert!(out.status.success(), "query failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let r: DashboardCombined = serde_json::from_str(line).expect("a query line is a combined row");
            (format!("{}|{}|{}", r.window_start, r.store, r.currency), r)
        })
        .collect()
}

/// The provisional finance rows summed from the latest partials, as query dashboard sums the
/// dashboard's (the same [`Latest`]).
fn summed_finance(t: &Topo) -> BTreeMap<String, FinanceCombined> {
    let mut keys: BTreeMap<String, Latest<ProvisionalRecord>> = BTreeMap::new();
    for v in compacted(&t.finance_provisional).values() {
        let r: ProvisionalRecord = serde_json::from_slice(v).expect("partial");
        keys.entry(format!("{}|{}|{}", r.day, r.store, r.currency)).or_default().offer(r);
    }
    keys.into_iter().filter_map(|(k, l)| Some((k, l.combined()?))).collect()
}

fn int<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| panic!("not an integer: {s}"))
}

fn money(s: &str) -> Decimal {
    s.parse().unwrap_or_else(|_| panic!("not a decimal: {s}"))
}

fn dashboard_table(pg: &Sql, table: &str) -> BTreeMap<String, DashboardCombined> {
    if !pg.exists(table) {
        return BTreeMap::new();
    }
    pg.query(&format!("SELECT {DASHBOARD_COLUMNS} FROM {table}"))
        .into_iter()
        .map(|c| {
            let figures = Figures::new(int(&c[5]), int(&c[6]), money(&c[7]), money(&c[8]), money(&c[9]));
            let r = DashboardCombined {
                window_start: c[0].clone(),
                window_end: c[1].clone(),
                store: c[2].clone(),
                currency: c[3].clone(),
                partitions: int(&c[4]),
                figures,
                net: money(&c[10]),
                version: int(&c[11]),
                as_of: c[12].clone(),
            };
            (format!("{}|{}|{}", r.window_start, r.store, r.currency), r)
        })
        .collect()
}

fn finance_table(pg: &Sql, table: &str) -> BTreeMap<String, FinanceCombined> {
    if !pg.exists(table) {
        return BTreeMap::new();
    }
    pg.query(&format!("SELECT {FINANCE_COLUMNS} FROM {table}"))
        .into_iter()
        .map(|c| {
            let figures = Figures::new(int(&c[4]), int(&c[5]), money(&c[6]), money(&c[7]), money(&c[8]));
            let r = FinanceCombined {
                day: c[0].clone(),
                store: c[1].clone(),
                currency: c[2].clone(),
                partitions: int(&c[3]),
                figures,
                net: money(&c[9]),
                version: int(&c[10]),
                as_of: c[11].clone(),
            };
            (format!("{}|{}|{}", r.day, r.store, r.currency), r)
        })
        .collect()
}

/// The first few keys on which two tables differ (money compares by value: `650` is `650.000`).
fn differences<V: PartialEq + std::fmt::Debug>(got: &BTreeMap<String, V>, want: &BTreeMap<String, V>) -> Vec<String> {
    got.keys()
        .chain(want.keys())
        .filter(|k| got.get(*k) != want.get(*k))
        .take(3)
        .map(|k| format!("{k}:\n  table {:?}\n  want  {:?}", got.get(k), want.get(k)))
        .collect()
}

fn assert_same<V: PartialEq + std::fmt::Debug>(got: &BTreeMap<String, V>, want: &BTreeMap<String, V>, what: &str) {
    let diff = differences(got, want);
    assert!(diff.is_empty(), "{what}: {} rows, {} wanted; differing:\n{}", got.len(), want.len(), diff.join("\n"));
}

/// Waits until `read()` equals `want` on every key.
fn await_equal<V: PartialEq + std::fmt::Debug>(
    what: &str,
    connect: &Connect,
    want: &BTreeMap<String, V>,
    mut read: impl FnMut() -> BTreeMap<String, V>,
) {
    let started = Instant::now();
    loop {
        let got = read();
        let diff = differences(&got, want);
        if diff.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: {} rows, {} wanted, after 120 s; differing:\n{}\nConnect log:\n{}",
            got.len(),
            want.len(),
            diff.join("\n"),
            connect.log_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Money columns are numeric at scale 3; the primary key is the record key's fields.
fn assert_typed(pg: &Sql, table: &str, key: &[&str]) {
    let types: BTreeMap<String, (String, String)> = pg
        .query(&format!(
            "SELECT column_name, data_type, coalesce(numeric_scale::text, '') FROM information_schema.columns \
             WHERE table_name = '{table}'"
        ))
        .into_iter()
        .map(|c| (c[0].clone(), (c[1].clone(), c[2].clone())))
        .collect();
    for column in ["gross", "cancelled", "refunded", "net"] {
        assert_eq!(types.get(column), Some(&("numeric".to_string(), "3".to_string())), "{table}.{column}: {types:?}");
    }
    assert_eq!(types.get("version").map(|t| t.0.as_str()), Some("bigint"), "{table}: {types:?}");
    let pk: Vec<String> = pg
        .query(&format!(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid \
             AND a.attnum = ANY(i.indkey) WHERE i.indrelid = '{table}'::regclass AND i.indisprimary \
             ORDER BY array_position(i.indkey, a.attnum)"
        ))
        .into_iter()
        .map(|c| c[0].clone())
        .collect();
    assert_eq!(pk, key, "{table}: primary key");
}

/// Samples `table`'s versions until stopped; returns every key seen at a lower version than
/// an earlier sample of it.
fn watch_versions(pg: Sql, table: &'static str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut highest: BTreeMap<String, u64> = BTreeMap::new();
        let mut backwards = Vec::new();
        let sql = format!("SELECT window_start || '|' || store || '|' || currency, version FROM {table}");
        while !stop.load(Ordering::Relaxed) {
            // The table exists (made before the sink starts); an error is the cluster stopping.
            if let Ok(rows) = pg.rows(&sql) {
                for c in rows {
                    let version: u64 = int(&c[1]);
                    let seen = highest.entry(c[0].clone()).or_insert(version);
                    if version < *seen {
                        backwards.push(format!("{}: version {version} after {seen}", c[0]));
                    }
                    *seen = (*seen).max(version);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        backwards
    })
}

/// Records of `topic` older than the last record of their key.
fn older_than_final(topic: &str) -> Vec<OwnedMessage> {
    let version = |m: &OwnedMessage| {
        let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("envelope");
        v["payload"]["version"].as_i64().expect("version")
    };
    let all = read(topic);
    let last: BTreeMap<&[u8], i64> = all.iter().map(|m| (m.key().unwrap_or_default(), version(m))).collect();
    all.iter().filter(|m| last.get(m.key().unwrap_or_default()).is_some_and(|l| version(m) < *l)).cloned().collect()
}

/// Produces `records` again to `topic`, each to its partition, in order.
fn produce_again(topic: &str, records: &[OwnedMessage]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer =
        settings().client_config().set("enable.idempotence", "true").create().expect("producer");
    for m in records {
        let r = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(m.partition())
            .key(m.key().unwrap_or_default())
            .payload(m.payload().unwrap_or_default());
        producer.send(r).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Waits until consumer group `group` has committed the end of every partition of `topic`.
fn await_consumed(group: &str, topic: &str) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = settings().client_config().set("group.id", group).create().expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).expect("metadata");
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in md.topics().iter().flat_map(|t| t.partitions()) {
        let (_, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(30)).expect("watermarks");
        tpl.add_partition(topic, p.id());
        ends.insert(p.id(), high);
    }
    wait_for(Duration::from_secs(120), &format!("{group} at the end of {topic}"), || {
        let committed = consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)).ok()?;
        let done = committed.elements().iter().all(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o >= ends.get(&e.partition()).copied().unwrap_or(0),
            _ => ends.get(&e.partition()).copied().unwrap_or(0) == 0,
        });
        done.then_some(())
    });
}

#[test]
fn a_jdbc_sink_upserts_the_combined_topics_into_postgres_equal_to_the_query_also_after_a_crash_and_a_replay() {
    if let Err(report) = prerequisites() {
        let allowed = std::env::var("TIDEMARK_ALLOW_SKIP_CONNECT_JDBC").is_ok_and(|v| v == "1");
        assert!(allowed, "Kafka Connect, the Debezium JDBC sink or PostgreSQL 15 is missing (install them with scripts/connect/install.sh, or set TIDEMARK_ALLOW_SKIP_CONNECT_JDBC=1 to skip this test):\n{report}");
        eprintln!("SKIPPED: the Connect → PostgreSQL pipeline (TIDEMARK_ALLOW_SKIP_CONNECT_JDBC=1):\n{report}");
        return;
    }
    let pg = Postgres::start();
    let sql = pg.sql();
    let connect = Connect::start();

    // A clean run: the sink creates the tables from the records' schemas.
    let orders = unique("cj");
    let clean = connect_topology(&orders, &unique("run-cj"));
    create_topics(&clean);
    generate(&orders, GEN);
    run_to_end(&clean, &tempfile::tempdir().expect("tmp").path().join("state"), &unique("g"));
    connect.add_sink(&combined_topic(&clean.dashboard), "dashboard_clean", &pg);
    connect.add_sink(&combined_topic(&clean.finance_provisional), "finance_clean", &pg);
    let query = query_dashboard(&clean);
    assert!(query.len() > 20, "the log should fill many windows: {}", query.len());
    await_equal("dashboard table against `tidemark query dashboard`", &connect, &query, || {
        dashboard_table(&sql, "dashboard_clean")
    });
    let finance = summed_finance(&clean);
    assert!(!finance.is_empty());
    await_equal("finance table against the summed partials", &connect, &finance, || {
        finance_table(&sql, "finance_clean")
    });
    assert_typed(&sql, "dashboard_clean", &["window_start", "store", "currency"]);
    assert_typed(&sql, "finance_clean", &["day", "store", "currency"]);
    let fractional = sql.query("SELECT count(*) FROM dashboard_clean WHERE gross <> trunc(gross)");
    assert_ne!(fractional[0][0], "0", "cents land as cents in the numeric columns");

    // A crash and a replay into tables with the version guard, made like the sink's own.
    let orders = unique("cj-kill");
    let killed = connect_topology(&orders, &unique("run-cj-kill"));
    create_topics(&killed);
    generate(&orders, GEN);
    for (table, like) in [("dashboard_replay", "dashboard_clean"), ("finance_replay", "finance_clean")] {
        sql.query(&format!("CREATE TABLE {table} (LIKE {like} INCLUDING ALL)"));
        sql.guard(table);
    }
    let dashboard_sink = connect.add_sink(&combined_topic(&killed.dashboard), "dashboard_replay", &pg);
    connect.add_sink(&combined_topic(&killed.finance_provisional), "finance_replay", &pg);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_versions(sql, "dashboard_replay", Arc::clone(&stop));
    let state = tempfile::tempdir().expect("tmp");
    let (dir, group) = (state.path().join("state"), unique("g"));
    crash_twice_then_run_to_end(&killed, &dir, &group);

    let query = query_dashboard(&killed);
    await_equal("dashboard table after a crash and a replay", &connect, &query, || {
        dashboard_table(&sql, "dashboard_replay")
    });
    let finance = summed_finance(&killed);
    await_equal("finance table after a crash and a replay", &connect, &finance, || {
        finance_table(&sql, "finance_replay")
    });
    // Older rows arriving after newer ones, as a replay can publish them, here every older
    // record of the topic produced again behind the final rows: the table keeps the final rows.
    let topic = combined_topic(&killed.dashboard);
    let older = older_than_final(&topic);
    assert!(!older.is_empty(), "keys of {topic} took more than one version");
    produce_again(&topic, &older);
    await_consumed(&format!("connect-{dashboard_sink}"), &topic);
    assert_same(&dashboard_table(&sql, "dashboard_replay"), &query, "the table after older rows came again");
    stop.store(true, Ordering::Relaxed);
    let backwards = watcher.join().expect("watcher");
    assert!(backwards.is_empty(), "versions went back in the table: {backwards:#?}");
}
