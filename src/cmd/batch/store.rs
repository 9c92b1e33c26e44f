//! The two finance topics: staging rows, publishing manifests, and reading both back the
//! way a reader does (latest value per key).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;

use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};
use tracing::error;

use super::manifest::{adjust_prefix, close_key, Manifest};
use crate::kafka::reader::read_topic;
use crate::kafka::room::send_when_room;
use crate::kafka::KafkaSettings;

/// Latest value per key of a compacted topic whose keys start with `prefix`.
pub fn latest(settings: &KafkaSettings, topic: &str, prefix: &str) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut values = BTreeMap::new();
    for m in read_topic(settings, topic)? {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
        if !key.starts_with(prefix) {
            continue;
        }
        match m.payload() {
            Some(v) => values.insert(key, v.to_vec()),
            None => values.remove(&key),
        };
    }
    Ok(values)
}

/// The rows of one run: every record under its row prefix.
pub fn rows(settings: &KafkaSettings, topic: &str, row_prefix: &str) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    latest(settings, topic, &format!("{row_prefix}|"))
}

/// What is published for one day: the latest close and every adjustment record.
pub struct Published {
    pub close: Option<Manifest>,
    pub adjustments: Vec<Manifest>,
}

pub fn published(settings: &KafkaSettings, manifest_topic: &str, day: &str) -> anyhow::Result<Published> {
    let close_key = close_key(day);
    let adjust_prefix = adjust_prefix(day);
    let mut close = None;
    let mut adjustments = Vec::new();
    for (key, value) in latest(settings, manifest_topic, "")? {
        if key != close_key && !key.starts_with(&adjust_prefix) {
            continue;
        }
        let m: Manifest = serde_json::from_slice(&value)
            .with_context(|| format!("{manifest_topic}: record `{key}` is not a finance manifest"))?;
        anyhow::ensure!(m.key() == key, "{manifest_topic}: record `{key}` holds the manifest of `{}`", m.key());
        if key == close_key {
            close = Some(m);
        } else {
            adjustments.push(m);
        }
    }
    Ok(Published { close, adjustments })
}

#[derive(Default)]
struct Failures(AtomicU64);

impl ClientContext for Failures {}

impl ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            error!(error = %e, "finance record not delivered");
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An idempotent, `acks=all` producer whose writes return once the broker acknowledged
/// every record.
pub struct Writer {
    producer: BaseProducer<Failures>,
}

impl Writer {
    pub fn new(settings: &KafkaSettings) -> anyhow::Result<Writer> {
        let producer = settings
            .client_config()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .create_with_context(Failures::default())
            .context("creating finance producer")?;
        Ok(Writer { producer })
    }

    /// Writes `records` (key → value) and waits for every acknowledgement.
    pub fn write(&self, topic: &str, records: &BTreeMap<String, Vec<u8>>) -> anyhow::Result<()> {
        for (key, value) in records {
            let record = BaseRecord::<str, [u8]>::to(topic).key(key.as_str()).payload(&value[..]);
            send_when_room(&self.producer, record).map_err(|e| anyhow::anyhow!("producing to {topic}: {e}"))?;
        }
        self.producer.flush(Duration::from_secs(120)).with_context(|| format!("flushing records to {topic}"))?;
        let failed = self.producer.context().0.swap(0, Ordering::Relaxed);
        anyhow::ensure!(failed == 0, "{failed} record(s) to {topic} were not delivered");
        Ok(())
    }
}
