//! The live one-line status and the final summary printed by `run` and `demo`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Stats;

/// Prints a status line every `every` until `stop` is set.
pub fn spawn_printer(stats: Arc<Stats>, stop: Arc<AtomicBool>, every: Duration) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut last = (0u64, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let records = Stats::get(&stats.records);
            let rate = (records - last.0) as f64 / last.1.elapsed().as_secs_f64().max(1e-3);
            last = (records, Instant::now());
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:>6.1}s] {:>9} records  {:>9.0} rec/s  applied {:>9}  dedup {:>6}  dead-letter {:>5}  late {:>5}  lag {:>7}  commits {:>5}",
                started.elapsed().as_secs_f64(),
                records,
                rate,
                Stats::get(&stats.events_applied),
                Stats::get(&stats.dedup_hits),
                Stats::get(&stats.dead_letters),
                Stats::get(&stats.late),
                stats.lag.load(Ordering::Relaxed),
                Stats::get(&stats.commits),
            );
        }
    })
}

pub fn summary(stats: &Stats, elapsed: Duration) -> String {
    let records = Stats::get(&stats.records);
    format!(
        "processed {records} records in {:.1}s ({:.0} rec/s): {} events applied, {} duplicates ignored, {} dead-lettered, {} late, {} output records, {} commits",
        elapsed.as_secs_f64(),
        records as f64 / elapsed.as_secs_f64().max(1e-3),
        Stats::get(&stats.events_applied),
        Stats::get(&stats.dedup_hits),
        Stats::get(&stats.dead_letters),
        Stats::get(&stats.late),
        Stats::get(&stats.outputs),
        Stats::get(&stats.commits),
    )
}
