//! A pure, deterministic, seeded generator of order events (schema v1 and v2) and inventory
//! snapshots, shaped like the load in the spec: Zipf-skewed SKUs, order lifecycles, a base
//! rate with an optional spike, late events, exact duplicates and malformed records.
//!
//! The same [`GenConfig`] always yields byte-identical records: all randomness comes from
//! one `ChaCha8Rng` seeded with `seed`, nothing reads a clock, nothing iterates a hash map,
//! and floating point is limited to correctly rounded arithmetic.
//!
//! Records come out in nondecreasing `due_ms`, the offset from `start_ms` at which a
//! live-paced producer should send them. Order record `n` is due when the simulated rate
//! has produced `n` records. Each order record is one of:
//! - a *duplicate*: an exact byte copy (same key, same value) of a good record emitted up to
//!   `dup_span_ms` earlier, about `dup_fraction` of all order records;
//! - a *malformed* record, about `malformed_fraction` of all order records, cycling through
//!   [`MALFORMED_REASONS`];
//! - otherwise a *good* event of an order's lifecycle. Its event time is `start_ms + due_ms`,
//!   except for `late_fraction` of good events, which are earlier by up to `max_lateness_ms`.
//!
//! Memory is `O(open_orders + skus)` plus a bounded queue of pending duplicates.

mod catalog;
mod clock;
mod encode;
mod inventory;
mod malformed;
mod orders;
#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use catalog::{Catalog, Store};
use clock::Clock;
use encode::{write_event_open, Defect, Draft, Padder, Schema};
use inventory::{Inventory, MAX_STALENESS_MS};
use malformed::FUTURE_SHIFT_MS;
use orders::OrderBook;

/// Every reason a generated malformed record is built to be rejected for, in the order they
/// cycle.
pub const MALFORMED_REASONS: [&str; 11] = [
    "not_json",
    "missing_event_id",
    "unknown_schema_version",
    "unknown_event_type",
    "unparsable_time",
    "non_positive_quantity",
    "unknown_currency",
    "mixed_currencies",
    "event_time_in_future",
    "invalid_amount",
    "invalid_field",
];

/// 2026-11-28T00:00:00Z.
pub const DEFAULT_START_MS: i64 = 1_795_824_000_000;

/// Pending duplicates are held as full copies; past this many, the earliest is emitted at
/// once (still after its original) so memory stays bounded during spikes.
const MAX_PENDING_DUPS: usize = 16_384;
/// 9999-12-30T23:59:59.999Z: RFC 3339 needs four-digit years in every offset.
const MAX_TIME_MS: i64 = 253_402_214_399_999;
const MAX_TARGET_EVENT_BYTES: usize = 1 << 20;

/// A span of the simulated clock during which the rate is `factor ×` the base rate.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Spike {
    pub at_s: f64,
    pub duration_s: f64,
    pub factor: f64,
}

/// What to generate. Missing fields take their defaults when deserialised.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GenConfig {
    pub seed: u64,
    /// Number of order-topic records, including duplicates and malformed ones.
    pub events: u64,
    /// Simulated start (epoch ms).
    pub start_ms: i64,
    /// Base rate of order records per second of simulated time.
    pub rate_per_s: f64,
    pub spike: Option<Spike>,
    /// Fraction of good (non-duplicate, well-formed) events whose event time lags.
    pub late_fraction: f64,
    pub max_lateness_ms: i64,
    /// Fraction of order records that are byte copies of an earlier one.
    pub dup_fraction: f64,
    /// A duplicate is due at most this long after its original (longer only if the
    /// schedule is saturated with due duplicates).
    pub dup_span_ms: i64,
    /// Fraction of order records that are malformed.
    pub malformed_fraction: f64,
    /// Fraction of well-formed events written in schema v2 (the rest are v1).
    pub v2_fraction: f64,
    pub skus: u32,
    pub stores: u32,
    /// At most this many orders are in flight (placed and not finished).
    pub open_orders: u32,
    /// A periodic inventory snapshot follows every this many order records; 0 disables
    /// inventory snapshots altogether.
    pub inventory_every: u64,
    /// Order values are padded with ignorable fields to this many bytes; 0 = no padding.
    pub target_event_bytes: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 0,
            events: 1_000_000,
            start_ms: DEFAULT_START_MS,
            rate_per_s: 20_000.0,
            spike: None,
            late_fraction: 0.02,
            max_lateness_ms: 6 * 3_600_000,
            dup_fraction: 0.01,
            dup_span_ms: 60_000,
            malformed_fraction: 0.001,
            v2_fraction: 0.5,
            skus: 2000,
            stores: 12,
            open_orders: 50_000,
            inventory_every: 1000,
            target_event_bytes: 1024,
        }
    }
}

/// One invalid field of a [`GenConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidField {
    pub field: &'static str,
    pub reason: String,
}

impl fmt::Display for InvalidField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Every problem of a rejected [`GenConfig`], not just the first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid generator config: {}", join(&self.problems))]
pub struct GenConfigError {
    pub problems: Vec<InvalidField>,
}

fn join(problems: &[InvalidField]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl GenConfig {
    /// Checks every field and reports all problems at once.
    pub fn validate(&self) -> Result<(), GenConfigError> {
        let mut problems = Vec::new();
        let mut bad = |field: &'static str, reason: String| {
            problems.push(InvalidField { field, reason });
        };
        for (field, value) in [
            ("late_fraction", self.late_fraction),
            ("dup_fraction", self.dup_fraction),
            ("malformed_fraction", self.malformed_fraction),
            ("v2_fraction", self.v2_fraction),
        ] {
            if !(0.0..=1.0).contains(&value) {
                bad(field, format!("must be within [0, 1], got {value}"));
            }
        }
        let shares_ok = self.malformed_fraction <= 1.0 - self.dup_fraction
            && (self.dup_fraction == 0.0 || self.malformed_fraction < 1.0 - self.dup_fraction);
        if !shares_ok {
            bad(
                "malformed_fraction",
                format!(
                    "dup_fraction + malformed_fraction must leave room for good events to \
                     duplicate, got {} + {}",
                    self.dup_fraction, self.malformed_fraction
                ),
            );
        }
        let rate_ok = self.rate_per_s.is_finite() && self.rate_per_s > 0.0;
        if !rate_ok {
            bad("rate_per_s", format!("must be finite and > 0, got {}", self.rate_per_s));
        }
        let mut spike_ok = true;
        if let Some(s) = &self.spike {
            if !(s.at_s.is_finite() && s.at_s >= 0.0) {
                spike_ok = false;
                bad("spike.at_s", format!("must be finite and >= 0, got {}", s.at_s));
            }
            if !(s.duration_s.is_finite() && s.duration_s >= 0.0) {
                spike_ok = false;
                bad("spike.duration_s", format!("must be finite and >= 0, got {}", s.duration_s));
            }
            if !(s.factor.is_finite() && s.factor > 0.0) {
                spike_ok = false;
                bad("spike.factor", format!("must be finite and > 0, got {}", s.factor));
            }
        }
        if self.max_lateness_ms < 0 || (self.late_fraction > 0.0 && self.max_lateness_ms < 1) {
            bad("max_lateness_ms", format!("must be >= 1 (>= 0 with no late events), got {}", self.max_lateness_ms));
        }
        if self.dup_span_ms < 0 {
            bad("dup_span_ms", format!("must be >= 0, got {}", self.dup_span_ms));
        }
        for (field, value) in [("skus", self.skus), ("stores", self.stores), ("open_orders", self.open_orders)] {
            if value == 0 {
                bad(field, "must be >= 1".to_string());
            }
        }
        if self.target_event_bytes > MAX_TARGET_EVENT_BYTES {
            bad("target_event_bytes", format!("must be <= {MAX_TARGET_EVENT_BYTES}, got {}", self.target_event_bytes));
        }
        let earliest = self.max_lateness_ms.max(MAX_STALENESS_MS);
        if self.start_ms < earliest || self.start_ms > MAX_TIME_MS {
            bad(
                "start_ms",
                format!(
                    "must leave room for {earliest} ms of lateness after 1970 and be before \
                     year 9999, got {}",
                    self.start_ms
                ),
            );
        } else if rate_ok && spike_ok {
            let last_due = Clock::new(self.rate_per_s, self.spike).due_ms(self.events);
            let latest = self
                .start_ms
                .saturating_add(last_due)
                .saturating_add(FUTURE_SHIFT_MS)
                .saturating_add(self.dup_span_ms.max(0));
            if latest > MAX_TIME_MS {
                bad(
                    "events",
                    format!(
                        "{} records at {}/s from start_ms {} run past year 9999",
                        self.events, self.rate_per_s, self.start_ms
                    ),
                );
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(GenConfigError { problems })
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenTopic {
    Orders,
    Inventory,
}

/// What a record is, so tests and benchmarks can check a consumer against the truth.
#[derive(Clone, Debug, PartialEq)]
pub enum Truth {
    Good { event_id: String },
    Duplicate { event_id: String },
    Late { event_id: String, lateness_ms: i64 },
    Malformed { reason: &'static str },
    Snapshot { sku: String, stale: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct GenRecord {
    pub topic: GenTopic,
    pub key: String,
    pub value: Vec<u8>,
    /// Offset from `start_ms` at which a live-paced producer sends this record.
    pub due_ms: i64,
    pub truth: Truth,
}

/// Seeded, bijective id scrambling: ids look random but never collide within a run.
#[derive(Clone, Copy, Debug)]
struct Ids {
    event_key: u64,
    order_key: u64,
}

impl Ids {
    fn event_id(&self, serial: u64) -> String {
        hex_id("e-", mix(serial ^ self.event_key))
    }

    fn order_id(&self, serial: u64) -> String {
        hex_id("o-", mix(serial ^ self.order_key))
    }
}

/// The splitmix64 finaliser: a bijection on `u64`.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn hex_id(prefix: &str, x: u64) -> String {
    let mut buf = Vec::with_capacity(prefix.len() + 16);
    buf.extend_from_slice(prefix.as_bytes());
    encode::push_hex16(&mut buf, x);
    // Only ASCII was written.
    String::from_utf8(buf).unwrap_or_default()
}

/// A good record waiting to be re-emitted as a duplicate.
#[derive(Debug)]
struct PendingDup {
    due_ms: i64,
    seq: u64,
    key: String,
    value: Vec<u8>,
    event_id: String,
}

impl PartialEq for PendingDup {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PendingDup {}

impl PartialOrd for PendingDup {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PendingDup {
    /// Reversed, so the max-heap pops the earliest due (ties in scheduling order).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due_ms, other.seq).cmp(&(self.due_ms, self.seq))
    }
}

const CHANNELS: [&str; 3] = ["web", "app", "store"];

/// The record stream for one [`GenConfig`]; see the module docs.
pub struct Generator {
    cfg: GenConfig,
    rng: ChaCha8Rng,
    clock: Clock,
    catalog: Catalog,
    stores: Vec<Store>,
    book: OrderBook,
    inventory: Inventory,
    padder: Padder,
    ids: Ids,
    dups: BinaryHeap<PendingDup>,
    dup_seq: u64,
    /// Probability that a non-duplicate order record is malformed.
    p_malformed: f64,
    /// Expected duplicates scheduled per good record.
    dups_per_good: f64,
    value_capacity: usize,
    emitted: u64,
    last_due_ms: i64,
    snapshot_pending: bool,
    /// Order records left before the next periodic snapshot.
    until_snapshot: u64,
    next_event_serial: u64,
    malformed_count: u64,
}

impl Generator {
    pub fn new(cfg: GenConfig) -> Result<Generator, GenConfigError> {
        cfg.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let ids = Ids { event_key: rng.gen(), order_key: rng.gen() };
        let catalog = Catalog::new(cfg.skus, &mut rng);
        let padder = Padder::new(&mut rng);
        let good_share = 1.0 - cfg.dup_fraction - cfg.malformed_fraction;
        let dups_per_good = if good_share > 0.0 { cfg.dup_fraction / good_share } else { 0.0 };
        let p_malformed =
            if cfg.dup_fraction < 1.0 { (cfg.malformed_fraction / (1.0 - cfg.dup_fraction)).min(1.0) } else { 0.0 };
        Ok(Generator {
            clock: Clock::new(cfg.rate_per_s, cfg.spike),
            stores: catalog::stores(cfg.stores),
            book: OrderBook::new(cfg.open_orders),
            inventory: Inventory::new(cfg.skus, cfg.inventory_every),
            value_capacity: cfg.target_event_bytes.max(512) + 16,
            catalog,
            padder,
            ids,
            rng,
            dups: BinaryHeap::new(),
            dup_seq: 0,
            p_malformed,
            dups_per_good,
            emitted: 0,
            last_due_ms: 0,
            snapshot_pending: false,
            until_snapshot: cfg.inventory_every,
            next_event_serial: 0,
            malformed_count: 0,
            cfg,
        })
    }

    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    #[cfg(test)]
    fn book_len(&self) -> usize {
        self.book.len()
    }

    fn order_record(&mut self, due_ms: i64) -> GenRecord {
        let dup_ready = self.dups.peek().is_some_and(|d| d.due_ms <= due_ms || self.dups.len() >= MAX_PENDING_DUPS);
        if dup_ready {
            if let Some(d) = self.dups.pop() {
                return GenRecord {
                    topic: GenTopic::Orders,
                    key: d.key,
                    value: d.value,
                    due_ms,
                    truth: Truth::Duplicate { event_id: d.event_id },
                };
            }
        }
        if self.rng.gen_bool(self.p_malformed) {
            return self.malformed(due_ms);
        }
        self.good(due_ms)
    }

    fn good(&mut self, due_ms: i64) -> GenRecord {
        let rng = &mut self.rng;
        let ev = self.book.next_event(rng, &self.catalog, &self.stores);
        let event_id = self.ids.event_id(self.next_event_serial);
        self.next_event_serial += 1;
        let order_id = self.ids.order_id(ev.order_serial);
        let lateness_ms =
            if rng.gen_bool(self.cfg.late_fraction) { rng.gen_range(1..=self.cfg.max_lateness_ms) } else { 0 };
        let schema = if rng.gen_bool(self.cfg.v2_fraction) { Schema::V2 } else { Schema::V1 };
        let channel = match rng.gen_range(0..20u32) {
            0..=10 => CHANNELS[0],
            11..=17 => CHANNELS[1],
            _ => CHANNELS[2],
        };
        let store = &self.stores[ev.store as usize];
        let mut value = Vec::with_capacity(self.value_capacity);
        let draft = Draft {
            schema,
            kind: ev.kind,
            event_id: &event_id,
            order_id: &order_id,
            time_ms: self.cfg.start_ms + due_ms - lateness_ms,
            store,
            channel,
            lines: ev.lines(),
            shipped_prices: rng.gen_bool(0.5),
            refund_minor: ev.refund_minor,
            defect: Defect::None,
        };
        write_event_open(&mut value, &draft);
        self.padder.finish(&mut value, self.cfg.target_event_bytes, store, rng);

        let whole = self.dups_per_good.floor();
        let frac = self.dups_per_good - whole;
        let copies = whole as u64 + u64::from(frac > 0.0 && self.rng.gen_bool(frac));
        for _ in 0..copies {
            let delay = if self.cfg.dup_span_ms > 0 { self.rng.gen_range(1..=self.cfg.dup_span_ms) } else { 0 };
            self.dups.push(PendingDup {
                due_ms: due_ms + delay,
                seq: self.dup_seq,
                key: order_id.clone(),
                value: value.clone(),
                event_id: event_id.clone(),
            });
            self.dup_seq += 1;
        }
        let truth = if lateness_ms > 0 { Truth::Late { event_id, lateness_ms } } else { Truth::Good { event_id } };
        GenRecord { topic: GenTopic::Orders, key: order_id, value, due_ms, truth }
    }
}

impl Iterator for Generator {
    type Item = GenRecord;

    fn next(&mut self) -> Option<GenRecord> {
        if let Some(rec) = self.inventory.next_initial(&mut self.rng, self.cfg.start_ms) {
            return Some(rec);
        }
        if self.snapshot_pending {
            self.snapshot_pending = false;
            let now_ms = self.cfg.start_ms + self.last_due_ms;
            if let Some(rec) = self.inventory.periodic(&mut self.rng, &self.catalog, now_ms, self.last_due_ms) {
                return Some(rec);
            }
        }
        if self.emitted >= self.cfg.events {
            return None;
        }
        let due_ms = self.clock.due_ms(self.emitted).max(self.last_due_ms);
        self.last_due_ms = due_ms;
        let rec = self.order_record(due_ms);
        self.emitted += 1;
        if self.cfg.inventory_every > 0 {
            self.until_snapshot -= 1;
            if self.until_snapshot == 0 {
                self.snapshot_pending = true;
                self.until_snapshot = self.cfg.inventory_every;
            }
        }
        Some(rec)
    }
}
