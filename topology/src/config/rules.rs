//! The `[[rules]]` section: each rule's id, version, mode and parameters (a built-in rule)
//! or expressions (`kind = "expression"`, compiled in [`super::expression`]), and the
//! endpoint each mode needs.

use std::collections::BTreeMap;

use super::checker::Checker;
use super::compile::Window;
use super::expression;
use super::raw::{RawEndpoints, RawRule};
use super::{Rule, RuleKind, RuleMode};

/// Every rule, in declaration order; ids must be unique and a mode that calls an endpoint
/// needs its URL.
pub(super) fn rules(c: &mut Checker, raw: Vec<RawRule>, endpoints: &RawEndpoints, window: &Window) -> Vec<Rule> {
    let mut rules = Vec::new();
    let mut rule_ids = BTreeMap::new();
    for (i, raw_rule) in raw.into_iter().enumerate() {
        if let Some(first) = rule_ids.insert(raw_rule.id.clone(), i) {
            c.error(format!("rules[{i}].id"), format!("rule `{}` is already declared at rules[{first}]", raw_rule.id));
        }
        if let Some(rule) = rule(c, i, raw_rule, window) {
            rules.push((i, rule));
        }
    }
    for (i, rule) in &rules {
        let missing = match rule.mode {
            RuleMode::Act => endpoints.action_url.is_none().then_some("endpoints.action_url"),
            RuleMode::Notify => endpoints.notify_url.is_none().then_some("endpoints.notify_url"),
            RuleMode::Shadow => None,
        };
        if let Some(key) = missing {
            c.error(format!("rules[{i}].mode"), format!("mode needs {key} to be set"));
        }
    }
    rules.into_iter().map(|(_, rule)| rule).collect()
}

fn int_param(c: &mut Checker, path: &str, params: &BTreeMap<String, toml::Value>, key: &str, default: i64) -> i64 {
    match params.get(key) {
        None => default,
        Some(toml::Value::Integer(i)) if *i >= 0 => *i,
        Some(v) => {
            c.error(format!("{path}.params.{key}"), format!("expected a non-negative integer, found {v}"));
            default
        }
    }
}

fn rule(c: &mut Checker, index: usize, raw: RawRule, window: &Window) -> Option<Rule> {
    let path = format!("rules[{index}]");
    let mode = match raw.mode.parse::<RuleMode>() {
        Ok(mode) => Some(mode),
        Err(e) => {
            c.error(format!("{path}.mode"), e.to_string());
            None
        }
    };
    let version = match u32::try_from(raw.version) {
        Ok(v) if v >= 1 => Some(v),
        _ => {
            c.error(format!("{path}.version"), "must be a positive integer");
            None
        }
    };
    let kind = match raw.kind.as_deref() {
        None => builtin(c, &path, &raw),
        Some("expression") => expression::compile(c, index, &raw, window).map(RuleKind::Expression),
        Some(other) => {
            c.error(
                format!("{path}.kind"),
                format!("unknown kind `{other}` (expected expression, or no kind for a built-in rule)"),
            );
            None
        }
    };
    Some(Rule { id: raw.id, version: version?, mode: mode?, kind: kind? })
}

/// `oversell`, `low_stock` or `velocity_spike`, with their parameters.
fn builtin(c: &mut Checker, path: &str, raw: &RawRule) -> Option<RuleKind> {
    let expression_keys = [
        ("trigger", raw.trigger.is_some()),
        ("action", raw.action.is_some()),
        ("when", raw.when.is_some()),
        ("preceding_windows", raw.preceding_windows.is_some()),
        ("evidence", raw.evidence.is_some()),
    ];
    for (key, _) in expression_keys.iter().filter(|(_, present)| *present) {
        c.error(format!("{path}.{key}"), "only a rule with kind = \"expression\" has this key");
    }
    let p = &raw.params;
    let (kind, allowed): (Option<RuleKind>, &[&str]) = match raw.id.as_str() {
        "oversell" => (Some(RuleKind::Oversell), &[]),
        "low_stock" => (
            Some(RuleKind::LowStock {
                threshold: int_param(c, path, p, "threshold", 10),
                replenish_to: int_param(c, path, p, "replenish_to", 100),
            }),
            &["threshold", "replenish_to"],
        ),
        "velocity_spike" => {
            let factor = match p.get("factor") {
                None => Some(rust_decimal::Decimal::from(3)),
                Some(toml::Value::String(s)) => s.parse().ok(),
                Some(toml::Value::Integer(i)) => Some(rust_decimal::Decimal::from(*i)),
                Some(_) => None,
            };
            let factor = factor.filter(|f| f.is_sign_positive()).unwrap_or_else(|| {
                c.error(format!("{path}.params.factor"), "expected a positive decimal, e.g. \"3.0\"");
                rust_decimal::Decimal::ONE
            });
            let baseline = int_param(c, path, p, "baseline_windows", 15);
            if baseline == 0 {
                c.error(format!("{path}.params.baseline_windows"), "must be at least 1");
            }
            (
                Some(RuleKind::VelocitySpike {
                    min_units: int_param(c, path, p, "min_units", 50).unsigned_abs(),
                    factor,
                    baseline_windows: u32::try_from(baseline).unwrap_or(15),
                }),
                &["min_units", "factor", "baseline_windows"],
            )
        }
        other => {
            c.error(
                format!("{path}.id"),
                format!(
                    "unknown rule `{other}` (expected oversell | low_stock | velocity_spike, or kind = \"expression\")"
                ),
            );
            (None, &[])
        }
    };
    for key in p.keys().filter(|k| !allowed.contains(&k.as_str())) {
        c.error(format!("{path}.params.{key}"), format!("unknown parameter for rule `{}`", raw.id));
    }
    kind
}
