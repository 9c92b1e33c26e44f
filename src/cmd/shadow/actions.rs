//! The action path over the frozen history: orders and inventory through the SKU
//! repartition, the merge, the rules and the outbox, at a chosen commit [`Cadence`].
//!
//! The replay runs the engine's own tasks in the broker-free topology driver
//! ([`TopologyDriver`]): every record of both ranges is piped into the driver's logs at its
//! own append time, then the driver's clock is set past the last one by more than
//! `idle_skew`, so every upstream that has read its whole log promises past all of it and
//! the merge releases everything. Nothing is read from a clock. Which records a turn
//! releases depends on the cadence; which actions fire, their idempotency keys and payloads
//! must not: that is what `tidemark shadow` compares.
//!
//! The driver holds both ranges and every output in memory (see docs/modes.md).

use std::collections::BTreeMap;

use anyhow::Context as _;
use tidemark_topology::config::Topology;

use super::replay::Source;
use crate::tasks::driver::{Partitions, TopologyDriver};

/// How the replay cuts the history into commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    /// Each turn, every partition (inputs and SKU partitions) polls at most this many
    /// records, then commits: the stream's small commits.
    EveryRecords(usize),
    /// Each turn polls everything its log holds: the first turn takes the whole range.
    Whole,
}

/// What one replay of the action path decided.
#[derive(Debug, Default)]
pub struct Actions {
    /// Every committed outbox row: idempotency key → payload bytes.
    pub payloads: BTreeMap<String, Vec<u8>>,
    /// Turns of the stream loop (one commit each).
    pub turns: usize,
    /// Records left in SKU merge buffers at the end (0 when the merge released everything).
    pub buffered: usize,
}

/// Safety stop for a replay that never goes quiet (a bug, not a long range): every turn
/// polls at least one record while anything is left.
const MAX_IDLE_FACTOR: usize = 8;

/// Replays `orders` and `inventory` through the topology's action path at `cadence`.
pub fn replay(
    orders: &dyn Source,
    inventory: &dyn Source,
    topology: &Topology,
    cadence: Cadence,
) -> anyhow::Result<Actions> {
    let count = |src: &dyn Source| src.ranges().iter().map(|r| r.0 + 1).max().unwrap_or(0);
    let partitions = Partitions {
        orders: count(orders),
        inventory: count(inventory),
        sku: topology.sku_repartition.partitions,
        // Actions only: no combined rows.
        combine: 0,
    };
    let mut driver = TopologyDriver::for_topology(topology, partitions, 0)?;
    let mut last_append = i64::MIN;
    let mut piped = 0usize;
    for (src, is_orders) in [(orders, true), (inventory, false)] {
        for (p, from, to) in src.ranges() {
            src.read(p, from, to, &mut |rec| {
                driver.set_time(rec.append_ms);
                let value = rec.value.unwrap_or_default();
                if is_orders {
                    driver.pipe_order(p, rec.key, value);
                } else {
                    driver.pipe_inventory(p, rec.key, value);
                }
                last_append = last_append.max(rec.append_ms);
                piped += 1;
            })?;
        }
    }
    if piped > 0 {
        driver.set_time(last_append.saturating_add(topology.idle_skew_ms).saturating_add(1));
    }
    let turns = match cadence {
        Cadence::Whole => driver.run_until_quiet()?,
        Cadence::EveryRecords(n) => {
            let n = n.max(1);
            let ids = driver.partitions();
            let limit = (piped / n + 1).saturating_mul(MAX_IDLE_FACTOR).saturating_add(10_000);
            let mut turns = 0;
            loop {
                turns += 1;
                let c = driver.step_only(&ids, n)?;
                if c.ingested == 0 && c.published == 0 {
                    break;
                }
                anyhow::ensure!(turns < limit, "the action replay is still busy after {turns} turns");
            }
            turns
        }
    };
    let payloads = driver
        .outbox()
        .context("reading the replay's outbox")?
        .into_iter()
        .map(|(_, row)| (row.key, row.payload))
        .collect();
    let buffered = (0..partitions.sku).map(|p| driver.buffered(p)).sum();
    Ok(Actions { payloads, turns, buffered })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SourceRecord;
    use tidemark_topology::config::{parse, EXAMPLE};
    use tidemark_topology::gen::{GenConfig, GenTopic, Generator};

    /// `(key, value, append_ms)`.
    type Record = (Vec<u8>, Vec<u8>, i64);

    /// Records per partition; offsets are positions.
    struct Memory(BTreeMap<i32, Vec<Record>>);

    impl Source for Memory {
        fn ranges(&self) -> Vec<(i32, i64, i64)> {
            self.0.iter().map(|(p, l)| (*p, 0, l.len() as i64)).collect()
        }

        fn read(&self, p: i32, from: i64, to: i64, f: &mut dyn FnMut(SourceRecord<'_>)) -> anyhow::Result<()> {
            let log = self.0.get(&p).map_or(&[][..], Vec::as_slice);
            for (offset, (key, value, append_ms)) in log.iter().enumerate().take(to as usize).skip(from as usize) {
                f(SourceRecord { key: Some(key), value: Some(value), append_ms: *append_ms, offset: offset as i64 });
            }
            Ok(())
        }
    }

    /// The example topology with rules in shadow mode that fire often on [`history`].
    fn topology() -> Topology {
        let cut = EXAMPLE.find("# Anomaly rules.").expect("rules section");
        let rules = crate::testkit::rules::firing_rules("shadow", "shadow", "shadow");
        parse(&(EXAMPLE[..cut].to_string() + &rules), "shadow-actions.toml").expect("topology")
    }

    /// A generated history over 3 orders and 2 inventory partitions, keyed as a producer would.
    fn history() -> (Memory, Memory) {
        let cfg = GenConfig {
            seed: 21,
            events: 3000,
            rate_per_s: 50.0,
            skus: 40,
            inventory_every: 150,
            target_event_bytes: 256,
            ..GenConfig::default()
        };
        let start = cfg.start_ms;
        let (mut orders, mut inventory) = (Memory(BTreeMap::new()), Memory(BTreeMap::new()));
        for r in Generator::new(cfg).expect("generator") {
            let hash = r.key.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
            let (log, p) = match r.topic {
                GenTopic::Orders => (&mut orders, (hash % 3) as i32),
                GenTopic::Inventory => (&mut inventory, (hash % 2) as i32),
            };
            log.0.entry(p).or_default().push((r.key.into_bytes(), r.value, start + r.due_ms));
        }
        (orders, inventory)
    }

    #[test]
    fn small_commits_and_one_whole_turn_give_the_same_actions_byte_for_byte() {
        let (orders, inventory) = history();
        let t = topology();
        let small = replay(&orders, &inventory, &t, Cadence::EveryRecords(37)).expect("small commits");
        let whole = replay(&orders, &inventory, &t, Cadence::Whole).expect("whole");
        assert!(small.payloads.len() >= 10, "the rules must fire: {} actions", small.payloads.len());
        assert!(small.turns > whole.turns, "{} vs {} turns", small.turns, whole.turns);
        assert_eq!((small.buffered, whole.buffered), (0, 0), "the merge must release everything");
        assert_eq!(small.payloads, whole.payloads);
    }
}
