//! Rule evaluation on one SKU's state after an update (emit-on-update).
//!
//! Each rule fires at most once per key: stock rules once per snapshot, window rules once
//! per window. The fired marks live in [`SkuState`], so a restored state never fires a key
//! twice either.

use rust_decimal::Decimal;

use super::expression;
use super::intent::{action_str, key, ActionIntent, Evidence, Trigger};
use super::state::{clamp_i64, RuleRef, SkuState, WindowFired};
use crate::config::{Rule, RuleKind};

/// The input whose application is being evaluated.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cause {
    /// Event time of a line; `as_of` of a snapshot.
    pub event_ms: i64,
    pub append_ms: i64,
    /// The window holding the latest event time the partition has seen: the current window
    /// of a per-snapshot expression rule. `None` before the first order line.
    pub clock: Option<OpenWindow>,
}

/// A window: one that just received placed units and is still open for actions, or the
/// partition's current one ([`Cause::clock`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct OpenWindow {
    pub start_ms: i64,
    pub size_ms: i64,
}

/// Evaluates every rule, in declaration order, against `state` after an update. Stock rules
/// are checked on every update of the SKU; a window rule only for the window the update
/// touched.
pub(super) fn evaluate(
    rules: &[Rule],
    sku: &str,
    state: &mut SkuState,
    window: Option<OpenWindow>,
    cause: Cause,
) -> Vec<ActionIntent> {
    let mut out = Vec::new();
    for rule in rules {
        let fired = match &rule.kind {
            RuleKind::Oversell | RuleKind::LowStock { .. } => stock_rule(rule, state),
            RuleKind::VelocitySpike { min_units, factor, baseline_windows } => window.and_then(|w| {
                velocity(rule, state, w, Velocity { min_units: *min_units, factor: *factor, n: *baseline_windows })
            }),
            RuleKind::Expression(x) => expression::fire(rule, x, sku, state, window, cause.clock),
        };
        if let Some((trigger, evidence)) = fired {
            out.push(ActionIntent {
                key: key(rule, sku, trigger),
                rule_id: rule.id.clone(),
                rule_version: rule.version,
                mode: rule.mode,
                action: action_str(&rule.kind).to_string(),
                sku: sku.to_string(),
                trigger,
                evidence,
                created_at_ms: cause.event_ms,
                source_append_ms: cause.append_ms,
            });
        }
    }
    out
}

pub(super) fn rule_ref(rule: &Rule) -> RuleRef {
    RuleRef { id: rule.id.clone(), version: rule.version }
}

/// `oversell` (available < 0) and `low_stock` (available < threshold), once per snapshot.
fn stock_rule(rule: &Rule, state: &mut SkuState) -> Option<(Trigger, Evidence)> {
    let stock = state.stock()?;
    let available = state.available()?;
    let since = state.units_since();
    let mut evidence = Evidence {
        on_hand: Some(stock.on_hand),
        as_of_ms: Some(stock.as_of_ms),
        units_placed_since: Some(since.placed),
        units_cancelled_since: Some(since.cancelled),
        available: Some(available),
        ..Evidence::default()
    };
    let fires = match rule.kind {
        RuleKind::Oversell => available < 0,
        RuleKind::LowStock { threshold, replenish_to } => {
            evidence.threshold = Some(threshold);
            evidence.replenish_to = Some(replenish_to);
            evidence.suggested_quantity = Some(clamp_i64(i128::from(replenish_to) - i128::from(available)));
            available < threshold
        }
        RuleKind::VelocitySpike { .. } | RuleKind::Expression(_) => false,
    };
    (fires && state.mark_snapshot_fired(rule_ref(rule)))
        .then_some((Trigger::Snapshot { as_of_ms: stock.as_of_ms }, evidence))
}

struct Velocity {
    min_units: u64,
    factor: Decimal,
    n: u32,
}

/// `velocity_spike`: units ≥ max(min_units, factor × mean of the preceding `n` windows, a
/// missing window counting as 0), once per window.
fn velocity(rule: &Rule, state: &mut SkuState, w: OpenWindow, p: Velocity) -> Option<(Trigger, Evidence)> {
    let units = state.window_units(w.start_ms);
    let span = i64::from(p.n).saturating_mul(w.size_ms);
    let baseline = state.units_in(w.start_ms.saturating_sub(span), w.start_ms);
    if units < p.min_units || !meets_factor(units, baseline, p.n, p.factor) {
        return None;
    }
    let fired = WindowFired { start_ms: w.start_ms, rule: rule_ref(rule) };
    if !state.mark_window_fired(fired) {
        return None;
    }
    let mean = Decimal::from(baseline).checked_div(Decimal::from(p.n)).unwrap_or_default().round_dp(2);
    let evidence = Evidence {
        window_units: Some(units),
        baseline_windows: Some(p.n),
        baseline_units: Some(baseline),
        baseline_mean: Some(mean),
        factor: Some(p.factor),
        min_units: Some(p.min_units),
        ..Evidence::default()
    };
    Some((Trigger::Window { start_ms: w.start_ms, end_ms: w.start_ms.saturating_add(w.size_ms) }, evidence))
}

/// `units ≥ factor × baseline / n`, compared as `units × n ≥ factor × baseline` so no
/// rounding of the mean can flip an exact tie.
fn meets_factor(units: u64, baseline: u64, n: u32, factor: Decimal) -> bool {
    let lhs = Decimal::from(units).checked_mul(Decimal::from(n));
    let rhs = factor.checked_mul(Decimal::from(baseline));
    match (lhs, rhs) {
        (Some(l), Some(r)) => l >= r,
        // Only reachable with counts near 10^28; fall back to the (rounded) mean.
        _ => Decimal::from(baseline)
            .checked_div(Decimal::from(n))
            .and_then(|mean| mean.checked_mul(factor))
            .is_none_or(|threshold| Decimal::from(units) >= threshold),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_tie_with_a_repeating_mean_meets_the_factor() {
        // 3 × 20 / 3 = 20 exactly, though 20 / 3 has no finite decimal form.
        assert!(meets_factor(20, 20, 3, Decimal::from(3)));
        assert!(!meets_factor(19, 20, 3, Decimal::from(3)));
    }
}
