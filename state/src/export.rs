//! One partition's state as files, and back: what a snapshot carries between pods.
//!
//! A partition's state is its column family ([`crate::parts`]). An export takes RocksDB's
//! export of that column family: its memtable is flushed and its live SST files are
//! hard-linked into a directory, with each file's level, key range and sequence numbers.
//! SST files never change once written, so a snapshot store that already holds a file from
//! an earlier round needs only the new ones (incremental snapshots; `src/snapshot`).
//!
//! The column family holds the partition's checkpoint with its state, so the exported files
//! are of one commit boundary whatever the stream thread commits meanwhile. The checkpoint
//! an export reports is read from a consistent point taken just before: the files hold at
//! least that much (the same, for a partition that no longer commits here, as in a
//! hand-over), and the import reads the exact one back from the files.
//!
//! An import creates the partition's next column family generation from the files (moved,
//! not copied, when they are on the state volume) and drops the previous generation: the
//! partition is the old state or the new one, never half of either.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::parts::{self, c_string, ffi, take_error, TAG_CHECKPOINT};
use crate::{Checkpoint, PartitionId, StateError, Store};

/// One SST file of an exported partition and what RocksDB needs to import it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedFile {
    /// RocksDB's name of the file (`000123.sst`): unique within the store that wrote it.
    pub file: String,
    pub bytes: u64,
    pub level: i32,
    #[serde(with = "hex_bytes")]
    pub smallest_key: Vec<u8>,
    #[serde(with = "hex_bytes")]
    pub largest_key: Vec<u8>,
    pub smallest_seqno: u64,
    pub largest_seqno: u64,
    pub entries: u64,
    pub deletions: u64,
}

/// What [`Store::export_partition`] wrote: the files and the checkpoint they hold at least.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionExport {
    pub checkpoint: Checkpoint,
    /// The key comparator of the exporting store (RocksDB's bytewise one).
    pub comparator: String,
    pub files: Vec<ExportedFile>,
}

impl PartitionExport {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io { path: path.display().to_string(), source }
}

fn c_str_owned(ptr: *const std::ffi::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: NUL-terminated strings owned by the RocksDB object the caller still holds.
    unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

fn bytes_at(ptr: *const std::ffi::c_char, len: usize) -> Vec<u8> {
    if ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: `len` bytes owned by the RocksDB object the caller still holds.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec()
}

impl Store {
    /// Exports partition `p`'s column family into `dir`, which must not exist yet (RocksDB
    /// creates it): the files are hard links to the store's own, so the export costs a
    /// memtable flush, not a copy. `None` when `p` has no checkpoint at `point`.
    pub fn export_partition(
        &self,
        point: &ConsistentPoint<'_>,
        p: PartitionId,
        dir: &Path,
    ) -> Result<Option<PartitionExport>, StateError> {
        let Some(cf) = self.part(p) else { return Ok(None) };
        let Some(raw) = point.0.get_cf(&*cf, [TAG_CHECKPOINT]).map_err(|e| self.rocks(e))? else {
            return Ok(None);
        };
        let checkpoint: Checkpoint = codec::decode("checkpoint", &raw)?;
        let c_dir = c_string(&dir.display().to_string())?;
        let mut err = std::ptr::null_mut();
        // SAFETY: valid database and column family handles for the duration of the calls;
        // every object created here is destroyed here, on every path.
        unsafe {
            let checkpointer = ffi::rocksdb_checkpoint_object_create(self.raw_db(), &mut err);
            if let Some(msg) = take_error(err) {
                return Err(self.ffi_error("creating a checkpoint object", msg));
            }
            let metadata = ffi::rocksdb_checkpoint_export_column_family(
                checkpointer,
                rocksdb::AsColumnFamilyRef::inner(&*cf),
                c_dir.as_ptr(),
                &mut err,
            );
            ffi::rocksdb_checkpoint_object_destroy(checkpointer);
            if let Some(msg) = take_error(err) {
                return Err(self.ffi_error(&format!("exporting {p} into {}", dir.display()), msg));
            }
            let comparator_ptr = ffi::rocksdb_export_import_files_metadata_get_db_comparator_name(metadata);
            let comparator = c_str_owned(comparator_ptr);
            ffi::rocksdb_free(comparator_ptr.cast());
            let files = ffi::rocksdb_export_import_files_metadata_get_files(metadata);
            let mut out = Vec::new();
            for i in 0..ffi::rocksdb_livefiles_count(files) {
                let (mut small_len, mut large_len) = (0usize, 0usize);
                let small = ffi::rocksdb_livefiles_smallestkey(files, i, &mut small_len);
                let large = ffi::rocksdb_livefiles_largestkey(files, i, &mut large_len);
                let name = c_str_owned(ffi::rocksdb_livefiles_name(files, i));
                out.push(ExportedFile {
                    file: name.trim_start_matches('/').to_string(),
                    bytes: ffi::rocksdb_livefiles_size(files, i) as u64,
                    level: ffi::rocksdb_livefiles_level(files, i),
                    smallest_key: bytes_at(small, small_len),
                    largest_key: bytes_at(large, large_len),
                    smallest_seqno: ffi::rocksdb_livefiles_smallest_seqno(files, i),
                    largest_seqno: ffi::rocksdb_livefiles_largest_seqno(files, i),
                    entries: ffi::rocksdb_livefiles_entries(files, i),
                    deletions: ffi::rocksdb_livefiles_deletions(files, i),
                });
            }
            ffi::rocksdb_livefiles_destroy(files);
            ffi::rocksdb_export_import_files_metadata_destroy(metadata);
            out.sort_by(|a, b| a.file.cmp(&b.file));
            Ok(Some(PartitionExport { checkpoint, comparator, files: out }))
        }
    }

    /// A consistent point of the whole store to export partitions from.
    pub fn consistent_point(&self) -> ConsistentPoint<'_> {
        let taken_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        ConsistentPoint(self.db.snapshot(), taken_at_ms)
    }

    /// Replaces partition `p`'s state with an export read from `dir`, or leaves it as it
    /// was: a failed import never leaves the partition empty or half there.
    ///
    /// 1. A missing file, or one whose size differs from the export's record, is refused
    ///    before anything changes.
    /// 2. RocksDB creates the partition's next column family generation from the files
    ///    (hard links when `dir` is on the state volume, so `dir` is left as it was) and
    ///    reads every file's keys as it does; a damaged file fails the import, which then
    ///    leaves no column family behind.
    /// 3. The previous generation is dropped. A crash between 2 and 3 leaves both, and the
    ///    next open keeps the newer one.
    pub fn import_partition(&self, p: PartitionId, dir: &Path, export: &PartitionExport) -> Result<(), StateError> {
        if export.files.is_empty() {
            return Err(StateError::Decode {
                what: "partition export",
                detail: format!("no files in {}", dir.display()),
            });
        }
        for f in &export.files {
            if f.file.is_empty() || f.file.contains(['/', '\\']) || f.file.starts_with('.') {
                return Err(StateError::Decode { what: "partition export", detail: format!("file name {:?}", f.file) });
            }
            let path = dir.join(&f.file);
            let bytes = std::fs::metadata(&path).map_err(io(&path))?.len();
            if bytes != f.bytes {
                return Err(StateError::Decode {
                    what: "partition export",
                    detail: format!("{} has {bytes} bytes, the export recorded {}", path.display(), f.bytes),
                });
            }
        }
        let c_dir = c_string(&dir.display().to_string())?;
        let cf_name = c_string(&parts::cf_name(p, 0))?;
        let comparator = c_string(&export.comparator)?;
        let names = export.files.iter().map(|f| c_string(&format!("/{}", f.file))).collect::<Result<Vec<_>, _>>()?;
        // SAFETY: every object created here is handed over or destroyed here; the metadata's
        // strings are copied by RocksDB.
        let metadata = unsafe {
            let metadata = ffi::rocksdb_export_import_files_metadata_create();
            ffi::rocksdb_export_import_files_metadata_set_db_comparator_name(metadata, comparator.as_ptr());
            let files = ffi::rocksdb_livefiles_create();
            for (f, name) in export.files.iter().zip(&names) {
                let lf = ffi::rocksdb_livefile_create();
                ffi::rocksdb_livefile_set_column_family_name(lf, cf_name.as_ptr());
                ffi::rocksdb_livefile_set_level(lf, f.level);
                ffi::rocksdb_livefile_set_name(lf, name.as_ptr());
                ffi::rocksdb_livefile_set_directory(lf, c_dir.as_ptr());
                ffi::rocksdb_livefile_set_size(lf, f.bytes as usize);
                ffi::rocksdb_livefile_set_smallest_key(lf, f.smallest_key.as_ptr().cast(), f.smallest_key.len());
                ffi::rocksdb_livefile_set_largest_key(lf, f.largest_key.as_ptr().cast(), f.largest_key.len());
                ffi::rocksdb_livefile_set_smallest_seqno(lf, f.smallest_seqno);
                ffi::rocksdb_livefile_set_largest_seqno(lf, f.largest_seqno);
                ffi::rocksdb_livefile_set_num_entries(lf, f.entries);
                ffi::rocksdb_livefile_set_num_deletions(lf, f.deletions);
                ffi::rocksdb_livefiles_add(files, lf);
            }
            ffi::rocksdb_export_import_files_metadata_set_files(metadata, files);
            metadata
        };
        let result = self.replace_part_with_import(p, metadata);
        // SAFETY: created above, used by the import only.
        unsafe { ffi::rocksdb_export_import_files_metadata_destroy(metadata) };
        result?;
        if self.checkpoint(p)?.is_none() {
            self.drop_partition(p)?;
            return Err(StateError::Decode {
                what: "partition export",
                detail: format!("the files in {} hold no checkpoint of {p}", dir.display()),
            });
        }
        Ok(())
    }
}

/// A RocksDB snapshot of the store: the checkpoint every partition exported from it holds at
/// least, and the wall-clock time of that state.
pub struct ConsistentPoint<'a>(rocksdb::SnapshotWithThreadMode<'a, rocksdb::DB>, i64);

impl ConsistentPoint<'_> {
    /// Wall-clock time (ms since the epoch) at which the point was taken: its state holds
    /// nothing written after it, however long the exports from it take.
    pub fn taken_at_ms(&self) -> i64 {
        self.1
    }
}

/// Keys as hex strings in manifests.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        s.serialize_str(&hex)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let hex = String::deserialize(d)?;
        if hex.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Namespace, OutboxIndex, StoreOptions};

    fn open(dir: &Path) -> Result<Store, StateError> {
        Store::open(dir, &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() })
    }

    /// Two empty stores and a directory for the exports (the stores close before their
    /// directories go: fields drop in order).
    struct Fixture {
        a: Store,
        b: Store,
        files: tempfile::TempDir,
        _dirs: (tempfile::TempDir, tempfile::TempDir),
    }

    fn fixture() -> Result<Fixture, StateError> {
        let dirs = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
        Ok(Fixture {
            a: open(dirs.0.path())?,
            b: open(dirs.1.path())?,
            files: tempfile::tempdir().expect("tmp"),
            _dirs: dirs,
        })
    }

    fn fill_from(store: &Store, p: PartitionId, from: i64, n: i64) -> Result<(), StateError> {
        let mut b = store.batch();
        for i in from..from + n {
            b.put_dedup(p, &format!("e-{}-{i}", p.partition), 1_000 + i);
            b.put_aggregate(p, Namespace::Dashboard, format!("k{i}").as_bytes(), &codec::encode(&i)?);
        }
        b.put_outbox(p, &format!("act-{}", p.partition), b"row", OutboxIndex::Pending);
        b.put_checkpoint(
            p,
            &Checkpoint { next_offset: from + n, max_event_ms: Some(7), max_append_ms: 1_000 + from + n, records: 9 },
        )?;
        store.commit_staged(b.stage())
    }

    fn fill(store: &Store, p: PartitionId, n: i64) -> Result<(), StateError> {
        fill_from(store, p, 0, n)
    }

    fn export(store: &Store, p: PartitionId, dir: &Path) -> Result<PartitionExport, StateError> {
        Ok(store.export_partition(&store.consistent_point(), p, dir)?.expect("p committed"))
    }

    #[test]
    fn dedup_entries_folded_into_files_and_still_in_runs_both_come_along() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, f.files.path().join("e"));
        let p = PartitionId::orders(6);
        fill(a, p, 40)?;
        a.compact_dedup();
        fill_from(a, p, 40, 10)?;
        assert_eq!(a.dedup_entries_in_memory(p), 10, "40 in a table file, 10 in a run");
        let export = export(a, p, &files)?;
        b.import_partition(p, &files, &export)?;
        assert_eq!(b.dedup_entries_in_memory(p), 10, "the run is read back by the import");
        let ids: Vec<String> = (0..51).map(|i| format!("e-6-{i}")).collect();
        let want: Vec<Option<i64>> = (0..51).map(|i| (i < 50).then_some(1_000 + i)).collect();
        assert_eq!(b.dedup_lookup(p, &ids)?, want);
        Ok(())
    }

    #[test]
    fn a_partition_exported_from_one_store_reads_the_same_in_another() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, f.files.path().join("e"));
        let (p, other) = (PartitionId::orders(3), PartitionId::orders(4));
        fill(a, p, 50)?;
        fill(a, other, 5)?;
        let export = export(a, p, &files)?;
        b.import_partition(p, &files, &export)?;

        assert_eq!(b.checkpoint(p)?, a.checkpoint(p)?);
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?, a.load_aggregates(p, Namespace::Dashboard)?);
        assert_eq!(b.outbox_scan(p)?, a.outbox_scan(p)?);
        assert_eq!(b.outbox_pending(p)?, a.outbox_pending(p)?);
        assert_eq!(b.outbox_pending_count(p)?, 1);
        let ids: Vec<String> = (0..50).map(|i| format!("e-3-{i}")).collect();
        assert!(b.dedup_lookup(p, &ids)?.iter().all(Option::is_some), "every dedup entry came along");
        assert_eq!(b.checkpoint(other)?, None, "only the exported partition moved");
        assert!(b.load_aggregates(other, Namespace::Dashboard)?.is_empty());
        fill_from(b, p, 50, 1)?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(51), "the imported partition takes new commits");
        Ok(())
    }

    #[test]
    fn an_import_replaces_what_the_store_held_of_the_partition_and_survives_a_reopen() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, files) = (&f.a, f.files.path().join("e"));
        let b_dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::sku(1);
        fill(a, p, 3)?;
        let export = export(a, p, &files)?;
        {
            let b = open(b_dir.path())?;
            fill(&b, p, 40)?;
            b.import_partition(p, &files, &export)?;
            assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(3));
            assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 3, "the old rows are gone");
        }
        let b = open(b_dir.path())?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(3), "the imported generation after a reopen");
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 3);
        Ok(())
    }

    #[test]
    fn an_export_holds_at_least_its_points_checkpoint_and_the_import_reads_the_exact_one() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, f.files.path().join("e"));
        let p = PartitionId::orders(0);
        fill(a, p, 10)?;
        let point = a.consistent_point();
        fill_from(a, p, 10, 10)?;
        let export = a.export_partition(&point, p, &files)?.expect("p committed");
        assert_eq!(export.checkpoint.next_offset, 10, "the point's checkpoint: a lower bound");
        b.import_partition(p, &files, &export)?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(20), "the files' own checkpoint");
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 20, "state and checkpoint agree");
        Ok(())
    }

    #[test]
    fn a_second_export_shares_the_files_of_the_first_and_adds_only_what_is_new() -> Result<(), StateError> {
        let f = fixture()?;
        let a = &f.a;
        let p = PartitionId::orders(1);
        fill(a, p, 1_000)?;
        let first = export(a, p, &f.files.path().join("1"))?;
        fill_from(a, p, 1_000, 10)?;
        let second = export(a, p, &f.files.path().join("2"))?;
        let new: Vec<&ExportedFile> = second.files.iter().filter(|s| !first.files.contains(s)).collect();
        assert!(first.files.iter().all(|f| second.files.contains(f)), "{first:?} then {second:?}");
        assert_eq!(new.len(), 1, "one flushed file: {new:?}");
        assert!(new[0].bytes < first.bytes() / 4, "the new file holds the 10 new entries, not the 1,000");
        // The newest value of a key overwritten across files wins after an import.
        let b = &f.b;
        b.import_partition(p, &f.files.path().join("2"), &second)?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(1_010));
        Ok(())
    }

    #[test]
    fn an_import_that_fails_after_its_checks_leaves_the_local_state_as_it_was() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, f.files.path().join("e"));
        let p = PartitionId::sku(2);
        fill(a, p, 30)?;
        fill(b, p, 12)?;
        let export = export(a, p, &files)?;
        // The file is not an SST any more, at the size the export recorded: it passes the
        // size check and fails only when RocksDB reads it.
        let victim = files.join(&export.files.last().expect("files").file);
        let size = std::fs::metadata(&victim).unwrap().len();
        std::fs::remove_file(&victim).unwrap();
        std::fs::write(&victim, vec![b'x'; usize::try_from(size).unwrap()]).unwrap();
        assert!(b.import_partition(p, &files, &export).is_err(), "a broken file is not imported");
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(12), "the local checkpoint is still there");
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 12, "and so is the local state");
        assert_eq!(b.outbox_pending_count(p)?, 1);
        let ids: Vec<String> = (0..12).map(|i| format!("e-2-{i}")).collect();
        assert!(b.dedup_lookup(p, &ids)?.iter().all(Option::is_some), "every local dedup entry");
        fill_from(b, p, 12, 1)?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(13), "and it takes commits");
        Ok(())
    }

    #[test]
    fn a_partition_that_never_committed_exports_nothing_and_a_damaged_file_is_refused() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b) = (&f.a, &f.b);
        let files = f.files.path().join("e");
        assert_eq!(a.export_partition(&a.consistent_point(), PartitionId::orders(9), &files)?, None);
        let p = PartitionId::orders(1);
        fill(a, p, 5)?;
        let export = export(a, p, &files)?;
        let victim = files.join(&export.files[0].file);
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::remove_file(&victim).unwrap();
        std::fs::write(&victim, bytes).unwrap();
        fill(b, p, 2)?;
        assert!(matches!(b.import_partition(p, &files, &export), Err(StateError::Decode { .. })));
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(2), "nothing changed");
        Ok(())
    }

    #[test]
    fn a_files_keys_are_hex_in_a_manifest_and_read_back_as_written() {
        let f = ExportedFile {
            file: "000012.sst".into(),
            bytes: 3,
            level: 6,
            smallest_key: vec![0, 0xff, b'a'],
            largest_key: vec![],
            smallest_seqno: 1,
            largest_seqno: 9,
            entries: 2,
            deletions: 0,
        };
        let json = serde_json::to_string(&f).expect("encode");
        assert!(json.contains("\"smallest_key\":\"00ff61\""), "{json}");
        assert_eq!(serde_json::from_str::<ExportedFile>(&json).expect("decode"), f);
        assert!(serde_json::from_str::<ExportedFile>(&json.replace("00ff61", "0ff61")).is_err(), "odd digits");
    }
}
