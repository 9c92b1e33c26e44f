//! Records the engine asks the runtime to write to output topics.

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
}

/// Header names carried by dead-letter and late records (values are UTF-8).
pub mod headers {
    pub const REASON: &str = "tidemark.reason";
    pub const DETAIL: &str = "tidemark.detail";
    pub const SOURCE_TOPIC: &str = "tidemark.source.topic";
    pub const SOURCE_PARTITION: &str = "tidemark.source.partition";
    pub const SOURCE_OFFSET: &str = "tidemark.source.offset";
    pub const SOURCE_APPEND_MS: &str = "tidemark.source.append_ms";
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRecord {
    pub sink: Sink,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    /// Explicit partition; `None` lets the producer's partitioner choose by key.
    pub partition: Option<i32>,
}

impl OutputRecord {
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
                (headers::DETAIL, detail),
                (headers::SOURCE_TOPIC, topic.to_string()),
                (headers::SOURCE_PARTITION, partition.to_string()),
                (headers::SOURCE_OFFSET, offset.to_string()),
                (headers::SOURCE_APPEND_MS, append_ms.to_string()),
            ],
            partition: None,
        }
    }
}
