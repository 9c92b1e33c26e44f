//! Where snapshots live and how one is published, found and pruned.
//!
//! ```text
//! <snapshot-dir>/<topology>/<group>/<role>-<partition>/
//!     files/<store identity>-<file number>.sst    the SST files, shared by every snapshot
//!                                                 that holds them (uploaded once)
//!     <checkpoint offset, 20 digits>/manifest.json  one snapshot: the files it is made of
//! ```
//! A partition's state is the SST files of its column family, and an SST file never changes
//! once written: a round uploads only the files the store does not hold yet and then the
//! manifest that names all of them (incremental snapshots). RocksDB never reuses a file
//! number within a store, and the store identity tells stores apart, so a name is never
//! given to two different files.
//!
//! Object stores have no rename: the files of a snapshot are uploaded first and its manifest
//! last, so the manifest's presence is the publication and a reader sees a whole snapshot or
//! none. The name of a snapshot is the checkpoint its files hold at least (the partition's
//! next input offset at the consistent point of its round); the newest is the one with the
//! highest name. Pruning removes the manifests beyond the newest `keep` first, then the files
//! that no kept manifest names once they are an hour old (so a round uploading now keeps its
//! files). Manifests of format 1 (one file per column family, inside the snapshot's own
//! directory, written before layout 2 of the store) are skipped by readers and pruned like
//! the others.
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path as Key;
use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use tidemark_state::{PartitionExport, PartitionId};

use super::error::{Op, SnapshotError};
use super::store::Bucket;

pub const MANIFEST: &str = "manifest.json";
/// The directory of a partition's shared SST files.
pub const FILES: &str = "files";
/// Objects of no snapshot this old were left by a writer that died (a round takes seconds).
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
/// Version of the manifest's shape: 2 since the files are shared between snapshots.
pub const FORMAT: u32 = 2;

/// What a snapshot holds, beside its files (docs/formats.md, "Snapshots").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The partition as operators name it (`orders[3]`); `source` and `number` are the key.
    pub partition: String,
    pub source: u16,
    pub number: i32,
    /// The Kafka topic the partition belongs to: a restore refuses a snapshot of another.
    pub topic: String,
    /// Wall-clock time of the consistent point the export started from (milliseconds since
    /// the epoch): where a restore starts reading the audit topic for actions completed
    /// after it. Never part of any output.
    pub taken_at_ms: i64,
    /// The process that wrote it (`--instance-id`, or the host name).
    pub taken_by: String,
    /// `checkpoint`: the checkpoint the files hold at least (the import reads the exact one);
    /// `files[].file`: the object's name in the partition's `files/`.
    #[serde(flatten)]
    pub export: PartitionExport,
}

/// Only the version, to skip a manifest of another shape with a clear reason.
#[derive(Deserialize)]
struct Format {
    format: u32,
}

/// The snapshots of one topology and consumer group.
#[derive(Clone, Debug)]
pub struct Layout {
    bucket: Arc<Bucket>,
    root: Key,
}

/// A published snapshot: where it is and its manifest.
#[derive(Clone, Debug)]
pub struct Found {
    pub key: Key,
    pub manifest: Manifest,
}

/// A partition's objects: its snapshots by offset, and the files they share.
#[derive(Debug, Default)]
pub struct Listing {
    pub snapshots: BTreeMap<i64, Objects>,
    /// The shared SST files (`files/<name>`), by name.
    pub files: BTreeMap<String, ObjectMeta>,
    /// Objects outside any offset's directory (`.tmp-*` left by the directory layout's
    /// writers that died).
    pub strays: Vec<ObjectMeta>,
}

/// The objects of one offset: its manifest, once published, and the others (the files of a
/// format-1 snapshot).
#[derive(Debug, Default)]
pub struct Objects {
    pub manifest: Option<ObjectMeta>,
    pub files: Vec<ObjectMeta>,
}

/// What one publication uploaded and what it found already there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// Bytes uploaded: the new files and the manifest.
    pub uploaded: u64,
    pub uploaded_files: usize,
    /// Bytes of the snapshot's files that earlier rounds had uploaded.
    pub reused: u64,
    pub reused_files: usize,
}

impl Listing {
    /// Groups `objects` (all below `prefix`, a partition's) by offset.
    pub fn of(prefix: &Key, objects: Vec<ObjectMeta>) -> Self {
        let mut listing = Listing::default();
        for meta in objects {
            let parts: Vec<String> = match meta.location.prefix_match(prefix) {
                Some(parts) => parts.map(|p| p.as_ref().to_string()).collect(),
                None => continue,
            };
            if parts.len() == 2 && parts[0] == FILES {
                listing.files.insert(parts[1].clone(), meta);
                continue;
            }
            match parts.first().and_then(|dir| dir.parse::<i64>().ok()) {
                Some(offset) => {
                    let objects = listing.snapshots.entry(offset).or_default();
                    if parts.len() == 2 && parts[1] == MANIFEST {
                        objects.manifest = Some(meta);
                    } else {
                        objects.files.push(meta);
                    }
                }
                None => listing.strays.push(meta),
            }
        }
        listing
    }

    /// Offsets whose manifest is written, newest first.
    pub fn published(&self) -> impl Iterator<Item = i64> + '_ {
        self.snapshots.iter().rev().filter(|(_, o)| o.manifest.is_some()).map(|(offset, _)| *offset)
    }

    /// What pruning deletes, in order: every snapshot beyond the `keep` newest published
    /// ones (its manifest first, so it stops existing before its files go), then, once older
    /// than an hour at `now`, the objects of no snapshot (uploads never published, strays)
    /// and the shared files that no kept snapshot names (`referenced`: the file names of the
    /// kept manifests, every one of them read).
    pub fn prune_plan(&self, keep: usize, now: DateTime<Utc>, referenced: &HashSet<String>) -> Vec<Key> {
        let mut plan = Vec::new();
        for offset in self.published().skip(keep.max(1)) {
            let objects = &self.snapshots[&offset];
            plan.extend(objects.manifest.iter().map(|m| m.location.clone()));
            plan.extend(objects.files.iter().map(|m| m.location.clone()));
        }
        let abandoned = |m: &&ObjectMeta| (now - m.last_modified).to_std().is_ok_and(|age| age > ABANDONED_AFTER);
        let unpublished = self.snapshots.values().filter(|o| o.manifest.is_none()).flat_map(|o| o.files.iter());
        plan.extend(unpublished.chain(self.strays.iter()).filter(abandoned).map(|m| m.location.clone()));
        let unreferenced = self.files.iter().filter(|(name, _)| !referenced.contains(*name)).map(|(_, m)| m);
        plan.extend(unreferenced.filter(abandoned).map(|m| m.location.clone()));
        plan
    }
}

/// Path components from names: anything but `[A-Za-z0-9._-]` becomes `_`.
fn component(name: &str) -> String {
    let s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

/// A manifest's file name must stay inside its partition's `files/`.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\'])
}

impl Layout {
    pub fn new(bucket: Arc<Bucket>, topology: &str, group: &str) -> Self {
        let root = bucket.key([component(topology).as_str(), component(group).as_str()]);
        Layout { bucket, root }
    }

    pub fn location(&self) -> &str {
        self.bucket.location()
    }

    pub fn partition_prefix(&self, p: PartitionId) -> Key {
        self.root.clone().join(format!("{}-{}", p.role(), p.partition))
    }

    fn snapshot_prefix(&self, p: PartitionId, next_offset: i64) -> Key {
        self.partition_prefix(p).join(format!("{next_offset:020}"))
    }

    fn file_key(&self, p: PartitionId, name: &str) -> Key {
        self.partition_prefix(p).join(FILES).join(name)
    }

    /// Every object of `p`'s snapshots, grouped (one listing request, or a few pages).
    pub fn listing(&self, p: PartitionId) -> Result<Listing, SnapshotError> {
        let prefix = self.partition_prefix(p);
        Ok(Listing::of(&prefix, self.bucket.list(&prefix)?))
    }

    /// The offset of `p`'s newest published snapshot, from a listing alone.
    pub fn newest_offset(&self, p: PartitionId) -> Result<Option<i64>, SnapshotError> {
        Ok(self.listing(p)?.published().next())
    }

    /// The manifest at `key` when it is one this build reads (format 2, of `p`, named by the
    /// checkpoint it records, file names inside `files/`); `None`, logged, for any other.
    /// `Ok(None)` too when it was pruned since the listing.
    fn read_manifest(&self, p: PartitionId, key: &Key, offset: i64) -> Result<Option<Manifest>, SnapshotError> {
        let manifest_key = key.clone().join(MANIFEST);
        let Some(bytes) = self.bucket.get(Op::List, &manifest_key)? else { return Ok(None) };
        let format = match serde_json::from_slice::<Format>(&bytes) {
            Ok(f) => f.format,
            Err(e) => {
                tracing::warn!(snapshot = %key, error = %e, "snapshot manifest unreadable; skipped");
                return Ok(None);
            }
        };
        if format != FORMAT {
            tracing::warn!(
                snapshot = %key,
                format,
                "snapshot of manifest format {format} (this build reads {FORMAT}); skipped: the partition \
                 replays from its local state or the log, and the next snapshot is written in format {FORMAT}"
            );
            return Ok(None);
        }
        let manifest: Manifest = match serde_json::from_slice(&bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(snapshot = %key, error = %e, "snapshot manifest unreadable; skipped");
                return Ok(None);
            }
        };
        let names_ok = manifest.export.files.iter().all(|f| plain_file_name(&f.file));
        if manifest.source == p.source
            && manifest.number == p.partition
            && manifest.export.checkpoint.next_offset == offset
            && names_ok
        {
            Ok(Some(manifest))
        } else {
            tracing::warn!(snapshot = %key, "snapshot manifest of another partition or offset; skipped");
            Ok(None)
        }
    }

    /// Published snapshots of `p`, newest first, with their manifests (those readable, of
    /// `p` and of the offset they are named by), at most `limit` of them.
    pub fn list(&self, p: PartitionId, limit: usize) -> Result<Vec<Found>, SnapshotError> {
        let listing = self.listing(p)?;
        let mut found = Vec::new();
        for offset in listing.published() {
            if found.len() >= limit {
                break;
            }
            let key = self.snapshot_prefix(p, offset);
            if let Some(manifest) = self.read_manifest(p, &key, offset)? {
                found.push(Found { key, manifest });
            }
        }
        Ok(found)
    }

    pub fn latest(&self, p: PartitionId) -> Result<Option<Found>, SnapshotError> {
        Ok(self.list(p, 1)?.into_iter().next())
    }

    /// Publishes an export: its files are in `dir` under the names the manifest gives them
    /// (RocksDB's), and are stored as `<store_id>-<name>` in the partition's `files/`; a file
    /// that `listing` (the partition's, taken before the export) shows with the same size is
    /// not uploaded again. The manifest, naming the stored files, goes last. `None` when a
    /// snapshot of the same offset is already published (it holds at least the same state).
    pub fn publish(
        &self,
        dir: &Path,
        manifest: &Manifest,
        store_id: &str,
        listing: &Listing,
    ) -> Result<Option<Published>, SnapshotError> {
        let p = PartitionId { source: manifest.source, partition: manifest.number };
        let key = self.snapshot_prefix(p, manifest.export.checkpoint.next_offset);
        let manifest_key = key.clone().join(MANIFEST);
        if listing.snapshots.get(&manifest.export.checkpoint.next_offset).is_some_and(|o| o.manifest.is_some()) {
            return Ok(None);
        }
        let mut published = manifest.clone();
        let mut out = Published::default();
        for f in &mut published.export.files {
            let name = format!("{}-{}", component(store_id), f.file);
            match listing.files.get(&name) {
                Some(there) if there.size == f.bytes => {
                    out.reused += f.bytes;
                    out.reused_files += 1;
                }
                _ => {
                    out.uploaded += self.bucket.put_file(&self.file_key(p, &name), &dir.join(&f.file))?;
                    out.uploaded_files += 1;
                }
            }
            f.file = name;
        }
        let encoded = serde_json::to_vec_pretty(&published)
            .map_err(|e| SnapshotError::Manifest { key: manifest_key.to_string(), detail: e.to_string() })?;
        out.uploaded += encoded.len() as u64;
        self.bucket.put(&manifest_key, Bytes::from(encoded))?;
        Ok(Some(out))
    }

    /// Downloads the files of `found` into `dir`, under the names its manifest gives them.
    pub fn download(&self, found: &Found, dir: &Path) -> Result<u64, SnapshotError> {
        let p = PartitionId { source: found.manifest.source, partition: found.manifest.number };
        let mut bytes = 0;
        for f in &found.manifest.export.files {
            bytes += self.bucket.get_file(&self.file_key(p, &f.file), &dir.join(&f.file))?;
        }
        Ok(bytes)
    }

    /// Keeps the `keep` newest snapshots of `p` and deletes the others, the files no kept
    /// snapshot names, and the objects of uploads abandoned by writers that died. Shared
    /// files are deleted only when every kept manifest could be read. Returns how many
    /// snapshots went.
    pub fn prune(&self, p: PartitionId, keep: usize) -> Result<usize, SnapshotError> {
        let listing = self.listing(p)?;
        let dropped = listing.published().skip(keep.max(1)).count();
        let mut referenced = HashSet::new();
        let mut all_read = true;
        for offset in listing.published().take(keep.max(1)) {
            let key = self.snapshot_prefix(p, offset);
            match self.bucket.get(Op::Prune, &key.clone().join(MANIFEST))? {
                Some(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                    Ok(m) if m.format == FORMAT => referenced.extend(m.export.files.into_iter().map(|f| f.file)),
                    // Format 1 names files in its own directory, none of `files/`.
                    Ok(_) => {}
                    Err(_) if serde_json::from_slice::<Format>(&bytes).is_ok_and(|f| f.format != FORMAT) => {}
                    Err(_) => all_read = false,
                },
                None => all_read = false,
            }
        }
        let mut plan = listing.prune_plan(keep, Utc::now(), &referenced);
        if !all_read {
            let shared = self.partition_prefix(p).join(FILES);
            plan.retain(|k| k.prefix_match(&shared).is_none());
        }
        if !plan.is_empty() {
            self.bucket.delete(&plan)?;
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use tidemark_state::{Checkpoint, ExportedFile};

    fn file(name: &str, bytes: u64) -> ExportedFile {
        ExportedFile {
            file: name.into(),
            bytes,
            level: 6,
            smallest_key: vec![b'a'],
            largest_key: vec![b'z'],
            smallest_seqno: 1,
            largest_seqno: 2,
            entries: 1,
            deletions: 0,
        }
    }

    fn manifest_of(p: PartitionId, next: i64, files: Vec<ExportedFile>) -> Manifest {
        Manifest {
            format: FORMAT,
            partition: p.to_string(),
            source: p.source,
            number: p.partition,
            topic: "orders".into(),
            taken_at_ms: 1,
            taken_by: "test".into(),
            export: PartitionExport {
                checkpoint: Checkpoint { next_offset: next, ..Checkpoint::default() },
                comparator: "leveldb.BytewiseComparator".into(),
                files,
            },
        }
    }

    fn manifest(p: PartitionId, next: i64) -> Manifest {
        manifest_of(p, next, vec![file("000012.sst", 3)])
    }

    fn in_memory(topology: &str) -> Layout {
        let bucket = Bucket::with_store(Arc::new(InMemory::new()), "memory").expect("runtime");
        Layout::new(Arc::new(bucket), topology, "tidemark")
    }

    /// Publishes `m` from a directory holding each of its files with `size` bytes of `fill`.
    fn publish_files(layout: &Layout, m: &Manifest, fill: u8) -> Result<Option<Published>, SnapshotError> {
        let dir = tempfile::tempdir().expect("tmp");
        for f in &m.export.files {
            std::fs::write(dir.path().join(&f.file), vec![fill; f.bytes as usize]).expect("write");
        }
        layout.publish(
            dir.path(),
            m,
            "store-a",
            &layout.listing(PartitionId { source: m.source, partition: m.number })?,
        )
    }

    fn publish(layout: &Layout, p: PartitionId, next: i64) -> Result<Option<Published>, SnapshotError> {
        publish_files(layout, &manifest(p, next), b'x')
    }

    fn object(key: &str, age_secs: i64) -> ObjectMeta {
        ObjectMeta {
            location: Key::from(key),
            last_modified: Utc::now() - chrono::Duration::seconds(age_secs),
            size: 1,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn the_newest_snapshot_is_the_one_with_the_highest_offset_and_old_ones_are_pruned() -> anyhow::Result<()> {
        let layout = in_memory("shop orders");
        let p = PartitionId::orders(3);
        for next in [40, 7, 1200] {
            assert!(publish(&layout, p, next)?.is_some());
        }
        assert_eq!(layout.newest_offset(p)?, Some(1200));
        let latest = layout.latest(p)?.expect("three were published");
        assert_eq!(latest.manifest.export.checkpoint, manifest(p, 1200).export.checkpoint);
        assert_eq!(latest.key.as_ref(), "shop_orders/tidemark/orders-3/00000000000000001200");
        assert_eq!(latest.manifest.export.files[0].file, "store-a-000012.sst", "named by store and file number");
        let staged = tempfile::tempdir()?;
        assert_eq!(layout.download(&latest, staged.path())?, 3);
        assert_eq!(std::fs::read(staged.path().join("store-a-000012.sst"))?, b"xxx");
        assert_eq!(layout.prune(p, 2)?, 1);
        let left: Vec<i64> = layout.list(p, 10)?.iter().map(|f| f.manifest.export.checkpoint.next_offset).collect();
        assert_eq!(left, vec![1200, 40]);
        let listing = layout.listing(p)?;
        assert_eq!(listing.snapshots.len(), 2, "the pruned snapshot's manifest went");
        assert_eq!(listing.files.len(), 1, "the file the kept snapshots share stays");
        assert!(layout.latest(PartitionId::orders(4))?.is_none(), "other partitions have none");
        Ok(())
    }

    #[test]
    fn a_round_uploads_only_the_files_no_earlier_round_uploaded_and_its_manifest() -> anyhow::Result<()> {
        let layout = in_memory("t");
        let p = PartitionId::orders(0);
        let first = manifest_of(p, 10, vec![file("000010.sst", 1000), file("000011.sst", 200)]);
        let one = publish_files(&layout, &first, b'1')?.expect("published");
        assert_eq!((one.uploaded_files, one.reused_files, one.reused), (2, 0, 0));
        assert!(one.uploaded > 1200, "both files and the manifest: {one:?}");
        // Compaction merged 11 into 14; 10 is still live; 15 is new.
        let second =
            manifest_of(p, 20, vec![file("000010.sst", 1000), file("000014.sst", 300), file("000015.sst", 50)]);
        let two = publish_files(&layout, &second, b'2')?.expect("published");
        assert_eq!((two.uploaded_files, two.reused_files, two.reused), (2, 1, 1000));
        let manifest_bytes =
            layout.bucket.get(Op::List, &layout.snapshot_prefix(p, 20).join(MANIFEST))?.expect("written");
        assert_eq!(two.uploaded, 350 + manifest_bytes.len() as u64, "the new files and the manifest only");
        let staged = tempfile::tempdir()?;
        let newest = layout.latest(p)?.expect("published");
        assert_eq!(layout.download(&newest, staged.path())?, 1350);
        assert_eq!(std::fs::read(staged.path().join("store-a-000010.sst"))?, vec![b'1'; 1000], "the first round's");
        // Another store's file 10 is another file.
        let other = tempfile::tempdir()?;
        std::fs::write(other.path().join("000010.sst"), b"other")?;
        let three = layout.publish(
            other.path(),
            &manifest_of(p, 30, vec![file("000010.sst", 5)]),
            "store-b",
            &layout.listing(p)?,
        )?;
        assert_eq!(three.map(|t| t.uploaded_files), Some(1));
        assert!(layout.listing(p)?.files.contains_key("store-b-000010.sst"));
        Ok(())
    }

    #[test]
    fn an_upload_without_its_manifest_is_no_snapshot_and_an_offset_is_published_once() -> anyhow::Result<()> {
        let layout = in_memory("t");
        let p = PartitionId::sku(0);
        // A writer that died before its manifest: files only.
        layout.bucket.put(&layout.file_key(p, "store-z-000001.sst"), Bytes::from_static(b"abc"))?;
        assert!(layout.latest(p)?.is_none());
        assert_eq!(layout.newest_offset(p)?, None);
        assert!(publish(&layout, p, 5)?.is_some());
        assert!(publish(&layout, p, 5)?.is_none(), "the same offset again is not published");
        assert_eq!(layout.list(p, 10)?.len(), 1);
        assert_eq!(layout.prune(p, 1)?, 0);
        assert!(
            layout.listing(p)?.files.contains_key("store-z-000001.sst"),
            "a recent unreferenced file may belong to a round still uploading"
        );
        Ok(())
    }

    #[test]
    fn pruning_drops_old_manifests_first_then_files_no_kept_snapshot_names_once_an_hour_old() {
        let prefix = Key::from("t/g/orders-0");
        let listing = Listing::of(
            &prefix,
            vec![
                object("t/g/orders-0/00000000000000000010/manifest.json", 9000),
                object("t/g/orders-0/00000000000000000020/manifest.json", 60),
                object("t/g/orders-0/00000000000000000030/manifest.json", 5),
                // A format-1 snapshot: its file in its own directory.
                object("t/g/orders-0/00000000000000000005/manifest.json", 9500),
                object("t/g/orders-0/00000000000000000005/a-aggregates.sst", 9500),
                object("t/g/orders-0/files/s-000001.sst", 9000),
                object("t/g/orders-0/files/s-000002.sst", 9000),
                object("t/g/orders-0/files/s-000003.sst", 60),
                object("t/g/orders-0/files/s-000009.sst", 30),
                // Never published: one abandoned, one perhaps still uploading.
                object("t/g/orders-0/00000000000000000025/d-aggregates.sst", 7200),
                object("t/g/orders-0/00000000000000000040/e-aggregates.sst", 30),
                // A temporary directory of the directory layout's writer that died.
                object("t/g/orders-0/.tmp-7-1/aggregates.sst", 7200),
                object("t/g/orders-0/.tmp-7-2/aggregates.sst", 10),
                // Another partition's prefix is not part of this listing.
                object("t/g/orders-01/00000000000000000001/manifest.json", 9000),
            ],
        );
        assert_eq!(listing.published().collect::<Vec<_>>(), vec![30, 20, 10, 5]);
        // The kept snapshots (30 and 20) name files 2 and 3.
        let referenced: HashSet<String> = ["s-000002.sst".to_string(), "s-000003.sst".to_string()].into();
        let plan: Vec<String> = listing.prune_plan(2, Utc::now(), &referenced).iter().map(|k| k.to_string()).collect();
        assert_eq!(
            plan,
            vec![
                "t/g/orders-0/00000000000000000010/manifest.json",
                "t/g/orders-0/00000000000000000005/manifest.json",
                "t/g/orders-0/00000000000000000005/a-aggregates.sst",
                "t/g/orders-0/00000000000000000025/d-aggregates.sst",
                "t/g/orders-0/.tmp-7-1/aggregates.sst",
                "t/g/orders-0/files/s-000001.sst",
            ]
        );
        assert_eq!(
            listing.prune_plan(0, Utc::now(), &referenced),
            listing.prune_plan(1, Utc::now(), &referenced),
            "the newest always stays"
        );
    }

    #[test]
    fn shared_files_stay_when_a_kept_manifest_cannot_be_read() -> anyhow::Result<()> {
        let layout = in_memory("t");
        let p = PartitionId::orders(1);
        assert!(publish(&layout, p, 5)?.is_some());
        // An old file no manifest names, and the only manifest damaged.
        let old = object("x", 7200);
        let key = layout.file_key(p, "store-a-000001.sst");
        layout.bucket.put(&key, Bytes::from_static(b"old"))?;
        let manifest_key = layout.snapshot_prefix(p, 5).join(MANIFEST);
        layout.bucket.put(&manifest_key, Bytes::from_static(b"{ damaged"))?;
        let mut listing = layout.listing(p)?;
        if let Some(meta) = listing.files.get_mut("store-a-000001.sst") {
            meta.last_modified = old.last_modified;
        }
        assert!(listing.prune_plan(1, Utc::now(), &HashSet::new()).contains(&key), "the plan alone would delete it");
        layout.prune(p, 1)?;
        assert!(layout.bucket.exists(Op::List, &key)?, "kept: the damaged manifest might have named it");
        Ok(())
    }

    #[test]
    fn a_format_1_snapshot_is_skipped_by_readers_and_pruned_once_newer_ones_are_kept() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = PartitionId::orders(3);
        // What a build before layout 2 left: one file per column family beside the manifest.
        let snapshot = dir.path().join("t").join("g").join("orders-3").join(format!("{:020}", 40));
        std::fs::create_dir_all(&snapshot)?;
        std::fs::write(snapshot.join("1-a-aggregates.sst"), b"abc")?;
        let format_1 = serde_json::json!({
            "format": 1, "partition": "orders[3]", "source": 0, "number": 3, "topic": "orders",
            "taken_at_ms": 1, "taken_by": "old",
            "checkpoint": {"next_offset": 40, "max_event_ms": null, "max_append_ms": 0, "records": 0},
            "files": [{"column_family": "aggregates", "file": "1-a-aggregates.sst", "bytes": 3, "entries": 1}]
        });
        std::fs::write(snapshot.join(MANIFEST), serde_json::to_vec_pretty(&format_1)?)?;
        let layout = Layout::new(Arc::new(Bucket::open(&dir.path().display().to_string())?), "t", "g");
        assert_eq!(layout.newest_offset(p)?, Some(40), "published");
        assert!(layout.latest(p)?.is_none(), "but not of a format this build reads");
        assert!(publish(&layout, p, 50)?.is_some());
        assert_eq!(layout.latest(p)?.map(|f| f.manifest.export.checkpoint.next_offset), Some(50));
        assert!(dir.path().join("t/g/orders-3/files/store-a-000012.sst").exists());
        assert_eq!(layout.prune(p, 1)?, 1);
        assert!(!snapshot.join(MANIFEST).exists() && !snapshot.join("1-a-aggregates.sst").exists());
        Ok(())
    }
}
