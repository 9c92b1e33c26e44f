//! What an operator sees of a running processor, against a real broker: help text for every
//! metric family, process metrics, logs that a clean shutdown leaves without an ERROR line,
//! and JSON logs on request.

mod common;

use std::io::Read;
use std::process::Child;
use std::time::Duration;

use common::*;

fn stderr_of(mut child: Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// A processor with `/metrics` on a free port, killed when dropped unless [`Running::stop`]
/// ended it.
struct Running {
    child: Option<Child>,
    port: u16,
    orders: String,
    _state: tempfile::TempDir,
    _topology: Topo,
}

impl Running {
    /// Sends SIGTERM, waits for the exit and returns its status and stderr.
    fn stop(&mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        signal(&child, "TERM");
        let status = wait_for(Duration::from_secs(30), "exit after SIGTERM", || child.try_wait().ok().flatten());
        (status, stderr_of(child))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts a processor over a small generated log (with `env`) and waits until every record
/// is processed and a commit has happened; returns it and the `/metrics` page then.
fn running_with_metrics(env: &[(&str, &str)]) -> (Running, String) {
    let orders = unique("surface");
    let t = topology(&orders, &unique("run-surface"));
    create_topics(&t);
    generate(&orders, &["--events", "500", "--rate", "500", "--seed", "4", "--malformed-fraction", "0.05"]);
    let state = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut all = vec![("TIDEMARK_HTTP_ADDR", addr.as_str())];
    all.extend_from_slice(env);
    let mut command = run_command(&t, state.path(), &unique("g"));
    command.args(["--backlog-probe-every", "1"]).envs(all);
    let child = command.spawn().expect("spawn tidemark run");
    let running = Running { child: Some(child), port, orders, _state: state, _topology: t };
    let page = wait_for(Duration::from_secs(90), "every record processed and committed", || {
        let page = http("GET", running.port, "/metrics")?.1;
        let n = metric(&page, "tidemark_records_total").first().map(|(_, v)| *v)?;
        let committed = !metric(&page, "tidemark_checkpoint_duration_seconds_count").is_empty();
        (n >= 500.0 && committed).then_some(page)
    });
    (running, page)
}

#[test]
fn every_metric_family_on_a_live_metrics_page_has_help_text_and_the_build_and_process_are_described() {
    let (mut running, page) = running_with_metrics(&[]);
    let families: Vec<&str> = page.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let helped: Vec<&str> = page.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next()).collect();
    let without: Vec<_> = families.iter().filter(|f| !helped.contains(f)).collect();
    assert!(without.is_empty(), "metric families without # HELP: {without:?}\n{page}");
    assert_eq!(helped.len(), families.len(), "one # HELP line per family (# TYPE line)\n{page}");
    assert!(families.len() > 20, "a live page has many families, found {}", families.len());
    let info = metric(&page, "tidemark_build_info");
    assert!(
        info.iter().any(|(labels, v)| labels.contains("commit=\"") && *v == 1.0),
        "tidemark_build_info{{version,commit}} 1 on the page: {info:?}"
    );
    for name in ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_threads"] {
        assert!(families.contains(&name), "process metric {name} missing from /metrics");
    }
    assert!(metric(&page, "process_resident_memory_bytes").first().is_some_and(|(_, v)| *v > 1e6));
    let (status, _) = running.stop();
    assert!(status.success(), "{status}");
}

#[test]
fn a_clean_sigterm_logs_no_error_line() {
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let (mut running, _) = running_with_metrics(&[("TIDEMARK_ADMIN_ADDR", &admin_addr)]);
    // A backlog the prober reads: it fetches up to the log end, so its consumer holds
    // end-of-partition events when the process stops (logged as a librdkafka ERROR before).
    assert_eq!(http("POST", admin, "/pause").map(|r| r.0), Some(200));
    generate(&running.orders, &["--events", "40", "--rate", "1000", "--seed", "9", "--event-bytes", "256"]);
    wait_for(Duration::from_secs(30), "a backlog age measured while paused", || {
        let page = http("GET", running.port, "/metrics")?.1;
        let ages = metric(&page, "tidemark_backlog_age_seconds");
        ages.iter().any(|(labels, v)| labels.contains("source=\"orders\"") && *v > 0.0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let (status, log) = running.stop();
    assert!(status.success(), "a SIGTERM ends in a clean exit, got {status}:\n{log}");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "ERROR lines on a clean SIGTERM: {errors:#?}");
}

#[test]
fn with_log_format_json_every_log_line_is_a_json_object_with_level_target_and_message() {
    let (mut running, _) = running_with_metrics(&[("TIDEMARK_LOG_FORMAT", "json")]);
    let (status, log) = running.stop();
    assert!(status.success(), "{status}:\n{log}");
    // The final summary is the command's own output (`tidemark: processed …`), not a log line.
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with("tidemark: ")).collect();
    assert!(lines.len() >= 3, "log lines expected:\n{log}");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(v[key].is_string(), "{key} missing in {line}");
        }
        assert_ne!(v["level"], "ERROR", "{line}");
    }
}

#[test]
fn validate_reports_three_type_errors_in_one_run_each_with_its_key_path_and_line_and_column() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("types.toml");
    let text = tidemark_topology::config::EXAMPLE
        .replacen("partitions = 4", "partitions = \"four\"", 1)
        .replace("allow_unsigned = false", "allow_unsigned = \"no\"")
        .replace("max_batch_records = 20000", "max_batch_records = \"many\"");
    std::fs::write(&path, &text).expect("write");
    let out = std::process::Command::new(BIN).arg("validate").arg(&path).output().expect("validate");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let origin = path.display().to_string();
    for (key, path) in [
        ("partitions = \"four\"", "sources.orders.partitions"),
        ("allow_unsigned", "endpoints.allow_unsigned"),
        ("max_batch_records", "state.max_batch_records"),
    ] {
        let line = text.lines().position(|l| l.starts_with(key)).map(|i| i + 1).expect("line");
        let column = text.lines().nth(line - 1).and_then(|l| l.find('=')).map(|i| i + 3).expect("column");
        let located = format!("{origin}:{line}:{column}: {path}: invalid type: string");
        assert!(stdout.contains(&located), "no `{located}` in:\n{stdout}");
    }
    assert!(stdout.contains("3 error(s)"), "{stdout}");
}

#[test]
fn validate_reports_three_malformed_rule_expressions_in_one_run_each_at_its_line_and_column() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("rules.toml");
    let example = tidemark_topology::config::EXAMPLE;
    let text = example
        .replace("when = \"available < params.hours", "when = \"available < 1.5 * params.hours")
        .replace(
            "last_quarter_hour_units = \"window.units + preceding.units\"",
            "last_quarter_hour_units = \"window.units + precedng.units\"",
        )
        .replace("available = \"available\"", "available = \"available <\"");
    assert_eq!(
        text.matches("1.5 * ").count() + text.matches("precedng").count() + text.matches("\"available <\"").count(),
        3
    );
    std::fs::write(&path, &text).expect("write");
    let out = std::process::Command::new(BIN).arg("validate").arg(&path).output().expect("validate");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let origin = path.display().to_string();
    let at = |needle: &str, extra: usize| {
        let line = text.lines().position(|l| l.contains(needle)).map(|i| i + 1).expect("line");
        let column = text.lines().nth(line - 1).and_then(|l| l.find(needle)).map(|i| i + 1 + extra).expect("column");
        format!("{origin}:{line}:{column}:")
    };
    for (place, path, message) in [
        (at("1.5 * ", 0), "rules[3].when", "float literals are not exact"),
        (at("precedng", 0), "rules[3].evidence.last_quarter_hour_units", "unknown value `precedng.units`"),
        (at("available <\"", "available <".len()), "rules[3].evidence.available", "syntax error"),
    ] {
        let located = format!("{place} {path}: {message}");
        assert!(stdout.contains(&located), "no `{located}` in:\n{stdout}");
    }
    assert!(stdout.contains("3 error(s)"), "{stdout}");
}

#[test]
fn an_unreachable_broker_is_named_within_ten_seconds() {
    use std::io::BufRead;
    let address = format!("127.0.0.1:{}", free_port());
    let example = repo_path("topology/examples/orders.toml");
    let mut child = std::process::Command::new(BIN)
        .args(["topics", "--bootstrap", &address, "--topology"])
        .arg(&example)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tidemark topics");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    let named = loop {
        let left = Duration::from_secs(10).saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(&address) => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let line = named.unwrap_or_else(|| panic!("no line naming {address} within 10 s; saw {seen:#?}"));
    assert!(line.contains("no answer from the Kafka broker"), "{line}");
}

#[test]
fn a_missing_input_topic_is_named_at_once_without_a_summary_before_the_error() {
    let orders = unique("never-created");
    let t = topology(&orders, &unique("run-missing"));
    let state = tempfile::tempdir().expect("tmp");
    let started = std::time::Instant::now();
    let out = run_command(&t, state.path(), &unique("g")).args(["--admin-addr", "off"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a run without its input topics must fail:\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}:\n{stderr}", started.elapsed());
    let error = stderr.lines().last().unwrap_or_default();
    let named = format!("input topics {orders}, {orders}.inventory do not exist");
    assert!(error.contains(&named), "no `{named}` in the last line:\n{stderr}");
    assert!(error.contains(&bootstrap()) && error.contains("tidemark topics"), "{stderr}");
    assert!(!stderr.contains("processed 0 records"), "no summary of a run that never started:\n{stderr}");
}
