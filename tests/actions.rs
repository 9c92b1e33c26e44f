//! The inventory anomaly path end to end: a real broker, real HTTP endpoints on 127.0.0.1,
//! the `tidemark run` binary as users run it.
//!
//! Which actions the topology fires, with which keys and payloads, whatever the pacing or
//! interleaving, is tested without a broker in `tests/driver.rs`. These tests check what
//! only the real runtime does: delivery, retries, audit, dead letters, several processes and
//! crashes. They wait for conditions (audit records, exit at the end of the log), never for
//! a fixed time.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;
use tidemark::dispatch::testkit::{Behaviour, Recorded, TestServer};

/// 2026-11-28T10:00:00Z
const T0: i64 = 1_795_860_000_000;

struct Scenario {
    topo: Topo,
    orders: String,
    _state: tempfile::TempDir,
}

/// A topology whose rules are `rules` (TOML `[[rules]]` blocks) and whose endpoints are the
/// given servers.
fn scenario(rules: &str, action_url: &str, notify_url: &str) -> Scenario {
    over(&unique("act"), rules, action_url, notify_url, |t| t)
}

/// A run over the input topics named `orders`, with fresh outputs, `rules`, these endpoints,
/// and a last `edit` of the topology text.
fn over(orders: &str, rules: &str, action_url: &str, notify_url: &str, edit: impl Fn(String) -> String) -> Scenario {
    let topo = topology(orders, &unique("run-act"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut]
        .replace("# action_url = \"https://inventory.internal/actions\"", &format!("action_url = \"{action_url}\""))
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{notify_url}\""))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"")
        + rules;
    std::fs::write(&topo.path, edit(text)).expect("write");
    create_topics(&topo);
    Scenario { topo, orders: orders.to_string(), _state: tempfile::tempdir().expect("tmp") }
}

fn v2_line(event_id: &str, order: &str, kind: &str, t_ms: i64, sku: &str, qty: u32) -> String {
    format!(
        r#"{{"schema_version":2,"event_id":"{event_id}","order_id":"{order}","type":"{kind}","occurred_at_ms":{t_ms},"store_id":"tokyo-01","channel":"web","items":[{{"sku":"{sku}","quantity":{qty},"price":{{"amount_minor":1000,"currency":"JPY"}}}}]}}"#
    )
}

fn produce(topic: &str, key: &str, value: &str) {
    let p: BaseProducer = settings().client_config().create().expect("producer");
    p.send(BaseRecord::to(topic).key(key).payload(value)).map_err(|(e, _)| e).expect("send");
    p.flush(Duration::from_secs(30)).expect("flush");
    // Distinct broker append times keep the intended logical order across topics.
    std::thread::sleep(Duration::from_millis(30));
}

fn snapshot(s: &Scenario, sku: &str, on_hand: i64, as_of: &str) {
    produce(
        &format!("{}.inventory", s.orders),
        sku,
        &format!(r#"{{"sku":"{sku}","on_hand":{on_hand},"as_of":"{as_of}"}}"#),
    );
}

fn audit(s: &Scenario) -> Vec<serde_json::Value> {
    read(&s.topo.dashboard.replace(".dashboard", ".audit"))
        .iter()
        .map(|m| serde_json::from_slice(m.payload().unwrap_or_default()).expect("audit JSON"))
        .collect()
}

fn by_key(requests: &[Recorded]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for r in requests {
        m.entry(r.header("idempotency-key").unwrap_or_default().to_string()).or_default().push(r.body.clone());
    }
    m
}

/// A running processor; its log goes to a file that is printed if the test fails.
struct Running(std::process::Child, Option<std::path::PathBuf>);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if let (true, Some(log)) = (std::thread::panicking(), &self.1) {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- last lines of {}:\n{}", log.display(), lines[lines.len().saturating_sub(60)..].join("\n"));
            // The whole log, for a failure that is hard to reproduce.
            if let (Ok(dir), Some(name)) = (std::env::var("TIDEMARK_TEST_KEEP_LOGS"), log.file_name()) {
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::copy(log, std::path::Path::new(&dir).join(name));
            }
        }
    }
}

fn start(s: &Scenario) -> Running {
    let log = s._state.path().with_extension("log");
    let file = std::fs::File::create(&log).expect("log file");
    let child = run_command(&s.topo, s._state.path(), &unique("g"))
        .env("TIDEMARK_LOG", "info,tidemark::actions=debug")
        .stderr(file)
        .spawn()
        .expect("spawn");
    Running(child, Some(log))
}

const STOCK_RULES: &str = r#"
[[rules]]
id = "oversell"
version = 1
mode = "act"

[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 10, replenish_to = 100 }

[[rules]]
id = "velocity_spike"
version = 1
mode = "shadow"
params = { min_units = 50, factor = "3.0", baseline_windows = 15 }
"#;

#[test]
fn a_scripted_scenario_fires_exactly_the_expected_actions_and_shadow_rules_never_call() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let actions = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let notify = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let s = scenario(STOCK_RULES, actions.url("/actions").as_str(), notify.url("/notify").as_str());
    let _run = start(&s);

    snapshot(&s, "SKU-A", 5, "2026-11-28T10:00:00Z");
    produce(&s.orders, "o1", &v2_line("e1", "o1", "ORDER_PLACED", T0 + 60_000, "SKU-A", 3));
    produce(&s.orders, "o2", &v2_line("e2", "o2", "ORDER_PLACED", T0 + 61_000, "SKU-A", 4));
    produce(&s.orders, "o2", &v2_line("e3", "o2", "ORDER_CANCELLED", T0 + 62_000, "SKU-A", 4));
    produce(&s.orders, "o3", &v2_line("e4", "o3", "ORDER_PLACED", T0 + 120_000, "SKU-B", 60));
    // The same event again: a duplicate must change nothing.
    produce(&s.orders, "o2", &v2_line("e2", "o2", "ORDER_PLACED", T0 + 61_000, "SKU-A", 4));

    // Once both attempts are audited as delivered and the shadow row is audited, every row
    // of this input is final: nothing more is sent for it.
    let records = wait_for(Duration::from_secs(60), "two delivered attempts and the shadow action audited", || {
        let a = audit(&s);
        let delivered = a.iter().filter(|r| r["event"] == "attempt" && r["reason"] == "delivered").count();
        (delivered >= 2 && a.iter().any(|r| r["event"] == "shadow")).then_some(a)
    });
    let keys = by_key(&actions.requests());
    let expected: Vec<String> = vec![
        "low_stock:v1:SKU-A:snapshot:2026-11-28T10:00:00.000Z".into(),
        "oversell:v1:SKU-A:snapshot:2026-11-28T10:00:00.000Z".into(),
    ];
    assert_eq!(keys.keys().cloned().collect::<Vec<_>>(), expected, "exactly these actions");
    for (key, bodies) in &keys {
        assert_eq!(bodies.len(), 1, "{key} delivered once");
        let body: serde_json::Value = serde_json::from_slice(&bodies[0]).expect("json");
        assert_eq!(body["action_id"], key.as_str());
        assert_eq!(body["sku"], "SKU-A");
    }
    let oversell: serde_json::Value = serde_json::from_slice(&keys[&expected[1]][0]).expect("json");
    assert_eq!(oversell["action"], "stop_sale");
    assert_eq!(oversell["evidence"]["available"], -2);
    let low: serde_json::Value = serde_json::from_slice(&keys[&expected[0]][0]).expect("json");
    assert_eq!(low["action"], "replenish");
    assert_eq!(notify.request_count(), 0, "the velocity rule is in shadow mode: it must never call");

    let shadow: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "shadow").collect();
    assert_eq!(shadow.len(), 1);
    assert_eq!(shadow[0]["key"], "velocity_spike:v1:SKU-B:window:2026-11-28T10:02:00.000Z");
    for key in &expected {
        assert!(
            records.iter().any(|r| r["key"] == key.as_str() && r["event"] == "attempt"),
            "attempt of {key} audited"
        );
    }
}

#[test]
fn an_endpoint_failing_with_5xx_then_recovering_gets_the_action_once_per_key_with_one_payload() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let actions = rt.block_on(TestServer::start(Behaviour::FailFirst { n: 3, status: 503 })).expect("server");
    let rules = "\n[[rules]]\nid = \"oversell\"\nversion = 1\nmode = \"act\"\n";
    let s = scenario(rules, actions.url("/a").as_str(), actions.url("/n").as_str());
    let _run = start(&s);
    snapshot(&s, "SKU-C", 1, "2026-11-28T10:00:00Z");
    produce(&s.orders, "o9", &v2_line("e9", "o9", "ORDER_PLACED", T0 + 60_000, "SKU-C", 2));

    // The delivered attempt is audited once the row is final: no retry can follow it.
    let a = wait_for(Duration::from_secs(60), "four audited attempts, the last delivered", || {
        let a = audit(&s);
        let attempts = a.iter().filter(|r| r["event"] == "attempt").count();
        (attempts >= 4 && a.iter().any(|r| r["event"] == "attempt" && r["reason"] == "delivered")).then_some(a)
    });
    assert_eq!(actions.request_count(), 4, "retries stop at the first 2xx");
    let keys = by_key(&actions.requests());
    assert_eq!(keys.len(), 1);
    let bodies = keys.values().next().expect("one key");
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "every attempt carries the same payload bytes");
    assert_eq!(a.iter().filter(|r| r["event"] == "attempt").count(), 4);
    assert_eq!(a.iter().filter(|r| r["event"] == "attempt" && r["reason"] == "delivered").count(), 1);
}

#[test]
fn a_409_counts_as_done_and_a_422_is_dead_lettered_and_audited_without_retries() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let conflict = rt.block_on(TestServer::start(Behaviour::Status(409))).expect("server");
    let rejecting = rt.block_on(TestServer::start(Behaviour::Status(422))).expect("server");
    let rules = "\n[[rules]]\nid = \"oversell\"\nversion = 1\nmode = \"act\"\n\n[[rules]]\nid = \"low_stock\"\nversion = 1\nmode = \"notify\"\nparams = { threshold = 10, replenish_to = 100 }\n";
    let s = scenario(rules, conflict.url("/a").as_str(), rejecting.url("/n").as_str());
    let _run = start(&s);
    snapshot(&s, "SKU-D", 1, "2026-11-28T10:00:00Z");
    produce(&s.orders, "o7", &v2_line("e7", "o7", "ORDER_PLACED", T0 + 60_000, "SKU-D", 2));

    // Both outcomes audited: both rows are final, so no retry can follow.
    let a = wait_for(Duration::from_secs(60), "the 409 and the 422 audited", || {
        let a = audit(&s);
        let conflict = a.iter().any(|r| r["status"] == 409);
        let rejected = a.iter().any(|r| r["status"] == 422);
        (conflict && rejected).then_some(a)
    });
    let dead = wait_for(Duration::from_secs(30), "the rejected action in the action dead-letter topic", || {
        let d = read(&s.topo.dashboard.replace(".dashboard", ".action-dead-letter"));
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(conflict.request_count(), 1, "409 means done: no retry");
    assert_eq!(rejecting.request_count(), 1, "422 is permanent: no retry");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key(), Some("low_stock:v1:SKU-D:snapshot:2026-11-28T10:00:00.000Z".as_bytes()));
    assert!(a
        .iter()
        .any(|r| r["status"] == 422 && r["reason"].as_str().is_some_and(|x| x.starts_with("permanent failure"))));
    assert!(a.iter().any(|r| r["status"] == 409 && r["reason"] == "conflict"));
}

/// Runs the processor with `--exit-at-end`: it stops once the log is processed and every
/// action it produced is delivered; returns what the server received.
/// Waits (up to 2 minutes) until `server` got every key of `reference` from `who`, a process
/// with no end to wait for; then checks it got no other key and each first payload is the
/// reference's.
fn sends_the_actions_of(reference: &BTreeMap<String, Vec<Vec<u8>>>, server: &TestServer, who: &str) {
    let got = wait_for(Duration::from_secs(120), &format!("{who} to send every key of the reference run"), || {
        let got = by_key(&server.requests());
        reference.keys().all(|k| got.contains_key(k)).then_some(got)
    });
    assert_eq!(got.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "the same action keys");
    for (k, bodies) in &got {
        assert_eq!(bodies[0], reference[k][0], "payload of {k}");
    }
}

fn run_through(s: &Scenario, server: &TestServer) -> Vec<Recorded> {
    run_to_end(&s.topo, s._state.path(), &unique("g"));
    server.requests()
}

/// A scenario whose three rules all act, POSTing to `server`; a second endpoint for a
/// reference run; and the rules, for siblings.
fn acting(rt: &tokio::runtime::Runtime) -> (TestServer, TestServer, String, Scenario) {
    let server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let reference_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let all_act = firing_rules("act", "act", "act");
    let s = scenario(&all_act, server.url("/a").as_str(), server.url("/n").as_str());
    (server, reference_server, all_act, s)
}

/// A second run over the same input topics, with its own outputs and endpoint.
fn sibling(first: &Scenario, rules: &str, action_url: &str, edit: impl Fn(String) -> String) -> Scenario {
    over(&first.orders, rules, action_url, action_url, edit)
}

#[test]
fn actions_do_not_depend_on_pacing_batch_sizes_or_how_partitions_are_split_between_processes() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let a_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let b_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let all_act = firing_rules("act", "act", "act");
    let a = scenario(&all_act, a_server.url("/a").as_str(), a_server.url("/n").as_str());
    generate(&a.orders, GEN_ACTIONS);
    let b = sibling(&a, &all_act, b_server.url("/a").as_str(), |t| {
        t.replace("commit_interval = \"100ms\"", "commit_interval = \"20ms\"")
            .replace("max_batch_records = 2000", "max_batch_records = 7")
    });
    let group = unique("g");
    let member = |n: &str| {
        let state = b._state.path().join(n);
        let (stderr, log) = log_beside(&state);
        let child = member_command(&b.topo, &state, &group, &format!("{group}-{n}")).stderr(stderr).spawn();
        Running(child.expect("spawn"), Some(log))
    };
    let (_two, _three) = (member("1"), member("2"));
    let x = by_key(&run_through(&a, &a_server));
    assert!(x.len() >= 3, "the history must fire several actions, got {}", x.len());
    // The group has no end to wait for: poll until it has sent at least the same keys.
    sends_the_actions_of(&x, &b_server, "the two-process group");
}

#[test]
fn a_kill_between_a_2xx_and_the_outbox_update_and_the_whole_log_replayed_create_no_new_keys_and_no_second_payload() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let clean_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let faulty_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let all_act = firing_rules("act", "act", "act");
    let clean = scenario(&all_act, clean_server.url("/a").as_str(), clean_server.url("/n").as_str());
    generate(&clean.orders, GEN_ACTIONS);
    let faulty = sibling(&clean, &all_act, faulty_server.url("/a").as_str(), |t| t);
    let reference = by_key(&run_through(&clean, &clean_server));

    let group = unique("g");
    let dir = faulty._state.path().to_path_buf();
    let mut crashed =
        spawn_run(&faulty.topo, &dir, &group, &[("TIDEMARK_FAILPOINTS", "dispatch.after_ack_before_mark=3")]);
    let status =
        wait_for(Duration::from_secs(60), "the failpoint to abort the process", || crashed.try_wait().ok().flatten());
    assert!(!status.success());
    let crashed_at = std::time::Instant::now();
    // The whole log, appended a second time; the restarted process runs to the end of it and
    // until every action it produced is delivered.
    copy_log(&clean.orders, &clean.orders, 1);
    copy_log(&format!("{}.inventory", clean.orders), &format!("{}.inventory", clean.orders), 1);
    run_to_end(&faulty.topo, &dir, &group);
    let requests = faulty_server.requests();
    let got = by_key(&requests);

    assert_eq!(got.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "no new keys, none missing");
    for (k, bodies) in &got {
        assert!(bodies.iter().all(|b| *b == reference[k][0]), "{k} was sent with a payload the clean run did not send");
    }
    // A repeat is allowed only for an action whose POST was under way when the process died
    // (sent, answered or not, but not yet recorded): at most one repeat, and the first POST
    // must predate the crash.
    let mut repeats = 0;
    for (k, n) in got.iter().map(|(k, b)| (k, b.len())).filter(|(_, n)| *n > 1) {
        assert_eq!(n, 2, "{k} was POSTed {n} times");
        let first = requests.iter().find(|r| r.header("idempotency-key") == Some(k.as_str())).expect("first");
        assert!(first.arrived <= crashed_at, "{k} repeated although its first POST came after the crash");
        repeats += 1;
    }
    eprintln!("{} keys, {repeats} repeated across the crash", got.len());
}

/// Fences in `topic`: records whose value is the fence value (the stream skips them).
fn fences_in(topic: &str) -> usize {
    read(topic).iter().filter(|m| tidemark_topology::fence::is_fence(m.payload())).count()
}

#[test]
fn with_fences_idle_partitions_release_the_merge_without_the_clock_skew_and_the_actions_are_those_of_a_clock_run() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fence_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let clock_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let all_act = firing_rules("act", "act", "act");
    // A clock promise 10 minutes behind: under it no action of this test could be released
    // before the wait below gives up. Only fences can release the merge in time.
    let fenced =
        over(&unique("act"), &all_act, fence_server.url("/a").as_str(), fence_server.url("/n").as_str(), |t| {
            assert!(
                t.contains("\nidle_skew = \"2s\"\n") && t.contains("\nidle_promise = \"clock\"\n"),
                "the example sets both"
            );
            t.replace("\nidle_skew = \"2s\"\n", "\nidle_skew = \"10m\"\n")
                .replace("\nidle_promise = \"clock\"\n", "\nidle_promise = \"fence\"\n")
        });
    let _run = start(&fenced);
    generate(&fenced.orders, GEN_ACTIONS);
    // The same log (fences included, as the fencing process appends them meanwhile) read
    // with the clock promise, to the end.
    let clock = sibling(&fenced, &all_act, clock_server.url("/a").as_str(), |t| t);
    let reference = by_key(&run_through(&clock, &clock_server));
    assert!(reference.len() >= 3, "the history must fire several actions, got {}", reference.len());
    sends_the_actions_of(&reference, &fence_server, "the fencing process");
    let inventory = format!("{}.inventory", fenced.orders);
    assert!(fences_in(&inventory) > 0, "the idle inventory partitions were fenced");
    // Neither run took a fence for an input record.
    assert_eq!(read(&fenced.topo.dead_letter).len(), read(&clock.topo.dead_letter).len(), "the same dead letters");
}

/// [`GEN_ACTIONS`] continued: another seed (other event ids) five minutes of event time later.
fn gen_actions_later() -> Vec<&'static str> {
    let mut args = GEN_ACTIONS.to_vec();
    let seed = args.iter().position(|a| *a == "--seed").expect("GEN_ACTIONS sets a seed");
    args[seed + 1] = "22";
    args.extend(["--start", "2026-11-28T00:05:00Z"]);
    args
}

#[test]
fn a_volume_lost_and_restored_from_an_older_snapshot_replays_only_the_log_after_it_and_sends_no_completed_action_again()
{
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, reference_server, all_act, s) = acting(&rt);
    let (snapshots, older) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    let group = unique("g");
    let run = |state: &std::path::Path, dir: &std::path::Path| {
        run_to_end_with(&s.topo, state, &group, &[("TIDEMARK_SNAPSHOT_DIR", dir.to_str().expect("utf-8 path"))])
    };

    // Part one of the history; the run snapshots every partition when it stops.
    generate(&s.orders, GEN_ACTIONS);
    run(s._state.path(), snapshots.path());
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", snapshots.path().display()))
        .arg(older.path())
        .status()
        .expect("cp");
    assert!(copied.success());
    let after_one = by_key(&server.requests());
    // Part two, on the same volume: its actions are delivered and audited after that snapshot.
    let later = generate(&s.orders, &gen_actions_later());
    run(s._state.path(), snapshots.path());
    let after_two = by_key(&server.requests());
    let since: Vec<&String> = after_two.keys().filter(|k| !after_one.contains_key(*k)).collect();
    assert!(
        !after_one.is_empty() && !since.is_empty(),
        "both parts fire actions: {} then {}",
        after_one.len(),
        since.len()
    );

    // The volume is lost, and with it the newer snapshots: only part one's are left.
    let fresh = tempfile::tempdir().expect("tmp");
    let log = run(fresh.path(), older.path());
    assert!(log.contains("restored from snapshot"), "the partitions came from the snapshot:\n{log}");
    assert_eq!(
        processed(&log),
        later["records"].as_u64().expect("count"),
        "only the log after the snapshot is replayed (orders and inventory records of part two)"
    );
    let after_restore = by_key(&server.requests());
    for (key, bodies) in &after_restore {
        assert_eq!(bodies.len(), 1, "{key} was POSTed {} times", bodies.len());
    }
    assert_eq!(after_restore.keys().collect::<Vec<_>>(), after_two.keys().collect::<Vec<_>>(), "no key new or missing");
    let settled: Vec<String> = audit(&s)
        .iter()
        .filter(|r| r["event"] == "settled")
        .filter_map(|r| r["key"].as_str().map(str::to_string))
        .collect();
    let mut expected: Vec<String> = since.iter().map(|k| k.to_string()).collect();
    expected.sort();
    let mut settled_sorted = settled.clone();
    settled_sorted.sort();
    assert_eq!(settled_sorted, expected, "every action completed after the snapshot is recorded as settled, once");

    // The dashboard ends where a run that never lost anything ends.
    let reference = sibling(&s, &all_act, reference_server.url("/a").as_str(), |t| t);
    run_through(&reference, &reference_server);
    assert_eq!(compacted(&s.topo.dashboard), compacted(&reference.topo.dashboard), "dashboard values");
}

#[test]
fn partitions_taken_away_and_given_back_after_new_records_arrived_fire_the_actions_of_a_run_that_never_moved_them() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, reference_server, all_act, s) = acting(&rt);
    let group = unique("g");
    let port_b = free_port();

    // B alone processes part one.
    generate(&s.orders, GEN_ACTIONS);
    let b = standby_member(&s, &group, "b", port_b, &[]);
    let reference = sibling(&s, &all_act, reference_server.url("/a").as_str(), |t| t);
    let part_one = by_key(&run_through(&reference, &reference_server));
    wait_for(Duration::from_secs(120), "b to send part one's actions", || {
        let sent = by_key(&server.requests());
        part_one.keys().all(|k| sent.contains_key(k)).then_some(())
    });
    // A joins: B gives partitions up (the first step of a cooperative rebalance), and A dies at
    // its first assignment, before the second step hands it any. The group gives them back to
    // B once A's session expires; part two is appended in between, so B's client last saw
    // these partitions end where part one ends. Both run standby tasks: B's standby copy takes
    // the partitions in between and hands them back (CI caught a gap on this path).
    let mut a = standby_member(&s, &group, "a", free_port(), &[("TIDEMARK_FAILPOINTS", "assign.received=1")]);
    wait_for(Duration::from_secs(60), "a to die at its first assignment", || a.0.try_wait().ok().flatten());
    generate(&s.orders, &gen_actions_later());

    let got = sent_as_one_process_would(&rt, &s, &all_act, &server, port_b);
    let log = std::fs::read_to_string(s._state.path().join("b").with_extension("log")).unwrap_or_default();
    let gave_up = log.lines().any(|l| l.contains("revoked partitions=[") && !l.contains("revoked partitions=[]"));
    assert!(gave_up, "b gave partitions up");
    // A died before it was handed anything, so it POSTed nothing: no crash window, no repeat.
    for (key, bodies) in &got {
        assert_eq!(bodies.len(), 1, "{key} was POSTed {} times", bodies.len());
    }
    drop(b);
}

/// Waits until `server` has every action a one-process run over both parts sends, and checks
/// that it got no other key, each with that run's payload, and that the member serving
/// `port` never broke a progress promise. Returns what `server` got, by key.
fn sent_as_one_process_would(
    rt: &tokio::runtime::Runtime,
    s: &Scenario,
    rules: &str,
    server: &TestServer,
    port: u16,
) -> BTreeMap<String, Vec<Vec<u8>>> {
    let full_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let full = sibling(s, rules, full_server.url("/a").as_str(), |t| t);
    let everything = by_key(&run_through(&full, &full_server));
    let got = wait_for(Duration::from_secs(120), "every action of both parts", || {
        let sent = by_key(&server.requests());
        everything.keys().all(|k| sent.contains_key(k)).then_some(sent)
    });
    let broken = gauge_at(port, "tidemark_merge_broken_promises_total");
    assert_eq!(broken, Some(0.0), "no upstream task promised past a record it had not read");
    let new: Vec<(&String, String)> = got
        .iter()
        .filter(|(k, _)| !everything.contains_key(*k))
        .map(|(k, bodies)| (k, String::from_utf8_lossy(&bodies[0]).into_owned()))
        .collect();
    assert!(new.is_empty(), "keys the one-process reference never sent: {new:#?}");
    for (key, bodies) in &got {
        assert_eq!(bodies[0], everything[key][0], "payload of {key}");
    }
    // The dashboard ends where the one-process run's ends.
    let want = compacted(&full.topo.dashboard);
    wait_for(Duration::from_secs(60), "the dashboard to match the reference", || {
        (compacted(&s.topo.dashboard) == want).then_some(())
    });
    got
}

/// A member of a two-process group with standby tasks, metrics on `port`, these extra
/// environment variables set.
fn standby_member(s: &Scenario, group: &str, n: &str, port: u16, env: &[(&str, &str)]) -> Running {
    let state = s._state.path().join(n);
    let (stderr, log) = log_beside(&state);
    let mut c = member_command(&s.topo, &state, group, &format!("{group}-{n}"));
    c.args(["--standbys", "all", "--session-timeout", "6s", "--http-addr", &format!("127.0.0.1:{port}")])
        .args(["--admin-addr", "off"])
        .env("TIDEMARK_LOG", "info")
        .envs(env.iter().copied())
        .stderr(stderr);
    Running(c.spawn().expect("spawn"), Some(log))
}

/// One value of a metric without labels on the process serving `port`, if it answers.
fn gauge_at(port: u16, name: &str) -> Option<f64> {
    let (_, page) = http("GET", port, "/metrics")?;
    metric(&page, name).first().map(|(_, v)| *v)
}

#[test]
fn a_member_gone_for_good_hands_its_partitions_to_the_standby_tasks_of_the_other_and_no_completed_action_is_sent_again()
{
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, reference_server, all_act, s) = acting(&rt);
    let group = unique("g");
    let (port_a, port_b) = (free_port(), free_port());

    // Part one, processed by two members, each standing by for the other's partitions.
    generate(&s.orders, GEN_ACTIONS);
    let mut a = standby_member(&s, &group, "a", port_a, &[]);
    let b = standby_member(&s, &group, "b", port_b, &[]);
    let reference = sibling(&s, &all_act, reference_server.url("/a").as_str(), |t| t);
    let part_one = by_key(&run_through(&reference, &reference_server));
    assert!(part_one.len() >= 3, "part one must fire several actions, got {}", part_one.len());
    wait_for(Duration::from_secs(120), "both members to send part one's actions", || {
        let sent = by_key(&server.requests());
        part_one.keys().all(|k| sent.contains_key(k)).then_some(())
    });
    // Both members own partitions (a cooperative rebalance moves them in two steps), and B's
    // standby copy of A's partitions is warm and has seen every action A completed.
    let owned = |port: u16| {
        let (_, page) = http("GET", port, "/metrics")?;
        Some(metric(&page, "tidemark_partition_owned").iter().filter(|(_, v)| *v == 1.0).count())
    };
    // Warm alone is not enough: a warm copy may still be a few records behind A's commits, and a
    // row B has not derived yet cannot wait for its audit (seen once: one key POSTed twice).
    // So: A has nothing in flight, B's standby tasks are at A's commits with no row waiting, and
    // all of it holds twice, a second apart.
    let settled = || {
        let owns = owned(port_a)?.min(owned(port_b)?);
        let in_flight = gauge_at(port_a, "tidemark_outbox_pending")?;
        let standing_by = gauge_at(port_b, "tidemark_standby_partitions")?;
        let warm = gauge_at(port_b, "tidemark_standby_warm")?;
        let lag = gauge_at(port_b, "tidemark_standby_lag_records")?;
        let waiting = gauge_at(port_b, "tidemark_standby_rows_waiting")?;
        (owns > 0 && in_flight == 0.0 && standing_by > 0.0 && warm == 1.0 && lag == 0.0 && waiting == 0.0).then_some(())
    };
    wait_for(Duration::from_secs(60), "b's standby tasks to catch up and settle their rows", || {
        settled()?;
        std::thread::sleep(Duration::from_secs(1));
        settled()
    });

    // A dies and never comes back; part two arrives.
    signal(&a.0, "KILL");
    let _ = a.0.wait();
    generate(&s.orders, &gen_actions_later());
    let got = sent_as_one_process_would(&rt, &s, &all_act, &server, port_b);

    assert!(gauge_at(port_b, "tidemark_standby_promotions_total").unwrap_or(0.0) > 0.0, "b promoted standby tasks");
    let log = std::fs::read_to_string(s._state.path().join("b").with_extension("log")).unwrap_or_default();
    assert!(log.contains("standby tasks handed to the active tasks"), "b took a's partitions from its standby tasks");
    for (key, bodies) in &got {
        assert_eq!(bodies.len(), 1, "{key} was POSTed {} times", bodies.len());
    }
    drop(b);
}

/// A member of a group that moves state through snapshots in `snapshots` (no standbys, no
/// periodic rounds within a test: only the hand-over exports), metrics on `port`, its
/// deliveries logged.
fn snapshot_member(s: &Scenario, group: &str, n: &str, port: u16, snapshots: &std::path::Path) -> Running {
    let state = s._state.path().join(n);
    let (stderr, log) = log_beside(&state);
    let mut c = member_command(&s.topo, &state, group, &format!("{group}-{n}"));
    c.args(["--session-timeout", "6s", "--http-addr", &format!("127.0.0.1:{port}"), "--admin-addr", "off"])
        .arg("--snapshot-dir")
        .arg(snapshots)
        .args(["--snapshot-interval", "1h"])
        .env("TIDEMARK_LOG", "info,tidemark::dispatch=debug")
        .stderr(stderr);
    Running(c.spawn().expect("spawn"), Some(log))
}

/// The largest consumer lag of the member serving `port` over every partition, once it knows
/// the lag of all four orders partitions (a series appears when its partition's lag is first
/// known: before that, one series at 0 is not "no lag").
fn input_lag(port: u16) -> Option<f64> {
    let (_, page) = http("GET", port, "/metrics")?;
    let lags = metric(&page, "tidemark_consumer_lag_records");
    let orders = lags.iter().filter(|(l, _)| l.contains("source=\"orders\"")).count();
    (orders == 4).then(|| lags.iter().map(|(_, v)| *v).fold(0.0, f64::max))
}

/// The SKU partitions the member serving `port` owns, if it answers.
fn sku_owned(port: u16) -> Option<usize> {
    let (_, page) = http("GET", port, "/metrics")?;
    Some(
        metric(&page, "tidemark_partition_owned")
            .iter()
            .filter(|(l, v)| l.contains("sku-repartition") && *v == 1.0)
            .count(),
    )
}

/// The member serving `port` has nothing left to do: every SKU partition owned, no input
/// lag, no action pending, twice in a row.
fn settled_alone(port: u16, sku_partitions: usize) -> Option<()> {
    let quiet = || {
        let lag = input_lag(port)?;
        let pending = gauge_at(port, "tidemark_outbox_pending")?;
        (sku_owned(port)? == sku_partitions && lag == 0.0 && pending == 0.0).then_some(())
    };
    quiet()?;
    std::thread::sleep(Duration::from_secs(1));
    quiet()
}

#[test]
fn a_partition_that_goes_back_to_its_first_owner_after_the_second_delivered_and_died_sends_none_of_those_actions_again()
{
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, _reference_server, all_act, s) = acting(&rt);
    let snapshots = tempfile::tempdir().expect("tmp");
    let group = unique("g");
    let (port_a, port_b) = (free_port(), free_port());

    // A alone delivers part one, then leaves on SIGTERM: its partitions are exported as it goes.
    generate(&s.orders, GEN_ACTIONS);
    let mut a = snapshot_member(&s, &group, "a", port_a, snapshots.path());
    wait_for(Duration::from_secs(120), "a to send part one's actions", || settled_alone(port_a, 4));
    let part_one = by_key(&server.requests());
    assert!(part_one.len() >= 3, "part one must fire several actions, got {}", part_one.len());
    signal(&a.0, "TERM");
    let stopped = a.0.wait().expect("a exits");
    assert!(stopped.success(), "a stops cleanly: {stopped}");

    // B takes every partition from A's hand-over snapshots and delivers part two.
    let mut b = snapshot_member(&s, &group, "b", port_b, snapshots.path());
    generate(&s.orders, &gen_actions_later());
    let full_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let full = sibling(&s, &all_act, full_server.url("/a").as_str(), |t| t);
    let everything = by_key(&run_through(&full, &full_server));
    wait_for(Duration::from_secs(120), "b to send every action of both parts", || {
        let sent = by_key(&server.requests());
        (everything.keys().all(|k| sent.contains_key(k)) && settled_alone(port_b, 4).is_some()).then_some(())
    });
    let b_log = std::fs::read_to_string(s._state.path().join("b").with_extension("log")).unwrap_or_default();
    assert!(b_log.contains("restored from snapshot"), "b started from a's hand-over");
    let by_b = b_log.lines().filter(|l| l.contains("action delivered")).count();
    assert!(by_b > 0, "b delivered actions of part two");

    // B dies before any snapshot round of its own; A comes back to its own older state, which
    // is as new as the newest snapshot, and replays part two.
    signal(&b.0, "KILL");
    let _ = b.0.wait();
    let a = snapshot_member(&s, &group, "a", port_a, snapshots.path());
    wait_for(Duration::from_secs(120), "a to own every partition again and settle", || settled_alone(port_a, 4));

    let got = by_key(&server.requests());
    let twice: Vec<(&String, usize)> = got.iter().filter(|(_, b)| b.len() > 1).map(|(k, b)| (k, b.len())).collect();
    assert!(twice.is_empty(), "{} of {} keys POSTed again after the move back: {twice:?}", twice.len(), got.len());
    assert_eq!(got.keys().collect::<Vec<_>>(), everything.keys().collect::<Vec<_>>(), "no key new or missing");
    drop(a);
}

/// Whether the process serving `port` owns `role[partition]` (`tidemark_partition_owned`).
fn owns(page: &str, role: &str, partition: i32) -> bool {
    let labels = (format!("source=\"{role}\""), format!("partition=\"{partition}\""));
    metric(page, "tidemark_partition_owned")
        .iter()
        .any(|(l, v)| l.contains(&labels.0) && l.contains(&labels.1) && *v == 1.0)
}

#[test]
fn a_slow_snapshot_import_of_one_partition_does_not_stop_the_others_and_the_run_ends_as_one_that_never_moved() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, reference_server, all_act, s) = acting(&rt);
    let snapshots = tempfile::tempdir().expect("tmp");
    let snapshot_dir = snapshots.path().to_str().expect("utf-8 path");
    let group = unique("g");

    // Part one, snapshotted when the run stops; part two appended after it.
    generate(&s.orders, GEN_ACTIONS);
    run_to_end_with(&s.topo, s._state.path(), &group, &[("TIDEMARK_SNAPSHOT_DIR", snapshot_dir)]);
    let later = generate(&s.orders, &gen_actions_later());

    // A new volume: every partition's snapshot is ahead of it; orders[0]'s import takes 25 s.
    let fresh = tempfile::tempdir().expect("tmp");
    let state = fresh.path().join("b");
    let (stderr, log_path) = log_beside(&state);
    let port = free_port();
    let mut c = run_command(&s.topo, &state, &group);
    c.args(["--exit-at-end", "--http-addr", &format!("127.0.0.1:{port}"), "--admin-addr", "off"])
        .env("TIDEMARK_SNAPSHOT_DIR", snapshot_dir)
        .env("TIDEMARK_FAILPOINTS", "import.orders[0]=pause:25000")
        .stderr(stderr);
    let mut run = Running(c.spawn().expect("spawn"), Some(log_path.clone()));

    // While it imports, orders[1] is restored from its snapshot and reads part two to its end.
    wait_for(Duration::from_secs(20), "orders[1] running and caught up while orders[0] imports", || {
        let (_, page) = http("GET", port, "/metrics")?;
        let lag = metric(&page, "tidemark_consumer_lag_records")
            .into_iter()
            .find(|(l, _)| l.contains("source=\"orders\"") && l.contains("partition=\"1\""))?;
        (owns(&page, "orders", 1) && !owns(&page, "orders", 0) && lag.1 == 0.0).then_some(())
    });
    let status = wait_for(Duration::from_secs(120), "the run to end", || run.0.try_wait().ok().flatten());
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    run.1 = None;
    assert!(status.success(), "the run failed:\n{log}");
    assert!(log.contains("failpoint import.orders[0] reached"), "orders[0]'s import was held:\n{log}");
    assert_eq!(
        processed(&log),
        later["records"].as_u64().expect("count"),
        "only the log after the snapshots is replayed, orders[0]'s included"
    );
    for (key, bodies) in &by_key(&server.requests()) {
        assert_eq!(bodies.len(), 1, "{key} was POSTed {} times", bodies.len());
    }
    let reference = sibling(&s, &all_act, reference_server.url("/a").as_str(), |t| t);
    run_through(&reference, &reference_server);
    assert_eq!(compacted(&s.topo.dashboard), compacted(&reference.topo.dashboard), "dashboard values");
}

/// A member of a group keeping one standby copy of each partition (`--standbys 1`), with a
/// snapshot directory (hand-over exports only), metrics on `port`.
fn one_copy_member(s: &Scenario, group: &str, n: &str, port: u16, snapshots: &std::path::Path) -> Running {
    let state = s._state.path().join(n);
    let (stderr, log) = log_beside(&state);
    let mut c = member_command(&s.topo, &state, group, &format!("{group}-{n}"));
    c.args(["--standbys", "1", "--session-timeout", "6s", "--http-addr", &format!("127.0.0.1:{port}")])
        .args(["--admin-addr", "off", "--snapshot-interval", "1h"])
        .arg("--snapshot-dir")
        .arg(snapshots)
        .env("TIDEMARK_LOG", "info")
        .stderr(stderr);
    Running(c.spawn().expect("spawn"), Some(log))
}

/// The value of `key` in a metric's label text.
fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    let from = labels.find(&format!("{key}=\"")).map_or(labels.len(), |i| i + key.len() + 2);
    let rest = &labels[from..];
    &rest[..rest.find('"').unwrap_or(rest.len())]
}

/// Per partition (named as operators name them: `orders[3]`), the members that report `name`
/// at 1 for it, if every member answers.
fn members_with(members: &[(&str, u16)], name: &str) -> Option<BTreeMap<String, Vec<String>>> {
    let mut by_partition: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (member, port) in members {
        let (_, page) = http("GET", *port, "/metrics")?;
        for (labels, v) in metric(&page, name) {
            if v == 1.0 {
                let p = format!("{}[{}]", label(&labels, "source"), label(&labels, "partition"));
                by_partition.entry(p).or_default().push(member.to_string());
            }
        }
    }
    Some(by_partition)
}

/// Every one of the 16 input partitions has exactly one owner among `members` and exactly one
/// standby copy, on another member: returns (owner, copy holder) per partition.
fn one_owner_and_one_copy_elsewhere(members: &[(&str, u16)]) -> Option<BTreeMap<String, (String, String)>> {
    let owners = members_with(members, "tidemark_partition_owned")?;
    let copies = members_with(members, "tidemark_standby_partition")?;
    if owners.len() != 16 || copies.len() != 16 {
        return None;
    }
    let mut placed = BTreeMap::new();
    for (p, owner) in owners {
        let copy = copies.get(&p)?;
        if owner.len() != 1 || copy.len() != 1 || owner[0] == copy[0] {
            return None;
        }
        placed.insert(p, (owner[0].clone(), copy[0].clone()));
    }
    Some(placed)
}

#[test]
fn with_one_standby_copy_each_partition_is_kept_warm_on_exactly_one_other_member_and_a_member_gone_for_good_resumes_from_them_without_sending_a_completed_action_again(
) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (server, reference_server, all_act, s) = acting(&rt);
    let snapshots = tempfile::tempdir().expect("tmp");
    let group = unique("g");
    let ports = [free_port(), free_port(), free_port()];

    // Part one, processed by three members, each partition's copy on one of the other two.
    generate(&s.orders, GEN_ACTIONS);
    let mut a = one_copy_member(&s, &group, "a", ports[0], snapshots.path());
    let b = one_copy_member(&s, &group, "b", ports[1], snapshots.path());
    let c = one_copy_member(&s, &group, "c", ports[2], snapshots.path());
    let members = [("a", ports[0]), ("b", ports[1]), ("c", ports[2])];
    let reference = sibling(&s, &all_act, reference_server.url("/a").as_str(), |t| t);
    let part_one = by_key(&run_through(&reference, &reference_server));
    assert!(part_one.len() >= 3, "part one must fire several actions, got {}", part_one.len());
    wait_for(Duration::from_secs(120), "the members to send part one's actions", || {
        let sent = by_key(&server.requests());
        part_one.keys().all(|k| sent.contains_key(k)).then_some(())
    });
    // Each partition: one owner, one warm copy elsewhere that has seen every action its owner
    // completed, nothing in flight; twice, a second apart.
    let settled = || {
        let placed = one_owner_and_one_copy_elsewhere(&members)?;
        for (_, port) in members {
            let quiet = gauge_at(port, "tidemark_outbox_pending")? == 0.0
                && gauge_at(port, "tidemark_standby_warm")? == 1.0
                && gauge_at(port, "tidemark_standby_lag_records")? == 0.0
                && gauge_at(port, "tidemark_standby_rows_waiting")? == 0.0;
            quiet.then_some(())?;
        }
        Some(placed)
    };
    let placed = wait_for(Duration::from_secs(90), "one owner and one warm copy elsewhere per partition", || {
        let first = settled()?;
        std::thread::sleep(Duration::from_secs(1));
        (settled()? == first).then_some(first)
    });
    let copies_per_member: Vec<usize> =
        ["a", "b", "c"].iter().map(|m| placed.values().filter(|(_, copy)| copy == m).count()).collect();
    assert!(copies_per_member.iter().all(|n| *n < 16), "no member holds every copy: {copies_per_member:?}");

    // A dies and never comes back; part two arrives.
    signal(&a.0, "KILL");
    let _ = a.0.wait();
    generate(&s.orders, &gen_actions_later());
    let got = sent_as_one_process_would(&rt, &s, &all_act, &server, ports[1]);
    for (key, bodies) in &got {
        assert_eq!(bodies.len(), 1, "{key} was POSTed {} times", bodies.len());
    }

    // The copies are placed again over the two members left, and every partition of A's that
    // the group gave to the holder of its copy resumed from that copy.
    let survivors = [("b", ports[1]), ("c", ports[2])];
    let after = wait_for(Duration::from_secs(60), "one owner and one copy elsewhere over b and c", || {
        one_owner_and_one_copy_elsewhere(&survivors)
    });
    let log_of = |m: &str| std::fs::read_to_string(s._state.path().join(m).with_extension("log")).unwrap_or_default();
    let promoted = |m: &str, p: &str| log_of(m).lines().any(|l| l.contains("standby copies promoted") && l.contains(p));
    let mut from_copy = 0;
    for (p, (owner, copy)) in placed.iter().filter(|(_, (owner, _))| owner == "a") {
        let (new_owner, _) = &after[p];
        if new_owner == copy {
            assert!(
                promoted(new_owner, p),
                "{p} (owner {owner}) went to {new_owner}, which held its copy, but did not resume from it"
            );
            from_copy += 1;
        }
    }
    eprintln!("{from_copy} of a's partitions resumed from their standby copy");
    drop((b, c));
}
