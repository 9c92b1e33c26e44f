//! Records the engine asks the runtime to write to output topics.

use super::derive::Derived;
use super::record::SourceRecord;

/// Which configured sink a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sink {
    Dashboard,
    /// Provisional finance rows.
    Finance,
    DeadLetter,
    Late,
    /// The internal SKU repartition topic (always with an explicit partition).
    Repartition,
    /// The internal combine repartition topic (always with an explicit partition).
    Combine,
    /// One row per window × store × currency (the sum of the dashboard partials).
    DashboardCombined,
    /// One row per day × store × currency (the sum of the provisional partials).
    FinanceCombined,
}

/// Header names carried by dead-letter and late records (values are UTF-8).
pub mod headers {
    pub const REASON: &str = "tidemark.reason";
    pub const DETAIL: &str = "tidemark.detail";
    pub const SOURCE_TOPIC: &str = "tidemark.source.topic";
    pub const SOURCE_PARTITION: &str = "tidemark.source.partition";
    pub const SOURCE_OFFSET: &str = "tidemark.source.offset";
    pub const SOURCE_APPEND_MS: &str = "tidemark.source.append_ms";
    /// `true` on a record whose key or value was cut to fit its topic (SPEC §1.3).
    pub const TRUNCATED: &str = "tidemark.truncated";
    /// Size in bytes and hex SHA-256 of the original value, on a truncated record.
    pub const ORIGINAL_SIZE: &str = "tidemark.original.size";
    pub const ORIGINAL_SHA256: &str = "tidemark.original.sha256";
    /// The same for the original key, when the key itself had to be cut.
    pub const ORIGINAL_KEY_SIZE: &str = "tidemark.original.key_size";
    pub const ORIGINAL_KEY_SHA256: &str = "tidemark.original.key_sha256";
}

/// The largest dead-letter or late record copied whole: below librdkafka's default
/// `message.max.bytes` (1,000,000) and the broker's default `max.message.bytes`
/// (1,048,588), with room for the headers. A larger copy is truncated to this, with the
/// original's size and SHA-256 in headers; a topic with a smaller limit makes the sink
/// halve it again (see `kafka::sink`).
pub const MAX_SIDE_OUTPUT_BYTES: usize = 900_000;

/// A detail header longer than this is cut (it may quote the input).
const MAX_DETAIL_BYTES: usize = 1024;

/// Cuts `value` (and `key`, when it alone takes more than a quarter of `max_bytes`) so that
/// key plus value fit in `max_bytes`, recording what was cut in `headers`. Returns whether
/// anything was cut. Idempotent in the sense that cutting a cut record again keeps the
/// first original size and hash.
pub fn truncate_to_fit(
    key: &mut Option<Vec<u8>>,
    value: &mut Vec<u8>,
    headers: &mut Vec<(String, Vec<u8>)>,
    max_bytes: usize,
) -> bool {
    let key_len = key.as_ref().map_or(0, Vec::len);
    if key_len + value.len() <= max_bytes {
        return false;
    }
    let has = |headers: &Vec<(String, Vec<u8>)>, name: &str| headers.iter().any(|(k, _)| k == name);
    let key_budget = max_bytes / 4;
    if let Some(k) = key.as_mut().filter(|k| k.len() > key_budget) {
        if !has(headers, headers::ORIGINAL_KEY_SIZE) {
            headers.push((headers::ORIGINAL_KEY_SIZE.into(), k.len().to_string().into_bytes()));
            headers.push((headers::ORIGINAL_KEY_SHA256.into(), sha256_hex(k).into_bytes()));
        }
        k.truncate(key_budget);
    }
    let room = max_bytes.saturating_sub(key.as_ref().map_or(0, Vec::len));
    if value.len() > room {
        if !has(headers, headers::ORIGINAL_SIZE) {
            headers.push((headers::ORIGINAL_SIZE.into(), value.len().to_string().into_bytes()));
            headers.push((headers::ORIGINAL_SHA256.into(), sha256_hex(value).into_bytes()));
        }
        value.truncate(room);
    }
    if !has(headers, headers::TRUNCATED) {
        headers.push((headers::TRUNCATED.into(), b"true".to_vec()));
    }
    true
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRecord {
    pub sink: Sink,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    /// Explicit partition; `None` lets the producer's partitioner choose by key.
    pub partition: Option<i32>,
    /// A SKU repartition record as its upstream task made it ([`OutputRecord::derived`]):
    /// a SKU task of the same process takes it from here instead of decoding `value`
    /// ([`crate::tasks::TaskSet::finish`]). Never sent: `value` is what the log gets.
    pub handed: Option<Derived>,
}

impl OutputRecord {
    /// A line, snapshot or mark for SKU partition `partition`: `value` is its encoding, and
    /// the record itself rides along for the in-process hand-over. No key: the partition is
    /// explicit and nothing reads a repartition record's key (packs have none either).
    pub fn derived(derived: Derived, partition: i32) -> Self {
        OutputRecord {
            sink: Sink::Repartition,
            key: None,
            value: derived.encode(),
            headers: Vec::new(),
            partition: Some(partition),
            handed: Some(derived),
        }
    }

    /// A record of an internal topic (`topic`, `partition`) that tidemark cannot read: only
    /// tidemark writes those, so it means a foreign writer or a newer format. Dead-lettered
    /// (`internal_record_unreadable`) with the bytes that could not be read, so nothing is
    /// lost and the partition goes on.
    pub fn internal_unreadable(
        topic: &str,
        partition: i32,
        rec: &SourceRecord<'_>,
        value: &[u8],
        detail: String,
    ) -> Self {
        OutputRecord::side_output(
            Sink::DeadLetter,
            (topic, partition, rec.offset, rec.append_ms),
            rec.key,
            value,
            "internal_record_unreadable",
            detail,
        )
    }

    /// A rejected or too-late source record: its original key and bytes, and where it came
    /// from, so nothing is lost and it can be replayed or audited.
    pub fn side_output(
        sink: Sink,
        source: (&str, i32, i64, i64),
        key: Option<&[u8]>,
        value: &[u8],
        reason: &str,
        detail: String,
    ) -> Self {
        let (topic, partition, offset, append_ms) = source;
        OutputRecord {
            sink,
            key: key.map(<[u8]>::to_vec),
            value: value.to_vec(),
            headers: vec![
                (headers::REASON, reason.to_string()),
                (headers::DETAIL, bounded(detail)),
                (headers::SOURCE_TOPIC, topic.to_string()),
                (headers::SOURCE_PARTITION, partition.to_string()),
                (headers::SOURCE_OFFSET, offset.to_string()),
                (headers::SOURCE_APPEND_MS, append_ms.to_string()),
            ],
            partition: None,
            handed: None,
        }
    }
}

/// `detail` cut to [`MAX_DETAIL_BYTES`] at a character boundary.
fn bounded(mut detail: String) -> String {
    if detail.len() > MAX_DETAIL_BYTES {
        let mut cut = MAX_DETAIL_BYTES;
        while !detail.is_char_boundary(cut) {
            cut -= 1;
        }
        detail.truncate(cut);
        detail.push('…');
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(h: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a str> {
        h.iter().find(|(k, _)| k == name).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    #[test]
    fn a_record_that_fits_is_copied_whole() {
        let (mut key, mut value, mut h) = (Some(b"k".to_vec()), vec![7u8; 100], Vec::new());
        assert!(!truncate_to_fit(&mut key, &mut value, &mut h, 101));
        assert_eq!((value.len(), h.len()), (100, 0));
    }

    #[test]
    fn an_oversized_value_is_cut_to_fit_with_its_original_size_and_hash_in_headers() {
        let original = vec![b'x'; 1_048_000];
        let (mut key, mut value, mut h) = (Some(b"o-1".to_vec()), original.clone(), Vec::new());
        assert!(truncate_to_fit(&mut key, &mut value, &mut h, MAX_SIDE_OUTPUT_BYTES));
        assert_eq!(value.len() + 3, MAX_SIDE_OUTPUT_BYTES);
        assert_eq!(value[..], original[..value.len()]);
        assert_eq!(header(&h, headers::ORIGINAL_SIZE), Some("1048000"));
        assert_eq!(header(&h, headers::ORIGINAL_SHA256), Some(sha256_hex(&original).as_str()));
        assert_eq!(header(&h, headers::TRUNCATED), Some("true"));
    }

    #[test]
    fn cutting_again_keeps_the_first_original_size_and_an_oversized_key_is_cut_too() {
        let (mut key, mut value, mut h) = (Some(vec![b'k'; 5000]), vec![b'v'; 5000], Vec::new());
        assert!(truncate_to_fit(&mut key, &mut value, &mut h, 4000));
        assert!(truncate_to_fit(&mut key, &mut value, &mut h, 400));
        assert_eq!(key.as_ref().map(Vec::len), Some(100));
        assert_eq!(value.len(), 300);
        assert_eq!(header(&h, headers::ORIGINAL_SIZE), Some("5000"));
        assert_eq!(header(&h, headers::ORIGINAL_KEY_SIZE), Some("5000"));
        assert_eq!(h.iter().filter(|(k, _)| k == headers::TRUNCATED).count(), 1);
    }

    #[test]
    fn a_long_detail_is_cut_at_a_character_boundary() {
        let d = bounded("é".repeat(2000));
        assert!(d.len() <= MAX_DETAIL_BYTES + '…'.len_utf8() && d.ends_with('…'));
    }
}
