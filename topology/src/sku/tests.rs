//! Driver-style tests: feed inputs, assert the intents that come out.

use rust_decimal::Decimal;

use super::*;
use crate::config::{Rule, RuleKind, RuleMode};

pub(super) const SEC: i64 = 1_000;
pub(super) const MIN: i64 = 60 * SEC;
pub(super) const HOUR: i64 = 60 * MIN;
/// 2026-11-28T00:00:00Z.
pub(super) const T0: i64 = 1_795_824_000_000;
pub(super) const SKU: &str = "SKU-1";

pub(super) fn policy() -> WindowPolicy {
    WindowPolicy { size_ms: MIN, allowed_lateness_ms: 0, grace_ms: 2 * MIN, retention_ms: 7 * HOUR }
}

pub(super) fn rule(id: &str, version: u32, mode: RuleMode, kind: RuleKind) -> Rule {
    Rule { id: id.into(), version, mode, kind }
}

pub(super) fn oversell() -> Rule {
    rule("oversell", 1, RuleMode::Act, RuleKind::Oversell)
}

pub(super) fn low_stock(threshold: i64, replenish_to: i64) -> Rule {
    rule("low_stock", 1, RuleMode::Act, RuleKind::LowStock { threshold, replenish_to })
}

pub(super) fn velocity(min_units: u64, factor: i64, baseline_windows: u32) -> Rule {
    let kind = RuleKind::VelocitySpike { min_units, factor: Decimal::from(factor), baseline_windows };
    rule("velocity_spike", 1, RuleMode::Notify, kind)
}

pub(super) fn line(sku: &str, kind: LineKind, qty: u32, t: i64) -> SkuInput {
    // Appended a little after the event; the processor must not care by how much.
    SkuInput::Line { sku: sku.into(), kind, qty, event_time_ms: t, append_ms: t + 250 }
}

pub(super) fn placed(qty: u32, t: i64) -> SkuInput {
    line(SKU, LineKind::Placed, qty, t)
}

pub(super) fn cancelled(qty: u32, t: i64) -> SkuInput {
    line(SKU, LineKind::Cancelled, qty, t)
}

pub(super) fn snapshot(on_hand: i64, as_of_ms: i64) -> SkuInput {
    SkuInput::Snapshot { sku: SKU.into(), on_hand, as_of_ms, append_ms: as_of_ms + 5 * SEC }
}

/// Feeds inputs one by one and collects every intent, like a topology test driver.
pub(super) struct Driver {
    pub(super) p: SkuProcessor,
}

impl Driver {
    pub(super) fn new(rules: Vec<Rule>) -> Self {
        Driver { p: SkuProcessor::new(rules, policy()) }
    }

    pub(super) fn feed(&mut self, inputs: &[SkuInput]) -> Vec<ActionIntent> {
        inputs.iter().flat_map(|i| self.p.apply(i)).collect()
    }

    pub(super) fn available(&self) -> Option<i64> {
        self.p.state(SKU).and_then(SkuState::available)
    }
}

pub(super) fn keys(intents: &[ActionIntent]) -> Vec<&str> {
    intents.iter().map(|i| i.key.as_str()).collect()
}

#[test]
fn oversell_fires_once_per_snapshot_and_again_after_a_newer_snapshot_if_still_oversold() {
    let mut d = Driver::new(vec![oversell()]);
    assert!(d.feed(&[snapshot(5, T0), placed(3, T0 + SEC)]).is_empty());
    let first = d.feed(&[placed(3, T0 + 2 * SEC)]);
    assert_eq!(keys(&first), ["oversell:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
    assert_eq!(first[0].action, "stop_sale");
    assert_eq!(first[0].created_at_ms, T0 + 2 * SEC);
    assert_eq!(first[0].source_append_ms, T0 + 2 * SEC + 250);
    assert_eq!(first[0].evidence.available, Some(-1));
    assert!(d.feed(&[placed(1, T0 + 3 * SEC), cancelled(1, T0 + 4 * SEC)]).is_empty(), "once per snapshot");

    // The newer snapshot reflects the first line; the other three still count.
    let second = d.feed(&[snapshot(2, T0 + 1500)]);
    assert_eq!(keys(&second), ["oversell:v1:SKU-1:snapshot:2026-11-28T00:00:01.500Z"]);
    assert_eq!((second[0].created_at_ms, second[0].source_append_ms), (T0 + 1500, T0 + 1500 + 5 * SEC));
    let e = &second[0].evidence;
    assert_eq!((e.units_placed_since, e.units_cancelled_since, e.available), (Some(4), Some(1), Some(-1)));

    // Restocked: no longer oversold, nothing fires.
    assert!(d.feed(&[snapshot(50, T0 + 5 * SEC), placed(1, T0 + 6 * SEC)]).is_empty());
    assert_eq!(d.available(), Some(49));
}

#[test]
fn a_snapshot_not_newer_than_the_current_one_is_ignored() {
    let mut d = Driver::new(vec![oversell()]);
    d.feed(&[snapshot(10, T0 + MIN), placed(4, T0 + 2 * MIN)]);
    let before = d.p.state(SKU).cloned();
    assert!(d.feed(&[snapshot(0, T0), snapshot(1, T0 + MIN)]).is_empty());
    assert_eq!(d.p.state(SKU).cloned(), before);
    assert_eq!(d.available(), Some(6));
    assert_eq!(d.p.take_dirty().len(), 1, "only the first two inputs changed state");
}

#[test]
fn stock_rules_cannot_fire_before_any_snapshot() {
    let mut d = Driver::new(vec![oversell(), low_stock(10, 100)]);
    assert!(d.feed(&[placed(500, T0), cancelled(1, T0 + SEC)]).is_empty());
    assert_eq!(d.available(), None);
}

#[test]
fn lines_before_the_first_snapshot_count_if_their_event_time_is_after_its_as_of() {
    let mut d = Driver::new(vec![oversell()]);
    d.feed(&[placed(3, T0 - SEC), placed(3, T0 + SEC)]);
    let out = d.feed(&[snapshot(2, T0)]);
    assert_eq!(keys(&out), ["oversell:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
    assert_eq!(out[0].created_at_ms, T0, "a snapshot's event time is its as_of");
    assert_eq!(out[0].evidence.units_placed_since, Some(3));
}

#[test]
fn low_stock_suggests_the_quantity_that_restores_the_target() {
    let mut d = Driver::new(vec![low_stock(10, 100)]);
    assert!(d.feed(&[snapshot(12, T0), placed(2, T0 + SEC)]).is_empty(), "10 is not below 10");
    let out = d.feed(&[placed(3, T0 + 2 * SEC)]);
    assert_eq!(keys(&out), ["low_stock:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
    assert_eq!(out[0].action, "replenish");
    let e = &out[0].evidence;
    assert_eq!(
        (e.available, e.threshold, e.replenish_to, e.suggested_quantity),
        (Some(7), Some(10), Some(100), Some(93))
    );
}

#[test]
fn oversell_and_low_stock_both_fire_when_available_is_negative() {
    let mut d = Driver::new(vec![oversell(), low_stock(10, 100)]);
    let out = d.feed(&[placed(3, T0 + SEC), snapshot(1, T0)]);
    assert_eq!(
        keys(&out),
        ["oversell:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z", "low_stock:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]
    );
    assert_eq!(out[1].evidence.suggested_quantity, Some(102));
}

#[test]
fn cancellations_after_as_of_restore_availability_and_lines_before_as_of_do_not_count() {
    let mut d = Driver::new(vec![oversell()]);
    d.feed(&[snapshot(5, T0)]);
    assert!(d.feed(&[placed(10, T0 - SEC)]).is_empty(), "already reflected in on_hand");
    assert_eq!(d.available(), Some(5));
    d.feed(&[placed(4, T0 + SEC), cancelled(3, T0 + 2 * SEC)]);
    assert_eq!(d.available(), Some(4));
    d.feed(&[cancelled(2, T0 - 5 * SEC), cancelled(1, T0)]);
    assert_eq!(d.available(), Some(4), "cancellations at or before as_of are reflected too");
    let out = d.feed(&[placed(6, T0 + 3 * SEC)]);
    let e = &out[0].evidence;
    assert_eq!(
        (e.on_hand, e.units_placed_since, e.units_cancelled_since, e.available),
        (Some(5), Some(10), Some(3), Some(-2))
    );
}

#[test]
fn velocity_baseline_counts_missing_windows_as_zero() {
    let mut d = Driver::new(vec![velocity(1, 3, 15)]);
    let w = T0 + 30 * MIN;
    // Its own baseline is empty, so the floor of 1 unit lets the first window fire.
    assert_eq!(keys(&d.feed(&[placed(10, w - 5 * MIN)])), ["velocity_spike:v1:SKU-1:window:2026-11-28T00:25:00.000Z"]);
    // Mean over 15 windows = 10 / 15, so the threshold is max(1, 3 × 0.67) = 2, not 30.
    assert!(d.feed(&[placed(1, w)]).is_empty());
    let out = d.feed(&[placed(1, w + 59 * SEC)]);
    assert_eq!(keys(&out), ["velocity_spike:v1:SKU-1:window:2026-11-28T00:30:00.000Z"]);
    assert_eq!(out[0].action, "notify");
    assert_eq!(out[0].trigger, Trigger::Window { start_ms: w, end_ms: w + MIN });
    let e = &out[0].evidence;
    assert_eq!((e.window_units, e.baseline_units, e.baseline_windows), (Some(2), Some(10), Some(15)));
    assert_eq!(e.baseline_mean.map(|m| m.to_string()).as_deref(), Some("0.67"));
}

#[test]
fn velocity_needs_at_least_min_units_and_fires_once_per_window() {
    let mut d = Driver::new(vec![velocity(50, 3, 15)]);
    assert!(d.feed(&[placed(30, T0), placed(19, T0 + SEC)]).is_empty());
    assert_eq!(d.feed(&[placed(1, T0 + 2 * SEC)]).len(), 1);
    assert!(d.feed(&[placed(100, T0 + 3 * SEC)]).is_empty());
    assert_eq!(d.p.state(SKU).map(|s| s.window_units(T0)), Some(150));
}

#[test]
fn velocity_needs_factor_times_the_baseline_mean() {
    let mut d = Driver::new(vec![velocity(11, 3, 15)]);
    let w = T0 + HOUR;
    for k in 1..=15 {
        assert!(d.feed(&[placed(10, w - k * MIN)]).is_empty(), "10 units stay under the floor of 11");
    }
    // A window just older than the baseline must not count.
    d.feed(&[placed(10, w - 16 * MIN)]);
    assert!(d.feed(&[placed(29, w)]).is_empty(), "mean 10 × 3 = 30");
    let out = d.feed(&[placed(1, w + SEC)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].evidence.baseline_units, Some(150));
    assert_eq!(out[0].evidence.factor, Some(Decimal::from(3)));
}

#[test]
fn a_late_line_into_a_window_closed_for_actions_updates_counts_but_fires_nothing() {
    let mut d = Driver::new(vec![velocity(5, 1, 15)]);
    // Another SKU moves the partition watermark to exactly end + grace of [T0, T0 + 1m).
    d.feed(&[line("SKU-2", LineKind::Cancelled, 1, T0 + 3 * MIN)]);
    assert!(d.p.policy.closed_for_actions(T0, d.p.watermark()));
    assert!(d.feed(&[placed(9, T0 + 30 * SEC)]).is_empty());
    assert_eq!(d.p.state(SKU).map(|s| s.window_units(T0)), Some(9));
}

#[test]
fn a_late_line_just_inside_grace_still_fires() {
    let mut d = Driver::new(vec![velocity(5, 1, 15)]);
    d.feed(&[line("SKU-2", LineKind::Cancelled, 1, T0 + 3 * MIN - 1)]);
    assert!(!d.p.policy.closed_for_actions(T0, d.p.watermark()));
    let out = d.feed(&[placed(9, T0 + 30 * SEC)]);
    assert_eq!(keys(&out), ["velocity_spike:v1:SKU-1:window:2026-11-28T00:00:00.000Z"]);
    assert_eq!(out[0].created_at_ms, T0 + 30 * SEC);
}

#[test]
fn allowed_lateness_holds_the_watermark_back() {
    let p = WindowPolicy { allowed_lateness_ms: MIN, ..policy() };
    let mut proc = SkuProcessor::new(vec![velocity(5, 1, 15)], p);
    proc.apply(&line("SKU-2", LineKind::Placed, 1, T0 + 3 * MIN));
    assert_eq!((proc.watermark(), proc.watermark_state()), (Some(T0 + 2 * MIN), Some(T0 + 3 * MIN)));
    assert_eq!(proc.apply(&placed(9, T0)).len(), 1, "end + grace not yet passed by the watermark");
}

#[test]
fn a_line_beyond_retention_touches_no_state() {
    let mut d = Driver::new(vec![oversell(), velocity(1, 1, 15)]);
    d.feed(&[snapshot(0, T0 - 10 * HOUR), line("SKU-2", LineKind::Placed, 1, T0 + 7 * HOUR + MIN)]);
    d.p.take_dirty();
    let before = d.p.state(SKU).cloned();
    assert!(d.p.is_beyond_retention(T0 + 59 * SEC));
    assert!(!d.p.is_beyond_retention(T0 + MIN));
    assert!(d.feed(&[placed(5, T0)]).is_empty());
    assert_eq!(d.p.state(SKU).cloned(), before);
    assert!(d.p.take_dirty().is_empty());
}

#[test]
fn a_new_rule_version_fires_under_new_keys_even_for_an_already_fired_snapshot() {
    let inputs = [snapshot(1, T0), placed(2, T0 + SEC)];
    let mut v1 = Driver::new(vec![oversell()]);
    assert_eq!(keys(&v1.feed(&inputs)), ["oversell:v1:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);

    // Redeploy with version 2 over the persisted state: the next update fires v2 once.
    let mut v2 = Driver::new(vec![rule("oversell", 2, RuleMode::Act, RuleKind::Oversell)]);
    transplant(&mut v1.p, &mut v2.p);
    v2.p.restore_watermark(v1.p.watermark_state());
    let out = v2.feed(&[placed(1, T0 + 2 * SEC), placed(1, T0 + 3 * SEC)]);
    assert_eq!(keys(&out), ["oversell:v2:SKU-1:snapshot:2026-11-28T00:00:00.000Z"]);
    assert_eq!(out[0].rule_version, 2);
}

#[test]
fn shadow_mode_still_yields_intents_carrying_their_mode() {
    let mut d = Driver::new(vec![
        rule("oversell", 1, RuleMode::Shadow, RuleKind::Oversell),
        rule("low_stock", 1, RuleMode::Notify, RuleKind::LowStock { threshold: 10, replenish_to: 100 }),
    ]);
    let out = d.feed(&[placed(1, T0 + SEC), snapshot(0, T0)]);
    let modes: Vec<RuleMode> = out.iter().map(|i| i.mode).collect();
    assert_eq!(modes, [RuleMode::Shadow, RuleMode::Notify]);
    assert_eq!(out[0].action, "stop_sale", "the mode decides who is called, not what is asked");
}

fn one_oversell() -> ActionIntent {
    let mut d = Driver::new(vec![oversell()]);
    d.feed(&[snapshot(5, T0 + 14 * HOUR), placed(3, T0 + 14 * HOUR + SEC), cancelled(1, T0 + 14 * HOUR + 2 * SEC)]);
    let out = d.feed(&[placed(4, T0 + 14 * HOUR + 59 * MIN + 59 * SEC + 120)]);
    out.into_iter().next().expect("oversold")
}

#[test]
fn payload_bytes_are_identical_for_equal_intents_and_exclude_mode_and_append_time() {
    let a = one_oversell();
    assert_eq!(a.payload_json(), one_oversell().payload_json());
    let b = ActionIntent { mode: RuleMode::Shadow, source_append_ms: a.source_append_ms + 9_999, ..a.clone() };
    assert_ne!(a, b);
    assert_eq!(a.payload_json(), b.payload_json());
}

#[test]
fn the_stock_payload_is_exactly_this_json() {
    let text = String::from_utf8(one_oversell().payload_json()).expect("utf8");
    assert_eq!(
        text,
        concat!(
            r#"{"action_id":"oversell:v1:SKU-1:snapshot:2026-11-28T14:00:00.000Z","action":"stop_sale","#,
            r#""rule":{"id":"oversell","version":1},"sku":"SKU-1","#,
            r#""trigger":{"type":"snapshot","as_of":"2026-11-28T14:00:00.000Z"},"#,
            r#""evidence":{"on_hand":5,"as_of":"2026-11-28T14:00:00.000Z","units_placed_since":7,"#,
            r#""units_cancelled_since":1,"available":-1},"created_at":"2026-11-28T14:59:59.120Z"}"#
        )
    );
}

#[test]
fn the_velocity_payload_is_exactly_this_json() {
    let mut d = Driver::new(vec![rule(
        "velocity_spike",
        1,
        RuleMode::Notify,
        RuleKind::VelocitySpike { min_units: 50, factor: "3.0".parse().expect("decimal"), baseline_windows: 15 },
    )]);
    let w = T0 + 14 * HOUR + 59 * MIN;
    d.feed(&[placed(20, w - 3 * MIN)]);
    let out = d.feed(&[placed(60, w + 59 * SEC + 120)]);
    let text = String::from_utf8(out[0].payload_json()).expect("utf8");
    assert_eq!(
        text,
        concat!(
            r#"{"action_id":"velocity_spike:v1:SKU-1:window:2026-11-28T14:59:00.000Z","action":"notify","#,
            r#""rule":{"id":"velocity_spike","version":1},"sku":"SKU-1","#,
            r#""trigger":{"type":"window","start":"2026-11-28T14:59:00.000Z","end":"2026-11-28T15:00:00.000Z"},"#,
            r#""evidence":{"window_units":60,"baseline_windows":15,"baseline_units":20,"baseline_mean":"1.33","#,
            r#""factor":"3.0","min_units":50},"created_at":"2026-11-28T14:59:59.120Z"}"#
        )
    );
}

#[test]
fn intents_round_trip_through_serde() {
    let a = one_oversell();
    let back: ActionIntent = serde_json::from_slice(&serde_json::to_vec(&a).expect("encode")).expect("decode");
    assert_eq!(back, a);
}

/// A deterministic mixed workload over three SKUs: placed and cancelled lines, some hours
/// late, and snapshots (some stale), with the event clock crossing the retention horizon.
pub(super) fn workload() -> Vec<SkuInput> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut out = Vec::new();
    let mut now = T0;
    for i in 0..600 {
        now += i64::try_from(next(90)).expect("small") * SEC;
        let sku = ["SKU-1", "SKU-2", "SKU-3"][usize::try_from(next(3)).expect("small")];
        let late = if next(10) == 0 { i64::try_from(next(9 * 60)).expect("small") * MIN } else { 0 };
        let t = now - late;
        let qty = u32::try_from(1 + next(20)).expect("small");
        match next(12) {
            0 => out.push(SkuInput::Snapshot {
                sku: sku.into(),
                on_hand: i64::try_from(next(80)).expect("small"),
                as_of_ms: t - i64::try_from(next(120)).expect("small") * SEC,
                append_ms: now,
            }),
            1 | 2 => out.push(line(sku, LineKind::Cancelled, qty, t)),
            _ => out.push(line(sku, LineKind::Placed, qty, t)),
        }
        if i == 300 {
            // A quiet gap longer than retention: everything so far falls beyond it.
            now += 8 * HOUR;
        }
    }
    out
}

/// Persists every dirty SKU of `from` (state through JSON, line rows) into `to`, as the
/// runtime does through RocksDB.
pub(super) fn transplant(from: &mut SkuProcessor, to: &mut SkuProcessor) {
    for d in from.take_dirty() {
        to.restore(
            d.sku.clone(),
            serde_json::from_str(&serde_json::to_string(&d.core).expect("encode")).expect("decode"),
        );
        for (t, units) in d.lines {
            if let Some(u) = units {
                to.restore_line(&d.sku, t, u);
            }
        }
    }
}

pub(super) fn all_rules() -> Vec<Rule> {
    vec![oversell(), low_stock(20, 100), velocity(15, 2, 5)]
}

pub(super) fn run_in_one_go(inputs: &[SkuInput]) -> Vec<ActionIntent> {
    Driver::new(all_rules()).feed(inputs)
}

#[test]
fn the_workload_exercises_every_rule() {
    let out = run_in_one_go(&workload());
    for id in ["oversell", "low_stock", "velocity_spike"] {
        assert!(out.iter().any(|i| i.rule_id == id), "{id} never fired");
    }
    let mut keys: Vec<&str> = keys(&out);
    keys.sort_unstable();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a key was produced twice");
}

#[test]
fn saving_and_restoring_between_two_halves_gives_the_same_outputs_as_one_run() {
    let inputs = workload();
    let expected = run_in_one_go(&inputs);
    for split in [1, 57, 250, 301, 302, 450, inputs.len() - 1] {
        let mut first = Driver::new(all_rules());
        let mut out = first.feed(&inputs[..split]);
        // Persist through an encoding, as the runtime would.
        let mut second = Driver::new(all_rules());
        transplant(&mut first.p, &mut second.p);
        second.p.restore_watermark(first.p.watermark_state());
        out.extend(second.feed(&inputs[split..]));
        assert_eq!(out, expected, "split at {split}");
    }
}

#[test]
fn expiring_at_any_moment_never_changes_the_outputs() {
    let inputs = workload();
    let expected = run_in_one_go(&inputs);
    for every in [1, 7, 50] {
        let mut d = Driver::new(all_rules());
        let mut out = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            out.extend(d.p.apply(input));
            if i % every == 0 {
                d.p.expire();
            }
        }
        assert_eq!(out, expected, "expire every {every} inputs");
    }
}

#[test]
fn persisted_state_round_trips_through_serde() {
    let mut d = Driver::new(all_rules());
    d.feed(&workload()[..200]);
    let dirty = d.p.take_dirty();
    assert!(!dirty.is_empty());
    let skus: Vec<&str> = dirty.iter().map(|x| x.sku.as_str()).collect();
    let mut sorted = skus.clone();
    sorted.sort_unstable();
    assert_eq!(skus, sorted);
    let mut restored = Driver::new(all_rules());
    for x in dirty {
        let back: SkuState = serde_json::from_str(&serde_json::to_string(&x.core).expect("encode")).expect("decode");
        assert_eq!(back, x.core);
        assert!(x.core.exact_line_count() == 0, "lines are persisted as rows, not with the state");
        restored.p.restore(x.sku.clone(), back);
        for (t, units) in x.lines {
            // `None`: a row written and deleted again before this first persist.
            if let Some(u) = units {
                restored.p.restore_line(&x.sku, t, u);
            }
        }
        assert_eq!(restored.p.state(&x.sku), d.p.state(&x.sku), "{}: state + rows = the state", x.sku);
    }
    assert!(d.p.take_dirty().is_empty(), "taking clears the dirty set");

    // After a new snapshot, the rows it drops come back as deletions, and only they.
    let mut d = Driver::new(all_rules());
    d.feed(&[placed(1, T0), placed(2, T0 + SEC), placed(3, T0 + 2 * SEC)]);
    d.p.take_dirty();
    d.feed(&[snapshot(50, T0 + SEC)]);
    let changes: Vec<(i64, Option<u64>)> =
        d.p.take_dirty().remove(0).lines.into_iter().map(|(t, u)| (t, u.map(|u| u.placed))).collect();
    assert_eq!(changes, [(T0, None), (T0 + SEC, None)]);
}

#[test]
fn expire_prunes_and_returns_the_skus_left_empty() {
    let mut d = Driver::new(vec![oversell(), velocity(1000, 1, 15)]);
    d.feed(&[
        line("SKU-A", LineKind::Placed, 2, T0),
        snapshot(10, T0 - SEC),
        placed(4, T0),
        placed(4, T0 + MIN),
        placed(1, T0 + 2 * MIN),
    ]);
    assert_eq!(d.p.state(SKU).map(|s| (s.exact_line_count(), s.window_count())), Some((3, 3)));
    assert_eq!(d.p.held(), SkuHeld { skus: 2, lines: 4, windows: 4 }, "what the memory gauges count");
    assert!(d.p.expire().is_empty(), "nothing is beyond retention yet");
    d.p.take_dirty();

    // A line on another SKU moves the watermark past T0's and T0+1m's retention.
    d.feed(&[line("SKU-C", LineKind::Placed, 1, T0 + 2 * MIN + 7 * HOUR)]);
    assert_eq!(d.p.expire(), [(compact_str::CompactString::from("SKU-A"), vec![T0])], "with the line row to delete");
    assert!(d.p.state("SKU-A").is_none());
    let s = d.p.state(SKU).expect("a SKU with a snapshot is kept");
    assert_eq!((s.exact_line_count(), s.window_count()), (1, 0));
    assert_eq!(d.p.held(), SkuHeld { skus: 2, lines: 2, windows: 1 }, "SKU-A forgotten, SKU-C new");
    assert_eq!(s.available(), Some(1), "lines folded past retention still count against the snapshot");
    let dirty: Vec<String> = d.p.take_dirty().into_iter().map(|x| x.sku.to_string()).collect();
    assert_eq!(dirty, [SKU, "SKU-C"]);

    // A newer snapshot passing the folded lines releases them.
    d.feed(&[snapshot(3, T0 + MIN + 30 * SEC)]);
    assert_eq!(d.available(), Some(2));
    assert_eq!(d.p.sku_count(), 2);
}

/// Runs `inputs` twice, once calling `expire` after every input, and checks both runs agree.
fn same_with_and_without_expire(inputs: &[SkuInput]) -> (Vec<ActionIntent>, Option<i64>) {
    let mut plain = Driver::new(vec![oversell()]);
    let out = plain.feed(inputs);
    let mut eager = Driver::new(vec![oversell()]);
    let mut eager_out = Vec::new();
    for input in inputs {
        eager_out.extend(eager.p.apply(input));
        eager.p.expire();
    }
    assert_eq!(out, eager_out);
    assert_eq!(plain.available(), eager.available());
    (out, plain.available())
}

#[test]
fn a_first_snapshot_ignores_lines_already_beyond_retention_whether_or_not_expire_ran() {
    let (out, available) = same_with_and_without_expire(&[
        placed(5, T0),
        line("SKU-2", LineKind::Placed, 1, T0 + 7 * HOUR + MIN),
        snapshot(3, T0 - SEC),
    ]);
    assert!(out.is_empty());
    assert_eq!(available, Some(3));
}

#[test]
fn a_snapshot_inside_the_folded_span_keeps_every_folded_line_counting_whether_or_not_expire_ran() {
    let (out, available) = same_with_and_without_expire(&[
        snapshot(100, T0 - SEC),
        placed(10, T0),
        placed(20, T0 + 10 * MIN),
        line("SKU-2", LineKind::Placed, 1, T0 + 10 * MIN + 7 * HOUR + MIN),
        snapshot(25, T0 + 5 * MIN),
    ]);
    assert_eq!(keys(&out), ["oversell:v1:SKU-1:snapshot:2026-11-28T00:05:00.000Z"]);
    assert_eq!(available, Some(-5));
}

#[test]
fn expire_also_prunes_state_restored_after_it_last_ran() {
    // A stock rule beside the window rule: the processor keeps line rows (which expire too).
    let mut old = Driver::new(vec![oversell(), velocity(1000, 1, 15)]);
    old.feed(&[line("SKU-A", LineKind::Placed, 2, T0)]);

    let mut d = Driver::new(vec![oversell(), velocity(1000, 1, 15)]);
    d.feed(&[line("SKU-C", LineKind::Placed, 1, T0 + 8 * HOUR)]);
    assert!(d.p.expire().is_empty());
    transplant(&mut old.p, &mut d.p);
    assert_eq!(
        d.p.expire(),
        [(compact_str::CompactString::from("SKU-A"), vec![T0])],
        "same watermark, but new state to look at"
    );
    assert!(d.p.expire().is_empty());
}

#[test]
fn a_processor_of_window_rules_alone_keeps_no_lines_and_ignores_snapshots() {
    let mut d = Driver::new(vec![velocity(5, 1, 15)]);
    let out = d.feed(&[snapshot(1, T0 - SEC), placed(9, T0 + SEC), cancelled(2, T0 + 2 * SEC)]);
    assert_eq!(keys(&out), ["velocity_spike:v1:SKU-1:window:2026-11-28T00:00:00.000Z"]);
    let state = d.p.state(SKU).expect("window counts");
    assert_eq!((state.stock(), state.exact_line_count(), state.window_units(T0)), (None, 0, 9));
}

#[test]
fn a_state_of_the_first_format_with_inline_lines_is_rewritten_as_rows_at_the_next_commit() {
    let mut d = Driver::new(vec![oversell()]);
    d.feed(&[snapshot(10, T0 - SEC), placed(4, T0), placed(1, T0 + SEC)]);
    let x = d.p.take_dirty().remove(0);
    // The first format: the same state with its lines inline.
    let mut old = serde_json::to_value(&x.core).expect("encode");
    old["lines"] = serde_json::json!({ T0.to_string(): {"placed": 4, "cancelled": 0}, (T0 + SEC).to_string(): {"placed": 1, "cancelled": 0} });
    let mut fresh = Driver::new(vec![oversell()]);
    fresh.p.restore(SKU, serde_json::from_value(old).expect("decode"));
    assert_eq!(fresh.p.state(SKU), d.p.state(SKU));
    let again = fresh.p.take_dirty();
    assert_eq!(again.len(), 1, "the adopted state is persisted again");
    let rows: Vec<(i64, Option<u64>)> = again[0].lines.iter().map(|(t, u)| (*t, u.map(|u| u.placed))).collect();
    assert_eq!(rows, [(T0, Some(4)), (T0 + SEC, Some(1))]);
}

/// FNV-1a over every intent's key and payload bytes, in order: a fingerprint of a run.
pub(super) fn fingerprint(intents: &[ActionIntent]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for i in intents {
        for b in i.key.bytes().chain([0]).chain(i.payload_json()).chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[test]
fn the_built_in_rules_keys_and_payloads_over_the_workload_are_pinned_byte_for_byte() {
    // Recorded with the release before expression rules existed: any change to a built-in
    // rule's keys or payload bytes changes the fingerprint.
    let out = run_in_one_go(&workload());
    let by_rule = |id: &str| out.iter().filter(|i| i.rule_id == id).count();
    assert_eq!((out.len(), by_rule("oversell"), by_rule("low_stock"), by_rule("velocity_spike")), (171, 29, 33, 109));
    assert_eq!(fingerprint(&out), 0xed1a_e3a5_21f5_02bb);
}
