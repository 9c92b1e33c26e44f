//! The language: what type-checks, what is refused and where, and what evaluation yields.

use super::*;

fn scope() -> Scope {
    let mut params = BTreeMap::new();
    params.insert("days".to_string(), Param::Int(2));
    params.insert("factor".to_string(), Param::String("1.5".into()));
    Scope { params, preceding_windows: 3 }
}

fn values() -> Values<'static> {
    Values {
        sku: "SKU-1",
        stock: Some(StockValues {
            on_hand: 10,
            as_of_ms: 1_000,
            available: 4,
            units_placed_since: 7,
            units_cancelled_since: 1,
        }),
        window: Some(WindowValues {
            start_ms: 60_000,
            end_ms: 120_000,
            units: 5,
            preceding_windows: 3,
            preceding_units: 10,
            preceding_max: 6,
        }),
    }
}

fn eval_on(source: &str, values: &Values<'_>) -> Result<NamedValue, EvalError> {
    let e = Expr::compile(source, &scope()).unwrap_or_else(|e| panic!("{source}: {e:?}"));
    e.eval(values).map(Value::to_named)
}

fn eval_str(source: &str) -> Result<NamedValue, EvalError> {
    eval_on(source, &values())
}

fn errors(source: &str) -> Vec<(usize, String)> {
    match Expr::compile(source, &scope()) {
        Ok(e) => panic!("{source} compiled to {e:?}"),
        Err(errors) => errors.into_iter().map(|e| (e.offset, e.message)).collect(),
    }
}

#[test]
fn integers_stay_integers_and_mixing_with_a_decimal_gives_an_exact_decimal() {
    assert_eq!(eval_str("available * params.days + 1"), Ok(NamedValue::Int(9)));
    assert_eq!(eval_str("window.units * decimal(params.factor)"), Ok(NamedValue::Decimal("7.5".parse().expect("dec"))));
    assert_eq!(
        eval_str("preceding.mean"),
        Ok(NamedValue::Decimal("3.3333333333333333333333333333".parse().expect("dec")))
    );
    assert_eq!(eval_str("round(preceding.mean, 2)"), Ok(NamedValue::Decimal("3.33".parse().expect("dec"))));
    assert_eq!(eval_str("int(decimal(\"-2.7\"))"), Ok(NamedValue::Int(-2)));
    assert_eq!(eval_str("7 / 2"), Ok(NamedValue::Int(3)), "int division truncates, as in CEL");
    assert_eq!(eval_str("decimal(7) / 2"), Ok(NamedValue::Decimal("3.5".parse().expect("dec"))));
}

#[test]
fn comparisons_cross_int_and_decimal_and_times_compare_with_times() {
    assert_eq!(eval_str("available < decimal(\"4.5\")"), Ok(NamedValue::Bool(true)));
    assert_eq!(eval_str("as_of < window.start && sku == \"SKU-1\""), Ok(NamedValue::Bool(true)));
    assert_eq!(eval_str("max(preceding.max, window.units) >= 6 ? as_of : window.end"), Ok(NamedValue::Time(1_000)));
}

#[test]
fn division_by_zero_and_overflow_are_errors_not_panics() {
    assert_eq!(eval_str("available / (window.units - 5)"), Err(EvalError::DivisionByZero));
    assert_eq!(eval_str("decimal(1) / 0"), Err(EvalError::DivisionByZero));
    assert_eq!(eval_str("9223372036854775807 + available"), Err(EvalError::Overflow));
    assert_eq!(eval_str("-(-9223372036854775807 - 1)"), Err(EvalError::Overflow));
    assert_eq!(eval_str("int(decimal(\"99999999999999999999\"))"), Err(EvalError::Overflow));
}

#[test]
fn and_or_absorb_an_error_the_other_side_decides_and_a_ternary_evaluates_one_branch() {
    assert_eq!(eval_str("window.units > 100 && available / 0 > 1"), Ok(NamedValue::Bool(false)));
    assert_eq!(eval_str("available / 0 > 1 || window.units > 1"), Ok(NamedValue::Bool(true)));
    assert_eq!(eval_str("available / 0 > 1 || window.units > 100"), Err(EvalError::DivisionByZero));
    assert_eq!(eval_str("window.units == 5 ? 1 : 1 / 0"), Ok(NamedValue::Int(1)));
}

#[test]
fn reading_stock_before_a_snapshot_is_a_missing_value() {
    let no_stock = Values { stock: None, ..values() };
    assert_eq!(eval_on("available < 3", &no_stock), Err(EvalError::Missing(Var::Available)));
    assert_eq!(eval_on("window.units > 1 || available < 3", &no_stock), Ok(NamedValue::Bool(true)));
}

#[test]
fn what_an_expression_reads_is_known_when_it_is_compiled() {
    let reads = |s: &str| Expr::compile(s, &scope()).map(|e| e.reads()).expect("compiles");
    assert_eq!(reads("sku == \"x\""), Reads::default());
    assert_eq!(reads("available < 1"), Reads { stock: true, ..Reads::default() });
    assert_eq!(reads("window.units > preceding.max"), Reads { stock: false, window: true, preceding: true });
}

#[test]
fn floats_unknown_names_and_type_errors_are_refused_each_at_its_offset() {
    assert_eq!(
        errors("available < 2.5"),
        [(12, "float literals are not exact: write decimal(\"…\") or an integer".to_string())]
    );
    let found = errors("availble < 1 || foo(window.units) || sku > 3");
    let offsets: Vec<usize> = found.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, [0, 16, 37], "{found:?}");
    assert!(found[0].1.starts_with("unknown value `availble`"), "{found:?}");
    assert!(found[1].1.starts_with("unknown function `foo`"), "{found:?}");
    assert_eq!(found[2].1, "cannot compare a string with an int");
}

#[test]
fn syntax_errors_are_located_by_byte_offset_on_any_line() {
    let found = errors("available <\n  (window.units +");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "available <\n  (window.units +".len());
    assert_eq!(found[0].1, "syntax error: the expression ends too early");
}

#[test]
fn macros_lists_nulls_unsigned_literals_and_methods_are_not_the_language() {
    for (source, message) in [
        ("[1, 2].all(x, x > 0)", "macros"),
        ("[1, 2]", "lists"),
        ("null", "null"),
        ("2u", "unsigned"),
        ("sku.size()", "unknown method"),
        ("preceding", "unknown value"),
        ("params.nope", "unknown parameter `nope`"),
        ("decimal(\"1e5\")", "is not a decimal"),
        ("round(preceding.mean, available)", "integer literal"),
        ("true ? 1 : \"a\"", "differ in type"),
    ] {
        let found = errors(source);
        assert!(found.iter().any(|(_, m)| m.contains(message)), "{source}: {found:?}");
    }
}

#[test]
fn preceding_values_need_preceding_windows() {
    let none = Scope { preceding_windows: 0, ..scope() };
    let found = Expr::compile("preceding.units > 1", &none).expect_err("refused");
    assert!(found[0].message.contains("preceding_windows"), "{found:?}");
}
