//! A partition's recent dedup entries, kept out of RocksDB's memtable.
//!
//! One random 17-byte key per event inserted into a memtable's skip list was the largest
//! single cost of a drain (9.6 % of the process in the profile of 20018df: a search through a
//! 16 MiB skip list per entry, cache misses all the way down). Instead:
//!
//! 1. A commit writes a partition's new dedup entries as **one row, a run**
//!    (`TAG_DEDUP_RUN` + sequence number → the entries), in the same write batch as the
//!    checkpoint, so they are durable together as before ([`crate::commit`]).
//! 2. Once that write returns, the entries go into an in-memory map that every lookup checks
//!    before RocksDB ([`DedupRuns::lookup`]).
//! 3. When the maps of all partitions hold [`crate::StoreOptions::dedup_runs_max_entries`]
//!    together, the largest is frozen and **folded**: a thread writes its entries, sorted,
//!    into a table file (`SstFileWriter`, the work a memtable flush did before), a later
//!    commit ingests that file as ordinary dedup keys (`TAG_DEDUP` + hash, where compaction
//!    and its expiry filter see them) and then deletes the runs the file holds. Lookups keep
//!    answering from the frozen map until the file is in. (The budget is the store's, as the
//!    memtables' is: a per-partition threshold made every partition fold in a short drain
//!    what a memtable would have held, measured 7 % more CPU per event.)
//! 4. An open (and an import of a partition's files) loads every run still stored back into
//!    the map, oldest first, so an entry put twice keeps its later time.
//!
//! A crash at any point loses nothing: a run is durable with its commit and stays until a
//! table file holding its entries is in the store. A crash between an ingest and the runs'
//! deletion folds the same entries again later; the newer file shadows the older with the
//! same or later times, as a second put of a key did before.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

/// Bytes of one entry in a run's value: the 128-bit hash (big-endian) and the append time
/// (little-endian, as a dedup key's value).
pub(crate) const RUN_ENTRY_LEN: usize = 16 + 8;

/// The entries of a map: hash of the event id → append time first seen.
type Entries = HashMap<Key, i64, BuildHasherDefault<HashedKey>>;

/// A 128-bit hash as two words: 24 bytes a slot with its time, where a `u128` key's
/// 16-byte alignment made it 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key([u64; 2]);

impl Key {
    fn of(hash: u128) -> Key {
        Key([(hash >> 64) as u64, hash as u64])
    }

    fn hash128(self) -> u128 {
        (u128::from(self.0[0]) << 64) | u128::from(self.0[1])
    }
}

impl Hash for Key {
    /// The keys are XXH3-128 hashes already: their low 64 bits are the map's hash.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[1]);
    }
}

/// Passes [`Key`]'s word through.
#[derive(Default)]
pub(crate) struct HashedKey(u64);

impl Hasher for HashedKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = word;
    }
}

/// What a fold's thread returns: the table file written (`None` when every entry was
/// below the horizon), or why it could not be written.
type Built = Result<Option<PathBuf>, String>;

/// A frozen map on its way into a table file.
struct Folding {
    entries: Arc<Entries>,
    /// The runs whose entries the map holds.
    runs: Vec<u64>,
    build: Option<JoinHandle<Built>>,
}

#[derive(Default)]
struct Inner {
    active: Entries,
    /// The runs whose entries `active` holds.
    runs: Vec<u64>,
    folding: Option<Folding>,
    next_seq: u64,
}

/// The runs of one partition column family generation ([`crate::parts::PartCf`]).
#[derive(Default)]
pub(crate) struct DedupRuns {
    inner: RwLock<Inner>,
}

/// A fold whose table file is written, taken out to be ingested.
pub(crate) struct Finished {
    /// The runs whose entries the file holds: deleted once it is in the store (one point
    /// delete each; a range delete made every later lookup of the partition check it).
    pub(crate) runs: Vec<u64>,
    pub(crate) built: Built,
}

impl DedupRuns {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A stored run, at open or after an import: runs come in key (sequence) order.
    pub(crate) fn load(&self, seq: u64, value: &[u8]) -> Result<(), String> {
        if !value.len().is_multiple_of(RUN_ENTRY_LEN) {
            return Err(format!("dedup run {seq} has {} bytes, not a multiple of {RUN_ENTRY_LEN}", value.len()));
        }
        let mut inner = self.write();
        for (hash, ms) in decode(value) {
            inner.active.insert(Key::of(hash), ms);
        }
        inner.next_seq = inner.next_seq.max(seq + 1);
        inner.runs.push(seq);
        Ok(())
    }

    /// The sequence number of a commit's run; [`DedupRuns::add`] follows once its write
    /// returns (a number whose write failed is never used again).
    pub(crate) fn reserve(&self) -> u64 {
        let mut inner = self.write();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        seq
    }

    /// The entries of run `seq`, now durable, in put order (a later put of a hash wins).
    pub(crate) fn add(&self, seq: u64, entries: &[(u128, i64)]) {
        let mut inner = self.write();
        inner.runs.push(seq);
        inner.active.reserve(entries.len());
        for (hash, ms) in entries {
            inner.active.insert(Key::of(*hash), *ms);
        }
    }

    /// Entries held in memory (active and frozen), entries of the active map, and whether a
    /// fold is under way: one look for [`crate::Store`]'s budget check after every commit.
    pub(crate) fn held(&self) -> (usize, usize, bool) {
        let inner = self.read();
        let frozen = inner.folding.as_ref().map_or(0, |f| f.entries.len());
        (inner.active.len() + frozen, inner.active.len(), inner.folding.is_some())
    }

    /// Answers what the maps hold: `found[i]` for every `(hash, i)` of `asked` the active or
    /// the frozen map knows (the active one first: it is newer).
    pub(crate) fn lookup(&self, asked: &[(u128, u32)], found: &mut [Option<i64>]) {
        let inner = self.read();
        let frozen = inner.folding.as_ref().map(|f| &*f.entries);
        if inner.active.is_empty() && frozen.is_none_or(HashMap::is_empty) {
            return;
        }
        for (hash, i) in asked {
            let key = Key::of(*hash);
            let hit = inner.active.get(&key).or_else(|| frozen.and_then(|f| f.get(&key)));
            if let Some(ms) = hit {
                found[*i as usize] = Some(*ms);
            }
        }
    }

    /// Freezes the active map and starts `build` on it on a thread of its own, unless a
    /// fold is under way already or there is nothing to fold. `build` gets the entries in
    /// no particular order.
    pub(crate) fn start_fold<F>(&self, build: F) -> Result<(), String>
    where
        F: FnOnce(&Entries) -> Built + Send + 'static,
    {
        let mut inner = self.write();
        if inner.folding.is_some() || inner.active.is_empty() {
            return Ok(());
        }
        let runs = std::mem::take(&mut inner.runs);
        // The next map grows from empty (rehashing as it doubles, ~1 % of a steady-state
        // profile): one sized like this one would stay that large in a partition that then
        // idles, and over many partitions the maps' memory would pass the store's budget.
        let entries = Arc::new(std::mem::take(&mut inner.active));
        let for_build = Arc::clone(&entries);
        let handle = std::thread::Builder::new()
            .name("tidemark-fold".into())
            .spawn(move || build(&for_build))
            .map_err(|e| format!("starting a dedup fold thread: {e}"));
        match handle {
            Ok(h) => {
                inner.folding = Some(Folding { entries, runs, build: Some(h) });
                Ok(())
            }
            Err(e) => {
                inner.active = Arc::try_unwrap(entries).unwrap_or_else(|shared| (*shared).clone());
                inner.runs = runs;
                Err(e)
            }
        }
    }

    /// The fold whose file is written, if any; with `wait`, waits for one under way. The
    /// frozen map keeps answering until [`DedupRuns::folded`] or [`DedupRuns::unfreeze`].
    pub(crate) fn take_finished(&self, wait: bool) -> Option<Finished> {
        // Asked after every commit: a look under the read lock first, so lookups are not
        // held up while nothing is ready.
        if !wait && !self.read().folding.as_ref().is_some_and(|f| f.build.as_ref().is_some_and(|h| h.is_finished())) {
            return None;
        }
        let (handle, runs) = {
            let mut inner = self.write();
            let folding = inner.folding.as_mut()?;
            let ready = folding.build.as_ref().is_some_and(|h| wait || h.is_finished());
            if !ready {
                return None;
            }
            (folding.build.take()?, folding.runs.clone())
        };
        // Joined without the lock: lookups go on meanwhile.
        let built = handle.join().unwrap_or_else(|_| Err("the dedup fold thread panicked".into()));
        Some(Finished { runs, built })
    }

    /// The frozen map's file is in the store: lookups go there now.
    pub(crate) fn folded(&self) {
        self.write().folding = None;
    }

    /// The frozen map could not be folded: its entries go back into the active map (newer
    /// entries of the same hashes win) and are folded with it next time.
    pub(crate) fn unfreeze(&self) {
        let mut inner = self.write();
        if let Some(folding) = inner.folding.take() {
            inner.runs.extend(folding.runs);
            let entries = Arc::try_unwrap(folding.entries).unwrap_or_else(|shared| (*shared).clone());
            for (hash, ms) in entries {
                inner.active.entry(hash).or_insert(ms);
            }
        }
    }

    /// Entries held in memory (active and frozen).
    pub(crate) fn len(&self) -> usize {
        let inner = self.read();
        inner.active.len() + inner.folding.as_ref().map_or(0, |f| f.entries.len())
    }

    /// Bytes the maps hold (their tables, by capacity).
    pub(crate) fn bytes(&self) -> u64 {
        let inner = self.read();
        let slots = inner.active.capacity() + inner.folding.as_ref().map_or(0, |f| f.entries.capacity());
        // A slot: the key's two words and the time, plus a control byte.
        (slots as u64) * 25
    }
}

impl Drop for DedupRuns {
    /// A fold still writing its file finishes first; its file is removed (the runs stay).
    fn drop(&mut self) {
        if let Some(Finished { built: Ok(Some(path)), .. }) = self.take_finished(true) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A run's value from its entries.
pub(crate) fn encode(entries: &[(u128, i64)], out: &mut Vec<u8>) {
    out.reserve(entries.len() * RUN_ENTRY_LEN);
    for (hash, ms) in entries {
        out.extend_from_slice(&hash.to_be_bytes());
        out.extend_from_slice(&ms.to_le_bytes());
    }
}

/// A run's entries; the value's length is a multiple of [`RUN_ENTRY_LEN`].
pub(crate) fn decode(value: &[u8]) -> impl Iterator<Item = (u128, i64)> + '_ {
    value.chunks_exact(RUN_ENTRY_LEN).map(|c| {
        let mut hash = [0u8; 16];
        hash.copy_from_slice(&c[..16]);
        let mut ms = [0u8; 8];
        ms.copy_from_slice(&c[16..]);
        (u128::from_be_bytes(hash), i64::from_le_bytes(ms))
    })
}

/// A fold's entries that a lookup may still need (first seen at or after `horizon`), in
/// key order: what its table file holds.
pub(crate) fn sorted_for_file(entries: &Entries, horizon: Option<i64>) -> Vec<(u128, i64)> {
    let mut out: Vec<(u128, i64)> =
        entries.iter().filter(|(_, ms)| horizon.is_none_or(|h| **ms >= h)).map(|(k, ms)| (k.hash128(), *ms)).collect();
    out.sort_unstable_by_key(|(hash, _)| *hash);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_decodes_to_the_entries_it_was_encoded_from() {
        let entries =
            vec![(u128::MAX, -1), (0, i64::MAX), (0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10, 1_700_000_000_000)];
        let mut value = Vec::new();
        encode(&entries, &mut value);
        assert_eq!(value.len(), 3 * RUN_ENTRY_LEN);
        assert_eq!(&value[..2], &[0xff, 0xff], "the hash big-endian, as in a dedup key");
        assert_eq!(decode(&value).collect::<Vec<_>>(), entries);
    }

    #[test]
    fn a_run_of_a_length_that_is_not_whole_entries_is_refused_with_its_number() {
        let runs = DedupRuns::default();
        let err = runs.load(7, &[0u8; RUN_ENTRY_LEN + 1]).expect_err("refused");
        assert!(err.contains("dedup run 7") && err.contains("25 bytes"), "{err}");
    }

    #[test]
    fn the_active_map_answers_before_the_frozen_one_and_a_later_put_wins() {
        let runs = DedupRuns::default();
        let s0 = runs.reserve();
        runs.add(s0, &[(1, 10), (2, 20)]);
        runs.start_fold(|_| Ok(None)).expect("fold");
        let s1 = runs.reserve();
        runs.add(s1, &[(2, 25), (3, 30), (3, 35)]);
        let mut found = vec![None; 4];
        runs.lookup(&[(1, 0), (2, 1), (3, 2), (4, 3)], &mut found);
        assert_eq!(found, vec![Some(10), Some(25), Some(35), None]);
    }

    #[test]
    fn a_fold_deletes_exactly_the_runs_whose_entries_it_holds() {
        let runs = DedupRuns::default();
        runs.load(3, &[]).expect("a stored run");
        let (a, b) = (runs.reserve(), runs.reserve());
        assert_eq!((a, b), (4, 5), "numbers continue after the stored runs");
        runs.add(b, &[(1, 1)]);
        runs.start_fold(|_| Ok(None)).expect("fold");
        let finished = runs.take_finished(true).expect("finished");
        assert_eq!(finished.runs, vec![3, b], "run {a} is not in the map yet: its row must stay");
        runs.add(a, &[(2, 2)]);
        runs.folded();
        let mut found = vec![None; 2];
        runs.lookup(&[(1, 0), (2, 1)], &mut found);
        assert_eq!(found, vec![None, Some(2)], "the folded entry is the store's to answer now");
    }

    #[test]
    fn an_unfrozen_map_goes_back_under_the_newer_entries() {
        let runs = DedupRuns::default();
        let s = runs.reserve();
        runs.add(s, &[(1, 10), (2, 20)]);
        runs.start_fold(|_| Err("disk full".into())).expect("fold");
        let s = runs.reserve();
        runs.add(s, &[(2, 99)]);
        let finished = runs.take_finished(true).expect("finished");
        assert_eq!(finished.built, Err("disk full".to_string()));
        runs.unfreeze();
        assert_eq!(runs.len(), 2);
        let mut found = vec![None; 2];
        runs.lookup(&[(1, 0), (2, 1)], &mut found);
        assert_eq!(found, vec![Some(10), Some(99)]);
    }

    #[test]
    fn a_key_keeps_every_bit_of_its_hash_and_hashes_by_the_low_word() {
        for h in [0u128, 1, u128::MAX, 1 << 64, (1 << 64) - 1, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
            let key = Key::of(h);
            assert_eq!(key.hash128(), h);
            let mut state = HashedKey::default();
            key.hash(&mut state);
            assert_eq!(state.finish(), h as u64);
        }
        assert_eq!(std::mem::size_of::<(Key, i64)>(), 24, "a slot without alignment padding");
    }

    #[test]
    fn a_file_holds_the_entries_in_key_order_without_those_below_the_horizon() {
        let mut entries = Entries::default();
        for (h, ms) in [(30u128, 300), (10, 100), (20, 200)] {
            entries.insert(Key::of(h), ms);
        }
        assert_eq!(sorted_for_file(&entries, None), vec![(10, 100), (20, 200), (30, 300)]);
        assert_eq!(sorted_for_file(&entries, Some(200)), vec![(20, 200), (30, 300)]);
    }
}
