//! The output producers. Outputs are produced before the state commit that covers them and
//! the commit waits for every acknowledgement: a crash in between replays the same inputs
//! from the old checkpoint and produces the same records again (upserts are idempotent).
//!
//! One producer per lane of topics ([`LANES`]), each with its own broker connections:
//! librdkafka sends one partition per produce request and a broker serves one request per
//! connection at a time, so a commit's outputs to 16 partitions of one broker took 16 round
//! trips in a row on one producer (measured: p50 37 ms of every commit at 20k/s, a third of
//! an action's latency); spread over lanes they go in parallel. A topic has one lane, so
//! each partition's records keep their order.
//!
//! Every record carries the number of the batch that produced it ([`Batch`]), and each lane
//! counts the records of a batch not yet acknowledged: the stream sends batch K's outputs
//! as soon as K is finished, while K−1 is still being written, and K−1's commit waits only
//! for the records of batches up to K−1 ([`OutputSink::flush_through`]).
//!
//! A commit waiting for acknowledgements sleeps until a lane's event queue gets a delivery
//! report ([`Doorbell`], librdkafka's queue event callback), then serves every report queued,
//! instead of waking every millisecond to serve one report per lane.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};
use tidemark_topology::config::{SinkFormat, Topology};
use tidemark_topology::connect_json::{self, RowSchema};
use tracing::warn;

use super::room::send_when_room;
use super::KafkaSettings;
use crate::engine::output::{truncate_to_fit, MAX_SIDE_OUTPUT_BYTES};
use crate::engine::pack::Pack;
use crate::engine::{OutputRecord, Sink};

/// A side output (dead letter, late record) to produce again: after a delivery failure or a
/// local refusal. Side outputs must never stop the process (SPEC §1.3): they are retried
/// until delivered, cut smaller each time the size was the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resend {
    topic: String,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Resend {
    fn of(topic: &str, r: OutputRecord) -> Resend {
        Resend {
            topic: topic.to_string(),
            key: r.key,
            value: r.value,
            headers: r.headers.into_iter().map(|(k, v)| (k.to_string(), v.into_bytes())).collect(),
        }
    }

    /// Halves what a record may carry when its size was refused; keeps it otherwise.
    fn shrink_if(&mut self, too_large: bool) {
        if too_large {
            let size = self.key.as_ref().map_or(0, Vec::len) + self.value.len();
            let limit = (size / 2).min(MAX_SIDE_OUTPUT_BYTES);
            truncate_to_fit(&mut self.key, &mut self.value, &mut self.headers, limit);
        }
    }
}

fn too_large(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge) | Some(RDKafkaErrorCode::InvalidMessageSize)
    )
}

/// Main outputs (dashboard, finance, repartition, combine) the producer or the broker
/// refused for good in one flush (ACL, deleted topic, record larger than the topic allows).
/// Their batch is not committed: the stream starts again from its checkpoint and produces
/// the same records again, in order ([`crate::stream::run`]); the process stays up.
#[derive(Debug)]
pub struct OutputsRefused {
    /// Records refused, per topic, with the last error seen for it.
    pub by_topic: BTreeMap<String, (u64, String)>,
}

impl std::fmt::Display for OutputsRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> =
            self.by_topic.iter().map(|(t, (n, e))| format!("{n} record(s) to {t} ({e})")).collect();
        write!(f, "outputs refused by the broker: {}; state not committed", parts.join(", "))
    }
}

impl std::error::Error for OutputsRefused {}

/// The number of the batch whose records are sent ([`OutputSink::send_all`]): increasing,
/// one per commit. Modes that flush everything at once ([`OutputSink::flush`]) may use 0.
pub type Batch = usize;

/// Batches whose records are counted apart. The stream has at most two batches' records in
/// flight (the one being committed and the next one, sent before it is durable); the ring
/// leaves room, and [`OutputSink::flush_through`] waits for every slot but the batches after
/// the one it commits.
const BATCH_SLOTS: usize = 8;

/// How long records may wait for their acknowledgement before the process says it is not
/// ready (a broker outage, a deleted topic the producer waits for).
pub const UNACKNOWLEDGED_NOT_READY: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct DeliveryContext {
    failed: AtomicU64,
    /// Main-output refusals since the last flush, per topic: (records, last error).
    refused: Mutex<BTreeMap<String, (u64, String)>>,
    /// Topics whose failed records are re-sent rather than failing the commit.
    side_topics: HashSet<String>,
    resend: Mutex<Vec<Resend>>,
    /// Records sent and not yet acknowledged (delivered or failed), per batch slot.
    pending: [AtomicU64; BATCH_SLOTS],
}

/// Rung by librdkafka when a lane's event queue goes from empty to non-empty (a delivery
/// report arrived), from librdkafka's own thread with the queue locked: it only counts and
/// wakes, and a waiter never calls librdkafka while it holds the lock (no lock-order cycle).
/// A waiter reads the count, serves the queues, then sleeps only if the count has not moved:
/// a report queued after its serving rings after that read, so no wake-up is lost.
#[derive(Default)]
struct Doorbell {
    rung: Mutex<u64>,
    ring: Condvar,
}

impl Doorbell {
    fn count(&self) -> u64 {
        *self.rung.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ring(&self) {
        let mut rung = self.rung.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *rung = rung.wrapping_add(1);
        self.ring.notify_all();
    }

    /// Sleeps until the bell rings after `seen` was read, or `most` has passed.
    fn wait_after(&self, seen: u64, most: Duration) {
        let rung = self.rung.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *rung == seen {
            drop(self.ring.wait_timeout(rung, most));
        }
    }
}

/// librdkafka's queue event callback ([`Lane::listen`]): `opaque` is the sink's [`Doorbell`].
unsafe extern "C" fn ring_doorbell(_: *mut rdkafka::bindings::rd_kafka_t, opaque: *mut std::ffi::c_void) {
    // SAFETY: the pointer is the sink's `Arc<Doorbell>`, which outlives the callback: the
    // sink's `Drop` disables the callback (under the queue's lock) before it lets go.
    let bell = unsafe { &*(opaque as *const Doorbell) };
    bell.ring();
}

/// The longest a waiting commit sleeps without a ring before it looks at the counts again.
const ACK_RECHECK: Duration = Duration::from_millis(10);

/// A lane's event queue is served at most this many events per look, so a flood of reports
/// cannot keep a commit from checking its counts.
const SERVE_AT_MOST: usize = 4096;

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Batch;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: Batch) {
        if let Err((e, msg)) = result {
            self.failed_delivery(e, msg);
        }
        // Counted last: a commit that sees its batch settled (reports may be served on the
        // stream thread too) also sees the refusals and the side outputs queued again above.
        self.pending[batch % BATCH_SLOTS].fetch_sub(1, Ordering::AcqRel);
    }
}

impl DeliveryContext {
    /// A record the broker or the producer did not deliver: a side output is queued to be
    /// produced again (and counted again when it is sent); a main output fails its batch.
    fn failed_delivery(&self, e: &KafkaError, msg: &rdkafka::message::BorrowedMessage<'_>) {
        if self.side_topics.contains(msg.topic()) {
            warn!(topic = msg.topic(), error = %e, "side output not delivered; producing it again");
            let mut r = Resend {
                topic: msg.topic().to_string(),
                key: msg.key().map(<[u8]>::to_vec),
                value: msg.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                headers: msg
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
                    .unwrap_or_default(),
            };
            r.shrink_if(too_large(e));
            crate::telemetry::outputs::side_output_retried(&r.topic);
            if let Ok(mut q) = self.resend.lock() {
                q.push(r);
                return;
            }
        }
        // Logged once per flush, by the stream (one line, not one per record).
        crate::telemetry::outputs::output_refused(msg.topic());
        self.refuse(msg.topic(), &e.to_string());
    }

    /// Whether records of `batch` or of the batches before it are still in flight.
    fn pending_through(&self, batch: Batch) -> u64 {
        // Every slot but the one after `batch`'s, which a later batch may use.
        (0..BATCH_SLOTS - 1)
            .map(|back| batch.wrapping_sub(back))
            .map(|b| self.pending[b % BATCH_SLOTS].load(Ordering::Acquire))
            .sum()
    }

    /// Records of any batch still in flight.
    fn pending_all(&self) -> u64 {
        self.pending.iter().map(|p| p.load(Ordering::Acquire)).sum()
    }

    fn refuse(&self, topic: &str, error: &str) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.refused.lock() {
            let entry = r.entry(topic.to_string()).or_insert((0, String::new()));
            entry.0 += 1;
            entry.1 = error.to_string();
        }
    }
}

/// Producers of an [`OutputSink`]: SKU repartition and side outputs; combine repartition;
/// dashboard and its combined rows; provisional finance and its combined rows.
pub const LANES: usize = 4;

/// The lane of a sink's topic (see [`LANES`]).
fn lane(sink: Sink) -> usize {
    match sink {
        Sink::Repartition | Sink::DeadLetter | Sink::Late => 0,
        Sink::Combine => 1,
        Sink::Dashboard | Sink::DashboardCombined => 2,
        Sink::Finance | Sink::FinanceCombined => 3,
    }
}

/// The records packed for SKU partition `p` as one record (see [`crate::engine::pack`]):
/// no key (the partition is explicit, and nothing reads a repartition record's key).
fn packed(p: i32, pack: &mut Pack) -> OutputRecord {
    OutputRecord {
        sink: Sink::Repartition,
        key: None,
        value: pack.take(),
        headers: Vec::new(),
        partition: Some(p),
        handed: None,
    }
}

/// Side outputs produced again go out on their lane.
const SIDE_LANE: usize = 0;

/// A lane's producer and a handle on its event queue (where delivery reports wait to be
/// served), which rings the sink's [`Doorbell`] when it gets an event.
struct Lane {
    /// Declared first: dropped before the producer (librdkafka wants every queue handle
    /// released before its client is destroyed).
    queue: MainQueue,
    producer: BaseProducer<DeliveryContext>,
}

/// A reference to a producer's main queue (`rd_kafka_queue_get_main`), released on drop.
struct MainQueue(*mut rdkafka::bindings::rd_kafka_queue_t);

// SAFETY: librdkafka's queue handles may be used from any thread; this one is only asked its
// length and given or relieved of a callback.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from rd_kafka_queue_get_main and is released once.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.0) }
    }
}

impl Lane {
    fn of(producer: BaseProducer<DeliveryContext>) -> anyhow::Result<Lane> {
        // SAFETY: the client pointer is valid while `producer` lives; the handle is released
        // by `MainQueue`'s drop, which the lane's field order puts before the producer's.
        let queue = unsafe { rdkafka::bindings::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        anyhow::ensure!(!queue.is_null(), "librdkafka gave no main queue for an output producer");
        Ok(Lane { producer, queue: MainQueue(queue) })
    }

    /// Rings `bell` whenever the lane's queue gets an event after being empty.
    fn listen(&self, bell: &Arc<Doorbell>) {
        // SAFETY: the opaque pointer stays valid until `deafen` (see `ring_doorbell`).
        unsafe {
            rdkafka::bindings::rd_kafka_queue_cb_event_enable(
                self.queue.0,
                Some(ring_doorbell),
                Arc::as_ptr(bell) as *mut std::ffi::c_void,
            )
        }
    }

    /// Stops ringing; returns once no callback runs (librdkafka swaps it under the queue's lock).
    fn deafen(&self) {
        // SAFETY: a null callback disables the queue event.
        unsafe { rdkafka::bindings::rd_kafka_queue_cb_event_enable(self.queue.0, None, std::ptr::null_mut()) }
    }

    /// Serves the delivery reports queued (each `poll` serves one event in rdkafka 0.39);
    /// false when [`SERVE_AT_MOST`] stopped it with events left (which will not ring again).
    fn serve(&self) -> bool {
        for _ in 0..SERVE_AT_MOST {
            // SAFETY: the handle is valid while the lane lives.
            if unsafe { rdkafka::bindings::rd_kafka_queue_length(self.queue.0) } == 0 {
                return true;
            }
            self.producer.poll(Duration::ZERO);
        }
        false
    }
}

pub struct OutputSink {
    lanes: Vec<Lane>,
    /// Rung by the lanes' queues; outlives them ([`Drop`]).
    bell: Arc<Doorbell>,
    /// Told when side outputs are refused and produced again, and when they went through.
    progress: Option<std::sync::Arc<crate::telemetry::Progress>>,
    dashboard: String,
    finance: String,
    dead_letter: String,
    late: String,
    repartition: String,
    combine: String,
    dashboard_combined: String,
    finance_combined: String,
    /// The Connect schema of each combined sink written as `connect-json`.
    dashboard_combined_connect: Option<RowSchema>,
    finance_combined_connect: Option<RowSchema>,
    /// SKU repartition records go out packed ([`crate::engine::pack`]); off only while a
    /// rolling upgrade from a version that cannot read packs is under way.
    packing: bool,
}

/// The schema a combined sink's rows are wrapped in, when its format is `connect-json`.
fn connect_schema(format: SinkFormat, schema: RowSchema) -> Option<RowSchema> {
    (format == SinkFormat::ConnectJson).then_some(schema)
}

impl OutputSink {
    pub fn new(settings: &KafkaSettings, t: &Topology) -> anyhow::Result<Self> {
        let side_topics: HashSet<String> = [t.dead_letter.topic.clone(), t.late.topic.clone()].into_iter().collect();
        let bell = Arc::new(Doorbell::default());
        let producers = (0..LANES)
            .map(|_| {
                settings
                    .client_config()
                    .set("enable.idempotence", "true")
                    .set("acks", "all")
                    // The commit flushes at once (its own loop below, not librdkafka's flush):
                    // a batch's records are queued together, so lingering only delays it.
                    .set("linger.ms", "0")
                    .set("compression.type", "lz4")
                    // No delivery deadline: a broker outage of any length (SPEC §6 sets 10
                    // minutes) holds the commit, which waits (reporting, alive) until the
                    // broker is back, instead of failing the records, the commit and the
                    // process. The idempotent producer keeps their order through its retries.
                    .set("message.timeout.ms", "0")
                    .set("queue.buffering.max.messages", "1000000")
                    .create_with_context(DeliveryContext {
                        side_topics: side_topics.clone(),
                        ..DeliveryContext::default()
                    })
            })
            .collect::<Result<Vec<BaseProducer<DeliveryContext>>, _>>()?;
        let lanes = producers.into_iter().map(Lane::of).collect::<anyhow::Result<Vec<Lane>>>()?;
        for lane in &lanes {
            lane.listen(&bell);
        }
        for topic in [&t.dead_letter.topic, &t.late.topic] {
            crate::telemetry::outputs::side_output_registered(topic);
        }
        for topic in [
            &t.dashboard.topic,
            &t.finance_provisional.topic,
            &t.sku_repartition.topic,
            &t.combine_repartition.topic,
            &t.dashboard_combined.topic,
            &t.finance_provisional_combined.topic,
        ] {
            crate::telemetry::outputs::output_registered(topic);
        }
        Ok(OutputSink {
            lanes,
            bell,
            progress: None,
            dashboard: t.dashboard.topic.clone(),
            finance: t.finance_provisional.topic.clone(),
            dead_letter: t.dead_letter.topic.clone(),
            late: t.late.topic.clone(),
            repartition: t.sku_repartition.topic.clone(),
            combine: t.combine_repartition.topic.clone(),
            dashboard_combined: t.dashboard_combined.topic.clone(),
            finance_combined: t.finance_provisional_combined.topic.clone(),
            dashboard_combined_connect: connect_schema(t.dashboard_combined_format, connect_json::DASHBOARD_COMBINED),
            finance_combined_connect: connect_schema(
                t.finance_provisional_combined_format,
                connect_json::FINANCE_COMBINED,
            ),
            packing: true,
        })
    }

    /// Side outputs the broker refuses make the process not ready (`/readyz`) until they
    /// are written: the commit waits for them.
    pub fn reporting_to(mut self, progress: std::sync::Arc<crate::telemetry::Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Whether SKU repartition records go out packed (the default; see
    /// [`crate::engine::pack`]): `false` writes one log record per repartition record, which
    /// versions before packs read (`tidemark run --repartition-packing off`, for the first
    /// step of a rolling upgrade from such a version).
    pub fn packing(mut self, on: bool) -> Self {
        self.packing = on;
        self
    }

    /// Sends dashboard and provisional finance records to other topics than the topology's
    /// (micro-batch mode writing beside a running stream).
    pub fn redirect(mut self, dashboard: Option<&str>, finance: Option<&str>) -> Self {
        if let Some(d) = dashboard {
            self.dashboard = d.to_string();
        }
        if let Some(f) = finance {
            self.finance = f.to_string();
        }
        self
    }

    fn topic(&self, sink: Sink) -> &str {
        match sink {
            Sink::Dashboard => &self.dashboard,
            Sink::Finance => &self.finance,
            Sink::DeadLetter => &self.dead_letter,
            Sink::Late => &self.late,
            Sink::Repartition => &self.repartition,
            Sink::Combine => &self.combine,
            Sink::DashboardCombined => &self.dashboard_combined,
            Sink::FinanceCombined => &self.finance_combined,
        }
    }

    /// Rewrites a combined row into Connect's envelope (key and value) when its sink is
    /// written as `connect-json`: here, as it is produced, so the tasks' records are the same
    /// whatever the format.
    fn encode(&self, r: &mut OutputRecord) -> anyhow::Result<()> {
        let schema = match r.sink {
            Sink::DashboardCombined => self.dashboard_combined_connect,
            Sink::FinanceCombined => self.finance_combined_connect,
            _ => None,
        };
        if let Some(schema) = schema {
            let e = schema.wrap(&r.value).map_err(|e| anyhow::anyhow!("{}: {e}", self.topic(r.sink)))?;
            r.key = Some(e.key);
            r.value = e.value;
        }
        Ok(())
    }

    /// Queues records for delivery, waiting for room when the local queue is full. A side
    /// output larger than [`MAX_SIDE_OUTPUT_BYTES`] goes out truncated, with its original
    /// size and SHA-256 in headers; one the producer refuses is queued to be sent again.
    /// Combined rows of a `connect-json` sink go out in Connect's envelope ([`connect_json`]).
    pub fn send_all(&self, records: &mut Vec<OutputRecord>, batch: Batch) -> anyhow::Result<()> {
        // SKU repartition records, packed per partition in their order (see `engine::pack`).
        let mut packs: BTreeMap<i32, Pack> = BTreeMap::new();
        for r in records.drain(..) {
            let (Sink::Repartition, Some(p), true) = (r.sink, r.partition, self.packing) else {
                self.send(r, batch)?;
                continue;
            };
            let pack = packs.entry(p).or_default();
            if pack.full_for(r.value.len()) {
                self.send(packed(p, pack), batch)?;
            }
            pack.push(&r.value);
        }
        for (p, pack) in &mut packs {
            self.send(packed(*p, pack), batch)?;
        }
        for lane in &self.lanes {
            lane.producer.poll(Duration::ZERO);
        }
        Ok(())
    }

    /// Queues one record (see [`OutputSink::send_all`]).
    fn send(&self, mut r: OutputRecord, batch: Batch) -> anyhow::Result<()> {
        self.encode(&mut r)?;
        let side = matches!(r.sink, Sink::DeadLetter | Sink::Late);
        let oversized = r.key.as_ref().map_or(0, Vec::len) + r.value.len() > MAX_SIDE_OUTPUT_BYTES;
        if side && oversized {
            let mut resend = Resend::of(self.topic(r.sink), r);
            truncate_to_fit(&mut resend.key, &mut resend.value, &mut resend.headers, MAX_SIDE_OUTPUT_BYTES);
            crate::telemetry::outputs::side_output_truncated(&resend.topic);
            self.send_side(resend, batch);
            return Ok(());
        }
        let mut record: BaseRecord<'_, [u8], [u8], Batch> =
            BaseRecord::with_opaque_to(self.topic(r.sink), batch).payload(&r.value[..]);
        // Only side outputs carry headers: no header list for the rest (librdkafka
        // allocates one even when it stays empty; the record on the wire is the same).
        if !r.headers.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            record = record.headers(headers);
        }
        if let Some(k) = &r.key {
            record = record.key(&k[..]);
        }
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        let producer = &self.lanes[lane(r.sink)].producer;
        let pending = &producer.context().pending[batch % BATCH_SLOTS];
        pending.fetch_add(1, Ordering::AcqRel);
        match send_when_room(producer, record) {
            Ok(()) => {}
            Err(e) if side => {
                pending.fetch_sub(1, Ordering::AcqRel);
                let mut resend = Resend::of(self.topic(r.sink), r.clone());
                warn!(topic = %resend.topic, error = %e, "side output refused by the producer; producing it again");
                resend.shrink_if(too_large(&e));
                self.send_side(resend, batch);
            }
            Err(e) => {
                // Refused locally (larger than message.max.bytes, unknown partition):
                // the batch is not committed, as when the broker refuses it.
                pending.fetch_sub(1, Ordering::AcqRel);
                let topic = self.topic(r.sink);
                crate::telemetry::outputs::output_refused(topic);
                producer.context().refuse(topic, &e.to_string());
            }
        }
        Ok(())
    }

    /// Queues one side output; a local refusal (size, queue) goes to the resend list, which
    /// [`OutputSink::flush`] works off, so this never fails.
    fn send_side(&self, mut r: Resend, batch: Batch) {
        let producer = &self.lanes[SIDE_LANE].producer;
        let pending = &producer.context().pending[batch % BATCH_SLOTS];
        loop {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v) });
            }
            let mut record: BaseRecord<'_, [u8], [u8], Batch> =
                BaseRecord::with_opaque_to(&r.topic, batch).payload(&r.value[..]).headers(headers);
            if let Some(k) = &r.key {
                record = record.key(&k[..]);
            }
            pending.fetch_add(1, Ordering::AcqRel);
            match send_when_room(producer, record) {
                Ok(()) => return,
                Err(e) => {
                    pending.fetch_sub(1, Ordering::AcqRel);
                    let size_refused = too_large(&e);
                    crate::telemetry::outputs::side_output_retried(&r.topic);
                    r.shrink_if(size_refused);
                    if size_refused {
                        continue;
                    }
                    warn!(topic = %r.topic, error = %e, "side output refused; will produce it again");
                    if let Ok(mut q) = producer.context().resend.lock() {
                        q.push(r);
                    }
                    return;
                }
            }
        }
    }

    /// Waits until every queued record is acknowledged. An error means some record was not
    /// delivered: the caller must not commit the state that produced it. A main output
    /// refused for good gives [`OutputsRefused`]; side outputs are produced again until
    /// written. Records unacknowledged for [`UNACKNOWLEDGED_NOT_READY`] (broker down, topic
    /// deleted) make the process not ready while it waits.
    /// `alive` is called while waiting, so liveness reflects a loop that waits, not one that hangs.
    ///
    /// Not `Producer::flush`: rdkafka 0.39's `BaseProducer::poll` always blocks for its whole
    /// timeout, so its flush returns in steps of 100 ms (measured: every commit spent exactly
    /// 100 ms there, even for 16 records). This wait serves every report queued, then
    /// sleeps until a lane's queue gets another ([`Doorbell`]).
    pub fn flush(&self, alive: &dyn Fn()) -> anyhow::Result<()> {
        self.wait_for(None, alive)
    }

    /// [`OutputSink::flush`] for the records of `batch` and the batches before it: records
    /// of later batches may still be in flight (they are sent before `batch` is durable).
    /// Side outputs produced again go out as part of `batch`. A refusal seen meanwhile fails
    /// this batch's commit even if a later batch's record was refused: the stream restarts
    /// from its checkpoint either way, and produces the same records again.
    pub fn flush_through(&self, batch: Batch, alive: &dyn Fn()) -> anyhow::Result<()> {
        self.wait_for(Some(batch), alive)
    }

    fn wait_for(&self, through: Option<Batch>, alive: &dyn Fn()) -> anyhow::Result<()> {
        let mut since_warning = Instant::now();
        let (waiting_since, mut waiting_reported) = (Instant::now(), false);
        let mut backoff = Duration::from_millis(50);
        loop {
            let seen = self.bell.count();
            // Every lane is served, even after one was left with events.
            let mut emptied = true;
            for lane in &self.lanes {
                emptied &= lane.serve();
            }
            let in_flight = self.in_flight(through);
            if in_flight == 0 {
                let resend: Vec<Resend> = self
                    .lanes
                    .iter()
                    .flat_map(|l| {
                        l.producer.context().resend.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
                    })
                    .collect();
                if resend.is_empty() {
                    break;
                }
                // Side outputs that failed: produce them again, with growing pauses, for as
                // long as it takes. The commit waits (nothing is lost), the process stays up
                // and says it is not ready.
                if let Some(p) = &self.progress {
                    let topics: std::collections::BTreeSet<&str> = resend.iter().map(|r| r.topic.as_str()).collect();
                    let topics: Vec<&str> = topics.into_iter().collect();
                    p.outputs_blocked(Some(format!(
                        "{} side output record(s) to {} refused by the broker, produced again until written (see the log)",
                        resend.len(),
                        topics.join(", ")
                    )));
                }
                alive();
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                for r in resend {
                    self.send_side(r, through.unwrap_or(0));
                }
                continue;
            }
            if since_warning.elapsed() >= Duration::from_secs(10) {
                since_warning = Instant::now();
                alive();
                tracing::warn!(in_flight, "outputs not yet acknowledged; waiting");
            }
            if !waiting_reported && waiting_since.elapsed() >= UNACKNOWLEDGED_NOT_READY {
                waiting_reported = true;
                if let Some(p) = &self.progress {
                    p.outputs_blocked(Some(format!(
                        "{in_flight} output record(s) not acknowledged by the broker for {} s; commits wait (see the log)",
                        UNACKNOWLEDGED_NOT_READY.as_secs()
                    )));
                }
            }
            // A queue left non-empty rings no more: look again at once.
            if emptied {
                self.bell.wait_after(seen, ACK_RECHECK);
            }
        }
        let failed: u64 = self.lanes.iter().map(|l| l.producer.context().failed.swap(0, Ordering::Relaxed)).sum();
        if failed > 0 {
            let mut by_topic: BTreeMap<String, (u64, String)> = BTreeMap::new();
            for l in &self.lanes {
                let refused =
                    l.producer.context().refused.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
                for (topic, (n, e)) in refused {
                    let entry = by_topic.entry(topic).or_insert((0, String::new()));
                    entry.0 += n;
                    entry.1 = e;
                }
            }
            if by_topic.is_empty() {
                anyhow::bail!("{failed} output record(s) were not delivered; state not committed");
            }
            // Stays not ready: the stream reports the restart and clears this once written.
            return Err(OutputsRefused { by_topic }.into());
        }
        if let Some(p) = &self.progress {
            p.outputs_blocked(None);
        }
        Ok(())
    }

    /// Records of `through` and the batches before it (every batch: `None`) not yet
    /// acknowledged, over the lanes.
    fn in_flight(&self, through: Option<Batch>) -> u64 {
        self.lanes
            .iter()
            .map(|l| match through {
                Some(batch) => l.producer.context().pending_through(batch),
                None => l.producer.context().pending_all(),
            })
            .sum()
    }
}

impl Drop for OutputSink {
    /// Stops the queues' callbacks before the doorbell they ring goes; the producers then
    /// purge what is left as they are dropped.
    fn drop(&mut self) {
        for lane in &self.lanes {
            lane.deafen();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_between_reading_the_count_and_waiting_is_not_lost() {
        let bell = Doorbell::default();
        let seen = bell.count();
        bell.ring();
        // Would sleep an hour if the ring were lost.
        bell.wait_after(seen, Duration::from_secs(3600));
        assert_ne!(bell.count(), seen);
    }

    #[test]
    fn a_ring_from_another_thread_wakes_the_waiter() {
        let bell = Arc::new(Doorbell::default());
        let seen = bell.count();
        let ringer = {
            let bell = Arc::clone(&bell);
            std::thread::spawn(move || bell.ring())
        };
        bell.wait_after(seen, Duration::from_secs(3600));
        ringer.join().expect("the ringer ends");
        assert_eq!(bell.count(), seen.wrapping_add(1));
    }
}
