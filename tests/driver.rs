//! The topology end to end through the broker-free test driver (`tidemark::testkit::driver`):
//! the SKU merge, progress marks, idle promises, outbox keys and dedup, without a broker,
//! a clock or a sleep. Broker time is set by the test.

use std::collections::BTreeMap;

use tidemark::engine::derive::Derived;
use tidemark::engine::outbox::RowState;
use tidemark::engine::{Sink, Stats};
use tidemark::testkit::driver::{Partitions, TopologyDriver};
use tidemark_state::PartitionId;
use tidemark_topology::combine::DashboardCombined;
use tidemark_topology::config::{parse, Topology, EXAMPLE};
use tidemark_topology::dashboard::DashboardRecord;
use tidemark_topology::gen::{GenConfig, GenTopic, Generator};

/// 2026-11-28T10:00:00Z
const T0: i64 = 1_795_860_000_000;
/// `idle_skew` of the example topology.
const SKEW: i64 = 2_000;

/// The example topology with `rules` (TOML `[[rules]]` blocks) instead of its own.
fn topology(rules: &str) -> Topology {
    let cut = EXAMPLE.find("# Anomaly rules.").expect("rules section");
    let text = EXAMPLE[..cut]
        .replace("# action_url = \"https://inventory.internal/actions\"", "action_url = \"http://127.0.0.1:9/a\"")
        .replace("# notify_url = \"https://alerts.internal/notify\"", "notify_url = \"http://127.0.0.1:9/n\"")
        .replace("allow_unsigned = false", "allow_unsigned = true")
        + rules;
    let t = parse(&text, "driver-test.toml").expect("topology");
    assert_eq!(t.idle_skew_ms, SKEW);
    t
}

const STOCK_RULES: &str = r#"
[[rules]]
id = "oversell"
version = 1
mode = "act"

[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 10, replenish_to = 100 }

[[rules]]
id = "velocity_spike"
version = 1
mode = "shadow"
params = { min_units = 50, factor = "3.0", baseline_windows = 15 }
"#;

/// The example rules with thresholds that fire often on [`history`], and two rules declared
/// as expressions (docs/rules.md), one per trigger.
const FIRING_RULES: &str = r#"
[[rules]]
id = "oversell"
version = 1
mode = "act"

[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 25, replenish_to = 100 }

[[rules]]
id = "velocity_spike"
version = 1
mode = "act"
params = { min_units = 8, factor = "2.0", baseline_windows = 15 }

[[rules]]
kind = "expression"
id = "cover_below_two_days"
version = 1
mode = "notify"
trigger = "per_snapshot"
action = "notify"
preceding_windows = 59
params = { hours = 48 }
when = "available < params.hours * (window.units + preceding.units)"

[rules.evidence]
available = "available"
last_hour_units = "window.units + preceding.units"

[[rules]]
kind = "expression"
id = "burst"
version = 1
mode = "act"
trigger = "per_window"
action = "notify"
preceding_windows = 10
params = { factor = 2, min_units = 8 }
when = "window.units >= params.min_units && window.units > params.factor * preceding.max"

[rules.evidence]
window_units = "window.units"
mean = "round(preceding.mean, 2)"
"#;

fn order(event_id: &str, order: &str, kind: &str, t_ms: i64, sku: &str, qty: u32) -> Vec<u8> {
    format!(
        r#"{{"schema_version":2,"event_id":"{event_id}","order_id":"{order}","type":"{kind}","occurred_at_ms":{t_ms},"store_id":"tokyo-01","channel":"web","items":[{{"sku":"{sku}","quantity":{qty},"price":{{"amount_minor":1000,"currency":"JPY"}}}}]}}"#
    )
    .into_bytes()
}

fn snapshot(sku: &str, on_hand: i64, as_of: &str) -> Vec<u8> {
    format!(r#"{{"sku":"{sku}","on_hand":{on_hand},"as_of":"{as_of}"}}"#).into_bytes()
}

/// Every committed outbox row by key: (payload, state).
fn outbox(d: &TopologyDriver) -> BTreeMap<String, (Vec<u8>, RowState)> {
    d.outbox().expect("outbox").into_iter().map(|(_, r)| (r.key, (r.payload, r.state))).collect()
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).expect("json")
}

/// A record of the internal SKU repartition topic.
fn decode(bytes: &[u8]) -> Derived {
    Derived::decode(bytes).expect("repartition record")
}

#[test]
fn a_scripted_scenario_fires_exactly_the_expected_actions_and_shadow_rules_stay_in_the_outbox() {
    let t = topology(STOCK_RULES);
    let mut d = TopologyDriver::for_topology(&t, Partitions { orders: 1, inventory: 1, sku: 2, combine: 2 }, T0)
        .expect("driver");
    d.pipe_inventory(0, Some(b"SKU-A"), &snapshot("SKU-A", 5, "2026-11-28T10:00:00Z"));
    for (key, value) in [
        ("o1", order("e1", "o1", "ORDER_PLACED", T0 + 60_000, "SKU-A", 3)),
        ("o2", order("e2", "o2", "ORDER_PLACED", T0 + 61_000, "SKU-A", 4)),
        ("o2", order("e3", "o2", "ORDER_CANCELLED", T0 + 62_000, "SKU-A", 4)),
        ("o3", order("e4", "o3", "ORDER_PLACED", T0 + 120_000, "SKU-B", 60)),
        // The same event again: a duplicate must change nothing.
        ("o2", order("e2", "o2", "ORDER_PLACED", T0 + 61_000, "SKU-A", 4)),
    ] {
        d.advance(30);
        d.pipe_order(0, Some(key.as_bytes()), &value);
    }
    d.advance(10_000);
    d.run_until_quiet().expect("run");

    let rows = outbox(&d);
    let low = "low_stock:v1:SKU-A:snapshot:2026-11-28T10:00:00.000Z";
    let oversell = "oversell:v1:SKU-A:snapshot:2026-11-28T10:00:00.000Z";
    let spike = "velocity_spike:v1:SKU-B:window:2026-11-28T10:02:00.000Z";
    assert_eq!(rows.keys().map(String::as_str).collect::<Vec<_>>(), [low, oversell, spike], "exactly these rows");
    assert_eq!(
        (rows[low].1, rows[oversell].1, rows[spike].1),
        (RowState::Pending, RowState::Pending, RowState::Shadow)
    );
    let (o, l) = (json(&rows[oversell].0), json(&rows[low].0));
    assert_eq!(
        (o["action_id"].as_str(), o["sku"].as_str(), o["action"].as_str()),
        (Some(oversell), Some("SKU-A"), Some("stop_sale"))
    );
    assert_eq!(o["evidence"]["available"], -2);
    assert_eq!((l["action"].as_str(), l["sku"].as_str()), (Some("replenish"), Some("SKU-A")));
    let handed: Vec<&str> = d.actions().iter().map(|r| r.key.as_str()).collect();
    assert_eq!(handed.len(), 3, "each row handed to the dispatcher once: {handed:?}");
    assert_eq!(Stats::get(&d.stats().dedup_hits), 1, "the repeated e2");
}

/// A generated history with enough stock changes and spikes to fire every rule many times
/// (the history of `tests/actions.rs`, `common::GEN_ACTIONS`), partitioned by key.
fn history() -> Vec<(PartitionId, i64, String, Vec<u8>)> {
    let cfg = GenConfig {
        seed: 21,
        events: 6000,
        rate_per_s: 50.0,
        skus: 40,
        inventory_every: 150,
        target_event_bytes: 256,
        ..GenConfig::default()
    };
    let start = cfg.start_ms;
    Generator::new(cfg)
        .expect("generator")
        .map(|r| {
            let hash = r.key.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
            let id = match r.topic {
                GenTopic::Orders => PartitionId::orders((hash % 3) as i32),
                GenTopic::Inventory => PartitionId::inventory((hash % 2) as i32),
            };
            (id, start + r.due_ms, r.key, r.value)
        })
        .collect()
}

const PARTS: Partitions = Partitions { orders: 3, inventory: 2, sku: 3, combine: 2 };

fn driver_with(records: &[(PartitionId, i64, String, Vec<u8>)]) -> TopologyDriver {
    let t = topology(FIRING_RULES);
    let mut d = TopologyDriver::for_topology(&t, PARTS, records[0].1).expect("driver");
    for (id, at, key, value) in records {
        pipe(&mut d, *id, *at, key, value);
    }
    d.set_time(records[records.len() - 1].1 + 60_000);
    d
}

fn pipe(d: &mut TopologyDriver, id: PartitionId, at: i64, key: &str, value: &[u8]) {
    d.set_time(at);
    match id.source {
        PartitionId::ORDERS => d.pipe_order(id.partition, Some(key.as_bytes()), value),
        _ => d.pipe_inventory(id.partition, Some(key.as_bytes()), value),
    };
}

fn sku_ids() -> Vec<PartitionId> {
    (0..PARTS.sku).map(PartitionId::sku).collect()
}

/// What a run decided: every outbox row's key and payload bytes, and the final dashboard
/// and provisional finance rows.
type Outcome = (BTreeMap<String, Vec<u8>>, BTreeMap<Vec<u8>, Vec<u8>>, BTreeMap<Vec<u8>, Vec<u8>>);

fn outcome(d: &TopologyDriver) -> Outcome {
    let rows = outbox(d).into_iter().map(|(k, (payload, _))| (k, payload)).collect();
    (rows, d.compacted(Sink::Dashboard), d.compacted(Sink::Finance))
}

/// Outbox rows compared key by key: names the keys missing, extra or with other payload bytes
/// (a whole-map assertion prints megabytes of bytes).
fn assert_same_rows(got: &BTreeMap<String, Vec<u8>>, expected: &BTreeMap<String, Vec<u8>>, context: &str) {
    let missing: Vec<&String> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    let differ: Vec<&String> =
        got.iter().filter(|(k, v)| expected.get(*k).is_some_and(|e| e != *v)).map(|(k, _)| k).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{context}: missing {missing:?}, extra {extra:?}, other payload {differ:?}"
    );
}

fn assert_each_key_handed_over_once(d: &TopologyDriver) {
    let mut seen = std::collections::BTreeSet::new();
    for r in d.actions() {
        assert!(seen.insert(r.key.clone()), "{} handed to the dispatcher twice", r.key);
    }
}

#[test]
fn the_merge_gives_the_same_actions_byte_for_byte_whichever_upstream_runs_ahead() {
    let records = history();

    // All partitions polled together, everything in the log before the first turn.
    let mut together = driver_with(&records);
    together.run_until_quiet().expect("run");
    let reference = outcome(&together);
    assert!(reference.0.len() >= 10, "the history fires many actions, got {}", reference.0.len());
    for id in ["cover_below_two_days", "burst"] {
        assert!(reference.0.keys().any(|k| k.starts_with(&format!("{id}:v1:"))), "the expression rule {id} fired");
    }

    // The inventory first, then one orders partition at a time, the SKU tasks in between.
    let mut inventory_first = driver_with(&records);
    let inventory: Vec<PartitionId> = (0..PARTS.inventory).map(PartitionId::inventory).collect();
    inventory_first.step_only(&inventory, usize::MAX).expect("step");
    for p in [2, 0, 1] {
        for _ in 0..3 {
            inventory_first.step_only(&[PartitionId::orders(p)], usize::MAX).expect("step");
            inventory_first.step_only(&sku_ids(), usize::MAX).expect("step");
        }
    }
    inventory_first.run_until_quiet().expect("run");
    assert_eq!(outcome(&inventory_first), reference, "inventory first, orders one partition at a time");

    // Small fetches, orders[1] and the SKU tasks far behind the others.
    let mut ragged = driver_with(&records);
    let fast = [PartitionId::orders(0), PartitionId::orders(2), PartitionId::inventory(1)];
    for _ in 0..40 {
        ragged.step_only(&fast, 97).expect("step");
    }
    for turn in 0..400 {
        let mut ids = vec![PartitionId::orders(1), PartitionId::inventory(0)];
        if turn % 3 == 0 {
            ids.extend(sku_ids());
        }
        ragged.step_only(&ids, 13).expect("step");
    }
    ragged.run_until_quiet().expect("run");
    assert_eq!(outcome(&ragged), reference, "small fetches at different speeds");

    // Live: records arrive while the topology runs, and idle upstreams promise by time.
    let t = topology(FIRING_RULES);
    let mut live = TopologyDriver::for_topology(&t, PARTS, records[0].1).expect("driver");
    for (n, (id, at, key, value)) in records.iter().enumerate() {
        pipe(&mut live, *id, *at, key, value);
        if n % 50 == 49 {
            live.step().expect("step");
        }
    }
    live.advance(60_000);
    live.run_until_quiet().expect("run");
    assert_eq!(Stats::get(&live.stats().broken_promises), 0, "records arrive after their upstream's promise");
    assert_eq!(outcome(&live), reference, "live, with idle promises");

    for d in [&together, &inventory_first, &ragged, &live] {
        assert_each_key_handed_over_once(d);
        assert_eq!(d.actions().len(), reference.0.len());
    }
}

/// Everything a run wrote: every output sink's records and every internal log, in order, and
/// the actions in the order they were handed to the dispatcher.
type Written = Vec<Vec<(Option<Vec<u8>>, Vec<u8>)>>;

fn everything(d: &TopologyDriver) -> (Written, Vec<String>) {
    let mut written = Vec::new();
    for sink in
        [Sink::Dashboard, Sink::Finance, Sink::DeadLetter, Sink::Late, Sink::DashboardCombined, Sink::FinanceCombined]
    {
        written.push(d.records(sink).iter().map(|r| (r.key.clone(), r.value.clone())).collect());
    }
    for id in d.partitions() {
        written.push(d.log(id).iter().map(|r| (r.key.clone(), r.value.clone())).collect());
    }
    (written, d.actions().iter().map(|r| r.key.clone()).collect())
}

#[test]
fn tasks_ingesting_and_finishing_on_one_two_or_four_threads_give_the_same_logs_outputs_and_action_keys_byte_for_byte() {
    let records = history();
    let run = |threads: usize| {
        let mut d = driver_with(&records);
        d.set_threads(threads);
        // Uneven turns: some partitions far ahead, fetches of different sizes.
        let fast = [PartitionId::orders(0), PartitionId::orders(2), PartitionId::inventory(1)];
        for _ in 0..20 {
            d.step_only(&fast, 211).expect("step");
        }
        for turn in 0..60 {
            let ids = if turn % 2 == 0 { d.partitions() } else { sku_ids() };
            d.step_only(&ids, 97).expect("step");
        }
        d.run_until_quiet().expect("run");
        (everything(&d), outcome(&d))
    };
    let (one, reference) = run(1);
    assert!(reference.0.len() >= 10, "the history fires many actions, got {}", reference.0.len());
    assert!(!one.0[2].is_empty(), "the history has malformed events, dead-lettered at ingest");
    for threads in [2, 4] {
        let (many, decided) = run(threads);
        assert_eq!(decided, reference, "{threads} threads: the same outbox rows and compacted rows");
        assert!(many == one, "{threads} threads: every output and internal log byte for byte, actions in order");
    }
}

#[test]
fn tasks_that_finish_while_the_commit_before_is_still_being_written_decide_what_they_decide_after_it() {
    // Every seventh order event sent twice in a row (a producer retry): with one record per
    // partition per turn, the copy is judged while its original's batch is still in flight.
    let mut records = Vec::new();
    for (n, r) in history().into_iter().enumerate() {
        let again = (r.0.source == PartitionId::ORDERS && n % 7 == 0).then(|| r.clone());
        records.push(r);
        records.extend(again);
    }
    let mut serial = driver_with(&records);
    serial.run_until_quiet().expect("run");
    let reference = outcome(&serial);

    let mut overlapped = driver_with(&records);
    overlapped.set_overlapped(true);
    let orders: Vec<PartitionId> = (0..PARTS.orders).map(PartitionId::orders).collect();
    for _ in 0..records.len() / 2 {
        overlapped.step_only(&orders, 1).expect("step");
    }
    overlapped.run_until_quiet().expect("run");
    assert_eq!(outcome(&overlapped), reference, "the same outbox rows and compacted rows");
    assert_each_key_handed_over_once(&overlapped);
    assert_eq!(
        Stats::get(&overlapped.stats().dedup_hits),
        Stats::get(&serial.stats().dedup_hits),
        "every duplicate recognised, the one of the batch in flight too"
    );
    assert_eq!(
        Stats::get(&overlapped.stats().events_applied),
        Stats::get(&serial.stats().events_applied),
        "no event applied twice"
    );

    // A crash loses the batch in flight too: the replay gives the same keys again.
    let mut crashing = driver_with(&records);
    crashing.set_overlapped(true);
    for turn in 0..records.len() / 4 {
        if turn % 97 == 96 {
            crashing.crash().expect("crash");
        }
        let ids = if turn % 3 == 2 { sku_ids() } else { crashing.partitions() };
        crashing.step_only(&ids, 3).expect("step");
    }
    crashing.run_until_quiet().expect("run");
    assert_same_rows(&outcome(&crashing).0, &reference.0, "the same keys and payloads after crashes");
    assert_each_key_handed_over_once(&crashing);
}

#[test]
fn replaying_after_a_lost_commit_gives_the_same_keys_and_payloads_and_skips_applied_records() {
    let records = history();
    let mut clean = driver_with(&records);
    clean.run_until_quiet().expect("run");

    let mut crashing = driver_with(&records);
    for turn in 0..200 {
        let ids: Vec<PartitionId> = crashing.partitions();
        if turn % 4 == 3 {
            // Outputs (repartitioned lines, marks, dashboard rows) are published, the state
            // commit is lost: the next turns read every one of those records again.
            crashing.step_then_crash().expect("crash");
        } else {
            crashing.step_only(&ids, 50).expect("step");
        }
    }
    crashing.run_until_quiet().expect("run");
    assert_same_rows(&outcome(&crashing).0, &outcome(&clean).0, "the same keys and payloads");
    assert_each_key_handed_over_once(&crashing);
    assert!(
        Stats::get(&crashing.stats().dedup_hits) > Stats::get(&clean.stats().dedup_hits),
        "re-sent repartition records were recognised and skipped"
    );
}

#[test]
fn an_event_seen_in_an_earlier_commit_or_before_a_restart_is_applied_once() {
    let t = topology(STOCK_RULES);
    let mut d = TopologyDriver::for_topology(&t, Partitions { orders: 1, inventory: 1, sku: 1, combine: 2 }, T0)
        .expect("driver");
    let e1 = order("e1", "o1", "ORDER_PLACED", T0, "SKU-A", 2);
    d.pipe_order(0, Some(b"o1"), &e1);
    d.run_until_quiet().expect("run");
    let lines = |d: &TopologyDriver| {
        d.log(PartitionId::sku(0)).iter().filter(|r| matches!(decode(&r.value), Derived::Line { .. })).count()
    };
    assert_eq!((d.dashboard().len(), lines(&d)), (1, 1));

    d.advance(1_000);
    d.pipe_order(0, Some(b"o1"), &e1);
    d.run_until_quiet().expect("run");
    d.crash().expect("restart");
    d.advance(1_000);
    d.pipe_order(0, Some(b"o1"), &e1);
    d.run_until_quiet().expect("run");

    // The restarted orders task published its live row again (a task restored may hold rows
    // its last owner had not published): the same bytes, no revision.
    assert_eq!(d.dashboard().len(), 2);
    assert_eq!(d.dashboard()[1].value, d.dashboard()[0].value, "no dashboard revision for a duplicate");
    assert_eq!(lines(&d), 1, "no second line for the SKU");
    // One in a later commit, one after the restart; and the two partials published again
    // after the restart, which the combine task already had.
    assert_eq!(Stats::get(&d.stats().dedup_hits), 4);
    assert_eq!(json(&d.dashboard()[0].value)["units"], 2);
}

#[test]
fn a_sku_task_holds_lines_until_every_upstream_has_promised_past_them() {
    let t = topology(STOCK_RULES);
    let mut d = TopologyDriver::for_topology(&t, Partitions { orders: 2, inventory: 1, sku: 1, combine: 2 }, T0)
        .expect("driver");
    d.stall(PartitionId::orders(1));
    d.stall(PartitionId::inventory(0));
    d.pipe_order(0, Some(b"o1"), &order("e1", "o1", "ORDER_PLACED", T0, "SKU-A", 2));
    d.advance(60_000);
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 1, "orders[1] and inventory[0] have not promised anything");
    let marks: Vec<Derived> = d
        .log(PartitionId::sku(0))
        .iter()
        .map(|r| decode(&r.value))
        .filter(|v| matches!(v, Derived::Mark { .. }))
        .collect();
    let silent = marks.iter().filter(|m| !matches!(m, Derived::Mark { upstream: (0, 0), .. }));
    assert!(
        silent.into_iter().all(|m| matches!(m, Derived::Mark { bound, .. } if bound.append_ms < T0)),
        "the stalled upstreams promised nothing past their empty logs: {marks:?}"
    );

    d.unstall(PartitionId::inventory(0));
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 1, "orders[1] still silent");

    d.unstall(PartitionId::orders(1));
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 0, "every upstream promised past the line: released");
    assert_eq!(Stats::get(&d.stats().sku_inputs), 1);
}

#[test]
fn an_idle_upstream_releases_the_merge_once_broker_time_minus_the_skew_passes_the_line() {
    let t = topology(STOCK_RULES);
    let mut d = TopologyDriver::for_topology(&t, Partitions { orders: 1, inventory: 1, sku: 1, combine: 2 }, T0)
        .expect("driver");
    d.pipe_order(0, Some(b"o1"), &order("e1", "o1", "ORDER_PLACED", T0, "SKU-A", 2));
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 1, "inventory[0] promised only T0 - skew");

    d.advance(SKEW - 1);
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 1, "a promise of T0 - 1 ms does not pass a line appended at T0");

    d.advance(1);
    d.run_until_quiet().expect("run");
    assert_eq!(d.buffered(0), 0, "the promise reached T0: the line is released");
}

/// Per `window_start|store|currency`: orders, units and net of the per-partition rows.
type Totals = BTreeMap<String, (u64, u64, rust_decimal::Decimal, usize)>;

fn partition_totals(d: &TopologyDriver) -> Totals {
    let mut totals = Totals::new();
    for v in d.compacted(Sink::Dashboard).values() {
        let r: DashboardRecord = serde_json::from_slice(v).expect("dashboard row");
        let t = totals.entry(format!("{}|{}|{}", r.window_start, r.store, r.currency)).or_default();
        t.0 += r.figures.orders;
        t.1 += r.figures.count;
        t.2 += r.net;
        t.3 += 1;
    }
    totals
}

fn combined_totals(d: &TopologyDriver) -> Totals {
    d.compacted(Sink::DashboardCombined)
        .values()
        .map(|v| {
            let r: DashboardCombined = serde_json::from_slice(v).expect("combined row");
            let key = format!("{}|{}|{}", r.window_start, r.store, r.currency);
            (key, (r.figures.orders, r.figures.count, r.net, r.partitions))
        })
        .collect()
}

/// The final row of every key of a compacted sink, as text.
fn texts(d: &TopologyDriver, sink: Sink) -> BTreeMap<String, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    d.compacted(sink).iter().map(|(k, v)| (text(k), text(v))).collect()
}

#[test]
fn the_combined_dashboard_row_sums_the_latest_row_of_every_orders_partition_whatever_the_crash_history() {
    let records = history();
    let mut clean = driver_with(&records);
    clean.run_until_quiet().expect("run");
    let combined = combined_totals(&clean);
    assert!(combined.len() >= 5, "the history spans several windows, got {}", combined.len());
    assert!(combined.values().any(|t| t.3 == PARTS.orders as usize), "some window has rows of every partition");
    assert_eq!(combined, partition_totals(&clean), "each combined row is the sum of its partitions' latest rows");

    let mut crashing = driver_with(&records);
    for turn in 0..200 {
        let ids: Vec<PartitionId> = crashing.partitions();
        if turn % 5 == 4 {
            crashing.step_then_crash().expect("crash");
        } else {
            crashing.step_only(&ids, 40).expect("step");
        }
    }
    crashing.run_until_quiet().expect("run");
    assert_eq!(
        texts(&crashing, Sink::DashboardCombined),
        texts(&clean, Sink::DashboardCombined),
        "the same combined dashboard rows, byte for byte, after lost commits and replays"
    );
    assert_eq!(
        texts(&crashing, Sink::FinanceCombined),
        texts(&clean, Sink::FinanceCombined),
        "the same combined finance rows"
    );
    assert!(!clean.compacted(Sink::FinanceCombined).is_empty(), "the history closes provisional finance days");
}

#[test]
fn a_partial_sent_again_after_a_newer_one_changes_no_combined_row() {
    let records = history();
    let mut clean = driver_with(&records);
    clean.run_until_quiet().expect("run");

    // The orders tasks lose every third commit after publishing: their partials reach the
    // combine topic again, behind newer ones of the same key. The combine tasks commit all.
    let mut d = driver_with(&records);
    let orders: Vec<PartitionId> = (0..PARTS.orders).map(PartitionId::orders).collect();
    let rest: Vec<PartitionId> = d.partitions().into_iter().filter(|id| !orders.contains(id)).collect();
    for turn in 0..300 {
        if turn % 3 == 2 {
            d.step_only_then_crash(&orders, 60).expect("crash");
        } else {
            d.step_only(&orders, 60).expect("step");
        }
        d.step_only(&rest, usize::MAX).expect("step");
    }
    d.run_until_quiet().expect("run");

    let mut last: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for r in d.dashboard_combined() {
        let row: DashboardCombined = serde_json::from_slice(&r.value).expect("combined row");
        let key = r.key.clone().unwrap_or_default();
        if let Some(before) = last.insert(key, row.version) {
            assert!(
                row.version > before,
                "{} {} {}: combined version {} after {before}",
                row.window_start,
                row.store,
                row.currency,
                row.version
            );
        }
    }
    assert!(last.len() >= 5, "the history has combined rows, got {}", last.len());
    assert_eq!(texts(&d, Sink::DashboardCombined), texts(&clean, Sink::DashboardCombined));
}

/// The upstream tasks hand what they emit for SKU partitions of the same process to those
/// tasks in the same finish (`TaskSet::set_hand_over`): the log still gets every record.
#[test]
fn with_the_hand_over_an_order_s_action_is_committed_in_the_turn_that_reads_the_order() {
    let records = history();
    let mut reference = driver_with(&records);
    reference.set_hand_over(false);
    reference.run_until_quiet().expect("run");
    let all = outcome(&reference);

    // The first half ran; the second half arrives, and one turn reads it.
    let (first, second) = records.split_at(records.len() / 2);
    let one_turn = |hand_over: bool| {
        let mut d = driver_with(first);
        d.set_hand_over(hand_over);
        d.run_until_quiet().expect("run");
        let before = d.actions().len();
        for (id, at, key, value) in second {
            pipe(&mut d, *id, *at, key, value);
        }
        d.set_time(records[records.len() - 1].1 + 60_000);
        d.step().expect("step");
        let after_one = d.actions().len();
        d.run_until_quiet().expect("run");
        (before, after_one, d)
    };
    let (before, after_one, by_log) = one_turn(false);
    assert!(before < all.0.len(), "the second half fires actions");
    assert_eq!(after_one, before, "read from the log, the lines reach their SKU tasks a turn later");
    assert_eq!(outcome(&by_log), all);

    let (before, after_one, handed) = one_turn(true);
    assert_eq!(after_one, all.0.len(), "every action of the second half committed in the turn that read it");
    assert!(before < after_one);
    assert_eq!(outcome(&handed), all, "the same rows, byte for byte");
    assert_each_key_handed_over_once(&handed);
    assert_eq!(
        Stats::get(&handed.stats().dedup_hits),
        Stats::get(&by_log.stats().dedup_hits),
        "a record read back from the log after its hand-over is no duplicate"
    );
}

/// A small deterministic generator for the random turns below (xorshift64*).
struct Turns(u64);

impl Turns {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[test]
fn handing_records_over_in_process_decides_byte_for_byte_what_the_log_alone_decides_whatever_the_turns_and_crashes() {
    let records = history();
    let mut reference = driver_with(&records);
    reference.set_hand_over(false);
    reference.run_until_quiet().expect("run");
    let expected = outcome(&reference);
    assert!(expected.0.len() >= 10, "the history fires many actions, got {}", expected.0.len());

    for seed in 1..=24u64 {
        let mut rng = Turns(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut d = driver_with(&records);
        d.set_overlapped(rng.chance(50));
        let (mut crashes, mut toggles) = (0, 0);
        for _ in 0..300 {
            // Which partitions poll, and how much: upstreams and SKU tasks at any speed.
            let ids: Vec<PartitionId> = d.partitions().into_iter().filter(|_| rng.chance(60)).collect();
            let max = [1, 7, 50, 500][usize::try_from(rng.next() % 4).expect("index")];
            if rng.chance(4) {
                // Outputs published, the commit lost: the tasks restart from the last one.
                d.step_only_then_crash(&ids, max).expect("crash");
                crashes += 1;
            } else {
                d.step_only(&ids, max).expect("step");
            }
            if rng.chance(3) {
                // The upstreams' outputs go by the log alone for a while (their tasks in
                // another process), then are handed over again.
                let on = !d.config().hand_over;
                d.set_hand_over(on);
                toggles += 1;
            }
        }
        d.set_hand_over(true);
        d.run_until_quiet().expect("run");
        let got = outcome(&d);
        assert_same_rows(&got.0, &expected.0, &format!("seed {seed} ({crashes} crashes, {toggles} toggles)"));
        assert_eq!(got, expected, "seed {seed}: outbox, dashboard and finance rows");
        assert_each_key_handed_over_once(&d);
        assert_eq!(Stats::get(&d.stats().broken_promises), 0, "seed {seed}: no promise passed a record");
    }
}

#[test]
fn holding_rows_back_between_publications_ends_in_the_same_rows_combined_ones_too_whatever_the_turns_and_crashes() {
    let records = history();
    let mut reference = driver_with(&records);
    reference.run_until_quiet().expect("run");
    let sinks = [Sink::Dashboard, Sink::Finance, Sink::DashboardCombined, Sink::FinanceCombined];
    let expected: Vec<_> = sinks.iter().map(|s| reference.compacted(*s)).collect();
    assert!(expected.iter().all(|rows| !rows.is_empty()), "every sink has rows");

    // The same random turns (and crashes after seed 4), rows held back or published at
    // every turn: (driver, crashes).
    let run = |seed: u64, hold: bool| {
        let mut rng = Turns(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut d = driver_with(&records);
        d.set_overlapped(rng.chance(50));
        let mut crashes = 0;
        for _ in 0..300 {
            // Mostly held back, as between the stream's publication ticks.
            let publishing = rng.chance(10);
            d.set_publishing(publishing || !hold);
            let ids: Vec<PartitionId> = d.partitions().into_iter().filter(|_| rng.chance(60)).collect();
            let max = [1, 7, 50, 500][usize::try_from(rng.next() % 4).expect("index")];
            if seed > 4 && rng.chance(4) {
                d.step_only_then_crash(&ids, max).expect("crash");
                crashes += 1;
            } else {
                d.step_only(&ids, max).expect("step");
            }
        }
        d.set_publishing(true);
        d.run_until_quiet().expect("run");
        (d, crashes)
    };
    for seed in 1..=12u64 {
        let (d, crashes) = run(seed, true);
        for (sink, rows) in sinks.iter().zip(&expected) {
            assert!(d.compacted(*sink) == *rows, "seed {seed} ({crashes} crashes): {sink:?} rows differ");
        }
        assert_eq!(outcome(&d).0, outcome(&reference).0, "seed {seed}: the same outbox rows");
        let (held, every_turn) = (d.records(Sink::Dashboard).len(), run(seed, false).0.records(Sink::Dashboard).len());
        assert!(
            held < every_turn,
            "seed {seed}: {held} dashboard records held back, {every_turn} published at every turn"
        );
    }
}
