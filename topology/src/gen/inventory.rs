//! Inventory snapshots: one per SKU at the start, then periodic ones for popular SKUs, a few
//! of them stale (older than the SKU's latest `as_of`, which consumers must ignore).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::catalog::{sku_name, Catalog};
use super::encode::write_snapshot;
use super::{GenRecord, GenTopic, Truth};

const P_STALE: f64 = 0.05;
/// How far before the SKU's latest `as_of` a stale snapshot claims to be.
pub(super) const MAX_STALENESS_MS: i64 = 3_600_000;

#[derive(Debug)]
pub(super) struct Inventory {
    /// Latest `as_of` per SKU (epoch ms); empty when snapshots are disabled.
    latest: Vec<i64>,
    next_initial: u32,
    /// Upper bound of a drawn `on_hand`. Periodic snapshots pick SKUs by the same popularity
    /// as order lines, so a SKU sells about 1.2 × `inventory_every` units between two of its
    /// snapshots whatever its rank; stock drawn up to 3× that makes some SKUs run low or
    /// oversell and most not.
    max_on_hand: u32,
}

impl Inventory {
    pub(super) fn new(skus: u32, every: u64) -> Inventory {
        let latest = if every == 0 { Vec::new() } else { vec![i64::MIN; skus as usize] };
        let max_on_hand = every.saturating_mul(3).clamp(20, 1_000_000) as u32;
        Inventory { latest, next_initial: 0, max_on_hand }
    }

    /// The next of the start-of-run snapshots (one per SKU, `as_of` = start), if any is left.
    pub(super) fn next_initial(&mut self, rng: &mut ChaCha8Rng, start_ms: i64) -> Option<GenRecord> {
        let sku = self.next_initial;
        let latest = self.latest.get_mut(sku as usize)?;
        *latest = start_ms;
        self.next_initial += 1;
        let on_hand = rng.gen_range(0..=self.max_on_hand);
        Some(record(sku, on_hand, start_ms, 0, false))
    }

    /// A snapshot for a SKU drawn by popularity at simulated time `now_ms`.
    pub(super) fn periodic(
        &mut self,
        rng: &mut ChaCha8Rng,
        catalog: &Catalog,
        now_ms: i64,
        due_ms: i64,
    ) -> Option<GenRecord> {
        let sku = catalog.sample(rng);
        let on_hand = rng.gen_range(0..=self.max_on_hand);
        let stale = rng.gen_bool(P_STALE);
        let latest = self.latest.get_mut(sku as usize)?;
        if stale {
            let as_of = *latest - rng.gen_range(1..=MAX_STALENESS_MS);
            return Some(record(sku, on_hand, as_of, due_ms, true));
        }
        // Strictly newer than the latest, so two fresh snapshots never tie.
        let as_of = now_ms.max(*latest + 1);
        *latest = as_of;
        Some(record(sku, on_hand, as_of, due_ms, false))
    }
}

fn record(sku: u32, on_hand: u32, as_of_ms: i64, due_ms: i64, stale: bool) -> GenRecord {
    let mut value = Vec::with_capacity(80);
    write_snapshot(&mut value, sku, on_hand, as_of_ms);
    let key = sku_name(sku);
    GenRecord { topic: GenTopic::Inventory, truth: Truth::Snapshot { sku: key.clone(), stale }, key, value, due_ms }
}
