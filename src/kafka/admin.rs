//! Creates the topology's topics with the configuration its semantics rely on.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use tidemark_topology::config::{TopicSpec, Topology};

use super::KafkaSettings;

/// After this long without an answer from the broker, the address tidemark is trying is
/// logged (the operation goes on): a wrong `--bootstrap` or a broker that is down shows
/// within seconds, not when a 30 s timeout ends.
const SILENT_FOR: Duration = Duration::from_secs(5);

fn no_answer_yet(settings: &KafkaSettings, what: &str) {
    tracing::warn!(
        bootstrap = %settings.bootstrap,
        "{what}: no answer from the Kafka broker at {} after {} s; still trying (check --bootstrap / \
         TIDEMARK_BOOTSTRAP and that the broker is up)",
        settings.bootstrap,
        SILENT_FOR.as_secs()
    );
}

fn naming_the_broker(settings: &KafkaSettings, what: &str, e: impl Into<anyhow::Error>) -> anyhow::Error {
    e.into().context(format!("{what} (Kafka broker at {})", settings.bootstrap))
}

/// Awaits one admin request; the broker's address is logged when it has not answered within
/// [`SILENT_FOR`], and named in the error.
async fn answered<T, E: Into<anyhow::Error>>(
    settings: &KafkaSettings,
    what: &str,
    op: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    tokio::pin!(op);
    let result = match tokio::time::timeout(SILENT_FOR, &mut op).await {
        Ok(r) => r,
        Err(_) => {
            no_answer_yet(settings, what);
            op.await
        }
    };
    result.map_err(|e| naming_the_broker(settings, what, e))
}

/// How long the internal repartition topics (SKU, combine) keep records: a task further behind
/// than this finds its next records deleted and stops with the lost range (SPEC §1.4),
/// never skipping them silently. A day covers any outage the 10 s action budget cares
/// about while keeping the broker's disk bounded (~4 MB/s of repartition traffic at 20k
/// events/s is ~350 GB a day); docs/operations.md has the sizing.
pub const REPARTITION_RETENTION_MS: &str = "86400000";

/// Topic-level configs per role.
fn configs(spec: &TopicSpec, role: Role) -> Vec<(&'static str, &'static str)> {
    let mut c = Vec::new();
    match role {
        // Logical time is the broker's append time (SPEC §2).
        Role::Input => c.push(("message.timestamp.type", "LogAppendTime")),
        Role::Repartition => {
            c.push(("retention.ms", REPARTITION_RETENTION_MS));
            c.push(("retention.bytes", "-1"));
        }
        Role::Output => {}
    }
    if spec.compacted {
        c.push(("cleanup.policy", "compact"));
    }
    c
}

/// What a topic is to tidemark, for its configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Input,
    Repartition,
    Output,
}

/// Every topic of the topology, with what it is to tidemark: the one list `tidemark topics`
/// creates on a broker and the demo creates on its mock cluster.
pub fn topology_topics(t: &Topology) -> [(&TopicSpec, Role); 14] {
    [
        (&t.orders, Role::Input),
        (&t.inventory, Role::Input),
        (&t.dashboard, Role::Output),
        (&t.dead_letter, Role::Output),
        (&t.late, Role::Output),
        (&t.audit, Role::Output),
        (&t.action_dead_letter, Role::Output),
        (&t.sku_repartition, Role::Repartition),
        (&t.finance_provisional, Role::Output),
        (&t.finance_close, Role::Output),
        (&t.finance_manifest, Role::Output),
        (&t.dashboard_combined, Role::Output),
        (&t.finance_provisional_combined, Role::Output),
        (&t.combine_repartition, Role::Repartition),
    ]
}

/// Creates every topic of the topology that does not exist yet. Existing topics are left
/// as they are. Returns the names created.
pub async fn ensure_topics(settings: &KafkaSettings, t: &Topology, replication: i32) -> anyhow::Result<Vec<String>> {
    create(settings, &topology_topics(t), replication).await
}

/// Creates a compacted topic like `like` (partitions) named `topic`, if it does not exist:
/// the upsert targets a micro-batch job writes beside a stream.
pub async fn ensure_compacted(
    settings: &KafkaSettings,
    topic: &str,
    like: &TopicSpec,
    replication: i32,
) -> anyhow::Result<Vec<String>> {
    let spec = TopicSpec { topic: topic.to_string(), partitions: like.partitions, compacted: true };
    create(settings, &[(&spec, Role::Output)], replication).await
}

/// Whether the broker knows `topic` (metadata without auto-creation).
pub fn topic_exists(settings: &KafkaSettings, topic: &str) -> anyhow::Result<bool> {
    Ok(listed_topics(settings)?.contains(topic))
}

/// Every topic the broker lists with partitions, from one metadata request (a request for
/// every topic never auto-creates one).
fn listed_topics(settings: &KafkaSettings) -> anyhow::Result<std::collections::HashSet<String>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = settings.client_config().create()?;
    let what = "reading topic metadata";
    let md = match consumer.fetch_metadata(None, SILENT_FOR) {
        Ok(md) => md,
        Err(_) => {
            no_answer_yet(settings, what);
            consumer
                .fetch_metadata(None, Duration::from_secs(30) - SILENT_FOR)
                .map_err(|e| naming_the_broker(settings, what, e))?
        }
    };
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.name().to_string())
        .collect())
}

async fn create(
    settings: &KafkaSettings,
    roles: &[(&TopicSpec, Role)],
    replication: i32,
) -> anyhow::Result<Vec<String>> {
    let admin: AdminClient<DefaultClientContext> = settings.client_config().create()?;
    let topic_configs: Vec<Vec<(&str, &str)>> = roles.iter().map(|(spec, role)| configs(spec, *role)).collect();
    let new_topics: Vec<NewTopic<'_>> = roles
        .iter()
        .zip(&topic_configs)
        .map(|((spec, _), cfg)| {
            let topic = NewTopic::new(&spec.topic, spec.partitions, TopicReplication::Fixed(replication));
            cfg.iter().fold(topic, |nt, (k, v)| nt.set(k, v))
        })
        .collect();
    // Without a request timeout an unreachable broker answers only after socket.timeout.ms (60 s).
    let opts = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)));
    let mut created = Vec::new();
    for result in answered(settings, "creating topics", admin.create_topics(&new_topics, &opts)).await? {
        match result {
            Ok(name) => created.push(name),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => anyhow::bail!("creating topic {name}: {code}"),
        }
    }
    await_listed(settings, &created).await?;
    Ok(created)
}

/// How long a created topic may take to appear in the metadata a broker serves.
const LISTED_WITHIN: Duration = Duration::from_secs(30);

/// Waits until the broker lists every topic in `names`. A CreateTopics answer comes from the
/// controller; the broker a client asks for metadata learns of the topic a moment later, and
/// a check in that moment would call a topic just created missing (seen in CI on KRaft).
async fn await_listed(settings: &KafkaSettings, names: &[String]) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut missing: Vec<String> = names.to_vec();
    while !missing.is_empty() {
        let (s, ask) = (settings.clone(), missing.clone());
        missing = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<String>> {
            let listed = listed_topics(&s)?;
            Ok(ask.into_iter().filter(|name| !listed.contains(name)).collect())
        })
        .await??;
        if missing.is_empty() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < LISTED_WITHIN,
            "created {} but the broker did not list {} within {} s",
            missing.join(", "),
            if missing.len() == 1 { "it" } else { "them" },
            LISTED_WITHIN.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// How long an input topic the broker does not list is looked for again before it is called
/// missing: a broker may serve metadata a moment behind the controller that created it.
const MISSING_AFTER: Duration = Duration::from_secs(5);

/// Fails, naming each missing topic, the broker and the fix, when the broker does not list
/// every one of `topics`: before anything starts, not after the stream has waited for them.
async fn require_listed(settings: &KafkaSettings, topics: &[&str]) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    loop {
        let s = settings.clone();
        let listed = tokio::task::spawn_blocking(move || listed_topics(&s)).await??;
        let missing: Vec<&str> = topics.iter().copied().filter(|t| !listed.contains(*t)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= MISSING_AFTER {
            let (noun, verb) = if missing.len() == 1 { ("topic", "does") } else { ("topics", "do") };
            anyhow::bail!(
                "input {noun} {} {verb} not exist on the Kafka broker at {}: create {} (`tidemark topics`) \
                 or pass --create-topics",
                missing.join(", "),
                settings.bootstrap,
                if missing.len() == 1 { "it" } else { "them" }
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The input topics must exist ([`require_listed`]) and, as logical time is the broker's
/// append time (SPEC §1.4), stamp `LogAppendTime`. Refuses (naming each topic and the fix)
/// unless `allow_create_time`.
pub async fn check_log_append_time(
    settings: &KafkaSettings,
    topics: &[&str],
    allow_create_time: bool,
) -> anyhow::Result<()> {
    use rdkafka::admin::{ConfigSource, OwnedResourceSpecifier, ResourceSpecifier};
    let listing = std::time::Instant::now();
    require_listed(settings, topics).await?;
    tracing::debug!(took_ms = listing.elapsed().as_millis() as u64, "input topics listed");
    let admin: AdminClient<DefaultClientContext> = settings.client_config().create()?;
    let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    // A topic created a moment ago may be described without its configs yet: ask again
    // for a while before calling its timestamp type unknown.
    let started = std::time::Instant::now();
    let (wrong, unknown) = loop {
        let mut wrong = Vec::new();
        let mut unknown = Vec::new();
        let described =
            answered(settings, "describing the input topics' configs", admin.describe_configs(&specs, &opts));
        let describing = std::time::Instant::now();
        let described = described.await?;
        tracing::debug!(took_ms = describing.elapsed().as_millis() as u64, "input topics' configs described");
        for result in described {
            let resource = match result {
                Ok(r) => r,
                // Deleted since it was listed: the stream reports it where partitions are counted.
                Err(RDKafkaErrorCode::UnknownTopicOrPartition) => continue,
                Err(code) => anyhow::bail!("describing the input topics' configs: {code}"),
            };
            let OwnedResourceSpecifier::Topic(topic) = &resource.specifier else { continue };
            let Some(entry) = resource.get("message.timestamp.type") else {
                unknown.push(topic.clone());
                continue;
            };
            let value = entry.value.as_deref().unwrap_or("unset");
            if value != "LogAppendTime" {
                let from = match entry.source {
                    ConfigSource::DynamicTopic => " (set on the topic)",
                    _ => " (the broker's default)",
                };
                wrong.push(format!("{topic} has message.timestamp.type={value}{from}"));
            }
        }
        if unknown.is_empty() || started.elapsed() > Duration::from_secs(15) {
            break (wrong, unknown);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Dropping an admin client joins its polling thread, which waits up to 100 ms for an
    // event that will not come: off the start-up path (the first action after a restart).
    let _ = std::thread::Builder::new().name("tidemark-admin-drop".into()).spawn(move || drop(admin));
    if !unknown.is_empty() {
        tracing::warn!(topics = ?unknown, "the broker did not say these topics' message.timestamp.type; not checked");
    }
    if wrong.is_empty() {
        return Ok(());
    }
    if allow_create_time {
        tracing::warn!(topics = ?wrong, "input topics stamp producer time (--allow-create-time): logical time follows producer clocks");
        return Ok(());
    }
    anyhow::bail!(
        "{}: tidemark's logical time is the broker's append time (docs/semantics.md). Fix: \
         `kafka-configs.sh --bootstrap-server … --alter --entity-type topics --entity-name TOPIC \
         --add-config message.timestamp.type=LogAppendTime` (records appended before the change \
         keep their producer time), or create the topics with `tidemark topics`; or pass \
         --allow-create-time to accept producer time (docs/operations.md says what that costs)",
        wrong.join("; ")
    )
}

/// Sets one config of `topic`, keeping its other topic-level settings: AlterConfigs replaces
/// the whole set, and the compaction policy `tidemark topics` gave a topic must stay.
pub async fn set_topic_config(settings: &KafkaSettings, topic: &str, key: &str, value: &str) -> anyhow::Result<()> {
    use rdkafka::admin::{AlterConfig, ConfigSource, ResourceSpecifier};
    let admin: AdminClient<DefaultClientContext> = settings.client_config().create()?;
    let what = "describing a topic's configs";
    let described =
        answered(settings, what, admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new()))
            .await?;
    let resource = described
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("describing the configs of {topic}: no answer"))?
        .map_err(|e| anyhow::anyhow!("describing the configs of {topic}: {e}"))?;
    let kept: Vec<(String, String)> = resource
        .entries
        .iter()
        .filter(|e| e.source == ConfigSource::DynamicTopic && e.name != key)
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    let change =
        kept.iter().fold(AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value), |c, (k, v)| c.set(k, v));
    for r in
        answered(settings, "altering a topic's configs", admin.alter_configs(&[change], &AdminOptions::new())).await?
    {
        r.map_err(|(resource, e)| anyhow::anyhow!("setting {key}={value} on {resource:?}: {e}"))?;
    }
    Ok(())
}
