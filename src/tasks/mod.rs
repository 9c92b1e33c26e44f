//! tidemark's task manager: what one process's tasks are, which topics feed them, the
//! states they go through, and the one set of tasks each thread drives.
//!
//! - [`sources`]: the topic ↔ `PartitionId::source` mapping, written once.
//! - [`task`]: [`Task`], one per input partition, and [`TaskFactory`], which builds any of
//!   them from the state store.
//! - [`set`]: [`TaskSet`], the tasks of one thread — ingest, skip control records, finish
//!   into one batch with the combine forward, progress marks — driven alike by the stream
//!   thread, the standby thread and the topology test driver.
//! - [`assignment`]: what partitions moving means process-wide — the only thing the Kafka
//!   rebalance callback calls: standby hand-back, positions at checkpoints, audit recall,
//!   imports named, changes queued for the stream thread (`stream::rebalance` acts on them).
//! - [`driver`]: [`driver::TopologyDriver`], one `TaskSet` over an in-memory store and
//!   in-memory logs: the topology test driver (`testkit::driver`) and `tidemark shadow`'s
//!   replay.
//! - [`imports`]: snapshot imports off the rebalance callback, one thread per partition,
//!   while the partitions already owned keep running.
//! - [`lifecycle`]: the states of a partition's task, the transitions allowed between them,
//!   and one registry per process shared by the active and the standby tasks.
//! - [`moved_away`]: deleting the local state of partitions neither owned nor shadowed here
//!   for `--drop-moved-after` (the decision is pure; the janitor thread does the I/O).

pub mod assignment;
pub mod driver;
pub mod imports;
pub mod lifecycle;
pub mod moved_away;
pub mod set;
pub mod sources;
pub mod task;

pub use assignment::{Assignment, AssignmentEvent};
pub use imports::{ImportContext, Imports};
pub use lifecycle::{Lifecycle, State};
pub use set::{Finished, Ingested, Polled, TaskSet};
pub use sources::Sources;
pub use task::{is_internal, Task, TaskFactory, COMBINE, INVENTORY, ORDERS, SKU_REPARTITION};
