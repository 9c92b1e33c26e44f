//! Fence records: the exact progress promise of an idle upstream partition (SPEC §2, §7).
//!
//! With `internal.idle_promise = "fence"`, a stream task whose input partition is caught up
//! appends a fence to that same partition and, once it has read it back, promises the fence's
//! broker-stamped append time: every later record of the partition has a higher offset and an
//! effective append time (the running maximum) at least as high, whatever the clocks or the
//! replication do. A fence carries no event: every reader (stream, standby, micro-batch, batch
//! close, shadow, test driver) recognises it by its value and counts nothing for it; foreign
//! consumers of the input topics can skip the [`HEADER`] instead.
//!
//! The value starts with a NUL byte, which no JSON document (every schema tidemark reads) can.

/// The value of every fence record.
pub const VALUE: &[u8] = b"\0tidemark.fence";
/// The key of every fence record (the partition is chosen explicitly, never by key).
pub const KEY: &[u8] = b"tidemark.fence";
/// The header every fence record carries, with the value `1`, for consumers other than tidemark.
pub const HEADER: &str = "tidemark.fence";

/// Whether a record's value is a fence.
pub fn is_fence(value: Option<&[u8]>) -> bool {
    value == Some(VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fence_value_is_a_fence() {
        assert!(is_fence(Some(VALUE)));
        assert!(!is_fence(None));
        assert!(!is_fence(Some(b"")));
        assert!(!is_fence(Some(b"{\"event_id\":\"e1\"}")));
        assert!(!is_fence(Some(b"\0tidemark.fence!")));
    }

    #[test]
    fn no_json_document_can_be_a_fence() {
        assert!(serde_json::from_slice::<serde_json::Value>(VALUE).is_err());
    }
}
