//! The output producer. Outputs are produced before the state commit that covers them and
//! the commit waits for every acknowledgement: a crash in between replays the same inputs
//! from the old checkpoint and produces the same records again (upserts are idempotent).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use tidemark_topology::config::Topology;
use tracing::error;

use super::KafkaSettings;
use crate::engine::{OutputRecord, Sink};

#[derive(Default)]
pub struct DeliveryContext {
    failed: AtomicU64,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            error!(error = %e, "output record not delivered");
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub struct OutputSink {
    producer: BaseProducer<DeliveryContext>,
    dashboard: String,
    finance: String,
    dead_letter: String,
    late: String,
    repartition: String,
}

impl OutputSink {
    pub fn new(settings: &KafkaSettings, t: &Topology) -> anyhow::Result<Self> {
        let producer = settings
            .client_config()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "lz4")
            .set("message.timeout.ms", "300000")
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(DeliveryContext::default())?;
        Ok(OutputSink {
            producer,
            dashboard: t.dashboard.topic.clone(),
            finance: t.finance_provisional.topic.clone(),
            dead_letter: t.dead_letter.topic.clone(),
            late: t.late.topic.clone(),
            repartition: t.sku_repartition.topic.clone(),
        })
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
        }
    }

    /// Queues records for delivery, waiting for room when the local queue is full.
    pub fn send_all(&self, records: &mut Vec<OutputRecord>) -> anyhow::Result<()> {
        for r in records.drain(..) {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            let mut record: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(self.topic(r.sink)).payload(&r.value[..]).headers(headers);
            if let Some(k) = &r.key {
                record = record.key(&k[..]);
            }
            if let Some(p) = r.partition {
                record = record.partition(p);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        // poll() blocks for its whole timeout (see `flush`): serve, then nap.
                        self.producer.poll(Duration::ZERO);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => anyhow::bail!("producing to {}: {e}", self.topic(r.sink)),
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Waits until every queued record is acknowledged. An error means some record was not
    /// delivered: the caller must not commit the state that produced it.
    /// `alive` is called while waiting, so liveness reflects a loop that waits, not one that hangs.
    ///
    /// Not `Producer::flush`: rdkafka 0.39's `BaseProducer::poll` always blocks for its whole
    /// timeout, so its flush returns in steps of 100 ms (measured: every commit spent exactly
    /// 100 ms there, even for 16 records). Serving delivery reports without blocking and
    /// sleeping 1 ms between checks returns within ~1 ms of the last acknowledgement.
    pub fn flush(&self, alive: &dyn Fn()) -> anyhow::Result<()> {
        let mut since_warning = Instant::now();
        loop {
            self.producer.poll(Duration::ZERO);
            let in_flight = self.producer.in_flight_count();
            if in_flight == 0 {
                break;
            }
            if since_warning.elapsed() >= Duration::from_secs(10) {
                since_warning = Instant::now();
                alive();
                tracing::warn!(in_flight, "outputs not yet acknowledged; waiting");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let failed = self.producer.context().failed.swap(0, Ordering::Relaxed);
        if failed > 0 {
            anyhow::bail!("{failed} output record(s) were not delivered; state not committed");
        }
        Ok(())
    }
}
