//! `--standbys`: how many warm copies of each input partition the group keeps.

use std::fmt;

/// The value of `--standbys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// No standby tasks (`none`, `0`).
    None,
    /// A standby task on every process for every input partition it does not own (`all`).
    All,
    /// This many copies of each partition, on members other than its owner, placed by
    /// [`super::placement`].
    Count(u16),
}

impl Copies {
    /// Parses `none`, `all` or a count (`0` is `none`).
    pub fn parse(s: &str) -> Result<Copies, String> {
        match s.trim() {
            "none" => Ok(Copies::None),
            "all" => Ok(Copies::All),
            n => match n.parse::<u16>() {
                Ok(0) => Ok(Copies::None),
                Ok(n) => Ok(Copies::Count(n)),
                Err(_) => Err(format!("`{s}`: expected none, all or a number of copies (1, 2, …)")),
            },
        }
    }

    pub fn is_on(self) -> bool {
        self != Copies::None
    }
}

impl fmt::Display for Copies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Copies::None => f.write_str("none"),
            Copies::All => f.write_str("all"),
            Copies::Count(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_all_and_counts_parse_and_zero_means_none() {
        assert_eq!(Copies::parse("none"), Ok(Copies::None));
        assert_eq!(Copies::parse("0"), Ok(Copies::None));
        assert_eq!(Copies::parse("all"), Ok(Copies::All));
        assert_eq!(Copies::parse("1"), Ok(Copies::Count(1)));
        assert_eq!(Copies::parse(" 3 "), Ok(Copies::Count(3)));
    }

    #[test]
    fn anything_else_is_refused_with_the_value_named() {
        for bad in ["", "-1", "two", "1.5", "ALL "] {
            let e = Copies::parse(bad).expect_err(bad);
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }
}
