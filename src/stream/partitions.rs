//! A change of an input topic's partition count is refused at start (SPEC §1.4).
//!
//! Dedup and all per-partition state are keyed by input partition, and an order's events
//! share a partition only while the count stays the same (the producer hashes `order_id`
//! modulo the count; tidemark hashes `sku` modulo the repartition topic's count). After a
//! change, an order's next event can land in a partition whose state has never seen its
//! earlier ones: dedup misses duplicates and cancellations meet no placement. So the count
//! of every source is recorded in the state the first time it is opened and compared at
//! every start.

use anyhow::Context as _;
use tidemark_state::Store;

/// The role names of the sources, in `PartitionId::source` order.
const ROLES: [&str; 4] = ["orders", "inventory", "sku-repartition", "combine-repartition"];

fn record_name(role: &str) -> String {
    format!("partition-count/{role}")
}

/// Compares the broker's partition counts of `topics` (in source order) with the counts
/// recorded in `store`, recording them where none is; an error names the topic, both
/// counts and the way to migrate.
pub fn check_partition_counts(store: &Store, topics: &[&str], counts: &[i32]) -> anyhow::Result<()> {
    let mut batch = store.batch();
    for ((role, topic), now) in ROLES.iter().zip(topics).zip(counts) {
        let name = record_name(role);
        match store.record(&name)? {
            Some(bytes) => {
                let was = <[u8; 4]>::try_from(bytes.as_slice()).map(i32::from_be_bytes).ok();
                if let Some(was) = was.filter(|was| was != now) {
                    anyhow::bail!(
                        "{topic} ({role}) had {was} partitions when the state in {} was written and has {now} now. \
                         Events of one key no longer meet the state of their earlier events (dedup, \
                         cancellations, SKU rules), so tidemark refuses to continue. To migrate: stop \
                         producers or note the offsets, let every pod catch up and close the finance day, \
                         stop tidemark, then start it with a new --group and an empty --state-dir (the \
                         new state is rebuilt from the log), or set the topic back to {was} partitions. \
                         docs/operations.md \"Changing partition counts\" has the steps",
                        store.path().display()
                    );
                }
            }
            None => batch.put_record(&name, &now.to_be_bytes()),
        }
    }
    if !batch.is_empty() {
        batch.commit().context("recording the input topics' partition counts")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_state::StoreOptions;

    #[test]
    fn a_changed_partition_count_is_refused_with_the_topic_and_both_counts() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path(), &StoreOptions::default())?;
        let topics = ["o", "i", "r"];
        check_partition_counts(&store, &topics, &[4, 1, 8])?;
        check_partition_counts(&store, &topics, &[4, 1, 8])?;
        let err = check_partition_counts(&store, &topics, &[6, 1, 8]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("o (orders) had 4 partitions") && err.contains("has 6 now"), "{err}");
        Ok(())
    }
}
