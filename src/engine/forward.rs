//! Feeding the combine repartition topic (SPEC §6): the second repartition, by aggregate key
//! (the first, by SKU, is in [`crate::engine::derive`]).
//!
//! At every commit, after the tasks finished, each dashboard and provisional partial the
//! orders tasks emitted is copied to the combine topic, keyed by its combined key (the
//! partial's key without `|p<n>`) and sent to partition `FNV-1a(key) mod n`, the hash of the
//! SKU repartition. Then each orders task whose maximum event time moved sends a mark to
//! every combine partition: "my partials from now on were computed with at least this".
//! Marks follow the partials they cover in the producer's queue, so within a combine
//! partition a key's last forward partial always precedes the mark that expires it.
//!
//! The copy is the partial's own bytes inside `{"dashboard":…}` / `{"finance":…}`: nothing
//! is parsed or re-encoded on the way.

use std::collections::BTreeMap;

use tidemark_state::{Checkpoint, PartitionId};
use tidemark_topology::combine::{combined_key, CombineInput};

use crate::engine::derive::sku_partition;
use crate::engine::{OutputRecord, Sink};

pub struct Forwarder {
    /// Partitions of the combine topic.
    partitions: i32,
    /// The last maximum event time marked per orders partition.
    marked: BTreeMap<i32, i64>,
}

impl Forwarder {
    pub fn new(partitions: i32) -> Self {
        Forwarder { partitions, marked: BTreeMap::new() }
    }

    /// Copies the partials in `out[from..]` to the combine topic, by combined key.
    /// Nothing without a combine topic (a test driver may run without one).
    pub fn forward(&self, out: &mut Vec<OutputRecord>, from: usize) {
        if self.partitions == 0 {
            return;
        }
        let end = out.len();
        for i in from..end {
            let kind = match out[i].sink {
                Sink::Dashboard => "dashboard",
                Sink::Finance => "finance",
                _ => continue,
            };
            let Some(key) = out[i].key.as_deref() else { continue };
            let key = combined_key(key).to_vec();
            let partition = sku_partition(&String::from_utf8_lossy(&key), self.partitions);
            let value = CombineInput::wrap(kind, &out[i].value);
            out.push(OutputRecord {
                sink: Sink::Combine,
                key: Some(key),
                value,
                headers: Vec::new(),
                partition: Some(partition),
                handed: None,
            });
        }
    }

    /// Marks of the orders tasks whose maximum event time moved since their last mark, to
    /// every combine partition. A replay after a restart marks lower values again; combine
    /// tasks keep the highest.
    pub fn marks<'a>(
        &mut self,
        checkpoints: impl Iterator<Item = (&'a PartitionId, &'a Checkpoint)>,
        out: &mut Vec<OutputRecord>,
    ) {
        for (id, checkpoint) in checkpoints.filter(|(id, _)| id.source == PartitionId::ORDERS) {
            let Some(max_event_ms) = checkpoint.max_event_ms else { continue };
            if self.marked.get(&id.partition).is_some_and(|m| *m >= max_event_ms) {
                continue;
            }
            self.marked.insert(id.partition, max_event_ms);
            let value = CombineInput::mark_bytes(id.partition, max_event_ms);
            for p in 0..self.partitions {
                out.push(OutputRecord {
                    sink: Sink::Combine,
                    key: None,
                    value: value.clone(),
                    headers: Vec::new(),
                    partition: Some(p),
                    handed: None,
                });
            }
        }
    }

    /// A revoked orders partition: its next owner marks again from its own checkpoint.
    pub fn revoked(&mut self, id: PartitionId) {
        if id.source == PartitionId::ORDERS {
            self.marked.remove(&id.partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partials_are_copied_by_combined_key_and_other_outputs_are_not() {
        let f = Forwarder::new(4);
        let partial = |sink, key: &str| OutputRecord {
            sink,
            key: Some(key.as_bytes().to_vec()),
            value: b"{\"v\":1}".to_vec(),
            headers: Vec::new(),
            partition: None,
            handed: None,
        };
        let mut out = vec![
            partial(Sink::Dashboard, "w|s|JPY|p0"),
            partial(Sink::Dashboard, "w|s|JPY|p1"),
            partial(Sink::Finance, "d|s|JPY|p1"),
            partial(Sink::DeadLetter, "x"),
        ];
        f.forward(&mut out, 0);
        let copies: Vec<&OutputRecord> = out.iter().filter(|r| r.sink == Sink::Combine).collect();
        assert_eq!(copies.len(), 3);
        assert_eq!(copies[0].key.as_deref(), Some(&b"w|s|JPY"[..]));
        assert_eq!(copies[0].partition, copies[1].partition, "both partials of a key meet in one partition");
        assert_eq!(copies[0].partition, Some(sku_partition("w|s|JPY", 4)));
        assert_eq!(copies[2].value, b"{\"finance\":{\"v\":1}}".to_vec());
    }
}
