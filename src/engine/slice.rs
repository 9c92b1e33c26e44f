//! The orders tasks over bounded offset ranges, committed per *slice*: the engine of
//! `tidemark microbatch` and of the stream and micro-batch replays in `tidemark shadow`.
//!
//! A slice is any run of records between two commits. The runner feeds records to the same
//! [`OrdersTask`]s the stream uses, finishing a task every `chunk` records so pending
//! events stay bounded, and stages everything into one [`CommitBatch`] per slice. At
//! [`SliceRunner::end_slice`] it hands the outputs to a publisher (which must make them
//! durable) and only then commits state, offsets and the caller's bookkeeping record at once.
//!
//! With `coalesce`, only the last record per key of the upsert sinks (dashboard, provisional
//! finance) is published: a slice replaces each changed row once, with its final version.
//! Side outputs (dead letters, late records) are always kept, in order.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tidemark_state::{CommitBatch, PartitionId, StateError, Store};

use super::output::{OutputRecord, Sink};
use super::stats::Stats;
use super::{OrdersTask, SourceRecord, TaskConfig};

/// What one slice did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceCounts {
    /// Source records applied (records below a task's checkpoint are skipped, not counted).
    pub records: u64,
    /// Records handed to the publisher.
    pub outputs: u64,
}

pub struct SliceRunner<'s> {
    store: &'s Store,
    cfg: TaskConfig,
    chunk: usize,
    coalesce: bool,
    tasks: BTreeMap<i32, (OrdersTask, usize)>,
    batch: CommitBatch<'s>,
    out: Vec<OutputRecord>,
    counts: SliceCounts,
    stats: Arc<Stats>,
}

impl<'s> SliceRunner<'s> {
    /// `cfg.sku_partitions` should be 0: slices compute the dashboard and finance rows only.
    pub fn new(store: &'s Store, cfg: TaskConfig, chunk: usize, coalesce: bool, stats: Arc<Stats>) -> SliceRunner<'s> {
        SliceRunner {
            store,
            cfg,
            chunk: chunk.max(1),
            coalesce,
            tasks: BTreeMap::new(),
            batch: store.batch(),
            out: Vec::new(),
            counts: SliceCounts::default(),
            stats,
        }
    }

    /// The next offset the partition's state expects (its committed checkpoint).
    pub fn next_offset(&mut self, partition: i32) -> Result<i64, StateError> {
        Ok(task_of(&mut self.tasks, self.store, &self.cfg, partition)?.0.next_offset())
    }

    /// Feeds one record of `partition`, in offset order.
    pub fn ingest(&mut self, partition: i32, rec: SourceRecord<'_>) -> Result<(), StateError> {
        let store = self.store;
        let chunk = self.chunk;
        let (task, since_finish) = task_of(&mut self.tasks, store, &self.cfg, partition)?;
        if !task.ingest(rec, &mut self.out, &self.stats) {
            return Ok(());
        }
        self.counts.records += 1;
        *since_finish += 1;
        if *since_finish >= chunk {
            *since_finish = 0;
            task.finish(store, &mut self.batch, &mut self.out, &self.stats)?;
        }
        Ok(())
    }

    /// Ends the slice: finishes every task, publishes the outputs, then commits state,
    /// offsets and `record` (a named bookkeeping record) in one write. Nothing is committed
    /// when `publish` fails, so the slice can be run again from the same offsets.
    pub fn end_slice<E>(
        &mut self,
        record: Option<(&str, &[u8])>,
        publish: impl FnOnce(&mut Vec<OutputRecord>) -> Result<(), E>,
    ) -> Result<SliceCounts, E>
    where
        E: From<StateError>,
    {
        for (task, since_finish) in self.tasks.values_mut().filter(|(t, _)| t.has_uncommitted()) {
            *since_finish = 0;
            task.finish(self.store, &mut self.batch, &mut self.out, &self.stats)?;
        }
        if self.coalesce {
            coalesce(&mut self.out);
        }
        let mut counts = std::mem::take(&mut self.counts);
        counts.outputs = self.out.len() as u64;
        publish(&mut self.out)?;
        self.out.clear();
        let mut batch = std::mem::replace(&mut self.batch, self.store.batch());
        if let Some((name, value)) = record {
            batch.put_record(name, value);
        }
        batch.commit()?;
        for (task, _) in self.tasks.values_mut() {
            task.release_held();
            task.committed(self.store);
        }
        Ok(counts)
    }
}

/// The partition's task, restored from its checkpoint on first use.
fn task_of<'t>(
    tasks: &'t mut BTreeMap<i32, (OrdersTask, usize)>,
    store: &Store,
    cfg: &TaskConfig,
    partition: i32,
) -> Result<&'t mut (OrdersTask, usize), StateError> {
    match tasks.entry(partition) {
        Entry::Occupied(e) => Ok(e.into_mut()),
        Entry::Vacant(v) => {
            let mut task = OrdersTask::restore(store, PartitionId::orders(partition), cfg.clone())?;
            task.hold_dedup_until_commit();
            Ok(v.insert((task, 0)))
        }
    }
}

/// Keeps, per key of an upsert sink, only the last record; other records keep their order.
fn coalesce(out: &mut Vec<OutputRecord>) {
    let mut last: HashMap<(Sink, &[u8]), usize> = HashMap::new();
    for (i, r) in out.iter().enumerate() {
        if let (Sink::Dashboard | Sink::Finance, Some(k)) = (r.sink, &r.key) {
            last.insert((r.sink, k.as_slice()), i);
        }
    }
    let keep: Vec<bool> = out
        .iter()
        .enumerate()
        .map(|(i, r)| match (r.sink, &r.key) {
            (Sink::Dashboard | Sink::Finance, Some(k)) => last.get(&(r.sink, k.as_slice())) == Some(&i),
            _ => true,
        })
        .collect();
    let mut flags = keep.into_iter();
    out.retain(|_| flags.next().unwrap_or(true));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_state::StoreOptions;

    const T0: i64 = 1_764_288_000_000;

    fn placed(id: &str, t_ms: i64) -> Vec<u8> {
        format!(
            r#"{{"schema_version":2,"event_id":"{id}","order_id":"o-{id}","type":"ORDER_PLACED","occurred_at_ms":{t_ms},"store_id":"s1","channel":"web","items":[{{"sku":"SKU-1","quantity":1,"price":{{"amount_minor":1000,"currency":"USD"}}}}]}}"#
        )
        .into_bytes()
    }

    /// Runs `values` (offsets 0..) through slices of `slice` records, chunks of `chunk`;
    /// returns every published record.
    fn run(values: &[Vec<u8>], slice: usize, chunk: usize, coalesce: bool) -> Vec<OutputRecord> {
        let dir = tempfile::tempdir().expect("tmp");
        let store =
            Store::open(dir.path(), &StoreOptions { owner: "t".into(), ..StoreOptions::default() }).expect("open");
        let mut runner = SliceRunner::new(&store, TaskConfig::example(), chunk, coalesce, Arc::default());
        let mut published = Vec::new();
        for (n, part) in values.chunks(slice).enumerate() {
            for (i, v) in part.iter().enumerate() {
                let offset = (n * slice + i) as i64;
                let rec = SourceRecord { key: None, value: Some(v), append_ms: T0 + offset, offset };
                runner.ingest(0, rec).expect("ingest");
            }
            runner
                .end_slice(None, |out: &mut Vec<OutputRecord>| -> Result<(), StateError> {
                    published.append(out);
                    Ok(())
                })
                .expect("end slice");
        }
        published
    }

    fn last_dashboard(out: &[OutputRecord]) -> Option<Vec<u8>> {
        out.iter().rev().find(|r| r.sink == Sink::Dashboard).map(|r| r.value.clone())
    }

    #[test]
    fn slices_and_chunks_give_the_final_rows_of_one_pass_and_duplicates_across_chunks_count_once() {
        // e0..e9 each twice, the repeat 10 records later: always in another chunk of 3.
        let values: Vec<Vec<u8>> = (0..20).map(|i| placed(&format!("e{}", i % 10), T0 + (i % 10) * 1000)).collect();
        let one_pass = run(&values, 20, 20, false);
        let sliced = run(&values, 7, 3, true);
        assert_eq!(last_dashboard(&one_pass), last_dashboard(&sliced));
        // One slice, chunks of 3: each repeat is finished in a later chunk of the same
        // uncommitted batch, where only the held ids can recognise it.
        let held = run(&values, 20, 3, true);
        assert_eq!(last_dashboard(&one_pass), last_dashboard(&held));
        let v: serde_json::Value = serde_json::from_slice(&last_dashboard(&sliced).expect("row")).expect("json");
        assert_eq!((v["orders"].as_u64(), v["version"].as_u64()), (Some(10), Some(10)));
    }

    #[test]
    fn a_coalesced_slice_publishes_each_changed_row_once_with_its_final_version() {
        let values: Vec<Vec<u8>> = (0..9).map(|i| placed(&format!("e{i}"), T0)).collect();
        let out = run(&values, 9, 2, true);
        let dash: Vec<&OutputRecord> = out.iter().filter(|r| r.sink == Sink::Dashboard).collect();
        assert_eq!(dash.len(), 1);
        let uncoalesced = run(&values, 9, 2, false);
        assert_eq!(uncoalesced.iter().filter(|r| r.sink == Sink::Dashboard).count(), 5, "one per chunk finish");
    }
}
