//! The dispatcher against real HTTP servers on 127.0.0.1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::testkit::{Behaviour, Recorded, TestServer};
use super::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY: &[u8] = br#"{"action":"stop_sale","sku":"SKU-1","evidence":{"available":-3}}"#;

fn fast_retry() -> RetryPolicy {
    RetryPolicy { base: Duration::from_millis(1), cap: Duration::from_millis(5), max_attempts: None }
}

fn endpoints(server: &TestServer, timeout: Duration) -> Endpoints {
    Endpoints { action_url: Some(server.url("/act")), notify_url: Some(server.url("/notify")), timeout }
}

fn signed(server: &TestServer) -> Dispatcher {
    let signer = Signer::from_secret(SECRET.as_bytes(), "test").unwrap();
    Dispatcher::new(endpoints(server, Duration::from_secs(5)), Some(signer), fast_retry(), 4).unwrap()
}

fn delivery(key: &str) -> Delivery {
    Delivery {
        key: key.into(),
        target: Target::Act,
        body: BODY.to_vec(),
        attempt: 0,
        source_append_ms: 1_700_000_000_000,
    }
}

async fn server(behaviour: Behaviour) -> TestServer {
    TestServer::start(behaviour).await.unwrap()
}

/// Recomputes the Standard Webhooks signature of a received request from the secret.
fn assert_signature_verifies(request: &Recorded) {
    let id = request.header("webhook-id").unwrap();
    let timestamp = request.header("webhook-timestamp").unwrap();
    let signature = request.header("webhook-signature").unwrap();
    let key = STANDARD.decode(SECRET.trim_start_matches("whsec_")).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let sent = STANDARD.decode(signature.strip_prefix("v1,").unwrap()).unwrap();
    mac.verify_slice(&sent).unwrap();
}

async fn retry_until_settled(dispatcher: &Dispatcher, d: &mut Delivery) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    loop {
        let outcome = dispatcher.attempt(d).await;
        outcomes.push(outcome.clone());
        match outcome {
            Outcome::Retry { after, .. } => {
                assert!(after <= dispatcher.retry_policy().cap);
                d.attempt += 1;
                tokio::time::sleep(after).await;
            }
            _ => return outcomes,
        }
        assert!(outcomes.len() < 50, "never settled: {outcomes:?}");
    }
}

#[tokio::test]
async fn a_2xx_is_delivered_with_idempotency_headers_and_a_signature_that_verifies() {
    let server = server(Behaviour::Ok).await;
    let outcome = signed(&server).attempt(&delivery("oversell:1:SKU-1:snap-42")).await;
    assert_eq!(outcome, Outcome::Delivered { status: 200 });
    assert!(outcome.is_done());

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/act"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("idempotency-key"), Some("oversell:1:SKU-1:snap-42"));
    assert_eq!(r.header("webhook-id"), Some("oversell:1:SKU-1:snap-42"));
    assert_eq!(r.header("tidemark-source-append-time"), Some("1700000000000"));
    let timestamp: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!((timestamp - chrono::Utc::now().timestamp()).abs() < 60, "unix seconds, now");
    assert_eq!(r.body, BODY, "the payload is sent byte for byte");
    assert_signature_verifies(r);
}

#[tokio::test]
async fn each_target_posts_to_its_own_endpoint() {
    let server = server(Behaviour::Ok).await;
    let dispatcher = signed(&server);
    let notify = Delivery { target: Target::Notify, ..delivery("velocity:1:SKU-9:w-1") };
    assert_eq!(dispatcher.attempt(&notify).await, Outcome::Delivered { status: 200 });
    assert_eq!(dispatcher.attempt(&delivery("k")).await, Outcome::Delivered { status: 200 });
    let paths: Vec<_> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/notify", "/act"]);
}

#[tokio::test]
async fn without_a_secret_requests_go_unsigned() {
    let server = server(Behaviour::Ok).await;
    let dispatcher = Dispatcher::new(endpoints(&server, Duration::from_secs(5)), None, fast_retry(), 1).unwrap();
    assert_eq!(dispatcher.attempt(&delivery("k")).await, Outcome::Delivered { status: 200 });
    let r = &server.requests()[0];
    assert!(r.header("webhook-signature").is_none());
    assert_eq!(r.header("idempotency-key"), Some("k"));
}

#[tokio::test]
async fn a_409_is_a_conflict_which_counts_as_done() {
    let server = server(Behaviour::Status(409)).await;
    let outcome = signed(&server).attempt(&delivery("k")).await;
    assert_eq!(outcome, Outcome::Conflict);
    assert!(outcome.is_done());
    assert_eq!(outcome.label(), "conflict");
}

#[tokio::test]
async fn client_errors_other_than_409_are_permanent_failures_with_a_body_snippet() {
    for status in [400, 404, 422] {
        let server = server(Behaviour::Status(status)).await;
        let outcome = signed(&server).attempt(&delivery("k")).await;
        assert_eq!(outcome, Outcome::PermanentFailure { status, body_snippet: format!("scripted {status}") });
        assert_eq!(outcome.label(), "permanent_failure");
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn server_errors_are_retried_after_the_policy_backoff() {
    for status in [500, 503] {
        let server = server(Behaviour::Status(status)).await;
        let dispatcher = signed(&server);
        let d = Delivery { attempt: 2, ..delivery("k") };
        match dispatcher.attempt(&d).await {
            Outcome::Retry { reason, after } => {
                assert_eq!(reason, format!("status {status}"));
                assert!(after <= dispatcher.retry_policy().ceiling(2));
            }
            other => panic!("{status}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_endpoint_slower_than_the_timeout_is_retried_as_a_timeout() {
    let server = server(Behaviour::Slow(Duration::from_secs(10))).await;
    let timeout = Duration::from_millis(200);
    let dispatcher = Dispatcher::new(endpoints(&server, timeout), None, fast_retry(), 1).unwrap();
    let started = Instant::now();
    let outcome = dispatcher.attempt(&delivery("k")).await;
    assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason == "timeout"), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "the timeout cut the request short");
}

#[tokio::test]
async fn a_connection_reset_without_an_answer_is_retried() {
    let server = server(Behaviour::Reset).await;
    let outcome = signed(&server).attempt(&delivery("k")).await;
    assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason == "connection reset"), "{outcome:?}");
    assert_eq!(outcome.label(), "retry");
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_retried() {
    let server = server(Behaviour::Close).await;
    let outcome = signed(&server).attempt(&delivery("k")).await;
    assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason == "connection closed"), "{outcome:?}");
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = reqwest::Url::parse(&format!("http://127.0.0.1:{port}/act")).unwrap();
    let endpoints = Endpoints { action_url: Some(url), notify_url: None, timeout: Duration::from_secs(5) };
    let dispatcher = Dispatcher::new(endpoints, None, fast_retry(), 1).unwrap();
    let outcome = dispatcher.attempt(&delivery("k")).await;
    assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason == "connect error"), "{outcome:?}");
}

#[tokio::test]
async fn retrying_through_5xx_delivers_with_the_same_key_and_identical_body_bytes() {
    let n = 3;
    let server = server(Behaviour::FailFirst { n, status: 503 }).await;
    let dispatcher = signed(&server);
    let mut d = delivery("low_stock:2:SKU-7:snap-3");
    let outcomes = retry_until_settled(&dispatcher, &mut d).await;

    let labels: Vec<_> = outcomes.iter().map(Outcome::label).collect();
    assert_eq!(labels, ["retry", "retry", "retry", "delivered"]);
    let requests = server.requests();
    assert_eq!(requests.len(), n + 1, "exactly n failures and one success reach the endpoint");
    for r in &requests {
        assert_eq!(r.header("idempotency-key"), Some("low_stock:2:SKU-7:snap-3"));
        assert_eq!(r.header("webhook-id"), Some("low_stock:2:SKU-7:snap-3"));
        assert_eq!(r.body, BODY);
        assert_signature_verifies(r);
    }
}

#[tokio::test]
async fn retrying_through_connection_resets_delivers() {
    let server = server(Behaviour::ResetFirst(2)).await;
    let dispatcher = signed(&server);
    let mut d = delivery("k");
    let outcomes = retry_until_settled(&dispatcher, &mut d).await;
    assert_eq!(outcomes.last(), Some(&Outcome::Delivered { status: 200 }));
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert_eq!(server.request_count(), 3);
    assert!(server.requests().iter().all(|r| r.body == BODY));
}

#[tokio::test]
async fn exhausting_max_attempts_turns_a_5xx_into_a_permanent_failure() {
    let server = server(Behaviour::Status(502)).await;
    let retry = RetryPolicy { max_attempts: Some(3), ..fast_retry() };
    let dispatcher = Dispatcher::new(endpoints(&server, Duration::from_secs(5)), None, retry, 1).unwrap();
    let mut d = delivery("k");
    let outcomes = retry_until_settled(&dispatcher, &mut d).await;
    let labels: Vec<_> = outcomes.iter().map(Outcome::label).collect();
    assert_eq!(labels, ["retry", "retry", "permanent_failure"]);
    assert!(matches!(outcomes.last(), Some(Outcome::PermanentFailure { status: 502, .. })));
    assert_eq!(server.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_more_than_max_in_flight_requests_reach_the_endpoint_at_once() {
    let server = server(Behaviour::Slow(Duration::from_millis(150))).await;
    let dispatcher =
        Arc::new(Dispatcher::new(endpoints(&server, Duration::from_secs(10)), None, fast_retry(), 2).unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let dispatcher = Arc::clone(&dispatcher);
        tasks.spawn(async move { dispatcher.attempt(&delivery(&format!("k-{i}"))).await });
    }
    while let Some(outcome) = tasks.join_next().await {
        assert_eq!(outcome.unwrap(), Outcome::Delivered { status: 200 });
    }
    assert_eq!(server.request_count(), 8);
    assert_eq!(server.max_concurrency(), 2, "bounded by the semaphore, and actually concurrent");
}

#[tokio::test]
async fn a_missing_endpoint_keeps_the_action_pending_instead_of_dead_lettering_it() {
    let server = server(Behaviour::Ok).await;
    let endpoints = Endpoints { notify_url: None, ..endpoints(&server, Duration::from_secs(5)) };
    let dispatcher = Dispatcher::new(endpoints, None, fast_retry(), 1).unwrap();
    let d = Delivery { target: Target::Notify, ..delivery("k") };
    let outcome = dispatcher.attempt(&d).await;
    assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason == "no notify endpoint"), "{outcome:?}");
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn a_key_that_is_not_a_header_value_fails_permanently_without_a_request() {
    let server = server(Behaviour::Ok).await;
    let outcome = signed(&server).attempt(&delivery("bad\nkey")).await;
    assert!(matches!(outcome, Outcome::PermanentFailure { status: 0, .. }), "{outcome:?}");
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn connections_are_reused_across_deliveries() {
    let server = server(Behaviour::Ok).await;
    let dispatcher = signed(&server);
    for i in 0..5 {
        assert!(dispatcher.attempt(&delivery(&format!("k-{i}"))).await.is_done());
    }
    assert_eq!(server.connections(), 1);
}

#[test]
fn an_invalid_configuration_reports_every_problem_at_once() {
    let endpoints = Endpoints {
        action_url: Some(reqwest::Url::parse("ftp://example.com/act").unwrap()),
        notify_url: None,
        timeout: Duration::ZERO,
    };
    let retry = RetryPolicy { base: Duration::from_secs(2), cap: Duration::from_secs(1), max_attempts: Some(0) };
    match Dispatcher::new(endpoints, None, retry, 0) {
        Err(err @ DispatchError::Config { .. }) => {
            let DispatchError::Config { problems } = &err else { unreachable!() };
            assert_eq!(problems.len(), 5, "{problems:?}");
            assert!(!err.is_retriable());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn debug_output_of_the_dispatcher_never_shows_the_secret() {
    let server = server(Behaviour::Ok).await;
    let shown = format!("{:?} {:#?}", signed(&server), signed(&server));
    assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{shown}");
    let decoded = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    assert!(!shown.contains(&format!("{decoded:?}")), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

/// The runtime spawns attempts on worker threads: the future must be `Send + 'static` and,
/// once spawned on another thread, still deliver and sign the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_attempt_delivers_a_signed_request_from_a_worker_thread() {
    let server = server(Behaviour::Ok).await;
    let dispatcher = Arc::new(signed(&server));
    let spawned = tokio::spawn(async move { dispatcher.attempt(&delivery("spawned-k")).await });
    let outcome = spawned.await.expect("the spawned attempt neither panicked nor was cancelled");
    assert_eq!(outcome, Outcome::Delivered { status: 200 });
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].path, "/act");
    assert_eq!(requests[0].body, BODY);
    assert_signature_verifies(&requests[0]);
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_name_the_key_and_status_but_never_the_secret_or_signature() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = server(Behaviour::Ok).await;
    let dispatcher = signed(&server);
    for behaviour in [Behaviour::Ok, Behaviour::Status(503), Behaviour::Status(400), Behaviour::Reset] {
        server.set_behaviour(behaviour);
        dispatcher.attempt(&delivery("oversell:1:SKU-1:snap-42")).await;
    }

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("oversell:1:SKU-1:snap-42"), "{logs}");
    assert!(logs.contains("status=503") && logs.contains("status=400"), "{logs}");
    assert!(!logs.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{logs}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for r in requests {
        let signature = r.header("webhook-signature").unwrap();
        assert!(!logs.contains(signature.trim_start_matches("v1,")), "{logs}");
    }
}

/// The raw HMAC key of a secret as configured (`whsec_<base64>` or raw bytes).
fn key_of(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(encoded) => STANDARD.decode(encoded).unwrap(),
        None => secret.as_bytes().to_vec(),
    }
}

/// Whether `signature` (`v1,<base64>`) is the signature of `request` under `secret`.
fn verifies(request: &Recorded, secret: &str, signature: &str) -> bool {
    let id = request.header("webhook-id").unwrap();
    let timestamp = request.header("webhook-timestamp").unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key_of(secret)).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let Some(sent) = signature.strip_prefix("v1,").and_then(|s| STANDARD.decode(s).ok()) else { return false };
    mac.verify_slice(&sent).is_ok()
}

/// The space-separated signatures of a request's `webhook-signature` header.
fn signatures(request: &Recorded) -> Vec<String> {
    request.header("webhook-signature").unwrap().split(' ').map(str::to_string).collect()
}

const PREVIOUS: &str = "the-old-secret-still-known-to-some-receivers";

#[tokio::test]
async fn during_a_rotation_each_request_carries_the_new_then_the_old_signature_and_each_verifies() {
    let server = server(Behaviour::Ok).await;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, format!("{SECRET}\n{PREVIOUS}\n").as_bytes()).unwrap();
    let signer = Signer::from_sources(None, Some(file.path().to_owned())).unwrap().unwrap();
    assert_eq!(signer.secrets(), 2);
    let dispatcher =
        Dispatcher::new(endpoints(&server, Duration::from_secs(5)), Some(signer), fast_retry(), 1).unwrap();
    assert_eq!(dispatcher.attempt(&delivery("k")).await, Outcome::Delivered { status: 200 });

    let r = &server.requests()[0];
    let sent = signatures(r);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(verifies(r, SECRET, &sent[0]), "the first signature is the new secret's");
    assert!(verifies(r, PREVIOUS, &sent[1]), "the second signature is the old secret's");
    assert!(!verifies(r, PREVIOUS, &sent[0]) && !verifies(r, SECRET, &sent[1]));
}

#[tokio::test]
async fn a_rewritten_secret_file_is_used_from_the_next_check_without_a_restart() {
    let server = server(Behaviour::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signing-key");
    std::fs::write(&path, format!("{PREVIOUS}\n")).unwrap();
    let signer = Signer::from_sources(None, Some(path.clone())).unwrap();
    let dispatcher = Dispatcher::new(endpoints(&server, Duration::from_secs(5)), signer, fast_retry(), 1).unwrap();
    let mut watch = SecretWatch::new(path.clone(), dispatcher.signer_slot());
    assert_eq!(watch.check().await.unwrap(), SecretChange::Unchanged, "the first check sees the file as loaded");
    dispatcher.attempt(&delivery("before")).await;

    // Kubernetes swaps a mounted Secret in place: the rotation adds the new secret first.
    std::fs::write(&path, format!("{SECRET}\n{PREVIOUS}\n")).unwrap();
    assert_eq!(watch.check().await.unwrap(), SecretChange::Reloaded { secrets: 2 });
    assert_eq!(watch.check().await.unwrap(), SecretChange::Unchanged);
    dispatcher.attempt(&delivery("during")).await;

    // An unusable rewrite keeps the secrets in use.
    std::fs::write(&path, "").unwrap();
    assert!(matches!(watch.check().await, Err(DispatchError::Secret { .. })));
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    assert_eq!(watch.check().await.unwrap(), SecretChange::Reloaded { secrets: 1 });
    dispatcher.attempt(&delivery("after")).await;

    let requests = server.requests();
    let sent: Vec<Vec<String>> = requests.iter().map(signatures).collect();
    assert_eq!(sent.iter().map(Vec::len).collect::<Vec<_>>(), [1, 2, 1]);
    assert!(verifies(&requests[0], PREVIOUS, &sent[0][0]));
    assert!(verifies(&requests[1], SECRET, &sent[1][0]) && verifies(&requests[1], PREVIOUS, &sent[1][1]));
    assert!(verifies(&requests[2], SECRET, &sent[2][0]));
}
