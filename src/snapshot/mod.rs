//! Per-partition state snapshots in object storage (S3-compatible, GCS, Azure) or a shared
//! directory, through one code path: a partition that moves to another
//! pod, or whose volume is lost, is restored from its newest snapshot and replays only the
//! log after it, instead of the whole log (SPEC §3, §4; docs/state-movement.md).
//!
//! ```text
//!  stream thread ── commits ──▶ RocksDB ──(every --snapshot-interval, one consistent point)──▶ taker
//!                                                                                               │
//!   <snapshot-dir>/<topology>/<group>/<role>-<p>/<next offset>/{*.sst, manifest.json last} ◀────┘
//!        │
//!        └──(assignment of a partition with no newer local state)──▶ restore: import, then
//!           read the audit topic since the snapshot (SKU partitions) ──▶ actions::Settled
//! ```
//!
//! Module map:
//! - [`store`]: the bucket or directory behind `--snapshot-dir`, as blocking calls on a
//!   runtime of its own (the callers are plain threads).
//! - [`error`]: failures classified by operation (the `op` of the failure metric).
//! - [`layout`]: object layout, manifest, publish (manifest last), newest, pruning.
//! - [`export`]: one partition's export and publication; the hand-over export of partitions
//!   a rebalance revokes, right after their last commit.
//! - [`taker`]: the snapshot thread (rounds every interval, and a final one at shutdown).
//! - [`restore`]: import on assignment, and the audit read that keeps completed actions
//!   from being sent again.

pub mod error;
pub mod export;
pub mod layout;
pub mod restore;
pub mod store;
pub mod taker;

use std::sync::Arc;
use std::time::Duration;

pub use error::{Op, SnapshotError};
pub use export::Handover;
pub use layout::{Layout, Manifest};
pub use restore::Restorer;
pub use store::Bucket;
pub use taker::Taker;

/// `tidemark run --snapshot-dir`, `--snapshot-interval`, `--snapshot-keep`.
#[derive(Clone, Debug)]
pub struct SnapshotConfig {
    /// Where `--snapshot-dir` points: a bucket or a directory.
    pub bucket: Arc<Bucket>,
    pub interval: Duration,
    pub keep: usize,
    /// The topology's name and the consumer group: one snapshot tree per pair.
    pub topology: String,
    pub group: String,
    /// The topic of each source (`PartitionId::source` is the index): written into every
    /// manifest, and a snapshot of another topic is never imported.
    pub topics: crate::tasks::Sources,
}

impl SnapshotConfig {
    pub fn layout(&self) -> Layout {
        Layout::new(Arc::clone(&self.bucket), &self.topology, &self.group)
    }

    pub fn topic_of(&self, p: tidemark_state::PartitionId) -> &str {
        self.topics.topic_of(p)
    }
}
