//! Type-checks a CEL syntax tree and compiles it into [`Node`]s over exact types.
//!
//! Every error is collected (a node that failed checks as [`Checked::Bad`], which raises no
//! further error), so one expression with three mistakes reports three.

use cel::common::ast::{CallExpr, Expr as Cel, IdedExpr, LiteralValue, SourceInfo};
use rust_decimal::Decimal;

use super::names::{self, Group, Var};
use super::{parse_decimal, Expr, ExprError, Param, Reads, Scope, Type};

/// Deepest nesting accepted: deeper trees are refused rather than risk the stack.
const MAX_DEPTH: u16 = 64;

/// A compiled expression node. Arithmetic and comparison carry the operand kind they were
/// checked for, so evaluation never inspects types.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
    Int(i64),
    Decimal(Decimal),
    Bool(bool),
    Str(String),
    Var(Var),
    /// An int operand used where a decimal is expected.
    ToDecimal(Box<Node>),
    Neg(Num, Box<Node>),
    Not(Box<Node>),
    Arith(Arith, Num, Box<Node>, Box<Node>),
    Cmp(Cmp, Kind, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Min(Num, Box<Node>, Box<Node>),
    Max(Num, Box<Node>, Box<Node>),
    Abs(Num, Box<Node>),
    /// `round(decimal, places)`: half to even, as the built-in `baseline_mean` is rounded.
    Round(Box<Node>, u32),
    /// `int(decimal)`: towards zero.
    Trunc(Box<Node>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Num {
    Int,
    Decimal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Num(Num),
    Bool,
    Str,
    Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

enum Checked {
    Ok(Node, Type),
    /// Already reported.
    Bad,
}

pub(super) fn compile(source: &str, scope: &Scope) -> Result<Expr, Vec<ExprError>> {
    if source.trim().is_empty() {
        return Err(vec![ExprError { offset: 0, message: "empty expression".into() }]);
    }
    let parsed = cel::parser::Parser::new().max_recursion_depth(MAX_DEPTH).parse_with_source_info(source);
    let (ast, info) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            return Err(e
                .errors
                .into_iter()
                .map(|e| ExprError { offset: offset_of(source, e.pos), message: syntax_message(&e.msg) })
                .collect())
        }
    };
    let mut c = Checker { source, scope, info: &info, errors: Vec::new(), reads: Reads::default() };
    let checked = c.check(&ast);
    match checked {
        Checked::Ok(node, ty) if c.errors.is_empty() => Ok(Expr { node, ty, reads: c.reads }),
        _ => Err(c.errors),
    }
}

/// The parser's message without its list of grammar tokens.
fn syntax_message(message: &str) -> String {
    let short = message.split(" expecting ").next().unwrap_or(message);
    let short = short.strip_prefix("Syntax error: ").unwrap_or(short);
    if short.contains("'<EOF>'") {
        "syntax error: the expression ends too early".to_string()
    } else {
        format!("syntax error: {short}")
    }
}

/// The byte offset of a (line, column) position, both from 1, columns in characters.
fn offset_of(source: &str, (line, col): (isize, isize)) -> usize {
    let mut offset = 0;
    for (i, text) in source.split_inclusive('\n').enumerate() {
        if isize::try_from(i + 1).unwrap_or(isize::MAX) == line {
            let col = usize::try_from(col.max(1) - 1).unwrap_or(0);
            return offset + text.char_indices().nth(col).map_or(text.len(), |(b, _)| b);
        }
        offset += text.len();
    }
    source.len().min(offset)
}

struct Checker<'a> {
    source: &'a str,
    scope: &'a Scope,
    info: &'a SourceInfo,
    errors: Vec<ExprError>,
    reads: Reads,
}

impl Checker<'_> {
    fn error(&mut self, e: &IdedExpr, message: impl Into<String>) -> Checked {
        let start = start_of(e);
        let mut offset = self.info.offset_for(start.id).map_or(0, |(s, _)| s as usize);
        // A function call is placed at its `(`: point at its name instead.
        if let Cel::Call(c) = &start.expr {
            let name =
                offset.checked_sub(c.func_name.len()).filter(|b| self.source.get(*b..offset) == Some(&c.func_name));
            offset = name.unwrap_or(offset);
        }
        self.errors.push(ExprError { offset, message: message.into() });
        Checked::Bad
    }

    fn check(&mut self, e: &IdedExpr) -> Checked {
        match &e.expr {
            Cel::Literal(lit) => self.literal(e, lit),
            Cel::Ident(name) => self.name(e, name),
            Cel::Select(_) => match dotted(e) {
                Some(name) => self.name(e, &name),
                None => self.error(e, "only names like `window.units` may be selected"),
            },
            Cel::Call(call) => self.call(e, call),
            Cel::Comprehension(_) => self.error(e, "macros (all, exists, map, filter, has) are not supported"),
            Cel::List(_) | Cel::Map(_) | Cel::Struct(_) => self.error(e, "lists, maps and messages are not supported"),
            Cel::Unspecified => self.error(e, "not an expression"),
        }
    }

    fn literal(&mut self, e: &IdedExpr, lit: &LiteralValue) -> Checked {
        match lit {
            LiteralValue::Int(i) => Checked::Ok(Node::Int(*i.inner()), Type::Int),
            LiteralValue::Boolean(b) => Checked::Ok(Node::Bool(*b.inner()), Type::Bool),
            LiteralValue::String(s) => Checked::Ok(Node::Str(s.inner().to_string()), Type::String),
            LiteralValue::Double(_) => {
                self.error(e, "float literals are not exact: write decimal(\"…\") or an integer")
            }
            LiteralValue::UInt(_) => self.error(e, "unsigned literals are not supported: drop the `u`"),
            LiteralValue::Bytes(_) => self.error(e, "bytes are not supported"),
            LiteralValue::Null => self.error(e, "null is not supported: every value has a type"),
        }
    }

    fn name(&mut self, e: &IdedExpr, name: &str) -> Checked {
        if let Some(param) = name.strip_prefix("params.") {
            return match self.scope.params.get(param) {
                Some(Param::Int(i)) => Checked::Ok(Node::Int(*i), Type::Int),
                Some(Param::Bool(b)) => Checked::Ok(Node::Bool(*b), Type::Bool),
                Some(Param::String(s)) => Checked::Ok(Node::Str(s.clone()), Type::String),
                None => {
                    let known: Vec<&str> = self.scope.params.keys().map(String::as_str).collect();
                    self.error(e, format!("unknown parameter `{param}` (this rule's params: {})", known.join(", ")))
                }
            };
        }
        let Some((var, ty)) = names::lookup(name) else {
            return self
                .error(e, format!("unknown value `{name}` (expected one of: {}, params.<name>)", names::list()));
        };
        match var.group() {
            Group::Always => {}
            Group::Stock => self.reads.stock = true,
            Group::Window => self.reads.window = true,
            Group::Preceding => {
                if self.scope.preceding_windows == 0 {
                    return self.error(e, format!("`{name}` needs the rule's preceding_windows to be at least 1"));
                }
                self.reads.window = true;
                self.reads.preceding = true;
            }
        }
        Checked::Ok(Node::Var(var), ty)
    }

    fn call(&mut self, e: &IdedExpr, call: &CallExpr) -> Checked {
        if call.target.is_some() {
            return self.error(e, format!("unknown method `{}`: call functions as f(x)", call.func_name));
        }
        let f = call.func_name.as_str();
        let args = &call.args;
        match (f, args.len()) {
            ("_&&_", 2) | ("_||_", 2) => {
                let (l, r) = (self.want(&args[0], Type::Bool), self.want(&args[1], Type::Bool));
                let (Some(l), Some(r)) = (l, r) else { return Checked::Bad };
                let node = if f == "_&&_" { Node::And(l.into(), r.into()) } else { Node::Or(l.into(), r.into()) };
                Checked::Ok(node, Type::Bool)
            }
            ("!_", 1) => match self.want(&args[0], Type::Bool) {
                Some(n) => Checked::Ok(Node::Not(n.into()), Type::Bool),
                None => Checked::Bad,
            },
            ("-_", 1) => match self.check(&args[0]) {
                Checked::Ok(n, Type::Int) => Checked::Ok(Node::Neg(Num::Int, n.into()), Type::Int),
                Checked::Ok(n, Type::Decimal) => Checked::Ok(Node::Neg(Num::Decimal, n.into()), Type::Decimal),
                Checked::Ok(_, t) => self.error(&args[0], format!("cannot negate {}", t.a())),
                Checked::Bad => Checked::Bad,
            },
            ("_?_:_", 3) => {
                let cond = self.want(&args[0], Type::Bool);
                let (a, b) = (self.check(&args[1]), self.check(&args[2]));
                let (Some(cond), Checked::Ok(a, ta), Checked::Ok(b, tb)) = (cond, a, b) else { return Checked::Bad };
                match unify(ta, tb) {
                    Some((ty, wa, wb)) => {
                        Checked::Ok(Node::Cond(cond.into(), widen(a, wa).into(), widen(b, wb).into()), ty)
                    }
                    None => self.error(e, format!("the branches of ?: differ in type ({} and {})", ta.a(), tb.a())),
                }
            }
            ("_+_", 2) => self.arith(e, Arith::Add, args),
            ("_-_", 2) => self.arith(e, Arith::Sub, args),
            ("_*_", 2) => self.arith(e, Arith::Mul, args),
            ("_/_", 2) => self.arith(e, Arith::Div, args),
            ("_%_", 2) => self.arith(e, Arith::Rem, args),
            ("_==_", 2) => self.compare(e, Cmp::Eq, args),
            ("_!=_", 2) => self.compare(e, Cmp::Ne, args),
            ("_<_", 2) => self.compare(e, Cmp::Lt, args),
            ("_<=_", 2) => self.compare(e, Cmp::Le, args),
            ("_>_", 2) => self.compare(e, Cmp::Gt, args),
            ("_>=_", 2) => self.compare(e, Cmp::Ge, args),
            ("min", 2) | ("max", 2) => {
                let Some((num, l, r)) = self.numbers(e, f, args) else { return Checked::Bad };
                let node =
                    if f == "min" { Node::Min(num, l.into(), r.into()) } else { Node::Max(num, l.into(), r.into()) };
                Checked::Ok(node, num_type(num))
            }
            ("abs", 1) => match self.check(&args[0]) {
                Checked::Ok(n, Type::Int) => Checked::Ok(Node::Abs(Num::Int, n.into()), Type::Int),
                Checked::Ok(n, Type::Decimal) => Checked::Ok(Node::Abs(Num::Decimal, n.into()), Type::Decimal),
                Checked::Ok(_, t) => self.error(&args[0], format!("abs() takes an int or a decimal, not {}", t.a())),
                Checked::Bad => Checked::Bad,
            },
            ("decimal", 1) => self.decimal(&args[0]),
            ("int", 1) => match self.check(&args[0]) {
                Checked::Ok(n, Type::Int) => Checked::Ok(n, Type::Int),
                Checked::Ok(n, Type::Decimal) => Checked::Ok(Node::Trunc(n.into()), Type::Int),
                Checked::Ok(_, t) => self.error(&args[0], format!("int() takes a decimal, not {}", t.a())),
                Checked::Bad => Checked::Bad,
            },
            ("round", 2) => {
                let value = self.check(&args[0]);
                let places = match &args[1].expr {
                    Cel::Literal(LiteralValue::Int(i)) if (0..=28).contains(i.inner()) => {
                        u32::try_from(*i.inner()).ok()
                    }
                    _ => None,
                };
                let Some(places) = places else {
                    return self.error(&args[1], "round()'s places must be an integer literal from 0 to 28");
                };
                match value {
                    Checked::Ok(n, Type::Decimal) => Checked::Ok(Node::Round(n.into(), places), Type::Decimal),
                    Checked::Ok(n, Type::Int) => Checked::Ok(n, Type::Int),
                    Checked::Ok(_, t) => self.error(&args[0], format!("round() takes a decimal, not {}", t.a())),
                    Checked::Bad => Checked::Bad,
                }
            }
            ("_[_]", 2) => self.error(e, "indexing is not supported"),
            (name, n) if FUNCTIONS.iter().any(|(f, _)| *f == name) => {
                let arity = FUNCTIONS.iter().find(|(f, _)| *f == name).map_or(0, |(_, a)| *a);
                self.error(e, format!("{name}() takes {arity} argument(s), not {n}"))
            }
            (name, _) if name.starts_with('_') || name.starts_with('@') || name.ends_with('_') => {
                self.error(e, format!("operator `{}` is not supported", name.trim_matches(['_', '@'])))
            }
            (name, _) => self.error(
                e,
                format!(
                    "unknown function `{name}` (expected one of: {})",
                    FUNCTIONS.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
                ),
            ),
        }
    }

    /// Checks `e` and requires `ty`; `None` when it failed (reported).
    fn want(&mut self, e: &IdedExpr, ty: Type) -> Option<Node> {
        match self.check(e) {
            Checked::Ok(n, t) if t == ty => Some(n),
            Checked::Ok(_, t) => {
                self.error(e, format!("expected {}, found {}", ty.a(), t.a()));
                None
            }
            Checked::Bad => None,
        }
    }

    /// Two numeric operands, widened to a common kind.
    fn numbers(&mut self, e: &IdedExpr, what: &str, args: &[IdedExpr]) -> Option<(Num, Node, Node)> {
        let (l, r) = (self.check(&args[0]), self.check(&args[1]));
        let (Checked::Ok(l, tl), Checked::Ok(r, tr)) = (l, r) else { return None };
        match unify(tl, tr) {
            Some((Type::Int, _, _)) => Some((Num::Int, l, r)),
            Some((Type::Decimal, wl, wr)) => Some((Num::Decimal, widen(l, wl), widen(r, wr))),
            _ => {
                self.error(e, format!("{} needs two numbers, found {} and {}", what.trim_matches('_'), tl.a(), tr.a()));
                None
            }
        }
    }

    fn arith(&mut self, e: &IdedExpr, op: Arith, args: &[IdedExpr]) -> Checked {
        let what = format!("`{}`", e_op(op));
        match self.numbers(e, &what, args) {
            Some((num, l, r)) => Checked::Ok(Node::Arith(op, num, l.into(), r.into()), num_type(num)),
            None => Checked::Bad,
        }
    }

    fn compare(&mut self, e: &IdedExpr, op: Cmp, args: &[IdedExpr]) -> Checked {
        let (l, r) = (self.check(&args[0]), self.check(&args[1]));
        let (Checked::Ok(l, tl), Checked::Ok(r, tr)) = (l, r) else { return Checked::Bad };
        let ordered = !matches!(op, Cmp::Eq | Cmp::Ne);
        let kind = match unify(tl, tr) {
            Some((Type::Int, _, _)) => Some((Kind::Num(Num::Int), l, r)),
            Some((Type::Decimal, wl, wr)) => Some((Kind::Num(Num::Decimal), widen(l, wl), widen(r, wr))),
            Some((Type::Time, _, _)) => Some((Kind::Time, l, r)),
            Some((Type::Bool, _, _)) if !ordered => Some((Kind::Bool, l, r)),
            Some((Type::String, _, _)) if !ordered => Some((Kind::Str, l, r)),
            _ => None,
        };
        match kind {
            Some((kind, l, r)) => Checked::Ok(Node::Cmp(op, kind, l.into(), r.into()), Type::Bool),
            None if tl == tr => self.error(e, format!("{} cannot be compared with <, <=, > or >=", tl.a())),
            None => self.error(e, format!("cannot compare {} with {}", tl.a(), tr.a())),
        }
    }

    /// `decimal(int)`, or `decimal("2.5")` read now, when the topology is loaded.
    fn decimal(&mut self, arg: &IdedExpr) -> Checked {
        if let Cel::Literal(LiteralValue::String(s)) = &arg.expr {
            return match parse_decimal(s.inner()) {
                Some(d) => Checked::Ok(Node::Decimal(d), Type::Decimal),
                None => self.error(arg, format!("`{}` is not a decimal (write e.g. \"2.5\")", s.inner())),
            };
        }
        match self.check(arg) {
            Checked::Ok(n, Type::Int) => Checked::Ok(Node::ToDecimal(n.into()), Type::Decimal),
            Checked::Ok(n, Type::Decimal) => Checked::Ok(n, Type::Decimal),
            Checked::Ok(Node::Str(s), Type::String) => match parse_decimal(&s) {
                Some(d) => Checked::Ok(Node::Decimal(d), Type::Decimal),
                None => self.error(arg, format!("`{s}` is not a decimal (write e.g. \"2.5\")")),
            },
            Checked::Ok(_, t) => {
                self.error(arg, format!("decimal() takes an int or a decimal string literal, not {}", t.a()))
            }
            Checked::Bad => Checked::Bad,
        }
    }
}

/// Functions by name, with their number of arguments.
const FUNCTIONS: [(&str, usize); 6] = [("min", 2), ("max", 2), ("abs", 1), ("decimal", 1), ("int", 1), ("round", 2)];

fn e_op(op: Arith) -> &'static str {
    match op {
        Arith::Add => "+",
        Arith::Sub => "-",
        Arith::Mul => "*",
        Arith::Div => "/",
        Arith::Rem => "%",
    }
}

fn num_type(num: Num) -> Type {
    match num {
        Num::Int => Type::Int,
        Num::Decimal => Type::Decimal,
    }
}

/// The common type of two operands, and whether each must be widened from int to decimal.
fn unify(a: Type, b: Type) -> Option<(Type, bool, bool)> {
    match (a, b) {
        (Type::Int, Type::Decimal) => Some((Type::Decimal, true, false)),
        (Type::Decimal, Type::Int) => Some((Type::Decimal, false, true)),
        (a, b) if a == b => Some((a, false, false)),
        _ => None,
    }
}

fn widen(n: Node, widen: bool) -> Node {
    match (widen, n) {
        (true, Node::Int(i)) => Node::Decimal(Decimal::from(i)),
        (true, n) => Node::ToDecimal(n.into()),
        (false, n) => n,
    }
}

/// The name `a.b.c` a select chain spells, if it is one.
fn dotted(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Cel::Ident(name) => Some(name.clone()),
        Cel::Select(s) if !s.test => Some(format!("{}.{}", dotted(&s.operand)?, s.field)),
        _ => None,
    }
}

/// The leftmost node of `e`: where a reader looks for it (a binary operator's own offset is
/// that of the operator, a select's that of its dot).
fn start_of(e: &IdedExpr) -> &IdedExpr {
    match &e.expr {
        Cel::Select(s) => start_of(&s.operand),
        Cel::Call(c) if c.func_name.starts_with('_') && c.target.is_none() => c.args.first().map_or(e, start_of),
        Cel::Call(c) => c.target.as_deref().map_or(e, start_of),
        _ => e,
    }
}
