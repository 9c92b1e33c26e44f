//! `tidemark batch show`: the published close of a day as a reader sees it — the manifest,
//! then the rows of its run id, then the chain of adjustments and the adjusted totals.
//! Checksums are verified before anything is printed.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use rust_decimal::Decimal;
use serde::Serialize;
use tidemark_topology::currency::Currency;
use tidemark_topology::figures::Figures;
use tidemark_topology::finance::FinanceRow;

use super::manifest::{self, Manifest};
use super::{store, Ctx};
use crate::cli::{BatchShowArgs, ShowFormat};

/// A published run with its verified rows.
#[derive(Serialize)]
pub(super) struct RunView {
    pub(super) manifest: Manifest,
    pub(super) rows: Vec<FinanceRow>,
}

#[derive(Serialize)]
struct DayView {
    close: RunView,
    adjustments: Vec<RunView>,
    /// The close plus every adjustment, per store and currency.
    adjusted: Vec<FinanceRow>,
}

pub(super) fn load(ctx: &Ctx, m: Manifest) -> anyhow::Result<(RunView, Vec<u8>)> {
    let rows = store::rows(&ctx.settings, &ctx.topology.finance_close.topic, &m.row_prefix())?;
    let checksum = manifest::checksum(&rows);
    anyhow::ensure!(
        checksum == m.checksum && rows.len() as u64 == m.row_count,
        "run {}: {} row(s) with checksum {checksum} but the manifest says {} row(s) with {}",
        m.run_id,
        rows.len(),
        m.row_count,
        m.checksum
    );
    let mut lines = Vec::new();
    let mut parsed = Vec::with_capacity(rows.len());
    for (key, value) in &rows {
        parsed.push(serde_json::from_slice(value).with_context(|| format!("row `{key}` is not a finance row"))?);
        lines.extend_from_slice(value);
        lines.push(b'\n');
    }
    Ok((RunView { manifest: m, rows: parsed }, lines))
}

pub(super) fn adjusted(close: &RunView, adjustments: &[RunView]) -> Vec<FinanceRow> {
    let mut totals: BTreeMap<(String, String), FinanceRow> = BTreeMap::new();
    for r in close.rows.iter().chain(adjustments.iter().flat_map(|a| a.rows.iter())) {
        let t = totals.entry((r.store.clone(), r.currency.clone())).or_insert_with(|| FinanceRow {
            day: r.day.clone(),
            store: r.store.clone(),
            currency: r.currency.clone(),
            figures: Figures::default(),
            net: Decimal::ZERO,
        });
        t.figures.add(&r.figures);
        t.net += r.net;
    }
    for t in totals.values_mut() {
        if let Some(c) = Currency::from_code(&t.currency) {
            t.figures = t.figures.canonical(c);
            t.net = c.canonical(t.net);
        }
    }
    totals.into_values().collect()
}

pub fn show(args: BatchShowArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&args.day)?;
    let day = ctx.day_text();
    let published = store::published(&ctx.settings, &ctx.topology.finance_manifest.topic, &day)?;
    let close = published.close.with_context(|| format!("{day} has no published close"))?;
    let chain = manifest::chain(&close, &published.adjustments).map_err(anyhow::Error::msg)?;
    let (close, close_lines) = load(&ctx, close)?;
    let mut adjustments = Vec::new();
    for m in chain {
        adjustments.push(load(&ctx, m)?.0);
    }
    let view = DayView { adjusted: adjusted(&close, &adjustments), close, adjustments };
    let mut out = std::io::stdout().lock();
    match args.format {
        ShowFormat::Json => writeln!(out, "{}", serde_json::to_string(&view)?)?,
        // The close's rows exactly as published: `sha256sum` of this is the checksum.
        ShowFormat::Rows => out.write_all(&close_lines)?,
        ShowFormat::Table => table(&mut out, &view)?,
    }
    Ok(())
}

fn table(out: &mut impl Write, view: &DayView) -> std::io::Result<()> {
    let runs = std::iter::once(&view.close).chain(&view.adjustments);
    for (i, run) in runs.enumerate() {
        let m = &run.manifest;
        let a = &m.accounting;
        let title = match &m.previous_run_id {
            Some(previous) if i > 0 => format!("adjustment {} (after {previous})", m.run_id),
            _ => format!("close {}", m.run_id),
        };
        writeln!(
            out,
            "{title} of {} ({}), definition v{}, code {}: {} row(s), {} (verified)",
            m.business_day, m.time_zone, m.definition_version, m.code_version, m.row_count, m.checksum
        )?;
        writeln!(out, "  input {}", m.input.describe())?;
        writeln!(
            out,
            "  {} records: {} applied, {} without money, {} duplicates, {} of other days, {} dead letters {:?}, {} offset gaps",
            a.records,
            a.applied,
            a.no_money,
            a.duplicates,
            a.out_of_day,
            a.dead_letters.values().sum::<u64>(),
            a.dead_letters,
            a.offset_gaps
        )?;
        rows(out, &run.rows)?;
    }
    if !view.adjustments.is_empty() {
        writeln!(out, "adjusted totals ({} adjustment(s))", view.adjustments.len())?;
        rows(out, &view.adjusted)?;
    }
    Ok(())
}

fn rows(out: &mut impl Write, rows: &[FinanceRow]) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<12} {:<4} {:>8} {:>8} {:>18} {:>16} {:>16} {:>18}",
        "store", "cur", "orders", "events", "gross", "cancelled", "refunded", "net"
    )?;
    for r in rows {
        writeln!(
            out,
            "  {:<12} {:<4} {:>8} {:>8} {:>18} {:>16} {:>16} {:>18}",
            r.store,
            r.currency,
            r.figures.orders,
            r.figures.events(),
            r.figures.gross,
            r.figures.cancelled,
            r.figures.refunded,
            r.net
        )?;
    }
    Ok(())
}
