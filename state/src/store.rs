//! Opening the database and the reads tidemark makes: checkpoints and aggregates on restore,
//! batched dedup lookups per poll batch. No read happens per record on the hot path.
//!
//! Layout (version 2): the `meta` column family (owner, named records, the layout version)
//! and one column family per partition ([`crate::parts`]). A store of layout 1 (one column
//! family per concern, keys prefixed by the partition) is moved into it at open
//! ([`crate::migrate`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use rocksdb::compaction_filter::Decision;
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, Direction, IteratorMode, Options, ReadOptions,
    WriteOptions, DB,
};

use crate::codec;
use crate::fold::Folds;
use crate::parts::{
    self, PartCf, Parts, TAG_AGGREGATE, TAG_CHECKPOINT, TAG_DEDUP, TAG_DEDUP_RAW, TAG_DEDUP_RUN, TAG_OUTBOX,
};
use crate::{Checkpoint, CommitBatch, Namespace, PartitionId, StagedBatch, StateError};

/// An encoded key (without the partition and namespace prefix) and its encoded value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

type Horizons = Arc<RwLock<HashMap<PartitionId, i64>>>;

pub(crate) const CF_META: &str = "meta";

const OWNER_KEY: &[u8] = b"owner";
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
    /// largest is flushed when they reach it. Without a budget each partition's column
    /// family may hold two memtables, and the RSS follows them up and down (measured: a
    /// sawtooth of 80 MB every four minutes at 400 events/s). 0: no budget (scratch stores,
    /// whose own memtable size is set apart).
    pub memtable_budget_bytes: usize,
    /// fsync every commit. Off only in benchmarks of the engine itself.
    pub sync_commits: bool,
    /// The topology's dedup retention: every file is rewritten by compaction at least
    /// every half retention ([`dedup_rewrite_secs`]), so expired entries go within that time
    /// even where no new data pushes compaction over them. `None`: RocksDB's default.
    pub dedup_retention_ms: Option<i64>,
    /// A throwaway store that nothing recovers after a crash (the batch commands' dedup):
    /// no write-ahead log, bloom filters and indexes held in memory outside the block cache
    /// (lookups into a store of tens of millions of hashed ids otherwise read them from disk
    /// once they no longer fit the cache), and larger memtables, so fewer level-0 files.
    pub scratch: bool,
    /// The recent dedup entries all partitions may hold in memory together before the
    /// largest partition's are folded into a table file ([`crate::runs`]): ~25 bytes each
    /// there (up to twice the budget while folds run), and every one not folded yet is read
    /// back at open.
    pub dedup_runs_max_entries: usize,
}

/// [`StoreOptions::dedup_runs_max_entries`] unless set: ~13–26 MiB of maps, ~12 MB of runs read
/// back at open (where the memtables held the same entries in ~30 MB before runs).
pub const DEFAULT_DEDUP_RUNS_MAX_ENTRIES: usize = 1 << 19;

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
            dedup_runs_max_entries: DEFAULT_DEDUP_RUNS_MAX_ENTRIES,
        }
    }
}

/// The process's state store. `Sync`: the rebalance callback reads checkpoints while the
/// stream thread owns the writes.
///
/// Field order matters: the partition handles drop before the database closes, and the
/// options of column families created while open drop after it.
pub struct Store {
    pub(crate) parts: Parts,
    pub(crate) db: DB,
    path: PathBuf,
    write_opts: WriteOptions,
    pub(crate) tuning: Tuning,
    /// Per partition: dedup entries first seen before this append time (ms) can never match
    /// again and may be dropped by compaction. Partitions absent from the map keep everything.
    pub(crate) dedup_horizons: Horizons,
    /// True while some partition holds dedup entries in the raw-id format (an upgraded store).
    legacy_dedup: AtomicBool,
    /// The options of partition column families created while open: their compaction
    /// filters must live as long as the database, so they drop after it.
    pub(crate) created_options: std::sync::Mutex<Vec<Options>>,
    /// Folds of dedup runs into table files: how many, and what failed ([`crate::fold`]).
    pub(crate) folds: Folds,
}

/// What every partition column family is opened or created with.
#[derive(Clone)]
pub(crate) struct Tuning {
    cache: Cache,
    scratch: bool,
    dedup_retention_ms: Option<i64>,
    pub(crate) runs_max_entries: usize,
}

/// How often compaction rewrites every dedup file, at the latest: half the retention,
/// between five minutes and thirty days.
pub fn dedup_rewrite_secs(retention_ms: i64) -> u64 {
    u64::try_from(retention_ms / 2 / 1000).unwrap_or(0).clamp(300, 30 * 86_400)
}

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
    /// Dedup entries not folded into table files yet ([`crate::runs`]), bounded by
    /// [`StoreOptions::dedup_runs_max_entries`] (twice that while folds run).
    pub dedup_runs: u64,
}

/// [`StoreOptions::memtable_budget_bytes`] unless configured (`tidemark run --state-memtable-mb`).
pub const DEFAULT_MEMTABLE_BUDGET_BYTES: usize = 64 << 20;

/// Memtable size of a partition's column family (RocksDB's default is 64 MiB): with one
/// column family per partition, the budget above is what bounds them together, and a
/// smaller memtable keeps its up-front bloom filter (5 % of it) and arena blocks small.
const PART_MEMTABLE_BYTES: usize = 16 << 20;
/// The same for a scratch store (batch commands): fewer, larger level-0 files.
const SCRATCH_MEMTABLE_BYTES: usize = 128 << 20;

/// Bounds crash-recovery replay: the open after a crash replays what the logs hold beyond
/// the last flush, ~110 MB/s here (without flushing during the open; ~55 MB/s with), and it
/// is on the path of the first action after a restart. Beyond this total the column families
/// in the oldest log are flushed. With 64 MB the open took 300–500 ms of a ~0.8–1.1 s
/// kill → first action (recovery probes, 2026-12-05/06); 16 MB made it ~3× shorter.
const MAX_TOTAL_WAL_BYTES: u64 = 16 << 20;

/// RocksDB's memtable insert hint per key tag (the first byte): the inserts of one tag in a
/// write batch continue from where the one before went instead of searching the skip list
/// from its top, which pays off when they come in key order, as a batch's aggregates do (a
/// task's maps are ordered) and its dedup runs (ascending numbers). Dedup entries were keys of
/// their own here until runs ([`crate::runs`]), the inserts this hint was set for. The option
/// exists only as an options-string setting;
/// set first, on fresh options, so nothing set afterwards (a compaction filter, a table
/// factory) is copied by RocksDB from options it does not own.
const INSERT_HINT_BY_TAG: &str = "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.1";

/// Options with [`INSERT_HINT_BY_TAG`]; RocksDB accepts it (a test says so), and would it
/// not, only the inserts' speed would differ.
fn hinted_options() -> Options {
    Options::default().get_options_from_string(INSERT_HINT_BY_TAG).unwrap_or_default()
}

/// The options of partition `p`'s column family: bloom filters on whole keys (nearly every
/// dedup lookup is a miss), LZ4, and a compaction filter that drops the partition's dedup
/// entries older than its horizon.
fn part_options(t: &Tuning, horizons: &Horizons, p: PartitionId) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&t.cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(!t.scratch);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut opts = hinted_options();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    opts.set_write_buffer_size(if t.scratch { SCRATCH_MEMTABLE_BYTES } else { PART_MEMTABLE_BYTES });
    // A whole-key bloom filter in front of the memtable answers a miss without walking the
    // skip list (measured: 7 % of the stream thread's CPU went to memtable searches before).
    opts.set_memtable_whole_key_filtering(true);
    opts.set_memtable_prefix_bloom_ratio(0.05);
    // Compaction only reclaims space: lookups re-check the retention themselves, so what a
    // lookup decides never depends on whether compaction has run yet.
    let horizons = Arc::clone(horizons);
    opts.set_compaction_filter("dedup-expiry", move |_level: u32, key: &[u8], value: &[u8]| {
        if !matches!(key.first(), Some(&TAG_DEDUP) | Some(&TAG_DEDUP_RAW)) {
            return Decision::Keep;
        }
        let horizon = horizons.read().ok().and_then(|h| h.get(&p).copied());
        match (horizon, decode_append_ms(value)) {
            (Some(h), Some(ms)) if ms < h => Decision::Remove,
            _ => Decision::Keep,
        }
    });
    // The filter only sees what compaction rewrites: hashed keys spread every flush over
    // the whole key space, so the bottom level is rewritten only as fast as new data pushes
    // into it (measured: a 10-minute retention still grew at minute 20).
    if let Some(retention_ms) = t.dedup_retention_ms {
        opts.set_periodic_compaction_seconds(dedup_rewrite_secs(retention_ms));
    }
    opts
}

impl Store {
    /// Opens (or creates) the store and checks that it belongs to `opts.owner`.
    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store, StateError> {
        let rocks = |source| StateError::Rocks { path: path.display().to_string(), source };
        let tuning = Tuning {
            cache: Cache::new_lru_cache(opts.block_cache_bytes),
            scratch: opts.scratch,
            dedup_retention_ms: opts.dedup_retention_ms,
            runs_max_entries: opts.dedup_runs_max_entries.max(1),
        };
        let dedup_horizons: Horizons = Arc::default();

        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        db_opts.set_bytes_per_sync(1 << 20);
        // Restart time after a crash is WAL replay. A log file can only go once every column
        // family with data in it is flushed, and the small ones rarely fill a memtable: 160 MB
        // of logs piled up in 40 s at 20k/s and took 2.9 s to replay. Capping the total
        // forces those flushes.
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

        let existing = if path.join("CURRENT").exists() {
            DB::list_cf(&Options::default(), path).map_err(rocks)?
        } else {
            Vec::new()
        };
        let mut descriptors = vec![ColumnFamilyDescriptor::new(CF_META, Options::default())];
        let mut found_parts: Vec<(PartitionId, u32, String)> = Vec::new();
        for name in &existing {
            if name == CF_META || name == "default" {
                continue;
            }
            if let Some((p, generation)) = parts::parse_cf_name(name) {
                descriptors.push(ColumnFamilyDescriptor::new(name, part_options(&tuning, &dedup_horizons, p)));
                found_parts.push((p, generation, name.clone()));
            } else {
                // Layout 1's column families, moved into partition ones below.
                descriptors.push(ColumnFamilyDescriptor::new(name, Options::default()));
            }
        }
        let db = DB::open_cf_descriptors(&db_opts, path, descriptors).map_err(rocks)?;
        // Table files a fold was writing when the process ended: their runs are still
        // stored, and are folded again.
        crate::fold::clear_unfinished(path)?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(opts.sync_commits && !opts.scratch);
        write_opts.disable_wal(opts.scratch);
        let store = Store {
            parts: Parts::default(),
            db,
            path: path.to_path_buf(),
            write_opts,
            tuning,
            dedup_horizons,
            legacy_dedup: AtomicBool::new(true),
            created_options: std::sync::Mutex::default(),
            folds: Folds::default(),
        };
        store.adopt_parts(found_parts)?;
        crate::migrate::from_layout_1(&store, &existing)?;
        store.refresh_legacy_dedup();
        if !opts.claim_later {
            store.claim(&opts.owner)?;
        }
        store.mark_outbox_indexed_if_empty()?;
        Ok(store)
    }

    /// Registers the partition column families opened with the database: per partition the
    /// newest generation that holds a checkpoint (an import that crashed half-way leaves a
    /// newer one without), the others dropped.
    fn adopt_parts(&self, mut found: Vec<(PartitionId, u32, String)>) -> Result<(), StateError> {
        found.sort_by_key(|f| (f.0, std::cmp::Reverse(f.1)));
        let mut chosen: HashMap<PartitionId, u32> = HashMap::new();
        for (p, generation, name) in &found {
            let Some(cf) = self.db.cf_handle(name) else { continue };
            let has_checkpoint = self.db.get_cf(cf, [TAG_CHECKPOINT]).map_err(|e| self.rocks(e))?.is_some();
            if has_checkpoint && !chosen.contains_key(p) {
                chosen.insert(*p, *generation);
            }
        }
        for (p, generation, name) in &found {
            if !chosen.contains_key(p) {
                chosen.insert(*p, *generation);
            }
            let Some(cf) = self.db.cf_handle(name) else { continue };
            let part = PartCf::borrowed(*p, *generation, name.clone(), cf);
            if chosen.get(p) == Some(generation) {
                self.load_runs(&part)?;
                self.parts.insert(part);
            } else {
                self.drop_cf_raw(&part)?;
            }
        }
        Ok(())
    }

    pub(crate) fn part_options(&self, p: PartitionId) -> Options {
        part_options(&self.tuning, &self.dedup_horizons, p)
    }

    /// Opens an existing store read-only, without taking its lock, so it works beside the
    /// process that owns it (`tidemark actions list`). It sees what was durable when it
    /// opened; it never writes (a write returns an error) and never creates a store. A store
    /// of layout 1 must be opened once by `tidemark run` first (which moves it to layout 2).
    pub fn open_read_only(path: &Path) -> Result<Store, StateError> {
        let rocks = |source| StateError::Rocks { path: path.display().to_string(), source };
        let opts = Options::default();
        let cfs = DB::list_cf(&opts, path).map_err(rocks)?;
        let db = DB::open_cf_for_read_only(&opts, path, &cfs, false).map_err(rocks)?;
        let store = Store {
            parts: Parts::default(),
            db,
            path: path.to_path_buf(),
            write_opts: WriteOptions::default(),
            tuning: Tuning {
                cache: Cache::new_lru_cache(8 << 20),
                scratch: false,
                dedup_retention_ms: None,
                runs_max_entries: usize::MAX,
            },
            dedup_horizons: Arc::default(),
            legacy_dedup: AtomicBool::new(true),
            created_options: std::sync::Mutex::default(),
            folds: Folds::default(),
        };
        let mut newest: HashMap<PartitionId, (u32, String)> = HashMap::new();
        for name in &cfs {
            if let Some((p, generation)) = parts::parse_cf_name(name) {
                let slot = newest.entry(p).or_insert((generation, name.clone()));
                if generation > slot.0 {
                    *slot = (generation, name.clone());
                }
            }
        }
        for (p, (generation, name)) in newest {
            if let Some(cf) = store.db.cf_handle(&name) {
                let part = PartCf::borrowed(p, generation, name.clone(), cf);
                store.load_runs(&part)?;
                store.parts.insert(part);
            }
        }
        store.refresh_legacy_dedup();
        Ok(store)
    }

    /// Records `owner` as the directory's owner, or refuses when another one holds it.
    pub fn claim(&self, owner: &str) -> Result<(), StateError> {
        let meta = self.meta();
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

    /// RocksDB's identity of this store (its `IDENTITY` file, written at creation): with a
    /// file's number it names that file uniquely across stores, as RocksDB never reuses a
    /// number within a store. A wiped volume gets a new identity.
    pub fn identity(&self) -> Result<String, StateError> {
        let path = self.path.join("IDENTITY");
        let raw = std::fs::read_to_string(&path)
            .map_err(|source| StateError::Io { path: path.display().to_string(), source })?;
        let id = raw.trim();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(StateError::Decode { what: "store identity", detail: format!("{}: {id:?}", path.display()) });
        }
        Ok(id.to_string())
    }

    pub(crate) fn meta(&self) -> &ColumnFamily {
        // Opened (and created when missing) with the store; a missing one is a programming
        // error that open() would already have reported.
        self.db.cf_handle(CF_META).unwrap_or_else(|| panic!("column family {CF_META} opened with the store"))
    }

    pub(crate) fn rocks(&self, source: rocksdb::Error) -> StateError {
        StateError::Rocks { path: self.path.display().to_string(), source }
    }

    pub(crate) fn record_key(name: &str) -> Vec<u8> {
        let mut k = vec![RECORD_TAG];
        k.extend_from_slice(name.as_bytes());
        k
    }

    /// A named record of a mode's own bookkeeping (e.g. micro-batch slice boundaries),
    /// written with [`CommitBatch::put_record`] in the same atomic commit as the state.
    pub fn record(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get_cf(self.meta(), Self::record_key(name)).map_err(|e| self.rocks(e))
    }

    /// One key of partition `p`'s column family; `None` when `p` has no state here.
    pub(crate) fn part_get(&self, p: PartitionId, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.part(p) {
            Some(cf) => self.db.get_cf(&*cf, key).map_err(|e| self.rocks(e)),
            None => Ok(None),
        }
    }

    /// The last committed checkpoint of a partition, `None` if it never committed here.
    pub fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
        self.part_get(p, &[TAG_CHECKPOINT])?.map(|v| codec::decode("checkpoint", &v)).transpose()
    }

    /// Every partition with a committed checkpoint here, in order.
    pub fn checkpointed_partitions(&self) -> Result<Vec<PartitionId>, StateError> {
        let mut out = Vec::new();
        for cf in self.parts.all() {
            if self.db.get_cf(&*cf, [TAG_CHECKPOINT]).map_err(|e| self.rocks(e))?.is_some() {
                out.push(cf.p);
            }
        }
        Ok(out)
    }

    /// Every key of `tag` in `cf` that starts with `tag` + `prefix`, in key order, the tag
    /// stripped: `(key, value)`.
    pub(crate) fn scan_tag(&self, cf: &PartCf, tag: u8, prefix: &[u8]) -> Result<Vec<KeyValue>, StateError> {
        let start = parts::tagged(tag, prefix);
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(parts::tag_end(tag));
        let mut out = Vec::new();
        for item in self.db.iterator_cf_opt(cf, read, IteratorMode::From(&start, Direction::Forward)) {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            if !k.starts_with(&start) {
                break;
            }
            out.push((k[1..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Looks up many event ids of one partition in one batched read. Returns the append time
    /// at which each id was first seen, if it is stored.
    pub fn dedup_lookup<S: AsRef<str>>(&self, p: PartitionId, ids: &[S]) -> Result<Vec<Option<i64>>, StateError> {
        let Some(cf) = self.part(p) else { return Ok(vec![None; ids.len()]) };
        let mut found: Vec<Option<i64>> = vec![None; ids.len()];
        let mut asked: Vec<(u128, u32)> = ids.iter().zip(0u32..).map(|(id, i)| (dedup_hash(id.as_ref()), i)).collect();
        // The runs not folded yet answer from memory ([`crate::runs`]); the rest is in the
        // column family's files (and, in a store written before runs, its memtable).
        cf.runs.lookup(&asked, &mut found);
        asked.retain(|(_, i)| found[*i as usize].is_none());
        // Looked up in key order, sorted here as integers: RocksDB's own sort of the keys
        // (`sorted_input = false`: an introsort through its comparator) was over half of a
        // lookup's cost. Equal keys (an id twice in one batch) may sit side by side.
        asked.sort_unstable_by_key(|(hash, _)| *hash);
        let keys: Vec<[u8; DEDUP_KEY_LEN]> = asked.iter().map(|(hash, _)| hashed_key(*hash)).collect();
        let sorted = self.db.batched_multi_get_cf(&*cf, &keys, true);
        for ((_, i), r) in asked.iter().zip(sorted) {
            found[*i as usize] = r.map_err(|e| self.rocks(e))?.and_then(|v| decode_append_ms(&v));
        }
        if self.legacy_dedup.load(Ordering::Relaxed) {
            let misses: Vec<usize> = (0..found.len()).filter(|i| found[*i].is_none()).collect();
            let legacy: Vec<Vec<u8>> =
                misses.iter().map(|i| parts::tagged(TAG_DEDUP_RAW, ids[*i].as_ref().as_bytes())).collect();
            let hits = self.db.batched_multi_get_cf(&*cf, &legacy, false);
            for (i, r) in misses.into_iter().zip(hits) {
                found[i] = r.map_err(|e| self.rocks(e))?.and_then(|v| decode_append_ms(&v));
            }
        }
        Ok(found)
    }

    /// What the store holds in memory, from RocksDB's own accounting (summed over the
    /// column families; the block cache is shared, so it is read once).
    pub fn memory_usage(&self) -> MemoryUsage {
        let parts = self.parts.all();
        let sum = |property: &str| -> u64 {
            let meta = self.db.property_int_value_cf(self.meta(), property).ok().flatten().unwrap_or(0);
            meta + parts
                .iter()
                .filter_map(|cf| self.db.property_int_value_cf(&**cf, property).ok().flatten())
                .sum::<u64>()
        };
        MemoryUsage {
            dedup_runs: parts.iter().map(|cf| cf.runs.bytes()).sum(),
            memtables: sum("rocksdb.cur-size-all-mem-tables"),
            table_readers: sum("rocksdb.estimate-table-readers-mem"),
            // One cache serves every column family (the partitions' options share it).
            block_cache: self.tuning.cache.get_usage() as u64,
        }
    }

    /// Whether the raw-id dedup entries of an upgraded store are still looked up; they stop
    /// being looked up once compaction has dropped the last of them (checked at open and by
    /// [`Store::compact_dedup`]).
    pub fn has_legacy_dedup(&self) -> bool {
        self.legacy_dedup.load(Ordering::Relaxed)
    }

    fn refresh_legacy_dedup(&self) {
        let any = self.parts.all().iter().any(|cf| {
            let mut read = ReadOptions::default();
            read.set_iterate_upper_bound(parts::tag_end(TAG_DEDUP_RAW));
            let from = [TAG_DEDUP_RAW];
            let mut it = self.db.iterator_cf_opt(&**cf, read, IteratorMode::From(&from, Direction::Forward));
            matches!(it.next(), Some(Ok((k, _))) if k.first() == Some(&TAG_DEDUP_RAW))
        });
        self.legacy_dedup.store(any, Ordering::Relaxed);
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
        let Some(cf) = self.part(p) else { return Ok(Vec::new()) };
        let mut prefix = vec![ns as u8];
        prefix.extend_from_slice(key_prefix);
        let mut rows = self.scan_tag(&cf, TAG_AGGREGATE, &prefix)?;
        for (k, _) in &mut rows {
            k.remove(0);
        }
        Ok(rows)
    }

    /// One aggregate by its exact key.
    pub fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.part_get(p, &aggregate_key(ns, key))
    }

    /// One outbox row (encoded by the caller), if the idempotency key was ever produced here.
    pub fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.part_get(p, &parts::tagged(TAG_OUTBOX, key.as_bytes()))
    }

    /// Every outbox row of a partition, in key order (restart: re-queue what is pending).
    pub fn outbox_scan(&self, p: PartitionId) -> Result<Vec<KeyValue>, StateError> {
        match self.part(p) {
            Some(cf) => self.scan_tag(&cf, TAG_OUTBOX, &[]),
            None => Ok(Vec::new()),
        }
    }

    /// Every outbox row of every partition, in key order: `(partition, key, row)`.
    pub fn outbox_scan_all(&self) -> Result<Vec<(PartitionId, KeyValue)>, StateError> {
        let mut out = Vec::new();
        for cf in self.parts.all() {
            out.extend(self.scan_tag(&cf, TAG_OUTBOX, &[])?.into_iter().map(|kv| (cf.p, kv)));
        }
        Ok(out)
    }

    /// Lets compaction drop a partition's dedup entries first seen before `append_ms`. Call it
    /// with a *committed* checkpoint's values only, so the stored state never depends on
    /// entries already dropped.
    pub fn set_dedup_horizon(&self, p: PartitionId, append_ms: i64) {
        if let Ok(mut h) = self.dedup_horizons.write() {
            let slot = h.entry(p).or_insert(i64::MIN);
            *slot = (*slot).max(append_ms);
        }
    }

    pub fn batch(&self) -> CommitBatch<'_> {
        CommitBatch::new(self)
    }

    /// Makes a staged batch durable at once (see [`CommitBatch::stage`]).
    pub fn commit_staged(&self, batch: StagedBatch) -> Result<(), StateError> {
        let (batch, runs) = batch.into_inner()?;
        self.write_commit(batch, runs)
    }

    pub(crate) fn write(&self, batch: rocksdb::WriteBatch) -> Result<(), StateError> {
        self.db.write_opt(batch, &self.write_opts).map_err(|e| self.rocks(e))
    }

    /// `batch` into the write-ahead log without waiting for fsync: it survives the process
    /// (kill -9, a panic, OOM: the log is in the OS's page cache), not a crash of the host.
    pub(crate) fn write_unsynced(&self, batch: rocksdb::WriteBatch) -> Result<(), StateError> {
        self.db.write_opt(batch, &WriteOptions::default()).map_err(|e| self.rocks(e))
    }

    /// Folds every partition's dedup runs into table files, then compacts every partition's
    /// column family (tests and maintenance).
    pub fn compact_dedup(&self) {
        for cf in self.parts.all() {
            self.fold_now(&cf);
            self.db.compact_range_cf(&*cf, None::<&[u8]>, None::<&[u8]>);
        }
        self.refresh_legacy_dedup();
    }
}

/// Tag + 128-bit XXH3 of the event id.
pub(crate) const DEDUP_KEY_LEN: usize = 1 + 16;

/// The dedup key of an event id in its partition's column family.
#[cfg(test)]
pub(crate) fn dedup_key(event_id: &str) -> [u8; DEDUP_KEY_LEN] {
    hashed_key(dedup_hash(event_id))
}

/// What identifies an event id in its partition's dedup entries (keys and runs): a 128-bit
/// XXH3 hash of the id. Ids are at most 256 bytes (SPEC §1.3) but typically 20–40; the hash
/// makes every key 17 bytes and spreads them evenly. Two distinct ids of one partition
/// collide with probability ~n²/2¹²⁹ (10¹⁰ ids in a retention: ~10⁻¹⁹), in which case the
/// second is taken for a duplicate. XXH3 is a fixed, platform-independent function: keys
/// never change.
pub(crate) fn dedup_hash(event_id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(event_id.as_bytes())
}

/// The dedup key of a hash: the tag, then the hash big-endian, so keys sort as the hashes
/// do as integers.
pub(crate) fn hashed_key(hash: u128) -> [u8; DEDUP_KEY_LEN] {
    let mut k = [0u8; DEDUP_KEY_LEN];
    k[0] = TAG_DEDUP;
    k[1..].copy_from_slice(&hash.to_be_bytes());
    k
}

/// The key of a partition's dedup run `seq` ([`crate::runs`]): tag + big-endian number.
pub(crate) fn run_key(seq: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = TAG_DEDUP_RUN;
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// Tag + namespace byte + key.
pub(crate) fn aggregate_key(ns: Namespace, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len());
    k.push(TAG_AGGREGATE);
    k.push(ns as u8);
    k.extend_from_slice(key);
    k
}

pub(crate) fn decode_append_ms(v: &[u8]) -> Option<i64> {
    v.try_into().ok().map(i64::from_le_bytes)
}

#[cfg(test)]
mod dedup_format_tests {
    use super::*;

    #[test]
    fn every_dedup_key_is_the_tag_and_sixteen_hash_bytes_whatever_the_id_length() {
        for id in ["e", "e-7f3a0000-1111-2222-3333-444455556666", &"x".repeat(256)] {
            let k = dedup_key(id);
            assert_eq!(k.len(), 17);
            assert_eq!(k[0], TAG_DEDUP);
        }
        assert_ne!(dedup_key("e-1"), dedup_key("e-2"));
    }

    #[test]
    fn partitions_do_not_share_dedup_entries_and_each_has_a_column_family_of_its_own() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions::default())?;
        let (p, q) = (PartitionId::orders(0), PartitionId::orders(1));
        let mut b = store.batch();
        b.put_dedup(p, "e-1", 5);
        b.commit()?;
        assert_eq!(store.dedup_lookup(p, &["e-1"])?, vec![Some(5)]);
        assert_eq!(store.dedup_lookup(q, &["e-1"])?, vec![None]);
        let names = DB::list_cf(&Options::default(), dir.path()).map_err(|e| store.rocks(e))?;
        assert!(names.contains(&parts::cf_name(p, 0)), "{names:?}");
        assert!(!names.contains(&parts::cf_name(q, 0)), "no column family before a write: {names:?}");
        store.drop_partition(p)?;
        assert_eq!(store.dedup_lookup(p, &["e-1"])?, vec![None], "dropped with its column family");
        Ok(())
    }

    #[test]
    fn entries_of_an_upgraded_store_in_the_raw_id_format_are_still_found_until_they_expire() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(0);
        {
            let store = Store::open(dir.path(), &StoreOptions::default())?;
            assert!(!store.has_legacy_dedup(), "a new store has no raw-id entries");
            // What a store written before the hashed format holds.
            let cf = store.part_or_create(p)?;
            store
                .db
                .put_cf(&*cf, parts::tagged(TAG_DEDUP_RAW, b"e-old"), 100i64.to_le_bytes())
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
mod identity_tests {
    use super::*;

    #[test]
    fn a_store_keeps_its_identity_across_opens_and_another_store_has_its_own() -> Result<(), StateError> {
        let (a_dir, b_dir) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
        let a = Store::open(a_dir.path(), &StoreOptions::default())?.identity()?;
        let b = Store::open(b_dir.path(), &StoreOptions::default())?.identity()?;
        assert_ne!(a, b);
        assert_eq!(Store::open(a_dir.path(), &StoreOptions::default())?.identity()?, a, "reopened");
        Ok(())
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
        assert!(written.memtables > empty.memtables + 10_000 * 24, "the commit's run: {empty:?} then {written:?}");
        assert!(written.dedup_runs >= 10_000 * 33, "its entries in memory: {written:?}");
        // Folded into a table file (the memtable flushed by the compaction that follows).
        store.compact_dedup();
        let ids: Vec<String> = (0..10_000).map(|i| format!("e-{i}")).collect();
        assert!(store.dedup_lookup(p, &ids)?.iter().all(Option::is_some));
        let read = store.memory_usage();
        assert!(read.block_cache > 10_000 * 17 / 2, "blocks read through the cache: {read:?}");
        assert!(read.memtables < written.memtables, "flushed: {written:?} then {read:?}");
        assert_eq!(store.dedup_entries_in_memory(p), 0, "folded");
        assert_eq!(read.dedup_runs, 0, "an empty map holds no room: {read:?}");
        Ok(())
    }

    /// Writes `n` aggregates of partition `orders[0]` in batches of 1,000, then returns the
    /// memtables' size once background flushes have had up to 10 s to bring it under `under`.
    fn memtables_after_writing(store: &Store, n: usize, under: u64) -> Result<u64, StateError> {
        let p = PartitionId::orders(0);
        for chunk in 0..n / 1000 {
            let mut batch = store.batch();
            for i in 0..1000 {
                batch.put_aggregate(p, Namespace::Dashboard, format!("key-{chunk}-{i}-pad").as_bytes(), b"12345678");
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
    fn rocksdb_accepts_the_memtable_insert_hint_by_tag() {
        let opts = Options::default().get_options_from_string(INSERT_HINT_BY_TAG);
        assert!(opts.is_ok(), "{INSERT_HINT_BY_TAG}: {:?}", opts.err());
    }

    /// 180,000 entries make ~10 MB of memtable: under a partition's own 16 MiB memtable and
    /// under the 16 MB log cap, so only the budget can make them flush. (With 400,000 the
    /// partition's memtable itself filled and flushed, and the unbudgeted store held only
    /// what came after: this test then compared the budget with nothing.)
    #[test]
    fn the_memtables_of_all_column_families_stay_within_the_budget() -> Result<(), StateError> {
        let budget: u64 = 4 << 20;
        let dir = tempfile::tempdir().expect("tmp");
        let opts =
            StoreOptions { sync_commits: false, memtable_budget_bytes: budget as usize, ..StoreOptions::default() };
        let store = Store::open(dir.path(), &opts)?;
        let held = memtables_after_writing(&store, 180_000, budget)?;
        assert!(held <= budget, "a 4 MiB budget: {held} bytes of memtables after ~10 MB written");

        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions { sync_commits: false, ..StoreOptions::default() })?;
        let unbudgeted = memtables_after_writing(&store, 180_000, u64::MAX)?;
        assert!(
            unbudgeted > 2 * budget,
            "the default 64 MiB budget holds what was written: {unbudgeted} bytes (4 MiB budget: {held})"
        );
        Ok(())
    }
}
