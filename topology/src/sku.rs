//! The per-SKU processor of the inventory anomaly path (SPEC §2 Inventory, Rules, Actions).
//!
//! [`SkuProcessor`] is a pure state machine over one partition's inputs, which the runtime
//! feeds already merged in logical-time order: order lines (after dedup) and inventory
//! snapshots. Each input returns the [`ActionIntent`]s it fired (emit-on-update), so the
//! output is a function of the input sequence alone, whatever the timing or crash history.
//!
//! Semantics where the spec leaves room:
//! - The watermark (max event time − allowed lateness) advances on order lines only. A
//!   snapshot's `as_of` is the warehouse's clock, not order event time.
//! - A line beyond retention ([`SkuProcessor::is_beyond_retention`]) touches no state at
//!   all, inventory included; the runtime counts it (`tidemark_sku_late_lines_total`). Its
//!   event was already applied to the dashboard by its own partition, whose watermark
//!   can trail this one.
//! - Lines count against a snapshot when their event time is after its `as_of`, kept per
//!   exact millisecond. Once such a line falls beyond retention it is folded into one sum
//!   that keeps counting; should a newer snapshot's `as_of` land inside the folded span,
//!   the whole sum keeps counting (the conservative side: it can only lower availability).
//!   Before the first snapshot, lines beyond retention are dropped.
//! - A snapshot whose `as_of` is not newer than the SKU's current one is ignored. A newer
//!   snapshot resets the stock rules: each may fire once more for it.
//! - Window counts (velocity, expression rules reading `window.*`) count placed units only.
//!   Windows are kept only as far back as a window still open for actions can look for its
//!   baseline or `preceding_windows`; a late line into an older window (yet within
//!   retention) changes nothing observable and is not recorded there.
//! - Stock rules and `per_snapshot` expression rules are checked on every update of the SKU
//!   (so a rule whose version changed fires on the SKU's next input); their current window
//!   is the one of the partition's latest event time. A window rule (velocity,
//!   `per_window` expression rules) is checked when its window gains units
//!   while open for actions.
//!
//! Pruning is idempotent with respect to results: [`SkuProcessor::expire`] only removes what
//! no later input can observe, so calling it at any moment (e.g. on the commit timer) never
//! changes an output.

mod expression;
#[cfg(test)]
mod expression_tests;
mod intent;
mod rules;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::config::Rule;
use crate::window::{window_start, Watermark, WindowPolicy};
use rules::{evaluate, Cause, OpenWindow};

pub use intent::{action_str, ActionIntent, Evidence, Trigger};
pub use state::{Folded, RuleRef, SkuState, Stock, Units, WindowFired};

/// What to persist of a SKU that changed: its state without lines, and its changed line rows
/// (`Some` to write, `None` to delete), keyed by event-time millisecond.
#[derive(Clone, Debug)]
pub struct DirtySku {
    pub sku: CompactString,
    pub core: SkuState,
    pub lines: Vec<(i64, Option<Units>)>,
}

/// Whether an order line adds or returns stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    Placed,
    Cancelled,
}

/// One input of the processor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkuInput {
    /// One order line after dedup: placed lines take stock, cancelled ones return it
    /// (shipped and refunded events have no inventory effect and never arrive).
    Line { sku: CompactString, kind: LineKind, qty: u32, event_time_ms: i64, append_ms: i64 },
    /// A warehouse stock snapshot (SPEC §1.2).
    Snapshot { sku: CompactString, on_hand: i64, as_of_ms: i64, append_ms: i64 },
}

impl SkuInput {
    pub fn sku(&self) -> &str {
        match self {
            SkuInput::Line { sku, .. } | SkuInput::Snapshot { sku, .. } => sku,
        }
    }
}

/// Entry counts of a [`SkuProcessor`], for the memory gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkuHeld {
    pub skus: usize,
    pub lines: usize,
    pub windows: usize,
}

/// All anomaly state of one partition: per-SKU state plus the partition watermark.
#[derive(Clone, Debug)]
pub struct SkuProcessor {
    rules: Vec<Rule>,
    policy: WindowPolicy,
    /// Whether any rule reads per-window counts.
    keeps_windows: bool,
    /// Whether any rule reads the stock: only then are lines counted against snapshots and
    /// snapshots applied (a processor of window rules alone keeps neither).
    tracks_stock: bool,
    /// The most windows before the current one any rule reads (velocity baselines,
    /// expression rules' `preceding_windows`).
    baseline_reach: u32,
    watermark: Watermark,
    skus: BTreeMap<CompactString, SkuState>,
    dirty: BTreeSet<CompactString>,
    /// [`Self::prune_marks`] at the last [`Self::expire`]: while they stay put, nothing new
    /// can be pruned, so `expire` on every commit costs nothing between window boundaries.
    expired_at: Option<(i64, i64)>,
}

impl SkuProcessor {
    pub fn new(rules: Vec<Rule>, window: WindowPolicy) -> Self {
        let baselines: Vec<u32> = rules.iter().filter_map(Rule::window_reach).collect();
        let tracks_stock = rules.iter().any(Rule::reads_stock);
        // A non-positive size would make window arithmetic divide by zero; config forbids it.
        let policy = WindowPolicy { size_ms: window.size_ms.max(1), ..window };
        SkuProcessor {
            rules,
            policy,
            keeps_windows: !baselines.is_empty(),
            tracks_stock,
            baseline_reach: baselines.into_iter().max().unwrap_or(0),
            watermark: Watermark::default(),
            skus: BTreeMap::new(),
            dirty: BTreeSet::new(),
            expired_at: None,
        }
    }

    /// Applies one input and returns the intents it fired, in rule declaration order.
    pub fn apply(&mut self, input: &SkuInput) -> Vec<ActionIntent> {
        match input {
            SkuInput::Line { sku, kind, qty, event_time_ms, append_ms, .. } => {
                self.apply_line(sku, *kind, *qty, *event_time_ms, *append_ms)
            }
            SkuInput::Snapshot { sku, on_hand, as_of_ms, append_ms } => {
                self.apply_snapshot(sku, Stock { on_hand: *on_hand, as_of_ms: *as_of_ms }, *append_ms)
            }
        }
    }

    fn apply_line(&mut self, sku: &str, kind: LineKind, qty: u32, t: i64, append_ms: i64) -> Vec<ActionIntent> {
        if self.is_beyond_retention(t) {
            return Vec::new();
        }
        self.watermark.observe(t);
        let wm = self.watermark();
        let policy = self.policy;
        let reach = self.window_reach_start();
        let clock = self.clock();
        let tracks_stock = self.tracks_stock;
        let state = self.skus.entry(CompactString::from(sku)).or_default();
        let mut changed = false;
        if tracks_stock {
            changed |= state.settle(|at| policy.expired(window_start(at, policy.size_ms), wm));
            let units = match kind {
                LineKind::Placed => Units { placed: u64::from(qty), cancelled: 0 },
                LineKind::Cancelled => Units { placed: 0, cancelled: u64::from(qty) },
            };
            changed |= state.add_line(t, units);
        }
        let mut open = None;
        let start_ms = window_start(t, policy.size_ms);
        if kind == LineKind::Placed && self.keeps_windows && reach.is_none_or(|r| start_ms >= r) {
            state.add_window_units(start_ms, u64::from(qty));
            changed = true;
            if !policy.closed_for_actions(start_ms, wm) {
                open = Some(OpenWindow { start_ms, size_ms: policy.size_ms });
            }
        }
        if !changed {
            if state.is_empty() {
                self.skus.remove(sku);
            }
            return Vec::new();
        }
        self.dirty.insert(CompactString::from(sku));
        evaluate(&self.rules, sku, state, open, Cause { event_ms: t, append_ms, clock })
    }

    fn apply_snapshot(&mut self, sku: &str, stock: Stock, append_ms: i64) -> Vec<ActionIntent> {
        if !self.tracks_stock {
            return Vec::new();
        }
        let current = self.skus.get(sku).and_then(SkuState::stock);
        if current.is_some_and(|cur| stock.as_of_ms <= cur.as_of_ms) {
            return Vec::new();
        }
        let wm = self.watermark();
        let policy = self.policy;
        let clock = self.clock();
        let state = self.skus.entry(CompactString::from(sku)).or_default();
        // Settle first, so which lines the snapshot sees does not depend on when `expire` ran.
        state.settle(|at| policy.expired(window_start(at, policy.size_ms), wm));
        state.set_stock(stock);
        self.dirty.insert(CompactString::from(sku));
        evaluate(&self.rules, sku, state, None, Cause { event_ms: stock.as_of_ms, append_ms, clock })
    }

    /// The window of the latest event time seen: the partition's current window.
    fn clock(&self) -> Option<OpenWindow> {
        let latest = self.watermark.max_event_ms()?;
        Some(OpenWindow { start_ms: window_start(latest, self.policy.size_ms), size_ms: self.policy.size_ms })
    }

    /// Whether a line at this event time is beyond retention under the current watermark:
    /// such a line is ignored by [`apply`](Self::apply) and only counted.
    pub fn is_beyond_retention(&self, event_time_ms: i64) -> bool {
        self.policy.expired(window_start(event_time_ms, self.policy.size_ms), self.watermark())
    }

    /// The earliest window start still worth keeping: the first window open for actions,
    /// minus the longest baseline. `None` before the first line (nothing is closed yet).
    fn window_reach_start(&self) -> Option<i64> {
        let (last_closed, _) = self.prune_marks()?;
        let size = self.policy.size_ms;
        let first_open = last_closed.saturating_add(size);
        Some(first_open.saturating_sub(i64::from(self.baseline_reach).saturating_mul(size)))
    }

    /// Starts of the last window closed for actions and of the last expired window under the
    /// watermark; everything `expire` prunes is a function of these two.
    fn prune_marks(&self) -> Option<(i64, i64)> {
        let wm = self.watermark()?;
        let p = &self.policy;
        let last_closed = window_start(wm.saturating_sub(p.size_ms).saturating_sub(p.grace_ms), p.size_ms);
        let last_expired = window_start(wm.saturating_sub(p.size_ms).saturating_sub(p.retention_ms), p.size_ms);
        Some((last_closed, last_expired))
    }

    /// SKUs changed since the last call, with their state, sorted by SKU, for write-behind
    /// persistence.
    pub fn take_dirty(&mut self) -> Vec<DirtySku> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut out = Vec::with_capacity(dirty.len());
        for sku in dirty {
            if let Some(state) = self.skus.get_mut(&sku) {
                let lines = state.take_line_changes();
                out.push(DirtySku { core: state.core(), lines, sku });
            }
        }
        out
    }

    /// Loads the persisted state of one SKU (without its lines, which follow through
    /// [`SkuProcessor::restore_line`]); call before applying inputs for it.
    pub fn restore(&mut self, sku: impl Into<CompactString>, mut state: SkuState) {
        let sku = sku.into();
        self.expired_at = None;
        if state.adopt_inline_lines() {
            self.dirty.insert(sku.clone());
        } else {
            self.dirty.remove(&sku);
        }
        self.skus.insert(sku, state);
    }

    /// Takes over a SKU's state built elsewhere (a state split off another processor's, see
    /// [`SkuState::window_part`]): it is persisted at the next [`Self::take_dirty`].
    pub fn adopt(&mut self, sku: impl Into<CompactString>, state: SkuState) {
        self.expired_at = None;
        if state.is_empty() {
            return;
        }
        let sku = sku.into();
        self.dirty.insert(sku.clone());
        self.skus.insert(sku, state);
    }

    /// Whether any rule reads the stock (see [`Rule::reads_stock`]).
    pub fn tracks_stock(&self) -> bool {
        self.tracks_stock
    }

    /// Loads one persisted line row of a SKU.
    pub fn restore_line(&mut self, sku: &str, event_time_ms: i64, units: Units) {
        self.expired_at = None;
        if let Some(state) = self.skus.get_mut(sku) {
            state.restore_line(event_time_ms, units);
        } else {
            let mut state = SkuState::default();
            state.restore_line(event_time_ms, units);
            self.skus.insert(CompactString::from(sku), state);
        }
    }

    /// Drops what no later input can observe: lines beyond retention (folded into their
    /// snapshot's sum), windows out of baseline reach, fired marks of closed windows.
    /// Returns the SKUs whose state became empty, with the line rows to delete; they are
    /// forgotten here, and the runtime deletes their rows.
    pub fn expire(&mut self) -> Vec<(CompactString, Vec<i64>)> {
        let (Some(marks), Some(reach)) = (self.prune_marks(), self.window_reach_start()) else {
            return Vec::new();
        };
        if self.expired_at == Some(marks) {
            return Vec::new();
        }
        self.expired_at = Some(marks);
        let wm = self.watermark();
        let policy = self.policy;
        let mut emptied = Vec::new();
        for (sku, state) in &mut self.skus {
            let mut changed = state.settle(|at| policy.expired(window_start(at, policy.size_ms), wm));
            changed |= state.prune_windows(reach, |start| policy.closed_for_actions(start, wm));
            if state.is_empty() {
                emptied.push(sku.clone());
            } else if changed {
                self.dirty.insert(sku.clone());
            }
        }
        let mut out = Vec::with_capacity(emptied.len());
        for sku in emptied {
            self.dirty.remove(&sku);
            let lines = self.skus.remove(&sku).map(|mut s| s.take_line_changes()).unwrap_or_default();
            out.push((sku, lines.into_iter().map(|(t, _)| t).collect()));
        }
        out
    }

    /// What the processor holds in memory: SKU states, their line rows and window counts.
    pub fn held(&self) -> SkuHeld {
        let mut held = SkuHeld { skus: self.skus.len(), ..SkuHeld::default() };
        for state in self.skus.values() {
            held.lines += state.exact_line_count();
            held.windows += state.window_count();
        }
        held
    }

    /// The partition watermark: max event time seen − allowed lateness.
    pub fn watermark(&self) -> Option<i64> {
        self.watermark.value(self.policy.allowed_lateness_ms)
    }

    /// What the runtime checkpoints to restore the watermark: the max event time seen.
    pub fn watermark_state(&self) -> Option<i64> {
        self.watermark.max_event_ms()
    }

    pub fn restore_watermark(&mut self, max_event_ms: Option<i64>) {
        self.expired_at = None;
        self.watermark = Watermark::from_max_event(max_event_ms);
    }

    /// The state of one SKU, if any.
    pub fn state(&self, sku: &str) -> Option<&SkuState> {
        self.skus.get(sku)
    }

    /// Number of SKUs with state.
    pub fn sku_count(&self) -> usize {
        self.skus.len()
    }
}
