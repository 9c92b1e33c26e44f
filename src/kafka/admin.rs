//! Creates the topology's topics with the configuration its semantics rely on.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use tidemark_topology::config::{TopicSpec, Topology};

use super::KafkaSettings;

/// Topic-level configs per role.
fn configs(spec: &TopicSpec, log_append_time: bool) -> Vec<(&'static str, &'static str)> {
    let mut c = Vec::new();
    if log_append_time {
        // Logical time is the broker's append time (SPEC §2).
        c.push(("message.timestamp.type", "LogAppendTime"));
    }
    if spec.compacted {
        c.push(("cleanup.policy", "compact"));
    }
    c
}

/// Creates every topic of the topology that does not exist yet. Existing topics are left
/// as they are. Returns the names created.
pub async fn ensure_topics(settings: &KafkaSettings, t: &Topology, replication: i32) -> anyhow::Result<Vec<String>> {
    let roles: [(&TopicSpec, bool); 11] = [
        (&t.orders, true),
        (&t.inventory, true),
        (&t.dashboard, false),
        (&t.dead_letter, false),
        (&t.late, false),
        (&t.audit, false),
        (&t.action_dead_letter, false),
        (&t.sku_repartition, false),
        (&t.finance_provisional, false),
        (&t.finance_close, false),
        (&t.finance_manifest, false),
    ];
    create(settings, &roles, replication).await
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
    create(settings, &[(&spec, false)], replication).await
}

/// Whether the broker knows `topic` (metadata without auto-creation).
pub fn topic_exists(settings: &KafkaSettings, topic: &str) -> anyhow::Result<bool> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = settings.client_config().set("allow.auto.create.topics", "false").create()?;
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(30))?;
    Ok(md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
}

async fn create(
    settings: &KafkaSettings,
    roles: &[(&TopicSpec, bool)],
    replication: i32,
) -> anyhow::Result<Vec<String>> {
    let admin: AdminClient<DefaultClientContext> = settings.client_config().create()?;
    let topic_configs: Vec<Vec<(&str, &str)>> = roles.iter().map(|(spec, lat)| configs(spec, *lat)).collect();
    let new_topics: Vec<NewTopic<'_>> = roles
        .iter()
        .zip(&topic_configs)
        .map(|((spec, _), cfg)| {
            let topic = NewTopic::new(&spec.topic, spec.partitions, TopicReplication::Fixed(replication));
            cfg.iter().fold(topic, |nt, (k, v)| nt.set(k, v))
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let mut created = Vec::new();
    for result in admin.create_topics(&new_topics, &opts).await? {
        match result {
            Ok(name) => created.push(name),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => anyhow::bail!("creating topic {name}: {code}"),
        }
    }
    Ok(created)
}
