//! The fast path against serde_json: whenever it answers, it answers what serde would have;
//! and it does answer for the records producers send.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::json::{checked_text, parse_text};
use super::{fast, RawOrder};
use crate::gen::{GenConfig, GenTopic, Generator};

/// Order records of the generator: v1 and v2, ~1 KiB with ignored fields, duplicates and
/// 2 % malformed records of every kind the generator makes.
fn generator_records(seed: u64, events: u64) -> Vec<Vec<u8>> {
    let cfg = GenConfig { seed, events, malformed_fraction: 0.02, ..GenConfig::default() };
    Generator::new(cfg).expect("generator config").filter(|r| r.topic == GenTopic::Orders).map(|r| r.value).collect()
}

/// What serde makes of `text`, rendered for comparison (`Err` for a rejection).
fn by_serde(text: &str) -> Result<String, String> {
    parse_text::<RawOrder<'_>>(text).map(|raw| format!("{raw:?}")).map_err(|r| r.to_string())
}

/// Checks one input: `Some` from the fast path only where serde reads the same structs.
/// Returns whether the fast path answered.
fn agrees(bytes: &[u8]) -> bool {
    let Ok(text) = checked_text(Some(bytes)) else { return false };
    let Some(fast) = fast::order(text) else { return false };
    let fast = format!("{fast:?}");
    match by_serde(text) {
        Ok(serde) => assert_eq!(fast, serde, "the fast path read {text:?} differently"),
        Err(e) => panic!("the fast path read {text:?} as {fast}, serde_json rejects it: {e}"),
    }
    true
}

/// One random edit of a record, biased to the bytes JSON's grammar turns on.
fn mutate(rng: &mut ChaCha8Rng, bytes: &[u8]) -> Vec<u8> {
    const SIGNIFICANT: &[u8] = b"{}[]\":,\\ -+.0123456789eEtfnul\t\n\x01x";
    let mut out = bytes.to_vec();
    for _ in 0..rng.gen_range(1..=3) {
        if out.is_empty() {
            break;
        }
        let at = rng.gen_range(0..out.len());
        let byte = SIGNIFICANT[rng.gen_range(0..SIGNIFICANT.len())];
        match rng.gen_range(0..5) {
            0 => {
                out.remove(at);
            }
            1 => out.insert(at, byte),
            2 => out[at] = byte,
            3 => out.truncate(at),
            _ => {
                // Repeat a slice: duplicate keys, doubled commas, nested copies.
                let end = (at + rng.gen_range(1..40)).min(out.len());
                let piece = out[at..end].to_vec();
                let to = rng.gen_range(0..=out.len());
                out.splice(to..to, piece);
            }
        }
    }
    out
}

#[test]
fn the_fast_path_reads_nearly_every_generated_record_as_serde_does() {
    let records = generator_records(5, 20_000);
    let answered = records.iter().filter(|r| agrees(r)).count();
    // Only malformed records (2 %) and the rare escape are left to serde_json.
    assert!(answered * 100 >= records.len() * 97, "{answered} of {} records took the fast path", records.len());
}

#[test]
fn an_edited_record_is_read_as_serde_reads_it_or_left_to_serde() {
    let records = generator_records(11, 2_000);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (mut answered, mut tried) = (0, 0);
    for record in &records {
        for _ in 0..25 {
            tried += 1;
            answered += usize::from(agrees(&mutate(&mut rng, record)));
        }
    }
    // Many edits land in ignored text or keep the record valid: the comparison has teeth.
    assert!(answered * 10 >= tried, "only {answered} of {tried} edited records took the fast path");
}

#[test]
fn edge_cases_of_the_grammar_agree_with_serde() {
    let cases: &[&str] = &[
        r#"{}"#,
        r#" { "schema_version" : 2 } "#,
        r#"{"schema_version":2,"schema_version":2}"#,
        r#"{"schema_version":null,"schema_version":2}"#,
        r#"{"x":1,"x":2,"event_id":"e"}"#,
        r#"{"event_id":"e\u0031"}"#,
        r#"{"event_id":"e","pad":"a\"b"}"#,
        r#"{"event\u005fid":"e"}"#,
        r#"{"schema_version":-0}"#,
        r#"{"schema_version":0}"#,
        r#"{"schema_version":01}"#,
        r#"{"schema_version":2.0}"#,
        r#"{"schema_version":1e3}"#,
        r#"{"schema_version":-9223372036854775807}"#,
        r#"{"schema_version":-9223372036854775808}"#,
        r#"{"schema_version":9223372036854775808}"#,
        r#"{"schema_version":18446744073709551615}"#,
        r#"{"schema_version":18446744073709551616}"#,
        r#"{"schema_version":99999999999999999999999}"#,
        r#"{"pad":[1,2.5,-3e-2,true,false,null,{"a":[{}]}],"event_id":"e"}"#,
        r#"{"pad":[1,],"event_id":"e"}"#,
        r#"{"pad":{"a":1,},"event_id":"e"}"#,
        r#"{"event_id":"e",}"#,
        r#"{"event_id":"e"} x"#,
        r#"{"event_id":"e"}}"#,
        r#"{"pad":tru}"#,
        r#"{"pad":nul,"event_id":"e"}"#,
        r#"{"pad":-}"#,
        r#"{"pad":1.}"#,
        r#"{"pad":1e+}"#,
        "{\"pad\":\"tab\there\"}",
        "{\"event_id\":\"e\"}\n",
        "{\n\t\"event_id\": \"e\"\r\n}",
        r#"{"lines":null,"items":null,"refund":null}"#,
        r#"{"lines":{},"items":"x","refund":[1]}"#,
        r#"{"lines":[null,1,"s",true,[],{"sku":"a","sku":"b"}]}"#,
        r#"{"lines":[{"sku":"a","qty":2,"unit_price":"1.5","x":{}}],"items":[{"price":null},{"price":7}]}"#,
        r#"{"items":[{"sku":"a","quantity":1,"price":{"amount_minor":5,"currency":"EUR","currency":"EUR"}}]}"#,
        r#"{"refund":{"amount_minor":5,"currency":"JPY"},"type":"ORDER_REFUNDED"}"#,
        r#"{"channel":[],"store_id":{},"type":true}"#,
        r#"[]"#,
        r#""x""#,
        r#"{"a":"#,
        r#"{"a""#,
        "",
    ];
    for case in cases {
        agrees(case.as_bytes());
    }
    // The answered ones include the common shapes, not only refusals.
    assert!(agrees(
        br#"{"lines":[{"sku":"a","qty":2,"unit_price":"1.5","x":{}}],"items":[{"price":null},{"price":7}]}"#
    ));
    assert!(!agrees(br#"{"schema_version":2,"schema_version":2}"#), "a key given twice is serde's to refuse");
}
