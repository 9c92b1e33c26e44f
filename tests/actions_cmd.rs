//! `tidemark actions list` and `tidemark actions resend` end to end: a real broker, a real
//! HTTP endpoint on 127.0.0.1, the `tidemark` binary as operators run it.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;
use tidemark::dispatch::testkit::{Behaviour, TestServer};

/// 2026-11-28T10:00:00Z
const T0: i64 = 1_795_860_000_000;

const KEY: &str = "low_stock:v1:SKU-R:snapshot:2026-11-28T10:00:00.000Z";

const RULES: &str = r#"
[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 10, replenish_to = 100 }
"#;

/// The example topology over fresh topics, with `RULES` and this endpoint for both targets.
fn scenario(url: &str) -> Topo {
    let orders = unique("resend");
    let topo = topology(&orders, &unique("run-resend"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut]
        .replace("# action_url = \"https://inventory.internal/actions\"", &format!("action_url = \"{url}\""))
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{url}\""))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"")
        + RULES;
    std::fs::write(&topo.path, text).expect("write");
    create_topics(&topo);
    topo
}

fn produce(topic: &str, key: &str, value: &str) {
    let p: BaseProducer = settings().client_config().create().expect("producer");
    p.send(BaseRecord::to(topic).key(key).payload(value)).map_err(|(e, _)| e).expect("send");
    p.flush(Duration::from_secs(30)).expect("flush");
    // Distinct broker append times keep the intended logical order across topics.
    std::thread::sleep(Duration::from_millis(30));
}

fn actions(args: &[&str], state: &Path) -> Output {
    Command::new(BIN).arg("actions").args(args).arg("--state-dir").arg(state).output().expect("spawn tidemark")
}

fn resend(t: &Topo, state: &Path, group: &str, extra: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(["actions", "resend", "--bootstrap", &bootstrap(), "--group", group, "--topology"])
        .arg(&t.path)
        .arg("--state-dir")
        .arg(state)
        .args(extra);
    c.output().expect("spawn tidemark")
}

/// `tidemark actions list --format json --state <state>`: one object per row.
fn listed(state_dir: &Path, state: &str) -> Vec<serde_json::Value> {
    let out = actions(&["list", "--format", "json", "--state", state], state_dir);
    assert!(out.status.success(), "list failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn audit(t: &Topo) -> Vec<serde_json::Value> {
    read(&t.dashboard.replace(".dashboard", ".audit"))
        .iter()
        .map(|m| serde_json::from_slice(m.payload().unwrap_or_default()).expect("audit JSON"))
        .collect()
}

#[test]
fn a_dead_lettered_action_is_re_sent_once_with_its_key_and_payload_and_the_resend_is_audited() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt.block_on(TestServer::start(Behaviour::Status(422))).expect("server");
    let t = scenario(server.url("/a").as_str());
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path();
    let group = unique("g");
    produce(
        &format!("{}.inventory", t.orders),
        "SKU-R",
        r#"{"sku":"SKU-R","on_hand":1,"as_of":"2026-11-28T10:00:00Z"}"#,
    );
    let order = format!(
        r#"{{"schema_version":2,"event_id":"r1","order_id":"o1","type":"ORDER_PLACED","occurred_at_ms":{},"store_id":"tokyo-01","channel":"web","items":[{{"sku":"SKU-R","quantity":2,"price":{{"amount_minor":1000,"currency":"JPY"}}}}]}}"#,
        T0 + 60_000
    );
    produce(&t.orders, "o1", &order);

    // 1. The endpoint refuses the action: it is dead-lettered, and the run ends.
    run_to_end(&t, state, &group);
    let first = server.requests();
    assert_eq!(first.len(), 1, "a 422 is not retried");
    assert_eq!(first[0].header("idempotency-key"), Some(KEY));
    let failed = listed(state, "failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["key"], KEY);
    assert_eq!(failed[0]["status"], 422);
    assert_eq!(failed[0]["attempts"], 1);
    let raw = actions(&["list", "--format", "json", "--state", "failed"], state);
    let tail = format!(",\"payload\":{}}}\n", String::from_utf8_lossy(&first[0].body));
    assert!(String::from_utf8_lossy(&raw.stdout).ends_with(&tail), "the listed payload is the one sent, byte for byte");
    let table = actions(&["list"], state);
    assert!(
        table.status.success() && text(&table).contains(KEY),
        "the default listing shows failed rows:\n{}",
        text(&table)
    );

    let stranger = resend(&t, state, "another-group", &["--key", KEY]);
    assert!(!stranger.status.success() && text(&stranger).contains("belongs to"), "{}", text(&stranger));

    // 2. While a processor holds the state, a re-send is refused and the listing still works.
    let log = dir.path().with_extension("log");
    let mut running = run_command(&t, state, &group)
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn run");
    wait_for(Duration::from_secs(60), "the processor to open its state", || {
        std::fs::read_to_string(&log).ok().filter(|l| l.contains("state store opened"))
    });
    let refused = resend(&t, state, &group, &["--key", KEY]);
    assert!(!refused.status.success(), "a re-send beside a running processor must be refused");
    assert!(text(&refused).contains("in use by a running processor"), "{}", text(&refused));
    assert_eq!(listed(state, "failed").len(), 1, "list opens the state read-only beside the processor");
    signal(&running, "TERM");
    let stopped = wait_for(Duration::from_secs(60), "the processor to stop", || running.try_wait().ok().flatten());
    assert!(stopped.success());
    assert_eq!(server.request_count(), 1, "a failed row is not sent again by itself");

    // 3. The endpoint is fixed; the operator re-sends the action.
    server.set_behaviour(Behaviour::Ok);
    let done = resend(&t, state, &group, &["--key", KEY, "--reason", "endpoint fixed"]);
    assert!(done.status.success(), "{}", text(&done));
    let pending = listed(state, "pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["key"], KEY);
    assert_eq!(pending[0]["attempts"], 1, "attempts are kept");

    // 4. The next run delivers it: one more POST, same key, byte-identical payload.
    run_to_end(&t, state, &group);
    let all = server.requests();
    assert_eq!(all.len(), 2, "exactly one more POST");
    assert_eq!(all[1].header("idempotency-key"), Some(KEY));
    assert_eq!(all[1].body, first[0].body, "byte-identical payload");
    assert_eq!(all[1].answered, Some(200));
    let delivered = listed(state, "delivered");
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["key"], KEY);
    assert_eq!(delivered[0]["status"], 200);
    assert_eq!(delivered[0]["attempts"], 2);

    let records = wait_for(Duration::from_secs(30), "the delivery in the audit topic", || {
        let a = audit(&t);
        a.iter().any(|r| r["key"] == KEY && r["reason"] == "delivered").then_some(a)
    });
    let resends: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "resend").collect();
    assert_eq!(resends.len(), 1, "{records:?}");
    assert_eq!(resends[0]["key"], KEY);
    assert_eq!(resends[0]["status"], 422);
    assert_eq!(resends[0]["reason"], "was failed with 422: endpoint fixed");
    let order_of = |pred: &dyn Fn(&serde_json::Value) -> bool| records.iter().position(pred).expect("audited");
    assert!(
        order_of(&|r| r["event"] == "resend") < order_of(&|r| r["reason"] == "delivered"),
        "the re-send is audited before its delivery"
    );

    // A delivered action is not re-sent again.
    let again = resend(&t, state, &group, &["--key", KEY]);
    assert!(!again.status.success());
    assert!(text(&again).contains("is delivered"), "{}", text(&again));
    assert_eq!(server.request_count(), 2);
}
