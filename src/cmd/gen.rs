//! `tidemark gen`: a deterministic order log from a seed, to Kafka or to a file.
//!
//! File format: JSON lines `{"topic":"orders"|"inventory","key":"...","value":"..."}`, the
//! value being the record's bytes as a JSON string. On stdout a final JSON summary counts
//! what was generated (tests compare it with what tidemark reports).

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde::Serialize;
use tidemark_topology::gen::{GenConfig, GenTopic, Generator, Truth};

use crate::cli::GenArgs;
use crate::kafka::room::send_when_room;
use crate::kafka::KafkaSettings;

#[derive(Debug, Default, Serialize)]
pub struct GenSummary {
    pub records: u64,
    pub orders_records: u64,
    pub good: u64,
    pub duplicates: u64,
    pub late: u64,
    pub snapshots: u64,
    pub stale_snapshots: u64,
    pub malformed: BTreeMap<&'static str, u64>,
}

impl GenSummary {
    fn count(&mut self, topic: GenTopic, truth: &Truth) {
        self.records += 1;
        if topic == GenTopic::Orders {
            self.orders_records += 1;
        }
        match truth {
            Truth::Good { .. } => self.good += 1,
            Truth::Duplicate { .. } => self.duplicates += 1,
            Truth::Late { .. } => self.late += 1,
            Truth::Malformed { reason } => *self.malformed.entry(reason).or_default() += 1,
            Truth::Snapshot { stale, .. } => {
                self.snapshots += 1;
                if *stale {
                    self.stale_snapshots += 1;
                }
            }
        }
    }
}

pub fn config(args: &GenArgs) -> anyhow::Result<GenConfig> {
    let start_ms = if args.start == "now" {
        chrono::Utc::now().timestamp_millis()
    } else {
        chrono::DateTime::parse_from_rfc3339(&args.start)
            .with_context(|| format!("--start {}: expected RFC 3339 or `now`", args.start))?
            .timestamp_millis()
    };
    let max_lateness_ms = i64::try_from(args.max_lateness.as_millis()).unwrap_or(i64::MAX);
    Ok(GenConfig {
        seed: args.seed,
        events: args.events,
        start_ms,
        rate_per_s: args.rate,
        spike: args.spike,
        late_fraction: args.late_fraction,
        max_lateness_ms,
        dup_fraction: args.dup_fraction,
        dup_span_ms: 60_000,
        malformed_fraction: args.malformed_fraction,
        v2_fraction: args.v2_fraction,
        skus: args.skus,
        stores: args.stores,
        open_orders: args.open_orders,
        inventory_every: args.inventory_every,
        target_event_bytes: args.event_bytes,
    })
}

pub fn run(args: GenArgs, settings: &KafkaSettings) -> anyhow::Result<()> {
    let cfg = config(&args)?;
    let generator = Generator::new(cfg.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let summary = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            let mut w = BufWriter::new(file);
            let mut summary = GenSummary::default();
            for r in generator {
                summary.count(r.topic, &r.truth);
                let topic = match r.topic {
                    GenTopic::Orders => &args.orders_topic,
                    GenTopic::Inventory => &args.inventory_topic,
                };
                let line =
                    serde_json::json!({"topic": topic, "key": r.key, "value": String::from_utf8_lossy(&r.value)});
                writeln!(w, "{line}")?;
            }
            w.flush()?;
            summary
        }
        None => produce(&args, settings, generator)?,
    };
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

fn produce(args: &GenArgs, settings: &KafkaSettings, generator: Generator) -> anyhow::Result<GenSummary> {
    let producer: BaseProducer = settings
        .client_config()
        .set("enable.idempotence", "true")
        .set("linger.ms", "10")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "500000")
        // No delivery deadline: through a broker outage the records wait (the paced loop
        // blocks once the local queue is full) instead of being dropped after 5 minutes.
        .set("message.timeout.ms", "0")
        .create()
        .context("creating producer")?;
    let total = args.events;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut summary = GenSummary::default();
    for r in generator {
        if args.paced {
            let due = started + Duration::from_millis(u64::try_from(r.due_ms).unwrap_or(0));
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                producer.poll(Duration::ZERO);
                std::thread::sleep(wait);
            }
        }
        summary.count(r.topic, &r.truth);
        let topic = match r.topic {
            GenTopic::Orders => &args.orders_topic,
            GenTopic::Inventory => &args.inventory_topic,
        };
        let record = BaseRecord::<str, [u8]>::to(topic).key(r.key.as_str()).payload(&r.value[..]);
        send_when_room(&producer, record).map_err(|e| anyhow::anyhow!("producing to {topic}: {e}"))?;
        if last_report.elapsed() >= Duration::from_secs(1) {
            producer.poll(Duration::ZERO);
            last_report = Instant::now();
            eprintln!(
                "gen: {}/{} order records ({:.0}/s)",
                summary.orders_records,
                total,
                summary.records as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    while let Err(e) = producer.flush(Duration::from_secs(10)) {
        eprintln!("gen: {} record(s) not yet acknowledged by the broker ({e}); waiting", producer.in_flight_count());
    }
    eprintln!("gen: produced {} records in {:.1}s", summary.records, started.elapsed().as_secs_f64());
    Ok(summary)
}
