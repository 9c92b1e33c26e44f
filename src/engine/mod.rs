//! The processing engine: per-partition tasks that turn source records into state changes
//! and output records. No Kafka here: the engine sees plain records and a state store, so it
//! is tested without a broker and drives the stream, micro-batch and batch modes alike.

pub mod combine;
pub mod derive;
pub mod forward;
pub mod held;
pub mod inventory;
pub mod orders;
pub mod outbox;
pub mod output;
pub mod record;
pub mod sku_task;
pub mod slice;
pub mod stats;

pub use orders::{OrdersTask, TaskConfig};
pub use output::{OutputRecord, Sink};
pub use record::SourceRecord;
pub use stats::Stats;

#[cfg(test)]
#[path = "orders_tests.rs"]
mod orders_tests;
