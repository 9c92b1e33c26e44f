//! Rules written as expressions in the topology file (docs/rules.md), end to end: a real
//! broker, the `tidemark run` binary, a real notification endpoint. The rules here exist
//! nowhere in the Rust code; they must fire with keys and payloads that a killed-and-restarted
//! run reproduces byte for byte.

mod common;

use std::collections::BTreeMap;

use common::*;
use tidemark::dispatch::testkit::{Behaviour, Recorded, TestServer};

/// "Notify when available stock falls below two days of the last hour's sales" and "stop
/// sale when more units are cancelled than placed", declared as expressions.
const RULES: &str = r#"
[[rules]]
kind = "expression"
id = "cover_below_two_days"
version = 1
mode = "notify"
trigger = "per_snapshot"
action = "notify"
preceding_windows = 59
params = { hours = 48 }
when = "available < params.hours * (window.units + preceding.units)"

[rules.evidence]
available = "available"
last_hour_units = "window.units + preceding.units"
as_of = "as_of"

[[rules]]
kind = "expression"
id = "burst"
version = 1
mode = "notify"
trigger = "per_window"
action = "notify"
preceding_windows = 10
params = { factor = 2, min_units = 8 }
when = "window.units >= params.min_units && window.units > params.factor * preceding.max"

[rules.evidence]
window_units = "window.units"
previous_peak = "preceding.max"
mean = "round(preceding.mean, 2)"
"#;

/// The example topology over the input topics `orders`, with [`RULES`] as its rules,
/// notifying `notify_url`.
fn topology_over(orders: &str, notify_url: &str) -> Topo {
    let topo = topology(orders, &unique("run-expr"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut]
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{notify_url}\""))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"")
        + RULES;
    std::fs::write(&topo.path, text).expect("write");
    let check = std::process::Command::new(BIN).arg("validate").arg(&topo.path).output().expect("validate");
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    create_topics(&topo);
    topo
}

fn by_key(requests: &[Recorded]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for r in requests {
        m.entry(r.header("idempotency-key").unwrap_or_default().to_string()).or_default().push(r.body.clone());
    }
    m
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo_path("docs/schemas/action-payload.json")).expect("schema");
    jsonschema::validator_for(&serde_json::from_str(&text).expect("JSON")).expect("a schema")
}

#[test]
fn expression_rules_fire_against_the_real_broker_and_a_killed_run_sends_the_keys_and_payloads_of_a_clean_one() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let clean_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let killed_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let orders = unique("expr");
    let clean = topology_over(&orders, clean_server.url("/n").as_str());
    generate(&orders, GEN_ACTIONS);
    let killed = topology_over(&orders, killed_server.url("/n").as_str());

    let clean_state = tempfile::tempdir().expect("tmp");
    run_to_end(&clean, clean_state.path(), &unique("g"));
    let reference = by_key(&clean_server.requests());
    for id in ["cover_below_two_days", "burst"] {
        let n = reference.keys().filter(|k| k.starts_with(&format!("{id}:v1:"))).count();
        assert!(n >= 2, "{id} fired {n} times over the generated log");
    }
    let shape = |k: &str| {
        let (_, rest) = k.split_once(":v1:").unwrap_or_default();
        rest.contains(":snapshot:") || rest.contains(":window:")
    };
    assert!(reference.keys().all(|k| shape(k)), "keys as the built-in rules': {:?}", reference.keys());
    let validator = schema();
    for (k, bodies) in &reference {
        assert_eq!(bodies.len(), 1, "{k} POSTed once by a clean run");
        let body: serde_json::Value = serde_json::from_slice(&bodies[0]).expect("JSON");
        assert!(validator.is_valid(&body), "{k}: {body}");
        let evidence = body["evidence"].as_object().expect("evidence");
        let mut names: Vec<&str> = evidence.keys().map(String::as_str).collect();
        names.sort_unstable();
        let expected: &[&str] = if k.starts_with("burst:") {
            &["mean", "previous_peak", "window_units"]
        } else {
            &["as_of", "available", "last_hour_units"]
        };
        assert_eq!(names, expected, "{k}: {body}");
    }

    // The same log through a process aborted between its outputs and its state, one killed
    // with SIGKILL, and a last one that drains it.
    let killed_state = tempfile::tempdir().expect("tmp");
    crash_twice_then_run_to_end(&killed, killed_state.path(), &unique("g"));
    let got = by_key(&killed_server.requests());
    assert_eq!(got.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "the same keys");
    for (k, bodies) in &got {
        assert!(bodies.iter().all(|b| *b == reference[k][0]), "{k} was sent with another payload");
    }
}
