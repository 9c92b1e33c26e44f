//! Reads a whole topic up to the high watermarks seen at the start: the bounded reads used by
//! `query`, tests and batch modes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, OwnedMessage};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::KafkaSettings;

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long one blocking broker call may hold a scan before it looks at its stop flag.
const SLICE: Duration = Duration::from_secs(1);

/// The error of a scan abandoned because its stop flag was set.
#[derive(Debug, thiserror::Error)]
#[error("stopped before the read ended")]
pub struct Stopped;

/// Every committed record of `topic`, in partition order then offset order.
pub fn read_topic(settings: &KafkaSettings, topic: &str) -> anyhow::Result<Vec<OwnedMessage>> {
    read_topic_from(settings, topic, None)
}

/// The committed records of `topic` appended at or after `since_ms` (broker time), up to the
/// high watermarks seen at the start; in partition order then offset order.
pub fn read_topic_since(settings: &KafkaSettings, topic: &str, since_ms: i64) -> anyhow::Result<Vec<OwnedMessage>> {
    read_topic_from(settings, topic, Some(since_ms))
}

fn read_topic_from(settings: &KafkaSettings, topic: &str, since_ms: Option<i64>) -> anyhow::Result<Vec<OwnedMessage>> {
    let mut out: Vec<OwnedMessage> = Vec::new();
    scan_topic(settings, topic, since_ms, &AtomicBool::new(false), |msg| out.push(msg.detach()))?;
    out.sort_by_key(|m| (m.partition(), m.offset()));
    Ok(out)
}

/// Calls `each` for every committed record of `topic` appended at or after `since_ms`
/// (broker time; `None` or a time at or before the epoch: from the start), up to the high
/// watermarks seen at the start, without keeping them: in offset order per partition,
/// partitions interleaved. Returns how many records it saw.
///
/// Every broker call is retried in [`SLICE`]s for up to [`TIMEOUT`]; between slices `stop` is
/// read, and once it is set the scan ends with [`Stopped`] within about a second (a process
/// told to stop during a broker outage does not wait out the timeouts).
pub fn scan_topic(
    settings: &KafkaSettings,
    topic: &str,
    since_ms: Option<i64>,
    stop: &AtomicBool,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<usize> {
    // A negative time is a sentinel to the broker (-1 latest, -2 earliest), never a time.
    let since_ms = since_ms.filter(|ms| *ms > 0);
    let consumer: BaseConsumer = settings
        .client_config()
        .set("group.id", "tidemark-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .context("creating reader")?;
    let metadata = sliced(stop, |t| consumer.fetch_metadata(Some(topic), t)).context("fetching metadata")?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    anyhow::ensure!(!partitions.is_empty(), "topic {topic} does not exist or has no partitions");
    let mut starts = std::collections::BTreeMap::new();
    if let Some(ms) = since_ms {
        let mut query = TopicPartitionList::new();
        for p in &partitions {
            query.add_partition_offset(topic, *p, Offset::Offset(ms))?;
        }
        let found = sliced(stop, |t| consumer.offsets_for_times(query.clone(), t))
            .context("looking up offsets by append time")?;
        for e in found.elements() {
            starts.insert(e.partition(), e.offset());
        }
    }
    let mut tpl = TopicPartitionList::new();
    let mut remaining = 0usize;
    let mut ends = std::collections::BTreeMap::new();
    for p in &partitions {
        let (low, high) = sliced(stop, |t| consumer.fetch_watermarks(topic, *p, t))
            .with_context(|| format!("reading the watermarks of {topic}[{p}]"))?;
        let start = match starts.get(p) {
            None => Offset::Beginning,
            // No record at or after the time: nothing to read in this partition.
            Some(Offset::End) | Some(Offset::Invalid) => continue,
            Some(Offset::Offset(o)) if *o >= high => continue,
            Some(o) => *o,
        };
        if high > low {
            tpl.add_partition_offset(topic, *p, start)?;
            ends.insert(*p, high);
            remaining += 1;
        }
    }
    let mut seen = 0usize;
    if remaining == 0 {
        return Ok(seen);
    }
    consumer.assign(&tpl)?;
    let mut last_progress = Instant::now();
    while remaining > 0 {
        if stop.load(Ordering::Relaxed) {
            return Err(Stopped.into());
        }
        anyhow::ensure!(last_progress.elapsed() < TIMEOUT, "reading {topic}: no progress for {TIMEOUT:?}");
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else { continue };
        let msg = msg?;
        last_progress = Instant::now();
        let p = msg.partition();
        let end = ends.get(&p).copied().unwrap_or(0);
        if msg.offset() < end {
            each(&msg);
            seen += 1;
        }
        // Transaction markers and compaction leave gaps: done once the next offset reaches the end.
        if msg.offset() + 1 >= end && ends.remove(&p).is_some() {
            remaining -= 1;
        }
    }
    Ok(seen)
}

/// `call` with a timeout of one [`SLICE`], again while it fails, until it succeeds, [`TIMEOUT`]
/// has passed (its last error) or `stop` is set ([`Stopped`]).
fn sliced<T>(stop: &AtomicBool, mut call: impl FnMut(Duration) -> rdkafka::error::KafkaResult<T>) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(Stopped.into());
        }
        let tried = Instant::now();
        match call(SLICE) {
            Ok(v) => return Ok(v),
            Err(e) if started.elapsed() >= TIMEOUT => return Err(e.into()),
            Err(_) => {
                // A call that failed at once (no broker up) waits out the rest of its slice.
                if let Some(rest) = SLICE.checked_sub(tried.elapsed()) {
                    std::thread::sleep(rest.min(Duration::from_millis(200)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_under_a_set_stop_flag_ends_as_stopped_even_under_context() {
        let stop = AtomicBool::new(true);
        let result: anyhow::Result<()> = sliced(&stop, |_| Ok(())).context("fetching metadata");
        assert!(result.is_err_and(|e| e.is::<Stopped>()));
    }

    #[test]
    fn a_failing_call_is_tried_again_until_the_stop_flag_is_set() {
        let stop = AtomicBool::new(false);
        let mut calls = 0;
        let result: anyhow::Result<()> = sliced(&stop, |_| {
            calls += 1;
            if calls == 3 {
                stop.store(true, Ordering::Relaxed);
            }
            Err(rdkafka::error::KafkaError::MetadataFetch(rdkafka::types::RDKafkaErrorCode::BrokerTransportFailure))
        });
        assert!(result.is_err_and(|e| e.is::<Stopped>()));
        assert_eq!(calls, 3);
    }
}
