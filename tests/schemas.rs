//! The published record formats (docs/schemas/*.json, issue 19 item 2) hold for real output:
//! the binary runs against the real broker over a generated log with bad input and rules
//! that fire against an endpoint that refuses, closes the day, and every record of every
//! output topic (and every POST body) is validated against its schema. Each schema must
//! also reject the record with a required field removed, so none can pass vacuously.

mod common;

use std::process::Command;

use common::*;
use rdkafka::message::Headers;
use rdkafka::Message;
use serde_json::Value;
use tidemark::dispatch::testkit::{Behaviour, TestServer};

fn schema(name: &str) -> jsonschema::Validator {
    let path = repo_path(&format!("docs/schemas/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("schema JSON");
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: not a valid schema: {e}"))
}

/// Every instance is valid; the first one with `required` removed is not. Returns the count.
fn check(name: &str, instances: &[Value], required: &str) -> usize {
    let v = schema(name);
    for i in instances {
        let errors: Vec<String> = v.iter_errors(i).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        assert!(errors.is_empty(), "{name}: {i} does not validate: {errors:?}");
    }
    if let Some(first) = instances.first() {
        let mut broken = first.clone();
        broken.as_object_mut().expect("object").remove(required);
        assert!(!v.is_valid(&broken), "{name} accepts a record without `{required}`");
    }
    instances.len()
}

fn values(topic: &str) -> Vec<Value> {
    read(topic).iter().map(|m| serde_json::from_slice(m.payload().expect("value")).expect("JSON value")).collect()
}

/// The headers of each record of `topic` as a JSON object of name to UTF-8 value.
fn headers(topic: &str) -> Vec<Value> {
    read(topic)
        .iter()
        .map(|m| {
            let mut o = serde_json::Map::new();
            if let Some(h) = m.headers() {
                for h in h.iter() {
                    let v = String::from_utf8(h.value.unwrap_or_default().to_vec()).expect("UTF-8 header");
                    o.insert(h.key.to_string(), Value::String(v));
                }
            }
            Value::Object(o)
        })
        .collect()
}

#[test]
fn every_output_record_of_a_real_run_validates_against_its_published_schema() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // A 422 is a permanent failure: attempts are audited and the payloads dead-lettered.
    let refusing = rt.block_on(TestServer::start(Behaviour::Status(422))).expect("server");
    let orders = unique("schemas");
    let run = unique("run-schemas");
    let t = topology(&orders, &run);
    let text = std::fs::read_to_string(&t.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let url = refusing.url("/a");
    let text = text[..cut]
        .replace("# action_url = \"https://inventory.internal/actions\"", &format!("action_url = \"{url}\""))
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{url}\""))
        + &firing_rules("act", "act", "act");
    std::fs::write(&t.path, text).expect("write");
    create_topics(&t);
    let mut gen = GEN_ACTIONS.to_vec();
    gen.extend(["--malformed-fraction", "0.02"]);
    generate(&orders, &gen);
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&t, state.path(), &unique("g"));
    let close = Command::new(BIN)
        .args(["batch", "close", "--bootstrap", &bootstrap(), "--business-day", "2026-11-28", "--topology"])
        .arg(&t.path)
        .args(["--cutoff", &chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)])
        .output()
        .expect("batch close");
    assert!(close.status.success(), "batch close: {}", String::from_utf8_lossy(&close.stderr));

    let counted = [
        ("dashboard-partial", check("dashboard-partial", &values(&t.dashboard), "version")),
        ("dashboard-combined", check("dashboard-combined", &values(&format!("{}-combined", t.dashboard)), "version")),
        ("finance-provisional-partial", check("finance-provisional-partial", &values(&t.finance_provisional), "day")),
        (
            "finance-provisional-combined",
            check("finance-provisional-combined", &values(&format!("{}-combined", t.finance_provisional)), "version"),
        ),
        ("finance-close-row", check("finance-close-row", &values(&t.finance_close), "net")),
        ("dead-letter-headers", check("dead-letter-headers", &headers(&t.dead_letter), "tidemark.reason")),
        ("audit", check("audit", &values(&format!("{run}.audit")), "event")),
        (
            "action-payload (POST bodies)",
            check(
                "action-payload",
                &refusing
                    .requests()
                    .iter()
                    .map(|r| serde_json::from_slice(&r.body).expect("JSON body"))
                    .collect::<Vec<_>>(),
                "action_id",
            ),
        ),
        (
            "action-payload (dead letters)",
            check("action-payload", &values(&format!("{run}.action-dead-letter")), "sku"),
        ),
    ];
    for (name, n) in counted {
        assert!(n > 0, "the run produced no {name} record to validate");
    }
    // Nothing in this log is beyond retention; the late topic's schema is still checked.
    check("late-headers", &headers(&t.late), "tidemark.reason");
}
