//! The processing engine: per-partition tasks that turn source records into state changes
//! and output records. No Kafka here: the engine sees plain records and a state store, so it
//! is tested without a broker and drives the stream, micro-batch and batch modes alike.

pub mod combine;
pub mod derive;
pub mod forward;
pub mod held;
pub mod inventory;
pub mod outbox;
pub mod output;
pub mod sku_task;
pub mod slice;
pub mod stats;
pub mod task;

pub use output::{OutputRecord, Sink};
pub use stats::Stats;
pub use task::{PartitionTask, SourceRecord, TaskConfig};

#[cfg(test)]
#[path = "task_tests.rs"]
mod task_tests;
