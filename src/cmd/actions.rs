//! `tidemark actions list` and `tidemark actions resend`: an operator's view of the outbox,
//! and the way back for actions an endpoint refused.
//!
//! `resend` never POSTs. It makes a failed row pending again, as the rule firing once made
//! it, and leaves the sending to the action runtime of the next `tidemark run`: one delivery
//! path (signing, retries, outcome, audit, dead letter) for first sends and re-sends alike.
//! It needs the store's lock, which the running processor holds, so a re-send can never race
//! the dispatcher over a row (docs/actions.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tidemark_state::{codec, PartitionId, StateError, Store, StoreOptions};
use tidemark_topology::config;

use crate::actions::AuditRecord;
use crate::cli::{ActionStateFilter, ActionsListArgs, ActionsResendArgs, ListFormat};
use crate::engine::outbox::{OutboxRow, RowState};

/// The audit `event` of a re-send request.
pub const RESEND_EVENT: &str = "resend";

/// A row's state as the listing and its filter name it.
fn state_name(s: &RowState) -> &'static str {
    match s {
        RowState::Pending => "pending",
        RowState::Delivered { .. } => "delivered",
        RowState::Conflict => "conflict",
        RowState::Failed { .. } => "failed",
        RowState::Shadow => "shadow",
    }
}

/// The endpoint's answer that settled the row, if any.
fn status(s: &RowState) -> Option<u16> {
    match s {
        RowState::Delivered { status } | RowState::Failed { status } => Some(*status),
        RowState::Conflict => Some(409),
        RowState::Pending | RowState::Shadow => None,
    }
}

fn wanted(filter: ActionStateFilter, s: &RowState) -> bool {
    match filter {
        ActionStateFilter::Open => matches!(s, RowState::Pending | RowState::Failed { .. }),
        ActionStateFilter::Pending => matches!(s, RowState::Pending),
        ActionStateFilter::Failed => matches!(s, RowState::Failed { .. }),
        ActionStateFilter::Shadow => matches!(s, RowState::Shadow),
        ActionStateFilter::Delivered => matches!(s, RowState::Delivered { .. }),
        ActionStateFilter::Conflict => matches!(s, RowState::Conflict),
        ActionStateFilter::All => true,
    }
}

/// Every readable outbox row of the store; unreadable ones are reported on stderr.
fn rows(store: &Store) -> anyhow::Result<Vec<(PartitionId, OutboxRow)>> {
    let mut out = Vec::new();
    for (p, (key, bytes)) in store.outbox_scan_all()? {
        match codec::decode::<OutboxRow>("outbox row", &bytes) {
            Ok(row) => out.push((p, row)),
            Err(e) => eprintln!("tidemark: {p}: unreadable outbox row {}: {e}", String::from_utf8_lossy(&key)),
        }
    }
    Ok(out)
}

fn no_store(dir: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        dir.join("CURRENT").is_file(),
        "no state store at {} (the --state-dir of `tidemark run`)",
        dir.display()
    );
    Ok(())
}

fn event_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Opens the store read-only. A compaction of the running processor can delete a file
/// between the open's read of the manifest and of that file; a new open sees the new files.
fn open_beside_writer(dir: &Path) -> Result<Store, StateError> {
    let mut tries = 0;
    loop {
        match Store::open_read_only(dir) {
            Err(StateError::Rocks { .. }) if tries < 3 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

pub fn list(args: ActionsListArgs) -> anyhow::Result<()> {
    no_store(&args.state_dir)?;
    let store = open_beside_writer(&args.state_dir)?;
    let mut shown: Vec<(PartitionId, OutboxRow)> = rows(&store)?
        .into_iter()
        .filter(|(_, r)| wanted(args.state, &r.state))
        .filter(|(_, r)| args.rule.as_ref().is_none_or(|x| *x == r.rule_id))
        .filter(|(_, r)| args.sku.as_ref().is_none_or(|x| *x == r.sku))
        .collect();
    shown.sort_by(|(_, a), (_, b)| (a.created_at_ms, &a.key).cmp(&(b.created_at_ms, &b.key)));
    match args.format {
        ListFormat::Json => {
            for (p, r) in &shown {
                println!("{}", json_line(*p, r));
            }
        }
        ListFormat::Table => print!("{}", table(&shown)),
    }
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, r) in &shown {
        *by_state.entry(state_name(&r.state)).or_default() += 1;
    }
    let counts: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!(
        "tidemark: {} action(s) shown{}",
        shown.len(),
        if counts.is_empty() { String::new() } else { format!(": {}", counts.join(", ")) }
    );
    Ok(())
}

/// One row as a JSON object. The payload is spliced in as stored, byte for byte, when it is
/// one line of JSON (it always is when tidemark wrote it); otherwise it is given as a string.
fn json_line(p: PartitionId, r: &OutboxRow) -> String {
    let fields = serde_json::json!({
        "key": r.key,
        "partition": p.partition,
        "rule_id": r.rule_id,
        "rule_version": r.rule_version,
        "mode": r.mode,
        "action": r.action,
        "sku": r.sku,
        "state": state_name(&r.state),
        "status": status(&r.state),
        "attempts": r.attempts,
        "created_at": event_time(r.created_at_ms),
    });
    let mut line = fields.to_string();
    line.pop();
    let raw = std::str::from_utf8(&r.payload)
        .ok()
        .filter(|s| !s.contains('\n') && serde_json::from_str::<serde_json::Value>(s).is_ok());
    let payload = match raw {
        Some(raw) => raw.to_string(),
        None => serde_json::Value::String(String::from_utf8_lossy(&r.payload).into_owned()).to_string(),
    };
    line.push_str(",\"payload\":");
    line.push_str(&payload);
    line.push('}');
    line
}

fn table(rows: &[(PartitionId, OutboxRow)]) -> String {
    let head = ["KEY", "RULE", "MODE", "SKU", "STATE", "STATUS", "ATTEMPTS", "PARTITION", "EVENT TIME"];
    let mut lines: Vec<[String; 9]> = vec![head.map(String::from)];
    for (p, r) in rows {
        lines.push([
            r.key.clone(),
            format!("{} v{}", r.rule_id, r.rule_version),
            r.mode.to_string(),
            r.sku.clone(),
            state_name(&r.state).to_string(),
            status(&r.state).map_or_else(|| "-".to_string(), |s| s.to_string()),
            r.attempts.to_string(),
            p.partition.to_string(),
            event_time(r.created_at_ms),
        ]);
    }
    let mut widths = [0usize; 9];
    for l in &lines {
        for (w, cell) in widths.iter_mut().zip(l) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The rows a re-send takes: every failed row named by `keys`, or every failed row with
/// `all_failed`. A key that names no row or a row that is not failed is an error, and all
/// of them are reported together, so a request is carried out whole or not at all.
fn select(
    rows: &[(PartitionId, OutboxRow)],
    keys: &[String],
    all_failed: bool,
) -> Result<Vec<(PartitionId, OutboxRow)>, Vec<String>> {
    let failed = |r: &OutboxRow| matches!(r.state, RowState::Failed { .. });
    if all_failed {
        return Ok(rows.iter().filter(|(_, r)| failed(r)).cloned().collect());
    }
    let mut chosen = Vec::new();
    let mut problems = Vec::new();
    for key in keys.iter().collect::<BTreeSet<_>>() {
        let found: Vec<&(PartitionId, OutboxRow)> = rows.iter().filter(|(_, r)| r.key == *key).collect();
        if found.is_empty() {
            problems.push(format!("{key}: no such action in this state directory"));
        }
        for (p, r) in found {
            match r.state {
                RowState::Failed { .. } => chosen.push((*p, r.clone())),
                RowState::Pending => problems.push(format!("{key}: already pending; the processor sends it")),
                other => {
                    problems.push(format!("{key}: is {} ({p}); only failed actions are re-sent", state_name(&other)))
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(chosen)
    } else {
        Err(problems)
    }
}

/// Re-sends failed actions:
/// 1. opens the store as its owner (topology and group), taking its lock: refused while a
///    processor runs on it, so the dispatcher never sees a row change under it;
/// 2. selects the rows (every named key must be a failed row, or nothing changes);
/// 3. audits each re-send (event `resend`) and waits for the broker's acknowledgement, so no
///    row becomes pending without its audit record;
/// 4. marks each row `Pending`, durably, with its key, payload and attempt count unchanged.
///
/// The next `tidemark run` on this directory finds the pending rows in its first outbox scan
/// and delivers them like any other action. A crash between 3 and 4 leaves an audit record
/// of a re-send that did not happen yet; running the command again completes it.
pub fn resend(args: ActionsResendArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let topology = config::load(&args.topology)?;
    let settings = crate::kafka::KafkaSettings::from_args(&args.kafka)?;
    no_store(&args.state_dir)?;
    let owner = format!("{}/{}", topology.name, args.group);
    let store = match Store::open(&args.state_dir, &StoreOptions { owner, ..StoreOptions::default() }) {
        Ok(s) => s,
        Err(StateError::Rocks { source, .. }) if source.to_string().to_lowercase().contains("lock") => {
            anyhow::bail!(
                "{} is in use by a running processor (its lock is held): stop it first, then re-send; \
                 `tidemark actions list` works beside it (docs/actions.md)",
                args.state_dir.display()
            )
        }
        Err(StateError::Owner { path, found, expected }) => anyhow::bail!(
            "{path} belongs to `{found}` (topology name/consumer group), not `{expected}`: pass the \
             --topology and --group of the processor that owns it"
        ),
        Err(e) => return Err(e.into()),
    };
    let all = rows(&store)?;
    let chosen = match select(&all, &args.keys, args.all_failed) {
        Ok(c) => c,
        Err(problems) => anyhow::bail!("nothing re-sent:\n  {}", problems.join("\n  ")),
    };
    if chosen.is_empty() {
        println!("no failed actions in {}", args.state_dir.display());
        return Ok(());
    }
    let producer: FutureProducer = settings
        .client_config()
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .context("audit producer")?;
    for (p, row) in chosen {
        let was = status(&row.state);
        let why = match (&args.reason, was) {
            (Some(r), Some(s)) => format!("was failed with {s}: {r}"),
            (Some(r), None) => r.clone(),
            (None, Some(s)) => format!("was failed with {s}"),
            (None, None) => "was failed".to_string(),
        };
        let rec = AuditRecord::of(&row, RESEND_EVENT, was, Some(why));
        let value = serde_json::to_vec(&rec)?;
        let record = FutureRecord::to(&topology.audit.topic).key(row.key.as_str()).payload(&value);
        rt.block_on(producer.send(record, Duration::from_secs(30))).map_err(|(e, _)| {
            anyhow::anyhow!("audit record of {} not delivered to {}: {e}", row.key, topology.audit.topic)
        })?;
        let pending = OutboxRow { state: RowState::Pending, ..row };
        store.outbox_update(p, &pending.key, &codec::encode(&pending)?, pending.index())?;
        println!("{}: pending again ({p}, {} attempt(s) so far)", pending.key, pending.attempts);
    }
    println!("the next `tidemark run` on {} sends them with the same key and payload", args.state_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, state: RowState) -> (PartitionId, OutboxRow) {
        (
            PartitionId::sku(3),
            OutboxRow {
                key: key.into(),
                rule_id: "low_stock".into(),
                rule_version: 1,
                mode: config::RuleMode::Notify,
                action: "replenish".into(),
                sku: "SKU-1".into(),
                payload: b"{}".to_vec(),
                state,
                attempts: 1,
                created_at_ms: 0,
                source_append_ms: 0,
                committed_wall_ms: 0,
            },
        )
    }

    fn outbox() -> Vec<(PartitionId, OutboxRow)> {
        vec![
            row("failed-1", RowState::Failed { status: 422 }),
            row("failed-2", RowState::Failed { status: 401 }),
            row("pending", RowState::Pending),
            row("done", RowState::Delivered { status: 200 }),
            row("shadow", RowState::Shadow),
        ]
    }

    fn keys(rows: &[(PartitionId, OutboxRow)]) -> Vec<&str> {
        rows.iter().map(|(_, r)| r.key.as_str()).collect()
    }

    #[test]
    fn the_json_listing_carries_the_payload_byte_for_byte() {
        let (p, mut r) = row("k", RowState::Failed { status: 422 });
        r.payload = br#"{"z":1,"a":[2, 3]}"#.to_vec();
        let line = json_line(p, &r);
        assert!(line.ends_with(r#","payload":{"z":1,"a":[2, 3]}}"#), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(v["status"], 422);
        r.payload = b"not json".to_vec();
        let v: serde_json::Value = serde_json::from_str(&json_line(p, &r)).expect("one JSON object");
        assert_eq!(v["payload"], "not json");
    }

    #[test]
    fn all_failed_takes_every_failed_row_and_nothing_else() {
        let chosen = select(&outbox(), &[], true).expect("selection");
        assert_eq!(keys(&chosen), ["failed-1", "failed-2"]);
    }

    #[test]
    fn a_named_key_is_taken_once_however_often_it_is_named() {
        let chosen = select(&outbox(), &["failed-2".into(), "failed-2".into()], false).expect("selection");
        assert_eq!(keys(&chosen), ["failed-2"]);
    }

    #[test]
    fn one_key_that_is_not_failed_refuses_the_whole_request_and_names_every_problem() {
        let asked: Vec<String> = ["failed-1", "pending", "done", "shadow", "missing"].map(String::from).to_vec();
        let problems = select(&outbox(), &asked, false).expect_err("refused");
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("pending: already pending")));
        assert!(problems.iter().any(|p| p.starts_with("done: is delivered")));
        assert!(problems.iter().any(|p| p.starts_with("shadow: is shadow")));
        assert!(problems.iter().any(|p| p.starts_with("missing: no such action")));
    }

    #[test]
    fn the_open_filter_shows_what_has_not_reached_the_endpoint() {
        let open: Vec<&str> = outbox()
            .iter()
            .filter(|(_, r)| wanted(ActionStateFilter::Open, &r.state))
            .map(|(_, r)| state_name(&r.state))
            .collect();
        assert_eq!(open, ["failed", "failed", "pending"]);
    }
}
