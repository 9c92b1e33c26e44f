//! The task of one combine repartition partition: keeps the latest partial of every source
//! partition per combined key and writes one row per key (SPEC §6, the pure logic is
//! [`tidemark_topology::combine`]).
//!
//! Per commit interval:
//! 1. [`CombineTask::ingest`] each record: a partial replaces its source partition's stored
//!    one if its version is greater (a replay or duplicate changes nothing); a mark raises
//!    its orders partition's progress; a partial of a key already expired everywhere is a
//!    replay of one taken before and is ignored.
//! 2. [`CombineTask::finish`]: the changed keys' combined rows are emitted and their state
//!    (every source partition's latest partial) staged into the commit batch with the
//!    progress and the input offset; keys expired in every orders partition are dropped.
//!
//! State is read once, at restore; the hot path touches memory only.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tidemark_state::{Checkpoint, Namespace, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::combine::{expiry_start_ms, CombineInput, Latest, PartialRecord, Progress};
use tidemark_topology::dashboard::DashboardRecord;
use tidemark_topology::provisional::ProvisionalRecord;
use tidemark_topology::window::WindowPolicy;

use super::output::{OutputRecord, Sink};
use super::record::SourceRecord;
use super::stats::Stats;

#[derive(Clone, Debug)]
pub struct CombineTaskConfig {
    pub topic: String,
    /// Partitions of the orders topic: every one's progress gates expiry.
    pub upstreams: i32,
    pub window: WindowPolicy,
    pub finance_tz: chrono_tz::Tz,
}

/// One combined key's partials, as persisted (JSON: the partials are public records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Parts {
    Dashboard(Latest<DashboardRecord>),
    Finance(Latest<ProvisionalRecord>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// Start of the window whose expiry ends this key.
    expiry_start_ms: i64,
    parts: Parts,
}

/// State keys: a kind byte and the combined key; the progress under its own key.
const META_KEY: &[u8] = b"m";
const DASHBOARD: u8 = b'd';
const FINANCE: u8 = b'f';

pub struct CombineTask {
    id: PartitionId,
    cfg: CombineTaskConfig,
    checkpoint: Checkpoint,
    progress: Progress,
    progress_dirty: bool,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// `(expiry start, state key)` of every entry, to drop expired keys in order.
    by_expiry: BTreeSet<(i64, Vec<u8>)>,
    dirty: BTreeSet<Vec<u8>>,
    uncommitted: bool,
}

fn decode_err(what: &'static str, e: impl std::fmt::Display) -> StateError {
    StateError::Decode { what, detail: e.to_string() }
}

impl CombineTask {
    pub fn restore<S: StateView + ?Sized>(
        store: &S,
        id: PartitionId,
        cfg: CombineTaskConfig,
    ) -> Result<Self, StateError> {
        let checkpoint = store.checkpoint(id)?.unwrap_or_default();
        let mut progress = Progress::default();
        let mut entries = BTreeMap::new();
        let mut by_expiry = BTreeSet::new();
        for (k, v) in store.load_aggregates(id, Namespace::Combine)? {
            if k == META_KEY {
                progress = serde_json::from_slice(&v).map_err(|e| decode_err("combine progress", e))?;
                continue;
            }
            let entry: Entry = serde_json::from_slice(&v).map_err(|e| decode_err("combine entry", e))?;
            by_expiry.insert((entry.expiry_start_ms, k.clone()));
            entries.insert(k, entry);
        }
        Ok(CombineTask {
            id,
            cfg,
            checkpoint,
            progress,
            progress_dirty: false,
            entries,
            by_expiry,
            dirty: BTreeSet::new(),
            uncommitted: false,
        })
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    pub fn has_uncommitted(&self) -> bool {
        self.uncommitted
    }

    /// See [`Checkpoint::skip_to`]; the next commit persists it.
    pub fn skip_to(&mut self, offset: i64) {
        if self.checkpoint.skip_to(offset) {
            self.uncommitted = true;
        }
    }

    /// Combined keys held in memory.
    /// Adds what the task holds in memory to `held` (see [`crate::engine::held`]).
    pub fn held(&self, held: &mut crate::engine::held::Held) {
        held.add("combine_keys", self.entries.len());
    }

    pub fn keys(&self) -> usize {
        self.entries.len()
    }

    pub fn ingest(&mut self, rec: SourceRecord<'_>, out: &mut Vec<OutputRecord>, stats: &Stats) -> bool {
        if !self.checkpoint.advance(rec.offset, rec.append_ms) {
            return false;
        }
        self.uncommitted = true;
        let value = rec.value.unwrap_or_default();
        let input: CombineInput = match serde_json::from_slice(value) {
            Ok(i) => i,
            Err(e) => {
                // Only tidemark writes this topic: a foreign writer or a newer format. Keep
                // the record, visibly, and go on.
                Stats::add(&stats.dead_letters, 1);
                out.push(OutputRecord::internal_unreadable(
                    &self.cfg.topic,
                    self.id.partition,
                    &rec,
                    value,
                    e.to_string(),
                ));
                return true;
            }
        };
        if let CombineInput::Mark(m) = input {
            self.progress_dirty |= self.progress.observe(m);
            return true;
        }
        let Some(start) = expiry_start_ms(&input, self.cfg.finance_tz, self.cfg.window.size_ms) else {
            return true;
        };
        if self.progress.expired(self.cfg.upstreams, &self.cfg.window, start) {
            // Every orders partition is past this key's retention, so none writes it again:
            // this is a replay of a partial taken before the key was dropped.
            Stats::add(&stats.dedup_hits, 1);
            return true;
        }
        let (key, changed) = match input {
            CombineInput::Dashboard(r) => {
                let key = state_key(DASHBOARD, &r.combined_key());
                let entry = self.entry(&key, start, || Parts::Dashboard(Latest::default()));
                let changed = match &mut entry.parts {
                    Parts::Dashboard(l) => l.offer(r),
                    Parts::Finance(_) => false,
                };
                (key, changed)
            }
            CombineInput::Finance(r) => {
                let key = state_key(FINANCE, &r.combined_key());
                let entry = self.entry(&key, start, || Parts::Finance(Latest::default()));
                let changed = match &mut entry.parts {
                    Parts::Finance(l) => l.offer(r),
                    Parts::Dashboard(_) => false,
                };
                (key, changed)
            }
            CombineInput::Mark(_) => return true,
        };
        if changed {
            self.dirty.insert(key);
        } else {
            Stats::add(&stats.dedup_hits, 1);
        }
        true
    }

    fn entry(&mut self, key: &[u8], start: i64, empty: impl FnOnce() -> Parts) -> &mut Entry {
        if !self.entries.contains_key(key) {
            self.by_expiry.insert((start, key.to_vec()));
        }
        self.entries.entry(key.to_vec()).or_insert_with(|| Entry { expiry_start_ms: start, parts: empty() })
    }

    /// Step 2: emit the changed keys' rows, stage their state, progress and checkpoint, and
    /// drop the keys every orders partition has expired.
    pub fn finish<W: StateWrite>(&mut self, batch: &mut W, out: &mut Vec<OutputRecord>) -> Result<(), StateError> {
        self.uncommitted = false;
        for key in std::mem::take(&mut self.dirty) {
            let Some(entry) = self.entries.get(&key) else { continue };
            let (sink, value) = match &entry.parts {
                Parts::Dashboard(l) => (Sink::DashboardCombined, l.combined().map(|c| serde_json::to_vec(&c))),
                Parts::Finance(l) => (Sink::FinanceCombined, l.combined().map(|c| serde_json::to_vec(&c))),
            };
            let Some(value) = value.transpose().map_err(|e| encode_err("combined row", e))? else { continue };
            let stored = serde_json::to_vec(entry).map_err(|e| encode_err("combine entry", e))?;
            batch.put_aggregate(self.id, Namespace::Combine, &key, &stored);
            out.push(OutputRecord {
                sink,
                key: Some(key[1..].to_vec()),
                value,
                headers: Vec::new(),
                partition: None,
                handed: None,
            });
        }
        while let Some((start, key)) = self.by_expiry.first().cloned() {
            if !self.progress.expired(self.cfg.upstreams, &self.cfg.window, start) {
                break;
            }
            self.by_expiry.pop_first();
            self.entries.remove(&key);
            batch.delete_aggregate(self.id, Namespace::Combine, &key);
        }
        if std::mem::take(&mut self.progress_dirty) {
            let bytes = serde_json::to_vec(&self.progress).map_err(|e| encode_err("combine progress", e))?;
            batch.put_aggregate(self.id, Namespace::Combine, META_KEY, &bytes);
        }
        batch.put_checkpoint(self.id, &self.checkpoint)?;
        Ok(())
    }
}

fn encode_err(what: &'static str, e: impl std::fmt::Display) -> StateError {
    StateError::Encode { what, detail: e.to_string() }
}

fn state_key(kind: u8, combined: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + combined.len());
    k.push(kind);
    k.extend_from_slice(combined.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use tidemark_state::{Store, StoreOptions};
    use tidemark_topology::dashboard::DashboardRecord;
    use tidemark_topology::figures::Figures;

    const WINDOW: &str = "2026-11-28T14:59:00.000Z";

    fn cfg() -> CombineTaskConfig {
        CombineTaskConfig {
            topic: "combine".into(),
            upstreams: 2,
            window: WindowPolicy {
                size_ms: 60_000,
                allowed_lateness_ms: 0,
                grace_ms: 120_000,
                retention_ms: 3_600_000,
            },
            finance_tz: chrono_tz::Asia::Tokyo,
        }
    }

    fn partial(p: i32, orders: u64, version: u64) -> Vec<u8> {
        let r = DashboardRecord {
            window_start: WINDOW.into(),
            window_end: "2026-11-28T15:00:00.000Z".into(),
            store: "tokyo-01".into(),
            currency: "JPY".into(),
            source_partition: p,
            figures: Figures::new(orders, orders, (orders * 100).into(), Decimal::ZERO, Decimal::ZERO),
            net: (orders * 100).into(),
            version,
            as_of: "2026-11-28T14:59:30.000Z".into(),
        };
        CombineInput::wrap("dashboard", &serde_json::to_vec(&r).expect("json"))
    }

    /// Feeds `values` from `offset` on, commits, and returns the combined rows emitted.
    fn feed(store: &Store, task: &mut CombineTask, offset: i64, values: &[Vec<u8>]) -> Vec<DashboardCombinedRow> {
        let (stats, mut out) = (Stats::default(), Vec::new());
        for (i, v) in values.iter().enumerate() {
            let rec = SourceRecord { key: None, value: Some(v), append_ms: 1, offset: offset + i as i64 };
            assert!(task.ingest(rec, &mut out, &stats));
        }
        let mut batch = store.batch();
        task.finish(&mut batch, &mut out).expect("finish");
        batch.commit().expect("commit");
        out.iter()
            .filter(|r| r.sink == Sink::DashboardCombined)
            .map(|r| serde_json::from_slice::<DashboardCombinedRow>(&r.value).expect("row"))
            .collect()
    }

    type DashboardCombinedRow = tidemark_topology::combine::DashboardCombined;

    #[test]
    fn the_latest_partials_survive_a_restart_and_a_replayed_partial_emits_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions::default()).expect("open");
        let id = PartitionId { source: PartitionId::COMBINE, partition: 0 };
        let mut task = CombineTask::restore(&store, id, cfg()).expect("restore");
        let rows = feed(&store, &mut task, 0, &[partial(0, 2, 2), partial(1, 1, 1)]);
        assert_eq!(rows.last().map(|r| (r.figures.orders, r.version, r.partitions)), Some((3, 3, 2)));
        drop(task);

        let mut task = CombineTask::restore(&store, id, cfg()).expect("restore");
        assert_eq!(task.checkpoint().next_offset, 2);
        assert!(feed(&store, &mut task, 2, &[partial(0, 2, 2), partial(1, 1, 1)]).is_empty(), "replays change nothing");
        let rows = feed(&store, &mut task, 4, &[partial(1, 4, 5)]);
        assert_eq!(
            rows.last().map(|r| (r.figures.orders, r.version)),
            Some((6, 7)),
            "p0's partial came from the store"
        );
    }

    #[test]
    fn a_key_expired_in_every_orders_partition_is_dropped_and_a_late_replay_of_it_ignored() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions::default()).expect("open");
        let id = PartitionId { source: PartitionId::COMBINE, partition: 0 };
        let mut task = CombineTask::restore(&store, id, cfg()).expect("restore");
        feed(&store, &mut task, 0, &[partial(0, 1, 1)]);
        let start = chrono::DateTime::parse_from_rfc3339(WINDOW).expect("t").timestamp_millis();
        let past = start + 60_000 + 3_600_000;
        feed(&store, &mut task, 1, &[CombineInput::mark_bytes(0, past)]);
        assert_eq!(task.keys(), 1, "orders partition 1 has not passed the window yet");
        feed(&store, &mut task, 2, &[CombineInput::mark_bytes(1, past)]);
        assert_eq!(task.keys(), 0);
        assert!(feed(&store, &mut task, 3, &[partial(1, 1, 1)]).is_empty(), "a replay of an expired key");
        let restored = CombineTask::restore(&store, id, cfg()).expect("restore");
        assert_eq!(restored.keys(), 0, "the drop was committed");
    }
}
