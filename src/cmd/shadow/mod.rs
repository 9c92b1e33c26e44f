//! `tidemark shadow --range ...`: stream, micro-batch and batch over one frozen history,
//! compared key by key (SPEC §2 "Shadow replay"; docs/modes.md).
//!
//! Each mode reads the range from the orders log itself, partition by partition, and runs
//! in process ([`replay`]): three passes over the log, nothing of it held in memory. The
//! action path ([`actions`]) replays the range with the inventory log twice, at the
//! stream's commit cadence and as one whole turn, in the in-memory topology driver. Five
//! comparisons ([`compare`]):
//! 1. dashboard rows, stream vs micro-batch — byte-identical expected;
//! 2. provisional finance rows, stream vs micro-batch — byte-identical expected;
//! 3. finance per day/store/currency, batch vs stream — explained only by the late output;
//! 4. dashboard per window/store/currency, batch vs stream — likewise;
//! 5. actions per idempotency key, stream vs batch cadence — key set and payload bytes
//!    identical expected.
//!    Only when the range and the inventory log hold at most `--actions-max-records`
//!    records (the driver holds them in memory); otherwise the report says it was not
//!    compared and why.
//!
//! Revision counts (how often each mode published a row) are reported, not compared: the
//! micro-batch replaces a row once per slice, the stream once per commit.
//! Exit code: 0 when every mismatch is explained, 3 when any is not, 1 on errors.

mod actions;
pub(crate) mod compare;
mod replay;

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;
use tidemark_topology::config;

use super::batch::range::{parse_offsets, Input, Log, Offsets, Progress};
use crate::cli::ShadowArgs;
use crate::engine::{SourceRecord, TaskConfig};
use actions::Cadence;
use compare::{exact, explained, Cause, Mismatch, Revisions, DASHBOARD_FIELDS, FINANCE_FIELDS};
use replay::Source;

/// Exit code when unexplained mismatches exist.
pub const UNEXPLAINED: u8 = 3;

#[derive(Serialize)]
struct ModeSummary {
    commits: u64,
    dashboard_rows: usize,
    finance_rows: usize,
    late_records: usize,
    dead_letters: u64,
}

#[derive(Serialize)]
struct BatchSummary {
    applied: u64,
    duplicates: u64,
    dead_letters: u64,
    finance_keys: usize,
    dashboard_keys: usize,
}

/// One replay of the action path.
#[derive(Serialize)]
struct ActionSummary {
    turns: usize,
    actions: usize,
    /// Records left in SKU merge buffers at the end (expected 0).
    buffered: usize,
}

#[derive(Serialize)]
struct ActionsSummary {
    /// The inventory records replayed with the orders (the whole inventory log at start).
    inventory_input: Input,
    /// False when the range was too large to replay the action path in memory.
    compared: bool,
    /// Why the action path was not compared (`--actions-max-records`).
    #[serde(skip_serializing_if = "Option::is_none")]
    not_compared: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<ActionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<ActionSummary>,
}

#[derive(Serialize)]
struct Comparison {
    name: &'static str,
    keys: usize,
    mismatches: usize,
    explained: usize,
}

#[derive(Serialize)]
struct Report<'a> {
    input: &'a Input,
    /// Offsets in the range (records, plus any gaps of transaction markers).
    records: u64,
    stream_commit_records: usize,
    slices: usize,
    stream: ModeSummary,
    microbatch: ModeSummary,
    batch: BatchSummary,
    actions: ActionsSummary,
    revisions_dashboard: Revisions,
    revisions_finance: Revisions,
    comparisons: Vec<Comparison>,
    mismatches: Vec<Mismatch>,
    unexplained: usize,
}

/// The range on the log, read with a progress line per pass.
struct LogSource<'a> {
    log: &'a Log,
    input: &'a Input,
}

impl Source for LogSource<'_> {
    fn ranges(&self) -> Vec<(i32, i64, i64)> {
        self.input.ranges.iter().map(|r| (r.partition, r.from, r.to)).collect()
    }

    fn read(&self, partition: i32, from: i64, to: i64, f: &mut dyn FnMut(SourceRecord<'_>)) -> anyhow::Result<()> {
        let mut progress = Progress::new(
            &format!("shadow: {}/{partition} [{from}, {to})", self.log.topic()),
            u64::try_from(to - from).unwrap_or(0),
        );
        self.log.read(partition, from, to, &mut progress, |offset, key, value, append_ms| {
            f(SourceRecord { key, value: Some(value), append_ms, offset });
        })?;
        Ok(())
    }
}

pub fn run(args: ShadowArgs) -> anyhow::Result<ExitCode> {
    let topology = config::load(&args.topology)?;
    let settings = crate::kafka::KafkaSettings::from_args(&args.kafka)?;
    let log = Log::open(&settings, &topology.orders.topic)?;
    let to: Offsets = if args.range == "end" {
        log.watermarks().iter().map(|(p, (_, high))| (*p, *high)).collect()
    } else {
        parse_offsets("--range", &args.range)?
    };
    let from: Offsets = match &args.from {
        Some(spec) => parse_offsets("--from", spec)?,
        None => log.watermarks().iter().map(|(p, (low, _))| (*p, *low)).collect(),
    };
    log.check_offsets("--range", &to)?;
    log.check_offsets("--from", &from)?;
    let input = Input::new(log.topic(), &from, &to);
    for r in &input.ranges {
        anyhow::ensure!(r.from <= r.to, "partition {}: --from {} is after --range {}", r.partition, r.from, r.to);
    }

    let records = input.span();
    let source = LogSource { log: &log, input: &input };
    let cfg = TaskConfig::from_topology(&topology, 0);
    eprintln!("shadow: stream replay (commit every {} records per partition)", args.stream_commit_records);
    let stream = replay::stream(&source, &cfg, args.stream_commit_records)?;
    eprintln!("shadow: micro-batch replay ({} slices)", args.slices);
    let micro = replay::microbatch(&source, &cfg, args.slices, topology.max_batch_records)?;
    eprintln!("shadow: batch fold");
    let batch = replay::batch(&source, &cfg)?;

    let inventory_log = Log::open(&settings, &topology.inventory.topic)?;
    let low: Offsets = inventory_log.watermarks().iter().map(|(p, (low, _))| (*p, *low)).collect();
    let high: Offsets = inventory_log.watermarks().iter().map(|(p, (_, high))| (*p, *high)).collect();
    let inventory_input = Input::new(inventory_log.topic(), &low, &high);
    let inventory = LogSource { log: &inventory_log, input: &inventory_input };
    // The driver holds every record of both logs and every output in memory: a range that
    // would not fit is reported as not compared, never silently skipped.
    let action_records = records + inventory_input.span();
    let (action_runs, not_compared) = if action_records <= args.actions_max_records {
        eprintln!(
            "shadow: action path, stream cadence (at most {} records per partition a turn)",
            args.stream_commit_records
        );
        let stream_actions =
            actions::replay(&source, &inventory, &topology, Cadence::EveryRecords(args.stream_commit_records))?;
        eprintln!("shadow: action path, batch cadence (the whole range in the first turn)");
        let batch_actions = actions::replay(&source, &inventory, &topology, Cadence::Whole)?;
        (Some((stream_actions, batch_actions)), None)
    } else {
        let why = format!(
            "the orders range and the inventory log hold {action_records} records, more than \
             --actions-max-records {}: the action replay holds every record in memory",
            args.actions_max_records
        );
        eprintln!("shadow: action path NOT compared: {why}");
        (None, Some(why))
    };

    let (stream_fin, stream_dash) = replay::summed(&stream)?;
    let (late_fin, late_dash) = replay::late_contributions(&stream, &cfg);
    let late =
        |figures| Cause { name: "late_output", adds: false, what: "beyond the stream's window retention", figures };
    let mut groups: Vec<(&'static str, usize, Vec<Mismatch>)> = vec![
        (
            "dashboard rows: stream vs micro-batch",
            stream.dashboard.last.len(),
            exact("dashboard stream/microbatch", "row", &stream.dashboard.last, &micro.dashboard.last),
        ),
        (
            "finance rows: stream vs micro-batch",
            stream.finance.last.len(),
            exact("finance stream/microbatch", "row", &stream.finance.last, &micro.finance.last),
        ),
        (
            "finance per day/store/currency: batch vs stream",
            batch.finance.len().max(stream_fin.len()),
            explained("finance batch/stream", &FINANCE_FIELDS, &batch.finance, &stream_fin, &[late(&late_fin)]),
        ),
        (
            "dashboard per window/store/currency: batch vs stream",
            batch.dashboard.len().max(stream_dash.len()),
            explained("dashboard batch/stream", &DASHBOARD_FIELDS, &batch.dashboard, &stream_dash, &[late(&late_dash)]),
        ),
    ];
    if let Some((stream_actions, batch_actions)) = &action_runs {
        groups.push((
            "actions per idempotency key: stream vs batch",
            stream_actions.payloads.len().max(batch_actions.payloads.len()),
            exact("actions stream/batch", "payload", &stream_actions.payloads, &batch_actions.payloads),
        ));
    }
    let mut comparisons = Vec::new();
    let mut mismatches = Vec::new();
    for (name, keys, found) in groups {
        comparisons.push(Comparison {
            name,
            keys,
            mismatches: found.len(),
            explained: found.iter().filter(|m| m.explained).count(),
        });
        mismatches.extend(found);
    }
    let unexplained = mismatches.iter().filter(|m| !m.explained).count();
    let summary = |p: &replay::Published| ModeSummary {
        commits: p.commits,
        dashboard_rows: p.dashboard.last.len(),
        finance_rows: p.finance.last.len(),
        late_records: p.late.len(),
        dead_letters: p.dead_letters,
    };
    let report = Report {
        input: &input,
        records,
        stream_commit_records: args.stream_commit_records,
        slices: args.slices,
        stream: summary(&stream),
        microbatch: summary(&micro),
        batch: BatchSummary {
            applied: batch.applied,
            duplicates: batch.duplicates,
            dead_letters: batch.dead_letters,
            finance_keys: batch.finance.len(),
            dashboard_keys: batch.dashboard.len(),
        },
        actions: ActionsSummary {
            compared: action_runs.is_some(),
            not_compared,
            stream: action_runs.as_ref().map(|(s, _)| action_summary(s)),
            batch: action_runs.as_ref().map(|(_, b)| action_summary(b)),
            inventory_input,
        },
        revisions_dashboard: Revisions::of(&stream.dashboard.revisions, &micro.dashboard.revisions),
        revisions_finance: Revisions::of(&stream.finance.revisions, &micro.finance.revisions),
        comparisons,
        mismatches,
        unexplained,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    print_report(&report)?;
    Ok(if unexplained == 0 { ExitCode::SUCCESS } else { ExitCode::from(UNEXPLAINED) })
}

fn action_summary(a: &actions::Actions) -> ActionSummary {
    ActionSummary { turns: a.turns, actions: a.payloads.len(), buffered: a.buffered }
}

fn print_report(r: &Report<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "shadow replay of {} ({} records)", r.input.describe(), r.records)?;
    writeln!(
        out,
        "  stream:      {} commits (every {} records per partition), {} dashboard rows, {} finance rows, {} late, {} dead letters",
        r.stream.commits,
        r.stream_commit_records,
        r.stream.dashboard_rows, r.stream.finance_rows, r.stream.late_records, r.stream.dead_letters
    )?;
    writeln!(
        out,
        "  micro-batch: {} commits (at least {} slices per partition, at most 1,000,000 records each), {} dashboard rows, {} finance rows, {} late, {} dead letters",
        r.microbatch.commits,
        r.slices,
        r.microbatch.dashboard_rows,
        r.microbatch.finance_rows,
        r.microbatch.late_records,
        r.microbatch.dead_letters
    )?;
    writeln!(
        out,
        "  batch:       {} events applied, {} duplicates, {} dead letters, {} finance keys, {} dashboard keys",
        r.batch.applied, r.batch.duplicates, r.batch.dead_letters, r.batch.finance_keys, r.batch.dashboard_keys
    )?;
    match (&r.actions.stream, &r.actions.batch, &r.actions.not_compared) {
        (Some(a), Some(b), _) => writeln!(
            out,
            "  actions:     stream cadence {} turns, {} actions; batch cadence {} turns, {} actions; {} left buffered (inventory {})",
            a.turns,
            a.actions,
            b.turns,
            b.actions,
            a.buffered + b.buffered,
            r.actions.inventory_input.describe()
        )?,
        (_, _, why) => writeln!(out, "  actions:     NOT COMPARED: {}", why.as_deref().unwrap_or("not replayed"))?,
    }
    for (what, rev) in [("dashboard", &r.revisions_dashboard), ("finance", &r.revisions_finance)] {
        writeln!(
            out,
            "  revisions ({what}): stream {} (≤ {} per key), micro-batch {} (≤ {} per key) over {} keys — expected to differ: one per commit vs one per slice",
            rev.stream, rev.max_per_key_stream, rev.microbatch, rev.max_per_key_microbatch, rev.keys
        )?;
    }
    for c in &r.comparisons {
        writeln!(
            out,
            "  {:<54} {:>6} keys  {:>4} mismatches ({} explained)",
            c.name, c.keys, c.mismatches, c.explained
        )?;
    }
    for m in &r.mismatches {
        writeln!(
            out,
            "    [{}] {} {}: {} vs {} — {}",
            m.comparison,
            m.key,
            m.field,
            m.left,
            m.right,
            m.reasons.join("; ")
        )?;
    }
    writeln!(
        out,
        "{}",
        if r.unexplained == 0 {
            "result: every mismatch explained".to_string()
        } else {
            format!("result: {} UNEXPLAINED mismatch(es)", r.unexplained)
        }
    )?;
    Ok(())
}
