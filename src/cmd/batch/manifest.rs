//! The manifest record that publishes a run, run ids, checksums and the adjustment chain.
//!
//! Everything here is derived from data: the same inputs give the same run id, the same
//! rows, the same checksum and the same manifest bytes, whenever and wherever they run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tidemark_topology::finance::{Tally, DEFINITION_VERSION};

use super::range::{Input, Offsets};

/// The version of the binary that computed a run, for audits; not part of the run id.
pub const CODE_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    Close,
    Adjustment,
}

/// How every record of the input range ended: `records = applied + no_money + duplicates
/// + out_of_day + Σ dead_letters`, and `records + offset_gaps` = offsets in the ranges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accounting {
    pub records: u64,
    /// Offsets without a record (transaction markers, aborted transactions).
    pub offset_gaps: u64,
    pub applied: u64,
    pub no_money: u64,
    pub duplicates: u64,
    pub out_of_day: u64,
    /// Counted per reason, not written anywhere: the stream dead-letters these records.
    pub dead_letters: BTreeMap<String, u64>,
}

impl Accounting {
    pub fn new(tally: &Tally, span: u64) -> Accounting {
        Accounting {
            records: tally.records,
            offset_gaps: span.saturating_sub(tally.records),
            applied: tally.applied,
            no_money: tally.no_money,
            duplicates: tally.duplicates,
            out_of_day: tally.out_of_day,
            dead_letters: tally.dead_letters.iter().map(|(r, n)| (r.as_str().to_string(), *n)).collect(),
        }
    }
}

/// The value of a `finance_manifest` record. Field order is fixed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub kind: RunKind,
    pub run_id: String,
    /// Adjustments: the close they adjust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_run_id: Option<String>,
    /// Adjustments: the run whose range this one continues (the close or an adjustment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_run_id: Option<String>,
    pub business_day: String,
    pub time_zone: String,
    pub dedup_retention_ms: i64,
    /// The records counted.
    pub input: Input,
    /// Adjustments: records read only to learn which event ids were already counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_input: Option<Input>,
    pub definition_version: u32,
    pub code_version: String,
    pub row_count: u64,
    /// `sha256:<hex>` of the row values in key order, each followed by `\n`.
    pub checksum: String,
    pub accounting: Accounting,
}

impl Manifest {
    /// Key of the manifest record: `close|<day>` or `adjust|<day>|<run_id>`.
    pub fn key(&self) -> String {
        match self.kind {
            RunKind::Close => close_key(&self.business_day),
            RunKind::Adjustment => format!("{}{}", adjust_prefix(&self.business_day), self.run_id),
        }
    }

    /// Prefix of this run's row keys (the rows add `|<store>|<currency>`).
    pub fn row_prefix(&self) -> String {
        match (&self.kind, &self.original_run_id) {
            (RunKind::Adjustment, Some(original)) => format!("adj|{original}|{}", self.run_id),
            _ => format!("{}|{}", self.run_id, self.business_day),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings, integers and maps with string keys always serialise.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

pub fn close_key(day: &str) -> String {
    format!("close|{day}")
}

pub fn adjust_prefix(day: &str) -> String {
    format!("adjust|{day}|")
}

/// What a run id is derived from: every input that can change a row.
pub struct RunIdentity<'a> {
    pub kind: RunKind,
    pub day: &'a str,
    pub time_zone: &'a str,
    pub dedup_retention_ms: i64,
    pub input: &'a Input,
    pub dedup_input: Option<&'a Input>,
    pub original_run_id: Option<&'a str>,
}

impl RunIdentity<'_> {
    /// 16 hex digits of SHA-256 over a canonical text of the identity and the definition
    /// version. The code version is left out on purpose: a rebuild of the same definitions
    /// must reproduce the same run (a differing result under one id is refused at publish).
    pub fn run_id(&self) -> String {
        let text = format!(
            "tidemark finance {:?}\ndefinition {DEFINITION_VERSION}\nday {}\ntime_zone {}\ndedup_retention_ms {}\ninput {}\ndedup_input {}\noriginal {}\n",
            self.kind,
            self.day,
            self.time_zone,
            self.dedup_retention_ms,
            self.input.describe(),
            self.dedup_input.map(Input::describe).unwrap_or_default(),
            self.original_run_id.unwrap_or_default(),
        );
        hex::encode(&Sha256::digest(text.as_bytes())[..8])
    }
}

/// `sha256:<hex>` over the values of `rows` in key order, each followed by `\n` (the bytes
/// `tidemark batch show --format rows` prints for a run).
pub fn checksum(rows: &BTreeMap<String, Vec<u8>>) -> String {
    let mut h = Sha256::new();
    for value in rows.values() {
        h.update(value);
        h.update(b"\n");
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Orders the adjustments of `close` into the chain they form: each starts where the
/// previous run (the close, then each adjustment) ended. Adjustments of another close are
/// ignored; a fork or an adjustment that continues nothing is an error (two adjustments ran
/// at once, or the manifest topic was edited).
pub fn chain(close: &Manifest, adjustments: &[Manifest]) -> Result<Vec<Manifest>, String> {
    let mine: Vec<&Manifest> =
        adjustments.iter().filter(|a| a.original_run_id.as_deref() == Some(close.run_id.as_str())).collect();
    let mut ordered: Vec<Manifest> = Vec::new();
    let mut end = close.input.ends();
    loop {
        let next: Vec<&&Manifest> = mine.iter().filter(|a| continues(&end, &a.input)).collect();
        match next.as_slice() {
            [] => break,
            [one] => {
                end = one.input.ends();
                ordered.push((**one).clone());
            }
            many => {
                let ids: Vec<&str> = many.iter().map(|a| a.run_id.as_str()).collect();
                return Err(format!("adjustments {} all continue the same range", ids.join(", ")));
            }
        }
        if ordered.len() > mine.len() {
            return Err("adjustment ranges form a cycle".into());
        }
    }
    if ordered.len() != mine.len() {
        let stray: Vec<&str> =
            mine.iter().filter(|a| !ordered.iter().any(|o| o.run_id == a.run_id)).map(|a| a.run_id.as_str()).collect();
        return Err(format!("adjustments {} do not continue the close's range", stray.join(", ")));
    }
    Ok(ordered)
}

/// True when `input` starts exactly where `end` left off (a partition added since starts
/// at 0) and covers every partition of `end`.
pub fn continues(end: &Offsets, input: &Input) -> bool {
    let starts = input.starts();
    end.keys().all(|p| starts.contains_key(p))
        && starts.iter().all(|(p, from)| *from == end.get(p).copied().unwrap_or(0))
        && input.ranges.iter().any(|r| r.to > r.from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(ranges: &[(i32, i64, i64)]) -> Input {
        let from = ranges.iter().map(|(p, f, _)| (*p, *f)).collect();
        let to = ranges.iter().map(|(p, _, t)| (*p, *t)).collect();
        Input::new("orders", &from, &to)
    }

    fn manifest(kind: RunKind, run_id: &str, original: Option<&str>, ranges: &[(i32, i64, i64)]) -> Manifest {
        Manifest {
            kind,
            run_id: run_id.into(),
            original_run_id: original.map(str::to_string),
            previous_run_id: None,
            business_day: "2026-11-28".into(),
            time_zone: "Asia/Tokyo".into(),
            dedup_retention_ms: 1,
            input: input(ranges),
            dedup_input: None,
            definition_version: DEFINITION_VERSION,
            code_version: CODE_VERSION.into(),
            row_count: 0,
            checksum: checksum(&BTreeMap::new()),
            accounting: Accounting::new(&Tally::default(), 0),
        }
    }

    fn identity(input: &Input) -> RunIdentity<'_> {
        RunIdentity {
            kind: RunKind::Close,
            day: "2026-11-28",
            time_zone: "Asia/Tokyo",
            dedup_retention_ms: 1,
            input,
            dedup_input: None,
            original_run_id: None,
        }
    }

    #[test]
    fn a_run_id_depends_on_every_input_and_nothing_else() {
        let a = input(&[(0, 0, 10), (1, 0, 20)]);
        let id = identity(&a).run_id();
        assert_eq!(id.len(), 16);
        assert_eq!(id, identity(&a.clone()).run_id());
        assert_ne!(id, identity(&input(&[(0, 0, 10), (1, 0, 21)])).run_id());
        assert_ne!(id, RunIdentity { day: "2026-11-29", ..identity(&a) }.run_id());
        assert_ne!(id, RunIdentity { time_zone: "UTC", ..identity(&a) }.run_id());
        assert_ne!(id, RunIdentity { kind: RunKind::Adjustment, original_run_id: Some("x"), ..identity(&a) }.run_id());
    }

    #[test]
    fn the_checksum_is_that_of_the_row_values_as_json_lines_in_key_order() {
        let rows =
            BTreeMap::from([("k|b".to_string(), b"{\"b\":1}".to_vec()), ("k|a".to_string(), b"{\"a\":1}".to_vec())]);
        let want = format!("sha256:{}", hex::encode(Sha256::digest(b"{\"a\":1}\n{\"b\":1}\n")));
        assert_eq!(checksum(&rows), want);
    }

    #[test]
    fn manifest_keys_and_row_prefixes_name_the_day_and_runs() {
        let close = manifest(RunKind::Close, "c1", None, &[(0, 0, 10)]);
        assert_eq!((close.key(), close.row_prefix()), ("close|2026-11-28".into(), "c1|2026-11-28".into()));
        let adj = manifest(RunKind::Adjustment, "a1", Some("c1"), &[(0, 10, 12)]);
        assert_eq!((adj.key(), adj.row_prefix()), ("adjust|2026-11-28|a1".into(), "adj|c1|a1".into()));
        let back: Manifest = serde_json::from_slice(&adj.to_bytes()).expect("round trip");
        assert_eq!(back, adj);
    }

    #[test]
    fn adjustments_chain_from_the_close_and_a_fork_is_refused() {
        let close = manifest(RunKind::Close, "c1", None, &[(0, 0, 10), (1, 0, 5)]);
        let second = manifest(RunKind::Adjustment, "a2", Some("c1"), &[(0, 12, 15), (1, 7, 7)]);
        let first = manifest(RunKind::Adjustment, "a1", Some("c1"), &[(0, 10, 12), (1, 5, 7)]);
        let other_close = manifest(RunKind::Adjustment, "x", Some("c0"), &[(0, 10, 11), (1, 5, 5)]);
        let ids = |c: Vec<Manifest>| c.into_iter().map(|m| m.run_id).collect::<Vec<_>>();
        assert_eq!(ids(chain(&close, &[second.clone(), other_close, first.clone()]).expect("chain")), ["a1", "a2"]);
        let fork = manifest(RunKind::Adjustment, "f", Some("c1"), &[(0, 10, 11), (1, 5, 5)]);
        assert!(chain(&close, &[first.clone(), fork]).expect_err("fork").contains("a1, f"));
        let stray = manifest(RunKind::Adjustment, "s", Some("c1"), &[(0, 99, 100), (1, 5, 5)]);
        assert!(chain(&close, &[first, stray]).expect_err("stray").contains("s do not continue"));
    }

    #[test]
    fn a_partition_added_after_the_close_continues_from_its_start() {
        let end = Offsets::from([(0, 10)]);
        assert!(continues(&end, &input(&[(0, 10, 10), (1, 0, 3)])));
        assert!(!continues(&end, &input(&[(0, 10, 10), (1, 1, 3)])));
        assert!(!continues(&end, &input(&[(1, 0, 3)])));
        assert!(!continues(&end, &input(&[(0, 10, 10)])), "an empty range continues nothing");
    }
}
