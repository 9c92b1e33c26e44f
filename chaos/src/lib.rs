//! The chaos suite: runs `tidemark run` exactly as users do (the release binary, one
//! process per "pod" with its own state directory and static member id) against a real
//! Kafka broker it owns and real HTTP endpoints, injects faults, and checks the SPEC §3
//! invariants against a clean reference run of the same seeded history.
//!
//! Module map:
//! - [`broker`]: the suite's own Kafka (start, kill -9, restart) via scripts/kafka/kafka.sh.
//! - [`pod`]: a `tidemark run` process: start, SIGKILL, SIGTERM, failpoints, log file, metrics.
//! - [`history`]: topics and a seeded generated history per scenario.
//! - [`scenario`]: the fault scenarios and the profiles that group them.
//! - [`checker`]: the invariant checker and its JSON/human report.
//! - [`placement`]: where the pods keep partitions' state (standby copies, local state),
//!   read from their metrics.
//! - [`outage`]: the object store down mid-run.
//! - [`takeover`]: where a surviving pod's promoted partitions resumed (standby copy,
//!   snapshot, log start), read from its log.

pub mod broker;
pub mod checker;
pub mod history;
pub mod outage;
pub mod placement;
pub mod pod;
pub mod scenario;
pub mod takeover;
