//! Hostile input against a real broker (SPEC §1.3, §1.4): nothing the broker accepted stops
//! a partition or the process; every bad record lands where docs/formats.md says; aborted
//! transactions are never applied and their markers never hold back the end; input topics
//! that stamp producer time, logs whose unprocessed head was deleted, and changed partition
//! counts are refused with what to do.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

/// A valid v1 order event for `store`, placed a few minutes ago.
fn event(id: &str, order: &str, store: &str, sku: &str) -> Vec<u8> {
    let at = (chrono::Utc::now() - chrono::Duration::minutes(3)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    serde_json::json!({
        "schema_version": 1, "event_id": id, "order_id": order, "event_type": "order_placed",
        "event_time": at, "store": store, "currency": "JPY",
        "lines": [{"sku": sku, "qty": 2, "unit_price": "1980"}]
    })
    .to_string()
    .into_bytes()
}

fn producer(extra: &[(&str, &str)]) -> BaseProducer {
    let mut cfg = settings().client_config();
    cfg.set("enable.idempotence", "true").set("message.max.bytes", "2000000");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("producer")
}

/// Produces `(key, value)` records to one partition, in order; `None` values are tombstones.
fn produce(topic: &str, partition: i32, records: &[(&str, Option<Vec<u8>>)]) {
    let p = producer(&[]);
    for (key, value) in records {
        let mut r = BaseRecord::<str, [u8]>::to(topic).partition(partition).key(*key);
        if let Some(v) = value {
            r = r.payload(&v[..]);
        }
        p.send(r).map_err(|(e, _)| e).expect("send");
        p.flush(Duration::from_secs(30)).expect("flush");
    }
}

fn admin() -> AdminClient<DefaultClientContext> {
    settings().client_config().create().expect("admin client")
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}

/// Stores of the dashboard rows written so far.
fn dashboard_stores(t: &Topo) -> Vec<String> {
    compacted(&t.dashboard)
        .keys()
        .filter_map(|k| String::from_utf8_lossy(k).split('|').nth(1).map(str::to_string))
        .collect()
}

/// Runs `tidemark run --exit-at-end` with `extra` flags; returns (success, stderr). Stderr
/// is read while the process runs (a full pipe would block it). A run that does not end
/// within two minutes is killed and fails the test with its last log lines.
fn run_once(t: &Topo, state: &std::path::Path, group: &str, extra: &[&str]) -> (bool, String) {
    use std::io::Read;
    let mut child =
        run_command(t, state, group).arg("--exit-at-end").args(extra).stdout(Stdio::null()).spawn().expect("spawn");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = reader.join().unwrap_or_default();
    match status {
        Some(status) => (status.success(), err),
        None => {
            let tail: Vec<&str> = err.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("tidemark run --exit-at-end did not end within 120 s; last lines:\n{}", tail.join("\n"))
        }
    }
}

#[test]
fn poison_records_on_a_running_stream_are_dead_lettered_and_the_good_record_after_them_is_applied() {
    let orders = unique("hostile");
    let t = topology(&orders, &orders);
    create_topics(&t);
    let state = tempfile::tempdir().expect("state");
    let port = free_port();
    let mut child = run_command(&t, state.path(), &unique("g"))
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for(Duration::from_secs(60), "the stream to be assigned its partitions", || {
        http("GET", port, "/metrics").filter(|(_, body)| body.contains("tidemark_")).map(|_| ())
    });

    let big = vec![b'{'; 1_048_000];
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let bad: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("o-big", Some(big.clone())),
        ("o-ctl", Some(event("e-ctl", "o-ctl", "tokyo-01", "SKU-\u{7}"))),
        ("o-long", Some(event(&"e".repeat(300), "o-long", "tokyo-01", "SKU-1"))),
        ("o-tomb", None),
        ("o-utf8", Some(b"{\"schema_version\":1,\"event_id\":\"\xff\xfe\"}".to_vec())),
        ("o-deep", Some(nested)),
        ("o-null", Some(b"null".to_vec())),
        ("o-empty", Some(Vec::new())),
    ];
    produce(&orders, 0, &bad);
    produce(
        &format!("{orders}.inventory"),
        0,
        &[
            ("SKU-1", None),
            (
                "SKU-\u{1b}",
                Some(b"{\"sku\":\"SKU-\\u001b\",\"on_hand\":5,\"as_of\":\"2026-11-28T14:00:00Z\"}".to_vec()),
            ),
        ],
    );
    produce(&orders, 0, &[("o-good", Some(event("e-good", "o-good", "good-store", "SKU-1")))]);

    let dead = wait_for(Duration::from_secs(90), "every bad record on the dead-letter topic", || {
        let dead = read(&t.dead_letter);
        (dead.len() >= bad.len() + 2).then_some(dead)
    });
    assert!(child.try_wait().expect("wait").is_none(), "the process must stay up");
    wait_for(Duration::from_secs(60), "the good record after the bad ones on the dashboard", || {
        dashboard_stores(&t).iter().any(|s| s == "good-store").then_some(())
    });
    assert_eq!(dead.len(), bad.len() + 2, "each bad record is dead-lettered exactly once");

    let by_key = |k: &str| {
        dead.iter().find(|m| m.key() == Some(k.as_bytes())).unwrap_or_else(|| panic!("{k} not dead-lettered"))
    };
    let big_dead = by_key("o-big");
    assert_eq!(header(big_dead, "tidemark.truncated").as_deref(), Some("true"));
    assert_eq!(header(big_dead, "tidemark.original.size").as_deref(), Some("1048000"));
    assert_eq!(header(big_dead, "tidemark.original.sha256").map(|h| h.len()), Some(64));
    assert!(big_dead.payload().is_some_and(|p| !p.is_empty() && p.len() < big.len() && big.starts_with(p)));
    assert_eq!(header(big_dead, "tidemark.reason").as_deref(), Some("not_json"));
    for (key, reason) in [
        ("o-ctl", "invalid_identifier"),
        ("o-long", "invalid_identifier"),
        ("o-utf8", "not_json"),
        ("o-deep", "not_json"),
        ("o-null", "not_json"),
        ("o-empty", "not_json"),
    ] {
        assert_eq!(header(by_key(key), "tidemark.reason").as_deref(), Some(reason), "{key}");
    }
    assert!(header(by_key("o-ctl"), "tidemark.detail").is_some_and(|d| d.contains("sku")), "the field is named");
    assert!(header(by_key("o-long"), "tidemark.detail").is_some_and(|d| d.contains("event_id")), "the field is named");
    assert!(header(by_key("o-tomb"), "tidemark.reason").is_some(), "a tombstone is dead-lettered with a reason");

    let (_, page) = http("GET", port, "/metrics").expect("metrics");
    let counted: f64 = metric(&page, "tidemark_dead_letters_total").iter().map(|(_, v)| v).sum();
    assert_eq!(counted as usize, bad.len() + 2, "dead letters are counted:\n{page}");
    signal(&child, "TERM");
    let status = child.wait().expect("wait");
    assert!(status.success(), "a clean stop after poison input: {status}");
}

#[test]
fn aborted_transactions_are_never_applied_and_their_markers_do_not_hold_back_the_end() {
    let orders = unique("txn");
    let t = topology(&orders, &orders);
    create_topics(&t);
    let p = producer(&[("transactional.id", &unique("txn-producer"))]);
    p.init_transactions(Duration::from_secs(30)).expect("init transactions");
    for (store, commit) in [("committed-1", true), ("aborted", false), ("committed-2", true)] {
        p.begin_transaction().expect("begin");
        for partition in 0..4 {
            let id = format!("e-{store}-{partition}");
            let value = event(&id, &format!("o-{id}"), store, "SKU-1");
            p.send(BaseRecord::<str, [u8]>::to(&orders).partition(partition).key(&id).payload(&value[..]))
                .map_err(|(e, _)| e)
                .expect("send");
        }
        // Delivered (but not yet committed or aborted) before the transaction ends.
        p.flush(Duration::from_secs(30)).expect("flush");
        if commit {
            p.commit_transaction(Duration::from_secs(30)).expect("commit");
        } else {
            p.abort_transaction(Duration::from_secs(30)).expect("abort");
        }
    }
    // Every partition now ends with a commit marker: the log end is one past the last record.
    let state = tempfile::tempdir().expect("state");
    let (ok, err) = run_once(&t, state.path(), &unique("g"), &[]);
    assert!(ok, "{err}");
    let mut stores = dashboard_stores(&t);
    stores.sort();
    stores.dedup();
    assert_eq!(stores, ["committed-1", "committed-2"], "aborted records are never applied");
    assert_eq!(processed(&err), 8, "only committed records are processed:\n{err}");
}

#[test]
fn an_input_topic_that_stamps_producer_time_is_refused_unless_accepted() {
    let orders = unique("createtime");
    let t = topology(&orders, &orders);
    let topic = NewTopic::new(&orders, 4, TopicReplication::Fixed(1)).set("message.timestamp.type", "CreateTime");
    let created = block_on(admin().create_topics(&[topic], &AdminOptions::new())).expect("create");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    create_topics(&t);
    produce(&orders, 0, &[("o-1", Some(event("e-1", "o-1", "tokyo-01", "SKU-1")))]);
    let state = tempfile::tempdir().expect("state");
    let (ok, err) = run_once(&t, state.path(), &unique("g"), &[]);
    assert!(!ok, "a CreateTime input must be refused");
    assert!(err.contains(&orders) && err.contains("LogAppendTime") && err.contains("--allow-create-time"), "{err}");
    let (ok, err) = run_once(&t, state.path(), &unique("g"), &["--allow-create-time"]);
    assert!(ok, "{err}");
    assert_eq!(processed(&err), 1);
}

#[test]
fn records_deleted_before_they_were_processed_stop_the_partition_unless_gaps_are_accepted() {
    let orders = unique("gap");
    let t = topology(&orders, &orders);
    create_topics(&t);
    let first: Vec<(String, Option<Vec<u8>>)> = (0..10)
        .map(|i| (format!("o-a{i}"), Some(event(&format!("e-a{i}"), &format!("o-a{i}"), "before", "SKU-1"))))
        .collect();
    let first: Vec<(&str, Option<Vec<u8>>)> = first.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    produce(&orders, 0, &first);
    let state = tempfile::tempdir().expect("state");
    let group = unique("g");
    let (ok, err) = run_once(&t, state.path(), &group, &[]);
    assert!(ok, "{err}");

    // 10 more records that the state never processes, of which retention "deletes" 6.
    let more: Vec<(String, Option<Vec<u8>>)> = (0..10)
        .map(|i| (format!("o-b{i}"), Some(event(&format!("e-b{i}"), &format!("o-b{i}"), "after", "SKU-1"))))
        .collect();
    let more: Vec<(&str, Option<Vec<u8>>)> = more.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    produce(&orders, 0, &more);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&orders, 0, Offset::Offset(16)).expect("tpl");
    block_on(admin().delete_records(&tpl, &AdminOptions::new())).expect("delete records");

    let (ok, err) = run_once(&t, state.path(), &group, &[]);
    assert!(!ok, "a gap must stop the process");
    assert!(err.contains("orders[0]") && err.contains("[10, 16)") && err.contains("--accept-gaps"), "{err}");

    let (ok, err) = run_once(&t, state.path(), &group, &["--accept-gaps"]);
    assert!(ok, "{err}");
    assert!(err.contains("records deleted before they were processed") && err.contains("lost=6"), "{err}");
    assert!(err.contains("fetching restarted at every task's next offset"), "{err}");
    assert_eq!(processed(&err), 4, "the records left after the gap are processed:\n{err}");
}

#[test]
fn a_changed_partition_count_is_refused_with_how_to_migrate() {
    let orders = unique("repartitioned");
    let t = topology(&orders, &orders);
    create_topics(&t);
    produce(&orders, 0, &[("o-1", Some(event("e-1", "o-1", "tokyo-01", "SKU-1")))]);
    let state = tempfile::tempdir().expect("state");
    let group = unique("g");
    let (ok, err) = run_once(&t, state.path(), &group, &[]);
    assert!(ok, "{err}");
    let grown = block_on(admin().create_partitions(&[NewPartitions::new(&orders, 6)], &AdminOptions::new()))
        .expect("create partitions");
    assert!(grown.iter().all(Result::is_ok), "{grown:?}");
    let (ok, err) = run_once(&t, state.path(), &group, &[]);
    assert!(!ok, "a changed partition count must be refused");
    assert!(err.contains("had 4 partitions") && err.contains("has 6 now") && err.contains("To migrate"), "{err}");
}
