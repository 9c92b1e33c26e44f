//! Total evaluation of a compiled expression: every failure is an [`EvalError`] value.

use std::fmt;

use rust_decimal::{Decimal, RoundingStrategy};

use super::check::{Arith, Cmp, Kind, Node, Num};
use super::names::Var;
use super::{Expr, Value, Values};

/// Why an evaluation has no value. A rule whose condition or evidence has none does not
/// fire for that input (see `docs/rules.md`, "When an expression fails").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalError {
    DivisionByZero,
    Overflow,
    /// A value that does not exist for this input: stock before the SKU's first snapshot,
    /// `window.*` before the partition's first order line.
    Missing(Var),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::DivisionByZero => f.write_str("division by zero"),
            EvalError::Overflow => f.write_str("overflow"),
            EvalError::Missing(v) => write!(f, "`{}` does not exist yet", v.name()),
        }
    }
}

type R<T> = Result<T, EvalError>;

impl Expr {
    /// The expression's value on `values`.
    pub fn eval<'a>(&'a self, values: &Values<'a>) -> R<Value<'a>> {
        eval(&self.node, values)
    }
}

fn eval<'a>(n: &'a Node, v: &Values<'a>) -> R<Value<'a>> {
    Ok(match n {
        Node::Int(i) => Value::Int(*i),
        Node::Decimal(d) => Value::Decimal(*d),
        Node::Bool(b) => Value::Bool(*b),
        Node::Str(s) => Value::Str(s),
        Node::Var(var) => var_value(*var, v)?,
        Node::ToDecimal(n) => Value::Decimal(Decimal::from(int(n, v)?)),
        Node::Neg(Num::Int, n) => Value::Int(int(n, v)?.checked_neg().ok_or(EvalError::Overflow)?),
        Node::Neg(Num::Decimal, n) => Value::Decimal(-dec(n, v)?),
        Node::Not(n) => Value::Bool(!boolean(n, v)?),
        Node::Arith(op, Num::Int, l, r) => Value::Int(int_arith(*op, int(l, v)?, int(r, v)?)?),
        Node::Arith(op, Num::Decimal, l, r) => Value::Decimal(dec_arith(*op, dec(l, v)?, dec(r, v)?)?),
        Node::Cmp(op, kind, l, r) => Value::Bool(compare(*op, *kind, l, r, v)?),
        Node::And(l, r) => Value::Bool(and(l, r, v)?),
        Node::Or(l, r) => Value::Bool(or(l, r, v)?),
        Node::Cond(c, a, b) => {
            if boolean(c, v)? {
                eval(a, v)?
            } else {
                eval(b, v)?
            }
        }
        Node::Min(Num::Int, l, r) => Value::Int(int(l, v)?.min(int(r, v)?)),
        Node::Max(Num::Int, l, r) => Value::Int(int(l, v)?.max(int(r, v)?)),
        Node::Min(Num::Decimal, l, r) => Value::Decimal(dec(l, v)?.min(dec(r, v)?)),
        Node::Max(Num::Decimal, l, r) => Value::Decimal(dec(l, v)?.max(dec(r, v)?)),
        Node::Abs(Num::Int, n) => Value::Int(int(n, v)?.checked_abs().ok_or(EvalError::Overflow)?),
        Node::Abs(Num::Decimal, n) => Value::Decimal(dec(n, v)?.abs()),
        Node::Round(n, places) => {
            Value::Decimal(dec(n, v)?.round_dp_with_strategy(*places, RoundingStrategy::MidpointNearestEven))
        }
        Node::Trunc(n) => Value::Int(i64::try_from(dec(n, v)?.trunc()).map_err(|_| EvalError::Overflow)?),
    })
}

fn var_value<'a>(var: Var, v: &Values<'a>) -> R<Value<'a>> {
    let stock = || v.stock.ok_or(EvalError::Missing(var));
    let window = || v.window.ok_or(EvalError::Missing(var));
    Ok(match var {
        Var::Sku => Value::Str(v.sku),
        Var::OnHand => Value::Int(stock()?.on_hand),
        Var::AsOf => Value::Time(stock()?.as_of_ms),
        Var::Available => Value::Int(stock()?.available),
        Var::UnitsPlacedSince => Value::Int(count(stock()?.units_placed_since)),
        Var::UnitsCancelledSince => Value::Int(count(stock()?.units_cancelled_since)),
        Var::WindowUnits => Value::Int(count(window()?.units)),
        Var::WindowStart => Value::Time(window()?.start_ms),
        Var::WindowEnd => Value::Time(window()?.end_ms),
        Var::PrecedingWindows => Value::Int(i64::from(window()?.preceding_windows)),
        Var::PrecedingUnits => Value::Int(count(window()?.preceding_units)),
        Var::PrecedingMax => Value::Int(count(window()?.preceding_max)),
        Var::PrecedingMean => {
            let w = window()?;
            let n = Decimal::from(w.preceding_windows);
            Value::Decimal(Decimal::from(w.preceding_units).checked_div(n).ok_or(EvalError::DivisionByZero)?)
        }
    })
}

/// A unit count as an int: counts beyond i64 (never reached by real stock) stay at its top.
fn count(units: u64) -> i64 {
    i64::try_from(units).unwrap_or(i64::MAX)
}

fn int(n: &Node, v: &Values) -> R<i64> {
    match eval(n, v)? {
        Value::Int(i) => Ok(i),
        // The checker gave this node type int; any other value is unreachable.
        _ => Err(EvalError::Overflow),
    }
}

fn dec(n: &Node, v: &Values) -> R<Decimal> {
    match eval(n, v)? {
        Value::Decimal(d) => Ok(d),
        Value::Int(i) => Ok(Decimal::from(i)),
        _ => Err(EvalError::Overflow),
    }
}

fn boolean(n: &Node, v: &Values) -> R<bool> {
    match eval(n, v)? {
        Value::Bool(b) => Ok(b),
        _ => Err(EvalError::Overflow),
    }
}

fn int_arith(op: Arith, l: i64, r: i64) -> R<i64> {
    if matches!(op, Arith::Div | Arith::Rem) && r == 0 {
        return Err(EvalError::DivisionByZero);
    }
    match op {
        Arith::Add => l.checked_add(r),
        Arith::Sub => l.checked_sub(r),
        Arith::Mul => l.checked_mul(r),
        Arith::Div => l.checked_div(r),
        Arith::Rem => l.checked_rem(r),
    }
    .ok_or(EvalError::Overflow)
}

fn dec_arith(op: Arith, l: Decimal, r: Decimal) -> R<Decimal> {
    if matches!(op, Arith::Div | Arith::Rem) && r.is_zero() {
        return Err(EvalError::DivisionByZero);
    }
    match op {
        Arith::Add => l.checked_add(r),
        Arith::Sub => l.checked_sub(r),
        Arith::Mul => l.checked_mul(r),
        Arith::Div => l.checked_div(r),
        Arith::Rem => l.checked_rem(r),
    }
    .ok_or(EvalError::Overflow)
}

fn compare(op: Cmp, kind: Kind, l: &Node, r: &Node, v: &Values) -> R<bool> {
    let ord = match kind {
        Kind::Num(Num::Int) => int(l, v)?.cmp(&int(r, v)?),
        Kind::Num(Num::Decimal) => dec(l, v)?.cmp(&dec(r, v)?),
        Kind::Bool => boolean(l, v)?.cmp(&boolean(r, v)?),
        Kind::Str | Kind::Time => match (eval(l, v)?, eval(r, v)?) {
            (Value::Str(a), Value::Str(b)) => a.cmp(b),
            (Value::Time(a), Value::Time(b)) => a.cmp(&b),
            _ => return Err(EvalError::Overflow),
        },
    };
    Ok(match op {
        Cmp::Eq => ord.is_eq(),
        Cmp::Ne => ord.is_ne(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
    })
}

/// CEL's `&&`: false if either side is false, even when the other has no value.
fn and(l: &Node, r: &Node, v: &Values) -> R<bool> {
    let left = boolean(l, v);
    if left == Ok(false) {
        return Ok(false);
    }
    let right = boolean(r, v);
    if right == Ok(false) {
        return Ok(false);
    }
    Ok(left? && right?)
}

/// CEL's `||`: true if either side is true, even when the other has no value.
fn or(l: &Node, r: &Node, v: &Values) -> R<bool> {
    let left = boolean(l, v);
    if left == Ok(true) {
        return Ok(true);
    }
    let right = boolean(r, v);
    if right == Ok(true) {
        return Ok(true);
    }
    Ok(left? || right?)
}
