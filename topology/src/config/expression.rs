//! An expression rule (`kind = "expression"`): its trigger, action, parameters, condition
//! and evidence, every expression type-checked here, each error placed at its line and
//! column inside the string that holds it.

use super::checker::Checker;
use super::compile::Window;
use super::locate::Step;
use super::raw::RawRule;
use super::{ExpressionRule, RuleAction, RuleTrigger};
use crate::expr::{Expr, Param, Scope, Type};

/// The longest id: it is the first part of every idempotency key (an HTTP header).
const MAX_ID_BYTES: usize = 64;

/// Evidence names the built-in rules use, with their types: an expression rule may use
/// them for the same meaning only, so a receiver can rely on a name's type.
const BUILT_IN_EVIDENCE: [(&str, Type); 14] = [
    ("on_hand", Type::Int),
    ("as_of", Type::Time),
    ("units_placed_since", Type::Int),
    ("units_cancelled_since", Type::Int),
    ("available", Type::Int),
    ("threshold", Type::Int),
    ("replenish_to", Type::Int),
    ("suggested_quantity", Type::Int),
    ("window_units", Type::Int),
    ("baseline_windows", Type::Int),
    ("baseline_units", Type::Int),
    ("baseline_mean", Type::Decimal),
    ("factor", Type::Decimal),
    ("min_units", Type::Int),
];

pub(super) fn compile(c: &mut Checker, index: usize, raw: &RawRule, window: &Window) -> Option<ExpressionRule> {
    let path = format!("rules[{index}]");
    let errors_before = c.errors.len();
    if raw.id.is_empty() || raw.id.len() > MAX_ID_BYTES || !raw.id.chars().all(id_char) {
        c.error(
            format!("{path}.id"),
            format!("`{}` is not a rule id: 1 to {MAX_ID_BYTES} of a-z, 0-9, _ and -", raw.id),
        );
    }
    let trigger = named(c, &path, "trigger", raw.trigger.as_deref(), &RuleTrigger::ALL.map(|t| (t.as_str(), t)));
    let action = named(c, &path, "action", raw.action.as_deref(), &RuleAction::ALL.map(|a| (a.as_str(), a)));
    let preceding_windows = preceding_windows(c, &path, raw.preceding_windows, window);
    let scope = Scope { params: params(c, &path, raw), preceding_windows };

    let at = |key: &str| vec![Step::Key("rules".into()), Step::Index(index), Step::Key(key.into())];
    let when = match raw.when.as_deref() {
        None => {
            c.error(format!("{path}.when"), "an expression rule needs a condition, e.g. when = \"available < 0\"");
            None
        }
        Some(source) => expression(c, &at("when"), source, &scope, Some(Type::Bool)),
    };
    let mut evidence = Vec::new();
    for (name, source) in raw.evidence.iter().flat_map(|e| e.0.iter()) {
        let steps = [at("evidence"), vec![Step::Key(name.clone())]].concat();
        if !valid_name(name) {
            c.error(
                format!("{path}.evidence.{name}"),
                "an evidence name is 1 to 64 of a-z, 0-9 and _, not first a digit",
            );
            continue;
        }
        let built_in = BUILT_IN_EVIDENCE.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
        if let Some(e) = expression(c, &steps, source, &scope, built_in) {
            evidence.push((name.clone(), e));
        }
    }
    if c.errors.len() != errors_before {
        return None;
    }
    Some(ExpressionRule { trigger: trigger?, action: action?, preceding_windows, when: when?, evidence })
}

/// Compiles one expression, reporting each error at its place; `want` is the type it must have.
fn expression(c: &mut Checker, at: &[Step], source: &str, scope: &Scope, want: Option<Type>) -> Option<Expr> {
    match Expr::compile(source, scope) {
        Ok(e) => match want {
            Some(ty) if e.ty() != ty => {
                let what =
                    if ty == Type::Bool { "a condition must be a bool" } else { "this evidence name has a type" };
                c.error_in_string(at, 0, format!("{what}: expected {}, found {}", ty.a(), e.ty().a()));
                None
            }
            _ => Some(e),
        },
        Err(errors) => {
            for e in errors {
                c.error_in_string(at, e.offset, e.message);
            }
            None
        }
    }
}

/// A key whose value is one of a few names.
fn named<T: Copy>(c: &mut Checker, path: &str, key: &str, value: Option<&str>, names: &[(&str, T)]) -> Option<T> {
    let expected = names.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" | ");
    let Some(value) = value else {
        c.error(format!("{path}.{key}"), format!("an expression rule needs a {key} ({expected})"));
        return None;
    };
    let found = names.iter().find(|(n, _)| *n == value).map(|(_, t)| *t);
    if found.is_none() {
        c.error(format!("{path}.{key}"), format!("unknown {key} `{value}` (expected {expected})"));
    }
    found
}

/// `preceding_windows`: 0 when absent; the windows it covers must still be kept, so they
/// fit in the dashboard window's retention after its grace.
fn preceding_windows(c: &mut Checker, path: &str, raw: Option<i64>, window: &Window) -> u32 {
    let Some(n) = raw else { return 0 };
    let Ok(n) = u32::try_from(n) else {
        c.error(format!("{path}.preceding_windows"), "must be a non-negative integer");
        return 0;
    };
    if let (Some(size), Some(retention), Some(grace)) = (window.size, window.retention, window.grace) {
        let span = i64::from(n).saturating_mul(size);
        if span > retention.saturating_sub(grace) {
            c.error(
                format!("{path}.preceding_windows"),
                format!(
                    "{n} windows of {size} ms reach beyond windows.dashboard.retention less its grace \
                     ({} ms): the oldest would be forgotten",
                    retention.saturating_sub(grace)
                ),
            );
        }
    }
    n
}

/// The rule's `params` as typed constants; a float is refused, being inexact.
fn params(c: &mut Checker, path: &str, raw: &RawRule) -> std::collections::BTreeMap<String, Param> {
    let mut out = std::collections::BTreeMap::new();
    for (key, value) in &raw.params {
        let param = match value {
            toml::Value::Integer(i) => Param::Int(*i),
            toml::Value::Boolean(b) => Param::Bool(*b),
            toml::Value::String(s) => Param::String(s.clone()),
            toml::Value::Float(_) => {
                c.error(
                    format!("{path}.params.{key}"),
                    format!("floats are not exact: write the value as a string and read decimal(params.{key})"),
                );
                continue;
            }
            other => {
                c.error(
                    format!("{path}.params.{key}"),
                    format!("expected an integer, a boolean or a string, found {}", other.type_str()),
                );
                continue;
            }
        };
        out.insert(key.clone(), param);
    }
    out
}

fn id_char(ch: char) -> bool {
    ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_' || ch == '-'
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(|ch: char| ch.is_ascii_digit())
        && name.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
}
