//! Snapshots in an S3-compatible object store: a real gateway (versitygw, installed by
//! scripts/setup.sh) on 127.0.0.1 over a temporary directory, a real broker, and the
//! `tidemark run` binary with `--snapshot-dir s3://bucket/prefix`, credentials and endpoint
//! from the environment as in a pod.

mod common;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use common::*;
use tidemark::dispatch::testkit::{Behaviour, Recorded, TestServer};
use tidemark::testkit::s3;

/// The gateway over a temporary directory, dropped with it.
struct Gateway {
    inner: s3::Gateway,
    _dir: tempfile::TempDir,
}

impl Gateway {
    fn start() -> Gateway {
        let dir = tempfile::tempdir().expect("tmp");
        Gateway { inner: s3::Gateway::start(dir.path()).expect("versitygw"), _dir: dir }
    }

    fn restart(&mut self) {
        self.inner.restart().expect("versitygw restarted");
    }

    fn kill(&mut self) {
        self.inner.kill();
    }

    /// What a process needs to use it: `--snapshot-dir` and the AWS variables.
    fn env(&self, prefix: &str) -> Vec<(String, String)> {
        let mut env = vec![
            ("TIDEMARK_SNAPSHOT_DIR".to_string(), s3::Gateway::snapshot_dir(prefix)),
            ("TIDEMARK_SNAPSHOT_INTERVAL".to_string(), "1s".to_string()),
        ];
        env.extend(self.inner.env());
        env
    }

    fn manifests(&self, prefix: &str) -> Vec<std::path::PathBuf> {
        self.inner.manifests(prefix)
    }
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A topology over `orders` whose three rules act, POSTing to `server`.
fn acting_topology(orders: &str, server: &TestServer) -> Topo {
    let topo = topology(orders, &unique("run-s3"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut]
        .replace(
            "# action_url = \"https://inventory.internal/actions\"",
            &format!("action_url = \"{}\"", server.url("/a")),
        )
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{}\"", server.url("/n")))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"")
        + &firing_rules("act", "act", "act");
    std::fs::write(&topo.path, text).expect("write");
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

/// `GEN_ACTIONS` with another seed: a second stretch of history for the same topics.
fn second_batch() -> Vec<&'static str> {
    let mut gen = GEN_ACTIONS.to_vec();
    let seed = gen.iter().position(|a| *a == "--seed").expect("seed") + 1;
    gen[seed] = "22";
    gen
}

fn sum(page: &str, name: &str) -> f64 {
    metric(page, name).iter().map(|(_, v)| v).sum()
}

#[test]
fn a_partition_exported_to_s3_is_restored_from_it_by_a_process_whose_volume_is_empty() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let clean_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let s3_server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let gateway = Gateway::start();
    let orders = unique("s3");
    let clean = acting_topology(&orders, &clean_server);
    let moved = acting_topology(&orders, &s3_server);
    generate(&orders, GEN_ACTIONS);

    let group = unique("g");
    let env = gateway.env("team/tidemark");
    let (first_state, second_state) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    let first = run_to_end_with(&moved, first_state.path(), &group, &pairs(&env));
    assert!(
        !gateway.manifests("team/tidemark").is_empty(),
        "the first process's final round published snapshots in the bucket:\n{first}"
    );
    // More history, then a second process on an empty volume takes the group over.
    generate(&orders, &second_batch());
    let second = run_to_end_with(&moved, second_state.path(), &group, &pairs(&env));
    let restored = second.lines().filter(|l| l.contains("restored from snapshot")).count();
    assert!(restored > 0, "the second process restored nothing from the bucket:\n{second}");

    let clean_state = tempfile::tempdir().expect("tmp");
    let whole = run_to_end(&clean, clean_state.path(), &unique("g"));
    // Without the restore the second process would replay both batches from offset 0.
    assert!(
        processed(&second) * 4 < processed(&whole) * 3,
        "the second process replayed {} records of the {} of the whole log: not resumed from the snapshots",
        processed(&second),
        processed(&whole)
    );
    assert_eq!(compacted(&moved.dashboard), compacted(&clean.dashboard), "the dashboard of a clean run");
    let (got, reference) = (by_key(&s3_server.requests()), by_key(&clean_server.requests()));
    assert!(reference.len() >= 3, "the history must fire several actions, got {}", reference.len());
    assert_eq!(got.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "the same action keys");
    for (k, bodies) in &got {
        assert_eq!(bodies.len(), 1, "{k} sent {} times across a restore from a snapshot", bodies.len());
        assert_eq!(bodies[0], reference[k][0], "payload of {k}");
    }
}

/// A running processor, killed if the test fails.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_s3_outage_stops_neither_processing_nor_actions_is_counted_and_snapshots_resume_after_it() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt.block_on(TestServer::start(Behaviour::Ok)).expect("server");
    let mut gateway = Gateway::start();
    let orders = unique("s3-out");
    let topo = acting_topology(&orders, &server);
    let first = generate(&orders, GEN_ACTIONS)["orders_records"].as_f64().expect("count");
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let mut env = gateway.env("outage");
    env.push(("TIDEMARK_HTTP_ADDR".into(), format!("127.0.0.1:{port}")));
    let (stderr, log) = log_beside(state.path());
    let mut command = run_command(&topo, state.path(), &unique("g"));
    for (k, v) in &env {
        command.env(k, v);
    }
    let mut child = Running(command.stderr(stderr).spawn().expect("spawn"));
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let page = || http("GET", port, "/metrics").map(|(_, body)| body);

    wait_for(Duration::from_secs(120), "the first batch processed and snapshotted", || {
        let p = page()?;
        (sum(&p, "tidemark_records_total") >= first
            && sum(&p, "tidemark_snapshot_upload_bytes_total") > 0.0
            && server.request_count() > 0)
            .then_some(())
    });
    assert!(!gateway.manifests("outage").is_empty());

    gateway.kill();
    let before = page().expect("metrics");
    let (records_before, actions_before) = (sum(&before, "tidemark_records_total"), server.request_count());
    wait_for(Duration::from_secs(60), "failed snapshot operations to be counted", || {
        let failures = metric(&page()?, "tidemark_snapshot_failures_total");
        failures.iter().any(|(labels, v)| labels.contains("op=\"list\"") && *v > 0.0).then_some(())
    });
    let uploaded = sum(&page().expect("metrics"), "tidemark_snapshot_upload_bytes_total");
    let second = generate(&orders, &second_batch())["orders_records"].as_f64().expect("count");
    wait_for(Duration::from_secs(120), "the second batch processed and its actions sent during the outage", || {
        let p = page()?;
        (sum(&p, "tidemark_records_total") >= records_before + second && server.request_count() > actions_before)
            .then_some(())
    });
    assert_eq!(http("GET", port, "/readyz").map(|r| r.0), Some(200), "still ready:\n{}", log_text());
    assert!(child.0.try_wait().expect("status").is_none(), "the process ended:\n{}", log_text());
    assert!(log_text().contains("snapshot failed"), "the log says so:\n{}", log_text());
    let during = sum(&page().expect("metrics"), "tidemark_snapshot_upload_bytes_total");
    assert_eq!(during, uploaded, "nothing was uploaded while the store was down");

    gateway.restart();
    wait_for(Duration::from_secs(60), "snapshots to resume once the store is back", || {
        (sum(&page()?, "tidemark_snapshot_upload_bytes_total") > during).then_some(())
    });
    wait_for(Duration::from_secs(30), "the upload lag to fall back", || {
        (sum(&page()?, "tidemark_snapshot_lag_seconds") < 5.0).then_some(())
    });
    signal(&child.0, "TERM");
    let status = wait_for(Duration::from_secs(60), "exit", || child.0.try_wait().ok().flatten());
    assert!(status.success(), "{status}:\n{}", log_text());
}
