//! Dedup footprint benchmark (issue 15, SPEC §5): writes N dedup entries the way the stream
//! does (one `WriteBatch` per commit, 4 partitions, 36-character ids), compacts, and reports
//! bytes per entry on disk, the cost of a batched lookup per id (half hits, half misses) and
//! the time compaction takes to expire all of them once the horizon passes them.
//!
//! Two modes:
//! - `cargo bench -p tidemark-state --bench dedup_footprint`: criterion timings of a batched
//!   lookup (8,000 ids, half hits) and of one commit's worth of inserts, on a small store.
//! - `cargo bench -p tidemark-state --bench dedup_footprint -- --report N DIR`: the footprint
//!   at volume, one JSON object on stdout (what `bench/run footprint` records). DIR must not
//!   exist or be empty; it is removed at the end.
//! - `... -- --fill N DIR`: a store of N dedup entries left in DIR for `tidemark run`
//!   (`bench/run snapshot-volume`); see [`fill`].
mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput};

use tidemark_state::{PartitionId, Store, StoreOptions};

const PARTITIONS: i32 = 4;
const COMMIT: usize = 20_000;

/// A UUID-shaped id (36 characters) derived from `n`: realistic length, no structure.
fn id(n: u64, buf: &mut String) {
    use std::fmt::Write;
    buf.clear();
    let a = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let b = a.rotate_left(17) ^ 0xD1B5_4A32_D192_ED03;
    let _ = write!(
        buf,
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    );
}

fn sst_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "sst"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--fill") {
        let n: u64 = args.get(at + 1).ok_or("--fill N DIR: N missing")?.parse()?;
        let dir = args.get(at + 2).ok_or("--fill N DIR: DIR missing")?;
        return fill(n, Path::new(dir));
    }
    common::main("tidemark-dedup-footprint", report, bench)
}

/// Criterion timings on a store of `PREFILL` compacted entries.
fn bench(c: &mut Criterion) {
    const PREFILL: u64 = 200_000;
    let dir = tempfile::tempdir().expect("tmp");
    let store =
        Store::open(dir.path(), &StoreOptions { sync_commits: false, ..StoreOptions::default() }).expect("open");
    let mut buf = String::new();
    let mut batch = store.batch();
    for i in 0..PREFILL {
        id(i, &mut buf);
        batch.put_dedup(PartitionId::orders((i % PARTITIONS as u64) as i32), &buf, 1_700_000_000_000 + (i / 20) as i64);
    }
    batch.commit().expect("commit");
    store.compact_dedup();
    let mut g = c.benchmark_group("dedup_footprint");
    // Half of the ids stored, half never written, one partition's batch of 8,000.
    let ids: Vec<String> = (0..8_000u64)
        .map(|k| {
            let n_id = if k.is_multiple_of(2) { (k * PARTITIONS as u64) % PREFILL } else { PREFILL + k };
            id(n_id - n_id % PARTITIONS as u64, &mut buf);
            buf.clone()
        })
        .collect();
    g.throughput(Throughput::Elements(ids.len() as u64));
    g.bench_function("lookup_8000_half_hits", |b| {
        b.iter(|| black_box(store.dedup_lookup(PartitionId::orders(0), &ids).expect("lookup")))
    });
    let mut next = PREFILL * 2;
    g.throughput(Throughput::Elements(COMMIT as u64));
    g.bench_function("insert_one_commit", |b| {
        b.iter_batched(
            || {
                let start = next;
                next += COMMIT as u64;
                start
            },
            |start| {
                let mut buf = String::new();
                let mut batch = store.batch();
                for i in start..start + COMMIT as u64 {
                    id(i, &mut buf);
                    batch.put_dedup(PartitionId::orders((i % PARTITIONS as u64) as i32), &buf, 1_700_000_000_000);
                }
                batch.commit().expect("commit")
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// The footprint of `n` entries in `dir`: one JSON object on stdout.
fn report(n: u64, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = dir.to_path_buf();
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir, &StoreOptions { sync_commits: false, ..StoreOptions::default() })?;
    let before = sst_bytes(&dir);

    let started = Instant::now();
    let mut buf = String::new();
    let mut batch = store.batch();
    for i in 0..n {
        id(i, &mut buf);
        let p = PartitionId::orders((i % PARTITIONS as u64) as i32);
        // Append times one per entry per partition, spread like 20k/s.
        batch.put_dedup(p, &buf, 1_700_000_000_000 + (i / 20) as i64);
        if ((i + 1) as usize).is_multiple_of(COMMIT) {
            std::mem::replace(&mut batch, store.batch()).commit()?;
        }
        if (i + 1) % 5_000_000 == 0 {
            eprintln!("dedup_footprint: {} M entries written", (i + 1) / 1_000_000);
        }
    }
    batch.commit()?;
    let write_s = started.elapsed().as_secs_f64();
    let compacting = Instant::now();
    store.compact_dedup();
    let compact_s = compacting.elapsed().as_secs_f64();
    let bytes = sst_bytes(&dir).saturating_sub(before);

    // Lookups: batches of 2,000 ids per partition, half of them stored, half never written;
    // the ids are made before the clock starts, so only the lookups are timed.
    let lookups = 1_000_000u64;
    let mut hits = 0u64;
    let mut looked = 0u64;
    let mut lookup_s = 0.0;
    let mut k = 0u64;
    while looked < lookups {
        let mut per: Vec<Vec<String>> = vec![Vec::with_capacity(2_000); PARTITIONS as usize];
        while per.iter().map(Vec::len).sum::<usize>() < 8_000 {
            // even k: an id written (spread over the range), odd: one never written.
            let n_id = if k.is_multiple_of(2) { k.wrapping_mul(7919) % n } else { n + k };
            id(n_id, &mut buf);
            per[(n_id % PARTITIONS as u64) as usize].push(buf.clone());
            k += 1;
        }
        let timing = Instant::now();
        for (p, ids) in per.iter().enumerate() {
            hits +=
                store.dedup_lookup(PartitionId::orders(p as i32), ids)?.iter().filter(|v| v.is_some()).count() as u64;
            looked += ids.len() as u64;
        }
        lookup_s += timing.elapsed().as_secs_f64();
    }
    let done = looked;
    let lookup_ns = lookup_s * 1e9 / done as f64;

    // Expiry: the horizon passes every entry; compaction drops them (no scan by tidemark).
    for p in 0..PARTITIONS {
        store.set_dedup_horizon(PartitionId::orders(p), i64::MAX);
    }
    let expiring = Instant::now();
    store.compact_dedup();
    let expire_s = expiring.elapsed().as_secs_f64();
    let after = sst_bytes(&dir).saturating_sub(before);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{{\"entries\":{n},\"sst_bytes\":{bytes},\"bytes_per_entry\":{:.1},\"write_s\":{write_s:.1},\"compact_s\":{compact_s:.1},\"lookups\":{done},\"lookup_hits\":{hits},\"lookup_ns_per_id\":{lookup_ns:.0},\"expire_s\":{expire_s:.1},\"sst_bytes_after_expiry\":{after}}}",
        bytes as f64 / n as f64
    );
    Ok(())
}

/// `--fill N DIR`: a store of `N` dedup entries spread over `orders[0..4]`, for
/// `bench/run snapshot-volume` (issue 35: incremental snapshots at ≥ 20 GB of state). The
/// commit path writes ~100k entries/s here, hours for 20 GB, so the entries are written as
/// sorted SST files and ingested at the bottom level (minutes): keys spread evenly over the
/// hash space like real ones (the tag of dedup entries, then 16 bytes), values today's time so
/// retention keeps them. DIR must not hold a store; the partitions get no checkpoint, so
/// `tidemark run` on DIR starts them at the log's start with this history in place. The
/// column families are named as the store names a partition's first generation
/// (`part-<source>-<partition>-0`, `state/src/parts.rs`), which the store adopts at open.
fn fill(n: u64, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use rocksdb::{BlockBasedOptions, DBCompressionType, IngestExternalFileOptions, Options, SstFileWriter, DB};
    const PER_FILE: u64 = 2_500_000;
    if dir.join("CURRENT").exists() {
        return Err(format!("{} already holds a store", dir.display()).into());
    }
    std::fs::create_dir_all(dir)?;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let names: Vec<String> = (0..PARTITIONS).map(|p| format!("part-{}-{p}-0", PartitionId::ORDERS)).collect();
    let mut db_opts = Options::default();
    db_opts.create_if_missing(true);
    db_opts.create_missing_column_families(true);
    let db = DB::open_cf(&db_opts, dir, &names)?;
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    let mut sst_opts = Options::default();
    sst_opts.set_compression_type(DBCompressionType::Lz4);
    sst_opts.set_block_based_table_factory(&table);
    let started = Instant::now();
    let per = n / PARTITIONS as u64;
    let step = u128::MAX / u128::from(per.max(1));
    let mut key = [0u8; 17];
    key[0] = b'd';
    for (p, name) in names.iter().enumerate() {
        let cf = db.cf_handle(name).ok_or("column family just created")?;
        let mut files = Vec::new();
        let mut i = 0;
        while i < per {
            let path = dir.join(format!("fill-{p}-{}.sst", files.len()));
            let mut writer = SstFileWriter::create(&sst_opts);
            writer.open(&path)?;
            let end = (i + PER_FILE).min(per);
            for j in i..end {
                let jitter = u128::from(j.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % step;
                key[1..].copy_from_slice(&(u128::from(j) * step + jitter).to_be_bytes());
                writer.put(key, now_ms.to_le_bytes())?;
            }
            writer.finish()?;
            files.push(path);
            i = end;
        }
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        db.ingest_external_file_cf_opts(&cf, &ingest, files)?;
        eprintln!("dedup_footprint: orders[{p}] filled with {per} entries ({:.0} s)", started.elapsed().as_secs_f64());
    }
    drop(db);
    println!(
        "{{\"entries\":{},\"sst_bytes\":{},\"fill_s\":{:.1}}}",
        per * PARTITIONS as u64,
        sst_bytes(dir),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
