//! Where the standby copies of each partition live (`--standbys N`), decided by every process
//! alone from the same inputs: the group's members and who owns each partition.
//!
//! Rendezvous (highest-random-weight) hashing: for each partition, every member other than
//! its owner gets a weight, a fixed hash of (partition, member); the `n` heaviest hold the
//! copies. Every process that sees the same members and owners computes the same placement,
//! with no coordination. A member that joins takes, for each partition, a copy only where it
//! outweighs one of the `n` chosen (about `n / members` of the copies move to it); a member
//! that leaves gives up only its own copies. The hash is FNV-1a with a 64-bit finalizer,
//! fixed across builds and platforms (std's `RandomState` differs per process).

use std::collections::{BTreeMap, BTreeSet};

use tidemark_state::PartitionId;

/// The members holding the standby copies of `p`: the `n` heaviest of `members` other than
/// its owner (all of them when fewer are left), heaviest first.
pub fn holders<'a>(p: PartitionId, owner: Option<&str>, members: &'a BTreeSet<String>, n: usize) -> Vec<&'a str> {
    let mut weighed: Vec<(u64, &str)> =
        members.iter().map(String::as_str).filter(|m| Some(*m) != owner).map(|m| (weight(p, m), m)).collect();
    // Ties (a 2⁻⁶⁴ chance) are broken by name, so every process still agrees.
    weighed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    weighed.into_iter().take(n).map(|(_, m)| m).collect()
}

/// The partitions `me` keeps a standby copy of: among `partitions`, those whose
/// [`holders`] include `me`. `me` counts as a member even before the group lists it (a
/// process warming up before it joins), so it warms up the copies it will hold once joined.
pub fn standby_placement(
    partitions: &[PartitionId],
    owners: &BTreeMap<PartitionId, String>,
    members: &BTreeSet<String>,
    n: usize,
    me: &str,
) -> BTreeSet<PartitionId> {
    let mut with_me = members.clone();
    with_me.insert(me.to_string());
    partitions
        .iter()
        .copied()
        .filter(|p| holders(*p, owners.get(p).map(String::as_str), &with_me, n).contains(&me))
        .collect()
}

fn weight(p: PartitionId, member: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in p.prefix().iter().chain([0xffu8].iter()).chain(member.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    // FNV alone spreads the last bytes poorly; splitmix64's finalizer mixes every bit.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions() -> Vec<PartitionId> {
        (0..4u16).flat_map(|s| (0..12).map(move |p| PartitionId { source: s, partition: p })).collect()
    }

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Round-robin owners over `names`.
    fn owners(names: &[&str]) -> BTreeMap<PartitionId, String> {
        partitions().into_iter().enumerate().map(|(i, p)| (p, names[i % names.len()].to_string())).collect()
    }

    fn copies_of(p: PartitionId, owners: &BTreeMap<PartitionId, String>, ms: &BTreeSet<String>, n: usize) -> usize {
        ms.iter().filter(|m| standby_placement(&[p], owners, ms, n, m).contains(&p)).count()
    }

    #[test]
    fn every_partition_gets_n_copies_none_on_its_owner_while_enough_members_remain() {
        let names = ["tidemark-0", "tidemark-1", "tidemark-2", "tidemark-3", "tidemark-4"];
        let ms = members(&names);
        let own = owners(&names);
        for n in 1..=6 {
            for p in partitions() {
                let owner = own[&p].as_str();
                assert!(!standby_placement(&[p], &own, &ms, n, owner).contains(&p), "{p} on its owner");
                assert_eq!(copies_of(p, &own, &ms, n), n.min(names.len() - 1), "{p} with n = {n}");
            }
        }
    }

    #[test]
    fn every_process_computes_the_same_placement_whatever_order_it_learns_members_in() {
        let names = ["c", "a", "b"];
        let own = owners(&names);
        let one: Vec<_> =
            names.iter().map(|m| standby_placement(&partitions(), &own, &members(&names), 1, m)).collect();
        let other = members(&["b", "c", "a"]);
        let two: Vec<_> = names.iter().map(|m| standby_placement(&partitions(), &own, &other, 1, m)).collect();
        assert_eq!(one, two);
        // The copies of all members together cover every partition exactly once.
        let total: usize = one.iter().map(BTreeSet::len).sum();
        assert_eq!(total, partitions().len());
    }

    #[test]
    fn a_member_that_joins_takes_a_bounded_share_and_no_copy_moves_between_the_others() {
        let before = members(&["p-0", "p-1", "p-2", "p-3"]);
        let mut after = before.clone();
        after.insert("p-4".into());
        let own = owners(&["p-0", "p-1", "p-2", "p-3"]);
        let ps: Vec<PartitionId> = (0..64).map(PartitionId::orders).collect();
        let own: BTreeMap<_, _> =
            ps.iter().map(|p| (*p, own[&PartitionId::orders(p.partition % 12)].clone())).collect();
        let mut moved = 0;
        for p in &ps {
            let was = holders(*p, Some(&own[p]), &before, 1);
            let is = holders(*p, Some(&own[p]), &after, 1);
            if was != is {
                assert_eq!(is, vec!["p-4"], "{p}: a copy moved between members already there");
                moved += 1;
            }
        }
        // One in four members' worth, give or take: never most of them.
        assert!(moved > 0 && moved < ps.len() / 2, "{moved} of {} copies moved", ps.len());
    }

    #[test]
    fn a_member_that_leaves_gives_up_only_its_own_copies() {
        let before = members(&["a", "b", "c", "d"]);
        let after = members(&["a", "b", "c"]);
        for p in partitions() {
            let was = holders(p, Some("a"), &before, 2);
            let is = holders(p, Some("a"), &after, 2);
            for m in &was {
                if *m != "d" {
                    assert!(is.contains(m), "{p}: {m} lost its copy when d left");
                }
            }
        }
    }

    #[test]
    fn a_process_not_yet_in_the_group_warms_up_the_copies_it_will_hold_once_joined() {
        let group = members(&["a", "b"]);
        let own = owners(&["a", "b"]);
        let mut joined = group.clone();
        joined.insert("c".into());
        assert_eq!(
            standby_placement(&partitions(), &own, &group, 1, "c"),
            standby_placement(&partitions(), &own, &joined, 1, "c")
        );
    }

    #[test]
    fn a_lone_member_keeps_no_copy_of_what_it_owns_and_one_of_what_nobody_owns() {
        let own: BTreeMap<_, _> = [(PartitionId::orders(0), "a".to_string())].into();
        let placed =
            standby_placement(&[PartitionId::orders(0), PartitionId::orders(1)], &own, &members(&["a"]), 1, "a");
        assert_eq!(placed, [PartitionId::orders(1)].into());
    }

    #[test]
    fn the_weight_is_fixed_across_builds() {
        // A changed hash would move every copy at an upgrade: this value must never change.
        assert_eq!(weight(PartitionId::orders(3), "tidemark-1"), 6_232_232_893_063_742_802);
        assert_ne!(weight(PartitionId::orders(3), "tidemark-1"), weight(PartitionId::orders(3), "tidemark-2"));
        assert_ne!(weight(PartitionId::orders(3), "tidemark-1"), weight(PartitionId::inventory(3), "tidemark-1"));
    }
}
