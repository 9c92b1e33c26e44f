//! The expression language of `kind = "expression"` rules: CEL syntax, exact types.
//!
//! Expressions are parsed by the `cel` crate (cel-rust), then type-checked and compiled
//! here into a small tree over exact types only: `int` (i64), `decimal`
//! ([`rust_decimal::Decimal`], 28 significant digits), `bool`, `string` and `time` (a UTC
//! instant in milliseconds). CEL's `double`, `uint`, bytes, null, lists, maps and macros are
//! refused when the topology is loaded, each error with its byte offset in the expression,
//! so no float can reach a key or a payload. Why CEL, and the language in full:
//! `docs/rules.md`.
//!
//! Evaluation is total: no loops, no I/O, no clock, and every operation that can fail
//! (division by zero, overflow, a value that does not exist yet) yields an [`EvalError`],
//! never a panic. `&&` and `||` absorb an error when the other side decides the result,
//! as in CEL, and `?:` evaluates only the branch it takes.
//!
//! Module map:
//! - `names`: the values a rule may read ([`Var`]) and their types.
//! - `check`: the CEL syntax tree → a typed [`Expr`], or every error found in it.
//! - `eval`: [`Expr::eval`] over a [`Values`].
//! - `value`: run-time values and the owned values an action's evidence carries.

mod check;
mod eval;
mod names;
#[cfg(test)]
mod tests;
mod value;

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;

pub use eval::EvalError;
pub use names::{Var, VARS};
pub use value::{NamedValue, Value};

/// The type of an expression or value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Int,
    Decimal,
    Bool,
    String,
    Time,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::Int => "int",
            Type::Decimal => "decimal",
            Type::Bool => "bool",
            Type::String => "string",
            Type::Time => "time",
        })
    }
}

impl Type {
    /// The type's name with its article, for messages: "an int", "a decimal".
    pub fn a(self) -> &'static str {
        match self {
            Type::Int => "an int",
            Type::Decimal => "a decimal",
            Type::Bool => "a bool",
            Type::String => "a string",
            Type::Time => "a time",
        }
    }
}

/// A constant a rule declares in its `params` table, readable as `params.<name>`.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Int(i64),
    Bool(bool),
    String(String),
}

/// What an expression may refer to besides the fixed names.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub params: BTreeMap<String, Param>,
    /// How many windows before the current one `preceding.*` covers; 0 forbids reading it.
    pub preceding_windows: u32,
}

/// One problem in an expression, at a byte offset into its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprError {
    pub offset: usize,
    pub message: String,
}

/// Which groups of values an expression reads: what the rule needs before it can run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// The SKU's snapshot: `on_hand`, `as_of`, `available`, `units_*_since`.
    pub stock: bool,
    /// `window.*`.
    pub window: bool,
    /// `preceding.*`.
    pub preceding: bool,
}

impl Reads {
    pub fn union(self, other: Reads) -> Reads {
        Reads {
            stock: self.stock || other.stock,
            window: self.window || other.window,
            preceding: self.preceding || other.preceding,
        }
    }
}

/// A type-checked expression, compiled once when the topology is loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    node: check::Node,
    ty: Type,
    reads: Reads,
}

impl Expr {
    /// Parses and type-checks `source`; every error found, located by byte offset.
    pub fn compile(source: &str, scope: &Scope) -> Result<Expr, Vec<ExprError>> {
        check::compile(source, scope)
    }

    pub fn ty(&self) -> Type {
        self.ty
    }

    pub fn reads(&self) -> Reads {
        self.reads
    }
}

/// The values of one SKU an expression is evaluated on; `None` where they do not exist
/// (no snapshot yet, no window), which makes reading them an [`EvalError::Missing`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Values<'a> {
    pub sku: &'a str,
    pub stock: Option<StockValues>,
    pub window: Option<WindowValues>,
}

/// The SKU's latest snapshot and the lines counted against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StockValues {
    pub on_hand: i64,
    pub as_of_ms: i64,
    pub available: i64,
    pub units_placed_since: u64,
    pub units_cancelled_since: u64,
}

/// The current window and the ones before it (units are placed units).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowValues {
    pub start_ms: i64,
    pub end_ms: i64,
    pub units: u64,
    /// Number of preceding windows covered (the rule's `preceding_windows`).
    pub preceding_windows: u32,
    /// Units over those windows, a missing window counting 0.
    pub preceding_units: u64,
    /// The most units in one of them.
    pub preceding_max: u64,
}

/// A decimal from its text, as `decimal("2.5")` and decimal parameters read it.
pub fn parse_decimal(text: &str) -> Option<Decimal> {
    text.trim().parse::<Decimal>().ok().filter(|_| !text.contains(['e', 'E']))
}
