//! Opening the database and the reads tidemark makes: checkpoints and aggregates on restore,
//! batched dedup lookups per poll batch. No read happens per record on the hot path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use rocksdb::compaction_filter::Decision;
use rocksdb::{BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, Options, WriteOptions, DB};

use crate::codec;
use crate::{Checkpoint, CommitBatch, Namespace, PartitionId, StagedBatch, StateError};

/// An encoded key (without the partition and namespace prefix) and its encoded value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

type Horizons = Arc<RwLock<HashMap<[u8; PartitionId::PREFIX_LEN], i64>>>;

pub(crate) const CF_META: &str = "meta";
/// Dedup entries keyed by a 128-bit hash of the event id (22-byte keys, ~40 bytes an entry
/// on disk after compaction).
pub(crate) const CF_DEDUP: &str = "dedup-hashed";
/// Dedup entries of stores written before the hashed format, keyed by the raw event id.
/// Looked up (for misses only) while it holds anything; its entries expire like the others.
pub(crate) const CF_DEDUP_LEGACY: &str = "dedup";
pub(crate) const CF_AGGREGATES: &str = "aggregates";
pub(crate) const CF_OUTBOX: &str = "outbox";
/// Index of the outbox rows still to be delivered (see [`crate::outbox`]).
pub(crate) const CF_OUTBOX_PENDING: &str = "outbox-pending";
/// Final outbox rows by event time, for expiry (see [`crate::outbox`]).
pub(crate) const CF_OUTBOX_EXPIRY: &str = "outbox-expiry";

const OWNER_KEY: &[u8] = b"owner";
const CHECKPOINT_TAG: u8 = b'c';
const RECORD_TAG: u8 = b'r';

/// Tuning of the embedded database.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Identifies who may use the directory (topology name and consumer group).
    pub owner: String,
    /// The open leaves the directory unclaimed: the caller claims it ([`Store::claim`]) once
    /// it knows it will use it (`tidemark run` opens the store while it still checks the
    /// broker, and a refused start must not claim a fresh directory).
    pub claim_later: bool,
    /// Shared block cache for all column families.
    pub block_cache_bytes: usize,
    /// What the memtables (write buffers) of all column families may hold together; the
    /// largest is flushed when they reach it. Without a budget each of the seven column
    /// families may hold two 64 MiB memtables, and the RSS follows them up and down (measured:
    /// a sawtooth of 80 MB every four minutes at 400 events/s). 0: no budget (scratch stores,
    /// whose own memtable size is set apart).
    pub memtable_budget_bytes: usize,
    /// fsync every commit. Off only in benchmarks of the engine itself.
    pub sync_commits: bool,
    /// The topology's dedup retention: every dedup file is rewritten by compaction at least
    /// every half retention ([`dedup_rewrite_secs`]), so expired entries go within that time
    /// even where no new data pushes compaction over them. `None`: RocksDB's default.
    pub dedup_retention_ms: Option<i64>,
    /// A throwaway store that nothing recovers after a crash (the batch commands' dedup):
    /// no write-ahead log, bloom filters and indexes held in memory outside the block cache
    /// (lookups into a store of tens of millions of hashed ids otherwise read them from disk
    /// once they no longer fit the cache), and larger memtables, so fewer level-0 files.
    pub scratch: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            owner: "tidemark".into(),
            claim_later: false,
            block_cache_bytes: 256 << 20,
            memtable_budget_bytes: DEFAULT_MEMTABLE_BUDGET_BYTES,
            sync_commits: true,
            dedup_retention_ms: None,
            scratch: false,
        }
    }
}

/// The process's state store. `Sync`: the rebalance callback reads checkpoints while the
/// stream thread owns the writes.
pub struct Store {
    pub(crate) db: DB,
    path: PathBuf,
    write_opts: WriteOptions,
    /// Per partition: dedup entries first seen before this append time (ms) can never match
    /// again and may be dropped by compaction. Partitions absent from the map keep everything.
    dedup_horizons: Horizons,
    /// True while [`CF_DEDUP_LEGACY`] holds entries (a store upgraded from the raw-id format).
    legacy_dedup: AtomicBool,
}

/// How often compaction rewrites every dedup file, at the latest: half the retention,
/// between five minutes and thirty days.
pub fn dedup_rewrite_secs(retention_ms: i64) -> u64 {
    u64::try_from(retention_ms / 2 / 1000).unwrap_or(0).clamp(300, 30 * 86_400)
}

/// Every column family the store opens.
const ALL_CFS: [&str; 7] =
    [CF_META, CF_DEDUP, CF_DEDUP_LEGACY, CF_AGGREGATES, CF_OUTBOX_PENDING, CF_OUTBOX_EXPIRY, CF_OUTBOX];

/// Bytes the store holds in memory ([`Store::memory_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Active and immutable memtables (write buffers), bounded by their size × count.
    pub memtables: u64,
    /// Block cache in use (data blocks, and the filter and index blocks it holds), bounded
    /// by `block_cache_bytes`.
    pub block_cache: u64,
    /// Index and filter blocks held outside the block cache (scratch stores).
    pub table_readers: u64,
}

/// [`StoreOptions::memtable_budget_bytes`] unless configured (`tidemark run --state-memtable-mb`).
pub const DEFAULT_MEMTABLE_BUDGET_BYTES: usize = 64 << 20;

/// Memtable size of a scratch store's dedup column family (RocksDB's default is 64 MiB).
const SCRATCH_MEMTABLE_BYTES: usize = 128 << 20;

/// Bounds crash-recovery replay: the open after a crash replays what the logs hold beyond
/// the last flush, ~110 MB/s here (without flushing during the open; ~55 MB/s with), and it
/// is on the path of the first action after a restart. Beyond this total the column families
/// in the oldest log are flushed. With 64 MB the open took 300–500 ms of a ~0.8–1.1 s
/// kill → first action (recovery probes, 2026-12-05/06); 16 MB made it ~3× shorter.
const MAX_TOTAL_WAL_BYTES: u64 = 16 << 20;

impl Store {
    /// Opens (or creates) the store and checks that it belongs to `opts.owner`.
    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store, StateError> {
        let rocks = |source| StateError::Rocks { path: path.display().to_string(), source };
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(!opts.scratch);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);

        let mut cf_opts = Options::default();
        cf_opts.set_block_based_table_factory(&table);
        cf_opts.set_compression_type(rocksdb::DBCompressionType::Lz4);

        let dedup_horizons: Horizons = Arc::default();
        let mut dedup_opts = cf_opts.clone();
        if opts.scratch {
            dedup_opts.set_write_buffer_size(SCRATCH_MEMTABLE_BYTES);
        }
        // Nearly every lookup is a miss (a new id): a whole-key bloom filter in front of the
        // memtable answers it without walking the skip list (measured: 7 % of the stream
        // thread's CPU went to memtable searches before it).
        dedup_opts.set_memtable_whole_key_filtering(true);
        dedup_opts.set_memtable_prefix_bloom_ratio(0.05);
        // Compaction only reclaims space: lookups re-check the retention themselves, so what
        // a lookup decides never depends on whether compaction has run yet.
        let expiry = |horizons: Horizons| {
            move |_level: u32, key: &[u8], value: &[u8]| {
                let horizon = key
                    .get(..PartitionId::PREFIX_LEN)
                    .and_then(|prefix| horizons.read().ok().and_then(|h| h.get(prefix).copied()));
                match (horizon, decode_append_ms(value)) {
                    (Some(h), Some(ms)) if ms < h => Decision::Remove,
                    _ => Decision::Keep,
                }
            }
        };
        let mut legacy_opts = dedup_opts.clone();
        dedup_opts.set_compaction_filter("dedup-expiry", expiry(Arc::clone(&dedup_horizons)));
        legacy_opts.set_compaction_filter("dedup-expiry", expiry(Arc::clone(&dedup_horizons)));
        // The filter only sees what compaction rewrites: hashed keys spread every flush over
        // the whole key space, so the bottom level is rewritten only as fast as new data
        // pushes into it (measured: a 10-minute retention still grew at minute 20).
        if let Some(retention_ms) = opts.dedup_retention_ms {
            dedup_opts.set_periodic_compaction_seconds(dedup_rewrite_secs(retention_ms));
            legacy_opts.set_periodic_compaction_seconds(dedup_rewrite_secs(retention_ms));
        }

        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        db_opts.set_bytes_per_sync(1 << 20);
        // Restart time after a crash is WAL replay. A log file can only go once every column
        // family with data in it is flushed, and the small ones (meta, outbox) rarely fill a
        // memtable: 160 MB of logs piled up in 40 s at 20k/s and took 2.9 s to replay. Capping
        // the total forces those flushes.
        db_opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        if opts.memtable_budget_bytes > 0 && !opts.scratch {
            db_opts.set_db_write_buffer_size(opts.memtable_budget_bytes);
        }
        // The open after a crash is on the path of the first action (issue 33: kill -9 → first
        // action ≤ 1 s). It replays the logs into memtables and, by default, then flushes
        // them to new files and syncs them before it returns: kept as memtables instead (their
        // logs stay until a regular flush), without reading every file's statistics.
        db_opts.set_skip_stats_update_on_db_open(true);
        let db_opts = db_opts.get_options_from_string("avoid_flush_during_recovery=true").map_err(rocks)?;
        let cfs = vec![
            ColumnFamilyDescriptor::new(CF_META, cf_opts.clone()),
            ColumnFamilyDescriptor::new(CF_DEDUP, dedup_opts),
            ColumnFamilyDescriptor::new(CF_DEDUP_LEGACY, legacy_opts),
            ColumnFamilyDescriptor::new(CF_AGGREGATES, cf_opts.clone()),
            ColumnFamilyDescriptor::new(CF_OUTBOX_PENDING, cf_opts.clone()),
            ColumnFamilyDescriptor::new(CF_OUTBOX_EXPIRY, cf_opts.clone()),
            ColumnFamilyDescriptor::new(CF_OUTBOX, cf_opts),
        ];
        let db = DB::open_cf_descriptors(&db_opts, path, cfs).map_err(rocks)?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(opts.sync_commits && !opts.scratch);
        write_opts.disable_wal(opts.scratch);
        let store =
            Store { db, path: path.to_path_buf(), write_opts, dedup_horizons, legacy_dedup: AtomicBool::new(true) };
        store.refresh_legacy_dedup();
        if !opts.claim_later {
            store.claim(&opts.owner)?;
        }
        store.mark_outbox_indexed_if_empty()?;
        Ok(store)
    }

    /// Opens an existing store read-only, without taking its lock, so it works beside the
    /// process that owns it (`tidemark actions list`). It sees what was durable when it
    /// opened; it never writes (a write returns an error) and never creates a store.
    pub fn open_read_only(path: &Path) -> Result<Store, StateError> {
        let rocks = |source| StateError::Rocks { path: path.display().to_string(), source };
        let opts = Options::default();
        let cfs = DB::list_cf(&opts, path).map_err(rocks)?;
        let db = DB::open_cf_for_read_only(&opts, path, cfs, false).map_err(rocks)?;
        let store = Store {
            db,
            path: path.to_path_buf(),
            write_opts: WriteOptions::default(),
            dedup_horizons: Arc::default(),
            legacy_dedup: AtomicBool::new(true),
        };
        store.refresh_legacy_dedup();
        Ok(store)
    }

    /// Records `owner` as the directory's owner, or refuses when another one holds it.
    pub fn claim(&self, owner: &str) -> Result<(), StateError> {
        let meta = self.cf(CF_META);
        match self.db.get_cf(meta, OWNER_KEY).map_err(|e| self.rocks(e))? {
            Some(found) => {
                let found: String = codec::decode("store owner", &found)?;
                if found != owner {
                    return Err(StateError::Owner {
                        path: self.path.display().to_string(),
                        found,
                        expected: owner.into(),
                    });
                }
                Ok(())
            }
            None => {
                let mut w = WriteOptions::default();
                w.set_sync(true);
                self.db.put_cf_opt(meta, OWNER_KEY, codec::encode(owner)?, &w).map_err(|e| self.rocks(e))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn cf(&self, name: &str) -> &ColumnFamily {
        // The column families are created at open; a missing one is a programming error
        // that open() would already have reported.
        self.db.cf_handle(name).unwrap_or_else(|| panic!("column family {name} opened with the store"))
    }

    pub(crate) fn rocks(&self, source: rocksdb::Error) -> StateError {
        StateError::Rocks { path: self.path.display().to_string(), source }
    }

    pub(crate) fn checkpoint_key(p: PartitionId) -> Vec<u8> {
        let mut k = vec![CHECKPOINT_TAG];
        k.extend_from_slice(&p.prefix());
        k
    }

    pub(crate) fn record_key(name: &str) -> Vec<u8> {
        let mut k = vec![RECORD_TAG];
        k.extend_from_slice(name.as_bytes());
        k
    }

    /// A named record of a mode's own bookkeeping (e.g. micro-batch slice boundaries),
    /// written with [`CommitBatch::put_record`] in the same atomic commit as the state.
    pub fn record(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get_cf(self.cf(CF_META), Self::record_key(name)).map_err(|e| self.rocks(e))
    }

    /// The last committed checkpoint of a partition, `None` if it never committed here.
    pub fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
        self.db
            .get_cf(self.cf(CF_META), Self::checkpoint_key(p))
            .map_err(|e| self.rocks(e))?
            .map(|v| codec::decode("checkpoint", &v))
            .transpose()
    }

    /// Every partition with a committed checkpoint here, in order.
    pub fn checkpointed_partitions(&self) -> Result<Vec<PartitionId>, StateError> {
        let mut out = Vec::new();
        let from = [CHECKPOINT_TAG];
        for item in
            self.db.iterator_cf(self.cf(CF_META), rocksdb::IteratorMode::From(&from, rocksdb::Direction::Forward))
        {
            let (k, _) = item.map_err(|e| self.rocks(e))?;
            if k.first() != Some(&CHECKPOINT_TAG) {
                break;
            }
            let (Some(source), Some(partition)) = (k.get(1..3), k.get(3..1 + PartitionId::PREFIX_LEN)) else {
                continue;
            };
            let (Ok(source), Ok(partition)) = (source.try_into(), partition.try_into()) else { continue };
            out.push(PartitionId { source: u16::from_be_bytes(source), partition: i32::from_be_bytes(partition) });
        }
        Ok(out)
    }

    /// Looks up many event ids of one partition in one batched read. Returns the append time
    /// at which each id was first seen, if it is stored.
    pub fn dedup_lookup<S: AsRef<str>>(&self, p: PartitionId, ids: &[S]) -> Result<Vec<Option<i64>>, StateError> {
        let keys: Vec<[u8; DEDUP_KEY_LEN]> = ids.iter().map(|id| dedup_key(p, id.as_ref())).collect();
        let mut found: Vec<Option<i64>> = self
            .db
            .batched_multi_get_cf(self.cf(CF_DEDUP), &keys, false)
            .into_iter()
            .map(|r| r.map(|v| v.and_then(|v| decode_append_ms(&v))).map_err(|e| self.rocks(e)))
            .collect::<Result<_, _>>()?;
        if self.legacy_dedup.load(Ordering::Relaxed) {
            let misses: Vec<usize> = (0..found.len()).filter(|i| found[*i].is_none()).collect();
            let legacy: Vec<Vec<u8>> = misses.iter().map(|i| p.key(ids[*i].as_ref().as_bytes())).collect();
            let hits = self.db.batched_multi_get_cf(self.cf(CF_DEDUP_LEGACY), &legacy, false);
            for (i, r) in misses.into_iter().zip(hits) {
                found[i] = r.map_err(|e| self.rocks(e))?.and_then(|v| decode_append_ms(&v));
            }
        }
        Ok(found)
    }

    /// What the store holds in memory, from RocksDB's own accounting (summed over the
    /// column families; the block cache is shared, so it is read once).
    pub fn memory_usage(&self) -> MemoryUsage {
        let sum = |property: &str| -> u64 {
            ALL_CFS
                .iter()
                .filter_map(|name| self.db.property_int_value_cf(self.cf(name), property).ok().flatten())
                .sum()
        };
        MemoryUsage {
            memtables: sum("rocksdb.cur-size-all-mem-tables"),
            table_readers: sum("rocksdb.estimate-table-readers-mem"),
            block_cache: self
                .db
                .property_int_value_cf(self.cf(CF_META), "rocksdb.block-cache-usage")
                .ok()
                .flatten()
                .unwrap_or(0),
        }
    }

    /// Whether the raw-id dedup entries of an upgraded store are still looked up; they stop
    /// being looked up once compaction has dropped the last of them (checked at open and by
    /// [`Store::compact_dedup`]).
    pub fn has_legacy_dedup(&self) -> bool {
        self.legacy_dedup.load(Ordering::Relaxed)
    }

    fn refresh_legacy_dedup(&self) {
        let empty = self.db.iterator_cf(self.cf(CF_DEDUP_LEGACY), rocksdb::IteratorMode::Start).next().is_none();
        self.legacy_dedup.store(!empty, Ordering::Relaxed);
    }

    /// Every aggregate of one namespace in one partition, for restoring the in-memory cache.
    pub fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<KeyValue>, StateError> {
        self.scan_aggregates(p, ns, &[])
    }

    /// The aggregates of one namespace in one partition whose key starts with `key_prefix`,
    /// in key order; keys without the partition and namespace prefix.
    pub fn scan_aggregates(
        &self,
        p: PartitionId,
        ns: Namespace,
        key_prefix: &[u8],
    ) -> Result<Vec<KeyValue>, StateError> {
        let head = aggregate_prefix(p, ns).len();
        let mut prefix = aggregate_prefix(p, ns);
        prefix.extend_from_slice(key_prefix);
        let mut out = Vec::new();
        for item in self.db.prefix_iterator_cf(self.cf(CF_AGGREGATES), &prefix) {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            out.push((k[head..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// One aggregate by its exact key.
    pub fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let mut k = aggregate_prefix(p, ns);
        k.extend_from_slice(key);
        self.db.get_cf(self.cf(CF_AGGREGATES), k).map_err(|e| self.rocks(e))
    }

    /// One outbox row (encoded by the caller), if the idempotency key was ever produced here.
    pub fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get_cf(self.cf(CF_OUTBOX), p.key(key.as_bytes())).map_err(|e| self.rocks(e))
    }

    /// Every outbox row of a partition, in key order (restart: re-queue what is pending).
    pub fn outbox_scan(&self, p: PartitionId) -> Result<Vec<KeyValue>, StateError> {
        let prefix = p.prefix();
        let mut out = Vec::new();
        for item in self.db.prefix_iterator_cf(self.cf(CF_OUTBOX), prefix) {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            out.push((k[prefix.len()..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Every outbox row of every partition, in key order: `(partition, key, row)`.
    pub fn outbox_scan_all(&self) -> Result<Vec<(PartitionId, KeyValue)>, StateError> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_OUTBOX), rocksdb::IteratorMode::Start) {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            let (Some(source), Some(partition)) = (k.get(..2), k.get(2..PartitionId::PREFIX_LEN)) else { continue };
            let (Ok(source), Ok(partition)) = (source.try_into(), partition.try_into()) else { continue };
            let p = PartitionId { source: u16::from_be_bytes(source), partition: i32::from_be_bytes(partition) };
            out.push((p, (k[PartitionId::PREFIX_LEN..].to_vec(), v.to_vec())));
        }
        Ok(out)
    }

    /// Lets compaction drop a partition's dedup entries first seen before `append_ms`. Call it
    /// with a *committed* checkpoint's values only, so the stored state never depends on
    /// entries already dropped.
    pub fn set_dedup_horizon(&self, p: PartitionId, append_ms: i64) {
        if let Ok(mut h) = self.dedup_horizons.write() {
            let slot = h.entry(p.prefix()).or_insert(i64::MIN);
            *slot = (*slot).max(append_ms);
        }
    }

    pub fn batch(&self) -> CommitBatch<'_> {
        CommitBatch::new(self)
    }

    /// Makes a staged batch durable at once (see [`CommitBatch::stage`]).
    pub fn commit_staged(&self, batch: StagedBatch) -> Result<(), StateError> {
        self.write(batch.into_inner())
    }

    pub(crate) fn write(&self, batch: rocksdb::WriteBatch) -> Result<(), StateError> {
        self.db.write_opt(batch, &self.write_opts).map_err(|e| self.rocks(e))
    }

    /// `batch` into the write-ahead log without waiting for fsync: it survives the process
    /// (kill -9, a panic, OOM: the log is in the OS's page cache), not a crash of the host.
    pub(crate) fn write_unsynced(&self, batch: rocksdb::WriteBatch) -> Result<(), StateError> {
        self.db.write_opt(batch, &WriteOptions::default()).map_err(|e| self.rocks(e))
    }

    /// Removes every trace of a partition (used before rebuilding it from the log).
    pub fn drop_partition(&self, p: PartitionId) -> Result<(), StateError> {
        let mut batch = rocksdb::WriteBatch::default();
        for cf in [CF_DEDUP, CF_DEDUP_LEGACY, CF_AGGREGATES, CF_OUTBOX, CF_OUTBOX_PENDING, CF_OUTBOX_EXPIRY] {
            batch.delete_range_cf(self.cf(cf), p.prefix().to_vec(), p.prefix_end());
        }
        batch.delete_cf(self.cf(CF_META), Self::checkpoint_key(p));
        self.write(batch)
    }

    /// Forces a compaction of the dedup column family (tests and maintenance).
    pub fn compact_dedup(&self) {
        for cf in [CF_DEDUP, CF_DEDUP_LEGACY] {
            self.db.compact_range_cf(self.cf(cf), None::<&[u8]>, None::<&[u8]>);
        }
        self.refresh_legacy_dedup();
    }
}

/// Partition prefix + 128-bit XXH3 of the event id.
pub(crate) const DEDUP_KEY_LEN: usize = PartitionId::PREFIX_LEN + 16;

/// The dedup key of an event id: its partition's prefix and a 128-bit XXH3 hash of the id.
/// Ids are at most 256 bytes (SPEC §1.3) but typically 20–40; the hash makes every key 22
/// bytes and spreads them evenly. Two distinct ids of one partition collide with probability
/// ~n²/2¹²⁹ (10¹⁰ ids in a retention: ~10⁻¹⁹), in which case the second is taken for a
/// duplicate. XXH3 is a fixed, platform-independent function: keys never change.
pub(crate) fn dedup_key(p: PartitionId, event_id: &str) -> [u8; DEDUP_KEY_LEN] {
    let mut k = [0u8; DEDUP_KEY_LEN];
    k[..PartitionId::PREFIX_LEN].copy_from_slice(&p.prefix());
    k[PartitionId::PREFIX_LEN..].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(event_id.as_bytes()).to_be_bytes());
    k
}

pub(crate) fn aggregate_prefix(p: PartitionId, ns: Namespace) -> Vec<u8> {
    p.key(&[ns as u8])
}

pub(crate) fn decode_append_ms(v: &[u8]) -> Option<i64> {
    v.try_into().ok().map(i64::from_le_bytes)
}

#[cfg(test)]
mod dedup_format_tests {
    use super::*;

    #[test]
    fn every_dedup_key_is_the_partition_prefix_and_sixteen_hash_bytes_whatever_the_id_length() {
        let p = PartitionId::orders(3);
        for id in ["e", "e-7f3a0000-1111-2222-3333-444455556666", &"x".repeat(256)] {
            let k = dedup_key(p, id);
            assert_eq!(k.len(), 22);
            assert_eq!(k[..6], p.prefix());
        }
        assert_ne!(dedup_key(p, "e-1"), dedup_key(p, "e-2"));
        assert_ne!(dedup_key(p, "e-1"), dedup_key(PartitionId::orders(4), "e-1"));
    }

    #[test]
    fn entries_of_an_upgraded_store_in_the_raw_id_format_are_still_found_until_they_expire() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(0);
        {
            let store = Store::open(dir.path(), &StoreOptions::default())?;
            assert!(!store.has_legacy_dedup(), "a new store has no raw-id entries");
            // What a store written before the hashed format holds.
            store
                .db
                .put_cf(store.cf(CF_DEDUP_LEGACY), p.key(b"e-old"), 100i64.to_le_bytes())
                .map_err(|e| store.rocks(e))?;
            let mut b = store.batch();
            b.put_dedup(p, "e-new", 900);
            b.commit()?;
        }
        let store = Store::open(dir.path(), &StoreOptions::default())?;
        assert!(store.has_legacy_dedup());
        assert_eq!(store.dedup_lookup(p, &["e-old", "e-new", "e-none"])?, vec![Some(100), Some(900), None]);
        store.set_dedup_horizon(p, 500);
        store.compact_dedup();
        assert!(
            !store.has_legacy_dedup(),
            "expired raw-id entries are dropped by compaction, then no longer looked up"
        );
        assert_eq!(store.dedup_lookup(p, &["e-old", "e-new"])?, vec![None, Some(900)]);
        Ok(())
    }

    #[test]
    fn dedup_files_are_rewritten_every_half_retention_within_bounds() {
        use super::dedup_rewrite_secs;
        assert_eq!(dedup_rewrite_secs(7 * 86_400_000), 302_400, "a week: every 3.5 days");
        assert_eq!(dedup_rewrite_secs(20 * 60_000), 600, "20 minutes: every 10 minutes");
        assert_eq!(dedup_rewrite_secs(60_000), 300, "never more often than every 5 minutes");
        assert_eq!(dedup_rewrite_secs(365 * 86_400_000), 30 * 86_400, "never less often than monthly");
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn memory_usage_counts_what_the_memtables_and_the_block_cache_hold() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions { sync_commits: false, ..StoreOptions::default() })?;
        let empty = store.memory_usage();
        let p = PartitionId::orders(0);
        let mut batch = store.batch();
        for i in 0..10_000 {
            batch.put_dedup(p, &format!("e-{i}"), 1_000);
        }
        batch.commit()?;
        let written = store.memory_usage();
        assert!(written.memtables > empty.memtables + 10_000 * 22, "{empty:?} then {written:?}");
        store.db.flush_cf(store.cf(CF_DEDUP)).map_err(|e| store.rocks(e))?;
        let ids: Vec<String> = (0..10_000).map(|i| format!("e-{i}")).collect();
        assert!(store.dedup_lookup(p, &ids)?.iter().all(Option::is_some));
        let read = store.memory_usage();
        assert!(read.block_cache > 10_000 * 22 / 2, "blocks read through the cache: {read:?}");
        assert!(read.memtables < written.memtables, "flushed: {written:?} then {read:?}");
        Ok(())
    }

    /// Writes `n` dedup entries of partition `orders[0]` in batches of 1,000, then returns the
    /// memtables' size once background flushes have had up to 10 s to bring it under `under`.
    fn memtables_after_writing(store: &Store, n: usize, under: u64) -> Result<u64, StateError> {
        let p = PartitionId::orders(0);
        for chunk in 0..n / 1000 {
            let mut batch = store.batch();
            for i in 0..1000 {
                batch.put_dedup(p, &format!("event-{chunk}-{i}-with-a-longer-id"), 1_000);
            }
            batch.commit()?;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let m = store.memory_usage().memtables;
            if m <= under || std::time::Instant::now() > deadline {
                return Ok(m);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    #[test]
    fn the_memtables_of_all_column_families_stay_within_the_budget() -> Result<(), StateError> {
        let budget: u64 = 8 << 20;
        let dir = tempfile::tempdir().expect("tmp");
        let opts =
            StoreOptions { sync_commits: false, memtable_budget_bytes: budget as usize, ..StoreOptions::default() };
        let store = Store::open(dir.path(), &opts)?;
        let held = memtables_after_writing(&store, 400_000, budget)?;
        assert!(held <= 2 * budget, "an 8 MiB budget: {held} bytes of memtables after ~30 MB written");

        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions { sync_commits: false, ..StoreOptions::default() })?;
        let held = memtables_after_writing(&store, 400_000, u64::MAX)?;
        assert!(held > 2 * budget, "the default 64 MiB budget holds what was written: {held} bytes");
        Ok(())
    }
}
