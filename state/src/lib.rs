//! The embedded state store of tidemark: one RocksDB database per process, one column family
//! per source partition (its dedup entries, aggregates, outbox and checkpoint), so a
//! partition's files are its own and move as files.
//!
//! Module map:
//! - [`codec`]: the one versioned bincode encoding of every persisted value.
//! - [`keys`]: partitions (`PartitionId`) and the namespaces of aggregate state.
//! - [`parts`]: one column family per partition: names, tags of the tables inside it,
//!   creation, import and drop through RocksDB's C API.
//! - [`migrate`]: a store of the layout before (one column family per concern) moved into
//!   partition column families at open.
//! - [`checkpoint`]: what a partition persists about its progress.
//! - [`store`]: opening the database, column families, reads used on restore and dedup.
//! - [`view`]: the reads and staged writes the engine needs, as traits (`StateView`,
//!   `StateWrite`, `StateStore`), implemented by the RocksDB store and the in-memory one.
//! - [`memory`]: `MemStore`, an in-memory store (BTreeMaps) for the test driver and tests.
//! - [`outbox`]: the pending and expiry indexes of the action outbox.
//! - [`export`]: one partition's column family as SST files and back (snapshots that move a
//!   partition between pods; its files are immutable, so snapshots are incremental).
//! - [`commit`]: the single `WriteBatch` that makes state, outbox rows and offsets durable together.
//! - [`runs`]: a partition's recent dedup entries as one row per commit and a map in memory,
//!   folded into table files ([`fold`]: writing the runs, folding them).
//! - [`deferred`]: `DeferredWrites`, writes recorded on a worker thread and applied later, in
//!   order, to that batch.
//! - [`error`]: `StateError`, classified by whether a retry can help.

pub mod checkpoint;
pub mod codec;
pub mod commit;
pub mod deferred;
pub mod error;
pub mod export;
mod fold;
pub mod keys;
pub mod memory;
mod migrate;
pub mod outbox;
pub(crate) mod parts;
mod runs;
pub mod store;
pub mod view;

pub use checkpoint::Checkpoint;
pub use commit::{CommitBatch, StagedBatch};
pub use deferred::DeferredWrites;
pub use error::StateError;
pub use export::{ConsistentPoint, ExportedFile, PartitionExport};
pub use fold::FoldStats;
pub use keys::{Namespace, PartitionId};
pub use memory::{MemBatch, MemStore};
pub use outbox::OutboxIndex;
pub use store::{
    KeyValue, MemoryUsage, Store, StoreOptions, DEFAULT_DEDUP_RUNS_MAX_ENTRIES, DEFAULT_MEMTABLE_BUDGET_BYTES,
};
pub use view::{StateStore, StateView, StateWrite};
