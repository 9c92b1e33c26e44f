//! `internal.idle_promise`: how an idle upstream partition promises progress to the SKU merge.

use std::fmt;

/// How a caught-up upstream partition promises that nothing older will follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdlePromise {
    /// The last log-end report's time minus `internal.idle_skew` (our clock, a fixed allowance
    /// for the broker's): no writes to the input topics, but every action behind an idle
    /// partition waits the skew, and a broker clock or replication further behind breaks it.
    #[default]
    Clock,
    /// A fence record appended to the idle partition itself ([`crate::fence`]), at most one per
    /// `every_ms` per partition while the process has data in flight: the fence's broker
    /// append time is an exact promise. Needs write access to the input topics.
    Fence { every_ms: i64 },
}

impl IdlePromise {
    /// The name in topology files.
    pub fn as_str(self) -> &'static str {
        match self {
            IdlePromise::Clock => "clock",
            IdlePromise::Fence { .. } => "fence",
        }
    }

    /// Parses `internal.idle_promise`, with `internal.fence_every` for a fence.
    pub fn parse(name: &str, every_ms: i64) -> Result<IdlePromise, UnknownIdlePromise> {
        match name {
            "clock" => Ok(IdlePromise::Clock),
            "fence" => Ok(IdlePromise::Fence { every_ms }),
            other => Err(UnknownIdlePromise(other.to_string())),
        }
    }

    /// How often an idle partition is fenced, if it is.
    pub fn fence_every_ms(self) -> Option<i64> {
        match self {
            IdlePromise::Clock => None,
            IdlePromise::Fence { every_ms } => Some(every_ms),
        }
    }
}

impl fmt::Display for IdlePromise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not an idle promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownIdlePromise(pub String);

impl fmt::Display for UnknownIdlePromise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown idle promise `{}` (expected clock | fence)", self.0)
    }
}

impl std::error::Error for UnknownIdlePromise {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_promises_read_back_from_their_names_and_nothing_else_is_one() {
        assert_eq!(IdlePromise::parse("clock", 50), Ok(IdlePromise::Clock));
        assert_eq!(IdlePromise::parse("fence", 50), Ok(IdlePromise::Fence { every_ms: 50 }));
        assert_eq!(IdlePromise::parse("Fence", 50), Err(UnknownIdlePromise("Fence".into())));
        assert_eq!(IdlePromise::Fence { every_ms: 50 }.fence_every_ms(), Some(50));
        assert_eq!(IdlePromise::default().fence_every_ms(), None);
    }
}
