//! Where the pods keep partitions' state, read from their `/metrics` pages: the warm copies a
//! standby count places (`tidemark_standby_partition`), and the partitions whose state stays
//! on a pod's disk (`tidemark_state_partition_local`) beside those it owns
//! (`tidemark_partition_owned`).

use std::collections::{BTreeMap, BTreeSet};

use crate::pod::{metric_sum, partitions_at_one};

/// One pod's partitions, each as `source[partition]`.
#[derive(Clone, Debug, Default)]
pub struct PodView {
    pub name: String,
    pub owned: BTreeSet<String>,
    pub shadowed: BTreeSet<String>,
    pub local: BTreeSet<String>,
    /// `tidemark_state_disk_bytes`: the files under its state directory.
    pub disk_bytes: f64,
}

impl PodView {
    pub fn read(name: &str, page: &str) -> PodView {
        PodView {
            name: name.to_string(),
            owned: partitions_at_one(page, "tidemark_partition_owned"),
            shadowed: partitions_at_one(page, "tidemark_standby_partition"),
            local: partitions_at_one(page, "tidemark_state_partition_local"),
            disk_bytes: metric_sum(page, "tidemark_state_disk_bytes").unwrap_or(0.0),
        }
    }
}

/// What breaks "every owned partition has exactly `copies` standby copies, none on its
/// owner": one line per partition that does not hold it. Empty when nothing is owned.
pub fn misplaced_copies(pods: &[PodView], copies: usize) -> Vec<String> {
    let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in pods {
        for id in &p.shadowed {
            holders.entry(id.as_str()).or_default().push(p.name.as_str());
        }
    }
    let mut wrong = Vec::new();
    for p in pods {
        for id in &p.owned {
            let on = holders.get(id.as_str()).cloned().unwrap_or_default();
            if on.contains(&p.name.as_str()) {
                wrong.push(format!("{id}: a standby copy on its owner {}", p.name));
            } else if on.len() != copies {
                wrong.push(format!("{id} (owned by {}): {} standby copies {on:?}, not {copies}", p.name, on.len()));
            }
        }
    }
    wrong
}

/// The partitions each pod holds on disk but neither owns nor shadows: one line per pod
/// that holds any.
pub fn held_beyond_need(pods: &[PodView]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| {
            let extra: Vec<&String> =
                p.local.iter().filter(|id| !p.owned.contains(*id) && !p.shadowed.contains(*id)).collect();
            (!extra.is_empty()).then(|| format!("{} holds {extra:?}, neither owned nor shadowed", p.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, owned: &[&str], shadowed: &[&str], local: &[&str]) -> PodView {
        let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect();
        PodView { name: name.into(), owned: set(owned), shadowed: set(shadowed), local: set(local), disk_bytes: 0.0 }
    }

    #[test]
    fn one_copy_per_owned_partition_on_another_pod_is_placed() {
        let pods = [pod("a", &["orders[0]"], &["orders[1]"], &[]), pod("b", &["orders[1]"], &["orders[0]"], &[])];
        assert!(misplaced_copies(&pods, 1).is_empty());
    }

    #[test]
    fn a_missing_copy_a_second_copy_and_a_copy_on_the_owner_are_each_named() {
        let pods = [
            pod("a", &["orders[0]", "orders[2]"], &["orders[0]", "orders[1]"], &[]),
            pod("b", &["orders[1]"], &[], &[]),
            pod("c", &[], &["orders[1]"], &[]),
        ];
        let wrong = misplaced_copies(&pods, 1);
        assert_eq!(wrong.len(), 3, "{wrong:?}");
        assert!(wrong[0].starts_with("orders[0]: a standby copy on its owner a"), "{wrong:?}");
        assert!(wrong[1].starts_with("orders[2] (owned by a): 0 standby copies"), "{wrong:?}");
        assert!(wrong[2].starts_with("orders[1] (owned by b): 2 standby copies"), "{wrong:?}");
    }

    #[test]
    fn state_of_a_partition_neither_owned_nor_shadowed_is_held_beyond_need() {
        let pods = [
            pod("a", &["orders[0]"], &["orders[1]"], &["orders[0]", "orders[1]"]),
            pod("b", &["orders[1]"], &[], &["orders[1]", "orders[0]", "inventory[2]"]),
        ];
        assert_eq!(
            held_beyond_need(&pods),
            vec!["b holds [\"inventory[2]\", \"orders[0]\"], neither owned nor shadowed"]
        );
    }
}
