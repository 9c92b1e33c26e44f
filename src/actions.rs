//! The action runtime: takes committed outbox rows and sees each to a final state.
//!
//! For every row (a `Pending` one handed over after its commit, or found by an outbox scan
//! at start, on assignment, or when the hand-over channel was full):
//! 1. `shadow` rows are audited and never sent;
//! 2. otherwise the attempt count is persisted, then the row is POSTed (see [`dispatch`]);
//! 3. every attempt and outcome is audited to the audit topic;
//! 4. 2xx/409: the row becomes `Delivered`/`Conflict` (durably); other 4xx: `Failed`, and
//!    the action goes to the action dead-letter topic; 5xx, timeouts, resets: retried with
//!    exponential backoff and jitter.
//!
//! Scans start at most [`MAX_STARTED`] rows at once (a large pending backlog is taken in
//! turns, not loaded whole), and drop final rows whose event time lies more than the dedup
//! retention behind the newest row of their partition: by then no input can produce their
//! key again (see `engine::outbox`).
//!
//! Requests are signed (see [`dispatcher`]): rules in `act` or `notify` mode refuse to
//! start without a secret unless the topology sets `[endpoints] allow_unsigned = true`. A
//! secret file is re-read every [`SECRET_CHECK_EVERY`] seconds, so a rotated Kubernetes
//! Secret is used without a restart.
//!
//! Every row handed over or started counts in the runtime's [`Backlog`] until its outcome is
//! persisted and audited, so `run --exit-at-end` can wait for the dispatch to finish.
//!
//! A crash between the endpoint's 2xx and step 4 leaves the row pending with attempts > 0;
//! after restart it is sent again with the same key and payload (the one duplicate POST the
//! guarantees allow) and counted in `tidemark_dispatch_redeliveries_total`. The outcome is
//! written before it is audited, to keep that window short; a crash between the two loses
//! the audit record of that outcome (the outbox row still holds it).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::Serialize;
use tidemark_state::{codec, PartitionId, StateError, Store};
use tidemark_topology::config::{RuleMode, Topology};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::dispatch::signer::{SECRET_ENV, SECRET_FILE_ENV};
use crate::dispatch::{
    Delivery, Dispatcher, Endpoints, Outcome, RetryPolicy, SecretChange, SecretWatch, Signer, Target, TlsConfig,
};
use crate::engine::outbox::{OutboxRow, RowState};
use crate::failpoint;
use crate::kafka::KafkaSettings;
use crate::telemetry::events::{Segment, DISPATCH, LATENCY};

/// Rows a scan hands to delivery tasks while earlier ones are still in flight; the rest
/// wait for the next scan (each task holds its row and payload).
const MAX_STARTED: usize = 2048;
/// How often every owned partition's outbox is swept for expired rows.
const SWEEP_EVERY: u32 = 600;
/// Ticks (seconds) between two reads of the webhook secret file.
const SECRET_CHECK_EVERY: u32 = 5;

/// The message logged once per redelivery, next to `tidemark_dispatch_redeliveries_total`.
pub const REDELIVERY_LOG: &str = "action redelivered after restart";

/// SKU partitions this process owns, kept by the stream thread.
pub type Owned = Arc<Mutex<BTreeSet<i32>>>;

/// Rows the runtime was given and has not finished: a row counts from its hand-over (or
/// from the scan that starts it) until its outcome is persisted and audited, or until the
/// runtime gives it up on stop (it stays pending in the outbox). Shadow rows are never sent
/// and so are never pending actions; they count apart until their audit records are acked.
#[derive(Debug, Default)]
pub struct Backlog {
    actions: AtomicUsize,
    shadow: AtomicUsize,
}

impl Backlog {
    /// Actions (`act`/`notify` rows) queued for the runtime or in delivery.
    pub fn actions(&self) -> usize {
        self.actions.load(Ordering::SeqCst)
    }

    /// Shadow rows whose audit records are not yet acknowledged.
    pub fn shadow(&self) -> usize {
        self.shadow.load(Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.actions() == 0 && self.shadow() == 0
    }

    fn counter(&self, row: &OutboxRow) -> &AtomicUsize {
        if row.state == RowState::Shadow {
            &self.shadow
        } else {
            &self.actions
        }
    }
}

/// Holds one row's place in the [`Backlog`] until dropped (settled, given up, or the task
/// ended with the runtime).
struct Counted(Arc<Backlog>, bool);

impl Counted {
    /// Takes the place a hand-over already counted.
    fn adopt(backlog: &Arc<Backlog>, row: &OutboxRow) -> Self {
        Counted(Arc::clone(backlog), row.state == RowState::Shadow)
    }

    /// Counts a row that was not handed over (found by a scan).
    fn count(backlog: &Arc<Backlog>, row: &OutboxRow) -> Self {
        backlog.counter(row).fetch_add(1, Ordering::SeqCst);
        Self::adopt(backlog, row)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let c = if self.1 { &self.0.shadow } else { &self.0.actions };
        c.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The channel was full or the runtime gone: the row waits in the outbox for a rescan.
#[derive(Debug)]
pub struct NotHandedOver;

/// The stream's end of the hand-over channel: committed outbox rows go to the runtime, and
/// count in its [`Backlog`] from the moment they are sent. Rows are durable before they are
/// sent, so a full channel loses nothing: the runtime rescans the outbox.
#[derive(Clone)]
pub struct RowSender {
    tx: mpsc::Sender<(PartitionId, OutboxRow)>,
    backlog: Arc<Backlog>,
}

impl RowSender {
    pub fn try_send(&self, item: (PartitionId, OutboxRow)) -> Result<(), NotHandedOver> {
        let counter = self.backlog.counter(&item.1);
        counter.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(item).map_err(|_| {
            counter.fetch_sub(1, Ordering::SeqCst);
            NotHandedOver
        })
    }

    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }
}

/// Rows of one partition's outbox still `Pending` (never shadow rows): actions that were
/// committed and have not reached a final state. Unreadable rows are skipped, as the
/// runtime's scan skips them (and logs them).
pub fn pending_in_outbox(store: &Store, id: PartitionId) -> Result<usize, StateError> {
    store.outbox_pending_count(id)
}

struct Ctx {
    store: Arc<Store>,
    dispatcher: Dispatcher,
    audit: FutureProducer,
    audit_topic: String,
    dead_letter_topic: String,
    in_flight: Mutex<HashMap<String, i64>>,
    backlog: Arc<Backlog>,
    stop: Arc<AtomicBool>,
    /// Final rows this far (event time) behind their partition's newest row are deleted.
    retention_ms: i64,
}

/// One record on the audit topic (docs/formats.md, "Audit topic"); also written by
/// `tidemark actions resend`.
#[derive(Serialize)]
pub struct AuditRecord<'a> {
    key: &'a str,
    event: &'a str,
    mode: &'a str,
    rule_id: &'a str,
    rule_version: u32,
    action: &'a str,
    sku: &'a str,
    attempt: u32,
    status: Option<u16>,
    reason: Option<String>,
    /// Wall clock: the audit says when things happened, unlike the deterministic outputs.
    at: String,
}

impl<'a> AuditRecord<'a> {
    /// The audit record of `event` for `row`, stamped now.
    pub fn of(row: &'a OutboxRow, event: &'a str, status: Option<u16>, reason: Option<String>) -> Self {
        AuditRecord {
            key: &row.key,
            event,
            mode: &row.mode,
            rule_id: &row.rule_id,
            rule_version: row.rule_version,
            action: &row.action,
            sku: &row.sku,
            attempt: row.attempts,
            status,
            reason,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

pub struct ActionRuntime {
    pub rows: RowSender,
    pub owned: Owned,
    pub backlog: Arc<Backlog>,
}

/// Starts the runtime on `rt`; returns the hand-over channel for the stream thread.
pub fn spawn(
    rt: &tokio::runtime::Runtime,
    settings: &KafkaSettings,
    t: &Topology,
    store: Arc<Store>,
    stop: Arc<AtomicBool>,
    stats: Arc<crate::engine::Stats>,
) -> anyhow::Result<ActionRuntime> {
    let secret_file = std::env::var_os(SECRET_FILE_ENV).map(PathBuf::from);
    let dispatcher = dispatcher(t, std::env::var_os(SECRET_ENV), secret_file.clone())?;
    let mut secret_watch = secret_file.map(|path| SecretWatch::new(path, dispatcher.signer_slot()));
    let audit: FutureProducer = settings
        .client_config()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "300000")
        .create()?;
    if !store.outbox_indexed()? {
        // A store written before the outbox indexes: one scan builds them.
        let built = store
            .rebuild_outbox_index(|bytes| codec::decode::<OutboxRow>("outbox row", bytes).ok().map(|r| r.index()))?;
        tracing::info!(rows = built, "outbox indexes built");
    }
    let ctx = Arc::new(Ctx {
        store,
        dispatcher,
        audit,
        audit_topic: t.audit.topic.clone(),
        dead_letter_topic: t.action_dead_letter.topic.clone(),
        in_flight: Mutex::default(),
        backlog: Arc::default(),
        stop,
        retention_ms: t.dedup_retention_ms,
    });
    let (tx, mut rx) = mpsc::channel::<(PartitionId, OutboxRow)>(4096);
    let backlog = Arc::clone(&ctx.backlog);
    let owned: Owned = Arc::default();
    let scan_owned = Arc::clone(&owned);
    rt.spawn(async move {
        let mut scanned: BTreeSet<i32> = BTreeSet::new();
        let mut unfinished: BTreeSet<i32> = BTreeSet::new();
        let mut ticks = 0u32;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Some((id, row)) => start(&ctx, id, row, false),
                    None => break,
                },
                _ = tick.tick() => {
                    let now_owned = scan_owned.lock().map(|o| o.clone()).unwrap_or_default();
                    ticks = ticks.wrapping_add(1);
                    let full_rescan = stats.outbox_rescan.swap(false, Ordering::Relaxed) || ticks.is_multiple_of(SWEEP_EVERY);
                    let due: Vec<i32> = now_owned
                        .iter()
                        .filter(|p| full_rescan || !scanned.contains(p) || unfinished.contains(p))
                        .copied()
                        .collect();
                    for p in &due {
                        let more = scan(&ctx, PartitionId::sku(*p)).await;
                        if more {
                            unfinished.insert(*p);
                        } else {
                            unfinished.remove(p);
                        }
                    }
                    scanned = now_owned;
                    publish_gauges(&ctx);
                    if let Some(watch) = secret_watch.as_mut().filter(|_| ticks.is_multiple_of(SECRET_CHECK_EVERY)) {
                        match watch.check().await {
                            Ok(SecretChange::Unchanged) => {}
                            Ok(SecretChange::Reloaded { secrets }) => info!(secrets, "webhook signing secret reloaded"),
                            Err(e) => error!(error = %e, "webhook signing secret not reloaded; signing with the previous one"),
                        }
                    }
                }
            }
        }
    });
    Ok(ActionRuntime { rows: RowSender { tx, backlog: Arc::clone(&backlog) }, owned, backlog })
}

/// The dispatcher of `t`: its endpoints, TLS settings (files read now), and the signer
/// from a secret `value` or `file` (`TIDEMARK_WEBHOOK_SECRET`, `TIDEMARK_WEBHOOK_SECRET_FILE`).
/// Rules in `act` or `notify` mode refuse to run unsigned unless `[endpoints]
/// allow_unsigned = true`; shadow rules send nothing and need no secret.
pub fn dispatcher(t: &Topology, value: Option<OsString>, file: Option<PathBuf>) -> anyhow::Result<Dispatcher> {
    let parse = |u: &Option<String>| -> anyhow::Result<Option<reqwest::Url>> {
        Ok(u.as_deref().map(reqwest::Url::parse).transpose()?)
    };
    let endpoints = Endpoints {
        action_url: parse(&t.endpoints.action_url)?,
        notify_url: parse(&t.endpoints.notify_url)?,
        timeout: Duration::from_millis(u64::try_from(t.endpoints.timeout_ms).unwrap_or(5_000)),
    };
    let e = &t.endpoints;
    let tls = TlsConfig {
        trust: e.trust,
        ca_file: e.ca_file.as_ref().map(PathBuf::from),
        client_cert_file: e.client_cert_file.as_ref().map(PathBuf::from),
        client_key_file: e.client_key_file.as_ref().map(PathBuf::from),
    };
    let signer = Signer::from_sources(value, file)?;
    let sending: Vec<String> = t
        .rules
        .iter()
        .filter(|r| r.mode != RuleMode::Shadow)
        .map(|r| format!("{} ({})", r.id, if r.mode == RuleMode::Act { "act" } else { "notify" }))
        .collect();
    if signer.is_none() && !sending.is_empty() {
        if !e.allow_unsigned {
            anyhow::bail!(
                "rules {} call webhooks but no signing secret is configured: set {SECRET_FILE_ENV} (or \
                 {SECRET_ENV}), or set `allow_unsigned = true` in [endpoints] to send unsigned requests",
                sending.join(", ")
            );
        }
        warn!(rules = %sending.join(", "), "no webhook signing secret and allow_unsigned = true: requests go unsigned");
    }
    Ok(Dispatcher::with_tls(endpoints, &tls, signer, RetryPolicy::default(), e.max_in_flight)?)
}

fn publish_gauges(ctx: &Ctx) {
    let now = chrono::Utc::now().timestamp_millis();
    if let Ok(f) = ctx.in_flight.lock() {
        gauge!("tidemark_outbox_pending").set(f.len() as f64);
        let oldest = f.values().copied().min().map_or(0.0, |t| ((now - t).max(0) as f64) / 1000.0);
        gauge!("tidemark_outbox_oldest_pending_age_seconds").set(oldest);
    }
}

/// Most expired rows deleted per partition and scan (the rest go at the next one).
const MAX_EXPIRED_PER_SCAN: usize = 10_000;

/// Re-queues the pending rows of a partition (start, assignment, lost hand-over), at most
/// [`MAX_STARTED`] in flight, and deletes expired final rows. Pending rows are read through
/// the store's pending index and expired ones through its expiry index: final rows are
/// never read or decoded. True when pending rows were left for the next scan.
async fn scan(ctx: &Arc<Ctx>, id: PartitionId) -> bool {
    let store = Arc::clone(&ctx.store);
    let retention_ms = ctx.retention_ms;
    let read = tokio::task::spawn_blocking(move || {
        let expired = store.outbox_expire(id, retention_ms, MAX_EXPIRED_PER_SCAN)?;
        store.outbox_pending(id).map(|rows| (expired, rows))
    })
    .await;
    let Ok(Ok((expired, rows))) = read else {
        error!(partition = %id, "cannot scan the outbox");
        return true;
    };
    if expired > 0 {
        counter!("tidemark_outbox_expired_total").increment(expired as u64);
    }
    let mut more = expired >= MAX_EXPIRED_PER_SCAN;
    for (_, bytes) in rows {
        let row = match codec::decode::<OutboxRow>("outbox row", &bytes) {
            Ok(row) if row.state == RowState::Pending => row,
            Ok(_) => continue,
            Err(e) => {
                error!(partition = %id, error = %e, "unreadable outbox row");
                continue;
            }
        };
        let busy = ctx.in_flight.lock().map(|f| f.len() >= MAX_STARTED).unwrap_or(true);
        if busy {
            more = true;
            break;
        }
        start(ctx, id, row, true);
    }
    more
}

fn start(ctx: &Arc<Ctx>, id: PartitionId, row: OutboxRow, from_scan: bool) {
    let counted = if from_scan { Counted::count(&ctx.backlog, &row) } else { Counted::adopt(&ctx.backlog, &row) };
    {
        let Ok(mut f) = ctx.in_flight.lock() else { return };
        if f.contains_key(&row.key) {
            return;
        }
        if row.state == RowState::Pending {
            f.insert(row.key.clone(), row.committed_wall_ms);
        }
    }
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        let _counted = counted;
        if !from_scan {
            ctx.audit(&row, "created", None, None).await;
        }
        if row.state == RowState::Shadow {
            ctx.audit(&row, "shadow", None, None).await;
            return;
        }
        if from_scan && row.attempts > 0 {
            counter!("tidemark_dispatch_redeliveries_total").increment(1);
            // The log outlives the process: chaos counts these lines, including those of
            // processes killed before their metrics could be scraped.
            tracing::info!(key = %row.key, attempts = row.attempts, "{REDELIVERY_LOG}");
        }
        ctx.deliver(id, row).await;
    });
}

impl Ctx {
    async fn deliver(&self, id: PartitionId, mut row: OutboxRow) {
        let target = if row.mode == "act" { Target::Act } else { Target::Notify };
        let mut first = true;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            row.attempts += 1;
            if !self.persist(id, &row).await {
                break;
            }
            let now = chrono::Utc::now().timestamp_millis();
            if first && row.committed_wall_ms > 0 {
                record(Segment::CommitToDispatch, now - row.committed_wall_ms);
                first = false;
            }
            let started = Instant::now();
            let delivery = Delivery {
                key: row.key.clone(),
                target,
                body: row.payload.clone(),
                attempt: row.attempts - 1,
                source_append_ms: row.source_append_ms,
            };
            let outcome = self.dispatcher.attempt(&delivery).await;
            crate::telemetry::events::observe(LATENCY, Segment::DispatchToAck, started.elapsed().as_secs_f64());
            counter!(DISPATCH, "outcome" => outcome.label()).increment(1);
            match outcome {
                // Record the outcome before anything else: the time between the endpoint's
                // answer and this write is the only window in which a crash repeats a POST.
                Outcome::Delivered { status } => {
                    failpoint::hit("dispatch.after_ack_before_mark");
                    row.state = RowState::Delivered { status };
                    self.finish(id, &row).await;
                    self.audit(&row, "attempt", Some(status), Some("delivered".into())).await;
                    break;
                }
                Outcome::Conflict => {
                    failpoint::hit("dispatch.after_ack_before_mark");
                    row.state = RowState::Conflict;
                    self.finish(id, &row).await;
                    self.audit(&row, "attempt", Some(409), Some("conflict".into())).await;
                    break;
                }
                Outcome::PermanentFailure { status, body_snippet } => {
                    self.audit(&row, "attempt", Some(status), Some(format!("permanent failure: {body_snippet}"))).await;
                    row.state = RowState::Failed { status };
                    self.dead_letter(&row, status).await;
                    self.finish(id, &row).await;
                    break;
                }
                Outcome::Retry { reason, after } => {
                    self.audit(&row, "attempt", None, Some(format!("retry: {reason}"))).await;
                    // `after` is already the jittered, capped backoff for this attempt count.
                    tokio::time::sleep(after).await;
                }
            }
        }
        if let Ok(mut f) = self.in_flight.lock() {
            f.remove(&row.key);
        }
    }

    async fn finish(&self, id: PartitionId, row: &OutboxRow) {
        if self.persist(id, row).await {
            record(Segment::EndToEnd, chrono::Utc::now().timestamp_millis() - row.source_append_ms);
            tracing::debug!(key = %row.key, state = ?row.state, attempts = row.attempts, "action settled");
        }
    }

    /// Durable row update, off the async threads (it fsyncs).
    async fn persist(&self, id: PartitionId, row: &OutboxRow) -> bool {
        let store = Arc::clone(&self.store);
        let key = row.key.clone();
        let bytes = match codec::encode(row) {
            Ok(bytes) => bytes,
            Err(e) => {
                error!(key = %row.key, error = %e, "cannot encode the outbox row");
                return false;
            }
        };
        let index = row.index();
        match tokio::task::spawn_blocking(move || store.outbox_update(id, &key, &bytes, index)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                error!(key = %row.key, error = %e, "cannot update the outbox row");
                false
            }
            Err(e) => {
                error!(key = %row.key, error = %e, "outbox update task failed");
                false
            }
        }
    }

    async fn audit(&self, row: &OutboxRow, event: &str, status: Option<u16>, reason: Option<String>) {
        let rec = AuditRecord::of(row, event, status, reason);
        let value = serde_json::to_vec(&rec).unwrap_or_default();
        let record = FutureRecord::to(&self.audit_topic).key(row.key.as_str()).payload(&value);
        if let Err((e, _)) = self.audit.send(record, Duration::from_secs(30)).await {
            error!(key = %row.key, error = %e, "audit record not delivered");
        }
    }

    async fn dead_letter(&self, row: &OutboxRow, status: u16) {
        let headers = OwnedHeaders::new()
            .insert(Header { key: "tidemark.reason", value: Some("permanent_failure") })
            .insert(Header { key: "tidemark.status", value: Some(&status.to_string()) })
            .insert(Header { key: "tidemark.mode", value: Some(&row.mode) });
        let record =
            FutureRecord::to(&self.dead_letter_topic).key(row.key.as_str()).payload(&row.payload).headers(headers);
        if let Err((e, _)) = self.audit.send(record, Duration::from_secs(30)).await {
            error!(key = %row.key, error = %e, "action dead letter not delivered");
        }
    }
}

fn record(segment: Segment, ms: i64) {
    crate::telemetry::events::observe(LATENCY, segment, (ms.max(0) as f64) / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, created_at_ms: i64, state: RowState) -> OutboxRow {
        OutboxRow {
            key: key.into(),
            rule_id: "r".into(),
            rule_version: 1,
            mode: "act".into(),
            action: "notify".into(),
            sku: "SKU-1".into(),
            payload: Vec::new(),
            state,
            attempts: 1,
            created_at_ms,
            source_append_ms: 0,
            committed_wall_ms: 0,
        }
    }

    /// The shipped example with `rules` in place of its rules and both endpoints set.
    fn topology(rules: &str, endpoints_extra: &str) -> Topology {
        let example = tidemark_topology::config::EXAMPLE;
        let cut = example.find("# Anomaly rules.").unwrap_or(example.len());
        let text = example[..cut]
            .replace("# action_url = \"https://inventory.internal/actions\"", "action_url = \"http://127.0.0.1:9/a\"")
            .replace("# notify_url = \"https://alerts.internal/notify\"", "notify_url = \"http://127.0.0.1:9/n\"")
            .replace("allow_unsigned = false", endpoints_extra)
            + rules;
        tidemark_topology::config::parse(&text, "t.toml").unwrap()
    }

    fn rule(id: &str, mode: &str) -> String {
        format!("\n[[rules]]\nid = \"{id}\"\nversion = 1\nmode = \"{mode}\"\n")
    }

    #[test]
    fn act_and_notify_rules_refuse_to_start_without_a_signing_secret_unless_allowed() {
        let rules = rule("oversell", "act") + &rule("velocity_spike", "notify") + &rule("low_stock", "shadow");
        let err = dispatcher(&topology(&rules, ""), None, None).unwrap_err().to_string();
        assert!(err.contains("rules oversell (act), velocity_spike (notify) call webhooks"), "{err}");
        assert!(err.contains(SECRET_FILE_ENV) && err.contains("allow_unsigned = true"), "{err}");
        for mode in ["act", "notify"] {
            assert!(dispatcher(&topology(&rule("oversell", mode), ""), None, None).is_err(), "{mode}");
        }

        let allowed = topology(&rules, "allow_unsigned = true");
        assert!(dispatcher(&allowed, None, None).unwrap().signer_slot().current().is_none());
        let signed = dispatcher(&topology(&rules, ""), Some("a-secret".into()), None).unwrap();
        assert_eq!(signed.signer_slot().current().map(|s| s.secrets()), Some(1));
    }

    #[test]
    fn shadow_rules_need_no_signing_secret() {
        let rules = rule("oversell", "shadow") + &rule("low_stock", "shadow");
        assert!(dispatcher(&topology(&rules, ""), None, None).is_ok());
        assert!(dispatcher(&topology("", ""), None, None).is_ok());
    }

    #[test]
    fn tls_files_are_read_at_start_and_a_missing_one_is_named() {
        let t = topology("", "ca_file = \"/nonexistent/ca.pem\"");
        let err = dispatcher(&t, None, None).unwrap_err().to_string();
        assert!(err.contains("ca_file /nonexistent/ca.pem: cannot read"), "{err}");
    }

    #[test]
    fn a_row_is_indexed_pending_until_its_state_is_final_then_by_its_event_time() {
        use tidemark_state::OutboxIndex;
        assert_eq!(row("p", 5, RowState::Pending).index(), OutboxIndex::Pending);
        for state in [
            RowState::Delivered { status: 200 },
            RowState::Conflict,
            RowState::Failed { status: 422 },
            RowState::Shadow,
        ] {
            assert_eq!(row("f", 5, state).index(), OutboxIndex::Final { created_at_ms: 5 });
        }
    }
}
