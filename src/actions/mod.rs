//! The action runtime: takes committed outbox rows and sees each to a final state.
//!
//! For every row (a `Pending` one handed over after its commit, or found by an outbox scan
//! at start, on assignment, or when the row channel was full):
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

//!
//! Module map:
//! - [`backlog`]: [`Backlog`], rows handed over or started and not yet settled.
//! - [`row_channel`]: [`RowSender`], the stream's end of the row channel.
//! - [`scan`]: outbox scans (pending rows re-queued, expired final rows deleted).
//! - [`deliver`]: one row from start to its durable outcome.
//! - [`gate`]: [`Gate`], the SKU partitions still owned and the attempts under way in each;
//!   a revoked partition is handed over only once its attempts recorded their outcome.
//! - [`audit`]: [`AuditRecord`] and the audit topic.
//! - [`dead_letter`]: the action dead-letter topic.
//! - [`settled`]: outcomes read from the audit topic; rows with those keys are recorded as
//!   settled, not sent again.
//! - [`recall`]: [`Recall`], the audit read when SKU partitions are assigned, whatever
//!   state they resume from, before any of their rows is dispatched.
//! - [`standby`]: [`StandbyRows`], rows derived by standby tasks, held until the audit topic
//!   shows their active owner settled them.

mod audit;
mod backlog;
mod dead_letter;
mod deliver;
#[cfg(test)]
mod deliver_tests;
mod gate;
mod recall;
mod row_channel;
mod scan;
mod settled;
mod standby;

pub use audit::AuditRecord;
pub use backlog::Backlog;
use backlog::Counted;
pub use gate::Gate;
pub use recall::{recall_since, Recall, CLOCK_MARGIN_MS};
pub use row_channel::{RowNotSent, RowSender};
pub use scan::pending_in_outbox;
pub use settled::{audit_outcome_in, outcome_in, outcome_of, AuditOutcome, Settled};
pub use standby::StandbyRows;

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::producer::FutureProducer;
use tidemark_state::{codec, PartitionId, Store};
use tidemark_topology::config::Topology;
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::dispatch::signer::{SECRET_ENV, SECRET_FILE_ENV};
use crate::dispatch::{Dispatcher, Endpoints, RetryPolicy, SecretChange, SecretWatch, Signer, Target, TlsConfig};
use crate::engine::outbox::{OutboxRow, RowState};
use crate::kafka::KafkaSettings;
use crate::telemetry::events::{Segment, LATENCY};

/// Rows a scan hands to delivery tasks while earlier ones are still in flight; the rest
/// wait for the next scan (each task holds its row and payload).
const MAX_STARTED: usize = 2048;
/// How often every owned partition's outbox is swept for expired rows.
const SWEEP_EVERY: u32 = 600;
/// Ticks (seconds) between two reads of the webhook secret file.
const SECRET_CHECK_EVERY: u32 = 5;

/// The message logged once per redelivery, next to `tidemark_dispatch_redeliveries_total`.
pub const REDELIVERY_LOG: &str = "action redelivered after restart";
/// Logged (with `key`) right before each POST, after its attempt count is stored.
pub const POSTING_LOG: &str = "action posting";
/// Logged (with `key`) once a final outcome (delivered, conflict, failed) is stored in the
/// outbox and on the audit topic.
pub const STORED_LOG: &str = "action outcome stored";

/// SKU partitions this process owns, kept by the stream thread.
pub type Owned = Arc<Mutex<BTreeSet<i32>>>;

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
    settled: Arc<Settled>,
    gate: Arc<Gate>,
}

pub struct ActionRuntime {
    pub rows: RowSender,
    pub owned: Owned,
    pub backlog: Arc<Backlog>,
    /// Filled by the audit reads on assignment ([`Recall`]) and the standby audit tail.
    pub settled: Arc<Settled>,
    /// Closed for a SKU partition by the stream thread when a rebalance revokes it.
    pub gate: Arc<Gate>,
}

/// Starts the runtime on `rt`; returns the row channel for the stream thread.
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
        // No delivery deadline, as the outputs: an outcome's audit record waits out a broker
        // outage instead of being lost (standbys and later owners learn outcomes from it).
        .set("message.timeout.ms", "0")
        .create()?;
    if !store.outbox_indexed()? {
        // A store written before the outbox indexes: one scan builds them.
        let built = store
            .rebuild_outbox_index(|bytes| codec::decode::<OutboxRow>("outbox row", bytes).ok().map(|r| r.index()))?;
        tracing::info!(rows = built, "outbox indexes built");
    }
    let owned: Owned = Arc::default();
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
        // Kept as long as a replay or a standby may still re-derive their rows.
        settled: Arc::new(Settled::keeping_for(Duration::from_millis(
            u64::try_from(t.dedup_retention_ms).unwrap_or(0).max(3_600_000),
        ))),
        gate: Arc::new(Gate::new(Arc::clone(&owned))),
    });
    let (settled, gate) = (Arc::clone(&ctx.settled), Arc::clone(&ctx.gate));
    let (tx, mut rx) = mpsc::channel::<(PartitionId, OutboxRow)>(4096);
    let backlog = Arc::clone(&ctx.backlog);
    let scan_owned = Arc::clone(&owned);
    let wake = Arc::new(tokio::sync::Notify::new());
    let woken = Arc::clone(&wake);
    rt.spawn(async move {
        let mut scanned: BTreeSet<i32> = BTreeSet::new();
        let mut unfinished: BTreeSet<i32> = BTreeSet::new();
        // Per partition: where its next scan goes on (see `scan::scan`).
        let mut cursors: HashMap<i32, Option<Vec<u8>>> = HashMap::new();
        let mut ticks = 0u32;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            // Scans run every second, and at once when the stream asks (a SKU partition just
            // started: the rows its last owner left pending go out without waiting a tick).
            let ticked = tokio::select! {
                got = rx.recv() => match got {
                    Some((id, row)) if row.state == RowState::Pending && deliver::at_capacity(&ctx) => {
                        // Durable and pending: a scan starts it once there is room. The number
                        // of delivery tasks (and rows in memory) stays at most MAX_STARTED,
                        // whatever the backlog of an endpoint that does not answer.
                        drop(Counted::adopt(&ctx.backlog, &row));
                        unfinished.insert(id.partition);
                        crate::telemetry::actions::outbox_deferred();
                        continue;
                    }
                    Some((id, row)) => {
                        deliver::start(&ctx, id, row, false);
                        continue;
                    }
                    None => break,
                },
                _ = tick.tick() => true,
                _ = woken.notified() => false,
            };
            let now_owned = scan_owned.lock().map(|o| o.clone()).unwrap_or_default();
            if ticked {
                ticks = ticks.wrapping_add(1);
            }
            let full_rescan =
                stats.outbox_rescan.swap(false, Ordering::Relaxed) || (ticked && ticks.is_multiple_of(SWEEP_EVERY));
            let due: Vec<i32> = now_owned
                .iter()
                .filter(|p| full_rescan || !scanned.contains(p) || unfinished.contains(p))
                .copied()
                .collect();
            cursors.retain(|p, _| now_owned.contains(p));
            for p in &due {
                let more = scan::scan(&ctx, PartitionId::sku(*p), cursors.entry(*p).or_default()).await;
                if more {
                    unfinished.insert(*p);
                } else {
                    unfinished.remove(p);
                }
            }
            scanned = now_owned;
            publish_gauges(&ctx);
            if let Some(watch) = secret_watch.as_mut().filter(|_| ticked && ticks.is_multiple_of(SECRET_CHECK_EVERY)) {
                match watch.check().await {
                    Ok(SecretChange::Unchanged) => {}
                    Ok(SecretChange::Reloaded { secrets }) => info!(secrets, "webhook signing secret reloaded"),
                    Err(e) => {
                        error!(error = %e, "webhook signing secret not reloaded; signing with the previous one")
                    }
                }
            }
        }
    });
    Ok(ActionRuntime { rows: RowSender { tx, backlog: Arc::clone(&backlog), wake }, owned, backlog, settled, gate })
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
    let sending: Vec<String> =
        t.rules.iter().filter_map(|r| Target::of(r.mode).map(|target| format!("{} ({target})", r.id))).collect();
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
        let oldest = f.values().copied().min().map_or(0.0, |t| ((now - t).max(0) as f64) / 1000.0);
        crate::telemetry::actions::outbox_pending(f.len(), oldest);
    }
}

fn record(segment: Segment, ms: i64) {
    crate::telemetry::events::observe(LATENCY, segment, (ms.max(0) as f64) / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::outbox::RowState;

    fn row(key: &str, created_at_ms: i64, state: RowState) -> OutboxRow {
        OutboxRow { created_at_ms, state, attempts: 1, ..OutboxRow::sample(key) }
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
