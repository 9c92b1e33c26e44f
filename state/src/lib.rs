//! The embedded state store of tidemark: one RocksDB database per process, one column family
//! per concern, every key prefixed by the source partition that owns it.
//!
//! Module map:
//! - [`codec`]: the one versioned bincode encoding of every persisted value.
//! - [`keys`]: key layout (`PartitionId` prefix + concern-specific suffix).
//! - [`checkpoint`]: what a partition persists about its progress.
//! - [`store`]: opening the database, column families, reads used on restore and dedup.
//! - [`outbox`]: the pending and expiry indexes of the action outbox.
//! - [`commit`]: the single `WriteBatch` that makes state, outbox rows and offsets durable together.
//! - [`error`]: `StateError`, classified by whether a retry can help.

pub mod checkpoint;
pub mod codec;
pub mod commit;
pub mod error;
pub mod keys;
pub mod outbox;
pub mod store;

pub use checkpoint::Checkpoint;
pub use commit::{CommitBatch, StagedBatch};
pub use error::StateError;
pub use keys::{Namespace, PartitionId};
pub use outbox::OutboxIndex;
pub use store::{KeyValue, Store, StoreOptions};
