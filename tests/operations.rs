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
fn backlog_age_rises_while_the_processor_is_paused_and_falls_to_zero_after_catch_up_and_readiness_follows() {
    let orders = unique("backlog");
    let t = topology(&orders, &unique("run-backlog"));
    create_topics(&t);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let admin = free_port();
    let child = spawn_run(
        &t,
        state.path(),
        &unique("g"),
        &[
            ("TIDEMARK_HTTP_ADDR", &format!("127.0.0.1:{port}")),
            ("TIDEMARK_ADMIN_ADDR", &format!("127.0.0.1:{admin}")),
            ("TIDEMARK_READY_MAX_LAG_SECONDS", "5"),
            ("TIDEMARK_LOG", "warn"),
        ],
    );
    let mut child = scopeguard(child);
    wait_for(Duration::from_secs(60), "readiness", || (http("GET", port, "/readyz")?.0 == 200).then_some(()));
    assert_eq!(http("POST", admin, "/pause").map(|r| r.0), Some(200));
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
    // Ready means caught up: a backlog older than --ready-max-lag-seconds is not ready.
    let why = wait_for(Duration::from_secs(30), "not ready while behind", || {
        let (status, body) = http("GET", port, "/readyz")?;
        (status == 503).then_some(body)
    });
    assert!(why.contains("not caught up"), "{why}");

    assert_eq!(http("POST", admin, "/resume").map(|r| r.0), Some(200));
    wait_for(Duration::from_secs(60), "ready again once caught up", || {
        (http("GET", port, "/readyz")?.0 == 200).then_some(())
    });
    // Inputs drain to 0. The SKU repartition topic receives progress marks every commit, so
    // its oldest unprocessed record is always about one commit old, never 0.
    wait_for(Duration::from_secs(60), "backlog age back to 0 on every input partition", || {
        let page = http("GET", port, "/metrics")?.1;
        let ages = metric(&page, "tidemark_backlog_age_seconds");
        let (internal, inputs): (Vec<_>, Vec<_>) =
            ages.iter().partition(|(labels, _)| labels.contains("source=\"sku-repartition\""));
        (!inputs.is_empty()
            && !internal.is_empty()
            && inputs.iter().all(|(_, v)| *v == 0.0)
            && internal.iter().all(|(_, v)| *v < 5.0))
        .then_some(())
    });
    child.finish();
}

/// A small `--state-dedup-runs-max` makes the store fold its recent dedup entries into table
/// files as it goes (the premise of chaos's `random-sigkills-while-folding-dedup-runs`): the
/// folds are counted, none fails, and the maps' memory is published.
#[test]
fn a_small_dedup_runs_budget_folds_recent_dedup_entries_into_table_files_as_it_goes() {
    let orders = unique("folds");
    let t = topology(&orders, &unique("run-folds"));
    create_topics(&t);
    generate(&orders, &["--events", "3000", "--rate", "1000", "--seed", "8"]);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let env =
        [("TIDEMARK_HTTP_ADDR", format!("127.0.0.1:{port}")), ("TIDEMARK_STATE_DEDUP_RUNS_MAX", "64".to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut child = scopeguard(spawn_run(&t, state.path(), &unique("g"), &env));
    // The store's gauges and fold counts are published every 15 s.
    let page = wait_for(Duration::from_secs(90), "every record processed and its folds counted", || {
        let page = http("GET", port, "/metrics")?.1;
        let n = metric(&page, "tidemark_records_total").first().map(|(_, v)| *v)?;
        let folds = metric(&page, "tidemark_state_dedup_folds_total");
        let done = folds.iter().find(|(l, _)| l.contains("result=\"done\"")).map(|(_, v)| *v)?;
        (n >= 3000.0 && done > 0.0).then_some(page)
    });
    let failed = metric(&page, "tidemark_state_dedup_folds_total");
    assert!(failed.iter().any(|(l, v)| l.contains("result=\"failed\"") && *v == 0.0), "no fold failed: {failed:?}");
    let memory = metric(&page, "tidemark_state_memory_bytes");
    assert!(memory.iter().any(|(l, _)| l.contains("kind=\"dedup_runs\"")), "the maps' memory is published: {memory:?}");
    child.finish();
}

#[test]
fn every_metric_the_chart_dashboard_and_alerts_use_exists_in_a_live_metrics_page() {
    let orders = unique("metrics");
    let t = topology(&orders, &unique("run-metrics"));
    create_topics(&t);
    generate(&orders, &["--events", "3000", "--rate", "100", "--seed", "5", "--malformed-fraction", "0.05"]);
    let (state, snapshots) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    let port = free_port();
    let env = [
        ("TIDEMARK_HTTP_ADDR", format!("127.0.0.1:{port}")),
        ("TIDEMARK_SNAPSHOT_DIR", snapshots.path().display().to_string()),
        ("TIDEMARK_SNAPSHOT_INTERVAL", "1s".to_string()),
        // Standby metrics exist too (one process: it stands by for nothing once assigned).
        ("TIDEMARK_STANDBYS", "all".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = spawn_run(&t, state.path(), &unique("g"), &env);
    let mut child = scopeguard(child);
    wait_for(Duration::from_secs(60), "start-up", || (http("GET", port, "/startupz")?.0 == 200).then_some(()));
    assert_eq!(http("GET", port, "/healthz").map(|r| r.0), Some(200), "live once started");
    let page = wait_for(Duration::from_secs(60), "every record processed and committed", || {
        let page = http("GET", port, "/metrics")?.1;
        let n = metric(&page, "tidemark_records_total").first().map(|(_, v)| *v)?;
        let committed = !metric(&page, "tidemark_checkpoint_duration_seconds_count").is_empty();
        let ready = http("GET", port, "/readyz")?.0 == 200;
        let snapshotted = !metric(&page, "tidemark_snapshot_duration_seconds_count").is_empty();
        // The janitor publishes the partitions held here every 5 s, once some are committed.
        let held = !metric(&page, "tidemark_state_partition_local").is_empty();
        (n >= 3000.0 && committed && ready && snapshotted && held).then_some(page)
    });
    let missing = missing_names(&page, |n| !n.starts_with("tidemark_microbatch_"));
    assert!(missing.is_empty(), "metrics used by the chart but absent from /metrics: {missing:?}\n{page}");
    let ages = metric(&page, "tidemark_backlog_age_seconds");
    for source in ["orders", "inventory", "sku-repartition"] {
        assert!(
            ages.iter().any(|(labels, _)| labels.contains(&format!("source=\"{source}\""))),
            "backlog age is measured on every input and internal topic: no {source} series in {ages:?}"
        );
    }
    let counts = metric(&page, "tidemark_input_partitions");
    let owned = metric(&page, "tidemark_partition_owned");
    for source in ["orders", "inventory", "sku-repartition", "combine-repartition"] {
        let label = format!("source=\"{source}\"");
        let count = counts.iter().find(|(l, _)| l.contains(&label)).map(|(_, v)| *v);
        let mine = owned.iter().filter(|(l, v)| l.contains(&label) && *v == 1.0).count() as f64;
        assert!(
            count.is_some_and(|c| c >= 1.0 && c == mine),
            "one process owns every {source} partition: {counts:?} {owned:?}"
        );
    }
    let restoring = metric(&page, "tidemark_partitions_restoring");
    assert!(restoring.len() == 4 && restoring.iter().all(|(_, v)| *v == 0.0), "nothing left to restore: {restoring:?}");
    let reasons = metric(&page, "tidemark_dead_letters_total");
    assert_eq!(reasons.len(), tidemark_topology::reject::RejectReason::ALL.len(), "one series per reject reason");
    assert!(reasons.iter().map(|(_, v)| v).sum::<f64>() > 0.0);
    assert_eq!(http("GET", port, "/readyz").map(|r| r.0), Some(200));
    child.finish();
}

/// Under `--replicas` no rebalance ever happens, so `tidemark_rebalances_total` cannot show
/// an owner missing; `tidemark_partition_owned` does: each pod reports exactly the partitions
/// of its ordinal (p % 2 == k) of every source, and the two pages together cover
/// `tidemark_input_partitions`, which is what `TidemarkPartitionUnowned` compares.
#[test]
fn static_pods_report_the_partitions_of_their_ordinal_though_no_rebalance_is_counted() {
    let orders = unique("owned");
    let t = topology(&orders, &unique("run-owned"));
    create_topics(&t);
    let state = tempfile::tempdir().expect("tmp");
    let group = unique("g");
    let ports = [free_port(), free_port()];
    let mut pods: Vec<Guard> = (0..2)
        .map(|k| {
            let pod = state.path().join(format!("pod-{k}"));
            let child = member_command(&t, &pod, &group, &format!("{group}-{k}"))
                .stderr(log_beside(&pod).0)
                .args(["--replicas", "2"])
                .env("TIDEMARK_HTTP_ADDR", format!("127.0.0.1:{}", ports[k]))
                .spawn()
                .expect("spawn");
            scopeguard(child)
        })
        .collect();
    for (k, port) in ports.iter().enumerate() {
        let page = wait_for(Duration::from_secs(60), "partitions owned", || {
            let page = http("GET", *port, "/metrics")?.1;
            (metric(&page, "tidemark_partition_owned").len() == 8).then_some(page)
        });
        for source in ["orders", "inventory", "sku-repartition", "combine-repartition"] {
            let label = format!("source=\"{source}\"");
            let count = metric(&page, "tidemark_input_partitions").into_iter().find(|(l, _)| l.contains(&label));
            assert_eq!(count.map(|(_, v)| v), Some(4.0), "{source} has 4 partitions");
            let mut mine: Vec<String> = metric(&page, "tidemark_partition_owned")
                .into_iter()
                .filter(|(l, v)| l.contains(&label) && *v == 1.0)
                .map(|(l, _)| l)
                .collect();
            mine.sort();
            let want: Vec<String> = [k, k + 2].iter().map(|p| format!("{label},partition=\"{p}\"")).collect();
            assert_eq!(mine, want, "pod {k} owns the {source} partitions of its ordinal");
        }
        assert_eq!(metric(&page, "tidemark_rebalances_total"), [(String::new(), 0.0)], "no rebalance under --replicas");
    }
    for pod in &mut pods {
        pod.finish();
    }
}

/// Names listed in helm/metric-names.txt (those `which` selects) absent from a metrics page.
fn missing_names(page: &str, which: impl Fn(&str) -> bool) -> Vec<String> {
    let names = std::fs::read_to_string(common::repo_path("helm/metric-names.txt")).expect("names");
    let mut missing = Vec::new();
    for name in names.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).filter(|n| which(n)) {
        let present = [name.to_string(), format!("{name}_bucket"), format!("{name}_count")]
            .iter()
            .any(|n| !metric(page, n).is_empty());
        if !present {
            missing.push(name.to_string());
        }
    }
    missing
}

#[test]
fn every_micro_batch_metric_listed_for_the_chart_exists_in_a_live_micro_batch_page() {
    let orders = unique("metrics-mb");
    let t = topology(&orders, &unique("run-metrics-mb"));
    create_topics(&t);
    generate(&orders, &["--events", "500", "--rate", "1000", "--seed", "6"]);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let child = std::process::Command::new(BIN)
        .args(["microbatch", "--bootstrap", &bootstrap(), "--topology"])
        .arg(&t.path)
        .arg("--state-dir")
        .arg(state.path())
        .args(["--every", "300ms", "--no-side-outputs", "--create-topics", "--http-addr", &format!("127.0.0.1:{port}")])
        .args([
            "--dashboard-topic",
            &format!("{}.mb", t.dashboard),
            "--finance-topic",
            &format!("{}.mb", t.finance_provisional),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut child = scopeguard(child);
    let page = wait_for(Duration::from_secs(60), "a slice", || {
        let page = http("GET", port, "/metrics")?.1;
        (metric(&page, "tidemark_microbatch_slices_total").first()?.1 >= 1.0).then_some(page)
    });
    assert_eq!(http("GET", port, "/healthz").map(|r| r.0), Some(200));
    let missing = missing_names(&page, |n| n.starts_with("tidemark_microbatch_"));
    assert!(missing.is_empty(), "micro-batch metrics listed but absent from /metrics: {missing:?}\n{page}");
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
    cmd.args([
        "-X",
        "ssl.key.password=pw-from-flag-4409",
        "-X",
        "sasl.oauthbearer.config=clientId=svc clientSecret=oauth-secret-8812",
        "--kafka-config",
    ])
    .arg(&props)
    .args(["--http-addr", &format!("127.0.0.1:{port}"), "--log", "debug"]);
    let mut child = scopeguard(cmd.spawn().expect("spawn"));
    let page = wait_for(Duration::from_secs(60), "metrics after processing", || {
        let page = http("GET", port, "/metrics")?.1;
        (metric(&page, "tidemark_records_total").first()?.1 >= 200.0).then_some(page)
    });
    child.finish();
    let err = stderr_of(std::mem::replace(&mut child.0, std::process::Command::new("true").spawn().expect("true")));
    for secret in ["pw-from-file-7731", "pw-from-flag-4409", "oauth-secret-8812"] {
        assert!(!err.contains(secret), "secret {secret} leaked into the log");
        assert!(!page.contains(secret), "secret {secret} leaked into /metrics");
    }
    assert!(err.contains("<redacted>"), "the settings line must show that secrets were redacted:\n{err}");

    // A secret property librdkafka rejects (OIDC is not in every build, or a typo): start is
    // refused, and the message that names the property does not quote its value.
    let out = run_command(&t, state.path(), &unique("g"))
        .args(["-X", "sasl.oauthbearer.client.secret=oauth-client-secret-3390"])
        .args(["-X", "ssl.keystore.passwrd=typo-secret-5512"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    for secret in ["oauth-client-secret-3390", "typo-secret-5512"] {
        assert!(!err.contains(secret), "secret {secret} leaked into the start-up error:\n{err}");
    }
}

/// [`http`] with an optional `Authorization: Bearer` header.
fn http_bearer(method: &str, port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\nContent-Length: 0\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

fn gauge(port: u16, name: &str) -> Option<f64> {
    metric(&http("GET", port, "/metrics")?.1, name).first().map(|(_, v)| *v)
}

#[test]
fn an_exposed_admin_listener_without_a_token_is_refused_at_start() {
    let orders = unique("admin-refuse");
    let t = topology(&orders, &unique("run-admin-refuse"));
    create_topics(&t);
    let state = tempfile::tempdir().expect("tmp");
    let out = run_command(&t, state.path(), &unique("g"))
        .args(["--http-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin-addr", &format!("0.0.0.0:{}", free_port())])
        .output()
        .expect("run");
    assert!(!out.status.success(), "must refuse to start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin-token-file"), "the refusal must say what is missing:\n{err}");
}

#[test]
fn pause_needs_the_bearer_token_off_loopback_is_exported_and_survives_a_restart() {
    let orders = unique("admin");
    let t = topology(&orders, &unique("run-admin"));
    create_topics(&t);
    let state = tempfile::tempdir().expect("tmp");
    let secrets = tempfile::tempdir().expect("tmp");
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, "tok-5f1e9c\n").expect("token");
    let group = unique("g");
    let (port, admin) = (free_port(), free_port());
    let env = [
        ("TIDEMARK_HTTP_ADDR", format!("127.0.0.1:{port}")),
        ("TIDEMARK_ADMIN_ADDR", format!("0.0.0.0:{admin}")),
        ("TIDEMARK_ADMIN_TOKEN_FILE", token_file.display().to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut child = scopeguard(spawn_run(&t, state.path(), &group, &env));
    wait_for(Duration::from_secs(60), "readiness", || (http("GET", port, "/readyz")?.0 == 200).then_some(()));
    assert_eq!(gauge(port, "tidemark_paused"), Some(0.0));

    // The metrics port serves no admin route any more.
    assert!(matches!(http("POST", port, "/pause").map(|r| r.0), Some(404 | 405)));
    // No token, a wrong token, a token without the scheme: 401, and consumption goes on.
    assert_eq!(http_bearer("POST", admin, "/pause", None).map(|r| r.0), Some(401));
    assert_eq!(http_bearer("POST", admin, "/pause", Some("tok-5f1e9")).map(|r| r.0), Some(401));
    assert_eq!(http("POST", admin, "/pause").map(|r| r.0), Some(401));
    generate(&orders, &["--events", "300", "--rate", "1000", "--seed", "8"]);
    wait_for(Duration::from_secs(60), "records consumed while unauthenticated pauses are refused", || {
        (gauge(port, "tidemark_records_total")? >= 300.0).then_some(())
    });
    assert_eq!(gauge(port, "tidemark_paused"), Some(0.0));

    // With the token: paused, exported, and consumption stops.
    assert_eq!(http_bearer("POST", admin, "/pause", Some("tok-5f1e9c")).map(|r| r.0), Some(200));
    assert_eq!(gauge(port, "tidemark_paused"), Some(1.0));
    std::thread::sleep(Duration::from_secs(1));
    let before = gauge(port, "tidemark_records_total").expect("records");
    generate(&orders, &["--events", "300", "--rate", "1000", "--seed", "9"]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(gauge(port, "tidemark_records_total"), Some(before), "paused: nothing may be consumed");
    child.finish();
    let log = stderr_of(std::mem::replace(&mut child.0, std::process::Command::new("true").spawn().expect("true")));
    assert!(log.contains("admin request refused"), "refusals are audited:\n{log}");
    assert!(log.contains("admin: consumption paused"), "the pause is audited:\n{log}");
    assert!(!log.contains("tok-5f1e9c"), "the token never reaches the log");

    // The pause survives a restart: still paused, nothing consumed until /resume.
    let mut child = scopeguard(spawn_run(&t, state.path(), &group, &env));
    wait_for(Duration::from_secs(60), "start-up", || (http("GET", port, "/startupz")?.0 == 200).then_some(()));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(gauge(port, "tidemark_paused"), Some(1.0));
    assert_eq!(gauge(port, "tidemark_records_total"), Some(0.0), "a restarted pod stays paused");
    assert_eq!(http_bearer("POST", admin, "/resume", Some("tok-5f1e9c")).map(|r| r.0), Some(200));
    wait_for(Duration::from_secs(60), "the records held back by the pause", || {
        (gauge(port, "tidemark_records_total")? >= 300.0).then_some(())
    });
    assert_eq!(gauge(port, "tidemark_paused"), Some(0.0));
    child.finish();
}

fn set_topic_config(topic: &str, key: &str, value: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(tidemark::kafka::admin::set_topic_config(&settings(), topic, key, value)).expect("set topic config");
}

#[test]
fn a_main_output_the_broker_refuses_keeps_the_process_up_and_not_ready_and_is_written_whole_once_allowed() {
    let orders = unique("refused");
    let t = topology(&orders, &unique("run-refused"));
    create_topics(&t);
    generate(&orders, &["--events", "600", "--rate", "5000", "--seed", "21"]);
    // No dashboard record fits: the broker refuses every batch to that topic, for good.
    set_topic_config(&t.dashboard, "max.message.bytes", "64");
    let state = tempfile::tempdir().expect("tmp");
    let (log, log_path) = log_beside(state.path());
    let port = free_port();
    let child = run_command(&t, state.path(), &unique("g"))
        .env("TIDEMARK_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("TIDEMARK_LOG", "warn")
        .stderr(log)
        .spawn()
        .expect("spawn tidemark run");
    let mut child = scopeguard(child);
    let why = wait_for(Duration::from_secs(60), "not ready, naming the refused topic", || {
        let (status, body) = http("GET", port, "/readyz")?;
        (status == 503 && body.contains(&t.dashboard)).then_some(body)
    });
    assert!(why.contains("refused"), "{why}");
    // It starts its stream again (and again) instead of exiting into a crash loop.
    let page = wait_for(Duration::from_secs(60), "two restarts of the stream", || {
        let page = http("GET", port, "/metrics")?.1;
        let restarts = metric(&page, "tidemark_stream_restarts_total").iter().map(|(_, v)| *v).sum::<f64>();
        (restarts >= 2.0).then_some(page)
    });
    let refusals = metric(&page, "tidemark_output_refusals_total");
    assert!(
        refusals.iter().any(|(labels, v)| labels.contains(&t.dashboard) && *v > 0.0),
        "refusals are counted per topic: {refusals:?}"
    );
    assert!(child.0.try_wait().expect("wait").is_none(), "the process must stay up while its outputs are refused");
    assert_eq!(http("GET", port, "/healthz").map(|r| r.0), Some(200), "alive while it waits");

    // The topic is fixed: every row is written, equal to an unhindered run over the same log.
    set_topic_config(&t.dashboard, "max.message.bytes", "1048588");
    wait_for(Duration::from_secs(90), "ready once the outputs are written", || {
        (http("GET", port, "/readyz")?.0 == 200).then_some(())
    });
    child.finish();
    let reference = topology(&orders, &unique("run-reference"));
    create_topics(&reference);
    let ref_state = tempfile::tempdir().expect("tmp");
    run_to_end(&reference, ref_state.path(), &unique("g"));
    let got = without_as_of(&compacted(&t.dashboard));
    assert!(!got.is_empty());
    assert_eq!(got, without_as_of(&compacted(&reference.dashboard)));
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(text.contains("outputs refused"), "the log says why:\n{text}");
}
