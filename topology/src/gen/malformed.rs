//! Malformed order records: each carries exactly one defect, and successive ones cycle
//! through every reason code (and through each reason's variants).

use rand::Rng;

use super::encode::{write_event_open, Defect, Draft, Schema};
use super::orders::{pick_lines, pick_qty, Kind, Line, MAX_LINES};
use super::{GenRecord, GenTopic, Generator, Truth, MALFORMED_REASONS};

/// How far past its due time an `event_time_in_future` record claims to be. The consumer
/// rejects event times beyond append time + 1 h; a month clears that even when a past start
/// is replayed into a broker whose append times are later than the simulated clock.
pub(super) const FUTURE_SHIFT_MS: i64 = 30 * 86_400_000;

const BAD_TIMES: [&str; 3] = ["2026-11-28T14:59:59", "not-a-time", "2026-02-30T10:00:00Z"];

impl Generator {
    /// The next malformed record, due at `due_ms`. It uses a fresh order id (so it never
    /// interferes with a real order's lifecycle) and a fresh event id.
    pub(super) fn malformed(&mut self, due_ms: i64) -> GenRecord {
        let k = self.malformed_count;
        self.malformed_count += 1;
        let reason_idx = (k % MALFORMED_REASONS.len() as u64) as usize;
        let reason = MALFORMED_REASONS[reason_idx];
        let variant = k / MALFORMED_REASONS.len() as u64;
        let alt = |n: u64| variant % n;
        let v1_or_v2 = if alt(2) == 0 { Schema::V1 } else { Schema::V2 };

        let mut time_ms = self.cfg.start_ms + due_ms;
        let (schema, defect) = match reason {
            "missing_event_id" => (v1_or_v2, if alt(4) < 2 { Defect::MissingEventId } else { Defect::EmptyEventId }),
            "unknown_schema_version" => (v1_or_v2, Defect::SchemaVersion([3, 0, 99][alt(3) as usize])),
            "unknown_event_type" => (v1_or_v2, Defect::UnknownType),
            "unparsable_time" => (Schema::V1, Defect::BadTime(BAD_TIMES[alt(3) as usize])),
            "non_positive_quantity" => (v1_or_v2, Defect::Quantity(if alt(2) == 0 { 0 } else { -1 })),
            "unknown_currency" => (v1_or_v2, Defect::Currency("ZZZ")),
            "mixed_currencies" => (Schema::V2, Defect::MixedCurrencies),
            "event_time_in_future" => {
                time_ms += FUTURE_SHIFT_MS;
                (v1_or_v2, Defect::None)
            }
            "invalid_amount" => match alt(3) {
                0 => (Schema::V1, Defect::UnitPrice("abc")),
                1 => (Schema::V1, Defect::NegativePrice),
                _ => (Schema::V2, Defect::NegativePrice),
            },
            "invalid_field" => (v1_or_v2, Defect::MissingStore),
            // "not_json" is built from a well-formed v1 event below.
            _ => (Schema::V1, Defect::None),
        };

        let rng = &mut self.rng;
        let store_idx = rng.gen_range(0..self.stores.len());
        let store = &self.stores[store_idx];
        let mut lines = [Line::default(); MAX_LINES];
        let min_lines = if defect == Defect::MixedCurrencies { 2 } else { 1 };
        let mut n = pick_lines(rng, &self.catalog, &mut lines, min_lines);
        if n < min_lines {
            // A one-SKU catalogue: repeat the line so the currencies can differ.
            lines[1] = lines[0];
            n = 2;
        }
        for line in &mut lines[..n] {
            line.qty = pick_qty(rng);
            line.unit_minor = self.catalog.price_minor(line.sku, store.currency());
        }
        let order_id = self.ids.order_id(self.book.fresh_serial());
        let event_id = self.ids.event_id(self.next_event_serial);
        self.next_event_serial += 1;

        let mut value = Vec::with_capacity(self.value_capacity);
        let draft = Draft {
            schema,
            kind: Kind::Placed,
            event_id: &event_id,
            order_id: &order_id,
            time_ms,
            store,
            channel: "web",
            lines: &lines[..n],
            shipped_prices: true,
            refund_minor: 0,
            defect,
        };
        write_event_open(&mut value, &draft);
        self.padder.finish(&mut value, self.cfg.target_event_bytes, store, rng);

        if reason == "not_json" {
            match alt(3) {
                0 => value.truncate(value.len() / 2),
                1 => {
                    value.clear();
                    value.extend_from_slice(b"ORDER ");
                    value.extend_from_slice(order_id.as_bytes());
                    value.extend_from_slice(b" placed by ");
                    value.extend_from_slice(store.name.as_bytes());
                }
                _ => {
                    value.truncate(value.len() / 3);
                    value.splice(0..0, [0xff, 0xfe, 0x00]);
                }
            }
        }
        GenRecord { topic: GenTopic::Orders, key: order_id, value, due_ms, truth: Truth::Malformed { reason } }
    }
}
