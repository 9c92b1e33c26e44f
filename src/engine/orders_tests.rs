//! Engine tests without a broker: a real RocksDB store in a temp dir, records built by hand.

use tidemark_state::{PartitionId, Store, StoreOptions};

use super::output::{OutputRecord, Sink};
use super::stats::Stats;
use super::{OrdersTask, SourceRecord, TaskConfig};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const T0: i64 = 1_764_288_000_000; // 2025-11-28T00:00:00Z

fn placed(id: &str, t_ms: i64, qty: u32) -> Vec<u8> {
    format!(
        r#"{{"schema_version":2,"event_id":"{id}","order_id":"o-{id}","type":"ORDER_PLACED","occurred_at_ms":{t_ms},"store_id":"s1","channel":"web","items":[{{"sku":"SKU-1","quantity":{qty},"price":{{"amount_minor":1000,"currency":"USD"}}}}]}}"#
    )
    .into_bytes()
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    stats: Stats,
    id: PartitionId,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let store =
            Store::open(dir.path(), &StoreOptions { owner: "t".into(), ..StoreOptions::default() }).expect("open");
        Harness { _dir: dir, store, stats: Stats::default(), id: PartitionId { source: 0, partition: 0 } }
    }

    fn task(&self) -> OrdersTask {
        OrdersTask::restore(&self.store, self.id, TaskConfig::example()).expect("restore")
    }

    /// Ingests `(offset, append, value)` records and commits; returns the outputs.
    fn batch(&self, task: &mut OrdersTask, records: &[(i64, i64, Vec<u8>)]) -> Vec<OutputRecord> {
        let mut out = Vec::new();
        for (offset, append_ms, value) in records {
            let rec = SourceRecord { key: Some(b"k"), value: Some(value), append_ms: *append_ms, offset: *offset };
            task.ingest(rec, &mut out, &self.stats);
        }
        let mut b = self.store.batch();
        task.finish(&self.store, &mut b, &mut out, &self.stats).expect("finish");
        b.commit().expect("commit");
        task.committed(&self.store);
        out
    }
}

fn dashboard(out: &[OutputRecord]) -> Vec<serde_json::Value> {
    out.iter().filter(|o| o.sink == Sink::Dashboard).map(|o| serde_json::from_slice(&o.value).expect("json")).collect()
}

#[test]
fn a_duplicate_in_a_later_batch_has_no_effect() {
    let h = Harness::new();
    let mut task = h.task();
    let first = h.batch(&mut task, &[(0, T0, placed("e1", T0, 2))]);
    assert_eq!(dashboard(&first)[0]["units"], 2);
    let second = h.batch(&mut task, &[(1, T0 + 5, placed("e1", T0, 2))]);
    assert!(dashboard(&second).is_empty(), "nothing changed, nothing emitted");
    assert_eq!(Stats::get(&h.stats.dedup_hits), 1);
}

#[test]
fn a_duplicate_within_one_batch_has_no_effect() {
    let h = Harness::new();
    let mut task = h.task();
    let out = h.batch(&mut task, &[(0, T0, placed("e1", T0, 2)), (1, T0, placed("e1", T0, 2))]);
    let d = dashboard(&out);
    assert_eq!((d.len(), d[0]["units"].as_u64(), d[0]["version"].as_u64()), (1, Some(2), Some(1)));
}

#[test]
fn a_restored_task_continues_from_its_checkpoint_with_the_same_versions() {
    let h = Harness::new();
    let mut task = h.task();
    h.batch(&mut task, &[(0, T0, placed("e1", T0, 1)), (1, T0, placed("e2", T0 + 1, 1))]);
    drop(task);
    let mut restored = h.task();
    assert_eq!(restored.next_offset(), 2);
    let out = h.batch(&mut restored, &[(1, T0, placed("e2", T0 + 1, 1)), (2, T0 + 9, placed("e3", T0 + 2, 1))]);
    let d = dashboard(&out);
    assert_eq!(d[0]["version"], 3, "offset 1 was skipped, offset 2 applied on top of the restored state");
    assert_eq!(d[0]["as_of"], "2025-11-28T00:00:00.009Z");
}

#[test]
fn batch_boundaries_do_not_change_the_final_record() {
    let records: Vec<(i64, i64, Vec<u8>)> =
        (0..50).map(|i| (i, T0 + i, placed(&format!("e{}", i % 40), T0 + (i % 7) * 1000, 1))).collect();
    let h1 = Harness::new();
    let mut one = h1.task();
    let all = dashboard(&h1.batch(&mut one, &records));
    let h2 = Harness::new();
    let mut many = h2.task();
    let mut last = Vec::new();
    for chunk in records.chunks(7) {
        last.extend(dashboard(&h2.batch(&mut many, chunk)));
    }
    assert_eq!(all.last(), last.last());
}

#[test]
fn bad_input_is_dead_lettered_with_its_coordinates_and_the_partition_keeps_flowing() {
    let h = Harness::new();
    let mut task = h.task();
    let out = h.batch(&mut task, &[(0, T0, b"{not json".to_vec()), (1, T0, placed("e1", T0, 1))]);
    let dl: Vec<&OutputRecord> = out.iter().filter(|o| o.sink == Sink::DeadLetter).collect();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].value, b"{not json");
    assert!(dl[0].headers.contains(&("tidemark.reason", "not_json".into())));
    assert!(dl[0].headers.contains(&("tidemark.source.offset", "0".into())));
    assert_eq!(dashboard(&out).len(), 1);
}

#[test]
fn an_event_past_window_retention_goes_to_the_late_output_and_not_the_dashboard() {
    let h = Harness::new();
    let mut task = h.task();
    h.batch(&mut task, &[(0, T0 + 8 * HOUR, placed("now", T0 + 8 * HOUR, 1))]);
    let out = h.batch(&mut task, &[(1, T0 + 8 * HOUR, placed("old", T0, 1))]);
    assert!(dashboard(&out).is_empty());
    let late: Vec<&OutputRecord> = out.iter().filter(|o| o.sink == Sink::Late).collect();
    assert_eq!(late.len(), 1);
    assert_eq!(Stats::get(&h.stats.late), 1);
}

#[test]
fn an_event_late_but_within_retention_revises_its_window_with_a_new_version() {
    let h = Harness::new();
    let mut task = h.task();
    h.batch(&mut task, &[(0, T0, placed("a", T0, 1))]);
    h.batch(&mut task, &[(1, T0 + HOUR, placed("b", T0 + HOUR, 1))]);
    let out = h.batch(&mut task, &[(2, T0 + HOUR, placed("c", T0 + 10, 5))]);
    let d = dashboard(&out);
    assert_eq!((d[0]["units"].as_u64(), d[0]["version"].as_u64()), (Some(6), Some(2)));
}

#[test]
fn expired_windows_leave_memory_and_the_store() {
    let h = Harness::new();
    let mut task = h.task();
    h.batch(&mut task, &[(0, T0, placed("a", T0, 1))]);
    h.batch(&mut task, &[(1, T0 + 9 * HOUR, placed("b", T0 + 9 * HOUR, 1))]);
    let stored = h.store.load_aggregates(h.id, tidemark_state::Namespace::Dashboard).expect("load");
    assert_eq!(stored.len(), 1, "only the live window remains");
}

fn finance(out: &[OutputRecord]) -> Vec<serde_json::Value> {
    out.iter().filter(|o| o.sink == Sink::Finance).map(|o| serde_json::from_slice(&o.value).expect("json")).collect()
}

#[test]
fn a_late_event_revises_its_business_day_row_with_a_higher_version_after_a_restart() {
    let h = Harness::new();
    let mut task = h.task();
    // T0 is 09:00 in Tokyo on 2025-11-28; T0 + 16 h is already the 29th there.
    let first = h.batch(&mut task, &[(0, T0, placed("a", T0, 2)), (1, T0 + 16 * HOUR, placed("b", T0 + 16 * HOUR, 1))]);
    let f = finance(&first);
    assert_eq!(f.len(), 2, "one row per business day: {f:?}");
    assert_eq!(
        (f[0]["day"].as_str(), f[0]["gross"].as_str(), f[0]["version"].as_u64()),
        (Some("2025-11-28"), Some("20.00"), Some(1))
    );
    assert_eq!(f[1]["day"], "2025-11-29");
    drop(task);
    let mut restored = h.task();
    let late = h.batch(&mut restored, &[(2, T0 + 16 * HOUR, placed("c", T0 + 14 * HOUR, 3))]);
    // The restored task publishes its live rows again: the 29th as it was.
    let f = finance(&late);
    assert_eq!(f.len(), 2);
    assert_eq!(f[1], finance(&first)[1], "the unchanged day again, the same row");
    assert_eq!(
        (f[0]["day"].as_str(), f[0]["orders"].as_u64(), f[0]["gross"].as_str(), f[0]["version"].as_u64()),
        (Some("2025-11-28"), Some(2), Some("50.00"), Some(2))
    );
}

#[test]
fn a_business_day_row_leaves_the_store_once_its_last_window_has_expired() {
    let h = Harness::new();
    let mut task = h.task();
    h.batch(&mut task, &[(0, T0, placed("a", T0, 1))]);
    // The 28th ends at T0 + 15 h (Tokyo midnight); its last window expires 7 h later.
    h.batch(&mut task, &[(1, T0 + 22 * HOUR, placed("b", T0 + 22 * HOUR - 1, 1))]);
    let stored = h.store.load_aggregates(h.id, tidemark_state::Namespace::Finance).expect("load");
    assert_eq!(stored.len(), 2, "the 28th is still revisable by a late event");
    h.batch(&mut task, &[(2, T0 + 22 * HOUR, placed("c", T0 + 22 * HOUR, 1))]);
    let stored = h.store.load_aggregates(h.id, tidemark_state::Namespace::Finance).expect("load");
    assert_eq!(stored.len(), 1, "only the 29th remains");
}

#[test]
fn rows_held_back_go_out_at_the_next_publishing_finish_with_their_latest_value_while_their_state_is_committed_at_every_finish(
) {
    let h = Harness::new();
    let mut task = h.task();
    task.publish(false);
    let first = h.batch(&mut task, &[(0, T0, placed("e1", T0, 1))]);
    assert!(dashboard(&first).is_empty() && finance(&first).is_empty(), "held back");
    let stored = h.store.load_aggregates(h.id, tidemark_state::Namespace::Dashboard).expect("load");
    assert_eq!(stored.len(), 1, "the state is committed all the same");
    assert!(dashboard(&h.batch(&mut task, &[(1, T0 + 5, placed("e2", T0 + 1, 2))])).is_empty());
    assert!(task.has_unpublished());
    task.publish(true);
    let published = h.batch(&mut task, &[]);
    let d = dashboard(&published);
    assert_eq!((d.len(), d[0]["units"].as_u64(), d[0]["version"].as_u64()), (1, Some(3), Some(2)));
    assert_eq!(finance(&published).len(), 1);
    assert!(!task.has_unpublished());
    assert!(dashboard(&h.batch(&mut task, &[])).is_empty(), "published once");
}

#[test]
fn a_row_held_back_goes_out_in_the_finish_that_expires_its_window() {
    let h = Harness::new();
    let mut task = h.task();
    task.publish(false);
    h.batch(&mut task, &[(0, T0, placed("a", T0, 1))]);
    let out = h.batch(&mut task, &[(1, T0 + 9 * HOUR, placed("b", T0 + 9 * HOUR, 1))]);
    let d = dashboard(&out);
    assert_eq!(d.len(), 1, "the expired window's row only: {d:?}");
    assert_eq!((d[0]["window_start"].as_str(), d[0]["units"].as_u64()), (Some("2025-11-28T00:00:00.000Z"), Some(1)));
    assert!(task.has_unpublished(), "the live window's row is still held");
}

#[test]
fn a_restored_task_publishes_its_live_rows_again_as_its_last_owner_may_have_held_them_back() {
    let h = Harness::new();
    let mut task = h.task();
    task.publish(false);
    assert!(dashboard(&h.batch(&mut task, &[(0, T0, placed("a", T0, 4))])).is_empty());
    drop(task);
    let mut restored = h.task();
    assert!(restored.has_unpublished());
    let d = dashboard(&h.batch(&mut restored, &[]));
    assert_eq!((d.len(), d[0]["units"].as_u64(), d[0]["version"].as_u64()), (1, Some(4), Some(1)));
}
