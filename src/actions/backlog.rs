//! The runtime's [`Backlog`]: rows handed over or started and not yet settled.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::engine::outbox::{OutboxRow, RowState};

/// Rows the runtime was given and has not finished: a row counts from its hand-over (or
/// from the scan that starts it) until its outcome is persisted and audited, or until the
/// runtime gives it up on stop (it stays pending in the outbox). Shadow rows are never sent
/// and so are never pending actions; they count apart until their audit records are acked.
#[derive(Debug, Default)]
pub struct Backlog {
    actions: AtomicUsize,
    shadow: AtomicUsize,
}

impl Backlog {
    /// Actions (`act`/`notify` rows) queued for the runtime or in delivery.
    pub fn actions(&self) -> usize {
        self.actions.load(Ordering::SeqCst)
    }

    /// Shadow rows whose audit records are not yet acknowledged.
    pub fn shadow(&self) -> usize {
        self.shadow.load(Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.actions() == 0 && self.shadow() == 0
    }

    pub(super) fn counter(&self, row: &OutboxRow) -> &AtomicUsize {
        if row.state == RowState::Shadow {
            &self.shadow
        } else {
            &self.actions
        }
    }
}

/// Holds one row's place in the [`Backlog`] until dropped (settled, given up, or the task
/// ended with the runtime).
pub(super) struct Counted(Arc<Backlog>, bool);

impl Counted {
    /// Takes the place a hand-over already counted.
    pub(super) fn adopt(backlog: &Arc<Backlog>, row: &OutboxRow) -> Self {
        Counted(Arc::clone(backlog), row.state == RowState::Shadow)
    }

    /// Counts a row that was not handed over (found by a scan).
    pub(super) fn count(backlog: &Arc<Backlog>, row: &OutboxRow) -> Self {
        backlog.counter(row).fetch_add(1, Ordering::SeqCst);
        Self::adopt(backlog, row)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let c = if self.1 { &self.0.shadow } else { &self.0.actions };
        c.fetch_sub(1, Ordering::SeqCst);
    }
}
