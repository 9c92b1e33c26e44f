use super::*;
use crate::normalize::NormalizeLimits;

#[test]
fn the_shipped_example_is_valid() {
    let t = parse(EXAMPLE, "orders.toml").expect("example must validate");
    assert_eq!(t.dashboard_window.size_ms, 60_000);
    assert_eq!(t.dedup_retention_ms, 7 * 24 * 3_600_000);
    assert_eq!(t.rules.len(), 4);
    assert_eq!(t.finance_time_zone, chrono_tz::Asia::Tokyo);
}

#[test]
fn every_error_is_reported_at_once_with_its_path() {
    let text = EXAMPLE
        .replace("partitions = 4\n\n[sources.inventory]", "partitons = 4\n\n[sources.inventory]")
        .replace("commit_interval = \"200ms\"", "commit_interval = \"soon\"")
        .replace("time_zone = \"Asia/Tokyo\"", "time_zone = \"Mars/Olympus\"")
        .replacen("mode = \"shadow\"", "mode = \"acts\"", 1);
    let err = parse(&text, "bad.toml").expect_err("must fail");
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"sources.orders.partitons"), "{err}");
    assert!(paths.contains(&"state.commit_interval"), "{err}");
    assert!(paths.contains(&"finance.time_zone"), "{err}");
    assert!(paths.contains(&"rules[0].mode"), "{err}");
    assert!(err.to_string().starts_with("bad.toml: 4 error(s)"), "{err}");
}

#[test]
fn rows_are_published_every_second_unless_the_topology_says_otherwise() {
    let t = parse(EXAMPLE, "t.toml").expect("valid");
    assert_eq!(t.publish_interval_ms, 1000);
    let without = EXAMPLE.replace("publish_interval = \"1s\"\n", "");
    assert_ne!(without, EXAMPLE);
    assert_eq!(parse(&without, "t.toml").expect("valid").publish_interval_ms, 1000);
    let every = EXAMPLE.replace("publish_interval = \"1s\"", "publish_interval = \"0s\"");
    assert_eq!(parse(&every, "t.toml").expect("valid").publish_interval_ms, 0);
    let bad = EXAMPLE.replace("publish_interval = \"1s\"", "publish_interval = \"soon\"");
    let err = parse(&bad, "t.toml").expect_err("not a duration");
    assert_eq!(err.errors[0].path, "state.publish_interval", "{err}");
}

#[test]
fn a_commit_linger_defaults_to_2ms_and_may_not_exceed_the_commit_interval() {
    let t = parse(EXAMPLE, "t.toml").expect("valid");
    assert_eq!((t.commit_interval_ms, t.commit_linger_ms), (200, 2));
    let without = EXAMPLE.replace("commit_linger = \"2ms\"\n", "");
    assert_ne!(without, EXAMPLE);
    assert_eq!(parse(&without, "t.toml").expect("valid").commit_linger_ms, 2);
    let whole = EXAMPLE.replace("commit_linger = \"2ms\"", "commit_linger = \"200ms\"");
    assert_eq!(parse(&whole, "t.toml").expect("valid").commit_linger_ms, 200);
    let longer = EXAMPLE.replace("commit_linger = \"2ms\"", "commit_linger = \"1s\"");
    let err = parse(&longer, "t.toml").expect_err("longer than the interval");
    assert_eq!(err.errors[0].path, "state.commit_linger", "{err}");
    assert!(err.to_string().contains("must not exceed state.commit_interval (200 ms)"), "{err}");
}

#[test]
fn the_idle_promise_is_the_clock_unless_fences_are_asked_for() {
    let t = parse(EXAMPLE, "t.toml").expect("valid");
    assert_eq!(t.idle_promise, IdlePromise::Clock);
    let fenced = EXAMPLE.replace("idle_promise = \"clock\"", "idle_promise = \"fence\"");
    assert_eq!(parse(&fenced, "t.toml").expect("valid").idle_promise, IdlePromise::Fence { every_ms: 20 });
    let bad = EXAMPLE.replace("idle_promise = \"clock\"", "idle_promise = \"sometimes\"");
    let err = parse(&bad, "t.toml").expect_err("unknown");
    assert_eq!(err.errors[0].path, "internal.idle_promise", "{err}");
    assert!(err.to_string().contains("expected clock | fence"), "{err}");
}

#[test]
fn max_identifier_bytes_defaults_to_256_and_is_bounded() {
    let t = parse(EXAMPLE, "t.toml").expect("valid");
    assert_eq!(t.normalize, NormalizeLimits::default());
    assert_eq!(t.normalize.max_identifier_bytes, 256);
    let without = EXAMPLE.replace("max_identifier_bytes = 256\n", "");
    assert_ne!(without, EXAMPLE);
    assert_eq!(parse(&without, "t.toml").expect("valid").normalize.max_identifier_bytes, 256);
    let set = EXAMPLE.replace("max_identifier_bytes = 256", "max_identifier_bytes = 64");
    assert_eq!(parse(&set, "t.toml").expect("valid").normalize.max_identifier_bytes, 64);
    for bad in ["0", "-1", "4097"] {
        let text = EXAMPLE.replace("max_identifier_bytes = 256", &format!("max_identifier_bytes = {bad}"));
        let err = parse(&text, "t.toml").expect_err("must fail");
        assert_eq!(err.errors[0].path, "sources.max_identifier_bytes", "{bad}: {err}");
    }
}

#[test]
fn a_type_error_carries_line_and_column() {
    let text = EXAMPLE.replace("max_batch_records = 20000", "max_batch_records = \"many\"");
    let err = parse(&text, "t.toml").expect_err("must fail");
    let (line, _) = err.errors[0].line_col.expect("located");
    assert_eq!(text.lines().nth(line - 1).map(|l| l.starts_with("max_batch_records")), Some(true), "{err}");
}

#[test]
fn three_type_errors_are_reported_at_once_each_with_its_key_path_and_line() {
    let text = EXAMPLE
        .replace("max_batch_records = 20000", "max_batch_records = \"many\"")
        .replacen("partitions = 4", "partitions = \"four\"", 1)
        .replace("allow_unsigned = false", "allow_unsigned = \"no\"");
    let err = parse(&text, "t.toml").expect_err("must fail");
    let located: Vec<(&str, usize)> =
        err.errors.iter().filter_map(|e| Some((e.path.as_str(), e.line_col?.0))).collect();
    let line_of = |key: &str| text.lines().position(|l| l.starts_with(key)).map(|i| i + 1);
    assert_eq!(
        located,
        vec![
            ("sources.orders.partitions", line_of("partitions = \"four\"").unwrap_or(0)),
            ("endpoints.allow_unsigned", line_of("allow_unsigned").unwrap_or(0)),
            ("state.max_batch_records", line_of("max_batch_records").unwrap_or(0)),
        ],
        "{err}"
    );
    assert_eq!(err.errors.len(), 3, "the stand-in values add no errors of their own: {err}");
    assert!(err.to_string().contains("invalid type: string \"four\", expected i32"), "{err}");
}

#[test]
fn a_type_error_inside_a_rule_is_located_by_its_index() {
    let text = EXAMPLE.replacen("version = 1", "version = \"one\"", 1);
    let err = parse(&text, "t.toml").expect_err("must fail");
    assert_eq!(err.errors[0].path, "rules[0].version", "{err}");
}

#[test]
fn a_topology_without_an_endpoints_table_gets_the_documented_defaults() {
    let start = EXAMPLE.find("[endpoints]").expect("endpoints table");
    let last = "allow_unsigned = false";
    let end = EXAMPLE[start..].find(last).expect("last key") + start + last.len();
    let text = format!("{}{}", &EXAMPLE[..start], &EXAMPLE[end..]);
    let t = parse(&text, "t.toml").expect("valid without [endpoints]");
    assert_eq!((t.endpoints.timeout_ms, t.endpoints.max_in_flight), (5_000, 32));
    assert_eq!((t.endpoints.trust, t.endpoints.allow_unsigned), (Trust::Webpki, false));
}

#[test]
fn a_rule_that_calls_an_endpoint_needs_its_url() {
    let text = EXAMPLE.replacen("mode = \"shadow\"", "mode = \"act\"", 1);
    let err = parse(&text, "t.toml").expect_err("must fail");
    assert_eq!(err.errors[0].path, "rules[0].mode", "{err}");
    let with_url =
        text.replace("# action_url = \"https://inventory.internal/actions\"", "action_url = \"http://127.0.0.1:1/a\"");
    assert!(parse(&with_url, "t.toml").is_ok());
}

#[test]
fn webhook_tls_and_signing_keys_default_to_webpki_and_signed_and_are_checked_together() {
    let t = parse(EXAMPLE, "t.toml").expect("valid");
    assert_eq!(t.endpoints.trust, Trust::Webpki);
    assert_eq!((t.endpoints.ca_file.as_deref(), t.endpoints.client_cert_file.as_deref()), (None, None));
    assert!(!t.endpoints.allow_unsigned);
    let set = EXAMPLE.replace("trust = \"webpki\"", "trust = \"both\"").replace(
        "allow_unsigned = false",
        "allow_unsigned = true\nca_file = \"/ca.pem\"\nclient_cert_file = \"/c.pem\"\nclient_key_file = \"/k.pem\"",
    );
    let t = parse(&set, "t.toml").expect("valid");
    assert_eq!(t.endpoints.trust, Trust::Both);
    assert_eq!(t.endpoints.ca_file.as_deref(), Some("/ca.pem"));
    assert_eq!(t.endpoints.client_key_file.as_deref(), Some("/k.pem"));
    assert!(t.endpoints.allow_unsigned);
    let bad = EXAMPLE
        .replace("trust = \"webpki\"", "trust = \"none\"")
        .replace("allow_unsigned = false", "client_cert_file = \"/c.pem\"\nca = \"x\"");
    let err = parse(&bad, "t.toml").expect_err("must fail");
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["endpoints.ca", "endpoints.trust", "endpoints.client_key_file"], "{err}");
    let unknown = EXAMPLE.replace("trust = \"webpki\"", "trust = \"os\"");
    assert_eq!(parse(&unknown, "t.toml").expect_err("must fail").errors[0].path, "endpoints.trust");
}

#[test]
fn finance_topics_must_be_compacted_and_distinct() {
    let text = EXAMPLE
        .replace(
            "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true }",
            "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = false }",
        )
        .replace("topic = \"tidemark.finance-manifest\"", "topic = \"tidemark.finance-close\"");
    let err = parse(&text, "t.toml").expect_err("must fail");
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["sinks.finance_manifest.topic", "sinks.finance_close.compacted"], "{err}");
}

#[test]
fn dedup_retention_must_outlive_window_retention() {
    let text = EXAMPLE.replace("dedup_retention = \"7d\"", "dedup_retention = \"1h\"");
    let err = parse(&text, "t.toml").expect_err("must fail");
    assert_eq!(err.errors[0].path, "state.dedup_retention");
}

#[test]
fn unknown_rule_parameters_and_duplicate_ids_are_rejected() {
    let text =
        format!("{EXAMPLE}\n[[rules]]\nid = \"oversell\"\nversion = 2\nmode = \"shadow\"\nparams = {{ limit = 3 }}\n");
    let err = parse(&text, "t.toml").expect_err("must fail");
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["rules[4].id", "rules[4].params.limit"], "{err}");
}

#[test]
fn a_combined_sink_is_written_as_json_unless_its_format_says_connect_json() {
    let t = parse(EXAMPLE, "orders.toml").expect("valid");
    assert_eq!(
        (t.dashboard_combined_format, t.finance_provisional_combined_format),
        (SinkFormat::Json, SinkFormat::Json)
    );
    let text = EXAMPLE.replace(
        "topic = \"tidemark.dashboard-combined\", partitions = 4, compacted = true",
        "topic = \"tidemark.dashboard-combined\", partitions = 4, compacted = true, format = \"connect-json\"",
    );
    let t = parse(&text, "t.toml").expect("valid");
    assert_eq!(t.dashboard_combined_format, SinkFormat::ConnectJson);
    assert_eq!(t.finance_provisional_combined_format, SinkFormat::Json, "chosen per sink");
}

#[test]
fn an_unknown_format_and_a_format_on_a_sink_that_has_none_are_reported_with_their_paths() {
    let text = EXAMPLE
        .replace(
            "topic = \"tidemark.finance-provisional-combined\", partitions = 4, compacted = true",
            "topic = \"tidemark.finance-provisional-combined\", partitions = 4, compacted = true, format = \"avro\"",
        )
        .replace(
            "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true }",
            "finance_close = { topic = \"tidemark.finance-close\", partitions = 4, compacted = true, format = \"connect-json\" }",
        );
    let err = parse(&text, "t.toml").expect_err("must fail");
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["sinks.finance_close.format", "sinks.finance_provisional_combined.format"], "{err}");
    assert!(err.to_string().contains("unknown format `avro` (expected json | connect-json)"), "{err}");
}
