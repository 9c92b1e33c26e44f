//! Evaluation of an expression rule on one SKU's state after an update.
//!
//! The values are built on the stack from the state (what the rule does not read is left
//! out), the condition is evaluated, and only when it holds is the evidence evaluated and
//! owned. A condition or evidence without a value (division by zero, overflow, stock before
//! the first snapshot) means the rule does not fire for this input: nothing is marked, so a
//! later input may fire it.

use super::intent::{Evidence, Trigger};
use super::rules::{rule_ref, OpenWindow};
use super::state::{SkuState, WindowFired};
use crate::config::{ExpressionRule, Rule, RuleTrigger};
use crate::expr::{StockValues, Value, Values, WindowValues};

/// Fires `x` once per snapshot (any update of a SKU with one, the partition's current
/// window as `window`) or once per window (`touched`: a window that gained placed units
/// while open for actions).
pub(super) fn fire(
    rule: &Rule,
    x: &ExpressionRule,
    sku: &str,
    state: &mut SkuState,
    touched: Option<OpenWindow>,
    clock: Option<OpenWindow>,
) -> Option<(Trigger, Evidence)> {
    let (id, version) = (rule.id.as_str(), rule.version);
    let (trigger, window) = match x.trigger {
        RuleTrigger::PerSnapshot => {
            let as_of_ms = state.stock()?.as_of_ms;
            if state.fired_for_snapshot(id, version) {
                return None;
            }
            (Trigger::Snapshot { as_of_ms }, clock)
        }
        RuleTrigger::PerWindow => {
            let w = touched?;
            if state.fired_for_window(w.start_ms, id, version) {
                return None;
            }
            (Trigger::Window { start_ms: w.start_ms, end_ms: w.start_ms.saturating_add(w.size_ms) }, Some(w))
        }
    };
    let reads = x.reads();
    let values = Values {
        sku,
        stock: stock_values(state),
        window: window.filter(|_| reads.window).map(|w| window_values(state, w, x.preceding_windows, reads.preceding)),
    };
    if x.when.eval(&values) != Ok(Value::Bool(true)) {
        return None;
    }
    let mut named = Vec::with_capacity(x.evidence.len());
    for (name, e) in &x.evidence {
        named.push((name.clone(), e.eval(&values).ok()?.to_named()));
    }
    let first = match trigger {
        Trigger::Snapshot { .. } => state.mark_snapshot_fired(rule_ref(rule)),
        Trigger::Window { start_ms, .. } => state.mark_window_fired(WindowFired { start_ms, rule: rule_ref(rule) }),
    };
    first.then_some((trigger, Evidence { named, ..Evidence::default() }))
}

fn stock_values(state: &SkuState) -> Option<StockValues> {
    let stock = state.stock()?;
    let since = state.units_since();
    Some(StockValues {
        on_hand: stock.on_hand,
        as_of_ms: stock.as_of_ms,
        available: state.available()?,
        units_placed_since: since.placed,
        units_cancelled_since: since.cancelled,
    })
}

fn window_values(state: &SkuState, w: OpenWindow, n: u32, preceding: bool) -> WindowValues {
    let (preceding_units, preceding_max) = if preceding {
        let span = i64::from(n).saturating_mul(w.size_ms);
        state.window_stats(w.start_ms.saturating_sub(span), w.start_ms)
    } else {
        (0, 0)
    };
    WindowValues {
        start_ms: w.start_ms,
        end_ms: w.start_ms.saturating_add(w.size_ms),
        units: state.window_units(w.start_ms),
        preceding_windows: n,
        preceding_units,
        preceding_max,
    }
}
