//! The live one-line status and the final summary printed by `run` and `demo`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::outbox::{OutboxRow, RowState};
use crate::engine::Stats;

/// Prints a status line every `every` until `stop` is set.
pub fn spawn_printer(stats: Arc<Stats>, stop: Arc<AtomicBool>, every: Duration) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut last = (0u64, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let records = Stats::get(&stats.records);
            let rate = (records - last.0) as f64 / last.1.elapsed().as_secs_f64().max(1e-3);
            last = (records, Instant::now());
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:>6.1}s] {:>9} records  {:>9.0} rec/s  applied {:>9}  dedup {:>6}  dead-letter {:>5}  late {:>5}  lag {:>7}  commits {:>5}",
                started.elapsed().as_secs_f64(),
                records,
                rate,
                Stats::get(&stats.events_applied),
                Stats::get(&stats.dedup_hits),
                Stats::get(&stats.dead_letters),
                Stats::get(&stats.late),
                stats.lag.load(Ordering::Relaxed),
                Stats::get(&stats.commits),
            );
        }
    })
}

pub fn summary(stats: &Stats, elapsed: Duration) -> String {
    let records = Stats::get(&stats.records);
    format!(
        "processed {records} records in {:.1}s ({:.0} rec/s): {} events applied, {} duplicates ignored, {} dead-lettered, {} late, {} output records, {} commits",
        elapsed.as_secs_f64(),
        records as f64 / elapsed.as_secs_f64().max(1e-3),
        Stats::get(&stats.events_applied),
        Stats::get(&stats.dedup_hits),
        Stats::get(&stats.dead_letters),
        Stats::get(&stats.late),
        Stats::get(&stats.outputs),
        Stats::get(&stats.commits),
    )
}

/// Outbox rows per rule and per state, for the demo's final summary.
#[derive(Debug, Default)]
pub struct ActionSummary {
    /// Rule id → (rows, the two smallest idempotency keys: the same whatever the scan order).
    by_rule: BTreeMap<String, (u64, Vec<String>)>,
    shadow: u64,
    pending: u64,
    delivered: u64,
    failed: u64,
}

impl ActionSummary {
    pub fn add(&mut self, row: &OutboxRow) {
        let (n, examples) = self.by_rule.entry(row.rule_id.clone()).or_default();
        *n += 1;
        examples.push(row.key.clone());
        examples.sort();
        examples.truncate(2);
        match row.state {
            RowState::Shadow => self.shadow += 1,
            RowState::Pending => self.pending += 1,
            RowState::Delivered { .. } | RowState::Conflict => self.delivered += 1,
            RowState::Failed { .. } => self.failed += 1,
        }
    }

    /// The summary's lines: rows per rule with two example keys, then the outbox states and
    /// how many audit records the audit topic holds.
    pub fn lines(&self, audit_topic: &str, audit_records: usize) -> Vec<String> {
        let total: u64 = self.by_rule.values().map(|(n, _)| n).sum();
        let mut lines = vec![format!("actions: {total} outbox row(s)")];
        for (rule, (n, examples)) in &self.by_rule {
            lines.push(format!("  {rule:<15} {n:>6}  e.g. {}", examples.join(", ")));
        }
        lines.push(format!(
            "outbox: {} shadow, {} pending, {} delivered, {} failed; audit topic {audit_topic}: {audit_records} record(s)",
            self.shadow, self.pending, self.delivered, self.failed
        ));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rule: &str, key: &str, state: RowState) -> OutboxRow {
        OutboxRow {
            key: key.into(),
            rule_id: rule.into(),
            rule_version: 1,
            mode: tidemark_topology::config::RuleMode::Shadow,
            action: "notify".into(),
            sku: "SKU-1".into(),
            payload: Vec::new(),
            state,
            attempts: 0,
            created_at_ms: 0,
            source_append_ms: 0,
            committed_wall_ms: 0,
        }
    }

    #[test]
    fn the_action_summary_counts_rows_per_rule_and_state_with_the_two_smallest_keys() {
        let mut s = ActionSummary::default();
        for (rule, key, state) in [
            ("oversell", "k3", RowState::Shadow),
            ("oversell", "k1", RowState::Shadow),
            ("oversell", "k2", RowState::Pending),
            ("low_stock", "k9", RowState::Delivered { status: 200 }),
            ("low_stock", "k8", RowState::Failed { status: 422 }),
        ] {
            s.add(&row(rule, key, state));
        }
        assert_eq!(
            s.lines("t.audit", 7),
            [
                "actions: 5 outbox row(s)",
                "  low_stock            2  e.g. k8, k9",
                "  oversell             3  e.g. k1, k2",
                "outbox: 2 shadow, 1 pending, 1 delivered, 1 failed; audit topic t.audit: 7 record(s)",
            ]
        );
    }
}
