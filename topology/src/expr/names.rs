//! The values a rule may read, with their types. `docs/rules.md` documents each one; a test
//! there keeps the page and this table in step.

use super::Type;

/// A value of the SKU being evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    Sku,
    OnHand,
    AsOf,
    Available,
    UnitsPlacedSince,
    UnitsCancelledSince,
    WindowUnits,
    WindowStart,
    WindowEnd,
    PrecedingWindows,
    PrecedingUnits,
    PrecedingMean,
    PrecedingMax,
}

/// The group a value belongs to: what must exist for it to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Always,
    Stock,
    Window,
    Preceding,
}

/// Every value by its name in an expression, with its type and group.
pub const VARS: [(&str, Var, Type); 13] = [
    ("sku", Var::Sku, Type::String),
    ("on_hand", Var::OnHand, Type::Int),
    ("as_of", Var::AsOf, Type::Time),
    ("available", Var::Available, Type::Int),
    ("units_placed_since", Var::UnitsPlacedSince, Type::Int),
    ("units_cancelled_since", Var::UnitsCancelledSince, Type::Int),
    ("window.units", Var::WindowUnits, Type::Int),
    ("window.start", Var::WindowStart, Type::Time),
    ("window.end", Var::WindowEnd, Type::Time),
    ("preceding.windows", Var::PrecedingWindows, Type::Int),
    ("preceding.units", Var::PrecedingUnits, Type::Int),
    ("preceding.mean", Var::PrecedingMean, Type::Decimal),
    ("preceding.max", Var::PrecedingMax, Type::Int),
];

impl Var {
    pub fn group(self) -> Group {
        match self {
            Var::Sku => Group::Always,
            Var::OnHand | Var::AsOf | Var::Available | Var::UnitsPlacedSince | Var::UnitsCancelledSince => Group::Stock,
            Var::WindowUnits | Var::WindowStart | Var::WindowEnd => Group::Window,
            Var::PrecedingWindows | Var::PrecedingUnits | Var::PrecedingMean | Var::PrecedingMax => Group::Preceding,
        }
    }

    pub fn name(self) -> &'static str {
        VARS.iter().find(|(_, v, _)| *v == self).map_or("?", |(n, _, _)| n)
    }
}

/// The value called `name`, with its type.
pub fn lookup(name: &str) -> Option<(Var, Type)> {
    VARS.iter().find(|(n, _, _)| *n == name).map(|(_, v, t)| (*v, *t))
}

/// The names, for an error message.
pub fn list() -> String {
    VARS.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", ")
}
