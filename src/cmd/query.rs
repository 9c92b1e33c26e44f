//! `tidemark query dashboard`: exact totals from the compacted dashboard topic.
//!
//! The topic holds one upsert stream per (window, store, currency, source partition); the
//! latest record of each key is its value (what compaction keeps). Totals of a window are the
//! sum of its partitions' partials; the combined `version` is the sum of the partial
//! versions, so it still grows with every applied event.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use rdkafka::Message;
use tidemark_topology::combine::{DashboardCombined, Latest};
use tidemark_topology::config;
use tidemark_topology::dashboard::DashboardRecord;

use crate::cli::{OutputFormat, QueryDashboardArgs};
use crate::kafka::reader::read_topic;
use crate::kafka::KafkaSettings;

/// Latest record per key of the dashboard topic.
pub fn latest_partials(settings: &KafkaSettings, topic: &str) -> anyhow::Result<BTreeMap<String, DashboardRecord>> {
    let mut latest = BTreeMap::new();
    for m in read_topic(settings, topic)? {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
        match m.payload() {
            Some(v) => {
                let rec: DashboardRecord = serde_json::from_slice(v).with_context(|| {
                    format!("{topic} partition {} offset {}: not a dashboard record", m.partition(), m.offset())
                })?;
                latest.insert(key, rec);
            }
            None => {
                latest.remove(&key);
            }
        }
    }
    Ok(latest)
}

/// Combined totals per window, store and currency: the same rows, by the same definition, as
/// the combined dashboard topic ([`Latest::combined`]), in key order.
pub fn combine<'a>(partials: impl IntoIterator<Item = &'a DashboardRecord>) -> Vec<DashboardCombined> {
    let mut keys: BTreeMap<(String, String, String), Latest<DashboardRecord>> = BTreeMap::new();
    for r in partials {
        keys.entry((r.window_start.clone(), r.store.clone(), r.currency.clone())).or_default().offer(r.clone());
    }
    keys.values().filter_map(Latest::combined).collect()
}

pub fn dashboard(args: QueryDashboardArgs, settings: &KafkaSettings) -> anyhow::Result<()> {
    let topology = config::load(&args.topology)?;
    let partials = latest_partials(settings, &topology.dashboard.topic)?;
    let keep = |store: &str, start: &str| {
        args.store.as_deref().is_none_or(|s| s == store)
            && args.from.as_deref().is_none_or(|f| start >= f)
            && args.to.as_deref().is_none_or(|t| start < t)
    };
    let mut stdout = std::io::stdout().lock();
    let json = args.format == OutputFormat::Json;
    if args.partials {
        for r in partials.values().filter(|r| keep(&r.store, &r.window_start)) {
            writeln!(stdout, "{}", serde_json::to_string(r)?)?;
        }
        return Ok(());
    }
    let totals = combine(partials.values().filter(|r| keep(&r.store, &r.window_start)));
    if json {
        for t in &totals {
            writeln!(stdout, "{}", serde_json::to_string(t)?)?;
        }
    } else {
        writeln!(
            stdout,
            "{:<24} {:<12} {:<4} {:>7} {:>8} {:>16} {:>14} {:>14} {:>16} {:>8}  as_of",
            "window_start", "store", "cur", "orders", "units", "gross", "cancelled", "refunded", "net", "version"
        )?;
        for t in &totals {
            writeln!(
                stdout,
                "{:<24} {:<12} {:<4} {:>7} {:>8} {:>16} {:>14} {:>14} {:>16} {:>8}  {}",
                t.window_start,
                t.store,
                t.currency,
                t.figures.orders,
                t.figures.units(),
                t.figures.gross,
                t.figures.cancelled,
                t.figures.refunded,
                t.net,
                t.version,
                t.as_of
            )?;
        }
        writeln!(stdout, "{} window(s) from {} partial(s)", totals.len(), partials.len())?;
    }
    Ok(())
}
