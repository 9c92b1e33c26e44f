//! Writing a commit's dedup runs, and folding a partition's runs into table files
//! ([`crate::runs`] says why and what a crash leaves).
//!
//! Everything here runs on the thread that commits (the commit thread of `tidemark run`),
//! except the writing of a fold's table file, which runs on a thread of its own: a commit
//! that finds the maps over their budget starts it, a later commit ingests the file once it
//! is written. A fold that fails leaves the entries in memory and their runs
//! stored; it is counted and its error kept ([`Store::dedup_folds`]), and the next fold of
//! the partition takes them again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rocksdb::{BlockBasedOptions, IngestExternalFileOptions, Options, SstFileWriter, WriteBatch};

use crate::commit::RunWrite;
use crate::parts::{PartCf, TAG_DEDUP_RUN};
use crate::runs::sorted_for_file;
use crate::store::{hashed_key, run_key};
use crate::{StateError, Store};

/// The directory inside the store where folds write their table files before the ingest
/// moves them into the store.
const FOLD_DIR: &str = "dedup-folds";

/// Counts of folds ([`Store::dedup_folds`]).
#[derive(Default)]
pub(crate) struct Folds {
    done: AtomicU64,
    failed: AtomicU64,
    files: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// What the folds of dedup runs did since the store opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldStats {
    /// Folds whose entries are in a table file of the store now.
    pub done: u64,
    /// Folds that failed (their entries stay in memory and their runs stored, and are folded
    /// again with the partition's next fold).
    pub failed: u64,
    /// The last failure's message, naming the partition and the step.
    pub last_error: Option<String>,
}

/// Removes what folds left unfinished when the process ended (called at open).
pub(crate) fn clear_unfinished(store_dir: &Path) -> Result<(), StateError> {
    let dir = store_dir.join(FOLD_DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateError::Io { path: dir.display().to_string(), source }),
    }
}

/// The table options of a fold's file: bloom filters on whole keys as a partition's own
/// files have (nearly every lookup is a miss), but no compression: its keys are hashes, which
/// LZ4 cannot shrink (it was 3 % of a steady-state profile of folds), and compaction rewrites
/// the file with the column family's LZ4 anyway.
fn file_options() -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts
}

/// Writes `rows` (sorted, unique hashes) into a new table file at `path`.
fn write_file(path: &Path, rows: &[(u128, i64)]) -> Result<(), String> {
    let at = |e: rocksdb::Error| format!("writing {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let opts = file_options();
    let mut writer = SstFileWriter::create(&opts);
    writer.open(path).map_err(at)?;
    for (hash, ms) in rows {
        writer.put(hashed_key(*hash), ms.to_le_bytes()).map_err(at)?;
    }
    writer.finish().map_err(at)
}

impl Store {
    /// Loads the dedup runs `cf` holds into its map (at open and after an import).
    pub(crate) fn load_runs(&self, cf: &PartCf) -> Result<(), StateError> {
        for (key, value) in self.scan_tag(cf, TAG_DEDUP_RUN, &[])? {
            let seq = <[u8; 8]>::try_from(key.as_slice()).map(u64::from_be_bytes).map_err(|_| StateError::Decode {
                what: "dedup run",
                detail: format!("{}: a run key of {} bytes", cf.name, key.len() + 1),
            })?;
            cf.runs
                .load(seq, &value)
                .map_err(|detail| StateError::Decode { what: "dedup run", detail: format!("{}: {detail}", cf.name) })?;
        }
        Ok(())
    }

    /// Writes a commit's batch; once it is written, its runs' entries go into their
    /// partitions' maps, written folds are ingested, and maps over their budget start a fold.
    pub(crate) fn write_commit(&self, batch: WriteBatch, runs: Vec<RunWrite>) -> Result<(), StateError> {
        self.write(batch)?;
        for run in &runs {
            run.cf.runs.add(run.seq, &run.entries);
        }
        // Also after commits without dedup entries (an idle input's marks): a fold's written
        // file goes in then, not only with the next event.
        self.fold_over_budget();
        Ok(())
    }

    /// Ingests every written fold, then, when the maps of all partitions hold
    /// [`crate::StoreOptions::dedup_runs_max_entries`] or more, folds the largest active map.
    fn fold_over_budget(&self) {
        let parts = self.parts.all();
        let mut held = 0;
        let mut largest: Option<(usize, &PartCf)> = None;
        for cf in &parts {
            self.finish_fold(cf, false);
            let (in_memory, active, folding) = cf.runs.held();
            held += in_memory;
            if !folding && largest.is_none_or(|(n, _)| active > n) {
                largest = Some((active, cf));
            }
        }
        if held >= self.tuning.runs_max_entries {
            if let Some((_, cf)) = largest {
                self.start_fold(cf);
            }
        }
    }

    /// Freezes `cf`'s map and writes its entries into a table file on a thread of its own
    /// (nothing when a fold of `cf` is under way).
    fn start_fold(&self, cf: &PartCf) {
        let horizon = self.dedup_horizons.read().ok().and_then(|h| h.get(&cf.p).copied());
        let n = self.folds.files.fetch_add(1, Ordering::Relaxed);
        let path: PathBuf = self.path().join(FOLD_DIR).join(format!("{}-{n}.sst", cf.name));
        let started = cf.runs.start_fold(move |entries| {
            let rows = sorted_for_file(entries, horizon);
            if rows.is_empty() {
                return Ok(None);
            }
            write_file(&path, &rows)?;
            Ok(Some(path))
        });
        if let Err(e) = started {
            self.fold_failed(cf, e);
        }
    }

    /// Ingests `cf`'s fold once its file is written (with `wait`, waits for it), then
    /// deletes the runs the file holds.
    fn finish_fold(&self, cf: &PartCf, wait: bool) {
        let Some(finished) = cf.runs.take_finished(wait) else { return };
        let ingested = match finished.built {
            Ok(Some(path)) => {
                let mut opts = IngestExternalFileOptions::default();
                opts.set_move_files(true);
                let result = self
                    .db
                    .ingest_external_file_cf_opts(cf, &opts, vec![&path])
                    .map_err(|e| format!("ingesting {}: {e}", path.display()));
                // Moved by a successful ingest; left behind by a failed one.
                let _ = std::fs::remove_file(&path);
                result
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = ingested {
            cf.runs.unfreeze();
            self.fold_failed(cf, e);
            return;
        }
        cf.runs.folded();
        // The runs' rows go now; should this write fail or the process end first, they are
        // read back at open and folded again, which changes nothing.
        if !finished.runs.is_empty() {
            let mut batch = WriteBatch::default();
            for seq in &finished.runs {
                batch.delete_cf(cf, run_key(*seq));
            }
            if let Err(e) = self.write_unsynced(batch) {
                self.fold_failed(cf, format!("deleting folded runs: {e}"));
                return;
            }
        }
        self.folds.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Folds everything `cf` holds in memory now and waits for it (tests and maintenance).
    pub(crate) fn fold_now(&self, cf: &PartCf) {
        self.finish_fold(cf, true);
        self.start_fold(cf);
        self.finish_fold(cf, true);
    }

    fn fold_failed(&self, cf: &PartCf, detail: String) {
        self.folds.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.folds.last_error.lock() {
            *last = Some(format!("folding the dedup runs of {} ({}): {detail}", cf.p, cf.name));
        }
    }

    /// What the folds of dedup runs into table files did since the store opened.
    pub fn dedup_folds(&self) -> FoldStats {
        FoldStats {
            done: self.folds.done.load(Ordering::Relaxed),
            failed: self.folds.failed.load(Ordering::Relaxed),
            last_error: self.folds.last_error.lock().ok().and_then(|l| l.clone()),
        }
    }

    /// How many dedup entries of partition `p` are held in memory, not folded yet.
    pub fn dedup_entries_in_memory(&self, p: crate::PartitionId) -> usize {
        self.part(p).map_or(0, |cf| cf.runs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Checkpoint, PartitionId, StoreOptions};

    fn open(dir: &Path, max_entries: usize) -> Store {
        let opts =
            StoreOptions { owner: "test".into(), dedup_runs_max_entries: max_entries, ..StoreOptions::default() };
        Store::open(dir, &opts).expect("open")
    }

    /// Commits ids `e-{from}`.. `e-{from + n - 1}` of `p` at append time 1,000 + their number.
    fn commit(store: &Store, p: PartitionId, from: i64, n: i64) {
        let mut b = store.batch();
        for k in from..from + n {
            b.put_dedup(p, &format!("e-{k}"), 1_000 + k);
        }
        b.put_checkpoint(p, &Checkpoint { next_offset: from + n, max_event_ms: None, max_append_ms: 0, records: 0 })
            .expect("checkpoint");
        store.commit_staged(b.stage()).expect("commit");
    }

    fn lookup(store: &Store, p: PartitionId, ks: std::ops::Range<i64>) -> Vec<Option<i64>> {
        let ids: Vec<String> = ks.map(|k| format!("e-{k}")).collect();
        store.dedup_lookup(p, &ids).expect("lookup")
    }

    /// What a lookup of `e-0`.. `e-{asked - 1}` answers when `e-0`.. `e-{upto - 1}` are stored.
    fn first_seen(upto: i64, asked: i64) -> Vec<Option<i64>> {
        (0..asked).map(|k| (k < upto).then_some(1_000 + k)).collect()
    }

    fn stored_runs(store: &Store, p: PartitionId) -> usize {
        let cf = store.part(p).expect("partition");
        store.scan_tag(&cf, TAG_DEDUP_RUN, &[]).expect("scan").len()
    }

    fn wait_for_folds(store: &Store, p: PartitionId, done: u64) {
        let cf = store.part(p).expect("partition");
        for _ in 0..500 {
            if store.dedup_folds().done >= done {
                return;
            }
            store.finish_fold(&cf, true);
        }
        panic!("no fold finished: {:?}", store.dedup_folds());
    }

    #[test]
    fn dedup_entries_are_found_in_runs_in_folded_files_and_after_a_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(1);
        {
            let store = open(dir.path(), 100);
            for round in 0..10 {
                commit(&store, p, round * 30, 30);
                assert_eq!(lookup(&store, p, 0..300), first_seen((round + 1) * 30, 300), "after commit {round}");
            }
            wait_for_folds(&store, p, 1);
            assert!(store.dedup_entries_in_memory(p) < 300, "some entries went to a table file");
            assert!(stored_runs(&store, p) < 10, "the folded runs are deleted");
            assert_eq!(store.dedup_folds().failed, 0, "{:?}", store.dedup_folds());
            assert_eq!(lookup(&store, p, 0..300), first_seen(300, 300));
        }
        let store = open(dir.path(), 100);
        assert_eq!(lookup(&store, p, 0..301), first_seen(300, 301));
        store.compact_dedup();
        assert_eq!(stored_runs(&store, p), 0, "every run folded");
        assert_eq!(store.dedup_entries_in_memory(p), 0);
        assert_eq!(lookup(&store, p, 0..301), first_seen(300, 301));
    }

    #[test]
    fn over_the_budget_of_all_partitions_the_largest_map_is_folded() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path(), 100);
        let (a, b) = (PartitionId::orders(6), PartitionId::orders(7));
        commit(&store, a, 0, 60);
        commit(&store, b, 1_000, 30);
        assert_eq!((store.dedup_entries_in_memory(a), store.dedup_entries_in_memory(b)), (60, 30), "90 < 100");
        commit(&store, b, 1_030, 20);
        wait_for_folds(&store, a, 1);
        assert_eq!((store.dedup_entries_in_memory(a), store.dedup_entries_in_memory(b)), (0, 50), "a: 60 > 50");
        assert_eq!(stored_runs(&store, a), 0);
        assert_eq!(lookup(&store, a, 0..61), first_seen(60, 61));
    }

    #[test]
    fn an_id_put_again_keeps_its_later_time_across_runs_folds_and_reopens() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(2);
        let put = |store: &Store, ms: i64| {
            let mut b = store.batch();
            b.put_dedup(p, "again", ms);
            b.put_dedup(p, "again", ms + 1);
            store.commit_staged(b.stage()).expect("commit");
        };
        {
            let store = open(dir.path(), 1_000);
            put(&store, 10);
            store.compact_dedup();
            put(&store, 20);
            assert_eq!(store.dedup_lookup(p, &["again"]).expect("lookup"), vec![Some(21)], "the run over the file");
        }
        let store = open(dir.path(), 1_000);
        assert_eq!(store.dedup_lookup(p, &["again"]).expect("lookup"), vec![Some(21)], "reopened");
        store.compact_dedup();
        assert_eq!(store.dedup_lookup(p, &["again"]).expect("lookup"), vec![Some(21)], "the newer file");
    }

    #[test]
    fn runs_still_stored_after_their_file_was_ingested_fold_again_without_a_change() {
        // A crash between a fold's ingest and its runs' deletion: the runs are read back at
        // open while their entries are in a table file too.
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(3);
        let left_behind = {
            let store = open(dir.path(), 1_000);
            commit(&store, p, 0, 50);
            let cf = store.part(p).expect("partition");
            let runs = store.scan_tag(&cf, TAG_DEDUP_RUN, &[]).expect("scan");
            store.compact_dedup();
            assert_eq!(stored_runs(&store, p), 0);
            runs
        };
        {
            let store = open(dir.path(), 1_000);
            let cf = store.part(p).expect("partition");
            let mut batch = WriteBatch::default();
            for (key, value) in &left_behind {
                batch.put_cf(&*cf, crate::parts::tagged(TAG_DEDUP_RUN, key), value);
            }
            store.write(batch).expect("write");
        }
        let store = open(dir.path(), 1_000);
        assert_eq!(store.dedup_entries_in_memory(p), 50, "read back at open");
        commit(&store, p, 50, 10);
        store.compact_dedup();
        assert_eq!(store.dedup_folds(), FoldStats { done: 1, failed: 0, last_error: None });
        assert_eq!(stored_runs(&store, p), 0);
        assert_eq!(lookup(&store, p, 0..61), first_seen(60, 61));
    }

    #[test]
    fn a_damaged_run_fails_the_open_naming_its_column_family() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::orders(4);
        {
            let store = open(dir.path(), 1_000);
            commit(&store, p, 0, 1);
            let cf = store.part(p).expect("partition");
            let mut batch = WriteBatch::default();
            batch.put_cf(&*cf, run_key(99), [0u8; 25]);
            store.write(batch).expect("write");
        }
        let err = Store::open(dir.path(), &StoreOptions { owner: "test".into(), ..StoreOptions::default() })
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(text.contains("part-0-4-0") && text.contains("dedup run 99"), "{text}");
    }

    #[test]
    fn a_fold_left_unfinished_by_the_process_is_cleared_at_open() {
        let dir = tempfile::tempdir().expect("tmp");
        drop(open(dir.path(), 1_000));
        let stale = dir.path().join(FOLD_DIR).join("part-0-1-0-7.sst");
        std::fs::create_dir_all(stale.parent().expect("dir")).expect("mkdir");
        std::fs::write(&stale, b"half a file").expect("write");
        drop(open(dir.path(), 1_000));
        assert!(!stale.exists());
    }

    #[test]
    fn entries_below_the_horizon_are_left_out_of_a_fold_s_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path(), 1_000);
        let p = PartitionId::orders(5);
        commit(&store, p, 0, 20);
        store.set_dedup_horizon(p, 1_010);
        let cf = store.part(p).expect("partition");
        store.fold_now(&cf);
        assert_eq!(lookup(&store, p, 0..20), (0..20).map(|k| (k >= 10).then_some(1_000 + k)).collect::<Vec<_>>());
    }
}
