//! tidemark's task manager (issue 32, being built in steps): what one process's tasks are,
//! which topics feed them, and the states they go through.
//!
//! - [`sources`]: the topic ↔ `PartitionId::source` mapping, written once.
//! - [`lifecycle`]: the states of a partition's task, the transitions allowed between them,
//!   and one registry per process shared by the active and the standby tasks.

pub mod lifecycle;
pub mod sources;

pub use lifecycle::{Lifecycle, State};
pub use sources::Sources;
