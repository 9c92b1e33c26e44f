//! Standby tasks (`tidemark run --standbys N|all`): warm copies of input partitions this
//! process does not own, kept by replaying the log without side effects. With `all`, a copy
//! of every such partition; with a count `N`, each partition has `N` copies on members other
//! than its owner, placed by every process alone from the group's description ([`group`],
//! [`placement`]) and placed again when members or assignments change.
//!
//! A second, group-less consumer on its own thread ([`runner`]) runs the same tasks as the
//! stream thread on the partitions the group gave to other members, in the same store and
//! under the same keys, from each partition's own checkpoint. Their outputs (repartition
//! records, dashboard and finance rows, dead letters, progress marks) are dropped: the
//! active owner writes them. So a standby task never runs ahead of its owner: it processes
//! only records below the offset the owner committed to the group (after its outputs were
//! acknowledged and its state written), and a promoted task resumes where the owner's
//! outputs are known to exist. A standby SKU task's outbox rows are stored `Pending` and
//! held in [`StandbyRows`] until the audit topic ([`audit_tail`]) shows them settled.
//!
//! A partition has one writer at a time. When the group assigns one, the rebalance callback
//! asks the standby thread to let it go ([`Standbys::release`]): it commits, drops the task,
//! and only then does the active task read the checkpoint, which is the standby's last
//! commit, usually a commit interval behind the log end. Nothing is imported and only that
//! interval is replayed. A revoked partition goes back to the standby thread after its last
//! active commit ([`Standbys::adopt`]). See docs/state-movement.md, "Standbys".
//!
//! Warm-up (KIP-441 style): a process with standbys joins the group only once its standby
//! copy of every partition has caught up ([`Standbys::wait_warm`], bounded by
//! `--warmup-timeout`), so the partitions a scale-up moves to it arrive warm.
//!
//! Module map:
//! - [`copies`]: the value of `--standbys` (`none`, `all`, a count).
//! - [`group`]: the group's members and their assignments, read from the broker.
//! - [`placement`]: which partitions this process shadows (rendezvous hashing; pure).
//! - [`runner`]: the standby thread (consumer, tasks, commits without outputs).
//! - [`audit_tail`]: the audit topic, read as it is written; outcomes to [`StandbyRows`].

pub mod audit_tail;
pub mod copies;
pub mod group;
pub mod placement;
pub mod runner;

pub use copies::Copies;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_state::PartitionId;
use tracing::{info, warn};

pub use crate::actions::StandbyRows;
use crate::telemetry::Progress;
use audit_tail::AuditTail;

/// A promotion waits for the standby thread to commit and let the partitions go, however long
/// that takes (an import of a large snapshot takes minutes): going on earlier would let two
/// writers work on one partition, the standby's import or commit landing on the active task's
/// rows. It says so every this long while it waits; it stops waiting only when the standby
/// thread has ended.
const RELEASE_WARN_EVERY: Duration = Duration::from_secs(10);
/// How long a promotion of SKU partitions waits for the audit tail to reach the audit
/// topic's end, so actions the old owner settled just before it died are known as such.
const AUDIT_CATCH_UP: Duration = Duration::from_secs(5);

pub enum Request {
    /// Stop standing by for these partitions, after a commit; answer on the channel.
    Release(Vec<PartitionId>, SyncSender<()>),
    /// Stand by for these partitions (from their checkpoints).
    Adopt(Vec<PartitionId>),
}

pub struct Standbys {
    requests: Mutex<Sender<Request>>,
    /// Partitions held (or being taken) by the active tasks: never standing by for those.
    active: Arc<Mutex<BTreeSet<PartitionId>>>,
    rows: Arc<StandbyRows>,
    tail: Arc<AuditTail>,
    /// Every standby task has caught up with its log (see [`runner`]).
    warm: Arc<AtomicBool>,
    /// With a count of copies, the partitions placed here once the group was read; `None`
    /// with `all` or before the first reading (every partition may then be shadowed here).
    placed: Mutex<Option<BTreeSet<PartitionId>>>,
    release_warn_every: Duration,
}

impl Standbys {
    pub fn new(rows: Arc<StandbyRows>, tail: Arc<AuditTail>) -> (Arc<Self>, Receiver<Request>) {
        crate::telemetry::standby::started();
        let (tx, rx) = mpsc::channel();
        let standbys = Standbys {
            requests: Mutex::new(tx),
            active: Arc::default(),
            rows,
            tail,
            warm: Arc::new(AtomicBool::new(false)),
            placed: Mutex::new(None),
            release_warn_every: RELEASE_WARN_EVERY,
        };
        (Arc::new(standbys), rx)
    }

    pub fn active(&self) -> Arc<Mutex<BTreeSet<PartitionId>>> {
        Arc::clone(&self.active)
    }

    /// The partitions this process shadows or is about to (`None`: any it does not own).
    pub fn placed(&self) -> Option<BTreeSet<PartitionId>> {
        self.placed.lock().ok().and_then(|p| p.clone())
    }

    fn set_placed(&self, placed: BTreeSet<PartitionId>) {
        if let Ok(mut p) = self.placed.lock() {
            *p = Some(placed);
        }
    }

    /// The group assigned `ids` to this process: the standby tasks commit and let them go
    /// before the active tasks read their checkpoints. Blocking (the rebalance callback).
    pub fn release(&self, ids: &[PartitionId]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(mut a) = self.active.lock() {
            a.extend(ids.iter().copied());
        }
        let started = Instant::now();
        let (ack, done) = mpsc::sync_channel(1);
        let sent = self.requests.lock().map(|tx| tx.send(Request::Release(ids.to_vec(), ack)).is_ok()).unwrap_or(false);
        if sent {
            loop {
                match done.recv_timeout(self.release_warn_every) {
                    Ok(()) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        warn!(partitions = ?ids, "the standby thread ended before it let the partitions go");
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => warn!(
                        partitions = ?ids,
                        waited_s = started.elapsed().as_secs(),
                        "waiting for the standby thread to let the partitions go (one writer per partition)"
                    ),
                }
            }
        }
        let sku: Vec<i32> =
            ids.iter().filter(|id| id.source == PartitionId::SKU_REPARTITION).map(|id| id.partition).collect();
        let waiting = self.rows.promoted(&sku);
        if !sku.is_empty() && !self.tail.catch_up(AUDIT_CATCH_UP) {
            warn!(
                "the audit tail did not reach the audit topic's end within {AUDIT_CATCH_UP:?}: actions settled just \
                 before the old owner stopped may be sent again"
            );
        }
        crate::telemetry::standby::promoted(ids.len());
        info!(
            partitions = ?ids,
            rows_waiting = waiting,
            took_ms = started.elapsed().as_millis() as u64,
            "standby tasks handed to the active tasks"
        );
    }

    /// `ids` were revoked from the active tasks (after their last commit): stand by for them.
    pub fn adopt(&self, ids: &[PartitionId]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(mut a) = self.active.lock() {
            for id in ids {
                a.remove(id);
            }
        }
        if let Ok(tx) = self.requests.lock() {
            let _ = tx.send(Request::Adopt(ids.to_vec()));
        }
    }

    /// Waits (beating liveness) until every standby task has caught up, at most `limit` or
    /// until `stop`. True when warm.
    pub fn wait_warm(&self, limit: Duration, stop: &AtomicBool, progress: &Progress) -> bool {
        let started = Instant::now();
        progress.restoring(true);
        let mut logged = Instant::now();
        let warm = loop {
            if self.warm.load(Ordering::Relaxed) {
                break true;
            }
            if stop.load(Ordering::Relaxed) || started.elapsed() >= limit {
                break false;
            }
            if logged.elapsed() >= Duration::from_secs(10) {
                info!(
                    waited_s = started.elapsed().as_secs(),
                    "warming up: standby tasks still catching up before joining the group"
                );
                logged = Instant::now();
            }
            progress.beat();
            std::thread::sleep(Duration::from_millis(100));
        };
        progress.restoring(false);
        if warm {
            info!(
                took_ms = started.elapsed().as_millis() as u64,
                "warm: every standby task caught up; joining the group"
            );
        } else if !stop.load(Ordering::Relaxed) {
            warn!(limit = ?limit, "warm-up timed out; joining the group with standby tasks still behind");
        }
        warm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Settled;
    use crate::kafka::KafkaSettings;
    use tidemark_state::{Store, StoreOptions};

    #[test]
    fn a_promotion_waits_for_the_standby_thread_to_let_go_however_long_it_takes() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() });
        let rows = Arc::new(StandbyRows::new(Arc::new(store.expect("store")), Arc::new(Settled::default())));
        let tail = AuditTail::new(KafkaSettings::new("127.0.0.1:1"), "audit".into(), Arc::clone(&rows));
        let (standbys, requests) = Standbys::new(rows, tail);
        let mut standbys = Arc::into_inner(standbys).expect("one owner");
        standbys.release_warn_every = Duration::from_millis(50);
        // The standby thread is importing a large snapshot: it lets go after 400 ms.
        let thread = std::thread::spawn(move || {
            if let Ok(Request::Release(_, ack)) = requests.recv() {
                std::thread::sleep(Duration::from_millis(400));
                let _ = ack.send(());
            }
        });
        let started = Instant::now();
        standbys.release(&[PartitionId::orders(1)]);
        assert!(started.elapsed() >= Duration::from_millis(400), "went on after {:?}", started.elapsed());
        thread.join().expect("thread");
    }
}
