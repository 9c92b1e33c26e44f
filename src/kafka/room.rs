//! Queuing a record while librdkafka's local queue is full.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};

/// Queues `record`, waiting while the producer's local queue is full: it serves delivery
/// reports (which free room) and naps 1 ms between tries (rdkafka 0.39's `poll` blocks for its
/// whole timeout, so a zero poll and a short sleep). Any other refusal is returned for the
/// caller to judge (the record is dropped).
pub fn send_when_room<'a, K, P, C>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'a, K, P, C::DeliveryOpaque>,
) -> Result<(), KafkaError>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
    C: ProducerContext,
{
    loop {
        match producer.send(record) {
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(()) => return Ok(()),
            Err((e, _)) => return Err(e),
        }
    }
}
