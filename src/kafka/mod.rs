//! Kafka I/O: client settings (with security passthrough), topic administration, the
//! consumer context that seeks to checkpoints on assignment, and the output producer.

pub mod admin;
pub mod context;
pub mod reader;
pub mod settings;
pub mod sink;

pub use settings::KafkaSettings;
