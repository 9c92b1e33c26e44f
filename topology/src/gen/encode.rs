//! Byte-level JSON writers for schema v1, schema v2 and inventory snapshots, with optional
//! single-field defects (for malformed records) and realistic padding up to a target size.
//!
//! Everything is appended to a `Vec<u8>` by hand: no `serde_json::Value` trees and no
//! `fmt` machinery on the hot path. Every string written here is ASCII without `"` or `\`,
//! so nothing needs escaping.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::catalog::{push_sku, Currency, Store};
use super::clock::{push_digits, push_rfc3339};
use super::orders::{Kind, Line};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Schema {
    V1,
    V2,
}

/// The one thing wrong with a malformed record (`None` for a well-formed one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Defect {
    None,
    MissingEventId,
    EmptyEventId,
    SchemaVersion(u32),
    UnknownType,
    /// v1 `event_time` replaced by this text.
    BadTime(&'static str),
    /// First line's quantity replaced by this value.
    Quantity(i64),
    /// Every currency field replaced by this code.
    Currency(&'static str),
    /// v2 items alternate between USD and EUR.
    MixedCurrencies,
    /// v1 first line's `unit_price` replaced by this text.
    UnitPrice(&'static str),
    /// First line's price negated (v1 `unit_price`, v2 `amount_minor`).
    NegativePrice,
    MissingStore,
}

/// Everything needed to write one order event.
pub(super) struct Draft<'a> {
    pub(super) schema: Schema,
    pub(super) kind: Kind,
    pub(super) event_id: &'a str,
    pub(super) order_id: &'a str,
    pub(super) time_ms: i64,
    pub(super) store: &'a Store,
    pub(super) channel: &'static str,
    pub(super) lines: &'a [Line],
    /// Whether shipped lines carry their price (optional for shipments).
    pub(super) shipped_prices: bool,
    pub(super) refund_minor: i64,
    pub(super) defect: Defect,
}

/// Writes the event's fields, leaving the object open (no closing `}`).
pub(super) fn write_event_open(buf: &mut Vec<u8>, d: &Draft<'_>) {
    match d.schema {
        Schema::V1 => write_v1(buf, d),
        Schema::V2 => write_v2(buf, d),
    }
}

fn write_head(buf: &mut Vec<u8>, d: &Draft<'_>, version: u32) {
    buf.extend_from_slice(b"{\"schema_version\":");
    let version = match d.defect {
        Defect::SchemaVersion(v) => v,
        _ => version,
    };
    push_u64(buf, u64::from(version));
    match d.defect {
        Defect::MissingEventId => {}
        Defect::EmptyEventId => buf.extend_from_slice(b",\"event_id\":\"\""),
        _ => {
            buf.extend_from_slice(b",\"event_id\":\"");
            buf.extend_from_slice(d.event_id.as_bytes());
            buf.push(b'"');
        }
    }
    buf.extend_from_slice(b",\"order_id\":\"");
    buf.extend_from_slice(d.order_id.as_bytes());
    buf.push(b'"');
}

fn write_v1(buf: &mut Vec<u8>, d: &Draft<'_>) {
    write_head(buf, d, 1);
    buf.extend_from_slice(b",\"event_type\":\"");
    buf.extend_from_slice(match (d.defect, d.kind) {
        (Defect::UnknownType, _) => b"order_teleported".as_slice(),
        (_, Kind::Placed) => b"order_placed",
        (_, Kind::Cancelled) => b"order_cancelled",
        (_, Kind::Shipped) => b"order_shipped",
        (_, Kind::Refunded) => b"order_refunded",
    });
    buf.extend_from_slice(b"\",\"event_time\":\"");
    match d.defect {
        Defect::BadTime(text) => buf.extend_from_slice(text.as_bytes()),
        _ => push_rfc3339(buf, d.time_ms, d.store.city.offset_min, true),
    }
    buf.push(b'"');
    if d.defect != Defect::MissingStore {
        buf.extend_from_slice(b",\"store\":\"");
        buf.extend_from_slice(d.store.name.as_bytes());
        buf.push(b'"');
    }
    let currency = d.store.currency();
    buf.extend_from_slice(b",\"currency\":\"");
    buf.extend_from_slice(currency_code(d.defect, currency, 0).as_bytes());
    buf.push(b'"');
    if d.kind == Kind::Refunded {
        buf.extend_from_slice(b",\"amount\":\"");
        push_money(buf, d.refund_minor, currency.decimals());
        buf.push(b'"');
        return;
    }
    buf.extend_from_slice(b",\"lines\":[");
    let priced = d.kind != Kind::Shipped || d.shipped_prices;
    for (i, line) in d.lines.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(b"{\"sku\":\"");
        push_sku(buf, line.sku);
        buf.extend_from_slice(b"\",\"qty\":");
        push_qty(buf, d.defect, i, line.qty);
        if priced {
            buf.extend_from_slice(b",\"unit_price\":\"");
            match d.defect {
                Defect::UnitPrice(text) if i == 0 => buf.extend_from_slice(text.as_bytes()),
                Defect::NegativePrice if i == 0 => push_money(buf, -line.unit_minor, currency.decimals()),
                _ => push_money(buf, line.unit_minor, currency.decimals()),
            }
            buf.push(b'"');
        }
        buf.push(b'}');
    }
    buf.push(b']');
}

fn write_v2(buf: &mut Vec<u8>, d: &Draft<'_>) {
    write_head(buf, d, 2);
    buf.extend_from_slice(b",\"type\":\"");
    buf.extend_from_slice(match (d.defect, d.kind) {
        (Defect::UnknownType, _) => b"ORDER_TELEPORTED".as_slice(),
        (_, Kind::Placed) => b"ORDER_PLACED",
        (_, Kind::Cancelled) => b"ORDER_CANCELLED",
        (_, Kind::Shipped) => b"ORDER_SHIPPED",
        (_, Kind::Refunded) => b"ORDER_REFUNDED",
    });
    buf.extend_from_slice(b"\",\"occurred_at_ms\":");
    push_i64(buf, d.time_ms);
    if d.defect != Defect::MissingStore {
        buf.extend_from_slice(b",\"store_id\":\"");
        buf.extend_from_slice(d.store.name.as_bytes());
        buf.push(b'"');
    }
    buf.extend_from_slice(b",\"channel\":\"");
    buf.extend_from_slice(d.channel.as_bytes());
    buf.push(b'"');
    let currency = d.store.currency();
    if d.kind == Kind::Refunded {
        buf.extend_from_slice(b",\"refund\":");
        push_v2_money(buf, d.refund_minor, currency_code(d.defect, currency, 0));
        return;
    }
    buf.extend_from_slice(b",\"items\":[");
    let priced = d.kind != Kind::Shipped || d.shipped_prices;
    for (i, line) in d.lines.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(b"{\"sku\":\"");
        push_sku(buf, line.sku);
        buf.extend_from_slice(b"\",\"quantity\":");
        push_qty(buf, d.defect, i, line.qty);
        if priced {
            buf.extend_from_slice(b",\"price\":");
            let item_currency = currency_code(d.defect, currency, i);
            let amount = match d.defect {
                Defect::NegativePrice if i == 0 => -line.unit_minor,
                _ => line.unit_minor,
            };
            push_v2_money(buf, amount, item_currency);
        }
        buf.push(b'}');
    }
    buf.push(b']');
}

fn currency_code(defect: Defect, currency: Currency, item: usize) -> &'static str {
    match defect {
        Defect::Currency(code) => code,
        Defect::MixedCurrencies if item % 2 == 1 => Currency::Eur.code(),
        Defect::MixedCurrencies => Currency::Usd.code(),
        _ => currency.code(),
    }
}

fn push_qty(buf: &mut Vec<u8>, defect: Defect, item: usize, qty: u32) {
    match defect {
        Defect::Quantity(q) if item == 0 => push_i64(buf, q),
        _ => push_u64(buf, u64::from(qty)),
    }
}

fn push_v2_money(buf: &mut Vec<u8>, amount_minor: i64, currency: &str) {
    buf.extend_from_slice(b"{\"amount_minor\":");
    push_i64(buf, amount_minor);
    buf.extend_from_slice(b",\"currency\":\"");
    buf.extend_from_slice(currency.as_bytes());
    buf.extend_from_slice(b"\"}");
}

/// Writes an inventory snapshot value.
pub(super) fn write_snapshot(buf: &mut Vec<u8>, sku: u32, on_hand: u32, as_of_ms: i64) {
    buf.extend_from_slice(b"{\"sku\":\"");
    push_sku(buf, sku);
    buf.extend_from_slice(b"\",\"on_hand\":");
    push_u64(buf, u64::from(on_hand));
    buf.extend_from_slice(b",\"as_of\":\"");
    push_rfc3339(buf, as_of_ms, 0, as_of_ms.rem_euclid(1000) != 0);
    buf.extend_from_slice(b"\"}");
}

/// Writes a minor-unit amount as a major-unit decimal string with exactly `decimals` places.
pub(super) fn push_money(buf: &mut Vec<u8>, minor: i64, decimals: u32) {
    if minor < 0 {
        buf.push(b'-');
    }
    let abs = minor.unsigned_abs();
    let scale = 10u64.pow(decimals);
    push_u64(buf, abs / scale);
    if decimals > 0 {
        buf.push(b'.');
        push_digits(buf, abs % scale, decimals as usize);
    }
}

pub(super) fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&tmp[i..]);
}

pub(super) fn push_i64(buf: &mut Vec<u8>, n: i64) {
    if n < 0 {
        buf.push(b'-');
    }
    push_u64(buf, n.unsigned_abs());
}

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(super) fn push_hex16(buf: &mut Vec<u8>, x: u64) {
    for shift in (0..16).rev() {
        buf.push(HEX[((x >> (shift * 4)) & 0xf) as usize]);
    }
}

/// Extra fields a real order service would send and the normaliser ignores. They are
/// appended while they fit, then one filler field brings the value to exactly `target`
/// bytes; the object is closed either way. `target == 0` means no padding.
pub(super) struct Padder {
    /// Base64-alphabet text drawn once from the seeded RNG; fillers are slices of it.
    filler: Vec<u8>,
}

const FILLER_LEN: usize = 8192;
const FIRST_NAMES: [&str; 8] = ["Aiko", "Ben", "Chloe", "Daisuke", "Emma", "Felix", "Grace", "Hugo"];
const LAST_NAMES: [&str; 8] = ["Sato", "Miller", "Dubois", "Tanaka", "Garcia", "Martin", "Kim", "Rossi"];
const TIERS: [&str; 4] = ["basic", "silver", "gold", "platinum"];
const PROMOS: [&str; 6] = ["BF2026", "FREESHIP", "WELCOME10", "CYBER25", "VIP5", "APPONLY"];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "ShopApp/7.4.2 (Android 15; Pixel 9) okhttp/4.12.0",
];
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

impl Padder {
    pub(super) fn new(rng: &mut ChaCha8Rng) -> Padder {
        let filler = (0..FILLER_LEN).map(|_| B64[rng.gen_range(0..B64.len())]).collect();
        Padder { filler }
    }

    pub(super) fn finish(&self, buf: &mut Vec<u8>, target: usize, store: &Store, rng: &mut ChaCha8Rng) {
        if target == 0 || buf.len() + 1 >= target {
            buf.push(b'}');
            return;
        }
        // Room left for fields once the closing brace is accounted for.
        let limit = target - 1;
        let city = store.city;
        let mark = buf.len();
        buf.extend_from_slice(b",\"customer\":{\"id\":\"c-");
        push_digits(buf, rng.gen_range(0..100_000_000), 8);
        buf.extend_from_slice(b"\",\"tier\":\"");
        buf.extend_from_slice(pick(&TIERS, rng).as_bytes());
        buf.extend_from_slice(b"\",\"locale\":\"");
        buf.extend_from_slice(city.locale.as_bytes());
        buf.extend_from_slice(b"\",\"email_sha256\":\"");
        for _ in 0..4 {
            push_hex16(buf, rng.gen());
        }
        buf.extend_from_slice(b"\"}");
        keep_if_fits(buf, mark, limit);

        let mark = buf.len();
        buf.extend_from_slice(b",\"shipping_address\":{\"name\":\"");
        buf.extend_from_slice(pick(&FIRST_NAMES, rng).as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(pick(&LAST_NAMES, rng).as_bytes());
        buf.extend_from_slice(b"\",\"line1\":\"");
        push_u64(buf, rng.gen_range(1..=240));
        buf.push(b' ');
        buf.extend_from_slice(pick(city.streets, rng).as_bytes());
        buf.extend_from_slice(b"\",\"city\":\"");
        buf.extend_from_slice(city.address_city.as_bytes());
        buf.extend_from_slice(b"\",\"postcode\":\"");
        buf.extend_from_slice(city.postcode_prefix.as_bytes());
        push_digits(buf, rng.gen_range(1..100), 2);
        buf.extend_from_slice(b"\",\"country\":\"");
        buf.extend_from_slice(city.country.as_bytes());
        buf.extend_from_slice(b"\"}");
        keep_if_fits(buf, mark, limit);

        let mark = buf.len();
        buf.extend_from_slice(b",\"promo_codes\":[");
        for i in 0..rng.gen_range(0..=2) {
            if i > 0 {
                buf.push(b',');
            }
            buf.push(b'"');
            buf.extend_from_slice(pick(&PROMOS, rng).as_bytes());
            buf.push(b'"');
        }
        buf.push(b']');
        keep_if_fits(buf, mark, limit);

        let mark = buf.len();
        buf.extend_from_slice(b",\"client\":{\"user_agent\":\"");
        buf.extend_from_slice(pick(&AGENTS, rng).as_bytes());
        buf.extend_from_slice(b"\",\"ip\":\"203.0.113.");
        push_u64(buf, rng.gen_range(1..=254));
        buf.extend_from_slice(b"\",\"session_id\":\"s-");
        push_hex16(buf, rng.gen());
        buf.extend_from_slice(b"\"}");
        keep_if_fits(buf, mark, limit);

        const FILLER_FIELD: &[u8] = b",\"risk_token\":\"";
        let overhead = FILLER_FIELD.len() + 1;
        if buf.len() + overhead <= limit {
            let mut want = limit - buf.len() - overhead;
            buf.extend_from_slice(FILLER_FIELD);
            while want > 0 {
                let n = want.min(FILLER_LEN / 2);
                let at = rng.gen_range(0..FILLER_LEN - n);
                buf.extend_from_slice(&self.filler[at..at + n]);
                want -= n;
            }
            buf.push(b'"');
        }
        buf.push(b'}');
    }
}

fn keep_if_fits(buf: &mut Vec<u8>, mark: usize, limit: usize) {
    if buf.len() > limit {
        buf.truncate(mark);
    }
}

fn pick<'a>(items: &[&'a str], rng: &mut ChaCha8Rng) -> &'a str {
    items.get(rng.gen_range(0..items.len().max(1))).copied().unwrap_or("")
}
