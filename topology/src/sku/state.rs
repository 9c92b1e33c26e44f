//! Everything the processor remembers about one SKU, and the pure operations on it.
//!
//! The state is persisted with bincode, so it holds only plain structs, ordered maps and
//! sets: no untagged enums, no self-describing values, no hash maps.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The latest warehouse snapshot applied for a SKU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stock {
    pub on_hand: i64,
    pub as_of_ms: i64,
}

/// Units placed and cancelled, summed over some set of order lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Units {
    pub placed: u64,
    pub cancelled: u64,
}

impl Units {
    fn add(&mut self, other: Units) {
        self.placed = self.placed.saturating_add(other.placed);
        self.cancelled = self.cancelled.saturating_add(other.cancelled);
    }

    fn sub(&mut self, other: Units) {
        self.placed = self.placed.saturating_sub(other.placed);
        self.cancelled = self.cancelled.saturating_sub(other.cancelled);
    }

    /// Placed minus cancelled; `i128` holds the difference of any two `u64`.
    fn net(&self) -> i128 {
        i128::from(self.placed) - i128::from(self.cancelled)
    }
}

/// Lines after the snapshot whose event time fell beyond retention, summed. They keep
/// counting against the snapshot; their exact times are no longer needed unless a newer
/// snapshot lands between `first_ms` and `last_ms`, in which case all of them keep counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Folded {
    pub units: Units,
    pub first_ms: i64,
    pub last_ms: i64,
}

/// A rule at one version: fired keys of a rule change with its version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RuleRef {
    pub id: String,
    pub version: u32,
}

/// A window rule that has fired for one window.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WindowFired {
    pub start_ms: i64,
    pub rule: RuleRef,
}

/// All state of one SKU. Equality ignores the transient `touched` set.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct SkuState {
    stock: Option<Stock>,
    /// Lines that count against `stock` (event time after its `as_of`; all lines before the
    /// first snapshot), summed per exact event-time millisecond. Persisted as one row per
    /// millisecond ([`SkuState::take_line_changes`]), not with the rest of the state: a hot
    /// SKU holds thousands, and rewriting them all on every commit made the cost per record
    /// grow with the time since the SKU's last snapshot. (States written before that kept
    /// them inline; they still decode, see [`SkuState::adopt_inline_lines`].)
    #[serde(serialize_with = "persisted_as_rows")]
    lines: BTreeMap<i64, Units>,
    folded: Option<Folded>,
    /// `lines` plus `folded`, kept incrementally so availability is O(1).
    since: Units,
    /// Stock rules that have fired for the current snapshot.
    snapshot_fired: BTreeSet<RuleRef>,
    /// Units placed per event-time window start.
    windows: BTreeMap<i64, u64>,
    window_fired: BTreeSet<WindowFired>,
    /// Milliseconds of `lines` added, changed or removed since the last
    /// [`SkuState::take_line_changes`]; never persisted.
    #[serde(skip)]
    touched: BTreeSet<i64>,
}

impl PartialEq for SkuState {
    fn eq(&self, other: &Self) -> bool {
        self.stock == other.stock
            && self.lines == other.lines
            && self.folded == other.folded
            && self.since == other.since
            && self.snapshot_fired == other.snapshot_fired
            && self.windows == other.windows
            && self.window_fired == other.window_fired
    }
}

impl Eq for SkuState {}

/// Writes `lines` as an empty map: they are persisted row by row.
fn persisted_as_rows<S: serde::Serializer>(_: &BTreeMap<i64, Units>, s: S) -> Result<S::Ok, S::Error> {
    BTreeMap::<i64, Units>::new().serialize(s)
}

impl SkuState {
    /// Everything but the lines, for persisting; the lines go row by row.
    pub fn core(&self) -> SkuState {
        SkuState {
            stock: self.stock,
            lines: BTreeMap::new(),
            folded: self.folded,
            since: self.since,
            snapshot_fired: self.snapshot_fired.clone(),
            windows: self.windows.clone(),
            window_fired: self.window_fired.clone(),
            touched: BTreeSet::new(),
        }
    }

    /// Only what window rules read: the window counts and which window rules fired. The
    /// state a processor of window rules alone starts from when it is split off a processor
    /// that held every rule (a task restored from state written before the split).
    pub fn window_part(&self) -> SkuState {
        SkuState { windows: self.windows.clone(), window_fired: self.window_fired.clone(), ..SkuState::default() }
    }

    /// The line rows to write (`Some`) or delete (`None`) since the last call.
    pub fn take_line_changes(&mut self) -> Vec<(i64, Option<Units>)> {
        std::mem::take(&mut self.touched).into_iter().map(|t| (t, self.lines.get(&t).copied())).collect()
    }

    /// Adds a persisted line row back on restore.
    pub fn restore_line(&mut self, event_time_ms: i64, units: Units) {
        self.lines.insert(event_time_ms, units);
    }

    /// A state decoded from the first format carries its lines inline: mark them all to be
    /// written as rows. Returns whether there were any (the state must then be persisted).
    pub(super) fn adopt_inline_lines(&mut self) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        self.touched.extend(self.lines.keys().copied());
        true
    }

    /// The latest snapshot applied, if any.
    pub fn stock(&self) -> Option<Stock> {
        self.stock
    }

    /// Units placed and cancelled after the snapshot's `as_of`.
    pub fn units_since(&self) -> Units {
        self.since
    }

    /// `on_hand − (placed − cancelled after as_of)`; `None` before the first snapshot.
    pub fn available(&self) -> Option<i64> {
        self.stock.map(|s| clamp_i64(i128::from(s.on_hand) - self.since.net()))
    }

    /// Units placed in the window starting at `start_ms` (0 when not kept).
    pub fn window_units(&self, start_ms: i64) -> u64 {
        self.windows.get(&start_ms).copied().unwrap_or(0)
    }

    /// Sum of units placed in the windows starting in `[from_ms, to_ms)`.
    pub(super) fn units_in(&self, from_ms: i64, to_ms: i64) -> u64 {
        if from_ms >= to_ms {
            return 0;
        }
        self.windows.range(from_ms..to_ms).fold(0u64, |acc, (_, u)| acc.saturating_add(*u))
    }

    /// Sum and largest of units placed in the windows starting in `[from_ms, to_ms)`.
    pub(super) fn window_stats(&self, from_ms: i64, to_ms: i64) -> (u64, u64) {
        if from_ms >= to_ms {
            return (0, 0);
        }
        self.windows
            .range(from_ms..to_ms)
            .fold((0u64, 0u64), |(sum, max), (_, u)| (sum.saturating_add(*u), max.max(*u)))
    }

    /// Nothing worth keeping: the runtime may delete the SKU's row.
    pub fn is_empty(&self) -> bool {
        self.stock.is_none()
            && self.lines.is_empty()
            && self.folded.is_none()
            && self.snapshot_fired.is_empty()
            && self.windows.is_empty()
            && self.window_fired.is_empty()
    }

    /// Moves lines whose event time is beyond retention out of the exact map: into the
    /// folded sum when a snapshot exists, nowhere before the first snapshot. Settling at a
    /// later watermark subsumes settling at an earlier one, so when `expire` runs cannot
    /// change any result. Returns whether anything changed.
    pub(super) fn settle(&mut self, beyond_retention: impl Fn(i64) -> bool) -> bool {
        let mut changed = false;
        while let Some(entry) = self.lines.first_entry() {
            let t = *entry.key();
            if !beyond_retention(t) {
                break;
            }
            let units = entry.remove();
            self.touched.insert(t);
            changed = true;
            if self.stock.is_none() {
                self.since.sub(units);
                continue;
            }
            let folded = self.folded.get_or_insert(Folded { units: Units::default(), first_ms: t, last_ms: t });
            folded.units.add(units);
            folded.first_ms = folded.first_ms.min(t);
            folded.last_ms = folded.last_ms.max(t);
        }
        changed
    }

    /// Counts a line against the current snapshot unless the snapshot already reflects it
    /// (event time ≤ `as_of`). Returns whether it counted.
    pub(super) fn add_line(&mut self, event_time_ms: i64, units: Units) -> bool {
        if self.stock.is_some_and(|s| event_time_ms <= s.as_of_ms) {
            return false;
        }
        self.lines.entry(event_time_ms).or_default().add(units);
        self.touched.insert(event_time_ms);
        self.since.add(units);
        true
    }

    /// Replaces the snapshot unless it is not newer than the current one; drops the lines the
    /// new snapshot reflects and forgets which stock rules fired. Returns whether it applied.
    pub(super) fn set_stock(&mut self, stock: Stock) -> bool {
        if self.stock.is_some_and(|cur| stock.as_of_ms <= cur.as_of_ms) {
            return false;
        }
        self.stock = Some(stock);
        let kept = match stock.as_of_ms.checked_add(1) {
            Some(after) => self.lines.split_off(&after),
            None => BTreeMap::new(),
        };
        self.touched.extend(self.lines.keys().copied());
        self.lines = kept;
        if self.folded.is_some_and(|f| f.last_ms <= stock.as_of_ms) {
            self.folded = None;
        }
        let mut since = self.folded.map(|f| f.units).unwrap_or_default();
        for units in self.lines.values() {
            since.add(*units);
        }
        self.since = since;
        self.snapshot_fired.clear();
        true
    }

    pub(super) fn add_window_units(&mut self, start_ms: i64, units: u64) {
        let w = self.windows.entry(start_ms).or_default();
        *w = w.saturating_add(units);
    }

    /// Drops windows starting before `keep_from_ms` and fired marks of windows that can no
    /// longer fire. Returns whether anything changed.
    pub(super) fn prune_windows(&mut self, keep_from_ms: i64, closed: impl Fn(i64) -> bool) -> bool {
        let (windows, fired) = (self.windows.len(), self.window_fired.len());
        self.windows = self.windows.split_off(&keep_from_ms);
        self.window_fired.retain(|f| !closed(f.start_ms));
        windows != self.windows.len() || fired != self.window_fired.len()
    }

    /// Whether the rule `id` at `version` has fired for the current snapshot (no allocation:
    /// a SKU holds one mark per stock rule at most).
    pub(super) fn fired_for_snapshot(&self, id: &str, version: u32) -> bool {
        self.snapshot_fired.iter().any(|r| r.id == id && r.version == version)
    }

    /// Whether the rule `id` at `version` has fired for the window starting at `start_ms`.
    pub(super) fn fired_for_window(&self, start_ms: i64, id: &str, version: u32) -> bool {
        let from = WindowFired { start_ms, rule: RuleRef { id: String::new(), version: 0 } };
        self.window_fired
            .range(from..)
            .take_while(|f| f.start_ms == start_ms)
            .any(|f| f.rule.id == id && f.rule.version == version)
    }

    /// Records that `rule` fired for the current snapshot; `false` if it already had.
    pub(super) fn mark_snapshot_fired(&mut self, rule: RuleRef) -> bool {
        self.snapshot_fired.insert(rule)
    }

    /// Records that a window rule fired; `false` if it already had.
    pub(super) fn mark_window_fired(&mut self, fired: WindowFired) -> bool {
        self.window_fired.insert(fired)
    }

    /// Line rows held, one per event-time millisecond (the memory gauges count them).
    pub fn exact_line_count(&self) -> usize {
        self.lines.len()
    }

    /// Window counts held for the velocity baseline.
    pub fn window_count(&self) -> usize {
        self.windows.len()
    }
}

pub(super) fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}
