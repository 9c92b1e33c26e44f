//! Expression rules through the processor: keys, payloads, and determinism.

use super::tests::*;
use super::*;
use crate::config::{ExpressionRule, RuleAction, RuleKind, RuleMode, RuleTrigger};
use crate::expr::{Expr, Param, Scope};

/// An expression rule as the topology file would declare it.
struct Declared<'a> {
    id: &'a str,
    mode: RuleMode,
    trigger: RuleTrigger,
    action: RuleAction,
    preceding_windows: u32,
    params: &'a [(&'a str, i64)],
    when: &'a str,
    evidence: &'a [(&'a str, &'a str)],
}

impl Declared<'_> {
    fn rule(&self) -> Rule {
        let scope = Scope {
            params: self.params.iter().map(|(k, v)| (k.to_string(), Param::Int(*v))).collect(),
            preceding_windows: self.preceding_windows,
        };
        let compile = |s: &str| Expr::compile(s, &scope).unwrap_or_else(|e| panic!("{s}: {e:?}"));
        let kind = RuleKind::Expression(ExpressionRule {
            trigger: self.trigger,
            action: self.action,
            preceding_windows: self.preceding_windows,
            when: compile(self.when),
            evidence: self.evidence.iter().map(|(n, s)| (n.to_string(), compile(s))).collect(),
        });
        rule(self.id, 1, self.mode, kind)
    }
}

const STOCK_EVIDENCE: [(&str, &str); 5] = [
    ("on_hand", "on_hand"),
    ("as_of", "as_of"),
    ("units_placed_since", "units_placed_since"),
    ("units_cancelled_since", "units_cancelled_since"),
    ("available", "available"),
];

/// `oversell`, `low_stock` (20, 100) and `velocity_spike` (15, 2, 5) of [`all_rules`],
/// written as expression rules.
fn built_ins_as_expressions() -> Vec<Rule> {
    let low_stock_evidence: Vec<(&str, &str)> = STOCK_EVIDENCE
        .into_iter()
        .chain([
            ("threshold", "params.threshold"),
            ("replenish_to", "params.replenish_to"),
            ("suggested_quantity", "params.replenish_to - available"),
        ])
        .collect();
    vec![
        Declared {
            id: "oversell",
            mode: RuleMode::Act,
            trigger: RuleTrigger::PerSnapshot,
            action: RuleAction::StopSale,
            preceding_windows: 0,
            params: &[],
            when: "available < 0",
            evidence: &STOCK_EVIDENCE,
        }
        .rule(),
        Declared {
            id: "low_stock",
            mode: RuleMode::Act,
            trigger: RuleTrigger::PerSnapshot,
            action: RuleAction::Replenish,
            preceding_windows: 0,
            params: &[("threshold", 20), ("replenish_to", 100)],
            when: "available < params.threshold",
            evidence: &low_stock_evidence,
        }
        .rule(),
        Declared {
            id: "velocity_spike",
            mode: RuleMode::Notify,
            trigger: RuleTrigger::PerWindow,
            action: RuleAction::Notify,
            preceding_windows: 5,
            params: &[("min_units", 15), ("factor", 2)],
            when: "window.units >= params.min_units \
                   && window.units * preceding.windows >= decimal(params.factor) * preceding.units",
            evidence: &[
                ("window_units", "window.units"),
                ("baseline_windows", "preceding.windows"),
                ("baseline_units", "preceding.units"),
                ("baseline_mean", "round(preceding.mean, 2)"),
                ("factor", "decimal(params.factor)"),
                ("min_units", "params.min_units"),
            ],
        }
        .rule(),
    ]
}

/// What a receiver sees of an intent: key, action, mode, payload bytes.
fn seen(intents: &[ActionIntent]) -> Vec<(String, String, RuleMode, String)> {
    intents
        .iter()
        .map(|i| (i.key.clone(), i.action.clone(), i.mode, String::from_utf8(i.payload_json()).unwrap_or_default()))
        .collect()
}

#[test]
fn the_built_in_rules_written_as_expressions_give_byte_identical_keys_and_payloads_over_the_workload() {
    let built_in = run_in_one_go(&workload());
    let expressed = Driver::new(built_ins_as_expressions()).feed(&workload());
    assert_eq!(seen(&expressed), seen(&built_in));
    assert_eq!(fingerprint(&expressed), 0xed1a_e3a5_21f5_02bb, "the pinned fingerprint of the built-ins");
}

/// "Notify when available stock falls below two days of the last hour's sales": exists
/// nowhere in the Rust code.
fn cover_below_two_days() -> Rule {
    Declared {
        id: "cover_below_two_days",
        mode: RuleMode::Notify,
        trigger: RuleTrigger::PerSnapshot,
        action: RuleAction::Notify,
        preceding_windows: 59,
        params: &[("days", 2)],
        when: "available < params.days * 24 * (window.units + preceding.units)",
        evidence: &[
            ("available", "available"),
            ("last_hour_units", "window.units + preceding.units"),
            ("cover_hours", "window.units + preceding.units == 0 ? decimal(0) : round(decimal(available) / (window.units + preceding.units), 2)"),
        ],
    }
    .rule()
}

#[test]
fn a_rule_that_exists_nowhere_in_rust_fires_once_per_snapshot_with_its_evidence() {
    let mut d = Driver::new(vec![cover_below_two_days()]);
    // Fires once 48 × (units in the last hour) exceeds what is available.
    assert!(d.feed(&[snapshot(500, T0), placed(1, T0 + MIN)]).is_empty(), "1 unit: 48 < 499");
    assert!(d.feed(&[placed(5, T0 + 2 * MIN)]).is_empty(), "6 units: 288 < 494");
    let out = d.feed(&[placed(5, T0 + 3 * MIN)]);
    assert_eq!(keys(&out), ["cover_below_two_days:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
    let payload = String::from_utf8(out[0].payload_json()).expect("utf8");
    assert_eq!(
        payload,
        concat!(
            r#"{"action_id":"cover_below_two_days:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z","action":"notify","#,
            r#""rule":{"id":"cover_below_two_days","version":1},"sku":"SKU-1","#,
            r#""trigger":{"type":"snapshot","as_of":"2026-11-28T00:00:00.000Z"},"#,
            r#""evidence":{"available":489,"last_hour_units":11,"cover_hours":"44.45"},"#,
            r#""created_at":"2026-11-28T00:03:00.000Z"}"#
        )
    );
    assert!(d.feed(&[placed(50, T0 + 4 * MIN)]).is_empty(), "once per snapshot");
    // Two hours on (another SKU moves the partition's clock), the early units no longer
    // count: a new snapshot of 500 is not short.
    assert!(d.feed(&[line("SKU-2", LineKind::Placed, 1, T0 + 2 * HOUR), snapshot(500, T0 + 2 * HOUR)]).is_empty());
    assert!(d.feed(&[placed(10, T0 + 2 * HOUR + MIN)]).is_empty(), "48 × 10 = 480 < 490");
    assert_eq!(d.feed(&[placed(1, T0 + 2 * HOUR + 2 * MIN)]).len(), 1, "48 × 11 = 528 ≥ 489");
}

#[test]
fn a_per_window_rule_that_reads_no_stock_fires_before_any_snapshot_once_per_window() {
    let rule = Declared {
        id: "burst",
        mode: RuleMode::Shadow,
        trigger: RuleTrigger::PerWindow,
        action: RuleAction::Notify,
        preceding_windows: 3,
        params: &[],
        when: "window.units > 2 * preceding.max",
        evidence: &[("window_units", "window.units"), ("peak", "preceding.max"), ("mean", "preceding.mean")],
    }
    .rule();
    assert!(!rule.reads_stock());
    let mut d = Driver::new(vec![rule]);
    assert!(d.feed(&[placed(4, T0), placed(2, T0 + MIN)]).len() == 1, "the first window beats an empty past");
    let out = d.feed(&[placed(9, T0 + 2 * MIN)]);
    assert_eq!(keys(&out), ["burst:v1:SKU-1:window:2026-11-28T00:02:00.000Z"]);
    assert_eq!(out[0].trigger, Trigger::Window { start_ms: T0 + 2 * MIN, end_ms: T0 + 3 * MIN });
    let payload = String::from_utf8(out[0].payload_json()).expect("utf8");
    assert!(payload.contains(r#""evidence":{"window_units":9,"peak":4,"mean":"2"}"#), "{payload}");
    assert!(d.feed(&[placed(9, T0 + 2 * MIN + SEC)]).is_empty(), "once per window");
}

#[test]
fn a_condition_that_divides_by_zero_does_not_fire_until_it_has_a_value() {
    let rule = Declared {
        id: "mostly_cancelled",
        mode: RuleMode::Shadow,
        trigger: RuleTrigger::PerSnapshot,
        action: RuleAction::StopSale,
        preceding_windows: 0,
        params: &[],
        when: "units_cancelled_since * 100 / units_placed_since >= 50",
        evidence: &[("units_placed_since", "units_placed_since")],
    }
    .rule();
    let mut d = Driver::new(vec![rule]);
    assert!(d.feed(&[snapshot(10, T0), cancelled(3, T0 + SEC)]).is_empty(), "nothing placed: no value");
    let out = d.feed(&[placed(6, T0 + 2 * SEC)]);
    assert_eq!(keys(&out), ["mostly_cancelled:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
}

fn expression_rules() -> Vec<Rule> {
    let mut rules = built_ins_as_expressions();
    rules.push(cover_below_two_days());
    rules
}

#[test]
fn expression_rules_give_the_same_outputs_after_save_and_restore_and_whenever_expire_runs() {
    let inputs = workload();
    let expected = Driver::new(expression_rules()).feed(&inputs);
    assert!(expected.iter().any(|i| i.rule_id == "cover_below_two_days"), "the workload fires the new rule");
    for split in [1, 57, 250, 301, 302, 450, inputs.len() - 1] {
        let mut first = Driver::new(expression_rules());
        let mut out = first.feed(&inputs[..split]);
        let mut second = Driver::new(expression_rules());
        transplant(&mut first.p, &mut second.p);
        second.p.restore_watermark(first.p.watermark_state());
        out.extend(second.feed(&inputs[split..]));
        assert_eq!(out, expected, "split at {split}");
    }
    for every in [1, 7, 50] {
        let mut d = Driver::new(expression_rules());
        let mut out = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            out.extend(d.p.apply(input));
            if i % every == 0 {
                d.p.expire();
            }
        }
        assert_eq!(out, expected, "expire every {every} inputs");
    }
}
