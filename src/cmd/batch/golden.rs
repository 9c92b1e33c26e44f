//! The close of a generated range against its output before the close's dedup moved to
//! disk (`testdata/close_golden.txt`, written by the in-memory fold at commit 8f45a82):
//! rows byte for byte, and the accounting. The in-memory fold ([`Dedup`]) stays the
//! reference the disk-backed one is held to.

use chrono::NaiveDate;

use super::dedup::DiskDedup;
use tidemark_topology::finance::{DayClose, Dedup};
use tidemark_topology::gen::{GenConfig, GenTopic, Generator, DEFAULT_START_MS};
use tidemark_topology::normalize::NormalizeLimits;

const PARTITIONS: usize = 3;
/// Shorter than the generator's duplicate span, so some duplicates count again.
const RETENTION_MS: i64 = 20_000;

/// Per partition, the records in offset order: `(value, append_ms)`. Duplicates share their
/// original's key, so they land in its partition.
pub(super) fn generated() -> Vec<Vec<(Vec<u8>, i64)>> {
    let cfg = GenConfig {
        seed: 7,
        events: 30_000,
        rate_per_s: 1.0,
        dup_fraction: 0.05,
        dup_span_ms: 60_000,
        malformed_fraction: 0.01,
        inventory_every: 0,
        target_event_bytes: 0,
        ..GenConfig::default()
    };
    let mut parts = vec![Vec::new(); PARTITIONS];
    for r in Generator::new(cfg).expect("config") {
        if r.topic != GenTopic::Orders {
            continue;
        }
        let p = r.key.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b))) % PARTITIONS;
        parts[p].push((r.value, DEFAULT_START_MS + r.due_ms));
    }
    parts
}

pub(super) fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 28).expect("date")
}

/// Rows (one JSON line each) and the accounting of a close.
pub(super) fn render(fold: &DayClose) -> String {
    let mut out: String = fold.rows().iter().map(|r| format!("{}\n", String::from_utf8_lossy(&r.to_bytes()))).collect();
    out.push_str(&format!("{:?}\n", fold.tally()));
    out
}

fn in_memory() -> DayClose {
    let mut fold = DayClose::new(day(), chrono_tz::Asia::Tokyo);
    for part in generated() {
        let mut dedup = Dedup::new(RETENTION_MS);
        for (value, append_ms) in &part {
            fold.observe(&mut dedup, value, *append_ms);
        }
    }
    fold
}

/// The production path: the disk-backed dedup, in chunks of `chunk` records.
fn on_disk(chunk: usize) -> DayClose {
    let mut fold = DayClose::new(day(), chrono_tz::Asia::Tokyo);
    let dedup = DiskDedup::new(RETENTION_MS).expect("store").with_chunk(chunk);
    for (p, part) in generated().iter().enumerate() {
        let partition = i32::try_from(p).expect("partition");
        let seen = dedup.partition(partition).expect("scratch store");
        super::close_range(&seen, &mut fold, NormalizeLimits::default(), |f| {
            for (value, append_ms) in part {
                f(value, *append_ms);
            }
            Ok(())
        })
        .expect("fold");
    }
    fold
}

#[test]
fn the_disk_backed_close_is_byte_identical_to_the_in_memory_close_before_the_change() {
    // 1 000-record chunks: duplicates fall both inside a chunk and across chunks.
    for chunk in [1_000, super::dedup::CHUNK] {
        assert_eq!(render(&on_disk(chunk)), include_str!("testdata/close_golden.txt"), "chunks of {chunk}");
    }
}

#[test]
fn the_close_of_a_generated_range_is_byte_identical_to_the_in_memory_close_before_the_change() {
    let got = render(&in_memory());
    if std::env::var_os("TIDEMARK_WRITE_CLOSE_GOLDEN").is_some() {
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/src/cmd/batch/testdata/close_golden.txt"), &got)
            .expect("write");
    }
    assert_eq!(got, include_str!("testdata/close_golden.txt"));
}
