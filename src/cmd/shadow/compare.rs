//! Key-by-key comparison of two modes' results, shared by `tidemark shadow` and
//! `tidemark batch shadow`; pure, so the reasoning is tested without a broker.
//!
//! Two kinds of comparison, one [`Mismatch`] type:
//! - [`exact`]: two runs of the same tasks over the same records, only cut into different
//!   commits (stream and micro-batch rows; the action path's outbox at two cadences), so
//!   every final value must be byte-identical. Any difference is unexplained.
//! - [`explained`]: batch figures against the stream's ([`Compared`]), per key and field. The expected
//!   differences are named [`Cause`]s measured from the log (events the stream sent to its
//!   late output, events appended after a close): a difference is explained when
//!   `stream = batch + Σ added − Σ removed` for that field.

use std::collections::{BTreeMap, BTreeSet};

use rust_decimal::Decimal;
use serde::Serialize;
use tidemark_topology::figures::{Events, Figures, Units};

/// Field names of finance figures (a day's close, provisional rows).
pub const FINANCE_FIELDS: [&str; 6] = ["orders", "events", "gross", "cancelled", "refunded", "net"];
/// Field names of dashboard figures (one window).
pub const DASHBOARD_FIELDS: [&str; 7] = ["orders", "units", "gross", "cancelled", "refunded", "net", "version"];

/// The compared fields of one key, in the order of its field names (a row's figures, its
/// `net` and the dashboard's `version`); counts as decimals so every field compares alike.
/// A missing field reads as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compared(Vec<Decimal>);

impl Compared {
    /// In the order of [`FINANCE_FIELDS`].
    pub fn finance(
        orders: u64,
        events: u64,
        gross: Decimal,
        cancelled: Decimal,
        refunded: Decimal,
        net: Decimal,
    ) -> Self {
        Compared(vec![orders.into(), events.into(), gross, cancelled, refunded, net])
    }

    /// A finance row's or aggregate's figures with its `net`.
    pub fn of_finance(f: &Figures<Events>, net: Decimal) -> Self {
        Compared::finance(f.orders, f.events(), f.gross, f.cancelled, f.refunded, net)
    }

    /// A dashboard row's or aggregate's figures with its `net` and `version`.
    pub fn of_dashboard(f: &Figures<Units>, net: Decimal, version: u64) -> Self {
        Compared::dashboard(f.orders, f.units(), f.gross, f.cancelled, f.refunded, net, version)
    }

    /// In the order of [`DASHBOARD_FIELDS`].
    #[allow(clippy::too_many_arguments)]
    pub fn dashboard(
        orders: u64,
        units: u64,
        gross: Decimal,
        cancelled: Decimal,
        refunded: Decimal,
        net: Decimal,
        version: u64,
    ) -> Self {
        Compared(vec![orders.into(), units.into(), gross, cancelled, refunded, net, version.into()])
    }

    pub fn get(&self, field: usize) -> Decimal {
        self.0.get(field).copied().unwrap_or_default()
    }

    pub fn add(&mut self, other: &Compared) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), Decimal::ZERO);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += *b;
        }
    }
}

/// One difference: a field of a key, the two values (`left` is the first side the
/// comparison names, e.g. the batch in `batch/stream`) and why they differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch<K = String> {
    pub comparison: &'static str,
    pub key: K,
    pub field: &'static str,
    pub left: String,
    pub right: String,
    /// Each cause that accounts for the difference, or one `unexplained: ...`.
    pub reasons: Vec<String>,
    pub explained: bool,
}

/// Values that must be byte-identical, per key; `field` names what the value is (`row`,
/// `payload`). A key only one side has is a mismatch too.
pub fn exact<K: Ord + Clone>(
    comparison: &'static str,
    field: &'static str,
    left: &BTreeMap<K, Vec<u8>>,
    right: &BTreeMap<K, Vec<u8>>,
) -> Vec<Mismatch<K>> {
    let keys: BTreeSet<&K> = left.keys().chain(right.keys()).collect();
    let show =
        |v: Option<&Vec<u8>>| v.map_or_else(|| "(absent)".to_string(), |b| String::from_utf8_lossy(b).into_owned());
    keys.into_iter()
        .filter(|k| left.get(*k) != right.get(*k))
        .map(|k| {
            let (l, r) = (left.get(k), right.get(k));
            let reason = match (l, r) {
                (Some(_), Some(_)) => format!("unexplained: the same records gave a different {field}"),
                _ => "unexplained: a key only one side produced".to_string(),
            };
            Mismatch {
                comparison,
                key: k.clone(),
                field,
                left: show(l),
                right: show(r),
                reasons: vec![reason],
                explained: false,
            }
        })
        .collect()
}

/// Something measured from the log that accounts for part of a difference between batch and
/// stream, per key.
pub struct Cause<'a, K> {
    /// Names it in reasons: `late_output`, `after_close`.
    pub name: &'static str,
    /// `true`: the stream has these and the batch not; `false`: the other way round.
    pub adds: bool,
    /// What it is, after the amount in a reason.
    pub what: &'static str,
    pub figures: &'a BTreeMap<K, Compared>,
}

/// Batch (`left`) against stream (`right`) figures, field by field; a difference is
/// explained when the causes account for it exactly.
pub fn explained<K: Ord + Clone>(
    comparison: &'static str,
    fields: &[&'static str],
    batch: &BTreeMap<K, Compared>,
    stream: &BTreeMap<K, Compared>,
    causes: &[Cause<'_, K>],
) -> Vec<Mismatch<K>> {
    let zero = Compared::default();
    let keys: BTreeSet<&K> =
        batch.keys().chain(stream.keys()).chain(causes.iter().flat_map(|c| c.figures.keys())).collect();
    let mut out = Vec::new();
    for key in keys {
        let (b, s) = (batch.get(key).unwrap_or(&zero), stream.get(key).unwrap_or(&zero));
        for (i, field) in fields.iter().enumerate() {
            let (bv, sv) = (b.get(i), s.get(i));
            if bv == sv {
                continue;
            }
            let amounts: Vec<(&Cause<'_, K>, Decimal)> =
                causes.iter().map(|c| (c, c.figures.get(key).unwrap_or(&zero).get(i))).collect();
            let accounted: Decimal = amounts.iter().map(|(c, v)| if c.adds { *v } else { -*v }).sum();
            let explained = sv == bv + accounted;
            let reasons = if explained {
                amounts
                    .iter()
                    .filter(|(_, v)| !v.is_zero())
                    .map(|(c, v)| format!("{}: {}{v} {}", c.name, if c.adds { "+" } else { "−" }, c.what))
                    .collect()
            } else {
                let each: Vec<String> = amounts.iter().map(|(c, v)| format!("{} {v}", c.name)).collect();
                vec![format!("unexplained: stream − batch = {}, {}", sv - bv, each.join(", "))]
            };
            out.push(Mismatch {
                comparison,
                key: key.clone(),
                field,
                left: bv.to_string(),
                right: sv.to_string(),
                reasons,
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

    fn fin(orders: u64, gross: i64) -> Compared {
        Compared::finance(orders, orders, gross.into(), Decimal::ZERO, Decimal::ZERO, gross.into())
    }

    fn map<T: Clone>(entries: &[(&str, T)]) -> BTreeMap<String, T> {
        entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    fn late<'a>(figures: &'a BTreeMap<String, Compared>) -> Cause<'a, String> {
        Cause { name: "late_output", adds: false, what: "beyond the stream's window retention", figures }
    }

    fn after_close<'a>(figures: &'a BTreeMap<String, Compared>) -> Cause<'a, String> {
        Cause { name: "after_close", adds: true, what: "appended after the close's range", figures }
    }

    #[test]
    fn identical_rows_give_no_mismatch_and_any_byte_difference_is_unexplained() {
        let a = map(&[("k1", b"{\"v\":1}".to_vec()), ("k2", b"x".to_vec())]);
        assert!(exact("s vs m", "row", &a, &a).is_empty());
        let b = map(&[("k1", b"{\"v\":2}".to_vec()), ("k3", b"y".to_vec())]);
        let got = exact("s vs m", "row", &a, &b);
        assert_eq!(got.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["k1", "k2", "k3"]);
        assert!(got.iter().all(|m| !m.explained));
        assert_eq!(got[1].right, "(absent)");
    }

    #[test]
    fn identical_action_sets_give_no_mismatch() {
        let a =
            map(&[("low_stock:v1:SKU-1:w1", b"{\"on_hand\":3}".to_vec()), ("oversell:v1:SKU-2:w1", b"{}".to_vec())]);
        assert!(exact("actions", "payload", &a, &a.clone()).is_empty());
    }

    #[test]
    fn a_missing_action_key_and_a_changed_payload_are_unexplained_mismatches() {
        let stream = map(&[("k-same", b"{\"q\":1}".to_vec()), ("k-changed", b"{\"q\":2}".to_vec())]);
        let batch = map(&[
            ("k-same", b"{\"q\":1}".to_vec()),
            ("k-changed", b"{\"q\":3}".to_vec()),
            ("k-extra", b"{}".to_vec()),
        ]);
        let got = exact("actions", "payload", &stream, &batch);
        let keys: Vec<(&str, &str, &str)> =
            got.iter().map(|m| (m.key.as_str(), m.left.as_str(), m.right.as_str())).collect();
        assert_eq!(keys, [("k-changed", "{\"q\":2}", "{\"q\":3}"), ("k-extra", "(absent)", "{}")]);
        assert!(got.iter().all(|m| !m.explained && m.field == "payload"), "{got:?}");
        assert_eq!(got[0].reasons, ["unexplained: the same records gave a different payload"]);
        assert_eq!(got[1].reasons, ["unexplained: a key only one side produced"]);
    }

    #[test]
    fn a_difference_equal_to_the_late_output_is_explained_and_names_its_cause() {
        let batch = map(&[("d|s|JPY", fin(3, 300))]);
        let stream = map(&[("d|s|JPY", fin(2, 200))]);
        let gone = map(&[("d|s|JPY", fin(1, 100))]);
        let got = explained("finance", &FINANCE_FIELDS, &batch, &stream, &[late(&gone)]);
        assert_eq!(got.iter().map(|m| m.field).collect::<Vec<_>>(), ["orders", "events", "gross", "net"]);
        assert!(got.iter().all(|m| m.explained), "{got:?}");
        assert_eq!(got[2].reasons, ["late_output: −100 beyond the stream's window retention"]);
        assert_eq!((got[2].left.as_str(), got[2].right.as_str()), ("300", "200"));
    }

    #[test]
    fn late_output_and_events_after_the_close_explain_the_difference_together() {
        let batch = map(&[("a", fin(3, 300))]);
        let gone = map(&[("a", fin(1, 100))]);
        let added = map(&[("a", fin(2, 50))]);
        let stream = map(&[("a", fin(4, 250))]);
        let got = explained("day", &FINANCE_FIELDS, &batch, &stream, &[after_close(&added), late(&gone)]);
        assert_eq!(got.len(), 4, "orders, events, gross, net differ: {got:?}");
        assert!(got.iter().all(|m| m.explained), "{got:?}");
        let gross = got.iter().find(|m| m.field == "gross").expect("gross");
        assert_eq!(
            gross.reasons,
            [
                "after_close: +50 appended after the close's range",
                "late_output: −100 beyond the stream's window retention"
            ]
        );
    }

    #[test]
    fn a_difference_the_causes_do_not_cover_is_unexplained_with_the_numbers() {
        let batch = map(&[("a", fin(3, 300))]);
        let stream = map(&[("a", fin(2, 250)), ("b", fin(1, 1))]);
        let gone = map(&[("a", fin(1, 100))]);
        let got = explained("finance", &FINANCE_FIELDS, &batch, &stream, &[late(&gone)]);
        let unexplained: Vec<(&str, &str)> =
            got.iter().filter(|m| !m.explained).map(|m| (m.key.as_str(), m.field)).collect();
        assert_eq!(
            unexplained,
            [("a", "gross"), ("a", "net"), ("b", "orders"), ("b", "events"), ("b", "gross"), ("b", "net")]
        );
        let gross = got.iter().find(|m| m.key == "a" && m.field == "gross").expect("gross");
        assert_eq!(gross.reasons, ["unexplained: stream − batch = -50, late_output 100"]);
    }
}
