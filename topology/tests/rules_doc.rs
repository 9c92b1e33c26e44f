//! The five worked examples of `docs/rules.md`, read from the page itself: each is added to
//! the example topology, validated, and run through the SKU processor, and the key and
//! evidence the page shows are checked. The page's table of values is checked against the
//! language's own list.

use std::path::Path;

use tidemark_topology::config::{parse, EXAMPLE};
use tidemark_topology::expr::VARS;
use tidemark_topology::sku::{ActionIntent, LineKind, SkuInput, SkuProcessor};

const SEC: i64 = 1_000;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;
/// 2026-11-28T00:00:00Z.
const T0: i64 = 1_795_824_000_000;
const SKU: &str = "SKU-1";

fn page() -> String {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let path = Path::new(&root).join("../docs/rules.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The TOML block of each worked example, by its heading.
fn examples(page: &str) -> Vec<(String, String)> {
    let section = page.split("## Five worked examples").nth(1).expect("the examples section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split("\n### ")
        .skip(1)
        .map(|part| {
            let heading = part.lines().next().unwrap_or_default().to_string();
            let block = part.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).expect("a toml block");
            (heading, block.to_string())
        })
        .collect()
}

/// The example topology with its rules replaced by `rules`.
fn processor(rules: &str) -> SkuProcessor {
    let base = EXAMPLE.split("# Anomaly rules.").next().expect("the example's rules");
    let text = format!("{base}{rules}");
    let t = parse(&text, "rules.md").unwrap_or_else(|e| panic!("{e}\n{rules}"));
    assert_eq!(t.rules.len(), 1);
    SkuProcessor::new(t.rules, t.dashboard_window)
}

fn line(sku: &str, kind: LineKind, qty: u32, t: i64) -> SkuInput {
    SkuInput::Line { sku: sku.into(), kind, qty, event_time_ms: t, append_ms: t + 250 }
}

fn placed(qty: u32, t: i64) -> SkuInput {
    line(SKU, LineKind::Placed, qty, t)
}

fn cancelled(qty: u32, t: i64) -> SkuInput {
    line(SKU, LineKind::Cancelled, qty, t)
}

fn snapshot(on_hand: i64, as_of_ms: i64) -> SkuInput {
    SkuInput::Snapshot { sku: SKU.into(), on_hand, as_of_ms, append_ms: as_of_ms + 5 * SEC }
}

/// The intents of `inputs`, and the evidence of each as the payload's bytes have it.
fn run(p: &mut SkuProcessor, inputs: &[SkuInput]) -> Vec<(String, String)> {
    inputs
        .iter()
        .flat_map(|i| p.apply(i))
        .map(|i: ActionIntent| {
            let payload = String::from_utf8(i.payload_json()).expect("utf8");
            let evidence = payload.split("\"evidence\":").nth(1).and_then(|e| e.split_inclusive('}').next());
            (i.key, evidence.expect("evidence").to_string())
        })
        .collect()
}

fn inputs_of(example: usize) -> Vec<SkuInput> {
    match example {
        1 => {
            let at = T0 + 14 * HOUR;
            vec![
                snapshot(5, at),
                placed(3, at + SEC),
                cancelled(1, at + 2 * SEC),
                placed(4, at + 59 * MIN + 59 * SEC + 120),
            ]
        }
        2 => vec![snapshot(500, T0), placed(1, T0 + MIN), placed(5, T0 + 2 * MIN), placed(5, T0 + 3 * MIN)],
        3 => vec![snapshot(10, T0), placed(3, T0 + SEC), cancelled(4, T0 + 2 * SEC), cancelled(1, T0 + 3 * SEC)],
        4 => {
            let mut inputs: Vec<SkuInput> = (0..10).map(|k| placed(5, T0 + k * MIN)).collect();
            inputs.extend([placed(16, T0 + 10 * MIN), placed(4, T0 + 10 * MIN + SEC)]);
            inputs
        }
        5 => {
            let mut inputs: Vec<SkuInput> = (0..30).map(|k| placed(2, T0 + k * MIN)).collect();
            inputs.extend([line("SKU-2", LineKind::Placed, 1, T0 + 30 * MIN), snapshot(40, T0 + 30 * MIN)]);
            inputs
        }
        n => panic!("no scenario for example {n}"),
    }
}

/// The key and the evidence the page shows for an example: its last two `…` spans that
/// start with the key's rule id and with `{`.
fn shown(text: &str, id: &str) -> (String, String) {
    let spans: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
    let key = spans.iter().rev().find(|s| s.starts_with(&format!("{id}:v1:"))).expect("a key");
    let evidence = spans.iter().rev().find(|s| s.starts_with('{')).expect("evidence");
    (key.to_string(), evidence.to_string())
}

#[test]
fn each_worked_example_of_the_rules_page_validates_and_fires_the_key_and_evidence_it_shows() {
    let page = page();
    let examples = examples(&page);
    assert_eq!(examples.len(), 5, "five worked examples");
    let section = page.split("## Five worked examples").nth(1).unwrap_or_default();
    for (n, (heading, rules)) in examples.iter().enumerate() {
        let id = rules.lines().find_map(|l| l.strip_prefix("id = \"")).and_then(|l| l.strip_suffix('"')).expect("id");
        let text = section.split(heading.as_str()).nth(1).unwrap_or_default();
        let text = text.split("\n### ").next().unwrap_or_default();
        let expected = shown(text, id);
        let mut p = processor(rules);
        let out = run(&mut p, &inputs_of(n + 1));
        assert_eq!(out, [expected], "example {}: {heading}", n + 1);
    }
}

#[test]
fn the_rules_page_documents_every_value_a_rule_may_read() {
    let page = page();
    for (name, _, ty) in VARS {
        let row = format!("| `{name}` | {ty} |");
        assert!(page.contains(&row), "docs/rules.md has no row `{row}`");
    }
}
