use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use rust_decimal::Decimal;
use serde_json::Value;

use super::*;

fn small(seed: u64, events: u64) -> GenConfig {
    GenConfig {
        seed,
        events,
        rate_per_s: 1000.0,
        skus: 50,
        stores: 6,
        open_orders: 500,
        inventory_every: 100,
        ..GenConfig::default()
    }
}

fn generate(cfg: GenConfig) -> Vec<GenRecord> {
    Generator::new(cfg).expect("valid config").collect()
}

fn orders(records: &[GenRecord]) -> impl Iterator<Item = &GenRecord> {
    records.iter().filter(|r| r.topic == GenTopic::Orders)
}

fn is_well_formed(r: &GenRecord) -> bool {
    matches!(r.truth, Truth::Good { .. } | Truth::Late { .. })
}

fn decimals(code: &str) -> Option<u32> {
    match code {
        "JPY" => Some(0),
        "USD" | "EUR" => Some(2),
        _ => None,
    }
}

/// Money in minor units if `text` is a non-negative decimal with exactly the currency's
/// decimals.
fn minor_units(text: &str, currency: &str) -> Option<i64> {
    let d = Decimal::from_str(text).ok()?;
    let places = decimals(currency)?;
    let has_point = text.contains('.');
    if d.is_sign_negative() || d.scale() != places || has_point != (places > 0) {
        return None;
    }
    (d * Decimal::from(10i64.pow(places))).trunc().to_string().parse().ok()
}

/// An independent classifier of order values: every defect found, by reason code
/// (plus `wrong_decimals`, which the generator must never produce).
fn defects(value: &[u8], wall_ms: i64) -> Vec<&'static str> {
    let mut found = Vec::new();
    let Ok(Value::Object(v)) = serde_json::from_slice::<Value>(value) else {
        return vec!["not_json"];
    };
    let version = v.get("schema_version").and_then(Value::as_i64);
    if version != Some(1) && version != Some(2) {
        return vec!["unknown_schema_version"];
    }
    if v.get("event_id").and_then(Value::as_str).unwrap_or("").is_empty() {
        found.push("missing_event_id");
    }
    if v.get("order_id").and_then(Value::as_str).unwrap_or("").is_empty() {
        found.push("invalid_field");
    }
    let (kind, time_ms, items) = if version == Some(1) {
        let kind = v["event_type"].as_str().unwrap_or("");
        let time = v["event_time"].as_str().unwrap_or("");
        let time_ms = chrono::DateTime::parse_from_rfc3339(time).ok().map(|t| t.timestamp_millis());
        if v.get("store").and_then(Value::as_str).is_none() {
            found.push("invalid_field");
        }
        let currency = v["currency"].as_str().unwrap_or("");
        if decimals(currency).is_none() {
            found.push("unknown_currency");
        }
        let kind = match kind {
            "order_placed" => "placed",
            "order_cancelled" => "cancelled",
            "order_shipped" => "shipped",
            "order_refunded" => "refunded",
            _ => "",
        };
        let mut items = Vec::new();
        if kind == "refunded" {
            let amount = v["amount"].as_str().unwrap_or("");
            if decimals(currency).is_some() && minor_units(amount, currency).is_none() {
                found.push(bad_amount_reason(amount));
            }
        } else {
            for line in v["lines"].as_array().into_iter().flatten() {
                let qty = line["qty"].as_i64().unwrap_or(0);
                if let Some(price) = line.get("unit_price") {
                    let price = price.as_str().unwrap_or("");
                    if decimals(currency).is_some() && minor_units(price, currency).is_none() {
                        found.push(bad_amount_reason(price));
                    }
                }
                items.push((qty, currency.to_string()));
            }
        }
        (kind, time_ms, items)
    } else {
        let kind = match v["type"].as_str().unwrap_or("") {
            "ORDER_PLACED" => "placed",
            "ORDER_CANCELLED" => "cancelled",
            "ORDER_SHIPPED" => "shipped",
            "ORDER_REFUNDED" => "refunded",
            _ => "",
        };
        if v.get("store_id").and_then(Value::as_str).is_none() {
            found.push("invalid_field");
        }
        assert!(["web", "app", "store"].contains(&v["channel"].as_str().unwrap_or("")));
        let mut items = Vec::new();
        if kind == "refunded" {
            let refund = &v["refund"];
            if decimals(refund["currency"].as_str().unwrap_or("")).is_none() {
                found.push("unknown_currency");
            }
            if refund["amount_minor"].as_i64().unwrap_or(-1) < 0 {
                found.push("invalid_amount");
            }
        } else {
            let mut currencies = BTreeSet::new();
            for item in v["items"].as_array().into_iter().flatten() {
                let qty = item["quantity"].as_i64().unwrap_or(0);
                let mut currency = String::new();
                if let Some(price) = item.get("price") {
                    currency = price["currency"].as_str().unwrap_or("").to_string();
                    if decimals(&currency).is_none() {
                        found.push("unknown_currency");
                    }
                    if price["amount_minor"].as_i64().unwrap_or(-1) < 0 {
                        found.push("invalid_amount");
                    }
                    currencies.insert(currency.clone());
                }
                items.push((qty, currency));
            }
            if currencies.len() > 1 {
                found.push("mixed_currencies");
            }
        }
        (kind, v["occurred_at_ms"].as_i64(), items)
    };
    if kind.is_empty() {
        found.push("unknown_event_type");
    }
    match time_ms {
        None => found.push("unparsable_time"),
        Some(t) if t >= wall_ms + 3_600_000 => found.push("event_time_in_future"),
        Some(_) => {}
    }
    if items.iter().any(|(qty, _)| *qty <= 0) {
        found.push("non_positive_quantity");
    }
    if kind != "refunded" && !kind.is_empty() && items.is_empty() {
        found.push("invalid_field");
    }
    found.sort_unstable();
    found.dedup();
    found
}

fn bad_amount_reason(text: &str) -> &'static str {
    match Decimal::from_str(text) {
        Ok(d) if !d.is_sign_negative() => "wrong_decimals",
        _ => "invalid_amount",
    }
}

fn json(r: &GenRecord) -> Value {
    serde_json::from_slice(&r.value).expect("valid JSON")
}

#[test]
fn same_seed_gives_identical_bytes() {
    let a = generate(small(7, 5_000));
    let b = generate(small(7, 5_000));
    assert_eq!(a.len(), b.len());
    assert!(a == b);
}

#[test]
fn different_seeds_give_different_bytes() {
    let a = generate(small(1, 2_000));
    let b = generate(small(2, 2_000));
    let a_orders: Vec<_> = orders(&a).map(|r| &r.value).collect();
    let b_orders: Vec<_> = orders(&b).map(|r| &r.value).collect();
    assert_ne!(a_orders, b_orders);
    let same = a_orders.iter().zip(&b_orders).filter(|(x, y)| x == y).count();
    assert_eq!(same, 0, "no order record should coincide across seeds");
}

#[test]
fn every_malformed_reason_code_appears_given_enough_events() {
    let cfg = GenConfig { malformed_fraction: 0.05, ..small(3, 10_000) };
    let mut seen = BTreeMap::new();
    for r in generate(cfg) {
        if let Truth::Malformed { reason } = r.truth {
            *seen.entry(reason).or_insert(0u32) += 1;
        }
    }
    for reason in MALFORMED_REASONS {
        assert!(seen.get(reason).copied().unwrap_or(0) >= 10, "{reason}: {seen:?}");
    }
    assert_eq!(seen.len(), MALFORMED_REASONS.len());
}

#[test]
fn each_malformed_record_has_exactly_its_own_defect() {
    let cfg = GenConfig { malformed_fraction: 0.05, late_fraction: 0.0, ..small(4, 20_000) };
    let start = cfg.start_ms;
    let mut checked = 0;
    for r in generate(cfg) {
        if let Truth::Malformed { reason } = r.truth {
            assert_eq!(defects(&r.value, start + r.due_ms), vec![reason], "{}", String::from_utf8_lossy(&r.value));
            assert!(r.key.starts_with("o-"));
            checked += 1;
        }
    }
    assert!(checked > 500);
}

#[test]
fn malformed_variants_include_missing_and_empty_event_ids() {
    let cfg = GenConfig { malformed_fraction: 0.2, ..small(5, 5_000) };
    let (mut missing, mut empty) = (0, 0);
    for r in generate(cfg) {
        if r.truth == (Truth::Malformed { reason: "missing_event_id" }) {
            match json(&r).get("event_id") {
                None => missing += 1,
                Some(Value::String(s)) if s.is_empty() => empty += 1,
                other => panic!("unexpected event_id {other:?}"),
            }
        }
    }
    assert!(missing > 0 && empty > 0, "missing {missing}, empty {empty}");
}

#[test]
fn well_formed_records_have_no_defect() {
    let cfg = small(6, 20_000);
    let start = cfg.start_ms;
    for r in orders(&generate(cfg)) {
        if is_well_formed(r) {
            let found = defects(&r.value, start + r.due_ms);
            assert!(found.is_empty(), "{found:?}: {}", String::from_utf8_lossy(&r.value));
        }
    }
}

#[test]
fn fractions_are_roughly_honoured() {
    let cfg = GenConfig {
        late_fraction: 0.1,
        dup_fraction: 0.05,
        dup_span_ms: 2_000,
        malformed_fraction: 0.02,
        v2_fraction: 0.3,
        target_event_bytes: 0,
        ..small(8, 100_000)
    };
    let records = generate(cfg.clone());
    let total = orders(&records).count() as f64;
    assert_eq!(total as u64, cfg.events);
    let count = |f: &dyn Fn(&Truth) -> bool| orders(&records).filter(|r| f(&r.truth)).count() as f64;
    let dups = count(&|t| matches!(t, Truth::Duplicate { .. }));
    let malformed = count(&|t| matches!(t, Truth::Malformed { .. }));
    let late = count(&|t| matches!(t, Truth::Late { .. }));
    let good = count(&|t| matches!(t, Truth::Good { .. }));
    let close = |got: f64, want: f64| (got - want).abs() <= want * 0.1;
    assert!(close(dups / total, 0.05), "dups {}", dups / total);
    assert!(close(malformed / total, 0.02), "malformed {}", malformed / total);
    assert!(close(late / (late + good), 0.1), "late {}", late / (late + good));
    let v2 = orders(&records).filter(|r| is_well_formed(r)).filter(|r| json(r)["schema_version"] == 2).count() as f64;
    assert!(close(v2 / (late + good), 0.3), "v2 {}", v2 / (late + good));
}

#[test]
fn duplicates_are_byte_copies_of_an_earlier_record_within_the_span() {
    let cfg = GenConfig { dup_fraction: 0.05, dup_span_ms: 3_000, ..small(9, 30_000) };
    let mut originals: BTreeMap<String, (String, Vec<u8>, i64)> = BTreeMap::new();
    let mut dups = 0;
    for r in generate(cfg) {
        match &r.truth {
            Truth::Good { event_id } | Truth::Late { event_id, .. } => {
                let prev = originals.insert(event_id.clone(), (r.key.clone(), r.value.clone(), r.due_ms));
                assert!(prev.is_none(), "event id {event_id} reused by a fresh event");
            }
            Truth::Duplicate { event_id } => {
                let (key, value, due) = originals.get(event_id).expect("duplicate of an earlier record");
                assert_eq!(&r.key, key);
                assert_eq!(&r.value, value);
                assert!(r.due_ms >= *due && r.due_ms <= due + 3_000 + 10);
                dups += 1;
            }
            _ => {}
        }
    }
    assert!(dups > 1_000);
}

#[test]
fn event_ids_are_unique_across_all_fresh_records() {
    let cfg = GenConfig { malformed_fraction: 0.05, target_event_bytes: 0, ..small(10, 30_000) };
    let mut ids = BTreeSet::new();
    for r in generate(cfg) {
        if r.topic == GenTopic::Orders && !matches!(r.truth, Truth::Duplicate { .. }) {
            if let Ok(Value::Object(v)) = serde_json::from_slice::<Value>(&r.value) {
                if let Some(id) = v.get("event_id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    assert!(ids.insert(id.to_string()), "duplicate event id {id}");
                }
            }
        }
    }
}

#[test]
fn due_ms_is_nondecreasing() {
    let cfg = GenConfig {
        dup_fraction: 0.1,
        spike: Some(Spike { at_s: 3.0, duration_s: 2.0, factor: 7.5 }),
        ..small(11, 30_000)
    };
    let records = generate(cfg);
    assert!(records.windows(2).all(|w| w[0].due_ms <= w[1].due_ms));
    assert_eq!(records[0].due_ms, 0);
}

#[test]
fn base_rate_sets_the_due_times() {
    let cfg = GenConfig { rate_per_s: 250.0, inventory_every: 0, ..small(12, 1_001) };
    let records = generate(cfg);
    assert_eq!(records.len(), 1_001);
    assert_eq!(records[250].due_ms, 1_000);
    assert_eq!(records[1_000].due_ms, 4_000);
}

#[test]
fn spike_raises_the_rate_in_its_span() {
    let cfg = GenConfig {
        rate_per_s: 1_000.0,
        spike: Some(Spike { at_s: 2.0, duration_s: 1.0, factor: 10.0 }),
        inventory_every: 0,
        ..small(13, 20_000)
    };
    let records = generate(cfg);
    let in_span = |from: i64, to: i64| records.iter().filter(|r| (from..to).contains(&r.due_ms)).count();
    assert_eq!(in_span(0, 1_000), 1_000);
    assert_eq!(in_span(1_000, 2_000), 1_000);
    assert_eq!(in_span(2_000, 3_000), 10_000);
    assert_eq!(in_span(3_000, 4_000), 1_000);
}

#[test]
fn late_events_lag_their_due_time_by_at_most_max_lateness() {
    let cfg = GenConfig { late_fraction: 0.2, max_lateness_ms: 90_000, ..small(14, 10_000) };
    let start = cfg.start_ms;
    let mut late = 0;
    for r in generate(cfg) {
        let v = match r.truth {
            Truth::Good { .. } | Truth::Late { .. } => json(&r),
            _ => continue,
        };
        let time_ms = match v["schema_version"].as_i64() {
            Some(1) => chrono::DateTime::parse_from_rfc3339(v["event_time"].as_str().unwrap_or(""))
                .expect("rfc3339")
                .timestamp_millis(),
            _ => v["occurred_at_ms"].as_i64().expect("ms"),
        };
        let expected = match r.truth {
            Truth::Late { lateness_ms, .. } => {
                assert!((1..=90_000).contains(&lateness_ms));
                late += 1;
                lateness_ms
            }
            _ => 0,
        };
        assert_eq!(time_ms, start + r.due_ms - expected);
    }
    assert!(late > 1_000);
}

#[test]
fn future_events_are_far_beyond_their_due_time() {
    let cfg = GenConfig { malformed_fraction: 0.1, ..small(15, 5_000) };
    let start = cfg.start_ms;
    let mut n = 0;
    for r in generate(cfg) {
        if r.truth == (Truth::Malformed { reason: "event_time_in_future" }) {
            let v = json(&r);
            let t = match v["occurred_at_ms"].as_i64() {
                Some(ms) => ms,
                None => chrono::DateTime::parse_from_rfc3339(v["event_time"].as_str().unwrap_or(""))
                    .expect("rfc3339")
                    .timestamp_millis(),
            };
            assert!(t >= start + r.due_ms + 2 * 3_600_000);
            n += 1;
        }
    }
    assert!(n > 0);
}

#[test]
fn stale_snapshots_are_older_than_the_skus_latest() {
    let cfg = GenConfig { inventory_every: 5, ..small(16, 20_000) };
    let skus = cfg.skus as usize;
    let start = cfg.start_ms;
    let mut latest: BTreeMap<String, i64> = BTreeMap::new();
    let (mut stale, mut fresh) = (0, 0);
    for (i, r) in generate(cfg).into_iter().enumerate() {
        let Truth::Snapshot { sku, stale: is_stale } = &r.truth else {
            continue;
        };
        assert_eq!(&r.key, sku);
        let v = json(&r);
        assert_eq!(v["sku"].as_str(), Some(sku.as_str()));
        assert!(v["on_hand"].as_u64().is_some());
        let as_of = chrono::DateTime::parse_from_rfc3339(v["as_of"].as_str().unwrap_or(""))
            .expect("rfc3339")
            .timestamp_millis();
        if i < skus {
            assert_eq!(as_of, start);
            assert_eq!(r.due_ms, 0);
        } else {
            assert!(as_of <= start + r.due_ms || !*is_stale);
        }
        let prev = latest.get(sku).copied();
        if *is_stale {
            assert!(as_of < prev.expect("stale snapshot of a known SKU"));
            stale += 1;
        } else {
            assert!(prev.is_none_or(|p| as_of > p));
            latest.insert(sku.clone(), as_of);
            fresh += 1;
        }
    }
    assert_eq!(latest.len(), skus);
    assert!(stale > 100 && fresh > 2_000, "stale {stale}, fresh {fresh}");
}

#[test]
fn inventory_snapshots_follow_every_nth_order_record() {
    let cfg = GenConfig { inventory_every: 10, ..small(17, 1_000) };
    let skus = cfg.skus as usize;
    let records = generate(cfg);
    assert!(records[..skus].iter().all(|r| r.topic == GenTopic::Inventory));
    let mut since = 0;
    for r in &records[skus..] {
        match r.topic {
            GenTopic::Orders => since += 1,
            GenTopic::Inventory => {
                assert_eq!(since, 10);
                since = 0;
            }
        }
    }
    assert_eq!(records.len(), skus + 1_000 + 100);
}

#[test]
fn zero_inventory_every_disables_snapshots() {
    let cfg = GenConfig { inventory_every: 0, ..small(18, 1_000) };
    assert!(generate(cfg).iter().all(|r| r.topic == GenTopic::Orders));
}

#[test]
fn valid_records_are_json_with_the_required_fields() {
    let records = generate(small(19, 10_000));
    let mut kinds = BTreeSet::new();
    for r in orders(&records).filter(|r| is_well_formed(r)) {
        let v = json(r);
        let (Truth::Good { event_id } | Truth::Late { event_id, .. }) = &r.truth else { unreachable!() };
        assert_eq!(v["event_id"].as_str(), Some(event_id.as_str()));
        assert_eq!(v["order_id"].as_str(), Some(r.key.as_str()));
        assert!(r.key.starts_with("o-") && event_id.starts_with("e-"));
        let (kind, store) = match v["schema_version"].as_i64() {
            Some(1) => {
                let currency = v["currency"].as_str().expect("currency");
                let store = v["store"].as_str().expect("store");
                let want = match store.split('-').next() {
                    Some("tokyo") => "JPY",
                    Some("nyc") => "USD",
                    _ => "EUR",
                };
                assert_eq!(currency, want);
                assert!(v["event_time"].as_str().is_some());
                (v["event_type"].as_str().expect("event_type").to_string(), store.to_string())
            }
            Some(2) => {
                assert!(v["occurred_at_ms"].as_i64().is_some());
                let store = v["store_id"].as_str().expect("store_id");
                (v["type"].as_str().expect("type").to_lowercase(), store.to_string())
            }
            other => panic!("schema {other:?}"),
        };
        assert!(store.ends_with("-01") || store.ends_with("-02"));
        let refund = kind.ends_with("refunded");
        let lines = v.get("lines").or_else(|| v.get("items"));
        if refund {
            assert!(lines.is_none());
            assert!(v.get("amount").is_some() || v.get("refund").is_some());
        } else {
            let lines = lines.and_then(Value::as_array).expect("lines");
            assert!((1..=4).contains(&lines.len()));
            for line in lines {
                assert!(line["sku"].as_str().is_some_and(|s| s.starts_with("SKU-")));
                assert!(line.get("qty").or_else(|| line.get("quantity")).and_then(Value::as_u64).is_some());
            }
        }
        kinds.insert(kind);
    }
    let want = ["order_placed", "order_cancelled", "order_shipped", "order_refunded"];
    assert_eq!(kinds, want.iter().map(|s| s.to_string()).collect());
}

#[test]
fn v1_event_times_use_the_stores_utc_offset() {
    for r in orders(&generate(small(20, 3_000))).filter(|r| is_well_formed(r)) {
        let v = json(r);
        if let (Some(time), Some(store)) = (v["event_time"].as_str(), v["store"].as_str()) {
            let suffix = match store.split('-').next() {
                Some("tokyo") => "+09:00",
                Some("nyc") => "-05:00",
                _ => "+01:00",
            };
            assert!(time.ends_with(suffix), "{time} for {store}");
            assert_eq!(time.len(), "2026-11-28T14:59:59.120+09:00".len());
        }
    }
}

#[test]
fn money_amounts_have_the_currencys_decimals() {
    let mut checked = 0;
    for r in orders(&generate(small(21, 10_000))).filter(|r| is_well_formed(r)) {
        let v = json(r);
        if let Some(currency) = v["currency"].as_str() {
            let mut amounts: Vec<&str> = v["lines"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l.get("unit_price").and_then(Value::as_str))
                .collect();
            amounts.extend(v.get("amount").and_then(Value::as_str));
            for a in amounts {
                let places = a.split_once('.').map_or(0, |(_, frac)| frac.len());
                assert_eq!(Some(places as u32), decimals(currency), "{a} {currency}");
                assert!(minor_units(a, currency).is_some_and(|m| m > 0), "{a}");
                checked += 1;
            }
        } else {
            for item in v["items"].as_array().into_iter().flatten() {
                if let Some(price) = item.get("price") {
                    assert!(price["amount_minor"].as_i64().is_some_and(|m| m > 0));
                    assert!(decimals(price["currency"].as_str().unwrap_or("")).is_some());
                }
            }
        }
    }
    assert!(checked > 1_000);
}

/// Money of one event in minor units, and the currency it is in.
fn event_money(v: &Value) -> (String, i64, i64) {
    let mut lines_minor = 0;
    let mut refund_minor = 0;
    let currency;
    if v["schema_version"] == 1 {
        currency = v["currency"].as_str().unwrap_or("").to_string();
        for l in v["lines"].as_array().into_iter().flatten() {
            if let Some(p) = l.get("unit_price").and_then(Value::as_str) {
                lines_minor += l["qty"].as_i64().unwrap_or(0) * minor_units(p, &currency).unwrap_or(0);
            }
        }
        if let Some(a) = v.get("amount").and_then(Value::as_str) {
            refund_minor = minor_units(a, &currency).unwrap_or(0);
        }
    } else {
        let mut c = String::new();
        for i in v["items"].as_array().into_iter().flatten() {
            if let Some(p) = i.get("price") {
                lines_minor += i["quantity"].as_i64().unwrap_or(0) * p["amount_minor"].as_i64().unwrap_or(0);
                c = p["currency"].as_str().unwrap_or("").to_string();
            }
        }
        if let Some(r) = v.get("refund") {
            refund_minor = r["amount_minor"].as_i64().unwrap_or(0);
            c = r["currency"].as_str().unwrap_or("").to_string();
        }
        currency = c;
    }
    (currency, lines_minor, refund_minor)
}

#[test]
fn refunds_never_exceed_gross() {
    #[derive(Default)]
    struct Totals {
        gross: i64,
        cancelled: i64,
        refunded: i64,
        currencies: BTreeSet<String>,
        placed: u32,
    }
    let cfg = GenConfig { open_orders: 200, target_event_bytes: 0, ..small(22, 50_000) };
    let mut by_order: BTreeMap<String, Totals> = BTreeMap::new();
    for r in orders(&generate(cfg)).filter(|r| is_well_formed(r)) {
        let v = json(r);
        let (currency, lines, refund) = event_money(&v);
        let t = by_order.entry(r.key.clone()).or_default();
        if !currency.is_empty() {
            t.currencies.insert(currency);
        }
        let kind = v.get("event_type").or_else(|| v.get("type")).and_then(Value::as_str).unwrap_or("");
        match kind.to_lowercase().as_str() {
            "order_placed" => {
                t.gross += lines;
                t.placed += 1;
            }
            "order_cancelled" => t.cancelled += lines,
            "order_refunded" => t.refunded += refund,
            _ => {}
        }
    }
    let mut refunds = 0;
    for (order, t) in &by_order {
        assert_eq!(t.placed, 1, "{order}");
        assert!(t.currencies.len() == 1, "{order}: {:?}", t.currencies);
        assert!(t.cancelled <= t.gross, "{order}");
        assert!(t.refunded <= t.gross - t.cancelled, "{order}");
        refunds += usize::from(t.refunded > 0);
    }
    assert!(refunds > 100, "{refunds}");
}

#[test]
fn skus_are_skewed_towards_the_popular_ones() {
    let mut counts = BTreeMap::new();
    for r in orders(&generate(small(23, 20_000))).filter(|r| is_well_formed(r)) {
        let v = json(r);
        let lines = v.get("lines").or_else(|| v.get("items")).and_then(Value::as_array);
        for l in lines.into_iter().flatten() {
            *counts.entry(l["sku"].as_str().unwrap_or("").to_string()).or_insert(0u32) += 1;
        }
    }
    let top = counts["SKU-1"];
    let tail = counts.get("SKU-50").copied().unwrap_or(0);
    assert!(top > 10 * tail.max(1), "SKU-1 {top}, SKU-50 {tail}");
}

#[test]
fn events_are_padded_to_the_target_size() {
    let cfg = GenConfig { target_event_bytes: 1024, ..small(24, 3_000) };
    for r in orders(&generate(cfg)).filter(|r| is_well_formed(r)) {
        assert!(r.value.len() == 1024 || r.value.len() > 1000, "{}", r.value.len());
        assert!(json(r).get("customer").is_some());
    }
    let unpadded = GenConfig { target_event_bytes: 0, ..small(24, 3_000) };
    for r in orders(&generate(unpadded)).filter(|r| is_well_formed(r)) {
        assert!(r.value.len() < 600, "{}", r.value.len());
        assert!(json(r).get("customer").is_none());
    }
}

#[test]
fn generator_memory_does_not_grow_with_events() {
    let cfg = GenConfig {
        open_orders: 100,
        dup_fraction: 0.3,
        dup_span_ms: i64::from(u32::MAX),
        target_event_bytes: 0,
        ..small(25, 200_000)
    };
    let mut generator = Generator::new(cfg).expect("valid");
    // Enough records for the pending duplicates to reach their bound.
    for _ in generator.by_ref().take(80_000) {}
    assert!(generator.book_len() <= 100);
    assert_eq!(generator.dups.len(), MAX_PENDING_DUPS);
}

#[test]
fn invalid_config_reports_every_bad_field() {
    let cfg = GenConfig {
        late_fraction: 1.5,
        dup_fraction: -0.1,
        v2_fraction: f64::NAN,
        rate_per_s: 0.0,
        skus: 0,
        stores: 0,
        open_orders: 0,
        dup_span_ms: -1,
        spike: Some(Spike { at_s: -1.0, duration_s: f64::INFINITY, factor: 0.0 }),
        ..GenConfig::default()
    };
    let err = Generator::new(cfg).err().expect("invalid");
    let fields: BTreeSet<&str> = err.problems.iter().map(|p| p.field).collect();
    let want = [
        "late_fraction",
        "dup_fraction",
        "v2_fraction",
        "rate_per_s",
        "skus",
        "stores",
        "open_orders",
        "dup_span_ms",
        "spike.at_s",
        "spike.duration_s",
        "spike.factor",
    ];
    assert_eq!(fields, want.into_iter().collect());
    assert!(err.to_string().contains("skus: must be >= 1"));
}

#[test]
fn config_rejects_fractions_that_leave_no_good_events_and_runs_past_year_9999() {
    let shares = GenConfig { dup_fraction: 0.5, malformed_fraction: 0.5, ..GenConfig::default() };
    let err = shares.validate().expect_err("invalid");
    assert_eq!(err.problems[0].field, "malformed_fraction");
    let endless = GenConfig { rate_per_s: 1e-9, ..GenConfig::default() };
    assert_eq!(endless.validate().expect_err("invalid").problems[0].field, "events");
    assert!(GenConfig::default().validate().is_ok());
}

#[test]
fn config_deserialises_with_defaults_for_missing_fields() {
    let cfg: GenConfig =
        serde_json::from_str(r#"{"seed":9,"spike":{"at_s":1,"duration_s":2,"factor":10}}"#).expect("json");
    assert_eq!(cfg.seed, 9);
    assert_eq!(cfg.skus, 2000);
    assert_eq!(cfg.start_ms, DEFAULT_START_MS);
    assert!(serde_json::from_str::<GenConfig>(r#"{"sede":9}"#).is_err());
}

#[test]
fn rfc3339_rendering_round_trips_through_chrono() {
    for ms in [0, 1, 999, 1_795_824_000_000, 1_764_341_999_120, 951_782_400_123, 4_102_444_799_999] {
        for offset in [0, 540, -300, 60] {
            let mut buf = Vec::new();
            clock::push_rfc3339(&mut buf, ms, offset, true);
            let text = String::from_utf8(buf).expect("ascii");
            let parsed = chrono::DateTime::parse_from_rfc3339(&text).expect("rfc3339");
            assert_eq!(parsed.timestamp_millis(), ms, "{text}");
            assert_eq!(parsed.offset().local_minus_utc(), offset * 60, "{text}");
        }
    }
    let mut buf = Vec::new();
    clock::push_rfc3339(&mut buf, DEFAULT_START_MS, 0, false);
    assert_eq!(buf, b"2026-11-28T00:00:00Z");
}

#[test]
fn money_is_written_in_major_units() {
    let cases = [(198_000, 0, "198000"), (1250, 2, "12.50"), (5, 2, "0.05"), (-500, 2, "-5.00")];
    for (minor, places, want) in cases {
        let mut buf = Vec::new();
        encode::push_money(&mut buf, minor, places);
        assert_eq!(buf, want.as_bytes());
    }
}
