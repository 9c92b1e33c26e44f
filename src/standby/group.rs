//! Who is in the processors' group and which partitions each member owns, read from the
//! broker's description of the group (DescribeGroups): the input of [`super::placement`].
//!
//! A member's assignment is the consumer protocol's `ConsumerProtocolAssignment`, as the
//! group leader's assignor (librdkafka's cooperative-sticky) wrote it:
//!
//! ```text
//! version: i16 | topics: i32 count × (topic: i16 length + UTF-8, partitions: i32 count × i32)
//!              | user_data: i32 length (-1: null) + bytes
//! ```
//!
//! Versions 0 to 3 share that layout up to the partitions; what follows them is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::consumer::Consumer;
use tidemark_state::PartitionId;

use crate::tasks::Sources;

/// The group as one process sees it: its members (by stable name), the owner of every
/// assigned input partition, and whether the group is between rebalances (`Stable`: during
/// one, members' assignments are empty or about to change).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub members: BTreeSet<String>,
    pub owners: BTreeMap<PartitionId, String>,
    pub stable: bool,
}

/// An assignment that does not follow the layout above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed member assignment: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// The topic partitions of a `ConsumerProtocolAssignment` (empty bytes: none).
pub fn parse_assignment(bytes: &[u8]) -> Result<Vec<(String, i32)>, Malformed> {
    let mut r = Reader(bytes);
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let version = r.i16("version")?;
    if version < 0 {
        return Err(Malformed("negative version"));
    }
    let topics = r.count("topic count")?;
    let mut out = Vec::new();
    for _ in 0..topics {
        let len = usize::try_from(r.i16("topic length")?).map_err(|_| Malformed("null topic"))?;
        let topic = std::str::from_utf8(r.take(len, "topic")?).map_err(|_| Malformed("topic not UTF-8"))?.to_string();
        let partitions = r.count("partition count")?;
        for _ in 0..partitions {
            out.push((topic.clone(), r.i32("partition")?));
        }
    }
    Ok(out)
}

/// A member's stable name: the `group.instance.id` (`--instance-id`) it joined with. The
/// broker names a static member `<group.instance.id>-<UUID>` (a dynamic one
/// `<client.id>-<UUID>`); without that shape the member id itself is the name.
pub fn member_name(member_id: &str) -> &str {
    const UUID_LEN: usize = 36;
    let Some(cut) = member_id.len().checked_sub(UUID_LEN + 1) else { return member_id };
    let (name, tail) = member_id.split_at(cut);
    let uuid = &tail[1..];
    let is_uuid = tail.starts_with('-')
        && uuid.len() == UUID_LEN
        && uuid
            .char_indices()
            .all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() });
    if is_uuid && !name.is_empty() {
        name
    } else {
        member_id
    }
}

/// Reads the group's description from the broker. Members whose assignment cannot be read
/// still count as members (owning nothing known).
pub fn describe<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: &C,
    group: &str,
    sources: &Sources,
    timeout: Duration,
) -> anyhow::Result<GroupView> {
    let list = consumer.fetch_group_list(Some(group), timeout)?;
    let mut view = GroupView::default();
    for g in list.groups().iter().filter(|g| g.name() == group) {
        view.stable = g.state() == "Stable";
        for m in g.members() {
            let name = member_name(m.id()).to_string();
            let owned = parse_assignment(m.assignment().unwrap_or_default()).unwrap_or_else(|e| {
                tracing::warn!(member = %name, error = %e, "cannot read a member's assignment");
                Vec::new()
            });
            for (topic, partition) in owned {
                if let Some(id) = sources.id(&topic, partition) {
                    view.owners.insert(id, name.clone());
                }
            }
            view.members.insert(name);
        }
    }
    Ok(view)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self, what: &'static str) -> Result<i16, Malformed> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An array length; null (-1) is empty.
    fn count(&mut self, what: &'static str) -> Result<usize, Malformed> {
        let n = self.i32(what)?;
        if n < -1 {
            return Err(Malformed(what));
        }
        let n = usize::try_from(n.max(0)).map_err(|_| Malformed(what))?;
        // Each element takes at least 4 bytes: a count beyond what is left is corrupt.
        if n > self.0.len() / 4 + 1 {
            return Err(Malformed(what));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assignment as librdkafka writes it (version 0, user data null).
    fn assignment(version: i16, topics: &[(&str, &[i32])], user_data: Option<&[u8]>) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            b.extend_from_slice(t.as_bytes());
            b.extend_from_slice(&(ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend_from_slice(&p.to_be_bytes());
            }
        }
        match user_data {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(u) => {
                b.extend_from_slice(&(u.len() as i32).to_be_bytes());
                b.extend_from_slice(u);
            }
        }
        b
    }

    #[test]
    fn an_assignment_yields_every_topic_partition_it_lists() {
        let bytes = assignment(0, &[("orders", &[0, 3]), ("sku-repartition", &[7])], None);
        assert_eq!(
            parse_assignment(&bytes),
            Ok(vec![("orders".into(), 0), ("orders".into(), 3), ("sku-repartition".into(), 7)])
        );
    }

    #[test]
    fn later_versions_and_user_data_do_not_change_the_partitions_read() {
        let bytes = assignment(3, &[("inventory", &[1])], Some(b"sticky"));
        assert_eq!(parse_assignment(&bytes), Ok(vec![("inventory".into(), 1)]));
    }

    #[test]
    fn an_empty_assignment_owns_nothing() {
        assert_eq!(parse_assignment(&[]), Ok(vec![]));
        assert_eq!(parse_assignment(&assignment(0, &[], None)), Ok(vec![]));
    }

    #[test]
    fn a_truncated_or_corrupt_assignment_is_refused_not_misread() {
        let bytes = assignment(0, &[("orders", &[0, 3])], None);
        for cut in 1..bytes.len() - 4 {
            assert!(parse_assignment(&bytes[..cut]).is_err(), "cut at {cut} was read");
        }
        let mut huge = assignment(0, &[], None);
        huge[2..6].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(parse_assignment(&huge).is_err());
    }

    #[test]
    fn a_static_member_is_named_by_its_instance_id() {
        assert_eq!(member_name("tidemark-2-8a3f1c2e-54b1-4c7e-9a0d-3f2b1e6c7d8a"), "tidemark-2");
        assert_eq!(member_name("g-a-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"), "g-a");
    }

    #[test]
    fn a_member_id_without_a_uuid_tail_is_its_own_name() {
        assert_eq!(member_name("tidemark-2"), "tidemark-2");
        assert_eq!(member_name("-8a3f1c2e-54b1-4c7e-9a0d-3f2b1e6c7d8a"), "-8a3f1c2e-54b1-4c7e-9a0d-3f2b1e6c7d8a");
        assert_eq!(member_name("x-8a3f1c2e-54b1-4c7e-9a0d-3f2b1e6c7dZZ"), "x-8a3f1c2e-54b1-4c7e-9a0d-3f2b1e6c7dZZ");
    }
}
