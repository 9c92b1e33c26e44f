//! Throwaway store directories (the batch commands' disk-backed dedup, the shadow's replay
//! stores) and the sweep of those a killed process left behind.
//!
//! A `batch close` or `shadow` that is killed (SIGKILL, the OOM killer, an evicted pod)
//! cannot delete its scratch stores, and a 100 M-event range leaves gigabytes in `TMPDIR`:
//! a command that crash-loops would fill the disk. So every scratch directory holds
//! `owner.lock`, locked (`flock`) by the process for as long as the directory is in use.
//! The kernel drops the lock when the process dies, however it dies. The first scratch
//! directory a process makes sweeps its parent first: a `tidemark-scratch-*` directory whose lock can be
//! taken has no owner left, and is removed.
//!
//! Two cases are left alone: a directory modified less than [`GRACE`] ago (it may be being
//! created: the lock is taken right after the directory is made), and one without
//! `owner.lock` (not made this way; nothing says whether its owner is alive).

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, SystemTime};

use tempfile::TempDir;
use tracing::{info, warn};

/// Every scratch directory's name starts with this.
pub const PREFIX: &str = "tidemark-scratch-";
const LOCK: &str = "owner.lock";
/// How long a directory without a live owner is left for its creator to lock it.
pub const GRACE: Duration = Duration::from_secs(60);

/// A scratch directory, removed on drop, locked as in use until then.
pub struct Scratch {
    // Dropped first: the directory goes while the lock is still held.
    dir: TempDir,
    _lock: File,
}

impl Scratch {
    /// A new scratch directory under the system's temp dir (`TMPDIR`), named
    /// `tidemark-scratch-<what>-…`. The first one a process makes sweeps what dead processes
    /// left there (a close makes one per partition; one sweep is enough).
    pub fn create(what: &str) -> io::Result<Scratch> {
        static SWEPT: Once = Once::new();
        let parent = std::env::temp_dir();
        SWEPT.call_once(|| {
            sweep(&parent, GRACE);
        });
        Scratch::create_in(&parent, what)
    }

    /// A new scratch directory under `parent`, without a sweep.
    pub fn create_in(parent: &Path, what: &str) -> io::Result<Scratch> {
        let dir = tempfile::Builder::new().prefix(&format!("{PREFIX}{what}-")).tempdir_in(parent)?;
        let lock = File::create(dir.path().join(LOCK))?;
        lock.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => e,
            TryLockError::WouldBlock => {
                io::Error::other(format!("{} is locked by another process", dir.path().display()))
            }
        })?;
        Ok(Scratch { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Releases the lock and keeps the directory, as a killed process would.
    #[cfg(test)]
    fn abandon(self) -> PathBuf {
        let Scratch { dir, _lock } = self;
        drop(_lock);
        dir.keep()
    }
}

/// Removes every scratch directory under `parent` whose owner is gone and that was last
/// modified more than `grace` ago; returns the directories removed. Failures are logged and
/// skipped: a sweep never stops the command that runs it.
pub fn sweep(parent: &Path, grace: Duration) -> Vec<PathBuf> {
    let entries = match fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(e) => {
            warn!(dir = %parent.display(), error = %e, "cannot list the temp dir for scratch directories left by killed runs");
            return Vec::new();
        }
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) || !path.is_dir() {
            continue;
        }
        match abandoned(&path, grace) {
            Ok(Some(lock)) => match fs::remove_dir_all(&path) {
                Ok(()) => {
                    drop(lock);
                    info!(dir = %path.display(), "removed a scratch directory left by a killed run");
                    removed.push(path);
                }
                Err(e) => {
                    warn!(dir = %path.display(), error = %e, "cannot remove a scratch directory left by a killed run")
                }
            },
            Ok(None) => {}
            Err(e) => {
                warn!(dir = %path.display(), error = %e, "cannot tell whether a scratch directory is still in use")
            }
        }
    }
    removed
}

/// The lock of `dir`, held, when nobody holds it and `dir` is older than `grace`.
fn abandoned(dir: &Path, grace: Duration) -> io::Result<Option<File>> {
    let modified = fs::metadata(dir)?.modified()?;
    if SystemTime::now().duration_since(modified).unwrap_or_default() < grace {
        return Ok(None);
    }
    let lock = match File::options().read(true).write(true).open(dir.join(LOCK)) {
        Ok(lock) => lock,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(dir: &Path, by: Duration) {
        let f = File::open(dir).expect("open dir");
        f.set_modified(SystemTime::now() - by).expect("set mtime");
    }

    #[test]
    fn a_scratch_directory_whose_owner_died_is_swept() {
        let parent = tempfile::tempdir().expect("tmp");
        let left = Scratch::create_in(parent.path(), "dedup").expect("scratch").abandon();
        fs::write(left.join("000001.sst"), vec![0u8; 4096]).expect("write");
        age(&left, 2 * GRACE);
        assert_eq!(sweep(parent.path(), GRACE), vec![left.clone()]);
        assert!(!left.exists());
    }

    #[test]
    fn a_scratch_directory_in_use_is_left_alone_however_old() {
        let parent = tempfile::tempdir().expect("tmp");
        let live = Scratch::create_in(parent.path(), "dedup").expect("scratch");
        age(live.path(), 2 * GRACE);
        assert!(sweep(parent.path(), GRACE).is_empty());
        assert!(live.path().join(LOCK).exists());
    }

    #[test]
    fn an_abandoned_directory_younger_than_the_grace_is_left_for_a_later_sweep() {
        let parent = tempfile::tempdir().expect("tmp");
        let left = Scratch::create_in(parent.path(), "shadow").expect("scratch").abandon();
        assert!(sweep(parent.path(), GRACE).is_empty());
        assert!(left.exists());
    }

    #[test]
    fn directories_without_an_owner_lock_or_with_other_names_are_left_alone() {
        let parent = tempfile::tempdir().expect("tmp");
        let foreign = parent.path().join(format!("{PREFIX}dedup-old"));
        let other = parent.path().join("someone-else");
        for d in [&foreign, &other] {
            fs::create_dir(d).expect("mkdir");
            File::create(d.join(LOCK)).ok();
        }
        fs::remove_file(foreign.join(LOCK)).expect("rm");
        for d in [&foreign, &other] {
            age(d, 2 * GRACE);
        }
        assert!(sweep(parent.path(), GRACE).is_empty());
        assert!(foreign.exists() && other.exists());
    }

    #[test]
    fn a_dropped_scratch_directory_is_gone() {
        let parent = tempfile::tempdir().expect("tmp");
        let path = {
            let s = Scratch::create_in(parent.path(), "dedup").expect("scratch");
            s.path().to_path_buf()
        };
        assert!(!path.exists());
    }
}
