//! The topics a process consumes and the `PartitionId::source` of each, written once: the
//! stream thread, the standby thread, the rebalance callback, snapshots and the backlog
//! prober all map topic ↔ source through [`Sources`].

use tidemark_state::PartitionId;
use tidemark_topology::config::Topology;

/// The input topics in `PartitionId::source` order: orders, inventory, the SKU repartition
/// topic, the combine repartition topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    topics: Vec<String>,
}

impl Sources {
    pub fn of(t: &Topology) -> Self {
        Sources::from_topics(
            [&t.orders, &t.inventory, &t.sku_repartition, &t.combine_repartition]
                .iter()
                .map(|s| s.topic.clone())
                .collect(),
        )
    }

    /// Topics given in `PartitionId::source` order (tests, snapshot fixtures).
    pub fn from_topics(topics: Vec<String>) -> Self {
        Sources { topics }
    }

    /// The `PartitionId::source` of `topic`, if it is one of these.
    pub fn source_of(&self, topic: &str) -> Option<u16> {
        self.topics.iter().position(|s| s == topic).and_then(|i| u16::try_from(i).ok())
    }

    /// The partition of `topic`, if the topic is one of these.
    pub fn id(&self, topic: &str, partition: i32) -> Option<PartitionId> {
        Some(PartitionId { source: self.source_of(topic)?, partition })
    }

    /// The topic of `source` ("" for a source that is not one of these).
    pub fn topic(&self, source: u16) -> &str {
        self.topics.get(usize::from(source)).map_or("", String::as_str)
    }

    pub fn topic_of(&self, id: PartitionId) -> &str {
        self.topic(id.source)
    }

    /// The topics, in source order (to subscribe, to read metadata).
    pub fn names(&self) -> Vec<&str> {
        self.topics.iter().map(String::as_str).collect()
    }

    /// `(source, topic)` pairs, in source order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &str)> {
        self.topics.iter().enumerate().filter_map(|(i, t)| Some((u16::try_from(i).ok()?, t.as_str())))
    }

    /// `(source, topic)` pairs, owned (for a thread of their own).
    pub fn by_source(&self) -> Vec<(u16, String)> {
        self.iter().map(|(s, t)| (s, t.to_string())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_maps_to_its_source_and_back() {
        let s = Sources::from_topics(["o", "i", "sku", "c"].map(String::from).to_vec());
        for (source, topic) in s.by_source() {
            assert_eq!(s.source_of(&topic), Some(source));
            assert_eq!(s.topic(source), topic);
        }
        assert_eq!(s.id("sku", 3), Some(PartitionId::sku(3)));
        assert_eq!(s.source_of("other"), None);
        assert_eq!(s.topic(9), "");
    }
}
