//! The tidemark runtime: wires the pure topology model and the state store to Kafka, HTTP
//! and the command line.
//!
//! Module map:
//! - [`actions`]: sees committed outbox rows to a final state: dispatch, retry, audit.
//! - [`cli`]: every command and flag (clap).
//! - [`cmd`]: one module per command (`run`, `demo`, `gen`, `query`, `batch`, `microbatch`, `shadow`, `actions`).
//! - [`engine`]: per-partition tasks: normalise, dedup, window, aggregate; no Kafka inside.
//! - [`stream`]: the stream thread: poll, ingest, commit (outputs, then state + offsets).
//! - [`dispatch`]: the idempotent, signed HTTP dispatcher of actions (one classified POST per call).
//! - [`kafka`]: client settings, topic admin, consumer context, output producers (lanes), bounded reads.
//! - [`failpoint`]: env-activated crash points for the chaos suite.
//! - [`scratch`]: throwaway store directories (batch dedup, shadow replays), locked while in
//!   use; the sweep of those a killed run left in `TMPDIR`.
//! - [`snapshot`]: per-partition state snapshots in object storage or a shared directory, and
//!   the restore of a moved or lost partition from them.
//! - [`standby`]: standby tasks (`run --standbys N|all`): warm copies of the partitions other
//!   processes own, replayed from the log without side effects, promoted on assignment.
//! - [`signal`]: graceful stop on SIGTERM/SIGINT (a second signal exits at once).
//! - [`status`]: the live status line and final summary.
//! - [`testkit`]: the broker-free topology test driver (`testkit::driver`), over the
//!   engine and an in-memory store; see `docs/test-driver.md`.
//! - [`tasks`]: the task manager: sources, tasks, the task set, the lifecycle, what a
//!   rebalance means for the tasks (`tasks::Assignment`), the in-memory driver.
//! - [`telemetry`]: `/metrics` and the probes, pause/resume on the admin listener, the
//!   backlog-age prober.

pub mod actions;
pub mod build_info;
pub mod cli;
pub mod cmd;
pub mod dispatch;
pub mod engine;
pub mod failpoint;
pub mod kafka;
pub mod scratch;
pub mod signal;
pub mod snapshot;
pub mod standby;
pub mod status;
pub mod stream;
pub mod tasks;
// The one place the `metrics` macros are called (clippy.toml's disallowed-macros).
#[allow(clippy::disallowed_macros)]
pub mod telemetry;
pub mod testkit;
