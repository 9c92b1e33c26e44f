//! The record type every task ingests.

/// A source record as the engine sees it, borrowed from the consumer's buffer.
#[derive(Clone, Copy, Debug)]
pub struct SourceRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub append_ms: i64,
    pub offset: i64,
}
