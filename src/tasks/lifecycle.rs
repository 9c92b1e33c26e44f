//! The states a partition's task goes through in one process, and the only transitions
//! allowed between them, checked in one place ([`State::may_become`]). Active and standby
//! tasks share one [`Lifecycle`] per process, so a partition is never written by both: a
//! standby task must have let go (`closed`) before the active one may start restoring.
//!
//! ```text
//!   closed ──▶ importing ──▶ recalling ──▶ restoring ──▶ running ◀──▶ suspended
//!     ▲ │          │  ▲                        ▲             │            │
//!     │ │          └──┼────────────────────────┘             ▼            │
//!     │ └────────────▶┴──────▶ (recalling, restoring)   handing over ◀────┘
//!     │                                                      │
//!     ├──────────────────────────────────────────────────────┘
//!     │  any active state may also close at once (a failed restore, refused outputs)
//!     │
//!   standby (kept by the standby thread; closes when the group assigns the partition here)
//! ```
//!
//! Where each state is entered (docs/tasks.md has the same table):
//! - `importing`: `tasks::assignment::Assignment::position_at_checkpoints` (with snapshots:
//!   a partition whose newest snapshot is ahead of the local checkpoint is assigned paused)
//!   and imported off the callback by `tasks::imports::Imports::start`;
//! - `recalling`: the same function, for SKU partitions (`actions::Recall`; the read goes on,
//!   on a thread of its own, while the task restores, and ends before the task runs:
//!   `Assignment::recalled`), or after the import, on the import's thread;
//! - `restoring`, `running`: `stream::Runner::start_task` (`stream/rebalance.rs`), from
//!   `stream::Runner::handle_assignment` (`Assigned`, or an import that ended);
//! - `suspended`, back to `running`: `stream::Runner::apply_pause`;
//! - `handing over`, `closed`: `stream::Runner::handle_assignment` (`Revoked`), and
//!   `stream::Runner::let_go` (refused outputs: closed at once);
//! - `standby`, `closed`: `standby::runner::Runner::adopt` and `release`.
//!
//! A closed partition's local state may be deleted (`tasks::moved_away`), but only through
//! [`Lifecycle::while_closed`], and never one the group assigned here since the janitor last
//! looked ([`Lifecycle::assigning`]): a task never starts on state that is being deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use tidemark_state::PartitionId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// No task in this process (the initial state).
    Closed,
    /// A snapshot newer than the local checkpoint is being checked for and imported.
    Importing,
    /// SKU partitions: the audit topic is read so completed actions are not sent again.
    Recalling,
    /// The task is built from the store; the fetch position is its checkpoint.
    Restoring,
    /// Polled, ingested, committed.
    Running,
    /// Consumption paused (`POST /pause`); assignment and state kept.
    Suspended,
    /// Revoked: committing, closing the dispatcher's gate, exporting, releasing.
    HandingOver,
    /// A warm copy replayed by the standby thread, without side effects.
    Standby,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Importing => "importing",
            State::Recalling => "recalling",
            State::Restoring => "restoring",
            State::Running => "running",
            State::Suspended => "suspended",
            State::HandingOver => "handing_over",
            State::Standby => "standby",
        }
    }

    /// Whether a task in this state may go to `to`. Staying in a state is allowed.
    pub fn may_become(self, to: State) -> bool {
        use State::*;
        self == to
            || matches!(
                (self, to),
                (Closed, Importing | Recalling | Restoring | Standby)
                    | (Importing, Recalling | Restoring | Closed)
                    | (Recalling, Restoring | Closed)
                    | (Restoring, Running | Closed)
                    | (Running, Suspended | HandingOver | Closed)
                    | (Suspended, Running | HandingOver | Closed)
                    | (HandingOver, Closed)
                    | (Standby, Closed)
            )
    }
}

/// A transition [`State::may_become`] does not allow: nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub partition: PartitionId,
    pub from: State,
    pub to: State,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: a task {} may not become {}", self.partition, self.from.name(), self.to.name())
    }
}

impl std::error::Error for Refused {}

/// The state of every partition of one process, active and standby, behind one lock.
#[derive(Debug, Default)]
pub struct Lifecycle {
    states: Mutex<HashMap<PartitionId, State>>,
    /// Assigned by the group since [`Lifecycle::take_assigned`] last took them. Locked
    /// before `states` wherever both are held.
    assigned: Mutex<BTreeSet<PartitionId>>,
}

impl Lifecycle {
    pub fn state(&self, id: PartitionId) -> State {
        self.states.lock().ok().and_then(|s| s.get(&id).copied()).unwrap_or(State::Closed)
    }

    /// Moves `id` to `to`, or refuses it with the state left as it was.
    pub fn enter(&self, id: PartitionId, to: State) -> Result<State, Refused> {
        let mut states = self.states.lock().map_err(|_| Refused { partition: id, from: State::Closed, to })?;
        let from = states.get(&id).copied().unwrap_or(State::Closed);
        if !from.may_become(to) {
            return Err(Refused { partition: id, from, to });
        }
        if to == State::Closed {
            states.remove(&id);
        } else {
            states.insert(id, to);
        }
        Ok(from)
    }

    /// [`Lifecycle::enter`] for code paths that go on either way: a refusal is a defect in
    /// tidemark, logged and counted (`tidemark_task_transitions_refused_total`), not a
    /// reason to stop a partition.
    pub fn note(&self, id: PartitionId, to: State) {
        if let Err(refused) = self.enter(id, to) {
            crate::telemetry::events::transition_refused(&refused);
        }
    }

    /// Closes every partition held in an active state (the stream thread ended: no active
    /// task is left); standby tasks keep theirs.
    pub fn close_active(&self) {
        if let Ok(mut states) = self.states.lock() {
            states.retain(|_, s| *s == State::Standby);
        }
    }

    /// The group assigns `ids` here, before their checkpoints are read: waits for a deletion
    /// of one of them under way, and keeps them from being deleted until the janitor takes
    /// them ([`Lifecycle::take_assigned`]) and starts their grace period again.
    pub fn assigning(&self, ids: impl IntoIterator<Item = PartitionId>) {
        if let Ok(mut a) = self.assigned.lock() {
            a.extend(ids);
        }
    }

    /// The partitions assigned since the last call.
    pub fn take_assigned(&self) -> BTreeSet<PartitionId> {
        self.assigned.lock().map(|mut a| std::mem::take(&mut *a)).unwrap_or_default()
    }

    /// Partitions with a task in this process, in any state but closed.
    pub fn open(&self) -> BTreeSet<PartitionId> {
        self.states.lock().map(|s| s.keys().copied().collect()).unwrap_or_default()
    }

    /// Runs `f` (a deletion of `id`'s state) only while `id` is closed and was not assigned
    /// since [`Lifecycle::take_assigned`], holding both locks: no task can start on it, and
    /// an assignment waits until `f` is done. `None` when `id` is in use.
    pub fn while_closed<R>(&self, id: PartitionId, f: impl FnOnce() -> R) -> Option<R> {
        let assigned = self.assigned.lock().ok()?;
        let states = self.states.lock().ok()?;
        if assigned.contains(&id) || states.contains_key(&id) {
            return None;
        }
        let r = f();
        drop(states);
        drop(assigned);
        Some(r)
    }

    /// Partitions in each state (those closed are not kept).
    pub fn counts(&self) -> BTreeMap<State, usize> {
        let mut counts = BTreeMap::new();
        if let Ok(states) = self.states.lock() {
            for s in states.values() {
                *counts.entry(*s).or_default() += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId { source: PartitionId::SKU_REPARTITION, partition: 3 };

    #[test]
    fn a_partition_goes_from_assignment_to_running_and_back_to_closed() {
        let l = Lifecycle::default();
        for to in [State::Importing, State::Recalling, State::Restoring, State::Running, State::Suspended] {
            l.enter(P, to).unwrap();
        }
        l.enter(P, State::Running).unwrap();
        l.enter(P, State::HandingOver).unwrap();
        assert_eq!(l.enter(P, State::Closed), Ok(State::HandingOver));
        assert_eq!(l.state(P), State::Closed);
        assert!(l.counts().is_empty());
    }

    #[test]
    fn an_active_task_may_not_start_while_the_standby_task_still_holds_the_partition() {
        let l = Lifecycle::default();
        l.enter(P, State::Standby).unwrap();
        for to in [State::Importing, State::Recalling, State::Restoring, State::Running] {
            assert_eq!(l.enter(P, to), Err(Refused { partition: P, from: State::Standby, to }));
        }
        assert_eq!(l.state(P), State::Standby, "a refused transition changes nothing");
        l.enter(P, State::Closed).unwrap();
        l.enter(P, State::Restoring).unwrap();
    }

    #[test]
    fn a_standby_task_may_not_take_a_partition_an_active_task_holds() {
        let l = Lifecycle::default();
        l.enter(P, State::Restoring).unwrap();
        l.enter(P, State::Running).unwrap();
        assert!(l.enter(P, State::Standby).is_err());
        assert!(l.enter(P, State::Restoring).is_err(), "running never goes back to restoring");
        l.enter(P, State::HandingOver).unwrap();
        assert!(l.enter(P, State::Running).is_err(), "a revoked task never runs again");
    }

    #[test]
    fn a_partition_in_use_or_assigned_since_the_janitor_looked_is_never_deleted() {
        let l = Lifecycle::default();
        l.enter(P, State::Standby).unwrap();
        assert_eq!(l.while_closed(P, || "deleted"), None, "a standby task holds it");
        l.enter(P, State::Closed).unwrap();
        l.assigning([P]);
        assert_eq!(l.while_closed(P, || "deleted"), None, "assigned, its task not started yet");
        assert_eq!(l.take_assigned(), [P].into());
        assert_eq!(l.while_closed(P, || "deleted"), Some("deleted"));
    }

    #[test]
    fn an_assignment_waits_for_a_deletion_under_way() {
        let l = std::sync::Arc::new(Lifecycle::default());
        let (started, go) = std::sync::mpsc::channel();
        let deleting = {
            let l = std::sync::Arc::clone(&l);
            std::thread::spawn(move || {
                l.while_closed(P, || {
                    started.send(()).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(200));
                })
            })
        };
        go.recv().unwrap();
        let at = std::time::Instant::now();
        l.assigning([P]);
        assert!(at.elapsed() >= std::time::Duration::from_millis(100), "assigned during the deletion");
        assert!(deleting.join().unwrap().is_some());
    }

    #[test]
    fn every_state_is_reachable_from_closed_and_can_close() {
        use State::*;
        let all = [Closed, Importing, Recalling, Restoring, Running, Suspended, HandingOver, Standby];
        for s in all {
            let reachable = all.iter().any(|from| *from != s && from.may_become(s)) || s == Closed;
            assert!(reachable, "{s:?} is never entered");
            let closes = s.may_become(Closed) || [HandingOver].iter().any(|t| s.may_become(*t));
            assert!(closes, "{s:?} never closes");
        }
    }
}
