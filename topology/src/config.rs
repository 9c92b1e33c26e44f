//! The topology file: a TOML document naming sources, sinks, state, windows and rules.
//!
//! Loading happens in two passes, as a compiler would: the text is read into raw structs
//! (syntax and type errors carry line and column; every unknown key is collected), then the
//! raw structs are checked as a whole and compiled into [`Topology`]. All errors of a pass
//! are reported together with the path of the key they concern.
//!
//! Module map:
//! - `model`: [`Topology`] and what it holds: the validated result.
//! - `error`: [`ConfigError`] and [`ConfigErrors`], what is wrong and where.
//! - `raw`: the file as written, serde structs with the documented defaults.
//! - `locate`: the first pass, every type error located by key path and line:column.
//! - `checker`: the second pass's error collector and the checks sections share.
//! - `compile`: the second pass, one function per section.
//! - `rules`: the `[[rules]]` section; `expression`: a `kind = "expression"` rule in it.
//! - `rule_mode`, `sink_format`, `idle_promise`: the named choices of a few keys.

use std::path::Path;

mod checker;
mod compile;
mod error;
mod expression;
#[cfg(test)]
mod expression_tests;
mod idle_promise;
mod locate;
mod model;
mod raw;
mod rule_mode;
mod rules;
mod sink_format;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigErrors};
pub use idle_promise::{IdlePromise, UnknownIdlePromise};
pub use model::{
    Endpoints, ExpressionRule, Rule, RuleAction, RuleKind, RuleTrigger, TopicSpec, Topology, Trust,
    MAX_IDENTIFIER_BYTES_LIMIT,
};
pub use rule_mode::{RuleMode, UnknownRuleMode};
pub use sink_format::{SinkFormat, UnknownSinkFormat};

/// The example topology shipped with tidemark, used by `tidemark demo`.
pub const EXAMPLE: &str = include_str!("../examples/orders.toml");

pub fn load(path: &Path) -> Result<Topology, ConfigErrors> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        origin: origin.clone(),
        errors: vec![ConfigError { path: String::new(), line_col: None, message: format!("cannot read: {e}") }],
    })?;
    parse(&text, &origin)
}

pub fn parse(text: &str, origin: &str) -> Result<Topology, ConfigErrors> {
    let fail = |errors| ConfigErrors { origin: origin.to_string(), errors };
    let (raw, mut errors) = locate::deserialize(text);
    let Some((raw, unknown)) = raw else { return Err(fail(errors)) };
    errors.extend(unknown.into_iter().map(|path| ConfigError {
        path,
        line_col: None,
        message: "unknown key".to_string(),
    }));
    let typed = errors.len();
    let mut checked = Vec::new();
    let topology = compile::compile(raw, &locate::Source::new(text), &mut checked);
    // A key with a type error was checked with a stand-in value: its other complaints are noise.
    let bad_types: Vec<String> = errors[..typed].iter().map(|e| e.path.clone()).collect();
    errors.extend(checked.into_iter().filter(|e| !bad_types.contains(&e.path)));
    if errors.is_empty() {
        Ok(topology)
    } else {
        Err(fail(errors))
    }
}
