//! One partition's state as files, and back: what a snapshot carries between pods.
//!
//! Every key of a partition starts with its [`PartitionId`] prefix ([`crate::keys`]), so its
//! state is one contiguous range in each column family. An export reads those ranges through
//! one RocksDB snapshot (every commit is one atomic batch, so any snapshot is a commit
//! boundary: state, outbox rows and checkpoint agree) and writes each non-empty range as an
//! SST file. An import drops the partition's range, ingests the files, and writes the
//! checkpoint last: a crash in the middle leaves no checkpoint, so the next start imports
//! again instead of running on half a state.

use std::path::{Path, PathBuf};

use rocksdb::{IngestExternalFileOptions, IteratorMode, Options, ReadOptions, SstFileWriter, WriteOptions};
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::store::{CF_AGGREGATES, CF_DEDUP, CF_DEDUP_LEGACY, CF_META, CF_OUTBOX, CF_OUTBOX_EXPIRY, CF_OUTBOX_PENDING};
use crate::{Checkpoint, PartitionId, StateError, Store};

/// The column families that hold per-partition state (the checkpoint lives in `meta`).
const PARTITION_CFS: [&str; 6] =
    [CF_DEDUP, CF_DEDUP_LEGACY, CF_AGGREGATES, CF_OUTBOX, CF_OUTBOX_PENDING, CF_OUTBOX_EXPIRY];

/// One exported SST file: a column family's range of one partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedFile {
    pub column_family: String,
    /// File name inside the export directory.
    pub file: String,
    pub bytes: u64,
    pub entries: u64,
}

/// What [`Store::export_partition`] wrote: the files and the checkpoint they are consistent with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionExport {
    pub checkpoint: Checkpoint,
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

impl Store {
    /// Writes partition `p`'s state, as of one consistent point, into `dir` (which must
    /// exist): one SST file per non-empty column family. `None` when `p` has never committed
    /// here. The caller takes the snapshot so that several partitions exported together are
    /// of the same instant (see [`Store::consistent_point`]).
    pub fn export_partition(
        &self,
        point: &ConsistentPoint<'_>,
        p: PartitionId,
        dir: &Path,
    ) -> Result<Option<PartitionExport>, StateError> {
        let snapshot = &point.0;
        let Some(raw) = snapshot.get_cf(self.cf(CF_META), Self::checkpoint_key(p)).map_err(|e| self.rocks(e))? else {
            return Ok(None);
        };
        let checkpoint: Checkpoint = codec::decode("checkpoint", &raw)?;
        let mut files = Vec::new();
        for name in PARTITION_CFS {
            let file = format!("{name}.sst");
            let path = dir.join(&file);
            let opts = sst_options();
            let mut writer: Option<SstFileWriter<'_>> = None;
            let mut entries = 0u64;
            let mut read = ReadOptions::default();
            read.set_iterate_lower_bound(p.prefix().to_vec());
            read.set_iterate_upper_bound(p.prefix_end());
            for item in snapshot.iterator_cf_opt(self.cf(name), read, IteratorMode::Start) {
                let (k, v) = item.map_err(|e| self.rocks(e))?;
                if writer.is_none() {
                    let w = SstFileWriter::create(&opts);
                    w.open(&path).map_err(|e| self.rocks(e))?;
                    writer = Some(w);
                }
                if let Some(w) = writer.as_mut() {
                    w.put(&k, &v).map_err(|e| self.rocks(e))?;
                }
                entries += 1;
            }
            if let Some(mut w) = writer {
                w.finish().map_err(|e| self.rocks(e))?;
                let bytes = std::fs::metadata(&path).map_err(io(&path))?.len();
                files.push(ExportedFile { column_family: name.to_string(), file, bytes, entries });
            }
        }
        Ok(Some(PartitionExport { checkpoint, files }))
    }

    /// A consistent point of the whole store to export partitions from.
    pub fn consistent_point(&self) -> ConsistentPoint<'_> {
        let taken_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        ConsistentPoint(self.db.snapshot(), taken_at_ms)
    }

    /// Replaces partition `p`'s state with an export read from `dir` (left as it was), or
    /// leaves it as it was: a failed import never leaves the partition empty or half there.
    ///
    /// 1. A file whose size differs from the export's record is refused.
    /// 2. The files are copied into a staging folder inside the store's directory: the copy
    ///    is where a full disk shows (an import needs the partition's size free), before
    ///    anything changed.
    /// 3. What the store holds of `p` is exported into the staging folder too (usually
    ///    nothing: a moved partition has no state here).
    /// 4. The partition's range is dropped, the staged files are ingested (moved, not copied
    ///    again) and the checkpoint is written last with fsync. If an ingest fails, the range
    ///    is dropped again and step 3's copy ingested in its place.
    pub fn import_partition(&self, p: PartitionId, dir: &Path, export: &PartitionExport) -> Result<(), StateError> {
        let mut files: Vec<(&str, &str, PathBuf)> = Vec::new();
        for f in &export.files {
            let Some(name) = PARTITION_CFS.iter().find(|n| **n == f.column_family) else {
                return Err(StateError::Decode {
                    what: "partition export",
                    detail: format!("unknown column family {} in {}", f.column_family, dir.display()),
                });
            };
            let path = dir.join(&f.file);
            let bytes = std::fs::metadata(&path).map_err(io(&path))?.len();
            if bytes != f.bytes {
                return Err(StateError::Decode {
                    what: "partition export",
                    detail: format!("{} has {bytes} bytes, the export recorded {}", path.display(), f.bytes),
                });
            }
            files.push((name, f.file.as_str(), path));
        }
        let staging = self.path().join(format!("import-{}-{}", p.source, p.partition));
        let result = self.import_staged(p, &staging, &files, &export.checkpoint);
        if staging.exists() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result
    }

    fn import_staged(
        &self,
        p: PartitionId,
        staging: &Path,
        files: &[(&str, &str, PathBuf)],
        checkpoint: &Checkpoint,
    ) -> Result<(), StateError> {
        if staging.exists() {
            std::fs::remove_dir_all(staging).map_err(io(staging))?;
        }
        let (incoming, local) = (staging.join("incoming"), staging.join("local"));
        for d in [&incoming, &local] {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        let mut staged = Vec::new();
        for (name, file, path) in files {
            let to = incoming.join(file);
            std::fs::copy(path, &to).map_err(io(&to))?;
            staged.push((*name, to));
        }
        let kept = self.export_partition(&self.consistent_point(), p, &local)?;
        self.drop_partition(p)?;
        match self.ingest(&staged).and_then(|()| self.put_checkpoint_synced(p, checkpoint)) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.drop_partition(p)?;
                if let Some(kept) = kept {
                    let back: Vec<(&str, PathBuf)> = kept
                        .files
                        .iter()
                        .filter_map(|f| {
                            let name = PARTITION_CFS.iter().find(|n| **n == f.column_family)?;
                            Some((*name, local.join(&f.file)))
                        })
                        .collect();
                    self.ingest(&back)?;
                    self.put_checkpoint_synced(p, &kept.checkpoint)?;
                }
                Err(e)
            }
        }
    }

    /// Ingests `files` (column family, path) by moving them into the store.
    fn ingest(&self, files: &[(&str, PathBuf)]) -> Result<(), StateError> {
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        for (name, path) in files {
            self.db
                .ingest_external_file_cf_opts(self.cf(name), &ingest, vec![path.clone()])
                .map_err(|e| self.rocks(e))?;
        }
        Ok(())
    }

    fn put_checkpoint_synced(&self, p: PartitionId, checkpoint: &Checkpoint) -> Result<(), StateError> {
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db
            .put_cf_opt(self.cf(CF_META), Self::checkpoint_key(p), codec::encode(checkpoint)?, &sync)
            .map_err(|e| self.rocks(e))
    }
}

/// A RocksDB snapshot of the store: every partition exported from it is of the same commit.
pub struct ConsistentPoint<'a>(rocksdb::SnapshotWithThreadMode<'a, rocksdb::DB>, i64);

impl ConsistentPoint<'_> {
    /// Wall-clock time (ms since the epoch) at which the point was taken: its state holds
    /// nothing written after it, however long the exports from it take.
    pub fn taken_at_ms(&self) -> i64 {
        self.1
    }
}

fn sst_options() -> Options {
    let mut opts = Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    opts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Namespace, OutboxIndex, StoreOptions};

    fn open(dir: &Path) -> Result<Store, StateError> {
        Store::open(dir, &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() })
    }

    /// Two empty stores and a directory for the export's files (the stores close before
    /// their directories go: fields drop in order).
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

    fn fill(store: &Store, p: PartitionId, n: i64) -> Result<(), StateError> {
        let mut b = store.batch();
        for i in 0..n {
            b.put_dedup(p, &format!("e-{}-{i}", p.partition), 1_000 + i);
            b.put_aggregate(p, Namespace::Dashboard, format!("k{i}").as_bytes(), &codec::encode(&i)?);
        }
        b.put_outbox(p, &format!("act-{}", p.partition), b"row", OutboxIndex::Pending);
        b.put_checkpoint(
            p,
            &Checkpoint { next_offset: n, max_event_ms: Some(7), max_append_ms: 1_000 + n, records: 9 },
        )?;
        store.commit_staged(b.stage())
    }

    #[test]
    fn a_partition_exported_from_one_store_reads_the_same_in_another() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, &f.files);
        let (p, other) = (PartitionId::orders(3), PartitionId::orders(4));
        fill(a, p, 50)?;
        fill(a, other, 5)?;
        let export = a.export_partition(&a.consistent_point(), p, files.path())?.expect("p committed");
        b.import_partition(p, files.path(), &export)?;

        assert_eq!(b.checkpoint(p)?, a.checkpoint(p)?);
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?, a.load_aggregates(p, Namespace::Dashboard)?);
        assert_eq!(b.outbox_scan(p)?, a.outbox_scan(p)?);
        assert_eq!(b.outbox_pending(p)?, a.outbox_pending(p)?);
        assert_eq!(b.outbox_pending_count(p)?, 1);
        let ids: Vec<String> = (0..50).map(|i| format!("e-3-{i}")).collect();
        assert!(b.dedup_lookup(p, &ids)?.iter().all(Option::is_some), "every dedup entry came along");
        assert_eq!(b.checkpoint(other)?, None, "only the exported partition moved");
        assert!(b.load_aggregates(other, Namespace::Dashboard)?.is_empty());
        Ok(())
    }

    #[test]
    fn an_import_replaces_what_the_store_held_of_the_partition() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, &f.files);
        let p = PartitionId::sku(1);
        fill(a, p, 3)?;
        fill(b, p, 40)?;
        let export = a.export_partition(&a.consistent_point(), p, files.path())?.expect("p committed");
        b.import_partition(p, files.path(), &export)?;
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(3));
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 3, "the old rows are gone");
        Ok(())
    }

    #[test]
    fn an_export_is_of_the_moment_its_point_was_taken() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, files) = (&f.a, &f.files);
        let p = PartitionId::orders(0);
        fill(a, p, 10)?;
        let point = a.consistent_point();
        fill(a, p, 20)?;
        let export = a.export_partition(&point, p, files.path())?.expect("p committed");
        assert_eq!(export.checkpoint.next_offset, 10);
        let agg = export.files.iter().find(|f| f.column_family == CF_AGGREGATES).map(|f| f.entries);
        assert_eq!(agg, Some(10), "rows written after the point are not in it");
        Ok(())
    }

    #[test]
    fn an_import_that_fails_after_its_checks_leaves_the_local_state_as_it_was() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, &f.files);
        let p = PartitionId::sku(2);
        fill(a, p, 30)?;
        fill(b, p, 12)?;
        let export = a.export_partition(&a.consistent_point(), p, files.path())?.expect("p committed");
        // The last file is not an SST any more, at the size the export recorded: it passes the
        // size check and fails only when RocksDB ingests it, after the first files went in.
        let victim = files.path().join(&export.files.last().expect("files").file);
        let size = std::fs::metadata(&victim).unwrap().len();
        std::fs::write(&victim, vec![b'x'; usize::try_from(size).unwrap()]).unwrap();
        assert!(b.import_partition(p, files.path(), &export).is_err(), "a broken file is not imported");
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(12), "the local checkpoint is still there");
        assert_eq!(b.load_aggregates(p, Namespace::Dashboard)?.len(), 12, "and so is the local state");
        assert_eq!(b.outbox_pending_count(p)?, 1);
        let ids: Vec<String> = (0..12).map(|i| format!("e-2-{i}")).collect();
        assert!(b.dedup_lookup(p, &ids)?.iter().all(Option::is_some), "every local dedup entry");
        let left: Vec<_> = std::fs::read_dir(b.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("import-"))
            .collect();
        assert!(left.is_empty(), "no staging folder is left behind");
        Ok(())
    }

    #[test]
    fn a_partition_that_never_committed_exports_nothing_and_a_damaged_file_is_refused() -> Result<(), StateError> {
        let f = fixture()?;
        let (a, b, files) = (&f.a, &f.b, &f.files);
        assert_eq!(a.export_partition(&a.consistent_point(), PartitionId::orders(9), files.path())?, None);
        let p = PartitionId::orders(1);
        fill(a, p, 5)?;
        let export = a.export_partition(&a.consistent_point(), p, files.path())?.expect("p committed");
        let victim = files.path().join(&export.files[0].file);
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(&victim, bytes).unwrap();
        fill(b, p, 2)?;
        assert!(matches!(b.import_partition(p, files.path(), &export), Err(StateError::Decode { .. })));
        assert_eq!(b.checkpoint(p)?.map(|c| c.next_offset), Some(2), "nothing changed");
        Ok(())
    }
}
