//! Process-wide counters read by the status line, the summary and the metrics exporter.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    pub records: AtomicU64,
    pub events_applied: AtomicU64,
    pub dedup_hits: AtomicU64,
    pub dead_letters: AtomicU64,
    pub late: AtomicU64,
    pub outputs: AtomicU64,
    pub commits: AtomicU64,
    /// Order lines and snapshots applied to per-SKU state.
    pub sku_inputs: AtomicU64,
    /// Order lines a SKU partition's watermark found past window retention: they change no
    /// inventory or velocity state (the event itself was applied to the dashboard).
    pub sku_late_lines: AtomicU64,
    /// Repartitioned records below a progress promise of their upstream (idle_skew too small
    /// for the broker's append-to-fetch delay): logical-time order was not guaranteed.
    pub broken_promises: AtomicU64,
    /// Action keys produced (outbox rows written), all modes.
    pub actions: AtomicU64,
    /// Sum of consumer lag over assigned partitions, from librdkafka statistics.
    pub lag: AtomicI64,
    /// Partitions currently assigned to this process.
    pub assigned: AtomicI64,
    /// Set when committed outbox rows could not be handed to the dispatcher at once.
    pub outbox_rescan: AtomicBool,
    /// Dead letters per reason, indexed like `RejectReason::ALL`.
    pub dead_letters_by_reason: [AtomicU64; tidemark_topology::reject::RejectReason::ALL.len()],
}

impl Stats {
    pub fn dead_lettered(&self, reason: tidemark_topology::reject::RejectReason) {
        Stats::add(&self.dead_letters, 1);
        if let Some(i) = tidemark_topology::reject::RejectReason::ALL.iter().position(|r| *r == reason) {
            Stats::add(&self.dead_letters_by_reason[i], 1);
        }
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
