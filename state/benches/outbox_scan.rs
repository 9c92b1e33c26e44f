//! Outbox scan cost (issue 15 item 2): N rows of ~600 bytes in 4 SKU partitions, 1 % of them
//! pending. Times finding the pending rows through the pending index against reading every
//! row (what the runtime did before the indexes), and the expiry of the older half of the
//! final rows through the event-time index. Memory per phase: the RSS before it and the peak
//! RSS during it (the peak is reset between phases through `/proc/self/clear_refs`), so the
//! pending path's memory is its own, not the full scan's. Prints one JSON object.
//!
//! Two modes:
//! - `cargo bench -p tidemark-state --bench outbox_scan`: criterion timings of the pending
//!   scan and of the full scan over a small store (20,000 rows, 1 % pending).
//! - `cargo bench -p tidemark-state --bench outbox_scan -- --report N DIR`: the figures above
//!   at volume, one JSON object on stdout (what `bench/run footprint` records).

mod common;

use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;

use tidemark_state::{OutboxIndex, PartitionId, Store, StoreOptions};

const PARTITIONS: i32 = 4;

/// A `/proc/self/status` field in kB (`VmRSS`, `VmHWM`), 0 where unknown.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix(" kB")?.parse().ok())
        .unwrap_or(0)
}

/// Starts a phase: resets the peak RSS (Linux: `5` to clear_refs) and returns the RSS now.
fn phase_start() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kb("VmRSS")
}

/// `"name":{"rss_before_kb":…,"peak_rss_kb":…}` for a phase started at `before`.
fn phase_json(name: &str, before: u64) -> String {
    format!("\"{name}\":{{\"rss_before_kb\":{before},\"peak_rss_kb\":{}}}", status_kb("VmHWM"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main("tidemark-outbox-scan", report, bench)
}

/// `n` rows of ~600 bytes in 4 SKU partitions, 1 % pending, committed 20,000 at a time.
fn fill(store: &Store, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let row = vec![b'r'; 600];
    let mut batch = store.batch();
    for i in 0..n {
        let p = PartitionId::sku((i % PARTITIONS as u64) as i32);
        let key = format!("low_stock:v1:SKU-{i:08}:snapshot:2026-11-28T10:00:00.000Z");
        let index = if i % 100 == 0 { OutboxIndex::Pending } else { OutboxIndex::Final { created_at_ms: i as i64 } };
        batch.put_outbox(p, &key, &row, index);
        if (i + 1).is_multiple_of(20_000) {
            std::mem::replace(&mut batch, store.batch()).commit()?;
        }
    }
    batch.commit()?;
    Ok(())
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tmp");
    let store =
        Store::open(dir.path(), &StoreOptions { sync_commits: false, ..StoreOptions::default() }).expect("open");
    fill(&store, 20_000).expect("fill");
    let mut g = c.benchmark_group("outbox_scan");
    g.bench_function("pending_index_20000_rows", |b| {
        b.iter(|| black_box(store.outbox_pending(PartitionId::sku(0)).expect("pending").len()))
    });
    g.bench_function("full_scan_20000_rows", |b| {
        b.iter(|| black_box(store.outbox_scan(PartitionId::sku(0)).expect("scan").len()))
    });
    g.finish();
}

/// The scan and expiry figures of `n` rows in `dir`: one JSON object on stdout.
fn report(n: u64, dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = dir.to_path_buf();
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir, &StoreOptions { sync_commits: false, ..StoreOptions::default() })?;
    fill(&store, n)?;

    let before = phase_start();
    let t = Instant::now();
    let mut pending = 0usize;
    for p in 0..PARTITIONS {
        pending += store.outbox_pending(PartitionId::sku(p))?.len();
    }
    let pending_ms = t.elapsed().as_secs_f64() * 1e3;
    let pending_mem = phase_json("pending_scan_memory", before);

    let before = phase_start();
    let t = Instant::now();
    let mut all = 0usize;
    let mut all_bytes = 0usize;
    for p in 0..PARTITIONS {
        let rows = store.outbox_scan(PartitionId::sku(p))?;
        all += rows.len();
        all_bytes += rows.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    }
    let full_ms = t.elapsed().as_secs_f64() * 1e3;
    let full_mem = phase_json("full_scan_memory", before);

    // Expire the older half of the final rows: retention = half the span of event times.
    let before = phase_start();
    let t = Instant::now();
    let mut expired = 0usize;
    for p in 0..PARTITIONS {
        loop {
            let k = store.outbox_expire(PartitionId::sku(p), n as i64 / 2, 10_000)?;
            expired += k;
            if k < 10_000 {
                break;
            }
        }
    }
    let expire_ms = t.elapsed().as_secs_f64() * 1e3;
    let expire_mem = phase_json("expire_memory", before);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{{\"rows\":{n},\"pending\":{pending},\"pending_scan_ms\":{pending_ms:.1},\"full_scan_rows\":{all},\"full_scan_bytes\":{all_bytes},\"full_scan_ms\":{full_ms:.1},\"expired\":{expired},\"expire_ms\":{expire_ms:.1},{pending_mem},{full_mem},{expire_mem}}}"
    );
    Ok(())
}
