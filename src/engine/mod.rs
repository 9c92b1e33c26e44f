//! The processing engine: per-partition tasks that turn source records into state changes
//! and output records. No Kafka here: the engine sees plain records and a state store, so it
//! is tested without a broker and drives the stream, micro-batch and batch modes alike.
//!
//! Module map:
//! - [`orders`]: an `orders` partition's task: normalise, dedup, dashboard and provisional
//!   finance partials, lines by SKU ([`derive`]: the repartition records and progress marks).
//! - [`inventory`]: an `inventory` partition's task: snapshots by SKU.
//! - [`sku_task`]: a SKU repartition partition's task: the merge in logical-time order, the
//!   rules and the outbox rows ([`outbox`]); `sku_phase`: its stock and window phases;
//!   `merge_buffer`: what waits for the upstreams' promises, one queue per upstream.
//! - [`combine`]: the combined rows of every aggregate key ([`forward`]: the partials sent
//!   to it).
//! - [`output`], [`record`], [`stats`], [`held`]: what tasks emit, read, count and hold;
//!   [`pack`]: several SKU repartition records in one log record.
//! - [`slice`]: a micro-batch slice over the same tasks.

pub mod combine;
pub mod derive;
pub mod forward;
pub mod held;
pub mod inventory;
mod merge_buffer;
pub mod orders;
pub mod outbox;
pub mod output;
pub mod pack;
pub mod record;
mod sku_phase;
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

#[cfg(test)]
mod sku_split_tests;
