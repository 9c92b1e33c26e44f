//! What this binary was built from (set by the top-level `build.rs`): the package version,
//! the commit, and whether the binary's sources differed from that commit ("dirty").
//! `tidemark --version` prints [`LONG_VERSION`]; the benchmark harness (bench/harness) reads
//! it and refuses a dirty or unknown binary unless told otherwise.

/// The package version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The short commit hash the binary was built from, or "unknown" (built without git and
/// without `TIDEMARK_BUILD_COMMIT` in the build's environment).
pub const COMMIT: &str = env!("TIDEMARK_BUILD_COMMIT");

/// Whether `src`, `topology`, `state`, `Cargo.toml`, `Cargo.lock` or `build.rs` differed from
/// [`COMMIT`] at build time (uncommitted or untracked changes).
pub const DIRTY: bool = matches!(env!("TIDEMARK_BUILD_DIRTY").as_bytes(), [b'1']);

/// `0.1.0 (commit abc1234)`, `0.1.0 (commit abc1234, dirty)` or `0.1.0 (commit unknown)`:
/// what `tidemark --version` prints after the program name.
pub const LONG_VERSION: &str = env!("TIDEMARK_BUILD_LONG_VERSION");

/// Sets the gauge `tidemark_build_info{version, commit}` to 1 (`commit` carries a `-dirty`
/// suffix for a dirty build), so dashboards can tell which build a pod runs.
pub fn register_metric() {
    let commit = if DIRTY { format!("{COMMIT}-dirty") } else { COMMIT.to_string() };
    crate::telemetry::events::build_info(VERSION, commit);
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_version_names_the_commit() {
        assert!(super::LONG_VERSION.starts_with(super::VERSION));
        assert!(super::LONG_VERSION.contains(&format!("(commit {}", super::COMMIT)));
        assert_eq!(super::LONG_VERSION.ends_with(", dirty)"), super::DIRTY);
    }
}
