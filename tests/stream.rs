//! Black-box tests of `tidemark run` against a real Kafka broker.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::Message;
use rust_decimal::Decimal;
use tidemark_topology::event::EventKind;
use tidemark_topology::normalize::normalize_order;

const GEN: &[&str] = &["--events", "20000", "--rate", "100", "--seed", "7", "--event-bytes", "256"];
const GEN_LONG: &[&str] = &["--events", "60000", "--rate", "100", "--seed", "8", "--event-bytes", "256"];

#[test]
fn a_log_with_every_event_twice_gives_exactly_the_outputs_of_the_log_with_each_once() {
    let once = unique("once");
    let twice = unique("twice");
    let t_once = topology(&once, &unique("run-once"));
    let t_twice = topology(&twice, &unique("run-twice"));
    create_topics(&t_once);
    create_topics(&t_twice);
    generate(&once, &[GEN, &["--dup-fraction", "0", "--malformed-fraction", "0"]].concat());
    copy_log(&once, &twice, 2);

    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&t_once, &state.path().join("a"), &unique("g"));
    let log = run_to_end(&t_twice, &state.path().join("b"), &unique("g"));

    let a = without_as_of(&compacted(&t_once.dashboard));
    let b = without_as_of(&compacted(&t_twice.dashboard));
    assert!(!a.is_empty());
    assert_eq!(a, b, "dashboard values differ between the log and the log twice");
    assert!(log.contains("20000 duplicates ignored"), "every second copy must be a dedup hit:\n{log}");
}

#[test]
fn bad_records_are_dead_lettered_with_their_reason_and_the_good_events_around_them_are_all_counted() {
    let orders = unique("bad");
    let t = topology(&orders, &unique("run-bad"));
    create_topics(&t);
    let summary = generate(&orders, &[GEN, &["--malformed-fraction", "0.05", "--dup-fraction", "0.02"]].concat());
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&t, state.path(), &unique("g"));

    // Every dead letter carries its reason, its source coordinates and the original bytes.
    let source: BTreeMap<(i32, i64), Vec<u8>> =
        read(&orders).iter().map(|m| ((m.partition(), m.offset()), m.payload().unwrap_or_default().to_vec())).collect();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for m in read(&t.dead_letter) {
        let reason = header(&m, "tidemark.reason").expect("reason header");
        let p: i32 = header(&m, "tidemark.source.partition").and_then(|v| v.parse().ok()).expect("partition header");
        let o: i64 = header(&m, "tidemark.source.offset").and_then(|v| v.parse().ok()).expect("offset header");
        assert_eq!(
            source.get(&(p, o)).map(Vec::as_slice),
            m.payload(),
            "dead letter at {p}/{o} must hold the original bytes"
        );
        *reasons.entry(reason).or_default() += 1;
    }
    let expected: BTreeMap<String, u64> = summary["malformed"]
        .as_object()
        .expect("malformed counts")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(reasons, expected, "dead letters by reason must match what the generator broke");
    assert_eq!(expected.len(), 11, "the generator must exercise every SPEC reason: {expected:?}");

    // Independent recomputation of the totals over all windows from the source log.
    let mut want: BTreeMap<(String, String), (u64, Decimal, Decimal, Decimal)> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for m in read(&orders) {
        let append = m.timestamp().to_millis().unwrap_or(0);
        let Ok(e) = normalize_order(m.payload().unwrap_or_default(), append) else { continue };
        if !seen.insert(e.event_id.clone()) || e.kind == EventKind::Shipped {
            continue;
        }
        let Some(c) = e.currency else { continue };
        let w = want.entry((e.store.to_string(), c.code().to_string())).or_default();
        match e.kind {
            EventKind::Placed => {
                w.0 += 1;
                w.1 += e.lines_amount();
            }
            EventKind::Cancelled => w.2 += e.lines_amount(),
            EventKind::Refunded => w.3 += e.refund_amount.unwrap_or_default(),
            EventKind::Shipped => {}
        }
    }
    let mut got: BTreeMap<(String, String), (u64, Decimal, Decimal, Decimal)> = BTreeMap::new();
    for v in compacted(&t.dashboard).values() {
        let r: tidemark_topology::dashboard::DashboardRecord = serde_json::from_slice(v).expect("record");
        let g = got.entry((r.store, r.currency)).or_default();
        g.0 += r.figures.orders;
        g.1 += r.figures.gross;
        g.2 += r.figures.cancelled;
        g.3 += r.figures.refunded;
    }
    assert_eq!(got, want, "dashboard totals must equal a recomputation from the log");
}

#[test]
fn a_run_killed_mid_stream_and_restarted_ends_with_the_outputs_of_an_uninterrupted_run() {
    let orders = unique("kill");
    let clean = topology(&orders, &unique("run-clean"));
    let killed = topology(&orders, &unique("run-killed"));
    create_topics(&clean);
    create_topics(&killed);
    generate(&orders, GEN_LONG);
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&clean, &state.path().join("clean"), &unique("g"));

    let dir = state.path().join("killed");
    let group = unique("g");
    // A deterministic crash between "outputs acknowledged" and "state written"...
    let mut child = spawn_run(&killed, &dir, &group, &[("TIDEMARK_FAILPOINTS", "commit.after_outputs_before_state=5")]);
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the failpoint must abort the process");
    // ...then a SIGKILL at an arbitrary moment of a running process...
    let mut child = spawn_run(&killed, &dir, &group, &[]);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    // ...then a restart that runs to the end.
    let log = run_to_end(&killed, &dir, &group);
    assert!(log.contains("restored"), "{log}");

    assert_eq!(compacted(&killed.dashboard), compacted(&clean.dashboard), "final compacted outputs differ");
}

#[test]
fn two_runs_over_the_same_log_give_byte_identical_output_records() {
    let orders = unique("det");
    let first = topology(&orders, &unique("run-first"));
    let second = topology(&orders, &unique("run-second"));
    create_topics(&first);
    create_topics(&second);
    generate(&orders, GEN);
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&first, &state.path().join("1"), &unique("g"));
    run_to_end(&second, &state.path().join("2"), &unique("g"));

    let a = compacted(&first.dashboard);
    assert!(!a.is_empty());
    assert_eq!(a, compacted(&second.dashboard), "final records differ");
    // Every record is a pure function of its key and version, whatever the batch boundaries.
    let by_version = |topic: &str| -> BTreeMap<(Vec<u8>, u64), Vec<u8>> {
        read(topic)
            .iter()
            .map(|m| {
                let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("json");
                (
                    (m.key().unwrap_or_default().to_vec(), v["version"].as_u64().unwrap_or(0)),
                    m.payload().unwrap_or_default().to_vec(),
                )
            })
            .collect()
    };
    let (x, y) = (by_version(&first.dashboard), by_version(&second.dashboard));
    let mut common = 0;
    for (k, v) in &x {
        if let Some(w) = y.get(k) {
            assert_eq!(v, w, "record {:?} v{} differs", String::from_utf8_lossy(&k.0), k.1);
            common += 1;
        }
    }
    assert!(common >= a.len(), "at least the final versions are shared");
    let dl_a: Vec<_> = read(&first.dead_letter).iter().map(|m| m.payload().unwrap_or_default().to_vec()).collect();
    let dl_b: Vec<_> = read(&second.dead_letter).iter().map(|m| m.payload().unwrap_or_default().to_vec()).collect();
    assert_eq!(dl_a, dl_b, "dead letters differ");
}

/// A topology over `orders` with fresh outputs and the firing rules in shadow mode: every
/// action the log derives is audited under its key, nothing is sent.
fn shadow_topology(orders: &str) -> Topo {
    let topo = topology(orders, &unique("run-threads"));
    let text = std::fs::read_to_string(&topo.path).expect("read");
    let cut = text.find("# Anomaly rules.").expect("rules section");
    let text = text[..cut].to_string() + &firing_rules("shadow", "shadow", "shadow");
    std::fs::write(&topo.path, text).expect("write");
    create_topics(&topo);
    topo
}

/// Every action key a run audited, with its rule and action (the audit's own time aside).
fn audited_actions(t: &Topo) -> BTreeMap<String, String> {
    read(&t.dashboard.replace(".dashboard", ".audit"))
        .iter()
        .map(|m| {
            let r: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("audit JSON");
            let what = format!("{} v{} {} {}", r["rule_id"], r["rule_version"], r["action"], r["sku"]);
            (r["key"].as_str().unwrap_or_default().to_string(), what)
        })
        .collect()
}

#[test]
fn the_same_log_on_one_two_or_four_threads_gives_byte_identical_outputs_and_the_same_action_keys() {
    let orders = unique("threads");
    let runs: Vec<(Topo, &str)> = ["1", "2", "4"].into_iter().map(|n| (shadow_topology(&orders), n)).collect();
    generate(&orders, &[GEN_ACTIONS, &["--malformed-fraction", "0.01", "--dup-fraction", "0.02"]].concat());
    let state = tempfile::tempdir().expect("tmp");
    for (t, threads) in &runs {
        run_to_end_with(t, &state.path().join(threads), &unique("g"), &[("TIDEMARK_THREADS", threads)]);
    }

    let (one, _) = &runs[0];
    let actions = audited_actions(one);
    assert!(actions.len() >= 10, "the log fires many actions, got {}", actions.len());
    let dead = |t: &Topo| -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> =
            read(&t.dead_letter).iter().map(|m| m.payload().unwrap_or_default().to_vec()).collect();
        v.sort();
        v
    };
    assert!(!dead(one).is_empty(), "malformed events are dead-lettered");
    for (t, threads) in &runs[1..] {
        assert_eq!(audited_actions(t), actions, "{threads} threads: the same action keys, rules and SKUs");
        assert!(compacted(&t.dashboard) == compacted(&one.dashboard), "{threads} threads: the dashboard rows");
        assert!(
            compacted(&t.finance_provisional) == compacted(&one.finance_provisional),
            "{threads} threads: the provisional finance rows"
        );
        assert!(dead(t) == dead(one), "{threads} threads: the dead letters");
    }
}

#[test]
fn repartition_records_go_out_in_packs_and_give_the_outputs_of_one_record_each() {
    let orders = unique("packs");
    let (packed, single) = (shadow_topology(&orders), shadow_topology(&orders));
    generate(&orders, &[GEN_ACTIONS, &["--malformed-fraction", "0.01", "--dup-fraction", "0.02"]].concat());
    let state = tempfile::tempdir().expect("tmp");
    run_to_end_with(&packed, &state.path().join("packed"), &unique("g"), &[]);
    run_to_end_with(&single, &state.path().join("single"), &unique("g"), &[("TIDEMARK_REPARTITION_PACKING", "off")]);

    let repartition = |t: &Topo| read(&t.dashboard.replace(".dashboard", ".sku-repartition"));
    let (packs, singles) = (repartition(&packed), repartition(&single));
    let first_bytes = |log: &[rdkafka::message::OwnedMessage]| -> BTreeSet<u8> {
        log.iter().filter_map(|m| m.payload().and_then(|p| p.first()).copied()).collect()
    };
    assert_eq!(first_bytes(&packs), BTreeSet::from([0xB7]), "every record is a pack");
    assert!(!first_bytes(&singles).contains(&0xB7), "with packing off, no record is a pack");
    assert!(packs.len() * 10 < singles.len(), "{} packs for {} single records", packs.len(), singles.len());

    let actions = audited_actions(&single);
    assert!(actions.len() >= 10, "the log fires many actions, got {}", actions.len());
    assert_eq!(audited_actions(&packed), actions, "the same action keys, rules and SKUs");
    assert!(compacted(&packed.dashboard) == compacted(&single.dashboard), "the dashboard rows");
    assert!(compacted(&packed.finance_provisional) == compacted(&single.finance_provisional), "the finance rows");
}

#[test]
fn two_pods_with_static_ownership_split_the_partitions_by_ordinal_and_give_the_single_pod_outputs() {
    let orders = unique("static");
    let single = topology(&orders, &unique("run-single"));
    let pair = topology(&orders, &unique("run-pair"));
    create_topics(&single);
    create_topics(&pair);
    generate(&orders, GEN);
    let state = tempfile::tempdir().expect("tmp");
    run_to_end(&single, &state.path().join("single"), &unique("g"));

    let group = unique("g");
    let pods: Vec<std::process::Child> = (0..2)
        .map(|k| {
            let pod = state.path().join(format!("pod-{k}"));
            member_command(&pair, &pod, &group, &format!("{group}-{k}"))
                .stderr(log_beside(&pod).0)
                .args(["--replicas", "2", "--exit-at-end"])
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut pod in pods {
        let out = pod.wait().expect("wait");
        assert!(out.success(), "pod exited with {out}");
    }
    assert_eq!(compacted(&pair.dashboard), compacted(&single.dashboard), "two pods must end where one pod ends");
}
