//! Micro-benchmarks of the RocksDB state store on a temporary directory: batched dedup
//! lookups, dedup inserts, and the checkpoint commit (aggregates + checkpoint in one
//! `WriteBatch`, fsync on as in production).
//!
//! `cargo bench -p tidemark-state --bench store`. Results are recorded in
//! `bench/results/micro.txt`; see `bench/README.md`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use tidemark_state::{codec, Checkpoint, Namespace, PartitionId, Store, StoreOptions};

const P: PartitionId = PartitionId { source: 0, partition: 1 };
const BATCH: usize = 1_000;
const PREFILL: usize = 200_000;

fn open(dir: &std::path::Path, sync: bool) -> Store {
    Store::open(dir, &StoreOptions { owner: "bench".into(), sync_commits: sync, ..StoreOptions::default() })
        .expect("open store")
}

fn event_id(i: usize) -> String {
    format!("e-{:016x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn bench_dedup(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), false);
    for chunk in (0..PREFILL).collect::<Vec<_>>().chunks(10_000) {
        let mut b = store.batch();
        for &i in chunk {
            b.put_dedup(P, &event_id(i), 1_000 + i as i64);
        }
        b.commit().expect("prefill");
    }
    let hits: Vec<String> = (0..BATCH).map(|i| event_id(i * (PREFILL / BATCH))).collect();
    let misses: Vec<String> = (0..BATCH).map(|i| event_id(PREFILL * 10 + i)).collect();

    let mut g = c.benchmark_group("dedup");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("lookup/1000_hits_in_200k", |b| {
        b.iter(|| store.dedup_lookup(P, black_box(&hits)).expect("lookup"))
    });
    g.bench_function("lookup/1000_misses_in_200k", |b| {
        b.iter(|| store.dedup_lookup(P, black_box(&misses)).expect("lookup"))
    });
    // New ids every iteration, as the engine writes them; no fsync, to isolate the CPU cost.
    let mut next = PREFILL * 100;
    g.bench_function("insert/1000_put_dedup_commit_nosync", |b| {
        b.iter_batched(
            || {
                let ids: Vec<String> = (next..next + BATCH).map(event_id).collect();
                next += BATCH;
                ids
            },
            |ids| {
                let mut batch = store.batch();
                for (k, id) in ids.iter().enumerate() {
                    batch.put_dedup(P, id, 5_000_000 + k as i64);
                }
                batch.commit().expect("commit")
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// An encoded aggregate about the size of a dashboard partial.
fn aggregate_value(i: usize) -> Vec<u8> {
    codec::encode(&(i as u64, (i * 3) as u64, format!("{}.{:02}", i * 17, i % 100), 1_795_824_000_000i64 + i as i64))
        .expect("encode")
}

fn bench_checkpoint(c: &mut Criterion) {
    let mut g = c.benchmark_group("checkpoint_commit");
    for &sync in &[true, false] {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path(), sync);
        for &n in &[10usize, 100, 1_000, 10_000] {
            let keys: Vec<Vec<u8>> =
                (0..n).map(|i| format!("w{:08}/store-{:02}/EUR", i / 12, i % 12).into_bytes()).collect();
            let values: Vec<Vec<u8>> = (0..n).map(aggregate_value).collect();
            let mut offset = 0i64;
            g.throughput(Throughput::Elements(n as u64));
            let name = if sync { "fsync" } else { "nosync" };
            g.bench_with_input(BenchmarkId::new(format!("aggregates_{name}"), n), &n, |b, _| {
                b.iter(|| {
                    offset += 1_000;
                    let mut batch = store.batch();
                    for (k, v) in keys.iter().zip(&values) {
                        batch.put_aggregate(P, Namespace::Dashboard, k, v);
                    }
                    let cp = Checkpoint {
                        next_offset: offset,
                        max_event_ms: Some(offset),
                        max_append_ms: offset,
                        records: offset as u64,
                    };
                    batch.put_checkpoint(P, &cp).expect("encode");
                    batch.commit().expect("commit")
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_dedup, bench_checkpoint);
criterion_main!(benches);
