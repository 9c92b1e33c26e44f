//! The audit topic, read as it is written: every final outcome goes to [`StandbyRows`].
//!
//! Started by the standby thread once it knows where its standby SKU tasks resume: from a
//! minute before the oldest of their checkpoints' append times (the rows they are about to
//! re-derive were settled after that), or from the topic's start for a partition with no
//! state here. One consumer without a group, on its own thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{info, warn};

use super::StandbyRows;
use crate::actions::outcome_in;
use crate::kafka::KafkaSettings;

/// The tail starts this long before the oldest standby checkpoint: clocks of the
/// dispatcher that audited and of the broker that stamped the input may disagree.
pub const MARGIN_MS: i64 = 60_000;

type Tail = BaseConsumer;

pub struct AuditTail {
    settings: KafkaSettings,
    topic: String,
    rows: Arc<StandbyRows>,
    consumer: Mutex<Option<Arc<Tail>>>,
    /// Next offset to read, per audit partition.
    positions: Arc<Mutex<HashMap<i32, i64>>>,
}

impl AuditTail {
    pub fn new(settings: KafkaSettings, topic: String, rows: Arc<StandbyRows>) -> Arc<Self> {
        Arc::new(AuditTail { settings, topic, rows, consumer: Mutex::default(), positions: Arc::default() })
    }

    /// Starts reading at `since_ms` (append time; `None`: the topic's start). Once only.
    pub fn start(&self, since_ms: Option<i64>, stop: Arc<AtomicBool>) -> anyhow::Result<Option<JoinHandle<()>>> {
        let Ok(mut slot) = self.consumer.lock() else { return Ok(None) };
        if slot.is_some() {
            return Ok(None);
        }
        let consumer: Tail = self
            .settings
            .client_config()
            // librdkafka wants a group id even for manual assignment; this one never commits.
            .set("group.id", "tidemark-audit-tail")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("fetch.wait.max.ms", "50")
            .create()
            .context("creating the audit tail consumer")?;
        let timeout = Duration::from_secs(10);
        let md = consumer.fetch_metadata(Some(&self.topic), timeout).context("reading the audit topic's metadata")?;
        let partitions: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == self.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        anyhow::ensure!(!partitions.is_empty(), "the audit topic {} has no partitions", self.topic);
        let mut wanted = TopicPartitionList::new();
        for p in &partitions {
            wanted.add_partition_offset(&self.topic, *p, Offset::Offset(since_ms.unwrap_or(0)))?;
        }
        let found = match since_ms {
            Some(_) => consumer.offsets_for_times(wanted, timeout).context("finding the audit tail's start")?,
            None => wanted,
        };
        let mut assignment = TopicPartitionList::new();
        let mut starts = HashMap::new();
        for p in &partitions {
            let (low, high) = consumer.fetch_watermarks(&self.topic, *p, timeout)?;
            let start = match (since_ms, found.find_partition(&self.topic, *p).map(|e| e.offset())) {
                (None, _) => low,
                (Some(_), Some(Offset::Offset(o))) => o.max(low),
                _ => high,
            };
            starts.insert(*p, start);
            assignment.add_partition_offset(&self.topic, *p, Offset::Offset(start))?;
        }
        consumer.assign(&assignment).context("assigning the audit topic")?;
        if let Ok(mut pos) = self.positions.lock() {
            *pos = starts;
        }
        info!(topic = %self.topic, since_ms = ?since_ms, partitions = partitions.len(), "audit tail started");
        let consumer = Arc::new(consumer);
        *slot = Some(Arc::clone(&consumer));
        let (rows, positions) = (Arc::clone(&self.rows), Arc::clone(&self.positions));
        let thread = std::thread::Builder::new()
            .name("tidemark-audit-tail".into())
            .spawn(move || tail(&consumer, &rows, &positions, &stop))
            .context("starting the audit tail")?;
        Ok(Some(thread))
    }

    /// Waits, at most `limit`, until every audit partition is read up to its end as of now.
    /// True when it got there (or the tail never started: no standby rows wait then).
    pub fn catch_up(&self, limit: Duration) -> bool {
        let Some(consumer) = self.consumer.lock().ok().and_then(|c| c.clone()) else { return true };
        let started = Instant::now();
        let partitions: Vec<i32> = self.positions.lock().map(|p| p.keys().copied().collect()).unwrap_or_default();
        let mut ends = HashMap::new();
        for p in partitions {
            match consumer.fetch_watermarks(&self.topic, p, limit) {
                Ok((_, high)) => {
                    ends.insert(p, high);
                }
                Err(e) => {
                    warn!(topic = %self.topic, partition = p, error = %e, "cannot read the audit topic's end");
                    return false;
                }
            }
        }
        loop {
            let behind = self
                .positions
                .lock()
                .map(|pos| ends.iter().any(|(p, end)| pos.get(p).is_none_or(|at| at < end)))
                .unwrap_or(true);
            if !behind {
                return true;
            }
            if started.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn tail(consumer: &Tail, rows: &StandbyRows, positions: &Mutex<HashMap<i32, i64>>, stop: &AtomicBool) {
    let mut warned: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(msg)) => {
                if let Some((key, outcome)) = msg.payload().and_then(outcome_in) {
                    rows.outcome(key, outcome);
                }
                if let Ok(mut pos) = positions.lock() {
                    pos.insert(msg.partition(), msg.offset() + 1);
                }
            }
            Some(Err(e)) if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) => {
                warn!(error = %e, "audit tail: consumer error");
                warned = Some(Instant::now());
            }
            Some(Err(_)) => {}
        }
    }
}
