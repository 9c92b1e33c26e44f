//! `tidemark microbatch`: the dashboard and provisional finance over consecutive half-open
//! offset slices on a schedule (SPEC §2 "Micro-batch mode"; docs/modes.md).
//!
//! Each slice:
//! 1. is planned: per partition `[from, to)` with `from` = the state's checkpoint and `to` =
//!    the high watermark now, at most `--max-slice-records / partitions` records further
//!    (a slice holds its records in memory until it commits; a job that is behind catches
//!    up in consecutive capped slices); the plan is committed to the state before any
//!    record is read;
//! 2. runs the stream's own orders tasks over the plan ([`SliceRunner`]), staging state into
//!    one batch;
//! 3. publishes each changed row once (its final version in the slice) plus side outputs,
//!    and waits for every acknowledgement;
//! 4. commits state, offsets and "slice n done" in one RocksDB write.
//!
//! A crash anywhere re-runs the planned slice with the same boundaries (same records, same
//! output bytes); after step 4 a restart plans the next one. The next slice never starts
//! before the previous one committed.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tidemark_state::{codec, PartitionId, Store, StoreOptions};
use tidemark_topology::config::{self, Topology};
use tidemark_topology::dashboard::rfc3339_ms;

use super::batch::range::{self, Log, PartitionRange};
use crate::cli::MicrobatchArgs;
use crate::engine::slice::SliceRunner;
use crate::engine::{OutputRecord, Sink, SourceRecord, Stats, TaskConfig};
use crate::failpoint;
use crate::kafka::admin;
use crate::kafka::sink::OutputSink;
use crate::telemetry::{self, Progress};

/// The state record holding the slice boundaries.
const SLICES: &str = "microbatch.slices";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Slice {
    number: u64,
    ranges: Vec<PartitionRange>,
}

/// What the state remembers: the last committed slice and the one planned after it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct SliceLog {
    done: Option<Slice>,
    planned: Option<Slice>,
}

/// One line of `--report` (and of the stderr summary).
#[derive(Serialize)]
struct SliceReport<'a> {
    slice: u64,
    ranges: &'a [PartitionRange],
    records: u64,
    outputs: u64,
    /// The slice re-ran a plan a previous process had not committed.
    resumed: bool,
    started: String,
    duration_ms: u64,
    every_ms: u64,
    deadline_ms: u64,
    /// How old the newest result can be when this slice's rows land: one period plus the
    /// slice's own duration.
    staleness_bound_ms: u64,
    within_deadline: bool,
}

fn load_log(store: &Store) -> anyhow::Result<SliceLog> {
    Ok(store
        .record(SLICES)?
        .map(|v| codec::decode::<SliceLog>("micro-batch slices", &v))
        .transpose()?
        .unwrap_or_default())
}

pub fn run(args: MicrobatchArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let topology = config::load(&args.topology)?;
    let settings = crate::kafka::KafkaSettings::from_args(&args.kafka)?;
    let (every, deadline) = (args.every, args.deadline);
    std::fs::create_dir_all(&args.state_dir).with_context(|| format!("creating {}", args.state_dir.display()))?;
    let store = Store::open(
        &args.state_dir,
        &StoreOptions { owner: format!("{}/microbatch", topology.name), ..StoreOptions::default() },
    )?;
    for (target, like) in [
        (args.dashboard_topic.as_deref().unwrap_or(&topology.dashboard.topic), &topology.dashboard),
        (args.finance_topic.as_deref().unwrap_or(&topology.finance_provisional.topic), &topology.finance_provisional),
    ] {
        if args.create_topics {
            rt.block_on(admin::ensure_compacted(&settings, target, like, args.replication))?;
        }
        anyhow::ensure!(
            admin::topic_exists(&settings, target)?,
            "output topic {target} does not exist: create it (compacted) or pass --create-topics"
        );
    }
    let sink =
        OutputSink::new(&settings, &topology)?.redirect(args.dashboard_topic.as_deref(), args.finance_topic.as_deref());
    let stop = Arc::new(AtomicBool::new(false));
    crate::signal::install_handler(rt, Arc::clone(&stop));
    let mut report = match &args.report {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("opening --report {}", p.display()))?,
        ),
        None => None,
    };

    let stats = Arc::new(Stats::default());
    let progress = Arc::new(Progress::default());
    let prober = telemetry::serve(
        rt,
        telemetry::Surface {
            addr: args.http_addr,
            settings: &settings,
            topics: vec![(PartitionId::ORDERS, topology.orders.topic.clone())],
            stats: &stats,
            progress: &progress,
            stop: &stop,
            probe_every_s: args.backlog_probe_every,
            admin: None,
        },
    )?;
    // Nothing to restore: the store is open and a slice reads from its checkpoint.
    progress.store_opened();
    progress.nothing_to_restore();
    // From the start, so the deadline-miss rate reads 0 rather than no data.
    telemetry::microbatch::started();
    let mut runner = SliceRunner::new(
        &store,
        TaskConfig::from_topology(&topology, 0),
        topology.max_batch_records,
        true,
        Arc::clone(&stats),
    );
    let mut log = load_log(&store)?;
    // When the next slice may start: `--every` after the last one started, or at once after
    // a slice the cap cut short of the high watermark (the job is behind: catch up). A slice
    // resumed at start counts as started now.
    let mut next_at = Instant::now() + every;
    let mut ran = 0u64;
    loop {
        let resumed = log.planned.is_some();
        let slice = match log.planned.clone() {
            Some(s) => {
                eprintln!("microbatch: resuming slice {} planned before a restart", s.number);
                s
            }
            None => {
                if ran > 0 && !wait_until(next_at, &stop, &progress) {
                    break;
                }
                let (slice, capped) =
                    plan(&settings, &topology, &mut runner, &log, args.accept_gaps, args.max_slice_records)?;
                next_at = if capped {
                    Instant::now()
                } else {
                    // On the `--every` grid; a slice that overran by more than a period
                    // moves the grid instead of owing back-to-back slices.
                    Instant::now().checked_sub(every).map_or(next_at, |t| next_at.max(t)) + every
                };
                log.planned = Some(slice.clone());
                let mut b = store.batch();
                b.put_record(SLICES, &codec::encode(&log)?);
                b.commit()?;
                slice
            }
        };
        for r in &slice.ranges {
            progress.assigned(PartitionId::orders(r.partition), r.from);
            progress.high_watermark(PartitionId::orders(r.partition), r.to);
        }
        progress.beat();
        failpoint::hit("microbatch.after_plan");
        let t0 = Instant::now();
        let wall = chrono::Utc::now().timestamp_millis();
        read_slice(&settings, &topology, &slice, &mut runner, &progress)?;
        let done = SliceLog { done: Some(slice.clone()), planned: None };
        let side_outputs = !args.no_side_outputs;
        let done_bytes = codec::encode(&done)?;
        let counts = runner.end_slice(Some((SLICES, &done_bytes)), |out: &mut Vec<OutputRecord>| {
            if !side_outputs {
                out.retain(|r| matches!(r.sink, Sink::Dashboard | Sink::Finance));
            }
            sink.send_all(out, 0)?;
            failpoint::hit("microbatch.before_flush");
            sink.flush(&|| progress.beat())
        })?;
        failpoint::hit("microbatch.after_commit");
        for r in &slice.ranges {
            progress.committed(PartitionId::orders(r.partition), r.to);
        }
        progress.beat();
        log = done;
        ran += 1;
        let duration = t0.elapsed();
        let staleness = every + duration;
        let line = SliceReport {
            slice: slice.number,
            ranges: &slice.ranges,
            records: counts.records,
            outputs: counts.outputs,
            resumed,
            started: rfc3339_ms(wall),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            staleness_bound_ms: u64::try_from(staleness.as_millis()).unwrap_or(u64::MAX),
            within_deadline: staleness <= deadline,
        };
        eprintln!(
            "microbatch: slice {} applied {} record(s), wrote {} row(s) in {:.2} s; results ≤ {:.1} s old against a {:.0} s deadline{}",
            line.slice,
            line.records,
            line.outputs,
            duration.as_secs_f64(),
            staleness.as_secs_f64(),
            deadline.as_secs_f64(),
            if line.within_deadline { "" } else { " — DEADLINE MISSED" }
        );
        if let Some(f) = report.as_mut() {
            writeln!(f, "{}", serde_json::to_string(&line)?).context("writing --report")?;
        }
        telemetry::microbatch::slice(duration, staleness, line.within_deadline);
        let idle = counts.records == 0 && slice.ranges.iter().all(|r| r.from == r.to);
        if stop.load(Ordering::Relaxed)
            || (args.max_slices > 0 && ran >= args.max_slices)
            || (args.exit_when_idle && idle)
        {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(p) = prober {
        let _ = p.join();
    }
    Ok(())
}

/// Sleeps until `at`, beating the liveness heartbeat; false when a stop signal came first.
fn wait_until(at: Instant, stop: &AtomicBool, progress: &Progress) -> bool {
    while Instant::now() < at {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        progress.beat();
        std::thread::sleep(Duration::from_millis(100).min(at.saturating_duration_since(Instant::now())));
    }
    !stop.load(Ordering::Relaxed)
}

/// The next slice: from each partition's committed offset to its high watermark now, or to
/// `max_records / partitions` records further when that comes first (then `true`: capped).
fn plan(
    settings: &crate::kafka::KafkaSettings,
    t: &Topology,
    runner: &mut SliceRunner<'_>,
    log: &SliceLog,
    allow_partial: bool,
    max_records: u64,
) -> anyhow::Result<(Slice, bool)> {
    let source = Log::open(settings, &t.orders.topic)?;
    let partitions = u64::try_from(source.watermarks().len()).unwrap_or(1).max(1);
    let per_partition = match max_records {
        0 => i64::MAX,
        n => i64::try_from((n / partitions).max(1)).unwrap_or(i64::MAX),
    };
    let mut capped = false;
    let mut ranges = Vec::new();
    for (p, (low, high)) in source.watermarks() {
        let next = runner.next_offset(*p)?;
        anyhow::ensure!(
            next >= *low || allow_partial,
            "{}/{p}: the state continues at offset {next} but the log now starts at {low}: records in between were deleted              before this job read them. Restore the state directory or pass --accept-gaps to accept the gap",
            t.orders.topic
        );
        let from = next.max(*low);
        anyhow::ensure!(
            from <= *high,
            "{}/{p}: the state has processed up to offset {from} but the log ends at {high}; was the topic recreated? Use a fresh --state-dir",
            t.orders.topic
        );
        let to = (*high).min(from.saturating_add(per_partition));
        capped |= to < *high;
        ranges.push(PartitionRange { partition: *p, from, to });
    }
    Ok((Slice { number: log.done.as_ref().map_or(1, |d| d.number + 1), ranges }, capped))
}

/// Feeds every record of the slice to the runner.
fn read_slice(
    settings: &crate::kafka::KafkaSettings,
    t: &Topology,
    slice: &Slice,
    runner: &mut SliceRunner<'_>,
    liveness: &Progress,
) -> anyhow::Result<()> {
    let source = Log::open(settings, &t.orders.topic)?;
    let total = slice.ranges.iter().map(|r| u64::try_from(r.to - r.from).unwrap_or(0)).sum();
    let mut progress = range::Progress::new(&format!("microbatch slice {}", slice.number), total);
    for r in &slice.ranges {
        let from = runner.next_offset(r.partition)?.max(r.from);
        let mut failed = None;
        source.read(r.partition, from, r.to, &mut progress, |offset, key, value, append_ms| {
            if failed.is_none() {
                let rec = SourceRecord { key, value: Some(value), append_ms, offset };
                failed = runner.ingest(r.partition, rec).err();
            }
            // A long slice is work, not a hang: keep /healthz green while records flow.
            if offset % 1024 == 0 {
                liveness.beat();
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
    }
    Ok(())
}
