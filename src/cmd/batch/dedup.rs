//! Dedup for `batch close|adjust` and the shadow replay's batch fold, in bounded memory
//! (issue 15 item 3): the counted event ids live in a throwaway RocksDB store, keyed like
//! the stream's (partition prefix + XXH3-128 of the event id, [`Store::dedup_lookup`]).
//!
//! Dedup is per partition, as in the stream, so each partition gets its own scratch store
//! ([`DiskDedup::partition`]), deleted when its fold ends: the store holds one partition's
//! ids, never the range's (a 100 M-event range over 4 partitions: 25 M ids at a time).
//!
//! Records are folded in chunks of [`CHUNK`]: a chunk is normalised, its event ids are
//! looked up in one batched read, the chunk is folded in offset order with the ids counted
//! inside it kept in memory, and those are written back in one batch. Memory is the chunk
//! plus RocksDB's memtable, filters and caches, whatever the length of the range; the rule is
//! [`finance::is_duplicate`], as in the stream.

use std::collections::HashMap;

use tidemark_state::{PartitionId, Store, StoreOptions};
use tidemark_topology::event::CanonicalEvent;
use tidemark_topology::finance::{self, DedupScope};
use tidemark_topology::reject::Rejection;

use crate::scratch::Scratch;

/// Records per batched lookup.
pub const CHUNK: usize = 16_384;

/// A normalised record: the event or why it was rejected, and its append time.
pub type Normalized = (Result<CanonicalEvent, Rejection>, i64);

/// How the batch commands dedup: the retention, and the records per batched lookup.
pub struct DiskDedup {
    retention_ms: i64,
    chunk: usize,
}

/// The counted event ids of one partition, in a scratch store deleted on drop.
pub struct PartitionDedup {
    id: PartitionId,
    store: Store,
    retention_ms: i64,
    chunk: usize,
    _dir: Scratch,
}

impl DiskDedup {
    pub fn new(retention_ms: i64) -> anyhow::Result<DiskDedup> {
        Ok(DiskDedup { retention_ms, chunk: CHUNK })
    }

    /// Records per batched lookup instead of [`CHUNK`] (tests cut ranges into many chunks).
    #[cfg(test)]
    pub fn with_chunk(mut self, records: usize) -> DiskDedup {
        self.chunk = records.max(1);
        self
    }

    /// An empty scratch store for `partition`'s ids. Every fold of that partition (an
    /// adjustment primes it with the earlier range, then folds the new one) goes through it.
    pub fn partition(&self, partition: i32) -> anyhow::Result<PartitionDedup> {
        // Locked while in use; a killed run's directory is swept by the next one.
        let dir = Scratch::create("dedup")?;
        // Throwaway: nothing to recover after a crash (no WAL, no fsync).
        let opts = StoreOptions {
            owner: "batch-dedup".into(),
            block_cache_bytes: 64 << 20,
            sync_commits: false,
            scratch: true,
            // Like its larger memtables: fewer, larger level-0 files (~35 MB of map).
            dedup_runs_max_entries: 1 << 20,
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), &opts)?;
        Ok(PartitionDedup {
            id: PartitionId::orders(partition),
            store,
            retention_ms: self.retention_ms,
            chunk: self.chunk,
            _dir: dir,
        })
    }
}

impl PartitionDedup {
    /// Folds the partition's records, read by `read` in offset order: `normalize` each, then
    /// `apply` each with a dedup scope in which its chunk's ids were looked up at once.
    pub fn fold<N, A>(
        &self,
        read: impl FnOnce(&mut dyn FnMut(&[u8], i64)) -> anyhow::Result<()>,
        normalize: N,
        mut apply: A,
    ) -> anyhow::Result<()>
    where
        N: Fn(&[u8], i64) -> Result<CanonicalEvent, Rejection>,
        A: FnMut(&mut dyn DedupScope, &Normalized),
    {
        let mut chunk: Vec<Normalized> = Vec::with_capacity(self.chunk);
        let mut failed: Option<anyhow::Error> = None;
        read(&mut |value, append_ms| {
            if failed.is_some() {
                return;
            }
            chunk.push((normalize(value, append_ms), append_ms));
            if chunk.len() >= self.chunk {
                failed = self.fold_chunk(&mut chunk, &mut apply).err();
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        self.fold_chunk(&mut chunk, &mut apply)
    }

    fn fold_chunk<A>(&self, chunk: &mut Vec<Normalized>, apply: &mut A) -> anyhow::Result<()>
    where
        A: FnMut(&mut dyn DedupScope, &Normalized),
    {
        let ids: Vec<&str> = chunk.iter().filter_map(|(e, _)| e.as_ref().ok()).map(|e| e.event_id.as_str()).collect();
        let stored = self.store.dedup_lookup(self.id, &ids)?;
        let mut scope = ChunkScope {
            retention_ms: self.retention_ms,
            stored: ids.iter().map(|s| s.to_string()).zip(stored).collect(),
            counted: HashMap::new(),
        };
        for record in chunk.iter() {
            apply(&mut scope, record);
        }
        let mut batch = self.store.batch();
        for (event_id, append_ms) in &scope.counted {
            batch.put_dedup(self.id, event_id, *append_ms);
        }
        batch.commit()?;
        chunk.clear();
        Ok(())
    }
}

/// One chunk's view: what the store held for its ids, and what the chunk counted since.
struct ChunkScope {
    retention_ms: i64,
    stored: HashMap<String, Option<i64>>,
    counted: HashMap<String, i64>,
}

impl DedupScope for ChunkScope {
    fn first_time(&mut self, event_id: &str, append_ms: i64) -> bool {
        let first_seen = self.counted.get(event_id).copied().or_else(|| self.stored.get(event_id).copied().flatten());
        if finance::is_duplicate(first_seen, append_ms, self.retention_ms) {
            return false;
        }
        self.counted.insert(event_id.to_string(), append_ms);
        true
    }
}
