//! Disk use of the state volume (SPEC §5: exported, alerted on before the volume fills).
//!
//! Every [`EVERY`], a thread sums the sizes of the files under the state directory (SST
//! files, write-ahead log, manifest) and reads the volume's total and available bytes with
//! `statvfs`:
//!
//! | metric | meaning |
//! |---|---|
//! | `tidemark_state_disk_bytes` | bytes of the files under `--state-dir` |
//! | `tidemark_state_volume_capacity_bytes` | size of the filesystem holding it |
//! | `tidemark_state_volume_available_bytes` | bytes still available to tidemark on it |
//! | `tidemark_state_memory_bytes{kind}` | what the state store holds in memory, by RocksDB's own accounting: `memtables`, `block_cache`, `table_readers`; and `dedup_runs`, recent dedup entries not folded into table files yet |
//! | `tidemark_state_dedup_folds_total{result}` | folds of dedup entries into table files since start: `done`, `failed` (each failure also logged with its partition and cause; its entries stay in memory and are folded again) |
//!
//! The memory gauges say which part of the process's RSS is the store (bounded by the
//! memtable and block cache sizes) and which is not.
//!
//! The chart alerts when `1 - available / capacity` passes 80 % (docs/sizing.md has the
//! table of GiB per pod).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use tidemark_state::Store;
use tracing::warn;

/// How often the state directory is measured: a walk of a few hundred files.
pub const EVERY: Duration = Duration::from_secs(15);

/// Sum of the sizes of the regular files below `dir` (not following links).
pub fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// Publishes the three gauges once.
pub fn measure(dir: &Path) {
    match dir_bytes(dir) {
        Ok(bytes) => gauge!("tidemark_state_disk_bytes").set(bytes as f64),
        Err(e) => warn!(dir = %dir.display(), error = %e, "cannot measure the state directory"),
    }
    match fs4::statvfs(dir) {
        Ok(s) => {
            gauge!("tidemark_state_volume_capacity_bytes").set(s.total_space() as f64);
            gauge!("tidemark_state_volume_available_bytes").set(s.available_space() as f64);
        }
        Err(e) => warn!(dir = %dir.display(), error = %e, "cannot read the state volume's size"),
    }
}

/// Publishes the store's memory gauges once.
pub fn measure_memory(store: &Store) {
    let m = store.memory_usage();
    for (kind, bytes) in [
        ("memtables", m.memtables),
        ("block_cache", m.block_cache),
        ("table_readers", m.table_readers),
        ("dedup_runs", m.dedup_runs),
    ] {
        gauge!("tidemark_state_memory_bytes", "kind" => kind).set(bytes as f64);
    }
    let folds = store.dedup_folds();
    counter!("tidemark_state_dedup_folds_total", "result" => "done").absolute(folds.done);
    counter!("tidemark_state_dedup_folds_total", "result" => "failed").absolute(folds.failed);
    if folds.failed > FOLD_FAILURES_LOGGED.swap(folds.failed, Ordering::Relaxed) {
        warn!(
            failed = folds.failed,
            error = folds.last_error.as_deref().unwrap_or("-"),
            "a fold of dedup entries into a table file failed; its entries stay in memory and are folded again"
        );
    }
}

/// Fold failures already logged by [`measure_memory`].
static FOLD_FAILURES_LOGGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Measures now and then every [`EVERY`] until `stop` is set.
pub fn spawn(dir: PathBuf, store: Arc<Store>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            measure(&dir);
            measure_memory(&store);
            let until = Instant::now() + EVERY;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_size_counts_every_file_below_it() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("a.sst"), vec![0u8; 1000])?;
        std::fs::create_dir(dir.path().join("sub"))?;
        std::fs::write(dir.path().join("sub").join("b.log"), vec![0u8; 234])?;
        assert_eq!(dir_bytes(dir.path())?, 1234);
        let s = fs4::statvfs(dir.path())?;
        assert!(s.total_space() >= s.available_space() && s.total_space() > 0);
        Ok(())
    }
}
