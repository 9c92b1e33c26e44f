//! Fences for idle upstream partitions (`internal.idle_promise = "fence"`; SPEC §2, §7).
//!
//! An upstream partition (orders or inventory) whose task has not moved for `fence_every`
//! gets a fence record ([`tidemark_topology::fence`]) appended to it. When its task reads the
//! fence back, the fence's broker append time joins the partition's effective append time, and
//! the next progress mark promises it: exact, whatever the clocks or the replication do
//! (everything later in the partition has a higher offset and an effective append time at
//! least as high). No clock promise is made in this mode.
//!
//! At most one fence per partition is under way: the next is sent once the task has moved
//! (it read the fence, or records came) and been still for `fence_every` again, or after
//! [`RESEND_AFTER`] without a move (a fence lost with a broker, or a consumer stalled). The
//! fencer runs at each commit. `fence_every` applies while there is demand: a SKU task of
//! this process holds records for the merge, or an input record arrived within
//! [`DEMAND_WINDOW`]. Without it (a quiet topology, or a process that owns only idle
//! partitions while the SKU tasks that wait are elsewhere) partitions are fenced every
//! [`QUIET_EVERY`]: a quiet topology costs one small record per input partition per second,
//! and a merge waiting on another process is held at most about that long.
//! Fences are sent without a transaction (acks=all); one that fails is logged and counted
//! (`tidemark_fences_total{outcome="failed"}`), and the partition is fenced again later.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use tidemark_state::PartitionId;
use tidemark_topology::fence;
use tracing::warn;

use crate::kafka::KafkaSettings;

/// How long a fence may stay unread before the partition is fenced again.
pub const RESEND_AFTER: Duration = Duration::from_secs(2);
/// How long after the last input record the process still fences at `fence_every`.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(5);
/// How often a still partition is fenced without demand.
pub const QUIET_EVERY: Duration = Duration::from_secs(1);
/// Failed fences are logged at most this often (they are counted every time).
const WARN_EVERY: Duration = Duration::from_secs(60);

pub struct Fencer {
    producer: BaseProducer<FenceContext>,
    every: Duration,
    partitions: BTreeMap<PartitionId, Still>,
}

/// What the fencer knows of one partition.
struct Still {
    /// The task's next offset when last seen, and since when it has not moved.
    next_offset: i64,
    since: Instant,
    /// When the fence under way was sent.
    sent: Option<Instant>,
}

impl Fencer {
    pub fn new(settings: &KafkaSettings, every: Duration) -> anyhow::Result<Self> {
        let producer = settings
            .client_config()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            // A fence older than this promises nothing new: drop it, the next one follows.
            .set("message.timeout.ms", "10000")
            .create_with_context(FenceContext::default())?;
        Ok(Fencer { producer, every, partitions: BTreeMap::new() })
    }

    /// Fences the partitions of `upstreams` (`(partition, topic, task's next offset)`) that
    /// have been still for `fence_every` (with `demand`; else [`QUIET_EVERY`]); forgets the
    /// partitions not listed (no longer owned).
    pub fn tick<'a>(
        &mut self,
        upstreams: impl Iterator<Item = (PartitionId, &'a str, i64)>,
        demand: bool,
        now: Instant,
    ) {
        let every = if demand { self.every } else { QUIET_EVERY.max(self.every) };
        let mut listed = Vec::new();
        for (id, topic, next_offset) in upstreams {
            listed.push(id);
            let still = self.partitions.entry(id).or_insert(Still { next_offset, since: now, sent: None });
            if still.next_offset != next_offset {
                *still = Still { next_offset, since: now, sent: None };
            }
            let due = match still.sent {
                None => now.saturating_duration_since(still.since) >= every,
                Some(sent) => now.saturating_duration_since(sent) >= RESEND_AFTER,
            };
            if due {
                still.sent = Some(now);
                self.send(topic, id.partition);
            }
        }
        self.partitions.retain(|id, _| listed.contains(id));
        self.producer.poll(Duration::ZERO);
    }

    fn send(&self, topic: &str, partition: i32) {
        let headers = OwnedHeaders::new().insert(Header { key: fence::HEADER, value: Some(b"1".as_slice()) });
        let record = BaseRecord::to(topic).partition(partition).key(fence::KEY).payload(fence::VALUE).headers(headers);
        if let Err((e, _)) = self.producer.send(record) {
            self.producer.context().failed(topic, partition, &e.to_string());
        }
    }
}

/// Counts every fence's outcome; logs failures (at most once per [`WARN_EVERY`]).
#[derive(Default)]
struct FenceContext {
    warned: std::sync::Mutex<Option<Instant>>,
}

impl FenceContext {
    fn failed(&self, topic: &str, partition: i32, error: &str) {
        crate::telemetry::stream::fence(false);
        let Ok(mut warned) = self.warned.lock() else { return };
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *warned = Some(Instant::now());
            warn!(
                topic,
                partition,
                error,
                "cannot append a fence to an idle input partition (does tidemark have write access to the input topics?); its progress promise waits for the next fence or record"
            );
        }
    }
}

impl ClientContext for FenceContext {}

impl ProducerContext for FenceContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => crate::telemetry::stream::fence(true),
            Err((e, msg)) => {
                use rdkafka::Message as _;
                self.failed(msg.topic(), msg.partition(), &e.to_string());
            }
        }
    }
}
