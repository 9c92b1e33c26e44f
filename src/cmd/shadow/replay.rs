//! The three modes over one frozen history, each reading it from a [`Source`] (the log, one
//! partition range at a time), so the history is never held in memory.
//!
//! - *stream*: the orders tasks with a commit every `commit_records` records per partition,
//!   every revision published (what `tidemark run` does, with fixed commit points);
//! - *micro-batch*: the same tasks over `slices` consecutive offset slices per partition,
//!   each changed row published once per slice (what `tidemark microbatch` does);
//! - *batch*: the finance close's fold ([`DiskDedup`], [`FinanceAgg`]) and the dashboard
//!   definitions applied to every deduplicated event, with no window retention.
//!
//! Partitions are independent in all three (per-partition tasks, per-partition dedup), so
//! they are replayed one after another. Stream and micro-batch each run on a fresh RocksDB
//! store in a temporary directory.

use std::collections::BTreeMap;

use tidemark_state::{Store, StoreOptions};
use tidemark_topology::dashboard::{self, DashAgg, DashboardRecord};
use tidemark_topology::event::CanonicalEvent;
use tidemark_topology::finance::{contribution, FinanceAgg};
use tidemark_topology::normalize::normalize_order_with;
use tidemark_topology::provisional::ProvisionalRecord;

use super::compare::Compared;
use crate::cmd::batch::dedup::DiskDedup;
use crate::engine::output::headers;
use crate::engine::slice::SliceRunner;
use crate::engine::{OutputRecord, Sink, SourceRecord, TaskConfig};

/// The frozen history: per partition `[from, to)`, readable again and again.
pub trait Source {
    /// `(partition, from, to)`, by partition.
    fn ranges(&self) -> Vec<(i32, i64, i64)>;
    /// Calls `f` with every record of `[from, to)` of `partition`, in offset order.
    fn read(&self, partition: i32, from: i64, to: i64, f: &mut dyn FnMut(SourceRecord<'_>)) -> anyhow::Result<()>;
}

/// The rows of one upsert sink: final value and number of records published, per key.
#[derive(Default)]
pub struct Rows {
    pub last: BTreeMap<String, Vec<u8>>,
    pub revisions: BTreeMap<String, u64>,
}

impl Rows {
    fn put(&mut self, key: String, value: Vec<u8>) {
        *self.revisions.entry(key.clone()).or_default() += 1;
        self.last.insert(key, value);
    }
}

/// What stream or micro-batch published.
#[derive(Default)]
pub struct Published {
    pub dashboard: Rows,
    pub finance: Rows,
    /// Late-output records: the events the mode did not aggregate.
    pub late: Vec<(Vec<u8>, i64)>,
    pub dead_letters: u64,
    pub commits: u64,
}

impl Published {
    fn take(&mut self, out: &mut Vec<OutputRecord>) {
        for r in out.drain(..) {
            let key = || String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            match r.sink {
                Sink::Dashboard => self.dashboard.put(key(), r.value),
                Sink::Finance => self.finance.put(key(), r.value),
                Sink::Late => {
                    let append = r.headers.iter().find(|(k, _)| *k == headers::SOURCE_APPEND_MS);
                    let append_ms = append.and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
                    self.late.push((r.value, append_ms));
                }
                Sink::DeadLetter => self.dead_letters += 1,
                Sink::Repartition | Sink::Combine | Sink::DashboardCombined | Sink::FinanceCombined => {}
            }
        }
    }
}

/// At most this many records in one micro-batch slice: a slice holds its records' dedup ids
/// and staged state in memory until it commits (~150 B each), so a long range gets more
/// slices than `--slices` asks for (measured: 100 M records in 4 slices per partition,
/// 6.25 M records a slice, peaked at 1.6 GB).
pub const SLICE_RECORDS_MAX: i64 = 1_000_000;

/// How a replay cuts each partition's range into commits.
#[derive(Clone, Copy)]
enum Cuts {
    /// A commit after every this many records (the stream).
    EveryRecords(usize),
    /// This many equal offset slices (the micro-batch).
    Slices(i64),
}

fn replay(src: &dyn Source, cfg: &TaskConfig, chunk: usize, coalesce: bool, cuts: Cuts) -> anyhow::Result<Published> {
    let dir = crate::scratch::Scratch::create("shadow")?;
    let store = Store::open(dir.path(), &StoreOptions { owner: "shadow".into(), ..StoreOptions::default() })?;
    let mut runner = SliceRunner::new(&store, cfg.clone(), chunk, coalesce, Default::default());
    let mut published = Published::default();
    let end_slice = |runner: &mut SliceRunner<'_>, published: &mut Published| -> anyhow::Result<()> {
        runner.end_slice(None, |out: &mut Vec<OutputRecord>| -> anyhow::Result<()> {
            published.take(out);
            Ok(())
        })?;
        published.commits += 1;
        Ok(())
    };
    for (p, from, to) in src.ranges() {
        let slices: Vec<(i64, i64)> = match cuts {
            Cuts::EveryRecords(_) => vec![(from, to)],
            Cuts::Slices(k) => slice_bounds(from, to, k),
        };
        for (a, b) in slices {
            let mut failed: Option<anyhow::Error> = None;
            let mut since_commit = 0usize;
            src.read(p, a, b, &mut |rec| {
                if failed.is_some() {
                    return;
                }
                if let Err(e) = runner.ingest(p, rec) {
                    failed = Some(e.into());
                    return;
                }
                since_commit += 1;
                if let Cuts::EveryRecords(n) = cuts {
                    if since_commit >= n {
                        since_commit = 0;
                        failed = end_slice(&mut runner, &mut published).err();
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            end_slice(&mut runner, &mut published)?;
        }
    }
    Ok(published)
}

/// `[from, to)` cut into `k` equal consecutive slices, or into more when a slice would hold
/// over [`SLICE_RECORDS_MAX`] records.
fn slice_bounds(from: i64, to: i64, k: i64) -> Vec<(i64, i64)> {
    let k = k.max(1).max((to - from + SLICE_RECORDS_MAX - 1) / SLICE_RECORDS_MAX);
    (0..k).map(|i| (from + i * (to - from) / k, from + (i + 1) * (to - from) / k)).collect()
}

pub fn stream(src: &dyn Source, cfg: &TaskConfig, commit_records: usize) -> anyhow::Result<Published> {
    let n = commit_records.max(1);
    replay(src, cfg, n, false, Cuts::EveryRecords(n))
}

pub fn microbatch(src: &dyn Source, cfg: &TaskConfig, slices: usize, chunk: usize) -> anyhow::Result<Published> {
    replay(src, cfg, chunk, true, Cuts::Slices(i64::try_from(slices.max(1)).unwrap_or(1)))
}

/// The batch's figures: finance per `day|store|currency`, dashboard per
/// `window_start|store|currency` (partitions summed).
#[derive(Default)]
pub struct BatchFigures {
    pub finance: BTreeMap<String, Compared>,
    pub dashboard: BTreeMap<String, Compared>,
    pub applied: u64,
    pub duplicates: u64,
    pub dead_letters: u64,
}

/// The batch fold, with the disk-backed dedup of `tidemark batch close` (bounded memory).
pub fn batch(src: &dyn Source, cfg: &TaskConfig) -> anyhow::Result<BatchFigures> {
    let mut fin: BTreeMap<(String, String, String), FinanceAgg> = BTreeMap::new();
    let mut dash: BTreeMap<String, DashAgg> = BTreeMap::new();
    let mut out = BatchFigures::default();
    let dedup = DiskDedup::new(cfg.dedup_retention_ms)?;
    for (p, from, to) in src.ranges() {
        let read =
            |f: &mut dyn FnMut(&[u8], i64)| src.read(p, from, to, &mut |r| f(r.value.unwrap_or_default(), r.append_ms));
        let normalize = |value: &[u8], append_ms| normalize_order_with(Some(value), append_ms, cfg.limits);
        dedup.partition(p)?.fold(read, normalize, |scope, (event, append_ms)| {
            let Ok(event) = event else {
                out.dead_letters += 1;
                return;
            };
            if !scope.first_time(&event.event_id, *append_ms) {
                out.duplicates += 1;
                return;
            }
            out.applied += 1;
            if let Some((key, agg)) = finance_contribution(event, cfg) {
                fin.entry(key).or_default().add(&agg);
            }
            if let Some(key) = dashboard_key(event, cfg) {
                dashboard::apply(dash.entry(key).or_default(), event, *append_ms);
            }
        })?;
    }
    out.finance = fin.into_iter().map(|(k, a)| (format!("{}|{}|{}", k.0, k.1, k.2), finance_figures(&a))).collect();
    out.dashboard = dash.into_iter().map(|(k, a)| (k, dash_figures(&a))).collect();
    Ok(out)
}

/// The event's finance row as `(day, store, currency)` and what it adds there.
fn finance_contribution(event: &CanonicalEvent, cfg: &TaskConfig) -> Option<((String, String, String), FinanceAgg)> {
    let (day, key, agg) = contribution(event, cfg.finance_tz)?;
    Some(((day.to_string(), key.store.to_string(), key.currency.code().to_string()), agg))
}

fn dashboard_key(event: &CanonicalEvent, cfg: &TaskConfig) -> Option<String> {
    let k = dashboard::key_for(event, cfg.window.size_ms)?;
    Some(format!("{}|{}|{}", dashboard::rfc3339_ms(k.window_start_ms), k.store, k.currency.code()))
}

fn finance_figures(a: &FinanceAgg) -> Compared {
    Compared::of_finance(a, a.net())
}

fn dash_figures(a: &DashAgg) -> Compared {
    Compared::of_dashboard(&a.figures, a.figures.net(), a.version)
}

/// The stream's published rows summed over source partitions, in the batch's keys.
pub fn summed(p: &Published) -> anyhow::Result<(BTreeMap<String, Compared>, BTreeMap<String, Compared>)> {
    let mut finance: BTreeMap<String, Compared> = BTreeMap::new();
    for v in p.finance.last.values() {
        let r: ProvisionalRecord = serde_json::from_slice(v)?;
        let f = Compared::of_finance(&r.figures, r.net);
        finance.entry(format!("{}|{}|{}", r.day, r.store, r.currency)).or_default().add(&f);
    }
    let mut dash: BTreeMap<String, Compared> = BTreeMap::new();
    for v in p.dashboard.last.values() {
        let r: DashboardRecord = serde_json::from_slice(v)?;
        let f = Compared::of_dashboard(&r.figures, r.net, r.version);
        dash.entry(format!("{}|{}|{}", r.window_start, r.store, r.currency)).or_default().add(&f);
    }
    Ok((finance, dash))
}

/// What the late output holds, per finance and dashboard key.
pub fn late_contributions(p: &Published, cfg: &TaskConfig) -> (BTreeMap<String, Compared>, BTreeMap<String, Compared>) {
    let mut finance: BTreeMap<String, Compared> = BTreeMap::new();
    let mut dash: BTreeMap<String, Compared> = BTreeMap::new();
    for (value, append_ms) in &p.late {
        let Ok(event) = normalize_order_with(Some(value), *append_ms, cfg.limits) else { continue };
        if let Some((k, a)) = finance_contribution(&event, cfg) {
            finance.entry(format!("{}|{}|{}", k.0, k.1, k.2)).or_default().add(&finance_figures(&a));
        }
        if let Some(k) = dashboard_key(&event, cfg) {
            let mut a = DashAgg::default();
            dashboard::apply(&mut a, &event, *append_ms);
            dash.entry(k).or_default().add(&dash_figures(&a));
        }
    }
    (finance, dash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_range_gets_the_slices_asked_for() {
        assert_eq!(slice_bounds(10, 30, 4), [(10, 15), (15, 20), (20, 25), (25, 30)]);
    }

    #[test]
    fn a_long_range_gets_more_slices_so_none_holds_more_than_the_maximum() {
        let (from, to) = (7, 7 + 3 * SLICE_RECORDS_MAX + 1);
        let slices = slice_bounds(from, to, 2);
        assert_eq!(slices.len(), 4);
        assert!(slices.iter().all(|(a, b)| b - a <= SLICE_RECORDS_MAX), "{slices:?}");
        assert_eq!((slices[0].0, slices[3].1), (from, to));
        assert!(slices.windows(2).all(|w| w[0].1 == w[1].0), "consecutive: {slices:?}");
    }
}
