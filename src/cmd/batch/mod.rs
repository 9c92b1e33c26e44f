//! `tidemark batch close|adjust|show|shadow`: the finance close (SPEC §2 "Finance close (batch)"),
//! a bounded batch over a frozen input range that is validated and published atomically.
//! The definitions are in [`tidemark_topology::finance`]; formats in docs/finance.md.
//!
//! # Publishing a run (a close or an adjustment)
//!
//! 1. Freeze the input: per-partition offsets `[from, to)` of the orders topic, each within
//!    the records the log holds now, so the range can only ever contain these records.
//! 2. Derive the run id from the day, time zone, dedup retention, ranges and definition
//!    version ([`manifest::RunIdentity`]): a rerun of the same range has the same id.
//! 3. Read every partition's range in offset order and fold it into rows
//!    ([`DayClose`]); every record ends as exactly one outcome.
//! 4. Stage the rows under the run id on `finance_close` and wait for every
//!    acknowledgement. Staged rows are invisible: readers only follow manifests.
//! 5. Read the run's rows back as a reader would and validate them: exactly the keys and
//!    bytes computed, then [`finance::validate`] against the accounting of step 3.
//! 6. Write one manifest record to `finance_manifest`. That single record is the publish:
//!    a reader who looks up the manifest and then its rows sees the previous run or this
//!    one, never a mix.
//!
//! A crash before step 6 leaves the previous publication in place; a rerun repeats the steps
//! with the same run id and writes the same bytes.

pub(crate) mod dedup;
#[cfg(test)]
mod golden;
mod manifest;
pub(crate) mod range;
mod shadow;
mod show;
mod store;

use std::collections::BTreeMap;

use anyhow::Context as _;
use chrono::NaiveDate;
use tidemark_topology::config::{self, Topology};
use tidemark_topology::dashboard::rfc3339_ms;
use tidemark_topology::finance::{self, day_bounds_ms, DayClose, FinanceRow, DEFINITION_VERSION};
use tidemark_topology::normalize::normalize_order_with;
use tidemark_topology::normalize::{NormalizeLimits, MAX_FUTURE_SKEW_MS};

use crate::cli::{BatchAdjustArgs, BatchCloseArgs, BatchDayArgs};
use crate::failpoint;
use crate::kafka::KafkaSettings;
use dedup::{DiskDedup, PartitionDedup};
use manifest::{Accounting, Manifest, RunIdentity, RunKind, CODE_VERSION};
use range::{parse_offsets, Input, Log, Offsets, Progress};

pub use shadow::shadow;
pub use show::show;

/// Extra margin, beyond the 1 h an event may lie ahead of its append time, by which the
/// default start of a close precedes the day: broker clocks and leader changes can make
/// append times step back a little.
const FROM_MARGIN_MS: i64 = 3_600_000;

/// The topology, Kafka settings and business day of a batch command.
struct Ctx {
    topology: Topology,
    settings: KafkaSettings,
    day: NaiveDate,
}

impl Ctx {
    fn new(args: &BatchDayArgs) -> anyhow::Result<Ctx> {
        let topology = config::load(&args.topology)?;
        let settings = crate::kafka::KafkaSettings::from_args(&args.kafka)?;
        let day = parse_day(&args.business_day, topology.finance_time_zone, chrono::Utc::now())?;
        Ok(Ctx { topology, settings, day })
    }

    fn tz(&self) -> &'static str {
        self.topology.finance_time_zone.name()
    }

    fn day_text(&self) -> String {
        self.day.to_string()
    }
}

/// `YYYY-MM-DD`, or `today` / `yesterday` as dates in the finance time zone at `now` (for
/// schedulers: a CronJob at 07:30 Tokyo closes `yesterday`).
fn parse_day(text: &str, tz: chrono_tz::Tz, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<NaiveDate> {
    let today = now.with_timezone(&tz).date_naive();
    match text {
        "today" => Ok(today),
        "yesterday" => today.pred_opt().context("--business-day yesterday: before the calendar starts"),
        _ => NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .with_context(|| format!("--business-day {text}: expected YYYY-MM-DD, today or yesterday")),
    }
}

fn parse_time(flag: &str, text: &str) -> anyhow::Result<i64> {
    Ok(chrono::DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("{flag} {text}: expected RFC 3339, e.g. 2026-11-29T07:00:00+09:00"))?
        .timestamp_millis())
}

/// `to` offsets from `--to`, or from the first record appended at or after the cutoff.
fn end_offsets(
    log: &Log,
    to: Option<&str>,
    cutoff_ms: impl FnOnce() -> anyhow::Result<i64>,
) -> anyhow::Result<Offsets> {
    let offsets = match to {
        Some(spec) => parse_offsets("--to", spec)?,
        None => {
            let cutoff = cutoff_ms()?;
            let now = chrono::Utc::now().timestamp_millis();
            anyhow::ensure!(
                cutoff <= now,
                "cutoff {} is in the future: records appended until then would be missing; wait, or pass --to",
                rfc3339_ms(cutoff)
            );
            eprintln!("batch: cutoff {}", rfc3339_ms(cutoff));
            log.offsets_at(cutoff)?
        }
    };
    log.check_offsets("--to", &offsets)?;
    Ok(offsets)
}

/// The default start: the first record appended at or after `t_ms`. A partition whose log
/// now starts after deleted records cannot prove it lost nothing of the day.
fn derived_start(log: &Log, t_ms: i64) -> anyhow::Result<Offsets> {
    let offsets = log.offsets_at(t_ms)?;
    for (p, o) in &offsets {
        let (low, _) = log.watermarks().get(p).copied().unwrap_or_default();
        anyhow::ensure!(
            !(*o == low && low > 0),
            "{}/{p}: the log starts at offset {low} (older records were deleted), so records appended after {} may be lost; pass --from to close over what is left",
            log.topic(),
            rfc3339_ms(t_ms)
        );
    }
    Ok(offsets)
}

pub fn close(args: BatchCloseArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&args.day)?;
    let tz = ctx.topology.finance_time_zone;
    let (start_ms, end_ms) =
        day_bounds_ms(ctx.day, tz).with_context(|| format!("{} has no bounds in {tz}", ctx.day))?;
    let log = Log::open(&ctx.settings, &ctx.topology.orders.topic)?;
    let to = end_offsets(&log, args.to.as_deref(), || match &args.cutoff {
        Some(c) => parse_time("--cutoff", c),
        None => Ok(end_ms + i64::try_from(args.grace.as_millis()).unwrap_or(i64::MAX)),
    })?;
    let from = match &args.from {
        Some(spec) => parse_offsets("--from", spec)?,
        None => derived_start(&log, start_ms - MAX_FUTURE_SKEW_MS - FROM_MARGIN_MS)?,
    };
    log.check_offsets("--from", &from)?;
    let inverted: Vec<String> = to
        .iter()
        .filter(|(p, t)| from.get(p).is_some_and(|f| f > *t))
        .map(|(p, t)| format!("partition {p}: from {} > to {t}", from.get(p).copied().unwrap_or_default()))
        .collect();
    anyhow::ensure!(inverted.is_empty(), "the input range is inverted: {}", inverted.join("; "));

    let input = Input::new(log.topic(), &from, &to);
    let run_id = RunIdentity {
        kind: RunKind::Close,
        day: &ctx.day_text(),
        time_zone: ctx.tz(),
        dedup_retention_ms: ctx.topology.dedup_retention_ms,
        input: &input,
        dedup_input: None,
        original_run_id: None,
    }
    .run_id();
    eprintln!("batch close {} ({}): run {run_id} over {}", ctx.day, ctx.tz(), input.describe());

    let mut fold = DayClose::new(ctx.day, tz).with_limits(ctx.topology.normalize);
    let mut progress = Progress::new(&format!("batch close {}", ctx.day), input.span());
    let dedup = DiskDedup::new(ctx.topology.dedup_retention_ms)?;
    for r in &input.ranges {
        close_range(&dedup.partition(r.partition)?, &mut fold, ctx.topology.normalize, |f| {
            log.read(r.partition, r.from, r.to, &mut progress, |_, _, value, append_ms| f(value, append_ms)).map(drop)
        })?;
    }
    progress.print();
    let run = Run { kind: RunKind::Close, run_id, original: None, previous: None, input, dedup_input: None };
    publish(&ctx, run, &fold, args.allow_empty, "batch.mid_close")
}

pub fn adjust(args: BatchAdjustArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&args.day)?;
    let day = ctx.day_text();
    let published = store::published(&ctx.settings, &ctx.topology.finance_manifest.topic, &day)?;
    let close =
        published.close.with_context(|| format!("{day} has no published close: run `tidemark batch close` first"))?;
    let mut mismatch = Vec::new();
    if close.input.topic != ctx.topology.orders.topic {
        mismatch.push(format!("input topic {} (topology: {})", close.input.topic, ctx.topology.orders.topic));
    }
    if close.time_zone != ctx.tz() {
        mismatch.push(format!("time zone {} (topology: {})", close.time_zone, ctx.tz()));
    }
    if close.dedup_retention_ms != ctx.topology.dedup_retention_ms {
        mismatch.push(format!(
            "dedup retention {} ms (topology: {} ms)",
            close.dedup_retention_ms, ctx.topology.dedup_retention_ms
        ));
    }
    if close.definition_version != DEFINITION_VERSION {
        mismatch.push(format!("definition v{} (this binary: v{DEFINITION_VERSION})", close.definition_version));
    }
    anyhow::ensure!(
        mismatch.is_empty(),
        "close {} of {day} was computed with {}: close the day again instead of adjusting it",
        close.run_id,
        mismatch.join(", ")
    );
    let chain = manifest::chain(&close, &published.adjustments).map_err(anyhow::Error::msg)?;
    let previous = chain.last().unwrap_or(&close);
    let base = previous.input.ends();

    let log = Log::open(&ctx.settings, &ctx.topology.orders.topic)?;
    let to = end_offsets(&log, args.to.as_deref(), || match &args.cutoff {
        Some(c) => parse_time("--cutoff", c),
        None => Ok(chrono::Utc::now().timestamp_millis()),
    })?;
    let behind: Vec<String> = base
        .iter()
        .filter(|(p, b)| to.get(p).is_some_and(|t| t < *b))
        .map(|(p, b)| format!("partition {p}: {} < {b}", to.get(p).copied().unwrap_or_default()))
        .collect();
    anyhow::ensure!(behind.is_empty(), "--to ends before run {} did: {}", previous.run_id, behind.join("; "));
    let input = Input::new(log.topic(), &base, &to);
    if input.span() == 0 {
        eprintln!("batch adjust {day}: nothing appended after run {}; no adjustment", previous.run_id);
        return Ok(());
    }
    let (fold, dedup_input) = fold_after(&ctx, &log, &close, &input, &format!("batch adjust {day}"))?;
    let run_id = RunIdentity {
        kind: RunKind::Adjustment,
        day: &day,
        time_zone: ctx.tz(),
        dedup_retention_ms: ctx.topology.dedup_retention_ms,
        input: &input,
        dedup_input: Some(&dedup_input),
        original_run_id: Some(&close.run_id),
    }
    .run_id();
    eprintln!(
        "batch adjust {day}: run {run_id} adjusts close {} after run {} over {}",
        close.run_id,
        previous.run_id,
        input.describe()
    );
    let run = Run {
        kind: RunKind::Adjustment,
        run_id,
        original: Some(close.run_id.clone()),
        previous: Some(previous.run_id.clone()),
        input,
        dedup_input: Some(dedup_input),
    };
    // An adjustment without rows still records that its range changed nothing.
    publish(&ctx, run, &fold, true, "batch.mid_adjust")
}

/// Folds the records of `input`, which continues the published `close` (directly or after
/// adjustments). The records already counted, `[close.from, input.from)`, are read again
/// first, only to learn which event ids they hold. Returns the fold and that dedup-only input.
fn fold_after(ctx: &Ctx, log: &Log, close: &Manifest, input: &Input, label: &str) -> anyhow::Result<(DayClose, Input)> {
    let dedup_input = Input::new(log.topic(), &close.input.starts(), &input.starts());
    let mut fold = DayClose::new(ctx.day, ctx.topology.finance_time_zone).with_limits(ctx.topology.normalize);
    let mut progress = Progress::new(label, dedup_input.span() + input.span());
    let known: BTreeMap<i32, (i64, i64)> = dedup_input.ranges.iter().map(|r| (r.partition, (r.from, r.to))).collect();
    let dedup = DiskDedup::new(ctx.topology.dedup_retention_ms)?;
    let limits = ctx.topology.normalize;
    for r in &input.ranges {
        let seen = dedup.partition(r.partition)?;
        if let Some((from, to)) = known.get(&r.partition) {
            let read = |f: &mut dyn FnMut(&[u8], i64)| {
                log.read(r.partition, *from, *to, &mut progress, |_, _, value, append_ms| f(value, append_ms)).map(drop)
            };
            let normalize = |value: &[u8], append_ms| normalize_order_with(Some(value), append_ms, limits);
            seen.fold(read, normalize, |scope, (event, append_ms)| fold.prime_normalized(scope, event, *append_ms))?;
        }
        close_range(&seen, &mut fold, limits, |f| {
            log.read(r.partition, r.from, r.to, &mut progress, |_, _, value, append_ms| f(value, append_ms)).map(drop)
        })?;
    }
    progress.print();
    Ok((fold, dedup_input))
}

/// Folds one partition's records (read by `read` in offset order) into the close, with the
/// partition's disk-backed dedup.
fn close_range(
    dedup: &PartitionDedup,
    fold: &mut DayClose,
    limits: NormalizeLimits,
    read: impl FnOnce(&mut dyn FnMut(&[u8], i64)) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let normalize = |value: &[u8], append_ms| normalize_order_with(Some(value), append_ms, limits);
    dedup.fold(read, normalize, |scope, (event, append_ms)| {
        fold.observe_normalized(scope, event, *append_ms);
    })
}

/// A computed run, before its manifest exists.
struct Run {
    kind: RunKind,
    run_id: String,
    original: Option<String>,
    previous: Option<String>,
    input: Input,
    dedup_input: Option<Input>,
}

/// Steps 4–6 of the module doc: stage, read back and validate, publish.
fn publish(ctx: &Ctx, run: Run, fold: &DayClose, allow_empty: bool, failpoint_name: &str) -> anyhow::Result<()> {
    let tally = fold.tally();
    let mut manifest = Manifest {
        kind: run.kind,
        run_id: run.run_id,
        original_run_id: run.original,
        previous_run_id: run.previous,
        business_day: ctx.day_text(),
        time_zone: ctx.tz().to_string(),
        dedup_retention_ms: ctx.topology.dedup_retention_ms,
        accounting: Accounting::new(tally, run.input.span()),
        input: run.input,
        dedup_input: run.dedup_input,
        definition_version: DEFINITION_VERSION,
        code_version: CODE_VERSION.to_string(),
        row_count: 0,
        checksum: String::new(),
    };
    let prefix = manifest.row_prefix();
    let rows: BTreeMap<String, Vec<u8>> = fold.rows().iter().map(|r| (r.key(&prefix), r.to_bytes())).collect();
    manifest.row_count = rows.len() as u64;
    manifest.checksum = manifest::checksum(&rows);

    let day = ctx.day_text();
    let current = store::published(&ctx.settings, &ctx.topology.finance_manifest.topic, &day)?;
    let same_key = match manifest.kind {
        RunKind::Close => current.close.as_ref(),
        RunKind::Adjustment => current.adjustments.iter().find(|m| m.run_id == manifest.run_id),
    };
    if let Some(old) = same_key {
        anyhow::ensure!(
            old.run_id != manifest.run_id || old.checksum == manifest.checksum,
            "run {} is published with checksum {} but this binary computes {}: a change of definitions needs a new DEFINITION_VERSION",
            old.run_id,
            old.checksum,
            manifest.checksum
        );
        if old.run_id != manifest.run_id {
            eprintln!("batch: run {} will replace the published close {}", manifest.run_id, old.run_id);
        }
    }

    let writer = store::Writer::new(&ctx.settings)?;
    writer.write(&ctx.topology.finance_close.topic, &rows)?;
    let problems = check_staged(ctx, &manifest, &rows, fold, allow_empty)?;
    anyhow::ensure!(
        problems.is_empty(),
        "run {} failed validation; nothing published:\n  {}",
        manifest.run_id,
        problems.join("\n  ")
    );
    failpoint::hit(failpoint_name);
    let record = BTreeMap::from([(manifest.key(), manifest.to_bytes())]);
    writer.write(&ctx.topology.finance_manifest.topic, &record)?;

    let a = &manifest.accounting;
    eprintln!(
        "batch: published {} as `{}`: {} row(s), {}; {} records: {} applied, {} without money, {} duplicates, {} of other days, {} dead letters, {} offset gaps",
        manifest.run_id,
        manifest.key(),
        manifest.row_count,
        manifest.checksum,
        a.records,
        a.applied,
        a.no_money,
        a.duplicates,
        a.out_of_day,
        a.dead_letters.values().sum::<u64>(),
        a.offset_gaps
    );
    println!("{}", String::from_utf8_lossy(&manifest.to_bytes()));
    Ok(())
}

/// Step 5: the staged rows as a reader sees them must be exactly the rows computed, and pass
/// [`finance::validate`]; the records read must fit the ranges.
fn check_staged(
    ctx: &Ctx,
    manifest: &Manifest,
    rows: &BTreeMap<String, Vec<u8>>,
    fold: &DayClose,
    allow_empty: bool,
) -> anyhow::Result<Vec<String>> {
    let prefix = manifest.row_prefix();
    let staged = store::rows(&ctx.settings, &ctx.topology.finance_close.topic, &prefix)?;
    let mut problems = Vec::new();
    for key in staged.keys().filter(|k| !rows.contains_key(*k)) {
        problems.push(format!("staged row `{key}` was not computed by this run"));
    }
    for (key, value) in rows {
        match staged.get(key) {
            None => problems.push(format!("row `{key}` is missing from {}", ctx.topology.finance_close.topic)),
            Some(v) if v != value => problems.push(format!("row `{key}` reads back different bytes")),
            Some(_) => {}
        }
    }
    let checksum = manifest::checksum(&staged);
    if checksum != manifest.checksum {
        problems.push(format!("staged rows have checksum {checksum}, computed {}", manifest.checksum));
    }
    let mut parsed = Vec::with_capacity(staged.len());
    for (key, value) in &staged {
        match serde_json::from_slice::<FinanceRow>(value) {
            Ok(row) if row.key(&prefix) == *key => parsed.push(row),
            Ok(row) => problems.push(format!("row `{key}` holds {}|{}", row.store, row.currency)),
            Err(e) => problems.push(format!("row `{key}` is not a finance row: {e}")),
        }
    }
    problems.extend(finance::validate(ctx.day, &parsed, fold.tally(), allow_empty));
    let span = manifest.input.span();
    if fold.tally().records > span {
        problems.push(format!("{} records read from {span} offsets", fold.tally().records));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yesterday_is_the_day_before_today_in_the_finance_time_zone() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T16:30:00Z").expect("time").to_utc();
        let tokyo = chrono_tz::Asia::Tokyo;
        assert_eq!(parse_day("today", tokyo, now).expect("day").to_string(), "2026-11-30");
        assert_eq!(parse_day("yesterday", tokyo, now).expect("day").to_string(), "2026-11-29");
        assert_eq!(parse_day("yesterday", chrono_tz::UTC, now).expect("day").to_string(), "2026-11-28");
        assert!(parse_day("2026-13-01", tokyo, now).is_err());
    }
}
