//! Snapshot imports off the rebalance callback, one thread per partition: a partition whose
//! newest snapshot is ahead of the local state is assigned paused, imported here, and only
//! then restored and resumed by the stream thread; every partition the process already owns
//! (and every newly assigned one without a snapshot ahead) keeps running meanwhile.
//!
//! Per partition: `importing` (the files ingested, [`crate::snapshot::Restorer`]) →
//! `recalling` for SKU partitions (the audit read from the imported checkpoint,
//! [`crate::actions::Recall`]) → reported done to the stream thread, which restores the task
//! (`restoring`), moves the fetch position to the imported checkpoint and resumes it
//! (`running`). A revocation of a partition still importing waits for its import to end, so
//! the store is never written by an import for a partition this process no longer owns.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use tidemark_state::{PartitionId, Store};
use tracing::{info, warn};

use super::{Lifecycle, State};
use crate::actions::Recall;
use crate::snapshot::Restorer;

/// What an import needs, shared with the thread that runs it.
#[derive(Clone)]
pub struct ImportContext {
    pub store: Arc<Store>,
    pub restorer: Arc<Restorer>,
    pub recall: Option<Arc<Recall>>,
    pub lifecycle: Arc<Lifecycle>,
}

/// The imports under way in one process.
pub struct Imports {
    /// `None`: imported on the stream thread (no thread could be started), reported done.
    running: HashMap<PartitionId, Option<JoinHandle<()>>>,
    done_tx: Sender<PartitionId>,
    done_rx: Receiver<PartitionId>,
}

impl Default for Imports {
    fn default() -> Self {
        let (done_tx, done_rx) = channel();
        Imports { running: HashMap::new(), done_tx, done_rx }
    }
}

impl Imports {
    /// Starts importing `id` (already `importing`, assigned and paused) on its own thread.
    pub fn start(&mut self, ctx: &ImportContext, id: PartitionId) {
        if self.running.contains_key(&id) {
            return;
        }
        let (thread_ctx, done) = (ctx.clone(), self.done_tx.clone());
        let spawned = std::thread::Builder::new().name(format!("import-{id}")).spawn(move || {
            // Reported done whatever happens, or the partition would stay paused: after a
            // panic it goes on from its local state (older, never wrong).
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| import(&thread_ctx, id))).is_err() {
                warn!(partition = %id, "the import panicked; the partition goes on from its local state");
            }
            // The stream thread may have stopped: nothing then waits for the report.
            let _ = done.send(id);
        });
        let handle = match spawned {
            Ok(handle) => Some(handle),
            Err(e) => {
                // Without a thread the import runs here: slower for the others, never skipped.
                warn!(partition = %id, error = %e, "cannot start an import thread; importing on the stream thread");
                import(ctx, id);
                let _ = self.done_tx.send(id);
                None
            }
        };
        self.running.insert(id, handle);
    }

    pub fn is_importing(&self, id: PartitionId) -> bool {
        self.running.contains_key(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The partitions whose import ended since the last call, each once.
    pub fn finished(&mut self) -> Vec<PartitionId> {
        let mut ids = Vec::new();
        while let Ok(id) = self.done_rx.try_recv() {
            if let Some(handle) = self.running.remove(&id) {
                join(id, handle);
                ids.push(id);
            }
        }
        ids
    }

    /// Waits for the import of `id` to end (a revocation): true if one was under way.
    pub fn wait(&mut self, id: PartitionId) -> bool {
        let Some(handle) = self.running.remove(&id) else { return false };
        info!(partition = %id, "revoked while importing: waiting for the import to end");
        join(id, handle);
        true
    }

    /// Waits for every import under way (the stream is stopping).
    pub fn wait_all(&mut self) {
        let ids: Vec<PartitionId> = self.running.keys().copied().collect();
        for id in ids {
            self.wait(id);
        }
    }
}

fn join(id: PartitionId, handle: Option<JoinHandle<()>>) {
    if handle.is_some_and(|h| h.join().is_err()) {
        warn!(partition = %id, "the import thread ended abnormally");
    }
}

fn import(ctx: &ImportContext, id: PartitionId) {
    ctx.restorer.restore_if_ahead(&ctx.store, id);
    let Some(recall) = &ctx.recall else { return };
    if id.source != PartitionId::SKU_REPARTITION {
        return;
    }
    ctx.lifecycle.note(id, State::Recalling);
    match ctx.store.checkpoint(id) {
        Ok(c) => {
            recall.before_dispatch(&[(id.partition, crate::actions::recall_since(c.as_ref()))]);
        }
        // The task's restore reads the checkpoint again and stops the process on this error.
        Err(e) => warn!(partition = %id, error = %e, "cannot read the checkpoint after the import"),
    }
}
