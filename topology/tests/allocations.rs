//! Allocations per event on the hot path of the pure crate, counted by a wrapping allocator
//! (issue 34: no per-record allocation is the goal). Normalising an event allocates its lines
//! alone: ids, store, channel and SKUs of up to 24 bytes are kept inline (`CompactString`;
//! with `String` it was 6.24 allocations per event); keying and applying it to its dashboard
//! aggregate allocates nothing (0.61 with a `String` store in the key).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_topology::dashboard;
use tidemark_topology::gen::{GenConfig, GenTopic, Generator};
use tidemark_topology::normalize::normalize_order;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    f();
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn normalising_an_order_allocates_only_its_lines_and_its_dashboard_update_nothing() {
    let cfg = GenConfig { seed: 9, events: 10_000, malformed_fraction: 0.0, dup_fraction: 0.0, ..GenConfig::default() };
    let records: Vec<Vec<u8>> =
        Generator::new(cfg).expect("config").filter(|r| r.topic == GenTopic::Orders).map(|r| r.value).collect();
    let mut events = Vec::with_capacity(records.len());
    let mut lines = 0;
    let n = allocations_during(|| {
        for r in &records {
            if let Ok(e) = normalize_order(r, 4_000_000_000_000) {
                lines += e.lines.len();
                events.push(e);
            }
        }
    });
    let per_event = n as f64 / events.len() as f64;
    let per_line = lines as f64 / events.len() as f64;
    eprintln!("normalise: {per_event:.2} allocations per event ({per_line:.2} lines per event)");
    assert!(events.len() > 9_000);
    // One vector of lines per event that has lines (most events: 0.95 measured).
    assert!(per_event <= 1.0, "{per_event:.2} allocations per event");
    let mut aggs = std::collections::BTreeMap::new();
    let n = allocations_during(|| {
        for e in &events {
            if let Some(key) = dashboard::key_for(e, 60_000) {
                let agg: &mut dashboard::DashAgg = aggs.entry(key).or_default();
                dashboard::apply(agg, e, 0);
            }
        }
    });
    let per_event = n as f64 / events.len() as f64;
    eprintln!("dashboard: {per_event:.2} allocations per event");
    // The map's own nodes, a few per new window: nothing per event.
    assert!(per_event < 0.01, "{per_event:.2} allocations per event");
}
