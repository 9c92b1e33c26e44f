//! `tidemark run --exit-at-end` ends only when the work derived from the log is done: the
//! SKU merge released and applied every repartitioned record, and every action it fired was
//! delivered (and audited) before the process exited, retries included. Judged against a
//! long-running process over the same log: action keys are deterministic from the data.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::Message;
use tidemark::dispatch::testkit::{Behaviour, Recorded, TestServer};

/// A topology over the input topics `orders`, with fresh outputs, the firing rules (oversell and velocity_spike act, low_stock notifies) and both
/// endpoints on `server`.
fn topology_for(orders: &str, server: &TestServer) -> Topo {
    let topo = topology(orders, &unique("run-end"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut]
        .replace(
            "# action_url = \"https://inventory.internal/actions\"",
            &format!("action_url = \"{}\"", server.url("/actions")),
        )
        .replace(
            "# notify_url = \"https://alerts.internal/notify\"",
            &format!("notify_url = \"{}\"", server.url("/notify")),
        )
        + &firing_rules("act", "notify", "act");
    std::fs::write(&topo.path, text).expect("write");
    create_topics(&topo);
    topo
}

/// Bodies of the requests answered 2xx, per `Idempotency-Key`, in arrival order.
fn delivered(requests: &[Recorded]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.answered.is_some_and(|s| (200..300).contains(&s))) {
        m.entry(r.header("idempotency-key").unwrap_or_default().to_string()).or_default().push(r.body.clone());
    }
    m
}

/// A child process whose stderr goes to a file, printed when the test fails.
struct Logged {
    child: Child,
    log: PathBuf,
}

impl Logged {
    fn spawn(mut cmd: std::process::Command, log: &Path) -> Logged {
        let file = std::fs::File::create(log).expect("log file");
        let child = cmd.stdout(std::process::Stdio::null()).stderr(file).spawn().expect("spawn tidemark run");
        Logged { child, log: log.to_path_buf() }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = self.text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- last lines of {}:\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

#[test]
fn exit_at_end_exits_only_after_posting_every_action_a_long_running_process_posts() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Early answers fail: the run must also wait for actions that are being retried.
    let once_server = rt.block_on(TestServer::start(Behaviour::FailFirst { n: 40, status: 503 })).expect("server");
    let long_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let orders = unique("end");
    let once = topology_for(&orders, &once_server);
    let long = topology_for(&orders, &long_server);
    generate(&orders, GEN_ACTIONS);
    let dir = tempfile::tempdir().expect("tmp");

    // The reference: a process that keeps running, as in production.
    let _reference =
        Logged::spawn(run_command(&long, &dir.path().join("long"), &unique("g")), &dir.path().join("long.log"));

    let mut cmd = run_command(&once, &dir.path().join("once"), &unique("g"));
    cmd.args(["--exit-at-end", "--drain-timeout", "90s"]);
    let mut run = Logged::spawn(cmd, &dir.path().join("once.log"));
    let status =
        wait_for(Duration::from_secs(150), "run --exit-at-end to exit", || run.child.try_wait().ok().flatten());
    // Nothing can arrive from the process after this point.
    let sent = delivered(&once_server.requests());
    assert!(status.success(), "run --exit-at-end failed ({status}):\n{}", run.text());
    assert!(sent.len() >= 10, "the log must fire many actions, got {}", sent.len());
    for (key, bodies) in &sent {
        assert_eq!(bodies.len(), 1, "{key} delivered {} times by a run without crashes", bodies.len());
    }
    eprintln!("{} actions delivered before exit ({} requests)", sent.len(), once_server.request_count());

    // The reference is done once it has sent at least as many keys and then nothing for a while.
    let mut last = (usize::MAX, Instant::now());
    let reference = wait_for(Duration::from_secs(120), "the long-running process's actions to settle", || {
        let n = long_server.request_count();
        if n != last.0 {
            last = (n, Instant::now());
        }
        (n >= sent.len() && last.1.elapsed() >= Duration::from_secs(5)).then(|| delivered(&long_server.requests()))
    });
    let missing: Vec<&String> = reference.keys().filter(|k| !sent.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} actions were not delivered before exit, e.g. {:?}",
        missing.len(),
        reference.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(sent.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "the same action keys");
    for (key, bodies) in &sent {
        assert_eq!(bodies[0], reference[key][0], "payload of {key}");
    }

    // Every outcome was audited before exit too.
    let audit_topic = once.dashboard.replace(".dashboard", ".audit");
    let audited: Vec<String> = read(&audit_topic)
        .iter()
        .filter_map(|m| {
            let r: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("audit JSON");
            (r["event"] == "attempt" && r["reason"] == "delivered")
                .then(|| r["key"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    for key in sent.keys() {
        assert!(audited.contains(key), "the delivery of {key} is not in the audit topic");
    }
}
