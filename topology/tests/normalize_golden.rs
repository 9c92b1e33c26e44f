//! Golden tests over the shared fixtures in `tests/fixtures` (layout in its README).
//!
//! `UPDATE_GOLDEN=1 cargo test -p tidemark-topology --test normalize_golden` rewrites every
//! `*.expected.json` from the current output; review the diff before committing it.

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
    std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1")
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
                if let Err(e) = check_golden(&path, &event) {
                    failures.push(e);
                }
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
                if let Err(e) = check_golden(&path, &snapshot) {
                    failures.push(e);
                }
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
