//! What librdkafka reports through a client's error callback, at the level it deserves.
//!
//! A consumer with `enable.partition.eof` (the backlog prober) gets an end-of-partition
//! event whenever a fetch reaches the log end; those still queued when the consumer closes
//! reach the error callback as "Global error: PartitionEOF". Reaching the end of a log is
//! what such a consumer asked to hear about, not a fault, so it is not logged as one.

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// An end-of-partition report, whichever way librdkafka wrapped it.
pub fn is_partition_eof(error: &KafkaError) -> bool {
    matches!(error, KafkaError::PartitionEOF(_)) || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
}

/// Logs a client error at ERROR, and an end-of-partition report at TRACE.
pub fn client_error(error: &KafkaError, reason: &str) {
    if is_partition_eof(error) {
        tracing::trace!(target: "librdkafka", %error, reason, "end of partition");
    } else {
        tracing::error!(target: "librdkafka", %error, reason, "kafka client error");
    }
}

/// The context of a plain consumer whose end-of-partition events are not errors.
#[derive(Clone, Copy, Debug, Default)]
pub struct EofIsNotAnError;

impl ClientContext for EofIsNotAnError {
    fn error(&self, error: KafkaError, reason: &str) {
        client_error(&error, reason);
    }
}

impl ConsumerContext for EofIsNotAnError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_of_partition_is_recognised_in_both_of_its_forms() {
        assert!(is_partition_eof(&KafkaError::PartitionEOF(3)));
        assert!(is_partition_eof(&KafkaError::Global(RDKafkaErrorCode::PartitionEOF)));
        assert!(!is_partition_eof(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure)));
    }
}
