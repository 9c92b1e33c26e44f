//! Golden tests over the shared fixtures in `tests/fixtures` (layout in its README).
//!
//! `UPDATE_GOLDEN=1 cargo test -p tidemark-topology --test normalize_golden` rewrites every
//! `*.expected.json` from the current output; review the diff before committing it. It is
//! refused when `CI` is set, so CI never blesses its own output.
//!
//! Regenerated files would only restate the implementation, so the expected outcomes do not
//! come from it alone: a bad fixture's reason is its file name, and every good fixture (its
//! expected file and the normaliser's output) is compared with [`independent`], a second
//! decoder written from the input contract with `serde_json::Value`, `chrono` and
//! `rust_decimal`, sharing no code with `normalize`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use tidemark_topology::event::EventKind;
use tidemark_topology::normalize::{normalize_inventory, normalize_order};
use tidemark_topology::reject::{RejectReason, Rejection};

/// Broker append time given to every order fixture: 2026-11-28T15:00:00Z.
const APPEND_TIME_MS: i64 = 1_795_878_000_000;

/// The crate directory as cargo reports it when running the test, not as it was when the
/// binary was built: a shared target directory may hold a binary built from another clone.
fn fixtures(dir: &str) -> PathBuf {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    Path::new(&root).join("tests/fixtures").join(dir)
}

/// Input fixtures (not `*.expected.json`) in `dir`, sorted by name.
fn inputs(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(fixtures(dir))
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| {
            let name = file_name(p);
            name.ends_with(".json") && !name.ends_with(".expected.json")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {dir}");
    files
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).expect("utf-8 file name")
}

fn updating() -> bool {
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    assert!(
        !(update && std::env::var_os("CI").is_some()),
        "UPDATE_GOLDEN=1 is refused under CI: expected files are regenerated and reviewed locally"
    );
    update
}

/// A second decoder of the input contract, independent of `tidemark_topology::normalize`.
/// It handles the well-formed fixtures only; validation is the bad fixtures' job.
mod independent {
    use std::str::FromStr;

    use chrono::DateTime;
    use rust_decimal::Decimal;
    use serde_json::{json, Value};

    fn decimals(currency: &str) -> u32 {
        match currency {
            "JPY" => 0,
            "USD" | "EUR" => 2,
            other => panic!("no decimals known for {other}"),
        }
    }

    /// A v1 decimal string with exactly the currency's decimals.
    fn text_money(text: &str, currency: &str) -> String {
        let mut d = Decimal::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        d.rescale(decimals(currency));
        d.to_string()
    }

    /// v2 minor units as a decimal string with the currency's decimals.
    fn minor_money(price: &Value) -> (String, String) {
        let currency = price["currency"].as_str().expect("price currency").to_string();
        let minor = price["amount_minor"].as_i64().expect("amount_minor");
        (Decimal::new(minor, decimals(&currency)).to_string(), currency)
    }

    fn rfc3339_ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}")).timestamp_millis()
    }

    /// The canonical event a good order record must become, as JSON.
    pub fn order(raw: &Value) -> Value {
        let version = raw["schema_version"].as_u64().expect("schema_version");
        let (kind, time_ms, store, channel, currency, lines, refund) = if version == 1 {
            let currency = raw["currency"].as_str().map(str::to_string);
            let lines: Vec<Value> = raw["lines"]
                .as_array()
                .map(|ls| {
                    ls.iter()
                        .map(|l| {
                            let price = l["unit_price"].as_str().map(|p| {
                                text_money(p, currency.as_deref().expect("a priced v1 line needs a currency"))
                            });
                            json!({"sku": l["sku"], "qty": l["qty"], "unit_price": price})
                        })
                        .collect()
                })
                .unwrap_or_default();
            let refund = raw["amount"].as_str().map(|a| text_money(a, currency.as_deref().expect("currency")));
            let kind = raw["event_type"].as_str().and_then(|t| t.strip_prefix("order_")).expect("event_type");
            let time = rfc3339_ms(raw["event_time"].as_str().expect("event_time"));
            (kind.to_string(), time, raw["store"].clone(), Value::Null, currency, lines, refund)
        } else {
            assert_eq!(version, 2, "unexpected schema version");
            let mut currencies = Vec::new();
            let lines: Vec<Value> = raw["items"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|i| {
                            let price = (!i["price"].is_null()).then(|| minor_money(&i["price"]));
                            let price = price.map(|(amount, currency)| {
                                currencies.push(currency);
                                amount
                            });
                            json!({"sku": i["sku"], "qty": i["quantity"], "unit_price": price})
                        })
                        .collect()
                })
                .unwrap_or_default();
            let refund = (!raw["refund"].is_null()).then(|| minor_money(&raw["refund"]));
            let refund = refund.map(|(amount, currency)| {
                currencies.push(currency);
                amount
            });
            let kind = raw["type"].as_str().and_then(|t| t.strip_prefix("ORDER_")).expect("type").to_lowercase();
            let time = raw["occurred_at_ms"].as_i64().expect("occurred_at_ms");
            (kind, time, raw["store_id"].clone(), raw["channel"].clone(), currencies.first().cloned(), lines, refund)
        };
        if kind == "refunded" {
            assert!(lines.is_empty(), "a refund has no lines");
        }
        json!({
            "event_id": raw["event_id"],
            "order_id": raw["order_id"],
            "kind": kind,
            "event_time_ms": time_ms,
            "store": store,
            "currency": currency,
            "channel": channel,
            "lines": lines,
            "refund_amount": refund,
            "schema_version": version,
        })
    }

    /// The snapshot a good inventory record must become, as JSON.
    pub fn inventory(raw: &Value) -> Value {
        json!({
            "sku": raw["sku"],
            "on_hand": raw["on_hand"],
            "as_of_ms": rfc3339_ms(raw["as_of"].as_str().expect("as_of")),
        })
    }
}

/// Compares the normaliser's output for `path` with the independent decoding of its input.
fn check_independent<T: serde::Serialize>(
    path: &Path,
    actual: &T,
    decode: fn(&serde_json::Value) -> serde_json::Value,
) -> Result<(), String> {
    let raw: serde_json::Value = serde_json::from_slice(&fs::read(path).expect("read fixture")).expect("fixture JSON");
    let want = decode(&raw);
    let got = serde_json::to_value(actual).expect("serialise");
    if got == want {
        Ok(())
    } else {
        Err(format!("{}: output {got} differs from the independent decoding {want}", file_name(path)))
    }
}

/// Reads a fixture's `*.expected.json`.
fn expected_file(path: &Path) -> serde_json::Value {
    let expected = path.with_extension("expected.json");
    serde_json::from_slice(&fs::read(&expected).unwrap_or_else(|e| panic!("{}: {e}", expected.display())))
        .expect("expected JSON")
}

/// Compares `actual` with the sibling `*.expected.json`, or rewrites it under UPDATE_GOLDEN=1.
fn check_golden<T: serde::Serialize>(input: &Path, actual: &T) -> Result<(), String> {
    let expected_path = input.with_extension("expected.json");
    let actual = serde_json::to_string_pretty(actual).expect("serialise") + "\n";
    if updating() {
        fs::write(&expected_path, &actual).expect("write golden");
        return Ok(());
    }
    let expected = fs::read_to_string(&expected_path)
        .map_err(|e| format!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", expected_path.display()))?;
    if expected == actual {
        Ok(())
    } else {
        Err(format!("{} differs from output:\n{actual}", expected_path.display()))
    }
}

/// The reason encoded as the file-name prefix, e.g. `invalid_amount_v2_negative.json`.
fn reason_of(path: &Path) -> RejectReason {
    let name = file_name(path);
    RejectReason::ALL
        .into_iter()
        .filter(|r| name.strip_prefix(r.as_str()).is_some_and(|rest| rest.starts_with('_') || rest.starts_with('.')))
        .max_by_key(|r| r.as_str().len())
        .unwrap_or_else(|| panic!("{name}: file name does not start with a reason code"))
}

fn check_bad(files: &[PathBuf], normalize: impl Fn(&[u8]) -> Result<(), Rejection>) -> Vec<String> {
    let mut failures = Vec::new();
    for path in files {
        let expected = reason_of(path);
        let bytes = fs::read(path).expect("read fixture");
        match normalize(&bytes) {
            Ok(()) => failures.push(format!("{}: accepted, expected {expected}", file_name(path))),
            Err(r) if r.reason != expected => {
                failures.push(format!("{}: got {r}, expected {expected}", file_name(path)))
            }
            Err(r) => assert!(!r.detail.is_empty(), "{}: empty detail", file_name(path)),
        }
    }
    failures
}

#[test]
fn good_order_fixtures_match_their_expected_canonical_events() {
    let mut failures = Vec::new();
    let mut covered = BTreeSet::new();
    for path in inputs("orders/good") {
        let bytes = fs::read(&path).expect("read fixture");
        match normalize_order(&bytes, APPEND_TIME_MS) {
            Ok(event) => {
                covered.insert((event.schema_version, event.kind.as_str()));
                let checks = [check_golden(&path, &event), check_independent(&path, &event, independent::order)];
                failures.extend(checks.into_iter().filter_map(Result::err));
            }
            Err(r) => failures.push(format!("{}: rejected: {r}", file_name(&path))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for version in [1, 2] {
        for kind in [EventKind::Placed, EventKind::Cancelled, EventKind::Shipped, EventKind::Refunded] {
            assert!(covered.contains(&(version, kind.as_str())), "no good v{version} {} fixture", kind.as_str());
        }
    }
}

#[test]
fn good_order_fixtures_have_unique_event_ids() {
    let mut seen = BTreeSet::new();
    for path in inputs("orders/good") {
        let bytes = fs::read(&path).expect("read fixture");
        let event = normalize_order(&bytes, APPEND_TIME_MS).expect("accepted");
        assert!(seen.insert(event.event_id.clone()), "duplicate {}", event.event_id);
    }
}

#[test]
fn bad_order_fixtures_are_rejected_for_the_reason_in_their_name() {
    let files = inputs("orders/bad");
    let failures = check_bad(&files, |b| normalize_order(b, APPEND_TIME_MS).map(drop));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let covered: BTreeSet<RejectReason> = files.iter().map(|p| reason_of(p)).collect();
    for reason in RejectReason::ALL {
        assert!(covered.contains(&reason), "no bad fixture for {reason}");
    }
}

#[test]
fn good_inventory_fixtures_match_their_expected_snapshots() {
    let mut failures = Vec::new();
    for path in inputs("inventory/good") {
        let bytes = fs::read(&path).expect("read fixture");
        match normalize_inventory(&bytes) {
            Ok(snapshot) => {
                let checks =
                    [check_golden(&path, &snapshot), check_independent(&path, &snapshot, independent::inventory)];
                failures.extend(checks.into_iter().filter_map(Result::err));
            }
            Err(r) => failures.push(format!("{}: rejected: {r}", file_name(&path))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bad_inventory_fixtures_are_rejected_for_the_reason_in_their_name() {
    let failures = check_bad(&inputs("inventory/bad"), |b| normalize_inventory(b).map(drop));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn expected_files_equal_the_independent_decoding_of_their_inputs() {
    let mut failures = Vec::new();
    for (dir, decode) in
        [("orders/good", independent::order as fn(&_) -> _), ("inventory/good", independent::inventory)]
    {
        for path in inputs(dir) {
            let raw: serde_json::Value = serde_json::from_slice(&fs::read(&path).expect("read")).expect("fixture JSON");
            let (want, got) = (decode(&raw), expected_file(&path));
            if want != got {
                failures.push(format!("{}: expected file {got} but the input decodes to {want}", file_name(&path)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
