//! How a surviving pod got the state of the partitions the group handed it after a kill,
//! read from its log past the kill: its standby copy, a snapshot import, or nothing at all.
//!
//! A promotion line names every partition assigned while standbys are on, whether or not a
//! standby task held it, so the line alone does not show that the standby copy was used.
//! Each promoted partition is followed by the stream's `restored` line (where its active
//! task resumes), preceded by `restored from snapshot` when a snapshot was imported first.

use std::collections::BTreeMap;

/// What a process logs when the group assigns it partitions while standbys are on
/// (src/standby/mod.rs, `Standbys::release`).
pub const PROMOTION_LOG: &str = "standby tasks handed to the active tasks";
/// What a process with standbys logs once they have caught up and it joins the group.
pub const WARM_LOG: &str = "warm: every standby task caught up; joining the group";

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Takeover {
    /// Promotion lines.
    pub promotions: usize,
    /// Promoted partitions whose active task resumed from the standby copy's checkpoint
    /// (past offset 0, nothing imported).
    pub from_standby: Vec<String>,
    /// Promoted partitions imported from a snapshot first: no standby copy, or one far behind.
    pub from_snapshot: Vec<String>,
    /// Promoted partitions resumed at offset 0: no copy of any kind (or an owner that had
    /// committed nothing).
    pub from_start: Vec<String>,
}

impl Takeover {
    pub fn add(&mut self, other: Takeover) {
        self.promotions += other.promotions;
        self.from_standby.extend(other.from_standby);
        self.from_snapshot.extend(other.from_snapshot);
        self.from_start.extend(other.from_start);
    }
}

/// Reads one pod's log text (from the kill on).
pub fn read(log: &str) -> Takeover {
    let mut t = Takeover::default();
    // Promoted partitions waiting for their `restored` line: whether a snapshot came first.
    let mut waiting: BTreeMap<String, bool> = BTreeMap::new();
    for line in log.lines() {
        if let Some(list) = line.split_once(PROMOTION_LOG).and_then(|(_, rest)| field_list(rest, "partitions")) {
            t.promotions += 1;
            waiting.extend(list.into_iter().map(|p| (p, false)));
        } else if line.contains(" restored from snapshot ") {
            if let Some(imported) = field(line, "partition").and_then(|p| waiting.get_mut(p)) {
                *imported = true;
            }
        } else if line.contains(" restored partition=") {
            let Some(p) = field(line, "partition") else { continue };
            let Some(imported) = waiting.remove(p) else { continue };
            let p = p.to_string();
            match field(line, "next_offset") {
                _ if imported => t.from_snapshot.push(p),
                Some("0") => t.from_start.push(p),
                _ => t.from_standby.push(p),
            }
        }
    }
    t
}

/// The value of ` key=value` in a tracing line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The items of ` key=[a[0], b[1]]` in `text`.
fn field_list(text: &str, key: &str) -> Option<Vec<String>> {
    let start = text.find(&format!("{key}=["))? + key.len() + 2;
    let mut depth = 0usize;
    let mut items = Vec::new();
    let mut item = String::new();
    for c in text[start..].chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => break,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item).trim().to_string());
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    let last = item.trim();
    if !last.is_empty() {
        items.push(last.to_string());
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-01T17:26:07.850456Z  INFO tidemark::standby: standby tasks handed to the active tasks partitions=[orders[3], orders[1], inventory[2], sku-repartition[0]] rows_waiting=10 took_ms=5
2026-12-01T17:26:07.851Z  INFO tidemark::kafka::context: assigned partitions=[orders[3], orders[1], inventory[2], sku-repartition[0]] cooperative=true
2026-12-01T17:26:07.900Z  INFO tidemark::snapshot::restore: restored from snapshot partition=inventory[2] next_offset=27 local_next_offset=None bytes=0
2026-12-01T17:26:07.989828Z  INFO tidemark::stream: restored partition=orders[3] next_offset=0 took_ms=54
2026-12-01T17:26:08.044180Z  INFO tidemark::stream: restored partition=orders[1] next_offset=2641 took_ms=54
2026-12-01T17:26:08.05Z  INFO tidemark::stream: restored partition=inventory[2] next_offset=27 took_ms=1
2026-12-01T17:26:08.06Z  INFO tidemark::stream: restored partition=sku-repartition[0] next_offset=4100 took_ms=1
";

    #[test]
    fn each_promoted_partition_is_classed_by_where_its_active_task_resumed() {
        let t = read(LOG);
        assert_eq!(t.promotions, 1);
        assert_eq!(t.from_standby, vec!["orders[1]", "sku-repartition[0]"]);
        assert_eq!(t.from_snapshot, vec!["inventory[2]"]);
        assert_eq!(t.from_start, vec!["orders[3]"]);
    }

    #[test]
    fn a_restore_without_a_promotion_before_it_is_not_counted() {
        let t = read("x  INFO tidemark::stream: restored partition=orders[0] next_offset=10 took_ms=1\n");
        assert_eq!(t, Takeover::default());
    }

    #[test]
    fn a_partition_list_keeps_the_brackets_of_each_name() {
        assert_eq!(
            field_list(" partitions=[a[0], b-c[12]] rows_waiting=0", "partitions"),
            Some(vec!["a[0]".to_string(), "b-c[12]".to_string()])
        );
        assert_eq!(field_list(" partitions=[] x", "partitions"), Some(vec![]));
    }
}
