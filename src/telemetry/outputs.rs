//! Output metrics, labelled with the Kafka `topic` (the configured output and side-output
//! topics, a bounded set): refusals of the broker (`tidemark_output_refusals_total`), side
//! outputs produced again or truncated to fit (`tidemark_side_output*`).

use metrics::counter;

/// Makes an output topic's refusal series exist (at 0).
pub fn output_registered(topic: &str) {
    counter!("tidemark_output_refusals_total", "topic" => topic.to_owned()).increment(0);
}

/// A record the broker (or the producer, locally) refused for good.
pub fn output_refused(topic: &str) {
    counter!("tidemark_output_refusals_total", "topic" => topic.to_owned()).increment(1);
}

/// Makes a side-output topic's retry and truncation series exist (at 0).
pub fn side_output_registered(topic: &str) {
    counter!("tidemark_side_output_retries_total", "topic" => topic.to_owned()).increment(0);
    counter!("tidemark_side_outputs_truncated_total", "topic" => topic.to_owned()).increment(0);
}

/// A side output (dead letter, late event) produced again after a failed delivery.
pub fn side_output_retried(topic: &str) {
    counter!("tidemark_side_output_retries_total", "topic" => topic.to_owned()).increment(1);
}

/// A side output truncated to fit the largest record the topic allows.
pub fn side_output_truncated(topic: &str) {
    counter!("tidemark_side_outputs_truncated_total", "topic" => topic.to_owned()).increment(1);
}
