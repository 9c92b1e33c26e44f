//! Build facts for `tidemark --version` and `tidemark_build_info` (src/build_info.rs): the
//! commit the binary was built from and whether the sources that make it up differed from that
//! commit. Without git or a repository (e.g. a source tarball), the commit is "unknown".
//!
//! Rebuilds: the script reruns only when HEAD moves (`.git/HEAD`, the branch ref it points to,
//! `packed-refs`) or when a source of the binary changes (the same directories whose change
//! recompiles the crate anyway), so it never forces a rebuild on its own. "Dirty" therefore
//! covers exactly those sources: `git status --porcelain` over `src`, `topology`, `state`,
//! `Cargo.toml`, `Cargo.lock` and `build.rs`; edits to docs or bench/ do not make a binary dirty.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary is made of: the paths whose change is a change of the binary.
const SOURCES: &[&str] = &["src", "topology", "state", "Cargo.toml", "Cargo.lock", "build.rs"];

fn git(args: &[&str]) -> Option<String> {
    // GIT_OPTIONAL_LOCKS=0: `git status` must not take .git/index.lock (a concurrent commit).
    let out = Command::new("git").args(args).env("GIT_OPTIONAL_LOCKS", "0").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    println!("cargo:rerun-if-env-changed=TIDEMARK_BUILD_COMMIT");
    let (commit, dirty) = match std::env::var("TIDEMARK_BUILD_COMMIT") {
        // An explicit commit (e.g. a Docker build, which has no .git), taken as clean.
        Ok(commit) if !commit.is_empty() => (commit, false),
        _ => from_git().unwrap_or_else(|| ("unknown".to_string(), false)),
    };
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let long = format!("{version} (commit {commit}{})", if dirty { ", dirty" } else { "" });
    println!("cargo:rustc-env=TIDEMARK_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=TIDEMARK_BUILD_DIRTY={}", u8::from(dirty));
    println!("cargo:rustc-env=TIDEMARK_BUILD_LONG_VERSION={long}");
}

/// The short HEAD commit and whether the binary's sources differ from it; None without git,
/// outside a repository or before the first commit.
fn from_git() -> Option<(String, bool)> {
    let git_dir = PathBuf::from(git(&["rev-parse", "--git-dir"])?);
    let common = git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from).unwrap_or_else(|| git_dir.clone());
    watch(&git_dir.join("HEAD"));
    watch(&common.join("packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&common.join(branch));
    }
    let commit = git(&["rev-parse", "--short=7", "HEAD"])?;
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend_from_slice(SOURCES);
    // Changed sources, or a status that could not be read: not provably clean.
    let dirty = !matches!(git(&status), Some(s) if s.is_empty());
    Some((commit, dirty))
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
