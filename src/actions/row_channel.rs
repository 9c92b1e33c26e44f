//! The stream's end of the row channel ([`RowSender`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tidemark_state::PartitionId;
use tokio::sync::mpsc;

use super::Backlog;
use crate::engine::outbox::OutboxRow;

/// The channel was full or the runtime gone: the row waits in the outbox for a rescan.
#[derive(Debug)]
pub struct RowNotSent;

/// The stream's end of the row channel: committed outbox rows go to the runtime, and
/// count in its [`Backlog`] from the moment they are sent. Rows are durable before they are
/// sent, so a full channel loses nothing: the runtime rescans the outbox.
#[derive(Clone)]
pub struct RowSender {
    pub(super) tx: mpsc::Sender<(PartitionId, OutboxRow)>,
    pub(super) backlog: Arc<Backlog>,
    /// Wakes the runtime's outbox scan ([`RowSender::scan_now`]).
    pub(super) wake: Arc<tokio::sync::Notify>,
}

impl RowSender {
    pub fn try_send(&self, item: (PartitionId, OutboxRow)) -> Result<(), RowNotSent> {
        let counter = self.backlog.counter(&item.1);
        counter.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(item).map_err(|_| {
            counter.fetch_sub(1, Ordering::SeqCst);
            RowNotSent
        })
    }

    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }

    /// Has the runtime scan the owned outboxes now rather than at its next tick (at most a
    /// second away): a SKU partition just started, its last owner's pending rows go out.
    pub fn scan_now(&self) {
        self.wake.notify_one();
    }
}
