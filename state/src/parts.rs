//! One column family per partition: every piece of a partition's state (dedup entries,
//! aggregates, outbox rows and their indexes, the checkpoint) lives in a column family of
//! its own, so the partition's files are its own. A snapshot of a partition is then the
//! column family's SST files (immutable: a snapshot uploads only the files the store does
//! not hold yet, see [`crate::export`]), and dropping a partition drops its files.
//!
//! Inside a partition's column family a key is one table tag byte and the table's key (no
//! partition prefix: the column family is the partition). The column family is named
//! `part-<source>-<partition>-<generation>`: an import creates the next generation from the
//! snapshot's files and drops the one before, so a partition is always one whole column
//! family, the old or the new (a crash between the two leaves both; the open keeps the
//! newest that holds a checkpoint).
//!
//! Column families opened with the database are owned by the rocksdb crate; those created
//! or imported while the store is open are created through the C API (the crate's
//! single-threaded handle map needs `&mut` to add one) and owned here.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, RwLock};

use rocksdb::{AsColumnFamilyRef, AsRawPtr};

use crate::runs::DedupRuns;
use crate::{PartitionId, StateError, Store};

pub(crate) use librocksdb_sys as ffi;

/// The partition's checkpoint (the key is the tag alone).
pub(crate) const TAG_CHECKPOINT: u8 = b'c';
/// Dedup entries: tag + 128-bit XXH3 of the event id.
pub(crate) const TAG_DEDUP: u8 = b'd';
/// Dedup entries of stores written before the hashed format: tag + the raw event id.
pub(crate) const TAG_DEDUP_RAW: u8 = b'r';
/// Runs of dedup entries not folded into table files yet: tag + sequence number
/// (big-endian) → the entries ([`crate::runs`]). Outside the range of `TAG_DEDUP` keys, so
/// a fold's table file never overlaps what the memtable holds of a partition.
pub(crate) const TAG_DEDUP_RUN: u8 = b'e';
/// Aggregates: tag + namespace byte + key.
pub(crate) const TAG_AGGREGATE: u8 = b'a';
/// Outbox rows: tag + idempotency key.
pub(crate) const TAG_OUTBOX: u8 = b'o';
/// Pending index of the outbox: tag + idempotency key.
pub(crate) const TAG_PENDING: u8 = b'p';
/// Expiry index of the outbox: tag + created_at (order-preserving) + idempotency key.
pub(crate) const TAG_EXPIRY: u8 = b'x';

const PREFIX: &str = "part-";

/// `part-<source>-<partition>-<generation>`.
pub(crate) fn cf_name(p: PartitionId, generation: u32) -> String {
    format!("{PREFIX}{}-{}-{generation}", p.source, p.partition)
}

/// The partition and generation of a partition column family's name.
pub(crate) fn parse_cf_name(name: &str) -> Option<(PartitionId, u32)> {
    let mut it = name.strip_prefix(PREFIX)?.split('-');
    let source = it.next()?.parse().ok()?;
    let partition = it.next()?.parse().ok()?;
    let generation = it.next()?.parse().ok()?;
    it.next().is_none().then_some((PartitionId { source, partition }, generation))
}

/// `tag` followed by `key`.
pub(crate) fn tagged(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(tag);
    k.extend_from_slice(key);
    k
}

/// The first key after every key of `tag`.
pub(crate) fn tag_end(tag: u8) -> Vec<u8> {
    vec![tag + 1]
}

/// A partition's column family handle. `owned` handles were created through the C API and
/// are destroyed here; the others belong to the rocksdb crate's map (opened with the
/// database) and live until it closes.
pub(crate) struct PartCf {
    pub(crate) p: PartitionId,
    pub(crate) generation: u32,
    pub(crate) name: String,
    raw: *mut ffi::rocksdb_column_family_handle_t,
    owned: bool,
    /// The generation's dedup entries not folded into table files yet.
    pub(crate) runs: DedupRuns,
}

// SAFETY: a RocksDB column family handle is safe to use from any thread (RocksDB's
// ColumnFamilyHandle is immutable once created); the crate marks its own handles the same.
unsafe impl Send for PartCf {}
unsafe impl Sync for PartCf {}

impl PartCf {
    /// A handle the rocksdb crate opened with the database (and destroys when it closes).
    pub(crate) fn borrowed(p: PartitionId, generation: u32, name: String, cf: &rocksdb::ColumnFamily) -> Self {
        PartCf { p, generation, name, raw: cf.inner(), owned: false, runs: DedupRuns::default() }
    }
}

impl AsColumnFamilyRef for PartCf {
    fn inner(&self) -> *mut ffi::rocksdb_column_family_handle_t {
        self.raw
    }
}

impl Drop for PartCf {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created by rocksdb_create_column_family(_with_import) for this
            // handle alone, destroyed once; the store drops its handles before the database.
            unsafe { ffi::rocksdb_column_family_handle_destroy(self.raw) }
        }
    }
}

/// The partition column families of an open store.
#[derive(Default)]
pub(crate) struct Parts {
    by_partition: RwLock<HashMap<PartitionId, Arc<PartCf>>>,
    /// Creating or replacing a partition's column family happens under this lock.
    changing: Mutex<()>,
}

impl Parts {
    pub(crate) fn get(&self, p: PartitionId) -> Option<Arc<PartCf>> {
        self.by_partition.read().ok()?.get(&p).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<PartCf>> {
        let mut all: Vec<_> = self.by_partition.read().map(|m| m.values().cloned().collect()).unwrap_or_default();
        all.sort_by_key(|c| c.p);
        all
    }

    pub(crate) fn insert(&self, cf: PartCf) -> Arc<PartCf> {
        let cf = Arc::new(cf);
        if let Ok(mut m) = self.by_partition.write() {
            m.insert(cf.p, Arc::clone(&cf));
        }
        cf
    }

    fn remove(&self, p: PartitionId) -> Option<Arc<PartCf>> {
        self.by_partition.write().ok()?.remove(&p)
    }
}

pub(crate) fn take_error(err: *mut std::ffi::c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    // SAFETY: RocksDB's C API returns errors as malloc'ed NUL-terminated strings.
    let msg = unsafe { std::ffi::CStr::from_ptr(err) }.to_string_lossy().into_owned();
    unsafe { ffi::rocksdb_free(err.cast()) };
    Some(msg)
}

pub(crate) fn c_string(s: &str) -> Result<CString, StateError> {
    CString::new(s).map_err(|e| StateError::Decode { what: "name", detail: e.to_string() })
}

impl Store {
    pub(crate) fn raw_db(&self) -> *mut ffi::rocksdb_t {
        // SAFETY: the pointer is used only while `self.db` is alive (every caller borrows self).
        unsafe { self.db.as_raw_ptr() }
    }

    pub(crate) fn ffi_error(&self, what: &str, detail: String) -> StateError {
        StateError::Native { path: self.path().display().to_string(), what: what.to_string(), detail }
    }

    /// The column family of partition `p`, if it has state here.
    pub(crate) fn part(&self, p: PartitionId) -> Option<Arc<PartCf>> {
        self.parts.get(p)
    }

    /// The column family of partition `p`, created if it has none yet.
    pub(crate) fn part_or_create(&self, p: PartitionId) -> Result<Arc<PartCf>, StateError> {
        if let Some(cf) = self.parts.get(p) {
            return Ok(cf);
        }
        let _changing = self.parts.changing.lock().map_err(|_| self.poisoned())?;
        if let Some(cf) = self.parts.get(p) {
            return Ok(cf);
        }
        let cf = self.create_part(p, 0)?;
        Ok(self.parts.insert(cf))
    }

    fn create_part(&self, p: PartitionId, generation: u32) -> Result<PartCf, StateError> {
        let name = cf_name(p, generation);
        let opts = self.part_options(p);
        let c_name = c_string(&name)?;
        let mut err = std::ptr::null_mut();
        // SAFETY: valid database, options and name; the handle is owned by the PartCf.
        let raw =
            unsafe { ffi::rocksdb_create_column_family(self.raw_db(), opts.as_raw_ptr(), c_name.as_ptr(), &mut err) };
        if let Some(msg) = take_error(err) {
            if !raw.is_null() {
                unsafe { ffi::rocksdb_column_family_handle_destroy(raw) };
            }
            return Err(self.ffi_error(&format!("creating column family {name}"), msg));
        }
        if let Ok(mut kept) = self.created_options.lock() {
            kept.push(opts);
        }
        Ok(PartCf { p, generation, name, raw, owned: true, runs: DedupRuns::default() })
    }

    /// Imports `metadata` (files of an exported partition column family) as the next
    /// generation of `p`'s column family, then drops the one before. The files are moved.
    pub(crate) fn replace_part_with_import(
        &self,
        p: PartitionId,
        metadata: *mut ffi::rocksdb_export_import_files_metadata_t,
    ) -> Result<(), StateError> {
        let _changing = self.parts.changing.lock().map_err(|_| self.poisoned())?;
        let old = self.parts.get(p);
        let generation = old.as_ref().map_or(0, |c| c.generation + 1);
        let name = cf_name(p, generation);
        let opts = self.part_options(p);
        let c_name = c_string(&name)?;
        let mut err = std::ptr::null_mut();
        // SAFETY: valid pointers; import options are destroyed right after.
        let raw = unsafe {
            let import = ffi::rocksdb_import_column_family_options_create();
            ffi::rocksdb_import_column_family_options_set_move_files(import, 1);
            let raw = ffi::rocksdb_create_column_family_with_import(
                self.raw_db(),
                opts.as_raw_ptr(),
                c_name.as_ptr(),
                import,
                metadata,
                &mut err,
            );
            ffi::rocksdb_import_column_family_options_destroy(import);
            raw
        };
        if let Some(msg) = take_error(err) {
            if !raw.is_null() {
                // SAFETY: a handle RocksDB returned beside its error, never used.
                unsafe { ffi::rocksdb_column_family_handle_destroy(raw) };
            }
            return Err(self.ffi_error(&format!("importing column family {name}"), msg));
        }
        if let Ok(mut kept) = self.created_options.lock() {
            kept.push(opts);
        }
        let cf = PartCf { p, generation, name, raw, owned: true, runs: DedupRuns::default() };
        // The import's dedup runs into memory before anything looks the partition up; runs
        // that do not decode fail the import as a damaged file would.
        if let Err(e) = self.load_runs(&cf) {
            self.drop_cf_raw(&cf)?;
            return Err(e);
        }
        self.parts.insert(cf);
        if let Some(old) = old {
            self.drop_cf_raw(&old)?;
        }
        Ok(())
    }

    /// Removes every trace of a partition (used before rebuilding it from the log, for
    /// partitions that moved away, and after an import that brought no checkpoint): its
    /// column family and its files. Nothing when it has none.
    pub fn drop_partition(&self, p: PartitionId) -> Result<(), StateError> {
        let _changing = self.parts.changing.lock().map_err(|_| self.poisoned())?;
        match self.parts.remove(p) {
            Some(cf) => self.drop_cf_raw(&cf),
            None => Ok(()),
        }
    }

    pub(crate) fn drop_cf_raw(&self, cf: &PartCf) -> Result<(), StateError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the handle stays valid after the drop (it is destroyed with the PartCf).
        unsafe { ffi::rocksdb_drop_column_family(self.raw_db(), cf.raw, &mut err) };
        match take_error(err) {
            Some(msg) => Err(self.ffi_error(&format!("dropping column family {}", cf.name), msg)),
            None => Ok(()),
        }
    }

    fn poisoned(&self) -> StateError {
        self.ffi_error("partition column families", "a thread panicked while changing them".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_column_family_is_named_by_source_partition_and_generation() {
        let p = PartitionId::sku(7);
        assert_eq!(cf_name(p, 3), "part-2-7-3");
        assert_eq!(parse_cf_name("part-2-7-3"), Some((p, 3)));
        assert_eq!(parse_cf_name("part-2-7"), None);
        assert_eq!(parse_cf_name("meta"), None);
        assert_eq!(parse_cf_name("part-2-7-3-1"), None);
    }
}
