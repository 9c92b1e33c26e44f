//! Expression rules in the topology file: what compiles, and every error located.

use super::*;

const RULE: &str = r#"
[[rules]]
kind = "expression"
id = "cover_below_two_days"
version = 1
mode = "shadow"
trigger = "per_snapshot"
action = "replenish"
preceding_windows = 59
params = { days = 2 }
when = "available < params.days * 24 * (window.units + preceding.units)"

[rules.evidence]
available = "available"
last_hour_units = "window.units + preceding.units"
as_of = "as_of"
"#;

/// The example with its three built-in rules and `rule` (at `rules[3]`) as its rules.
fn with(rule: &str) -> String {
    let built_ins = EXAMPLE.split("\n# A rule declared as expressions").next().unwrap_or(EXAMPLE);
    format!("{built_ins}{rule}")
}

fn errors_of(text: &str) -> ConfigErrors {
    parse(text, "t.toml").expect_err("must fail")
}

/// (path, line, column) of every error.
fn located(err: &ConfigErrors) -> Vec<(String, Option<(usize, usize)>)> {
    err.errors.iter().map(|e| (e.path.clone(), e.line_col)).collect()
}

/// Line and column (from 1) of the first `needle` in `text`.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let at = text.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    let line = text[..at].matches('\n').count() + 1;
    let col = text[..at].rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[test]
fn an_expression_rule_compiles_with_its_trigger_action_and_evidence_in_declaration_order() {
    assert_ne!(with(""), EXAMPLE, "the example ships an expression rule");
    assert!(parse(EXAMPLE, "t.toml").expect("valid").rules.iter().any(|r| matches!(r.kind, RuleKind::Expression(_))));
    let t = parse(&with(RULE), "t.toml").expect("valid");
    let rule = t.rules.last().expect("a rule");
    assert_eq!((rule.id.as_str(), rule.version, rule.mode), ("cover_below_two_days", 1, RuleMode::Shadow));
    let RuleKind::Expression(x) = &rule.kind else { panic!("{rule:?}") };
    assert_eq!((x.trigger, x.action, x.preceding_windows), (RuleTrigger::PerSnapshot, RuleAction::Replenish, 59));
    let names: Vec<&str> = x.evidence.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["available", "last_hour_units", "as_of"], "the file's order, not sorted");
    assert!(rule.reads_stock());
    assert_eq!(rule.window_reach(), Some(59));
}

#[test]
fn three_malformed_expressions_give_three_errors_each_at_its_line_and_column() {
    let text = with(
        &RULE
            .replace("available < params.days", "available < 2.5 * params.days")
            .replace("\"window.units + preceding.units\"", "\"window.units + preceding.unit\"")
            .replace("as_of = \"as_of\"", "as_of = \"as_of +\""),
    );
    let err = errors_of(&text);
    let evidence_line = position(&text, "last_hour_units").0;
    assert_eq!(
        located(&err),
        [
            ("rules[3].when".to_string(), Some(position(&text, "2.5 * params"))),
            (
                "rules[3].evidence.last_hour_units".to_string(),
                Some((evidence_line, position(&text, "preceding.unit\"").1))
            ),
            (
                "rules[3].evidence.as_of".to_string(),
                Some((position(&text, "as_of +").0, position(&text, "as_of +").1 + 7))
            ),
        ],
        "{err}"
    );
    let shown = err.to_string();
    assert!(shown.starts_with("t.toml: 3 error(s)"), "{shown}");
    assert!(shown.contains("float literals are not exact"), "{shown}");
    assert!(shown.contains("unknown value `preceding.unit`"), "{shown}");
    assert!(shown.contains("rules[3].evidence.as_of: syntax error: the expression ends too early"), "{shown}");
}

#[test]
fn an_error_in_a_multi_line_expression_is_placed_on_its_own_line() {
    let rule = RULE.replace(
        "when = \"available < params.days * 24 * (window.units + preceding.units)\"",
        "when = '''\navailable < 0\n  && on_hnd > 3'''",
    );
    let text = with(&rule);
    let err = errors_of(&text);
    assert_eq!(located(&err), [("rules[3].when".to_string(), Some(position(&text, "on_hnd")))], "{err}");
}

#[test]
fn a_condition_must_be_a_bool_and_a_built_in_evidence_name_keeps_its_type() {
    let text = with(
        &RULE
            .replace("when = \"available < params.days", "when = \"available + params.days")
            .replace("as_of = \"as_of\"", "as_of = \"available\""),
    );
    let err = errors_of(&text);
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["rules[3].when", "rules[3].evidence.as_of"], "{err}");
    assert!(err.errors[0].message.contains("expected a bool, found an int"), "{err}");
    assert!(err.errors[1].message.contains("expected a time, found an int"), "{err}");
}

#[test]
fn missing_and_unknown_trigger_action_and_condition_are_reported_together() {
    let text = with(
        &RULE
            .replace("trigger = \"per_snapshot\"\n", "")
            .replace("action = \"replenish\"", "action = \"restock\"")
            .replace("when = \"available < params.days * 24 * (window.units + preceding.units)\"\n", ""),
    );
    let err = errors_of(&text);
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["rules[3].trigger", "rules[3].action", "rules[3].when"], "{err}");
    assert!(err.to_string().contains("unknown action `restock` (expected stop_sale | replenish | notify)"), "{err}");
}

#[test]
fn a_float_parameter_and_windows_beyond_retention_are_refused() {
    let text = with(&RULE.replace("params = { days = 2 }", "params = { days = 2.5 }").replace("= 59", "= 500"));
    let err = errors_of(&text);
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["rules[3].preceding_windows", "rules[3].params.days", "rules[3].when"], "{err}");
    assert!(err.to_string().contains("floats are not exact"), "{err}");
}

#[test]
fn expression_keys_on_a_built_in_rule_and_an_unknown_kind_are_refused() {
    let text = EXAMPLE.replacen("id = \"oversell\"", "id = \"oversell\"\nwhen = \"available < 0\"", 1);
    let err = errors_of(&text);
    assert_eq!(located(&err), [("rules[0].when".to_string(), None)], "{err}");
    let text = with(&RULE.replace("kind = \"expression\"", "kind = \"lua\""));
    let err = errors_of(&text);
    assert_eq!(err.errors[0].path, "rules[3].kind", "{err}");
}

#[test]
fn a_mode_without_its_endpoint_is_reported_at_the_rule_that_has_it_even_after_a_rule_that_failed() {
    let text = with(&RULE.replace("mode = \"shadow\"", "mode = \"notify\"")).replacen(
        "id = \"oversell\"",
        "id = \"overcell\"",
        1,
    );
    let err = errors_of(&text);
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["rules[0].id", "rules[3].mode"], "{err}");
}
