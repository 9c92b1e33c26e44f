//! Delivery against a real HTTP server on 127.0.0.1: what a hand-over lets through.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::FutureProducer;
use tidemark_state::{PartitionId, Store, StoreOptions};

use super::{Ctx, Gate, Owned, Settled};
use crate::dispatch::testkit::{Behaviour, TestServer};
use crate::dispatch::{Dispatcher, Endpoints, RetryPolicy};
use crate::engine::outbox::OutboxRow;
use crate::kafka::KafkaSettings;

/// A delivery context for SKU partition 0 (owned) with `max_in_flight` places, sending to
/// `server`; its audit producer points at a closed port and gives up at once.
fn context(server: &TestServer, max_in_flight: usize, dir: &std::path::Path) -> Arc<Ctx> {
    let store = Store::open(dir, &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).expect("store");
    let endpoints = Endpoints {
        action_url: Some(server.url("/a")),
        notify_url: Some(server.url("/n")),
        timeout: Duration::from_secs(5),
    };
    let dispatcher = Dispatcher::new(endpoints, None, RetryPolicy::default(), max_in_flight).expect("dispatcher");
    let audit: FutureProducer =
        KafkaSettings::new("127.0.0.1:1").client_config().set("message.timeout.ms", "50").create().expect("producer");
    let owned: Owned = Arc::default();
    owned.lock().expect("owned").insert(0);
    Arc::new(Ctx {
        store: Arc::new(store),
        dispatcher,
        audit,
        audit_topic: "audit".into(),
        dead_letter_topic: "dead".into(),
        in_flight: Default::default(),
        backlog: Arc::default(),
        stop: Arc::new(AtomicBool::new(false)),
        retention_ms: 0,
        settled: Arc::new(Settled::default()),
        gate: Arc::new(Gate::new(owned)),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_waiting_for_a_place_behind_a_slow_endpoint_do_not_post_after_their_partition_is_handed_over() {
    let server = TestServer::start(Behaviour::Slow(Duration::from_millis(400))).await.expect("server");
    let dir = tempfile::tempdir().expect("tmp");
    let ctx = context(&server, 1, dir.path());
    let id = PartitionId::sku(0);
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let ctx = Arc::clone(&ctx);
            tokio::spawn(async move { ctx.deliver(id, OutboxRow::sample(&format!("k{i}"))).await })
        })
        .collect();
    while server.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The hand-over closes the gate and waits for the attempt under way (one place: one
    // request), not for the three waiting behind it.
    // The process is stopping too, so the first attempt's outcome audit (to a broker that is
    // not there) gives up instead of being produced again until the broker is back.
    ctx.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let gate = Arc::clone(&ctx.gate);
    let busy = tokio::task::spawn_blocking(move || gate.release(&[0], Duration::from_secs(3))).await.expect("join");
    let released = Instant::now();
    for t in tasks {
        t.await.expect("delivery task");
    }
    assert!(busy.is_empty(), "the attempt under way ended within the limit: {busy:?}");
    let late = server.requests().iter().filter(|r| r.arrived > released).count();
    assert_eq!(late, 0, "requests POSTed after the partition was handed over");
    assert_eq!(server.request_count(), 1, "only the attempt under way was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_a_scan_read_as_pending_is_not_sent_again_once_its_delivery_ended_meanwhile() {
    let server = TestServer::start(Behaviour::Ok).await.expect("server");
    let dir = tempfile::tempdir().expect("tmp");
    let ctx = context(&server, 4, dir.path());
    let id = PartitionId::sku(0);
    // What the scan read: pending. What the store holds by the time it starts the row: the
    // outcome of the delivery the stream's hand-over started.
    let read = OutboxRow::sample("k-done");
    let mut stored = read.clone();
    stored.state = crate::engine::outbox::RowState::Delivered { status: 200 };
    assert!(ctx.persist(id, &stored).await);
    super::deliver::start(&ctx, id, read, true);
    // A row still pending in the store is sent.
    let pending = OutboxRow::sample("k-pending");
    assert!(ctx.persist(id, &pending).await);
    super::deliver::start(&ctx, id, pending, true);
    let deadline = Instant::now() + Duration::from_secs(5);
    while ctx.in_flight.lock().map(|f| !f.is_empty()).unwrap_or(true) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let keys: Vec<String> =
        server.requests().iter().filter_map(|r| r.header("idempotency-key").map(str::to_string)).collect();
    assert_eq!(keys, vec!["k-pending".to_string()], "only the row still pending was POSTed");
}
