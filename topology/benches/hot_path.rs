//! Micro-benchmarks of the pure hot path (no broker, no RocksDB): normalisation of generator
//! bytes, the dashboard window update, and the per-SKU rule processor.
//!
//! `cargo bench -p tidemark-topology --bench hot_path`. Results are recorded in
//! `bench/results/micro.txt`; see `bench/README.md`.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tidemark_topology::config;
use tidemark_topology::dashboard::{self, DashAgg, DashKey};
use tidemark_topology::event::{CanonicalEvent, EventKind};
use tidemark_topology::gen::{GenConfig, GenTopic, Generator};
use tidemark_topology::normalize::normalize_order;
use tidemark_topology::sku::{LineKind, SkuInput, SkuProcessor};

const RECORDS: u64 = 10_000;

/// Order records of the default generator (~1 KiB, v1/v2 mixed, 1 % duplicates, 0.1 %
/// malformed) with the append time the broker would have given them (their due time).
fn order_records() -> Vec<(Vec<u8>, i64)> {
    let cfg = GenConfig { seed: 1, events: RECORDS, ..GenConfig::default() };
    let start = cfg.start_ms;
    Generator::new(cfg)
        .expect("generator config")
        .filter(|r| r.topic == GenTopic::Orders)
        .map(|r| (r.value, start + r.due_ms))
        .collect()
}

fn events(records: &[(Vec<u8>, i64)]) -> Vec<(CanonicalEvent, i64)> {
    records.iter().filter_map(|(bytes, append)| normalize_order(bytes, *append).ok().map(|e| (e, *append))).collect()
}

fn topology() -> config::Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/orders.toml");
    config::load(&path).expect("example topology")
}

fn bench_normalize(c: &mut Criterion) {
    let records = order_records();
    let bytes: u64 = records.iter().map(|(b, _)| b.len() as u64).sum();
    let mut g = c.benchmark_group("normalize");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("normalize_order/10k_generator_records", |b| {
        b.iter(|| {
            let mut ok = 0usize;
            for (bytes, append) in &records {
                if normalize_order(black_box(bytes), *append).is_ok() {
                    ok += 1;
                }
            }
            ok
        })
    });
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("normalize_order/10k_generator_records_bytes", |b| {
        b.iter(|| records.iter().filter(|(bytes, append)| normalize_order(black_box(bytes), *append).is_ok()).count())
    });
    g.finish();
}

fn bench_dashboard(c: &mut Criterion) {
    let events = events(&order_records());
    let size_ms = topology().dashboard_window.size_ms;
    let mut g = c.benchmark_group("window_update");
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("dashboard_key_for_and_apply/10k_events", |b| {
        b.iter_batched(
            HashMap::<DashKey, DashAgg>::new,
            |mut aggs| {
                for (e, append) in &events {
                    if let Some(k) = dashboard::key_for(e, size_ms) {
                        dashboard::apply(aggs.entry(k).or_default(), e, *append);
                    }
                }
                aggs
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn sku_inputs(events: &[(CanonicalEvent, i64)]) -> Vec<SkuInput> {
    let mut out = Vec::new();
    for (e, append) in events {
        let kind = match e.kind {
            EventKind::Placed => LineKind::Placed,
            EventKind::Cancelled => LineKind::Cancelled,
            _ => continue,
        };
        for l in &e.lines {
            out.push(SkuInput::Line {
                sku: l.sku.clone(),
                kind,
                qty: l.qty,
                event_time_ms: e.event_time_ms,
                append_ms: *append,
            });
        }
    }
    out
}

fn bench_sku(c: &mut Criterion) {
    let t = topology();
    let inputs = sku_inputs(&events(&order_records()));
    let mut g = c.benchmark_group("window_update");
    g.throughput(Throughput::Elements(inputs.len() as u64));
    // The example topology's rules (oversell, low_stock, velocity_spike and the expression
    // rule cover_below_two_days) on order lines, and the built-in three alone, to compare.
    let built_ins: Vec<config::Rule> =
        t.rules.iter().filter(|r| !matches!(r.kind, config::RuleKind::Expression(_))).cloned().collect();
    for (name, rules) in [
        ("sku_rules_apply/lines_of_10k_events", &t.rules),
        ("sku_built_in_rules_apply/lines_of_10k_events", &built_ins),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || SkuProcessor::new(rules.clone(), t.dashboard_window),
                |mut p| {
                    let mut fired = 0usize;
                    for input in &inputs {
                        fired += p.apply(black_box(input)).len();
                    }
                    (p, fired)
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench_normalize, bench_dashboard, bench_sku);
criterion_main!(benches);
