//! Several SKU repartition records in one log record (a *pack*).
//!
//! An upstream task writes about one line per order line: at 100k events/s that is ~100k
//! log records a second of ~60 bytes each, and every one of them is produced, validated by
//! the broker, fetched and polled on its own (twice in one process: its upstream writes it,
//! its SKU task reads it back). The sink packs the records a commit sends to one SKU
//! partition into one log record instead, in their order; the SKU task unpacks it.
//!
//! Layout: the byte [`PACKED`], then each record as an unsigned LEB128 length and its bytes
//! (a record's own encoding, [`super::derive::Derived::encode`]). [`PACKED`] is neither a
//! codec version byte nor `{`, so a pack, a single record and the JSON of earlier versions
//! are told apart by their first byte.
//!
//! Every record of a pack has the pack's offset. That is all the SKU task needs: a restart
//! reads the log again from the oldest record still buffered, so from its pack, and the
//! records of that pack it applied already are skipped by their upstream position, as any
//! replay is.

use tidemark_state::StateError;

/// The first byte of a pack.
pub const PACKED: u8 = 0xB7;

/// Records of a pack stop growing it at this size: the next one starts a new pack. Well
/// below the broker's default `max.message.bytes` (1,048,588) and any limit an operator is
/// likely to set on an internal topic; ~500 lines of a typical order.
pub const PACK_BYTES: usize = 32 * 1024;

const _: () = assert!(PACKED != b'{' && PACKED != tidemark_state::codec::VERSION, "a pack must be told from a record");

/// A pack being written.
#[derive(Debug, Default)]
pub struct Pack {
    bytes: Vec<u8>,
    records: usize,
}

impl Pack {
    /// Appends one record's encoding.
    pub fn push(&mut self, record: &[u8]) {
        if self.bytes.is_empty() {
            self.bytes.push(PACKED);
        }
        let mut len = record.len();
        loop {
            let low = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                self.bytes.push(low);
                break;
            }
            self.bytes.push(low | 0x80);
        }
        self.bytes.extend_from_slice(record);
        self.records += 1;
    }

    /// Whether one more record of `next` bytes would take the pack past [`PACK_BYTES`] (never
    /// for an empty pack: a record larger than that still goes out, alone).
    pub fn full_for(&self, next: usize) -> bool {
        self.records > 0 && self.bytes.len() + next + 5 > PACK_BYTES
    }

    /// Records in the pack.
    pub fn records(&self) -> usize {
        self.records
    }

    /// The pack's bytes, leaving it empty for the next.
    pub fn take(&mut self) -> Vec<u8> {
        self.records = 0;
        std::mem::take(&mut self.bytes)
    }
}

/// The records of a pack, in order; `None` when `bytes` is not a pack. A pack cut short
/// yields an error once, then nothing.
pub fn unpack(bytes: &[u8]) -> Option<Unpack<'_>> {
    (bytes.first() == Some(&PACKED)).then(|| Unpack { rest: &bytes[1..], failed: false })
}

/// The iterator [`unpack`] returns.
#[derive(Debug)]
pub struct Unpack<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Unpack<'a> {
    /// What is left of the pack, unread (the part an error was found in, after one).
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Unpack<'a> {
    type Item = Result<&'a [u8], StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let cut = |detail: String| StateError::Decode { what: "repartition pack", detail };
        let mut len: usize = 0;
        let mut shift = 0u32;
        let mut at = 0usize;
        loop {
            let Some(b) = self.rest.get(at).copied() else {
                self.failed = true;
                return Some(Err(cut("cut short inside a record's length".into())));
            };
            at += 1;
            if shift > 28 {
                self.failed = true;
                return Some(Err(cut("a record's length is longer than 5 bytes".into())));
            }
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let Some(record) = self.rest.get(at..at + len) else {
            self.failed = true;
            return Some(Err(cut(format!("a record of {len} bytes, {} left", self.rest.len() - at))));
        };
        self.rest = &self.rest[at + len..];
        Some(Ok(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_gives_back_its_records_in_order() {
        let records: Vec<Vec<u8>> = vec![vec![1, 2, 3], vec![], vec![7; 200], vec![9; 20_000]];
        let mut pack = Pack::default();
        for r in &records {
            pack.push(r);
        }
        assert_eq!(pack.records(), 4);
        let bytes = pack.take();
        assert_eq!(pack.records(), 0);
        let back: Vec<Vec<u8>> = unpack(&bytes).expect("a pack").map(|r| r.expect("record").to_vec()).collect();
        assert_eq!(back, records);
    }

    #[test]
    fn a_single_record_or_json_is_not_a_pack() {
        assert!(unpack(&[tidemark_state::codec::VERSION, 0, 1]).is_none());
        assert!(unpack(b"{\"line\":{}}").is_none());
        assert!(unpack(&[]).is_none());
    }

    #[test]
    fn a_pack_cut_short_yields_its_whole_records_then_one_error() {
        let mut pack = Pack::default();
        pack.push(&[1, 2, 3]);
        pack.push(&[4; 300]);
        let bytes = pack.take();
        let cut = &bytes[..bytes.len() - 10];
        let got: Vec<Result<&[u8], StateError>> = unpack(cut).expect("a pack").collect();
        assert_eq!(got.len(), 2);
        assert_eq!(*got[0].as_ref().expect("first"), &[1u8, 2, 3][..]);
        assert!(got[1].as_ref().is_err_and(|e| e.to_string().contains("300 bytes")), "{:?}", got[1]);
        // A length that never ends.
        assert!(unpack(&[PACKED, 0x80, 0x80]).expect("a pack").next().is_some_and(|r| r.is_err()));
    }

    #[test]
    fn a_pack_is_full_before_it_passes_its_size_but_never_when_empty() {
        let mut pack = Pack::default();
        assert!(!pack.full_for(PACK_BYTES * 2), "an empty pack takes any record");
        pack.push(&vec![0; PACK_BYTES - 100]);
        assert!(!pack.full_for(50));
        assert!(pack.full_for(200));
    }
}
