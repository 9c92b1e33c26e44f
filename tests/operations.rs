//! Operations against a real broker: graceful SIGTERM, backlog age, the live `/metrics` that
//! the shipped dashboard and alerts rely on, health endpoints.

mod common;

use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

const GEN: &[&str] = &["--events", "60000", "--rate", "100", "--seed", "11", "--event-bytes", "512"];

fn stderr_of(mut child: Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

#[test]
fn sigterm_under_load_commits_and_exits_zero_and_a_restart_reprocesses_nothing_before_the_checkpoint() {
    let orders = unique("term");
    let t = topology(&orders, &unique("run-term"));
    create_topics(&t);
    let summary = generate(&orders, GEN);
    let total = summary["orders_records"].as_u64().expect("count");
    let state = tempfile::tempdir().expect("tmp");
    let group = unique("g");
    let port = free_port();
    let mut child = spawn_run(&t, state.path(), &group, &[("TIDEMARK_HTTP_ADDR", &format!("127.0.0.1:{port}"))]);
    // Load: wait until it is part-way through the log.
    wait_for(Duration::from_secs(60), "records to flow", || {
        let (_, page) = http("GET", port, "/metrics")?;
        let n = metric(&page, "tidemark_records_total").first().map(|(_, v)| *v)?;
        (n > 0.0).then_some(())
    });
    let sent = Instant::now();
    signal(&child, "TERM");
    let status = wait_for(Duration::from_secs(30), "exit after SIGTERM", || child.try_wait().ok().flatten());
    assert!(status.success(), "SIGTERM must end in a clean exit, got {status}");
    assert!(sent.elapsed() < Duration::from_secs(30), "must exit within the grace period");
    let first = processed(&stderr_of(child));

    let log = run_to_end(&t, state.path(), &group);
    let second = processed(&log);
    assert_eq!(
        first + second,
        total,
        "the restart must start exactly at the checkpoint: {first} + {second} != {total}"
    );
}

#[test]
fn backlog_age_rises_while_the_processor_is_paused_and_falls_to_zero_after_catch_up() {
    let orders = unique("backlog");
    let t = topology(&orders, &unique("run-backlog"));
    create_topics(&t);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let child = spawn_run(
        &t,
        state.path(),
        &unique("g"),
        &[("TIDEMARK_HTTP_ADDR", &format!("127.0.0.1:{port}")), ("TIDEMARK_LOG", "warn")],
    );
    let mut child = scopeguard(child);
    wait_for(Duration::from_secs(60), "readiness", || (http("GET", port, "/readyz")?.0 == 200).then_some(()));
    assert_eq!(http("POST", port, "/pause").map(|r| r.0), Some(200));
    generate(&orders, &["--events", "4000", "--rate", "1000", "--seed", "3", "--event-bytes", "256"]);

    let max_age = |page: &str| metric(page, "tidemark_backlog_age_seconds").iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let first = wait_for(Duration::from_secs(30), "a positive backlog age", || {
        let age = max_age(&http("GET", port, "/metrics")?.1);
        (age > 0.5).then_some(age)
    });
    let later = wait_for(Duration::from_secs(30), "the backlog age to keep rising", || {
        let age = max_age(&http("GET", port, "/metrics")?.1);
        (age > first + 1.0).then_some(age)
    });
    assert!(later > first);
    let lag: f64 = metric(&http("GET", port, "/metrics").expect("metrics").1, "tidemark_consumer_lag_records")
        .iter()
        .map(|(_, v)| *v)
        .sum();
    assert!(lag > 0.0, "paused: lag must be visible");

    assert_eq!(http("POST", port, "/resume").map(|r| r.0), Some(200));
    wait_for(Duration::from_secs(60), "backlog age back to 0 on every partition", || {
        let page = http("GET", port, "/metrics")?.1;
        let ages = metric(&page, "tidemark_backlog_age_seconds");
        (!ages.is_empty() && ages.iter().all(|(_, v)| *v == 0.0)).then_some(())
    });
    child.finish();
}

#[test]
fn every_metric_the_chart_dashboard_and_alerts_use_exists_in_a_live_metrics_page() {
    let orders = unique("metrics");
    let t = topology(&orders, &unique("run-metrics"));
    create_topics(&t);
    generate(&orders, &["--events", "3000", "--rate", "100", "--seed", "5", "--malformed-fraction", "0.05"]);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let child = spawn_run(&t, state.path(), &unique("g"), &[("TIDEMARK_HTTP_ADDR", &format!("127.0.0.1:{port}"))]);
    let mut child = scopeguard(child);
    assert_eq!(wait_for(Duration::from_secs(60), "healthz", || http("GET", port, "/healthz")).0, 200);
    let page = wait_for(Duration::from_secs(60), "every record processed and committed", || {
        let page = http("GET", port, "/metrics")?.1;
        let n = metric(&page, "tidemark_records_total").first().map(|(_, v)| *v)?;
        let committed = !metric(&page, "tidemark_checkpoint_duration_seconds_count").is_empty();
        let ready = http("GET", port, "/readyz")?.0 == 200;
        (n >= 3000.0 && committed && ready).then_some(page)
    });
    let names = std::fs::read_to_string(common::repo_path("helm/metric-names.txt")).expect("names");
    let mut missing = Vec::new();
    for name in names.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let present = [name.to_string(), format!("{name}_bucket"), format!("{name}_count")]
            .iter()
            .any(|n| !metric(&page, n).is_empty());
        if !present {
            missing.push(name.to_string());
        }
    }
    assert!(missing.is_empty(), "metrics used by the chart but absent from /metrics: {missing:?}\n{page}");
    let reasons = metric(&page, "tidemark_dead_letters_total");
    assert_eq!(reasons.len(), tidemark_topology::reject::RejectReason::ALL.len(), "one series per reject reason");
    assert!(reasons.iter().map(|(_, v)| v).sum::<f64>() > 0.0);
    assert_eq!(http("GET", port, "/readyz").map(|r| r.0), Some(200));
    child.finish();
}

/// Kills the child when the test ends, even on failure.
struct Guard(Child);

fn scopeguard(child: Child) -> Guard {
    Guard(child)
}

impl Guard {
    fn finish(&mut self) {
        signal(&self.0, "TERM");
        let status = wait_for(Duration::from_secs(30), "exit", || self.0.try_wait().ok().flatten());
        assert!(status.success(), "{status}");
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kafka_secrets_passed_through_never_appear_in_logs_or_metrics() {
    let orders = unique("secret");
    let t = topology(&orders, &unique("run-secret"));
    create_topics(&t);
    generate(&orders, &["--events", "200", "--rate", "100", "--seed", "2"]);
    let state = tempfile::tempdir().expect("tmp");
    let dir = tempfile::tempdir().expect("tmp");
    let props = dir.path().join("client.properties");
    std::fs::write(&props, "# from a mounted Secret\nsasl.username=svc\nsasl.password=pw-from-file-7731\n")
        .expect("props");
    let port = free_port();
    let mut cmd = run_command(&t, state.path(), &unique("g"));
    cmd.args(["-X", "ssl.key.password=pw-from-flag-4409", "--kafka-config"]).arg(&props).args([
        "--http-addr",
        &format!("127.0.0.1:{port}"),
        "--log",
        "debug",
    ]);
    let mut child = scopeguard(cmd.spawn().expect("spawn"));
    let page = wait_for(Duration::from_secs(60), "metrics after processing", || {
        let page = http("GET", port, "/metrics")?.1;
        (metric(&page, "tidemark_records_total").first()?.1 >= 200.0).then_some(page)
    });
    child.finish();
    let err = stderr_of(std::mem::replace(&mut child.0, std::process::Command::new("true").spawn().expect("true")));
    for secret in ["pw-from-file-7731", "pw-from-flag-4409"] {
        assert!(!err.contains(secret), "secret {secret} leaked into the log");
        assert!(!page.contains(secret), "secret {secret} leaked into /metrics");
    }
    assert!(err.contains("<redacted>"), "the settings line must show that secrets were redacted:\n{err}");
}
