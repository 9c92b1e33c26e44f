//! Layout 1 → layout 2, once, at open.
//!
//! Layout 1 (until 2026-12-06) kept one column family per concern (`dedup-hashed`, `dedup`,
//! `aggregates`, `outbox`, `outbox-pending`, `outbox-expiry`), every key prefixed by its
//! partition, and the checkpoints in `meta`. Layout 2 keeps each partition in a column family
//! of its own ([`crate::parts`]). The open copies every entry into its partition's column
//! family under the concern's tag, removes the checkpoints from `meta`, and drops the old
//! column families last. A crash in the middle leaves the old column families in place, and
//! the next open copies again (the same values over the same keys).

use rocksdb::{IteratorMode, WriteBatch};

use crate::parts::{
    self, TAG_AGGREGATE, TAG_CHECKPOINT, TAG_DEDUP, TAG_DEDUP_RAW, TAG_EXPIRY, TAG_OUTBOX, TAG_PENDING,
};
use crate::{PartitionId, StateError, Store};

/// Layout 1's column families and the tag their entries take in layout 2.
const LAYOUT_1: [(&str, u8); 6] = [
    ("dedup-hashed", TAG_DEDUP),
    ("dedup", TAG_DEDUP_RAW),
    ("aggregates", TAG_AGGREGATE),
    ("outbox", TAG_OUTBOX),
    ("outbox-pending", TAG_PENDING),
    ("outbox-expiry", TAG_EXPIRY),
];

/// Layout 1's checkpoint keys in `meta`: this tag and the partition prefix.
const LAYOUT_1_CHECKPOINT: u8 = b'c';

/// Entries copied per write.
const CHUNK: usize = 100_000;

fn partition_of(key: &[u8]) -> Option<(PartitionId, &[u8])> {
    let prefix = key.get(..PartitionId::PREFIX_LEN)?;
    let source = u16::from_be_bytes(prefix[..2].try_into().ok()?);
    let partition = i32::from_be_bytes(prefix[2..].try_into().ok()?);
    Some((PartitionId { source, partition }, &key[PartitionId::PREFIX_LEN..]))
}

/// Moves a layout-1 store into layout 2; nothing when `existing` (the column families the
/// store was opened with) holds none of layout 1's.
pub(crate) fn from_layout_1(store: &Store, existing: &[String]) -> Result<(), StateError> {
    let old: Vec<(&str, u8)> =
        LAYOUT_1.iter().copied().filter(|(name, _)| existing.iter().any(|e| e == name)).collect();
    if old.is_empty() {
        return Ok(());
    }
    let mut batch = WriteBatch::default();
    let flush = |batch: &mut WriteBatch| -> Result<(), StateError> { store.write_unsynced(std::mem::take(batch)) };
    for (name, tag) in &old {
        let Some(cf) = store.db.cf_handle(name) else { continue };
        for item in store.db.iterator_cf(cf, IteratorMode::Start) {
            let (k, v) = item.map_err(|e| store.rocks(e))?;
            let Some((p, rest)) = partition_of(&k) else { continue };
            let part = store.part_or_create(p)?;
            batch.put_cf(&*part, parts::tagged(*tag, rest), &v);
            if batch.len() >= CHUNK {
                flush(&mut batch)?;
            }
        }
    }
    let meta = store.meta();
    let from = [LAYOUT_1_CHECKPOINT];
    for item in store.db.iterator_cf(meta, IteratorMode::From(&from, rocksdb::Direction::Forward)) {
        let (k, v) = item.map_err(|e| store.rocks(e))?;
        if k.first() != Some(&LAYOUT_1_CHECKPOINT) {
            break;
        }
        let Some((p, rest)) = partition_of(&k[1..]) else { continue };
        if !rest.is_empty() {
            continue;
        }
        let part = store.part_or_create(p)?;
        batch.put_cf(&*part, [TAG_CHECKPOINT], &v);
    }
    // The copy and the removal of the old checkpoints are durable before anything is dropped.
    batch.delete_range_cf(meta, [LAYOUT_1_CHECKPOINT], [LAYOUT_1_CHECKPOINT + 1]);
    store.write(batch)?;
    for (name, _) in &old {
        if let Some(cf) = store.db.cf_handle(name) {
            let mut err = std::ptr::null_mut();
            // SAFETY: a handle of the crate's map, valid until the database closes.
            unsafe {
                parts::ffi::rocksdb_drop_column_family(store.raw_db(), rocksdb::AsColumnFamilyRef::inner(cf), &mut err)
            };
            if let Some(msg) = parts::take_error(err) {
                return Err(store.ffi_error(&format!("dropping layout 1's column family {name}"), msg));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Checkpoint, Namespace, OutboxIndex, StoreOptions};
    use rocksdb::{ColumnFamilyDescriptor, Options, DB};

    /// Writes what a layout-1 store of partition `orders[2]` held.
    fn layout_1_store(dir: &std::path::Path) {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let names = ["meta", "dedup-hashed", "dedup", "aggregates", "outbox", "outbox-pending", "outbox-expiry"];
        let cfs = names.iter().map(|n| ColumnFamilyDescriptor::new(*n, Options::default()));
        let db = DB::open_cf_descriptors(&opts, dir, cfs).expect("open layout 1");
        let p = PartitionId::orders(2);
        let hash = crate::store::dedup_key("e-1");
        let put = |cf: &str, k: Vec<u8>, v: &[u8]| db.put_cf(db.cf_handle(cf).expect("cf"), k, v).expect("put");
        put("dedup-hashed", p.key(&hash[1..]), &700i64.to_le_bytes());
        put("dedup", p.key(b"e-raw"), &600i64.to_le_bytes());
        put("aggregates", p.key(&[Namespace::Dashboard as u8, b'k']), b"v");
        put("outbox", p.key(b"act-1"), b"row");
        put("outbox-pending", p.key(b"act-1"), b"");
        let checkpoint = Checkpoint { next_offset: 9, max_event_ms: None, max_append_ms: 700, records: 9 };
        let mut k = vec![LAYOUT_1_CHECKPOINT];
        k.extend_from_slice(&p.prefix());
        put("meta", k, &crate::codec::encode(&checkpoint).expect("encode"));
        put("meta", b"owner".to_vec(), &crate::codec::encode(&"t/g").expect("encode"));
        put("meta", b"outbox-index-v1".to_vec(), b"");
    }

    #[test]
    fn a_layout_1_store_opens_with_every_partition_in_a_column_family_of_its_own() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        layout_1_store(dir.path());
        let p = PartitionId::orders(2);
        {
            let store = Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() })?;
            assert_eq!(store.checkpoint(p)?.map(|c| c.next_offset), Some(9));
            assert_eq!(store.dedup_lookup(p, &["e-1", "e-raw", "e-none"])?, vec![Some(700), Some(600), None]);
            assert_eq!(store.load_aggregates(p, Namespace::Dashboard)?, vec![(b"k".to_vec(), b"v".to_vec())]);
            assert_eq!(store.outbox_pending(p)?, vec![(b"act-1".to_vec(), b"row".to_vec())]);
            store.outbox_update(p, "act-1", b"done", OutboxIndex::Final { created_at_ms: 1 })?;
        }
        let cfs = DB::list_cf(&Options::default(), dir.path()).expect("list");
        assert!(cfs.iter().all(|c| !LAYOUT_1.iter().any(|(old, _)| old == c)), "layout 1 is gone: {cfs:?}");
        let store = Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() })?;
        assert_eq!(store.checkpointed_partitions()?, vec![p]);
        assert_eq!(store.outbox_get(p, "act-1")?, Some(b"done".to_vec()), "written after the move, kept");
        Ok(())
    }
}
