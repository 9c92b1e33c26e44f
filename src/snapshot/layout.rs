//! Where snapshots live and how one is published, found and pruned.
//!
//! ```text
//! <snapshot-dir>/<topology>/<group>/<role>-<partition>/<next offset, 20 digits>/
//!     <upload>-dedup-hashed.sst   one SST file per non-empty column family of the partition
//!     <upload>-aggregates.sst …   (<upload>: unique per writer, so two never mix files)
//!     manifest.json               written last: without it there is no snapshot
//! ```
//! Object stores have no rename: the files of a snapshot are uploaded first and its manifest
//! last, so the manifest's presence is the publication and a reader sees a whole snapshot or
//! none. A manifest names its files; snapshots written into a directory by earlier builds
//! (`aggregates.sst` beside `manifest.json`) read the same way. The name is the partition's
//! next input offset at the snapshot: processing is deterministic, so two snapshots of one
//! offset hold the same state, and the newest is the one with the highest name. Pruning
//! removes a snapshot's manifest before its files, for the same reason.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path as Key;
use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use tidemark_state::{PartitionExport, PartitionId};

use super::error::{Op, SnapshotError};
use super::store::Bucket;

pub const MANIFEST: &str = "manifest.json";
/// Objects of no snapshot this old were left by a writer that died (a round takes seconds).
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
/// Version of the manifest's shape.
pub const FORMAT: u32 = 1;

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
    /// Wall-clock time of the export (milliseconds since the epoch): where a restore starts
    /// reading the audit topic for actions completed after it. Never part of any output.
    pub taken_at_ms: i64,
    /// The process that wrote it (`--instance-id`, or the host name).
    pub taken_by: String,
    #[serde(flatten)]
    pub export: PartitionExport,
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

/// A partition's objects, grouped by the snapshot (offset) they belong to.
#[derive(Debug, Default)]
pub struct Listing {
    pub snapshots: BTreeMap<i64, Objects>,
    /// Objects outside any offset's directory (`.tmp-*` left by the directory layout's
    /// writers that died).
    pub strays: Vec<ObjectMeta>,
}

/// The objects of one offset: its manifest, once published, and the others.
#[derive(Debug, Default)]
pub struct Objects {
    pub manifest: Option<ObjectMeta>,
    pub files: Vec<ObjectMeta>,
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
    /// ones (its manifest first, so it stops existing before its files go), then the objects
    /// of no snapshot (uploads never published, strays) older than an hour at `now`.
    pub fn prune_plan(&self, keep: usize, now: DateTime<Utc>) -> Vec<Key> {
        let mut plan = Vec::new();
        for offset in self.published().skip(keep.max(1)) {
            let objects = &self.snapshots[&offset];
            plan.extend(objects.manifest.iter().map(|m| m.location.clone()));
            plan.extend(objects.files.iter().map(|m| m.location.clone()));
        }
        let abandoned = |m: &&ObjectMeta| (now - m.last_modified).to_std().is_ok_and(|age| age > ABANDONED_AFTER);
        let unpublished = self.snapshots.values().filter(|o| o.manifest.is_none()).flat_map(|o| o.files.iter());
        plan.extend(unpublished.chain(self.strays.iter()).filter(abandoned).map(|m| m.location.clone()));
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

/// A manifest's file name must stay inside its snapshot.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
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

    /// Every object of `p`'s snapshots, grouped (one listing request, or a few pages).
    pub fn listing(&self, p: PartitionId) -> Result<Listing, SnapshotError> {
        let prefix = self.partition_prefix(p);
        Ok(Listing::of(&prefix, self.bucket.list(&prefix)?))
    }

    /// The offset of `p`'s newest published snapshot, from a listing alone.
    pub fn newest_offset(&self, p: PartitionId) -> Result<Option<i64>, SnapshotError> {
        Ok(self.listing(p)?.published().next())
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
            let manifest_key = key.clone().join(MANIFEST);
            // Pruned since the listing: not a snapshot any more.
            let Some(bytes) = self.bucket.get(Op::List, &manifest_key)? else { continue };
            let manifest: Manifest = match serde_json::from_slice(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(snapshot = %key, error = %e, "snapshot manifest unreadable; skipped");
                    continue;
                }
            };
            let names_ok = manifest.export.files.iter().all(|f| plain_file_name(&f.file));
            if manifest.source == p.source
                && manifest.number == p.partition
                && manifest.export.checkpoint.next_offset == offset
                && names_ok
            {
                found.push(Found { key, manifest });
            } else {
                tracing::warn!(snapshot = %key, "snapshot manifest of another partition or offset; skipped");
            }
        }
        Ok(found)
    }

    pub fn latest(&self, p: PartitionId) -> Result<Option<Found>, SnapshotError> {
        Ok(self.list(p, 1)?.into_iter().next())
    }

    /// Uploads the files of an export (in `dir`, named as in `manifest`) under names unique
    /// to this upload, then the manifest that names them. `None` when a snapshot of the same
    /// offset is already published (it holds the same state); else the bytes uploaded.
    pub fn publish(&self, dir: &Path, manifest: &Manifest) -> Result<Option<u64>, SnapshotError> {
        let p = PartitionId { source: manifest.source, partition: manifest.number };
        let key = self.snapshot_prefix(p, manifest.export.checkpoint.next_offset);
        let manifest_key = key.clone().join(MANIFEST);
        if self.bucket.exists(Op::List, &manifest_key)? {
            return Ok(None);
        }
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let upload = format!("{}-{nanos:x}", std::process::id());
        let mut published = manifest.clone();
        let mut bytes = 0;
        for f in &mut published.export.files {
            let name = format!("{upload}-{}", f.file);
            bytes += self.bucket.put_file(&key.clone().join(name.as_str()), &dir.join(&f.file))?;
            f.file = name;
        }
        let encoded = serde_json::to_vec_pretty(&published)
            .map_err(|e| SnapshotError::Manifest { key: manifest_key.to_string(), detail: e.to_string() })?;
        bytes += encoded.len() as u64;
        self.bucket.put(&manifest_key, Bytes::from(encoded))?;
        Ok(Some(bytes))
    }

    /// Downloads the files of `found` into `dir`, under the names its manifest gives them.
    pub fn download(&self, found: &Found, dir: &Path) -> Result<u64, SnapshotError> {
        let mut bytes = 0;
        for f in &found.manifest.export.files {
            bytes += self.bucket.get_file(&found.key.clone().join(f.file.as_str()), &dir.join(&f.file))?;
        }
        Ok(bytes)
    }

    /// Keeps the `keep` newest snapshots of `p` and deletes the others, and the objects of
    /// uploads abandoned by writers that died. Returns how many snapshots went.
    pub fn prune(&self, p: PartitionId, keep: usize) -> Result<usize, SnapshotError> {
        let listing = self.listing(p)?;
        let dropped = listing.published().skip(keep.max(1)).count();
        let plan = listing.prune_plan(keep, Utc::now());
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

    fn manifest(p: PartitionId, next: i64) -> Manifest {
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
                files: vec![ExportedFile {
                    column_family: "aggregates".into(),
                    file: "aggregates.sst".into(),
                    bytes: 3,
                    entries: 1,
                }],
            },
        }
    }

    fn in_memory(topology: &str) -> Layout {
        let bucket = Bucket::with_store(Arc::new(InMemory::new()), "memory").expect("runtime");
        Layout::new(Arc::new(bucket), topology, "tidemark")
    }

    fn publish(layout: &Layout, p: PartitionId, next: i64) -> Result<Option<u64>, SnapshotError> {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("aggregates.sst"), b"abc").expect("write");
        layout.publish(dir.path(), &manifest(p, next))
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
        let file = &latest.manifest.export.files[0].file;
        assert!(
            file.ends_with("-aggregates.sst") && file != "aggregates.sst",
            "uploaded under a name of its own: {file}"
        );
        let staged = tempfile::tempdir()?;
        assert_eq!(layout.download(&latest, staged.path())?, 3);
        assert_eq!(std::fs::read(staged.path().join(file))?, b"abc");
        assert_eq!(layout.prune(p, 2)?, 1);
        let left: Vec<i64> = layout.list(p, 10)?.iter().map(|f| f.manifest.export.checkpoint.next_offset).collect();
        assert_eq!(left, vec![1200, 40]);
        assert_eq!(layout.listing(p)?.snapshots.len(), 2, "the pruned snapshot's files went with its manifest");
        assert!(layout.latest(PartitionId::orders(4))?.is_none(), "other partitions have none");
        Ok(())
    }

    #[test]
    fn an_upload_without_its_manifest_is_no_snapshot_and_an_offset_is_published_once() -> anyhow::Result<()> {
        let layout = in_memory("t");
        let p = PartitionId::sku(0);
        // A writer that died before its manifest: files only.
        let key = layout.partition_prefix(p).join(format!("{:020}", 99)).join("1-a-aggregates.sst");
        layout.bucket.put(&key, Bytes::from_static(b"abc"))?;
        assert!(layout.latest(p)?.is_none());
        assert_eq!(layout.newest_offset(p)?, None);
        assert!(publish(&layout, p, 5)?.is_some());
        assert!(publish(&layout, p, 5)?.is_none(), "the same offset again is not published");
        assert_eq!(layout.list(p, 10)?.len(), 1);
        assert_eq!(layout.prune(p, 1)?, 0);
        assert!(layout.listing(p)?.snapshots.contains_key(&99), "a recent unpublished upload may still be going on");
        Ok(())
    }

    #[test]
    fn pruning_drops_old_snapshots_manifest_first_and_only_uploads_abandoned_for_an_hour() {
        let prefix = Key::from("t/g/orders-0");
        let listing = Listing::of(
            &prefix,
            vec![
                object("t/g/orders-0/00000000000000000010/a-aggregates.sst", 9000),
                object("t/g/orders-0/00000000000000000010/manifest.json", 9000),
                object("t/g/orders-0/00000000000000000020/manifest.json", 60),
                object("t/g/orders-0/00000000000000000020/b-aggregates.sst", 60),
                object("t/g/orders-0/00000000000000000030/manifest.json", 5),
                object("t/g/orders-0/00000000000000000030/c-aggregates.sst", 5),
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
        assert_eq!(listing.published().collect::<Vec<_>>(), vec![30, 20, 10]);
        let plan: Vec<String> = listing.prune_plan(2, Utc::now()).iter().map(|k| k.to_string()).collect();
        assert_eq!(
            plan,
            vec![
                "t/g/orders-0/00000000000000000010/manifest.json",
                "t/g/orders-0/00000000000000000010/a-aggregates.sst",
                "t/g/orders-0/00000000000000000025/d-aggregates.sst",
                "t/g/orders-0/.tmp-7-1/aggregates.sst",
            ]
        );
        assert_eq!(
            listing.prune_plan(1, Utc::now())[..2].iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            vec![
                "t/g/orders-0/00000000000000000020/manifest.json",
                "t/g/orders-0/00000000000000000020/b-aggregates.sst",
            ]
        );
        assert_eq!(listing.prune_plan(0, Utc::now()), listing.prune_plan(1, Utc::now()), "the newest always stays");
    }

    #[test]
    fn a_snapshot_written_into_a_directory_by_the_directory_layout_is_found_and_downloaded() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = PartitionId::orders(3);
        // What the directory layout's publish left: the files, the manifest, no upload names.
        let snapshot = dir.path().join("t").join("g").join("orders-3").join(format!("{:020}", 40));
        std::fs::create_dir_all(&snapshot)?;
        std::fs::write(snapshot.join("aggregates.sst"), b"abc")?;
        std::fs::write(snapshot.join(MANIFEST), serde_json::to_vec_pretty(&manifest(p, 40))?)?;
        let layout = Layout::new(Arc::new(Bucket::open(&dir.path().display().to_string())?), "t", "g");
        let found = layout.latest(p)?.expect("the directory's snapshot");
        assert_eq!(found.manifest, manifest(p, 40));
        let staged = tempfile::tempdir()?;
        layout.download(&found, staged.path())?;
        assert_eq!(std::fs::read(staged.path().join("aggregates.sst"))?, b"abc");
        // A newer one through the store lands beside it, in the same tree.
        assert!(publish(&layout, p, 50)?.is_some());
        assert_eq!(layout.newest_offset(p)?, Some(50));
        assert!(dir.path().join("t/g/orders-3").join(format!("{:020}", 50)).join(MANIFEST).exists());
        Ok(())
    }
}
