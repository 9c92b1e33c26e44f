//! A scenario's topics, topology files and seeded history.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;
use tidemark::kafka::reader::read_topic;
use tidemark::kafka::KafkaSettings;

/// Rules with thresholds low enough that a small history fires every kind of action.
const RULES: &str = r#"
[[rules]]
id = "oversell"
version = 1
mode = "act"

[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 25, replenish_to = 100 }

[[rules]]
id = "velocity_spike"
version = 1
mode = "notify"
params = { min_units = 8, factor = "2.0", baseline_windows = 15 }
"#;

/// Names of one run's topics: inputs are shared by the runs of a scenario, outputs are not.
#[derive(Clone, Debug)]
pub struct RunTopics {
    pub orders: String,
    pub inventory: String,
    pub dashboard: String,
    pub finance: String,
    pub dead_letter: String,
    pub late: String,
    pub audit: String,
}

/// Writes the topology of one run (with `fences`, `internal.idle_promise = "fence"`) and
/// creates its topics.
#[allow(clippy::too_many_arguments)]
pub fn prepare_run(
    bin: &Path,
    bootstrap: &str,
    dir: &Path,
    inputs: &str,
    run: &str,
    action_url: &str,
    notify_url: &str,
    fences: bool,
) -> anyhow::Result<(PathBuf, RunTopics)> {
    let example = tidemark_topology::config::EXAMPLE;
    let cut = example.find("# Anomaly rules.").context("example topology has a rules section")?;
    let text = example[..cut]
        .replace("topic = \"orders\"", &format!("topic = \"{inputs}.orders\""))
        .replace("topic = \"inventory\"", &format!("topic = \"{inputs}.inventory\""))
        .replace("tidemark.", &format!("{run}."))
        .replace("commit_interval = \"200ms\"", "commit_interval = \"100ms\"")
        .replace("# action_url = \"https://inventory.internal/actions\"", &format!("action_url = \"{action_url}\""))
        .replace("# notify_url = \"https://alerts.internal/notify\"", &format!("notify_url = \"{notify_url}\""))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"")
        .replace("allow_unsigned = false", "allow_unsigned = true")
        + RULES;
    let promise = if fences { "idle_promise = \"fence\"" } else { "idle_promise = \"clock\"" };
    anyhow::ensure!(text.contains("idle_promise = \"clock\""), "the example topology sets internal.idle_promise");
    let text = text.replace("idle_promise = \"clock\"", promise);
    let path = dir.join(format!("{run}.toml"));
    std::fs::write(&path, text)?;
    let out = Command::new(bin).args(["topics", "--bootstrap", bootstrap, "--topology"]).arg(&path).output()?;
    anyhow::ensure!(out.status.success(), "tidemark topics: {}", String::from_utf8_lossy(&out.stderr));
    let topics = RunTopics {
        orders: format!("{inputs}.orders"),
        inventory: format!("{inputs}.inventory"),
        dashboard: format!("{run}.dashboard"),
        finance: format!("{run}.finance-provisional"),
        dead_letter: format!("{run}.dead-letter"),
        late: format!("{run}.late"),
        audit: format!("{run}.audit"),
    };
    Ok((path, topics))
}

/// Produces the seeded history, paced at `rate` records/s of wall time.
pub fn generate(
    bin: &Path,
    bootstrap: &str,
    topics: &RunTopics,
    seed: u64,
    events: u64,
    rate: u32,
) -> anyhow::Result<()> {
    let out = Command::new(bin)
        .args([
            "gen",
            "--bootstrap",
            bootstrap,
            "--orders-topic",
            &topics.orders,
            "--inventory-topic",
            &topics.inventory,
        ])
        .args(["--seed", &seed.to_string(), "--events", &events.to_string(), "--rate", &rate.to_string(), "--paced"])
        .args(["--skus", "40", "--inventory-every", "150", "--event-bytes", "256", "--malformed-fraction", "0.01"])
        .args(["--dup-fraction", "0.02", "--late-fraction", "0.02", "--start", "now"])
        .output()?;
    anyhow::ensure!(out.status.success(), "tidemark gen: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// Appends every record of `topic` to itself once more (the whole log replayed).
pub fn append_again(bootstrap: &str, topic: &str) -> anyhow::Result<usize> {
    let settings = KafkaSettings::new(bootstrap);
    let records = read_topic(&settings, topic)?;
    let producer: BaseProducer = settings.client_config().set("enable.idempotence", "true").create()?;
    for m in &records {
        let mut r =
            BaseRecord::<[u8], [u8]>::to(topic).partition(m.partition()).payload(m.payload().unwrap_or_default());
        if let Some(k) = m.key() {
            r = r.key(k);
        }
        let mut r = Some(r);
        while let Some(rec) = r.take() {
            if let Err((_, back)) = producer.send(rec) {
                producer.poll(Duration::from_millis(20));
                r = Some(back);
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    Ok(records.len())
}

/// Sets one config of `topic`, keeping its other topic-level settings.
pub fn set_topic_config(
    rt: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    rt.block_on(tidemark::kafka::admin::set_topic_config(&KafkaSettings::new(bootstrap), topic, key, value))
}
