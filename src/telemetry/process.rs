//! Process metrics in the names Prometheus client libraries use (`process_*`), read from
//! `/proc/self` when `/metrics` is scraped. Nothing is published where `/proc` is absent.

use metrics::{counter, gauge};

use super::describe::Kind;

/// (name, kind, help) of the process families ([`super::describe::all`] registers them).
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    ("process_cpu_seconds_total", Kind::Counter, "Total user and system CPU time spent, in seconds"),
    ("process_resident_memory_bytes", Kind::Gauge, "Resident memory size in bytes"),
    ("process_virtual_memory_bytes", Kind::Gauge, "Virtual memory size in bytes"),
    ("process_open_fds", Kind::Gauge, "Number of open file descriptors"),
    ("process_max_fds", Kind::Gauge, "Maximum number of open file descriptors (soft limit)"),
    ("process_threads", Kind::Gauge, "Number of OS threads in the process"),
    ("process_start_time_seconds", Kind::Gauge, "Start time of the process since the unix epoch, in seconds"),
];

/// The kernel reports times in /proc in USER_HZ, which is 100 on every architecture Linux
/// runs tidemark on.
const TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc/self` says about the process.
#[derive(Debug, Default, PartialEq)]
pub struct Sample {
    pub cpu_seconds: f64,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// Reads and publishes the process families; a file that cannot be read leaves its series
/// as it was.
pub fn publish() {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| boot_time(&s));
    let s = parse(&stat, &status, boot_time);
    // A counter holds whole numbers: CPU time in whole seconds, enough for rate() over minutes.
    counter!("process_cpu_seconds_total").absolute(s.cpu_seconds as u64);
    let set = |name: &'static str, v: Option<f64>| {
        if let Some(v) = v {
            gauge!(name).set(v);
        }
    };
    set("process_resident_memory_bytes", s.resident_bytes.map(|v| v as f64));
    set("process_virtual_memory_bytes", s.virtual_bytes.map(|v| v as f64));
    set("process_threads", s.threads.map(|v| v as f64));
    set("process_start_time_seconds", s.start_time_seconds);
    set("process_open_fds", std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64));
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    set("process_max_fds", max_open_files(&limits).map(|v| v as f64));
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// The fields of `/proc/self/stat` after the command name (which may hold spaces and
/// parentheses, so the text is split at its last `)`).
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default()
}

/// A `Key:   1234 kB` line of `/proc/self/status`, in bytes (or the bare number for counts).
fn status_value(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    let mut parts = line[key.len() + 1..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    Some(if parts.next() == Some("kB") { n * 1024 } else { n })
}

/// `btime` of `/proc/stat`: the boot time, seconds since the epoch.
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

pub fn parse(stat: &str, status: &str, boot_time: Option<f64>) -> Sample {
    let f = stat_fields(stat);
    // Field numbers of proc(5) minus 3 (pid and comm precede the slice): utime 14, stime 15,
    // starttime 22.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let cpu_seconds = (ticks(11).unwrap_or(0.0) + ticks(12).unwrap_or(0.0)) / TICKS_PER_SECOND;
    let start_time_seconds = match (boot_time, ticks(19)) {
        (Some(boot), Some(start)) => Some(boot + start / TICKS_PER_SECOND),
        _ => None,
    };
    Sample {
        cpu_seconds,
        resident_bytes: status_value(status, "VmRSS"),
        virtual_bytes: status_value(status, "VmSize"),
        threads: status_value(status, "Threads"),
        start_time_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (tidemark (x) y) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 130 0 0 20 0 7 0 123400 1000000 500 18446744073709551615";
    const STATUS: &str = "Name:\ttidemark\nVmSize:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t7\n";

    #[test]
    fn cpu_time_memory_threads_and_start_time_are_read_from_proc_text() {
        let s = parse(STAT, STATUS, Some(1_700_000_000.0));
        assert_eq!(s.cpu_seconds, 3.8, "utime 250 + stime 130 ticks");
        assert_eq!(s.resident_bytes, Some(1024 * 1024));
        assert_eq!(s.virtual_bytes, Some(2048 * 1024));
        assert_eq!(s.threads, Some(7));
        assert_eq!(s.start_time_seconds, Some(1_700_000_000.0 + 1234.0));
    }

    #[test]
    fn the_soft_open_files_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576));
    }

    #[test]
    fn this_process_has_a_resident_size_and_threads_on_linux() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let s = parse(&stat, &status, None);
        assert!(s.resident_bytes.unwrap_or(0) > 0 && s.threads.unwrap_or(0) > 0, "{s:?}");
    }
}
