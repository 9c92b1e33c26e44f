//! What can go wrong with a snapshot, classified by the operation that failed: the failure
//! metric's `op` label, and whether the store (retry next round) or this pod is at fault.

use std::path::PathBuf;

use thiserror::Error;

/// The operation of a failure (`tidemark_snapshot_failures_total{op}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Writing a snapshot's objects or its manifest.
    Upload,
    /// Listing a partition's snapshots or reading their manifests.
    List,
    /// Deleting old snapshots and abandoned uploads.
    Prune,
    /// Fetching a snapshot's files for a restore.
    Download,
    /// Writing the partition's files locally before the upload (the state store, the volume).
    Export,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Upload, Op::List, Op::Prune, Op::Download, Op::Export];

    pub fn label(self) -> &'static str {
        match self {
            Op::Upload => "upload",
            Op::List => "list",
            Op::Prune => "prune",
            Op::Download => "download",
            Op::Export => "export",
        }
    }
}

#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The object store refused or could not be reached: an outage is retried by the next
    /// round, and processing goes on meanwhile.
    #[error("snapshot store, {}, {key}: {source}", op.label())]
    Store {
        op: Op,
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// A local file of an export or a download (the state volume).
    #[error("{}: {source}", path.display())]
    Local {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The state store could not export the partition.
    #[error(transparent)]
    State(#[from] tidemark_state::StateError),
    /// A manifest that names a file outside its snapshot, or cannot be encoded.
    #[error("snapshot manifest {key}: {detail}")]
    Manifest { key: String, detail: String },
    /// `--snapshot-dir` cannot be used (at start: fatal).
    #[error("{0}")]
    Config(String),
}

impl SnapshotError {
    pub fn store(op: Op, key: &object_store::path::Path, source: object_store::Error) -> Self {
        SnapshotError::Store { op, key: key.to_string(), source }
    }

    /// The operation to count this failure under.
    pub fn op(&self, during: Op) -> Op {
        match self {
            SnapshotError::Store { op, .. } => *op,
            _ => during,
        }
    }
}
