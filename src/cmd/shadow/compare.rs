//! Key-by-key comparison of two modes' results; pure, so the reasoning is tested without a
//! broker.
//!
//! Two kinds of comparison:
//! - [`exact`]: stream and micro-batch run the same tasks over the same records, only cut
//!   into different commits, so every final row must be byte-identical (counts, amounts,
//!   `version`, `as_of`). Any difference is unexplained.
//! - [`explained_by_late`]: batch figures against the stream's, per key and field. The one
//!   expected difference is an event past window retention: the stream sends it to the late
//!   output, the batch counts it. A difference is explained when
//!   `stream = batch − late` for that field.

use std::collections::{BTreeMap, BTreeSet};

use rust_decimal::Decimal;
use serde::Serialize;

/// Numeric fields of one key, in the order of the comparison's field names.
pub type Figures = Vec<Decimal>;

/// One difference: a field of a key, the two values and why they differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub comparison: String,
    pub key: String,
    pub field: String,
    pub left: String,
    pub right: String,
    pub reason: String,
    pub explained: bool,
}

/// Rows that must be byte-identical. `left`/`right` map a row key to its final value.
pub fn exact(comparison: &str, left: &BTreeMap<String, Vec<u8>>, right: &BTreeMap<String, Vec<u8>>) -> Vec<Mismatch> {
    let keys: BTreeSet<&String> = left.keys().chain(right.keys()).collect();
    let show =
        |v: Option<&Vec<u8>>| v.map_or_else(|| "(absent)".to_string(), |b| String::from_utf8_lossy(b).into_owned());
    keys.into_iter()
        .filter(|k| left.get(*k) != right.get(*k))
        .map(|k| {
            let (l, r) = (left.get(k), right.get(k));
            let reason = match (l, r) {
                (Some(_), Some(_)) => "unexplained: the same records gave different rows",
                _ => "unexplained: a row only one mode produced",
            };
            Mismatch {
                comparison: comparison.to_string(),
                key: k.clone(),
                field: "row".into(),
                left: show(l),
                right: show(r),
                reason: reason.into(),
                explained: false,
            }
        })
        .collect()
}

/// Late-output contributions of one key: the events and their figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Late {
    pub events: u64,
    pub figures: Figures,
}

/// Batch (`left`) against stream (`right`) figures, field by field; differences are
/// explained by the late output of the key or not at all.
pub fn explained_by_late(
    comparison: &str,
    fields: &[&str],
    batch: &BTreeMap<String, Figures>,
    stream: &BTreeMap<String, Figures>,
    late: &BTreeMap<String, Late>,
) -> Vec<Mismatch> {
    let zero = vec![Decimal::ZERO; fields.len()];
    let none = Late { events: 0, figures: zero.clone() };
    let keys: BTreeSet<&String> = batch.keys().chain(stream.keys()).chain(late.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let b = batch.get(key).unwrap_or(&zero);
        let s = stream.get(key).unwrap_or(&zero);
        let l = late.get(key).unwrap_or(&none);
        for (i, field) in fields.iter().enumerate() {
            let (bv, sv) = (b.get(i).copied().unwrap_or_default(), s.get(i).copied().unwrap_or_default());
            if bv == sv {
                continue;
            }
            let lv = l.figures.get(i).copied().unwrap_or_default();
            let explained = !lv.is_zero() && sv == bv - lv;
            let reason = if explained {
                format!(
                    "beyond_retention: {} event(s) past window retention went to the stream's late output; the batch counts them ({lv})",
                    l.events
                )
            } else {
                format!("unexplained: stream − batch = {}, the late output accounts for −{lv}", sv - bv)
            };
            out.push(Mismatch {
                comparison: comparison.to_string(),
                key: key.clone(),
                field: (*field).to_string(),
                left: bv.to_string(),
                right: sv.to_string(),
                reason,
                explained,
            });
        }
    }
    out
}

/// How often each mode published rows: micro-batch replaces a row once per slice, the
/// stream once per commit that changed it; different counts are expected, not mismatches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Revisions {
    pub keys: usize,
    pub stream: u64,
    pub microbatch: u64,
    pub max_per_key_stream: u64,
    pub max_per_key_microbatch: u64,
}

impl Revisions {
    pub fn of(stream: &BTreeMap<String, u64>, microbatch: &BTreeMap<String, u64>) -> Revisions {
        let keys: BTreeSet<&String> = stream.keys().chain(microbatch.keys()).collect();
        Revisions {
            keys: keys.len(),
            stream: stream.values().sum(),
            microbatch: microbatch.values().sum(),
            max_per_key_stream: stream.values().copied().max().unwrap_or(0),
            max_per_key_microbatch: microbatch.values().copied().max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figs(v: &[i64]) -> Figures {
        v.iter().map(|x| Decimal::from(*x)).collect()
    }

    fn map<T: Clone>(entries: &[(&str, T)]) -> BTreeMap<String, T> {
        entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn identical_rows_give_no_mismatch_and_any_byte_difference_is_unexplained() {
        let a = map(&[("k1", b"{\"v\":1}".to_vec()), ("k2", b"x".to_vec())]);
        assert!(exact("s vs m", &a, &a).is_empty());
        let b = map(&[("k1", b"{\"v\":2}".to_vec()), ("k3", b"y".to_vec())]);
        let got = exact("s vs m", &a, &b);
        assert_eq!(got.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["k1", "k2", "k3"]);
        assert!(got.iter().all(|m| !m.explained));
        assert_eq!(got[1].right, "(absent)");
    }

    #[test]
    fn a_difference_equal_to_the_late_output_is_explained_and_names_its_reason() {
        let fields = ["orders", "gross"];
        let batch = map(&[("d|s|JPY", figs(&[3, 300]))]);
        let stream = map(&[("d|s|JPY", figs(&[2, 200]))]);
        let late = map(&[("d|s|JPY", Late { events: 1, figures: figs(&[1, 100]) })]);
        let got = explained_by_late("finance", &fields, &batch, &stream, &late);
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|m| m.explained && m.reason.starts_with("beyond_retention: 1 event(s)")), "{got:?}");
    }

    #[test]
    fn a_difference_the_late_output_does_not_cover_is_unexplained() {
        let fields = ["orders", "gross"];
        let batch = map(&[("a", figs(&[3, 300]))]);
        let stream = map(&[("a", figs(&[2, 250])), ("b", figs(&[1, 1]))]);
        let late = map(&[("a", Late { events: 1, figures: figs(&[1, 100]) })]);
        let got = explained_by_late("finance", &fields, &batch, &stream, &late);
        let unexplained: Vec<(&str, &str)> =
            got.iter().filter(|m| !m.explained).map(|m| (m.key.as_str(), m.field.as_str())).collect();
        assert_eq!(unexplained, [("a", "gross"), ("b", "orders"), ("b", "gross")]);
    }
}
