//! Input ranges of a batch run: per-partition offsets given on the command line or derived
//! from broker append times, and the bounded, ordered read of one partition's range.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, Timestamp, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::kafka::KafkaSettings;

const TIMEOUT: Duration = Duration::from_secs(30);
/// A read that gets no record and no end-of-partition for this long fails.
const STALL: Duration = Duration::from_secs(60);

/// Offsets per partition.
pub type Offsets = BTreeMap<i32, i64>;

/// `[from, to)` of one partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionRange {
    pub partition: i32,
    pub from: i64,
    pub to: i64,
}

/// A frozen input: a topic and a range per partition, sorted by partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    pub topic: String,
    pub ranges: Vec<PartitionRange>,
}

impl Input {
    pub fn new(topic: &str, from: &Offsets, to: &Offsets) -> Input {
        let ranges = to
            .iter()
            .map(|(p, to)| PartitionRange { partition: *p, from: from.get(p).copied().unwrap_or(0), to: *to })
            .collect();
        Input { topic: topic.to_string(), ranges }
    }

    pub fn starts(&self) -> Offsets {
        self.ranges.iter().map(|r| (r.partition, r.from)).collect()
    }

    pub fn ends(&self) -> Offsets {
        self.ranges.iter().map(|r| (r.partition, r.to)).collect()
    }

    /// Offsets in the ranges (records plus any gaps left by transaction markers).
    pub fn span(&self) -> u64 {
        self.ranges.iter().map(|r| u64::try_from(r.to - r.from).unwrap_or(0)).sum()
    }

    /// `p:[from,to)` per partition, the canonical text hashed into run ids.
    pub fn describe(&self) -> String {
        let ranges: Vec<String> =
            self.ranges.iter().map(|r| format!("{}:[{},{})", r.partition, r.from, r.to)).collect();
        format!("{} {}", self.topic, ranges.join(" "))
    }
}

/// Parses `p:offset,p:offset,...`; reports every malformed item at once.
pub fn parse_offsets(flag: &str, spec: &str) -> anyhow::Result<Offsets> {
    let mut offsets = Offsets::new();
    let mut bad = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = item
            .split_once(':')
            .and_then(|(p, o)| Some((p.trim().parse::<i32>().ok()?, o.trim().parse::<i64>().ok()?)));
        match parsed {
            Some((p, o)) if p >= 0 && o >= 0 => {
                if offsets.insert(p, o).is_some() {
                    bad.push(format!("partition {p} given twice"));
                }
            }
            _ => bad.push(format!("`{item}` is not partition:offset")),
        }
    }
    if offsets.is_empty() && bad.is_empty() {
        bad.push("no partition given".into());
    }
    anyhow::ensure!(bad.is_empty(), "{flag} {spec}: {}", bad.join("; "));
    Ok(offsets)
}

/// The orders log as a batch run sees it: partitions and their watermarks when opened.
pub struct Log {
    consumer: BaseConsumer,
    topic: String,
    watermarks: BTreeMap<i32, (i64, i64)>,
}

impl Log {
    pub fn open(settings: &KafkaSettings, topic: &str) -> anyhow::Result<Log> {
        // A range whose start was deleted meanwhile fails (`auto.offset.reset=error`), never
        // silently skips ahead.
        let consumer: BaseConsumer = settings
            .log_reader_config("tidemark-batch")
            .set("enable.partition.eof", "true")
            // One partition is read at a time: let each fetch bring a large slice of it.
            .set("max.partition.fetch.bytes", "16777216")
            .create()
            .context("creating batch reader")?;
        let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT).context("fetching metadata")?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        anyhow::ensure!(!partitions.is_empty(), "topic {topic} does not exist or has no partitions");
        let mut watermarks = BTreeMap::new();
        for p in partitions {
            let w =
                consumer.fetch_watermarks(topic, p, TIMEOUT).with_context(|| format!("watermarks of {topic}/{p}"))?;
            watermarks.insert(p, w);
        }
        Ok(Log { consumer, topic: topic.to_string(), watermarks })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// `(low, high)` watermark per partition.
    pub fn watermarks(&self) -> &BTreeMap<i32, (i64, i64)> {
        &self.watermarks
    }

    /// Per partition, the first offset appended at or after `t_ms`; the high watermark when
    /// nothing was appended since.
    pub fn offsets_at(&self, t_ms: i64) -> anyhow::Result<Offsets> {
        let mut query = TopicPartitionList::new();
        for p in self.watermarks.keys() {
            query.add_partition_offset(&self.topic, *p, Offset::Offset(t_ms))?;
        }
        let found = self.consumer.offsets_for_times(query, TIMEOUT).context("looking up offsets by append time")?;
        let mut offsets = Offsets::new();
        for e in found.elements() {
            e.error().with_context(|| format!("offset of {}/{} at {t_ms}", self.topic, e.partition()))?;
            let (_, high) = self.watermarks.get(&e.partition()).copied().unwrap_or_default();
            let offset = match e.offset() {
                // Records appended since the watermarks were read are not part of this run.
                Offset::Offset(o) => o.min(high),
                Offset::End => high,
                other => anyhow::bail!("{}/{}: unexpected offset {other:?} for time {t_ms}", self.topic, e.partition()),
            };
            offsets.insert(e.partition(), offset);
        }
        Ok(offsets)
    }

    /// Checks that offsets name every partition and lie within the records the log holds,
    /// so the range is frozen: it can only ever contain the records it contains now.
    pub fn check_offsets(&self, what: &str, offsets: &Offsets) -> anyhow::Result<()> {
        let mut bad = Vec::new();
        for (p, (low, high)) in &self.watermarks {
            match offsets.get(p) {
                None => bad.push(format!("partition {p} missing")),
                Some(o) if *o > *high => bad.push(format!("partition {p}: {o} is beyond the end of the log ({high})")),
                Some(o) if *o < *low => bad.push(format!("partition {p}: {o} was deleted (log starts at {low})")),
                Some(_) => {}
            }
        }
        for p in offsets.keys().filter(|p| !self.watermarks.contains_key(p)) {
            bad.push(format!("partition {p} does not exist"));
        }
        anyhow::ensure!(bad.is_empty(), "{what} for topic {}: {}", self.topic, bad.join("; "));
        Ok(())
    }

    /// Reads `[from, to)` of one partition in offset order, calling `f(offset, key, value,
    /// append_ms)` once per record (fences skipped). `to` must not exceed the high watermark seen at open.
    pub fn read(
        &self,
        partition: i32,
        from: i64,
        to: i64,
        progress: &mut Progress,
        mut f: impl FnMut(i64, Option<&[u8]>, &[u8], i64),
    ) -> anyhow::Result<u64> {
        if from >= to {
            return Ok(0);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(from))?;
        self.consumer.assign(&tpl).context("assigning partition")?;
        let mut read = 0u64;
        let mut last: Option<i64> = None;
        let mut warned = false;
        let mut last_progress = Instant::now();
        loop {
            anyhow::ensure!(
                last_progress.elapsed() < STALL,
                "reading {}/{partition}: nothing received for {STALL:?}",
                self.topic
            );
            let msg = match self.consumer.poll(Duration::from_millis(200)) {
                None => continue,
                // Every offset below `to` that holds a record has been delivered.
                Some(Err(KafkaError::PartitionEOF(p))) if p == partition => break,
                // Left over from the partition read before this one.
                Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => return Err(e).with_context(|| format!("reading {}/{partition}", self.topic)),
                Some(Ok(m)) if m.partition() != partition => continue,
                Some(Ok(m)) => m,
            };
            last_progress = Instant::now();
            let offset = msg.offset();
            if offset >= to {
                break;
            }
            anyhow::ensure!(
                offset >= from && last.is_none_or(|l| offset > l),
                "{}/{partition}: offset {offset} delivered out of order (range [{from}, {to}), previous {last:?})",
                self.topic
            );
            last = Some(offset);
            if !warned && !matches!(msg.timestamp(), Timestamp::LogAppendTime(_)) {
                warned = true;
                warn!(topic = %self.topic, partition, "records lack LogAppendTime: their producer timestamps stand in for append times");
            }
            // A fence is a progress promise of the stream, no input record: no mode counts it.
            if !tidemark_topology::fence::is_fence(msg.payload()) {
                f(offset, msg.key(), msg.payload().unwrap_or_default(), msg.timestamp().to_millis().unwrap_or(0));
                read += 1;
            }
            progress.tick(1);
            if offset + 1 >= to {
                break;
            }
        }
        self.consumer.unassign().context("unassigning partition")?;
        Ok(read)
    }
}

/// Records read of a known total, printed to stderr at most once a second.
pub struct Progress {
    label: String,
    total: u64,
    read: u64,
    started: Instant,
    printed: Instant,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Progress {
        let now = Instant::now();
        Progress { label: label.to_string(), total, read: 0, started: now, printed: now }
    }

    fn tick(&mut self, n: u64) {
        self.read += n;
        if self.printed.elapsed() >= Duration::from_secs(1) {
            self.printed = Instant::now();
            self.print();
        }
    }

    pub fn print(&self) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let pct = if self.total == 0 { 100.0 } else { self.read as f64 * 100.0 / self.total as f64 };
        eprintln!(
            "{}: {}/{} records ({pct:.1}%), {:.0} records/s",
            self.label,
            self.read,
            self.total,
            self.read as f64 / secs
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_and_every_bad_item_is_reported() {
        assert_eq!(parse_offsets("--to", "0:10, 1:20").expect("valid"), Offsets::from([(0, 10), (1, 20)]));
        let err = parse_offsets("--to", "0:10,x,1:-2,0:3").expect_err("invalid").to_string();
        assert!(err.contains("`x`") && err.contains("`1:-2`") && err.contains("partition 0 given twice"), "{err}");
        assert!(parse_offsets("--from", "").is_err());
    }

    #[test]
    fn an_input_describes_its_ranges_canonically() {
        let input = Input::new("orders", &Offsets::from([(1, 5)]), &Offsets::from([(0, 3), (1, 9)]));
        assert_eq!(input.describe(), "orders 0:[0,3) 1:[5,9)");
        assert_eq!(input.span(), 7);
        assert_eq!(input.starts(), Offsets::from([(0, 0), (1, 5)]));
    }
}
