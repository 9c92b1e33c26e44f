//! The stock and window phases of a SKU task against one merge of everything: on random
//! interleavings of two `orders` upstreams and one `inventory` upstream, random commit
//! points and restarts, the task's outbox rows (keys and payload bytes) are exactly the
//! intents of one processor of every rule fed every line and snapshot in logical-time order.
//! The same holds when the log carries the records in packs ([`super::pack`]), mixed with
//! single records as after an upgrade.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rust_decimal::Decimal;
use tidemark_state::{MemStore, PartitionId, StateError, StateStore, StateView};
use tidemark_topology::config::{Rule, RuleKind, RuleMode};
use tidemark_topology::logical::LogicalTime;
use tidemark_topology::sku::SkuProcessor;
use tidemark_topology::window::WindowPolicy;

use super::derive::Derived;
use super::outbox::OutboxRow;
use super::pack::{unpack, Pack};
use super::record::SourceRecord;
use super::sku_task::{SkuTask, SkuTaskConfig};
use super::stats::Stats;

const SEC: i64 = 1_000;
const MIN: i64 = 60 * SEC;
/// 2026-11-28T00:00:00Z.
const T0: i64 = 1_795_824_000_000;
const ORDERS: [(u16, i32); 2] = [(PartitionId::ORDERS, 0), (PartitionId::ORDERS, 1)];
const INVENTORY: (u16, i32) = (PartitionId::INVENTORY, 0);

fn policy() -> WindowPolicy {
    WindowPolicy { size_ms: MIN, allowed_lateness_ms: 0, grace_ms: 2 * MIN, retention_ms: 30 * MIN }
}

fn rules() -> Vec<Rule> {
    let rule = |id: &str, mode, kind| Rule { id: id.into(), version: 1, mode, kind };
    vec![
        rule("oversell", RuleMode::Act, RuleKind::Oversell),
        rule(
            "velocity_spike",
            RuleMode::Notify,
            RuleKind::VelocitySpike { min_units: 4, factor: Decimal::from(2), baseline_windows: 3 },
        ),
        rule("low_stock", RuleMode::Act, RuleKind::LowStock { threshold: 6, replenish_to: 20 }),
    ]
}

fn cfg(rules: Vec<Rule>) -> SkuTaskConfig {
    let mut upstreams = ORDERS.to_vec();
    upstreams.push(INVENTORY);
    SkuTaskConfig { topic: "rep".into(), upstreams, rules, window: policy() }
}

/// One upstream's records in its own order: data records with rising logical times, and a
/// mark after some of them promising the next one's time.
fn upstream_log(rng: &mut ChaCha8Rng, upstream: (u16, i32), n: usize) -> Vec<Derived> {
    let mut out = Vec::new();
    let mut append_ms = T0 + rng.gen_range(0..5 * SEC);
    let skus = ["SKU-1", "SKU-2", "SKU-3"];
    for offset in 0..n as i64 {
        append_ms += rng.gen_range(0..20 * SEC);
        let lt = LogicalTime::new(append_ms, upstream.0, upstream.1, offset);
        let sku = skus[rng.gen_range(0..skus.len())].to_string();
        if upstream.0 == PartitionId::INVENTORY {
            let as_of_ms = append_ms - rng.gen_range(0..3 * MIN);
            out.push(Derived::Snapshot { lt, sku: sku.into(), on_hand: rng.gen_range(0..15), as_of_ms, append_ms });
        } else {
            // Some events arrive late: their event time lies minutes before their append time.
            let event_ms =
                append_ms - if rng.gen_bool(0.1) { rng.gen_range(0..8 * MIN) } else { rng.gen_range(0..SEC) };
            let lines = rng.gen_range(1..3u32);
            for idx in 0..lines {
                let sku = skus[rng.gen_range(0..skus.len())].to_string();
                let placed = rng.gen_bool(0.85);
                out.push(Derived::Line {
                    lt,
                    idx,
                    sku: sku.into(),
                    placed,
                    qty: rng.gen_range(1..4),
                    event_ms,
                    append_ms,
                });
            }
        }
        if rng.gen_bool(0.3) {
            let bound = LogicalTime::new(append_ms + rng.gen_range(0..SEC), upstream.0, upstream.1, offset + 1);
            out.push(Derived::Mark { upstream, bound });
        }
    }
    let end = LogicalTime::new(i64::MAX / 2, upstream.0, upstream.1, n as i64);
    out.push(Derived::Mark { upstream, bound: end });
    out
}

/// What one merge of everything fires: every line and snapshot in logical-time order, one
/// processor of every rule. Key → payload bytes.
fn single_merge(logs: &[Vec<Derived>]) -> BTreeMap<String, Vec<u8>> {
    let mut all: Vec<(LogicalTime, u32, &Derived)> = Vec::new();
    for d in logs.iter().flatten() {
        match d {
            Derived::Line { lt, idx, .. } => all.push((*lt, *idx, d)),
            Derived::Snapshot { lt, .. } => all.push((*lt, 0, d)),
            Derived::Mark { .. } => {}
        }
    }
    all.sort_by_key(|(lt, idx, _)| (*lt, *idx));
    let mut p = SkuProcessor::new(rules(), policy());
    let mut out = BTreeMap::new();
    for (_, _, d) in all {
        let Some(input) = d.sku_input() else { continue };
        for intent in p.apply(&input) {
            out.entry(intent.key.clone()).or_insert_with(|| intent.payload_json());
        }
    }
    out
}

/// The repartition partition as the task reads it: the upstream logs interleaved at random,
/// each upstream's own order kept.
fn interleave(rng: &mut ChaCha8Rng, logs: &[Vec<Derived>]) -> Vec<Vec<u8>> {
    let mut next = vec![0usize; logs.len()];
    let mut out = Vec::new();
    loop {
        let open: Vec<usize> = (0..logs.len()).filter(|i| next[*i] < logs[*i].len()).collect();
        if open.is_empty() {
            return out;
        }
        let i = open[rng.gen_range(0..open.len())];
        out.push(logs[i][next[i]].encode());
        next[i] += 1;
    }
}

/// Runs the task over the log with commits at random points and, sometimes, a restart from
/// the last commit; returns every outbox row written, key → payload.
fn run_task(rng: &mut ChaCha8Rng, log: &[Vec<u8>], rules: Vec<Rule>) -> Result<BTreeMap<String, Vec<u8>>, StateError> {
    let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
    let mut task = SkuTask::restore(&store, id, cfg(rules.clone()))?;
    let mut fired = BTreeMap::new();
    let mut offset = 0i64;
    let mut out = Vec::new();
    while (offset as usize) < log.len() {
        let rec = SourceRecord { key: None, value: Some(&log[offset as usize]), append_ms: 0, offset };
        task.ingest(rec, &mut out, &stats);
        offset += 1;
        let at_end = offset as usize == log.len();
        if at_end || rng.gen_bool(0.15) {
            let mut batch = store.batch();
            let mut rows: Vec<(PartitionId, OutboxRow)> = Vec::new();
            task.finish(&store, &mut batch, &mut rows, &stats)?;
            store.commit(batch)?;
            for (_, row) in rows {
                assert!(fired.insert(row.key.clone(), row.payload).is_none(), "{} written twice", row.key);
            }
            if !at_end && rng.gen_bool(0.2) {
                task = SkuTask::restore(&store, id, cfg(rules.clone()))?;
                offset = task.checkpoint().next_offset;
            }
        }
    }
    assert_eq!(task.buffered(), 0, "every record released once every upstream passed the end");
    Ok(fired)
}

#[test]
fn the_stock_and_window_phases_fire_exactly_what_one_merge_of_everything_fires() -> Result<(), StateError> {
    let mut checked = (0usize, 0usize);
    for seed in 0..150u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let logs: Vec<Vec<Derived>> = [ORDERS[0], ORDERS[1], INVENTORY]
            .into_iter()
            .map(|u| upstream_log(&mut rng, u, if u == INVENTORY { 8 } else { 40 }))
            .collect();
        let want = single_merge(&logs);
        let log = interleave(&mut rng, &logs);
        let got = run_task(&mut rng, &log, rules())?;
        assert_eq!(got, want, "seed {seed}");
        checked.0 += want.keys().filter(|k| k.starts_with("velocity")).count();
        checked.1 += want.len();
    }
    // The workload is not vacuous: window and stock rules both fire.
    assert!(checked.0 > 50 && checked.1 - checked.0 > 50, "velocity {}, all {}", checked.0, checked.1);
    Ok(())
}

/// The log as the sink writes it: runs of consecutive records in packs of 1 to 12, and now
/// and then a record alone (as versions before packs wrote it).
fn packed(rng: &mut ChaCha8Rng, records: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut records = records.into_iter().peekable();
    while records.peek().is_some() {
        if rng.gen_bool(0.1) {
            out.extend(records.next());
            continue;
        }
        let mut pack = Pack::default();
        for r in records.by_ref().take(rng.gen_range(1..=12)) {
            pack.push(&r);
        }
        out.push(pack.take());
    }
    out
}

#[test]
fn records_read_in_packs_fire_exactly_what_one_merge_of_everything_fires() -> Result<(), StateError> {
    let mut checked = 0usize;
    for seed in 0..150u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(5_000 + seed);
        let logs: Vec<Vec<Derived>> = [ORDERS[0], ORDERS[1], INVENTORY]
            .into_iter()
            .map(|u| upstream_log(&mut rng, u, if u == INVENTORY { 8 } else { 40 }))
            .collect();
        let want = single_merge(&logs);
        let records = interleave(&mut rng, &logs);
        let log = packed(&mut rng, records.clone());
        assert!(log.len() < records.len() / 3, "seed {seed}: packs, not single records");
        let got = run_task(&mut rng, &log, rules())?;
        assert_eq!(got, want, "seed {seed}");
        checked += want.len();
    }
    assert!(checked > 100, "keys fired: {checked}");
    Ok(())
}

#[test]
fn a_pack_cut_short_applies_its_whole_records_and_dead_letters_the_rest_once() -> Result<(), StateError> {
    let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
    let mut task = SkuTask::restore(&store, id, cfg(rules()))?;
    let mut pack = Pack::default();
    for i in 0..3 {
        let lt = LogicalTime::new(T0 + i * SEC, ORDERS[0].0, ORDERS[0].1, i);
        let event_ms = T0 + i * SEC;
        pack.push(
            &Derived::Line { lt, idx: 0, sku: "SKU-1".into(), placed: true, qty: 1, event_ms, append_ms: event_ms }
                .encode(),
        );
    }
    let whole = pack.take();
    let cut = &whole[..whole.len() - 5];
    let mut out = Vec::new();
    assert!(task.ingest(SourceRecord { key: None, value: Some(cut), append_ms: 0, offset: 0 }, &mut out, &stats));
    assert_eq!(task.buffered(), 2, "the two whole records wait in the merge buffer");
    assert_eq!(Stats::get(&stats.dead_letters), 1);
    let rest = unpack(cut).expect("a pack").nth(2).expect("the cut record");
    assert!(rest.is_err());
    assert_eq!(out.len(), 1);
    assert!(out[0].value.len() < cut.len() && cut.ends_with(&out[0].value), "the unread rest is dead-lettered");

    // Committed, restarted and read again from the buffered records' pack: not dead-lettered twice.
    let mut batch = store.batch();
    task.finish(&store, &mut batch, &mut Vec::new(), &stats)?;
    store.commit(batch)?;
    let mut again = SkuTask::restore(&store, id, cfg(rules()))?;
    assert_eq!(again.checkpoint().next_offset, 0, "a restart reads the pack again");
    let mut out = Vec::new();
    again.ingest(SourceRecord { key: None, value: Some(cut), append_ms: 0, offset: 0 }, &mut out, &stats);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!((again.buffered(), Stats::get(&stats.dead_letters)), (2, 1));
    Ok(())
}

#[test]
fn window_rules_are_released_by_the_orders_upstreams_alone() -> Result<(), StateError> {
    let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
    let velocity = rules().into_iter().filter(|r| !r.reads_stock()).collect::<Vec<_>>();
    let mut task = SkuTask::restore(&store, id, cfg(rules()))?;
    let mut records = Vec::new();
    for i in 0..5 {
        let lt = LogicalTime::new(T0 + i * SEC, ORDERS[0].0, ORDERS[0].1, i);
        let line = Derived::Line {
            lt,
            idx: 0,
            sku: "SKU-1".into(),
            placed: true,
            qty: 2,
            event_ms: T0 + i * SEC,
            append_ms: T0 + i * SEC,
        };
        records.push(line.encode());
    }
    for u in ORDERS {
        records.push(Derived::Mark { upstream: u, bound: LogicalTime::new(T0 + MIN, u.0, u.1, 9) }.encode());
    }
    // The inventory upstream has not spoken: the stock phase waits, the window phase does not.
    let mut out = Vec::new();
    for (offset, value) in records.iter().enumerate() {
        task.ingest(
            SourceRecord { key: None, value: Some(value), append_ms: 0, offset: offset as i64 },
            &mut out,
            &stats,
        );
    }
    let mut batch = store.batch();
    let mut rows = Vec::new();
    task.finish(&store, &mut batch, &mut rows, &stats)?;
    store.commit(batch)?;
    let keys: Vec<&str> = rows.iter().map(|(_, r)| r.key.as_str()).collect();
    assert_eq!(keys, ["velocity_spike:v1:SKU-1:window:2026-11-28T00:00:00.000Z"]);
    assert_eq!(task.buffered(), 5, "the lines wait in the buffer for the stock phase");
    assert_eq!(store.checkpoint(id)?.map(|c| c.next_offset), Some(0), "and a restart reads them again");

    // Restarted: the window phase does not fire again, and with only window rules the
    // task does not wait for the inventory upstream at all.
    let mut again = SkuTask::restore(&store, id, cfg(rules()))?;
    for (offset, value) in records.iter().enumerate() {
        again.ingest(
            SourceRecord { key: None, value: Some(value), append_ms: 0, offset: offset as i64 },
            &mut out,
            &stats,
        );
    }
    let mut rows = Vec::new();
    again.finish(&store, &mut store.batch(), &mut rows, &stats)?;
    assert!(rows.is_empty(), "{rows:?}");
    let mut only_windows = SkuTask::restore(&MemStore::new(), id, cfg(velocity))?;
    for (offset, value) in records.iter().enumerate() {
        only_windows.ingest(
            SourceRecord { key: None, value: Some(value), append_ms: 0, offset: offset as i64 },
            &mut out,
            &stats,
        );
    }
    only_windows.finish(&MemStore::new(), &mut MemStore::new().batch(), &mut rows, &stats)?;
    assert_eq!((rows.len(), only_windows.buffered()), (1, 0));
    Ok(())
}

/// The shape of the task's bookkeeping row as one processor of every rule wrote it.
#[derive(serde::Serialize)]
struct OneMergeMeta {
    bounds: BTreeMap<(u16, i32), LogicalTime>,
    applied: BTreeMap<(u16, i32), (i64, u32)>,
    max_event_ms: Option<i64>,
}

#[test]
fn a_task_restored_from_the_state_of_one_merge_of_everything_goes_on_as_that_merge_would() -> Result<(), StateError> {
    use tidemark_state::{codec, Checkpoint, Namespace, StateWrite};
    let mut checked = 0usize;
    for seed in 0..40u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(1_000 + seed);
        let logs: Vec<Vec<Derived>> = [ORDERS[0], ORDERS[1], INVENTORY]
            .into_iter()
            .map(|u| upstream_log(&mut rng, u, if u == INVENTORY { 8 } else { 40 }))
            .collect();
        let want = single_merge(&logs);
        // What the state held when the task stopped: the first half of the merge applied by
        // one processor of every rule, its intents already in the outbox.
        let mut data: Vec<(LogicalTime, u32, &Derived)> = Vec::new();
        for d in logs.iter().flatten() {
            if let (Some(seq), Derived::Line { lt, .. } | Derived::Snapshot { lt, .. }) = (d.seq(), d) {
                data.push((*lt, seq.1, d));
            }
        }
        data.sort_by_key(|(lt, idx, _)| (*lt, *idx));
        let half: Vec<Vec<Derived>> = vec![data[..data.len() / 2].iter().map(|(_, _, d)| (*d).clone()).collect()];
        let before = single_merge(&half);
        let mut p = SkuProcessor::new(rules(), policy());
        let mut applied = BTreeMap::new();
        for (lt, idx, d) in &data[..data.len() / 2] {
            applied.insert(lt.upstream(), (lt.offset, *idx));
            let Some(input) = d.sku_input() else { continue };
            p.apply(&input);
        }
        let (store, id) = (MemStore::new(), PartitionId::sku(0));
        let mut batch = store.batch();
        for d in p.take_dirty() {
            batch.put_aggregate(id, Namespace::Sku, d.sku.as_bytes(), &codec::encode(&d.core)?);
            for (t, units) in d.lines {
                if let Some(u) = units {
                    batch.put_aggregate(
                        id,
                        Namespace::SkuLines,
                        &super::sku_phase::line_key(&d.sku, t),
                        &codec::encode(&u)?,
                    );
                }
            }
        }
        let meta = OneMergeMeta { bounds: BTreeMap::new(), applied, max_event_ms: p.watermark_state() };
        batch.put_aggregate(id, Namespace::SkuMeta, b"meta", &codec::encode(&meta)?);
        batch.put_checkpoint(id, &Checkpoint::default())?;
        store.commit(batch)?;

        // The task reads the whole log again from its checkpoint (offset 0).
        let log = interleave(&mut rng, &logs);
        let stats = Stats::default();
        let mut task = SkuTask::restore(&store, id, cfg(rules()))?;
        let mut out = Vec::new();
        for (offset, value) in log.iter().enumerate() {
            task.ingest(
                SourceRecord { key: None, value: Some(value), append_ms: 0, offset: offset as i64 },
                &mut out,
                &stats,
            );
        }
        let mut rows = Vec::new();
        task.finish(&store, &mut store.batch(), &mut rows, &stats)?;
        let got: BTreeMap<String, Vec<u8>> = rows.into_iter().map(|(_, r)| (r.key, r.payload)).collect();
        let after: BTreeMap<String, Vec<u8>> = want.into_iter().filter(|(k, _)| !before.contains_key(k)).collect();
        assert_eq!(got, after, "seed {seed}");
        checked += after.keys().filter(|k| k.starts_with("velocity")).count();
    }
    assert!(checked > 10, "velocity keys after the restart: {checked}");
    Ok(())
}
