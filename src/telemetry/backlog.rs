//! Lag and backlog age, measured exactly and independently of the stream loop.
//!
//! Every interval, for each assigned partition of every source (`orders`, `inventory`, the
//! SKU repartition topic), the prober asks the broker for the log end
//! offset (lag = log end − committed checkpoint offset) and, when there is lag, reads the
//! one record at the checkpoint offset with its own consumer. Backlog age is the seconds
//! between now and that record's broker append time: the age of the oldest record not yet
//! committed; 0 when the checkpoint is at the log end. Because the prober has its own
//! consumer, both figures keep rising while the stream loop is paused, slow or wedged (a
//! paused consumer's own statistics stop refreshing the high watermark).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::warn;

use super::Progress;
use crate::kafka::client_log::EofIsNotAnError;
use crate::kafka::KafkaSettings;

/// `topics`: the topic name of each source (`PartitionId::source`) the progress tracks.
pub fn spawn(
    settings: &KafkaSettings,
    topics: Vec<(u16, String)>,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> anyhow::Result<JoinHandle<()>> {
    let consumer: BaseConsumer<EofIsNotAnError> = settings
        .client_config()
        // librdkafka wants a group id even for manual assignment; this one never commits.
        .set("group.id", "tidemark-backlog-prober")
        .set("enable.auto.commit", "false")
        .set("max.partition.fetch.bytes", "65536")
        .set("fetch.wait.max.ms", "100")
        // Tells "only transaction markers after the checkpoint" from "not fetched yet".
        .set("enable.partition.eof", "true")
        // Never read "the newest record" in place of a deleted one: that reported ~0 s
        // exactly when data was lost.
        .set("auto.offset.reset", "error")
        .create_with_context(EofIsNotAnError)?;
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for (id, mut p) in progress.snapshot() {
                let Some(topic) = topics.iter().find(|(s, _)| *s == id.source).map(|(_, t)| t.as_str()) else {
                    continue;
                };
                let partition = id.partition;
                let mut low = 0;
                match consumer.fetch_watermarks(topic, partition, Duration::from_secs(5)) {
                    Ok((l, high)) => {
                        low = l;
                        progress.high_watermark(id, high);
                        p.high_watermark = Some(high);
                    }
                    Err(e) => warn!(partition = %id, error = %e, "cannot read the log end offset"),
                }
                let age = match p.high_watermark {
                    Some(high) if p.committed_next < high => {
                        // Below the log start the oldest unprocessed record is gone: the oldest
                        // one left is a lower bound on the backlog's age, never "fresh".
                        let oldest = if p.committed_next < low {
                            warn!(
                                partition = %id,
                                lost_from = p.committed_next,
                                lost_to = low,
                                "records deleted before they were processed"
                            );
                            low
                        } else {
                            p.committed_next
                        };
                        match oldest_at(&consumer, topic, partition, oldest) {
                            Oldest::Appended(append_ms) => {
                                let now = chrono::Utc::now().timestamp_millis();
                                ((now - append_ms).max(0) as f64) / 1000.0
                            }
                            // Only transaction markers left (the repartition topic's producer is
                            // transactional): nothing is waiting.
                            Oldest::NothingLeft => 0.0,
                            Oldest::Unknown => continue,
                        }
                    }
                    _ => 0.0,
                };
                progress.backlog_age(id, age);
            }
            let until = Instant::now() + every;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }))
}

/// What lies at or after an offset.
enum Oldest {
    /// The broker append time of the first record there (offsets can have gaps).
    Appended(i64),
    /// The log ends there once control records (transaction markers) are skipped.
    NothingLeft,
    /// Not read in time, or an error (logged).
    Unknown,
}

fn oldest_at(consumer: &BaseConsumer<EofIsNotAnError>, topic: &str, partition: i32, offset: i64) -> Oldest {
    let mut tpl = TopicPartitionList::new();
    if tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).is_err() {
        return Oldest::Unknown;
    }
    if let Err(e) = consumer.assign(&tpl) {
        warn!(error = %e, "backlog prober cannot assign");
        return Oldest::Unknown;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.partition() == partition => {
                return m.timestamp().to_millis().map_or(Oldest::Unknown, Oldest::Appended)
            }
            Some(Err(KafkaError::PartitionEOF(p))) if p == partition => return Oldest::NothingLeft,
            _ => {}
        }
    }
    Oldest::Unknown
}
