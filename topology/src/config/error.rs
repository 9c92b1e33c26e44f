//! Config errors: what is wrong and where (key path, and line:column where known).

use std::fmt;

/// One problem in a topology file, located by key path and, where known, line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub line_col: Option<(usize, usize)>,
    pub message: String,
}

/// Every problem found in one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    pub origin: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {} error(s)", self.origin, self.errors.len())?;
        for e in &self.errors {
            match e.line_col {
                Some((l, c)) => writeln!(f, "  {}:{}:{}: {}: {}", self.origin, l, c, e.path, e.message)?,
                None => writeln!(f, "  {}: {}: {}", self.origin, e.path, e.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
