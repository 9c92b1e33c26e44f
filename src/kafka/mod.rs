//! Kafka I/O: client settings (with security passthrough), topic administration, the
//! consumer context that seeks to checkpoints on assignment, the log ends it believes
//! (`log_ends`), and the output producer (`sink`; `room`: queuing while librdkafka's queue is full).

pub mod admin;
pub mod client_log;
pub mod context;
pub mod log_ends;
pub mod reader;
pub mod room;
pub mod settings;
pub mod sink;

pub use settings::KafkaSettings;
