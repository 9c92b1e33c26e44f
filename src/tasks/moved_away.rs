//! Dropping the local state of partitions that moved away (`--drop-moved-after`, SPEC §5:
//! a pod's disk holds the state of the partitions it owns or shadows).
//!
//! A partition whose checkpoint is in the store but which this process has neither owned
//! (any active state), nor shadowed (a standby task, or placed here), nor been assigned, for
//! the whole grace period is deleted: one atomic `WriteBatch` of range deletes with its
//! checkpoint ([`tidemark_state::Store::drop_partition`]), so a crash leaves it whole or
//! absent. One that comes back within the grace keeps its state and starts from it. The
//! deletion runs under the task lifecycle's locks ([`Lifecycle::while_closed`]): a task
//! never starts on state being deleted. With `--standbys all` (or before the standby thread
//! first read the group) every partition may be shadowed here, so nothing is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tidemark_state::{PartitionId, Store};
use tracing::{info, warn};

use super::Lifecycle;
use crate::standby::Standbys;

/// The shortest grace accepted: an assigned partition's task starts well within it.
pub const MIN_GRACE: Duration = Duration::from_secs(60);
/// The janitor looks at most this far apart.
const LOOK_EVERY: Duration = Duration::from_secs(30);
/// Between looks, which partitions have state here is published this often (one read of
/// each partition's checkpoint key).
const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// `--drop-moved-after`: the grace period, `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace(pub Option<Duration>);

/// Parses `off` or a humantime duration of at least [`MIN_GRACE`].
pub fn parse_grace(s: &str) -> Result<Grace, String> {
    if s.trim() == "off" {
        return Ok(Grace(None));
    }
    let d = humantime::parse_duration(s.trim()).map_err(|e| format!("`{s}`: {e} (expected e.g. 10m, or off)"))?;
    if d < MIN_GRACE {
        return Err(format!("`{s}`: at least {} (or off)", humantime::format_duration(MIN_GRACE)));
    }
    Ok(Grace(Some(d)))
}

/// The partitions to delete at `now`: those in `local` (state here) not in `needed`
/// (owned, shadowed, assigned) since at least `grace`. `unneeded_since` remembers when each
/// was first seen unneeded; a partition needed again, or gone from the store, is forgotten.
pub fn due(
    now: Instant,
    grace: Duration,
    local: &BTreeSet<PartitionId>,
    needed: &BTreeSet<PartitionId>,
    unneeded_since: &mut BTreeMap<PartitionId, Instant>,
) -> Vec<PartitionId> {
    unneeded_since.retain(|id, _| local.contains(id) && !needed.contains(id));
    let mut due = Vec::new();
    for id in local.difference(needed) {
        let since = *unneeded_since.entry(*id).or_insert(now);
        if now.saturating_duration_since(since) >= grace {
            due.push(*id);
        }
    }
    due
}

/// Deletes the state of partitions that moved away, looking every `grace / 4` (at most
/// every [`LOOK_EVERY`]).
pub struct Janitor {
    pub store: Arc<Store>,
    pub lifecycle: Arc<Lifecycle>,
    /// With standbys: the partitions placed here are kept (`None`: keep everything).
    pub standbys: Option<Arc<Standbys>>,
    pub grace: Duration,
    unneeded_since: BTreeMap<PartitionId, Instant>,
    /// The partitions last published as held in the local store
    /// (`tidemark_state_partition_local`).
    published: BTreeSet<PartitionId>,
}

impl Janitor {
    pub fn new(store: Arc<Store>, lifecycle: Arc<Lifecycle>, standbys: Option<Arc<Standbys>>, grace: Duration) -> Self {
        Janitor { store, lifecycle, standbys, grace, unneeded_since: BTreeMap::new(), published: BTreeSet::new() }
    }

    /// One look at `now`: the partitions deleted. Publishes which partitions have state
    /// here after it.
    pub fn look(&mut self, now: Instant) -> Vec<PartitionId> {
        let Some(mut local) = self.local() else { return Vec::new() };
        let dropped = self.drop_unneeded(now, &local);
        for id in &dropped {
            local.remove(id);
        }
        self.publish(local);
        dropped
    }

    /// Publishes which partitions have state here, without deleting any (between looks).
    pub fn publish_held(&mut self) {
        if let Some(local) = self.local() {
            self.publish(local);
        }
    }

    /// The partitions with a checkpoint in the store.
    fn local(&self) -> Option<BTreeSet<PartitionId>> {
        match self.store.checkpointed_partitions() {
            Ok(l) => Some(l.into_iter().collect()),
            Err(e) => {
                warn!(error = %e, "cannot list the partitions in the store; nothing dropped");
                None
            }
        }
    }

    fn publish(&mut self, local: BTreeSet<PartitionId>) {
        crate::telemetry::standby::held(&self.published, &local);
        self.published = local;
    }

    fn drop_unneeded(&mut self, now: Instant, local: &BTreeSet<PartitionId>) -> Vec<PartitionId> {
        let mut needed = self.lifecycle.take_assigned();
        needed.extend(self.lifecycle.open());
        if let Some(standbys) = &self.standbys {
            match standbys.placed() {
                Some(placed) => needed.extend(placed),
                None => {
                    self.unneeded_since.clear();
                    return Vec::new();
                }
            }
        }
        let mut dropped = Vec::new();
        for id in due(now, self.grace, local, &needed, &mut self.unneeded_since) {
            match self.lifecycle.while_closed(id, || self.store.drop_partition(id)) {
                Some(Ok(())) => {
                    self.unneeded_since.remove(&id);
                    crate::telemetry::standby::dropped(id);
                    info!(partition = %id, grace = %humantime::format_duration(self.grace), "state of a partition that moved away deleted");
                    dropped.push(id);
                }
                Some(Err(e)) => {
                    warn!(partition = %id, error = %e, "cannot delete the state of a partition that moved away")
                }
                // Taken meanwhile: needed again, its grace starts over when it goes.
                None => {
                    self.unneeded_since.remove(&id);
                }
            }
        }
        dropped
    }
}

/// Starts the janitor's thread.
pub fn spawn(mut janitor: Janitor, stop: Arc<AtomicBool>) -> anyhow::Result<JoinHandle<()>> {
    crate::telemetry::standby::drops_started();
    let every = (janitor.grace / 4).min(LOOK_EVERY);
    std::thread::Builder::new()
        .name("tidemark-janitor".into())
        .spawn(move || {
            janitor.publish_held();
            let (mut looked, mut published) = (Instant::now(), Instant::now());
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                if looked.elapsed() >= every {
                    janitor.look(Instant::now());
                    (looked, published) = (Instant::now(), Instant::now());
                } else if published.elapsed() >= PUBLISH_EVERY {
                    janitor.publish_held();
                    published = Instant::now();
                }
            }
        })
        .context("starting the janitor thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::State;
    use tidemark_state::{Checkpoint, StoreOptions};

    const GRACE: Duration = Duration::from_secs(600);

    fn set(ids: &[PartitionId]) -> BTreeSet<PartitionId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_partition_neither_owned_nor_shadowed_is_dropped_once_the_grace_is_over() {
        let t0 = Instant::now();
        let (a, b) = (PartitionId::orders(0), PartitionId::orders(1));
        let mut since = BTreeMap::new();
        assert!(due(t0, GRACE, &set(&[a, b]), &set(&[a]), &mut since).is_empty());
        assert!(due(t0 + GRACE / 2, GRACE, &set(&[a, b]), &set(&[a]), &mut since).is_empty());
        assert_eq!(due(t0 + GRACE, GRACE, &set(&[a, b]), &set(&[a]), &mut since), vec![b]);
    }

    #[test]
    fn a_partition_that_comes_back_within_the_grace_keeps_its_state_and_starts_a_new_grace_when_it_goes() {
        let t0 = Instant::now();
        let b = PartitionId::sku(1);
        let mut since = BTreeMap::new();
        assert!(due(t0, GRACE, &set(&[b]), &set(&[]), &mut since).is_empty());
        assert!(due(t0 + GRACE / 2, GRACE, &set(&[b]), &set(&[b]), &mut since).is_empty(), "back");
        assert!(due(t0 + GRACE, GRACE, &set(&[b]), &set(&[]), &mut since).is_empty(), "gone again: a new grace");
        assert_eq!(due(t0 + 2 * GRACE, GRACE, &set(&[b]), &set(&[]), &mut since), vec![b]);
    }

    #[test]
    fn a_partition_no_longer_in_the_store_is_forgotten() {
        let t0 = Instant::now();
        let b = PartitionId::inventory(2);
        let mut since = BTreeMap::new();
        due(t0, GRACE, &set(&[b]), &set(&[]), &mut since);
        due(t0, GRACE, &set(&[]), &set(&[]), &mut since);
        assert!(since.is_empty());
    }

    #[test]
    fn the_grace_is_off_or_at_least_a_minute() {
        assert_eq!(parse_grace("off"), Ok(Grace(None)));
        assert_eq!(parse_grace("10m"), Ok(Grace(Some(Duration::from_secs(600)))));
        assert!(parse_grace("30s").is_err());
        assert!(parse_grace("soon").is_err());
    }

    fn store_with(ids: &[PartitionId]) -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().expect("tmp");
        let store =
            Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).expect("store");
        let mut b = store.batch();
        for id in ids {
            b.put_dedup(*id, "e-1", 1);
            b.put_checkpoint(*id, &Checkpoint { next_offset: 5, max_event_ms: None, max_append_ms: 1, records: 5 })
                .expect("checkpoint");
        }
        b.commit().expect("commit");
        (dir, Arc::new(store))
    }

    #[test]
    fn the_janitor_deletes_only_what_no_task_holds_and_no_assignment_claimed() {
        let (running, standby, assigned, gone) =
            (PartitionId::orders(0), PartitionId::orders(1), PartitionId::orders(2), PartitionId::orders(3));
        let (_dir, store) = store_with(&[running, standby, assigned, gone]);
        let lifecycle = Arc::new(Lifecycle::default());
        lifecycle.enter(running, State::Restoring).expect("restoring");
        lifecycle.enter(standby, State::Standby).expect("standby");
        let mut janitor = Janitor::new(Arc::clone(&store), Arc::clone(&lifecycle), None, GRACE);
        let t0 = Instant::now();
        assert!(janitor.look(t0).is_empty());
        // Assigned after the first look, its task not started yet when the grace ends.
        lifecycle.assigning([assigned]);
        assert_eq!(janitor.look(t0 + GRACE), vec![gone]);
        assert_eq!(store.checkpointed_partitions().expect("list"), vec![running, standby, assigned]);
        assert_eq!(store.dedup_lookup(gone, &["e-1"]).expect("lookup"), vec![None]);
        assert_eq!(store.dedup_lookup(standby, &["e-1"]).expect("lookup"), vec![Some(1)]);
    }

    #[test]
    fn with_standbys_not_yet_placed_nothing_is_deleted() {
        let gone = PartitionId::sku(0);
        let (_dir, store) = store_with(&[gone]);
        let rows = Arc::new(crate::actions::StandbyRows::new(Arc::clone(&store), Arc::default()));
        let tail = crate::standby::audit_tail::AuditTail::new(
            crate::kafka::KafkaSettings::new("127.0.0.1:1"),
            "audit".into(),
            Arc::clone(&rows),
        );
        let (standbys, _requests) = Standbys::new(rows, tail);
        let mut janitor = Janitor::new(Arc::clone(&store), Arc::default(), Some(standbys), GRACE);
        let t0 = Instant::now();
        janitor.look(t0);
        assert!(janitor.look(t0 + 2 * GRACE).is_empty());
        assert_eq!(store.checkpointed_partitions().expect("list"), vec![gone]);
    }
}
