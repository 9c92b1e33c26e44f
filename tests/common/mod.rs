//! Shared harness of the black-box tests: a real Kafka broker (started by scripts/test.sh),
//! the `tidemark` binary run as a child process, and readers for its output topics.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;
use tidemark::kafka::reader::read_topic;
use tidemark::kafka::KafkaSettings;

pub const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// A file of the repository, found through the directory cargo runs the test from (a shared
/// target directory may hold a test binary built from another clone of the repository).
pub fn repo_path(relative: &str) -> std::path::PathBuf {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    std::path::Path::new(&root).join(relative)
}

/// The broker every black-box test runs against. scripts/test.sh starts a real Apache Kafka
/// and exports the address; without it these tests must fail, not pass vacuously.
pub fn bootstrap() -> String {
    std::env::var("TIDEMARK_TEST_BOOTSTRAP")
        .expect("TIDEMARK_TEST_BOOTSTRAP is not set: run the suite through scripts/test.sh, which starts Kafka")
}

pub fn settings() -> KafkaSettings {
    KafkaSettings::new(&bootstrap())
}

/// A name unique to this test process and call, for topics and groups.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A topology file whose source is `orders` and whose sinks are fresh topics named after `run`.
pub struct Topo {
    pub path: PathBuf,
    pub orders: String,
    pub dashboard: String,
    pub dead_letter: String,
    pub late: String,
    pub finance_provisional: String,
    pub finance_close: String,
    pub finance_manifest: String,
    _dir: tempfile::TempDir,
}

pub fn topology(orders: &str, run: &str) -> Topo {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = tidemark_topology::config::EXAMPLE
        .replace("topic = \"orders\"", &format!("topic = \"{orders}\""))
        .replace("topic = \"inventory\"", &format!("topic = \"{orders}.inventory\""))
        .replace("tidemark.dashboard", &format!("{run}.dashboard"))
        .replace("tidemark.dead-letter", &format!("{run}.dead-letter"))
        .replace("tidemark.late", &format!("{run}.late"))
        .replace("tidemark.audit", &format!("{run}.audit"))
        .replace("tidemark.action-dead-letter", &format!("{run}.action-dead-letter"))
        .replace("tidemark.sku-repartition", &format!("{run}.sku-repartition"))
        .replace("tidemark.combine-repartition", &format!("{run}.combine-repartition"))
        .replace("tidemark.finance-provisional", &format!("{run}.finance-provisional"))
        .replace("tidemark.finance-close", &format!("{run}.finance-close"))
        .replace("tidemark.finance-manifest", &format!("{run}.finance-manifest"))
        .replace("commit_interval = \"200ms\"", "commit_interval = \"100ms\"")
        .replace("max_batch_records = 20000", "max_batch_records = 2000")
        // Black-box runs POST to scripted endpoints that check no signature.
        .replace("allow_unsigned = false", "allow_unsigned = true");
    let path = dir.path().join("topology.toml");
    std::fs::write(&path, text).expect("write topology");
    Topo {
        path,
        orders: orders.to_string(),
        dashboard: format!("{run}.dashboard"),
        dead_letter: format!("{run}.dead-letter"),
        late: format!("{run}.late"),
        finance_provisional: format!("{run}.finance-provisional"),
        finance_close: format!("{run}.finance-close"),
        finance_manifest: format!("{run}.finance-manifest"),
        _dir: dir,
    }
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn tidemark");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Creates the topology's topics on the broker.
pub fn create_topics(t: &Topo) {
    run_ok(Command::new(BIN).args(["topics", "--bootstrap", &bootstrap(), "--topology"]).arg(&t.path));
}

/// Generates a seeded log into the orders topic; returns gen's JSON summary.
pub fn generate(orders: &str, args: &[&str]) -> serde_json::Value {
    let out = run_ok(
        Command::new(BIN)
            .args(["gen", "--bootstrap", &bootstrap(), "--orders-topic", orders])
            .args(["--inventory-topic", &format!("{orders}.inventory")])
            .args(if args.contains(&"--inventory-every") { &[][..] } else { &["--inventory-every", "0"][..] })
            .args(args),
    );
    let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string();
    serde_json::from_str(&line).expect("gen summary is JSON")
}

pub fn run_command(t: &Topo, state: &Path, group: &str) -> Command {
    member_command(t, state, group, group)
}

/// One of several processes of a consumer group, with its own static member id.
pub fn member_command(t: &Topo, state: &Path, group: &str, member: &str) -> Command {
    let mut c = Command::new(BIN);
    c.args(["run", "--bootstrap", &bootstrap(), "--group", group, "--instance-id", member, "--topology"])
        .arg(&t.path)
        .arg("--state-dir")
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A log file beside `state` (`<state>.log`) for a process whose stderr nobody reads: a
/// piped stderr that is not drained fills after ~64 KiB of log lines and blocks the process.
pub fn log_beside(state: &Path) -> (Stdio, std::path::PathBuf) {
    let path = state.with_extension("log");
    let file = std::fs::File::create(&path).expect("log file");
    (Stdio::from(file), path)
}

/// Runs the processor until the log is drained; returns its stderr (logs and summary).
pub fn run_to_end(t: &Topo, state: &Path, group: &str) -> String {
    run_to_end_with(t, state, group, &[])
}

/// A crash history, then a clean run to the end of the log on the same state: a process
/// aborted at its third commit between the outputs and the state (outputs acknowledged,
/// state not written: the restart produces again what the topics hold), one SIGKILLed
/// 1.5 s into its run, and a last one that drains the log.
pub fn crash_twice_then_run_to_end(t: &Topo, state: &Path, group: &str) {
    let mut child = spawn_run(t, state, group, &[("TIDEMARK_FAILPOINTS", "commit.after_outputs_before_state=3")]);
    assert!(!child.wait().expect("wait").success(), "the failpoint must abort the process");
    let mut child = spawn_run(t, state, group, &[]);
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    run_to_end(t, state, group);
}

/// [`run_to_end`] with these environment variables (`TIDEMARK_*` flags).
pub fn run_to_end_with(t: &Topo, state: &Path, group: &str, env: &[(&str, &str)]) -> String {
    let mut c = run_command(t, state, group);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = run_ok(c.arg("--exit-at-end"));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn spawn_run(t: &Topo, state: &Path, group: &str, env: &[(&str, &str)]) -> Child {
    let mut c = run_command(t, state, group);
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn tidemark run")
}

/// Every record of `topic`. A topic created moments ago can answer its first metadata
/// request with a leadership error while the broker elects its leader (seen on a loaded
/// host: NotLeaderForPartition): those are retried for up to 10 s, anything else fails.
pub fn read(topic: &str) -> Vec<OwnedMessage> {
    let transient = ["NotLeaderForPartition", "LeaderNotAvailable", "UnknownTopicOrPartition"];
    let mut attempts = 0;
    loop {
        match read_topic(&settings(), topic) {
            Ok(messages) => return messages,
            Err(e) if attempts < 40 && transient.iter().any(|t| format!("{e:#}").contains(t)) => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => panic!("read topic {topic}: {e:#}"),
        }
    }
}

/// Latest value per key, as compaction would keep it.
pub fn compacted(topic: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut map = BTreeMap::new();
    for m in read(topic) {
        map.insert(m.key().unwrap_or_default().to_vec(), m.payload().unwrap_or_default().to_vec());
    }
    map
}

pub fn header(m: &OwnedMessage, name: &str) -> Option<String> {
    let h = m.headers()?;
    (0..h.count())
        .map(|i| h.get(i))
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Copies every record of `from` into `to` (same keys, values, partitions), `times` times over.
pub fn copy_log(from: &str, to: &str, times: usize) {
    let records = read(from);
    let producer: BaseProducer =
        settings().client_config().set("enable.idempotence", "true").create().expect("producer");
    for _ in 0..times {
        for m in &records {
            let mut r =
                BaseRecord::<[u8], [u8]>::to(to).partition(m.partition()).payload(m.payload().unwrap_or_default());
            if let Some(k) = m.key() {
                r = r.key(k);
            }
            while let Err((e, back)) = producer.send(r) {
                assert!(
                    matches!(
                        e,
                        rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
                    ),
                    "{e}"
                );
                r = back;
                producer.poll(Duration::from_millis(20));
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Dashboard values without `as_of`, which derives from append times and so differs between
/// two separately produced logs.
pub fn without_as_of(values: &BTreeMap<Vec<u8>, Vec<u8>>) -> BTreeMap<Vec<u8>, serde_json::Value> {
    values
        .iter()
        .map(|(k, v)| {
            let mut json: serde_json::Value = serde_json::from_slice(v).expect("dashboard JSON");
            if let Some(o) = json.as_object_mut() {
                o.remove("as_of");
            }
            (k.clone(), json)
        })
        .collect()
}

/// A port that was free a moment ago on 127.0.0.1.
///
/// Taken below the kernel's ephemeral range (32768–60999 by default): a port the kernel hands
/// out for `:0` is also where any process's next outgoing connection (a Kafka client's) may
/// take its local port, so it could be in use again by the time the process under test binds
/// it ("Address already in use", seen in CI). Each call in this process tries the next port
/// of its own stretch, starting from one derived from the process id.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = (std::process::id() * 397) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n) % SPAN).expect("port");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// A minimal HTTP/1.1 request; returns (status, body). `None` when nothing listens yet.
pub fn http(method: &str, port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

/// Values of one metric family from a Prometheus text page: `(labels, value)` pairs.
pub fn metric(page: &str, name: &str) -> Vec<(String, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric_name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (metric_name == name).then(|| (labels.to_string(), value.parse().unwrap_or(f64::NAN)))
        })
        .collect()
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `limit` with `what`.
pub fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends a signal to a child process.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().expect("kill");
    assert!(status.success(), "kill -{sig} failed");
}

/// The count in the processor's final summary line (`processed N records`).
pub fn processed(stderr: &str) -> u64 {
    stderr
        .lines()
        .rev()
        .filter_map(|l| l.split("processed ").nth(1))
        .find_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in:\n{stderr}"))
}

/// A generated log with enough stock changes and spikes to fire every rule many times over a
/// few SKUs (for `generate`).
pub const GEN_ACTIONS: &[&str] = &[
    "--events",
    "6000",
    "--rate",
    "50",
    "--seed",
    "21",
    "--skus",
    "40",
    "--inventory-every",
    "150",
    "--event-bytes",
    "256",
];

/// The three example rules with thresholds that fire on [`GEN_ACTIONS`], in the given modes
/// (`oversell`, `low_stock`, `velocity_spike`).
#[allow(unused_imports)] // every test binary compiles this module; only some of them use it
pub use tidemark::testkit::rules::firing_rules;
