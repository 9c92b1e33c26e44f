//! `tidemark batch shadow`: the stream's dashboard against the published finance close of a
//! day, key by key (store and currency), field by field, every difference with its reason.
//!
//! The stream's figures of a day are the sum of its dashboard partials over the windows
//! inside the day; `events` is the sum of their versions (one per applied event). They may
//! differ from the batch's for two known reasons, both measured from the log:
//! - `late_output`: events the stream sent to the late topic (beyond window retention),
//!   which the batch counts;
//! - `after_close`: events appended after the close's (or last adjustment's) range, which the
//!   stream may already have applied (`tidemark batch adjust` would add them).
//!
//! A difference is explained when `stream = batch + after_close − late_output` for that
//! field; anything else is `unexplained` and fails the command.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::Context as _;
use rdkafka::message::Headers;
use rdkafka::Message;
use serde::Serialize;
use tidemark_topology::finance::{contribution, day_bounds_ms, FinanceRow};
use tidemark_topology::normalize::normalize_order_with;

use super::manifest;
use super::range::{Input, Log};
use super::show::{adjusted, load};
use super::{fold_after, store, Ctx};
use crate::cli::{BatchShadowArgs, OutputFormat};
use crate::cmd::query::latest_partials;
use crate::cmd::shadow::compare::{explained, Cause, Compared, Mismatch, FINANCE_FIELDS};
use crate::engine::output::headers;
use crate::kafka::reader::read_topic;

/// `(store, currency)`.
type Key = (String, String);

fn of_row(r: &FinanceRow) -> Compared {
    Compared::of_finance(&r.figures, r.net)
}

fn by_key<'a>(rows: impl IntoIterator<Item = &'a FinanceRow>) -> BTreeMap<Key, Compared> {
    let mut out: BTreeMap<Key, Compared> = BTreeMap::new();
    for r in rows {
        out.entry((r.store.clone(), r.currency.clone())).or_default().add(&of_row(r));
    }
    out
}

/// Batch against stream with the day's two causes (see the module doc).
fn compare(
    batch: &BTreeMap<Key, Compared>,
    stream: &BTreeMap<Key, Compared>,
    after_close: &BTreeMap<Key, Compared>,
    late: &BTreeMap<Key, Compared>,
) -> Vec<Mismatch<Key>> {
    let causes = [
        Cause { name: "after_close", adds: true, what: "appended after the close's range", figures: after_close },
        Cause { name: "late_output", adds: false, what: "beyond the stream's window retention", figures: late },
    ];
    explained("finance batch/stream", &FINANCE_FIELDS, batch, stream, &causes)
}

/// How this command shows a [`Mismatch`]: the key as `store` and `currency`, the sides by name.
#[derive(Serialize)]
struct DayMismatch<'a> {
    store: &'a str,
    currency: &'a str,
    field: &'a str,
    batch: &'a str,
    stream: &'a str,
    /// `late_output`, `after_close` (with their amounts), or `unexplained`.
    reasons: &'a [String],
    explained: bool,
}

impl<'a> From<&'a Mismatch<Key>> for DayMismatch<'a> {
    fn from(m: &'a Mismatch<Key>) -> Self {
        DayMismatch {
            store: &m.key.0,
            currency: &m.key.1,
            field: m.field,
            batch: &m.left,
            stream: &m.right,
            reasons: &m.reasons,
            explained: m.explained,
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    business_day: String,
    close_run_id: &'a str,
    adjustments: usize,
    /// The records after the batch's range that were read to explain differences.
    after_close_input: &'a Input,
    keys: usize,
    mismatches: Vec<DayMismatch<'a>>,
    unexplained: usize,
}

pub fn shadow(args: BatchShadowArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&args.day)?;
    let day = ctx.day_text();
    let tz = ctx.topology.finance_time_zone;
    let (start_ms, end_ms) = day_bounds_ms(ctx.day, tz).with_context(|| format!("{day} has no bounds in {tz}"))?;
    let size = ctx.topology.dashboard_window.size_ms;
    anyhow::ensure!(
        start_ms.rem_euclid(size) == 0 && end_ms.rem_euclid(size) == 0,
        "dashboard windows of {size} ms do not align with {day} in {tz}: the stream's figures of the day cannot be summed"
    );

    // Batch: the published close and its adjustments.
    let published = store::published(&ctx.settings, &ctx.topology.finance_manifest.topic, &day)?;
    let close = published.close.with_context(|| format!("{day} has no published close"))?;
    let chain = manifest::chain(&close, &published.adjustments).map_err(anyhow::Error::msg)?;
    let previous_end = chain.last().unwrap_or(&close).input.ends();
    let mut runs = Vec::new();
    for m in chain {
        runs.push(load(&ctx, m)?.0);
    }
    let (close_view, _) = load(&ctx, close.clone())?;
    let batch = by_key(&adjusted(&close_view, &runs));

    // The log after the batch's range, up to its end now.
    let log = Log::open(&ctx.settings, &ctx.topology.orders.topic)?;
    let end = log.watermarks().iter().map(|(p, (_, high))| (*p, *high)).collect();
    let tail = Input::new(log.topic(), &previous_end, &end);
    let after_close = if tail.span() == 0 {
        BTreeMap::new()
    } else {
        let (fold, _) = fold_after(&ctx, &log, &close, &tail, &format!("batch shadow {day}: after the close"))?;
        by_key(&fold.rows())
    };

    // Stream: dashboard partials of windows inside the day.
    let mut stream: BTreeMap<Key, Compared> = BTreeMap::new();
    for r in latest_partials(&ctx.settings, &ctx.topology.dashboard.topic)?.values() {
        let start = chrono::DateTime::parse_from_rfc3339(&r.window_start)
            .with_context(|| format!("dashboard window_start {}", r.window_start))?
            .timestamp_millis();
        if start >= start_ms && start < end_ms {
            // The dashboard's `version` counts the events it applied: finance's `events`.
            let f = Compared::finance(
                r.figures.orders,
                r.version,
                r.figures.gross,
                r.figures.cancelled,
                r.figures.refunded,
                r.net,
            );
            stream.entry((r.store.clone(), r.currency.clone())).or_default().add(&f);
        }
    }

    // Late output: events of the day the stream did not aggregate (deduplicated by source).
    let mut late: BTreeMap<Key, Compared> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for m in read_topic(&ctx.settings, &ctx.topology.late.topic)? {
        let header = |name: &str| {
            m.headers()
                .and_then(|h| h.iter().find(|h| h.key == name).and_then(|h| h.value))
                .map(String::from_utf8_lossy)
        };
        if header(headers::SOURCE_TOPIC).as_deref() != Some(ctx.topology.orders.topic.as_str()) {
            continue;
        }
        let parse = |name: &str| header(name).and_then(|v| v.parse::<i64>().ok());
        let (Some(partition), Some(offset), Some(append_ms)) =
            (parse(headers::SOURCE_PARTITION), parse(headers::SOURCE_OFFSET), parse(headers::SOURCE_APPEND_MS))
        else {
            continue;
        };
        if !seen.insert((partition, offset)) {
            continue;
        }
        let Ok(event) = normalize_order_with(m.payload(), append_ms, ctx.topology.normalize) else { continue };
        let Some((event_day, key, agg)) = contribution(&event, tz) else { continue };
        if event_day != ctx.day {
            continue;
        }
        let row = FinanceRow::new(ctx.day, &key, &agg);
        late.entry((row.store.clone(), row.currency.clone())).or_default().add(&of_row(&row));
    }

    let found = compare(&batch, &stream, &after_close, &late);
    let mismatches: Vec<DayMismatch<'_>> = found.iter().map(DayMismatch::from).collect();
    let unexplained = mismatches.iter().filter(|m| !m.explained).count();
    let keys: BTreeSet<&Key> = batch.keys().chain(stream.keys()).collect();
    let report = Report {
        business_day: day.clone(),
        close_run_id: &close.run_id,
        adjustments: runs.len(),
        after_close_input: &tail,
        keys: keys.len(),
        mismatches,
        unexplained,
    };
    let mut out = std::io::stdout().lock();
    match args.format {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string(&report)?)?,
        OutputFormat::Table => {
            writeln!(
                out,
                "shadow {day}: close {} + {} adjustment(s) vs the stream's dashboard; {} key(s), {} differing field(s), {} unexplained",
                report.close_run_id,
                report.adjustments,
                report.keys,
                report.mismatches.len(),
                report.unexplained
            )?;
            for m in &report.mismatches {
                writeln!(
                    out,
                    "  {:<12} {:<4} {:<10} batch {:>16} stream {:>16}  {}",
                    m.store,
                    m.currency,
                    m.field,
                    m.batch,
                    m.stream,
                    m.reasons.join("; ")
                )?;
            }
        }
    }
    anyhow::ensure!(unexplained == 0, "{unexplained} unexplained difference(s) between stream and batch for {day}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    fn fig(orders: u64, gross: i64) -> Compared {
        Compared::finance(orders, orders, Decimal::from(gross), Decimal::ZERO, Decimal::ZERO, Decimal::from(gross))
    }

    fn map(entries: &[(&str, Compared)]) -> BTreeMap<Key, Compared> {
        entries.iter().map(|(s, f)| ((s.to_string(), "JPY".to_string()), f.clone())).collect()
    }

    #[test]
    fn equal_figures_give_no_mismatch() {
        let m = map(&[("a", fig(2, 100))]);
        assert!(compare(&m, &m, &BTreeMap::new(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_mismatch_shows_as_store_currency_batch_and_stream_in_the_day_report() {
        let batch = map(&[("a", fig(3, 300))]);
        let late = map(&[("a", fig(1, 100))]);
        let after = map(&[("a", fig(2, 50))]);
        let stream = map(&[("a", fig(4, 250))]);
        let got = compare(&batch, &stream, &after, &late);
        assert!(got.iter().all(|m| m.explained), "{got:?}");
        let gross = got.iter().find(|m| m.field == "gross").expect("gross");
        let json = serde_json::to_string(&DayMismatch::from(gross)).expect("json");
        assert_eq!(
            json,
            r#"{"store":"a","currency":"JPY","field":"gross","batch":"300","stream":"250","reasons":["after_close: +50 appended after the close's range","late_output: −100 beyond the stream's window retention"],"explained":true}"#
        );
    }

    #[test]
    fn a_difference_nothing_accounts_for_is_unexplained_and_names_the_key() {
        let got = compare(&map(&[("a", fig(1, 10))]), &map(&[("b", fig(1, 10))]), &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|m| !m.explained && m.reasons[0].starts_with("unexplained")));
        assert!(got.iter().any(|m| m.key.0 == "a") && got.iter().any(|m| m.key.0 == "b"));
        assert_eq!(got[0].reasons, ["unexplained: stream − batch = -1, after_close 0, late_output 0"]);
    }
}
