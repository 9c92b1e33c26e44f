//! Where snapshots live and how one is published, found and pruned.
//!
//! ```text
//! <snapshot-dir>/<topology>/<group>/<role>-<partition>/<next offset, 20 digits>/
//!     manifest.json      written last: a directory without it is not a snapshot
//!     dedup-hashed.sst   one SST file per non-empty column family of the partition
//!     aggregates.sst …
//! ```
//! A snapshot is written into a hidden `.tmp-*` directory beside the others and renamed to
//! its final name once every file and the manifest are on disk (fsync), so a reader sees a
//! whole snapshot or none. The name is the partition's next input offset at the snapshot:
//! processing is deterministic, so two snapshots of one offset hold the same state, and the
//! newest is the one with the highest name.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tidemark_state::{PartitionExport, PartitionId};

pub const MANIFEST: &str = "manifest.json";
const TMP_PREFIX: &str = ".tmp-";
/// A temporary directory this old was left by a writer that died (a round takes seconds).
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
/// Version of the manifest's shape.
pub const FORMAT: u32 = 1;

/// What a snapshot directory holds, beside its files (docs/formats.md, "Snapshots").
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

/// The snapshot directory of one topology and consumer group.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

/// A published snapshot: its directory and manifest.
#[derive(Clone, Debug)]
pub struct Found {
    pub dir: PathBuf,
    pub manifest: Manifest,
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

impl Layout {
    pub fn new(dir: &Path, topology: &str, group: &str) -> Self {
        Layout { root: dir.join(component(topology)).join(component(group)) }
    }

    pub fn partition_dir(&self, p: PartitionId) -> PathBuf {
        self.root.join(format!("{}-{}", p.role(), p.partition))
    }

    /// A fresh temporary directory for a snapshot of `p` (created).
    pub fn temp_dir(&self, p: PartitionId) -> anyhow::Result<PathBuf> {
        let parent = self.partition_dir(p);
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = parent.join(format!("{TMP_PREFIX}{}-{nanos}", std::process::id()));
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// Writes the manifest into `temp` (holding the exported files), makes everything
    /// durable and renames `temp` to the snapshot's final name. `false` when a snapshot of
    /// the same offset already exists (it holds the same state; `temp` is removed).
    pub fn publish(&self, temp: &Path, manifest: &Manifest) -> anyhow::Result<bool> {
        let p = PartitionId { source: manifest.source, partition: manifest.number };
        let path = temp.join(MANIFEST);
        fs::write(&path, serde_json::to_vec_pretty(manifest)?)
            .with_context(|| format!("writing {}", path.display()))?;
        for f in &manifest.export.files {
            sync_file(&temp.join(&f.file))?;
        }
        sync_file(&path)?;
        let target = self.partition_dir(p).join(format!("{:020}", manifest.export.checkpoint.next_offset));
        if target.exists() {
            fs::remove_dir_all(temp).with_context(|| format!("removing {}", temp.display()))?;
            return Ok(false);
        }
        fs::rename(temp, &target).with_context(|| format!("renaming {} to {}", temp.display(), target.display()))?;
        sync_file(&self.partition_dir(p))?;
        Ok(true)
    }

    /// Published snapshots of `p`, newest first (directories whose name is an offset and
    /// that hold a readable manifest of `p`).
    pub fn list(&self, p: PartitionId) -> anyhow::Result<Vec<Found>> {
        let parent = self.partition_dir(p);
        let entries = match fs::read_dir(&parent) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", parent.display())),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("listing {}", parent.display()))?;
            let name = entry.file_name();
            let Some(offset) = name.to_str().and_then(|n| n.parse::<i64>().ok()) else { continue };
            let dir = entry.path();
            let Ok(bytes) = fs::read(dir.join(MANIFEST)) else { continue };
            let manifest: Manifest = match serde_json::from_slice(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "snapshot manifest unreadable; skipped");
                    continue;
                }
            };
            if manifest.source == p.source
                && manifest.number == p.partition
                && manifest.export.checkpoint.next_offset == offset
            {
                found.push(Found { dir, manifest });
            }
        }
        found.sort_by_key(|f| std::cmp::Reverse(f.manifest.export.checkpoint.next_offset));
        Ok(found)
    }

    pub fn latest(&self, p: PartitionId) -> anyhow::Result<Option<Found>> {
        Ok(self.list(p)?.into_iter().next())
    }

    /// Keeps the `keep` newest snapshots of `p` and removes the others, and temporary
    /// directories abandoned by writers that died. Returns how many snapshots went.
    pub fn prune(&self, p: PartitionId, keep: usize) -> anyhow::Result<usize> {
        let mut removed = 0;
        for old in self.list(p)?.into_iter().skip(keep.max(1)) {
            fs::remove_dir_all(&old.dir).with_context(|| format!("removing {}", old.dir.display()))?;
            removed += 1;
        }
        let parent = self.partition_dir(p);
        if let Ok(entries) = fs::read_dir(&parent) {
            for entry in entries.flatten() {
                let abandoned = entry.file_name().to_str().is_some_and(|n| n.starts_with(TMP_PREFIX))
                    && entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > ABANDONED_AFTER);
                if abandoned {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(removed)
    }
}

fn sync_file(path: &Path) -> anyhow::Result<()> {
    File::open(path).and_then(|f| f.sync_all()).with_context(|| format!("syncing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn publish(layout: &Layout, p: PartitionId, next: i64) -> anyhow::Result<bool> {
        let temp = layout.temp_dir(p)?;
        fs::write(temp.join("aggregates.sst"), b"abc")?;
        layout.publish(&temp, &manifest(p, next))
    }

    #[test]
    fn the_newest_snapshot_is_the_one_with_the_highest_offset_and_old_ones_are_pruned() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let layout = Layout::new(dir.path(), "shop orders", "tidemark");
        let p = PartitionId::orders(3);
        for next in [40, 7, 1200] {
            assert!(publish(&layout, p, next)?);
        }
        let latest = layout.latest(p)?.expect("three were published");
        assert_eq!(latest.manifest, manifest(p, 1200));
        assert!(latest.dir.starts_with(dir.path().join("shop_orders").join("tidemark").join("orders-3")));
        assert_eq!(layout.prune(p, 2)?, 1);
        let left: Vec<i64> = layout.list(p)?.iter().map(|f| f.manifest.export.checkpoint.next_offset).collect();
        assert_eq!(left, vec![1200, 40]);
        assert!(layout.latest(PartitionId::orders(4))?.is_none(), "other partitions have none");
        Ok(())
    }

    #[test]
    fn a_snapshot_without_its_manifest_or_of_an_existing_offset_is_not_published_twice() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let layout = Layout::new(dir.path(), "t", "g");
        let p = PartitionId::sku(0);
        // A writer that died before its rename: a temp dir, never listed.
        let dead = layout.temp_dir(p)?;
        fs::write(dead.join("aggregates.sst"), b"abc")?;
        // A directory with an offset name but no manifest (not a snapshot).
        fs::create_dir_all(layout.partition_dir(p).join(format!("{:020}", 99)))?;
        assert!(layout.latest(p)?.is_none());
        assert!(publish(&layout, p, 5)?);
        assert!(!publish(&layout, p, 5)?, "the same offset again is not published");
        assert_eq!(layout.list(p)?.len(), 1);
        Ok(())
    }
}
