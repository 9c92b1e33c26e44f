//! Errors of the state store.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StateError {
    /// RocksDB failed (I/O, corruption, lock held by another process). Not retriable in
    /// place: the process should stop and resume from its last checkpoint.
    #[error("rocksdb at {path}: {source}")]
    Rocks { path: String, source: rocksdb::Error },
    /// RocksDB's C API failed on a column family operation the rocksdb crate does not wrap
    /// (creating, importing, exporting or dropping a partition's column family).
    #[error("rocksdb at {path}: {what}: {detail}")]
    Native { path: String, what: String, detail: String },
    /// A persisted value has an encoding version this build does not know.
    #[error("{what}: stored with encoding version {found}, this build reads version {expected}")]
    Version { what: &'static str, found: u8, expected: u8 },
    /// A persisted value could not be decoded: the store is corrupt or was written by
    /// incompatible code.
    #[error("{what}: cannot decode stored value: {detail}")]
    Decode { what: &'static str, detail: String },
    /// A value could not be encoded for the store (a serde shape bincode cannot write): a
    /// programming error in the type, never retriable.
    #[error("{what}: cannot encode value for the store: {detail}")]
    Encode { what: &'static str, detail: String },
    /// A file of a partition export could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The store belongs to another topology or consumer group.
    #[error("state directory {path} belongs to `{found}`, not `{expected}`; point --state-dir elsewhere or delete it to rebuild from the log")]
    Owner { path: String, found: String, expected: String },
}
