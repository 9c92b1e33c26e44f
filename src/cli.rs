//! Command-line interface. Every command and flag is documented here; `--help` prints it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tidemark_topology::gen::Spike;

#[derive(Parser, Debug)]
#[command(name = "tidemark", version = crate::build_info::LONG_VERSION, about = "Deterministic, crash-safe stateful stream processing for order events")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `tidemark=debug`.
    #[arg(long, global = true, env = "TIDEMARK_LOG", default_value = "info")]
    pub log: String,
    /// Log lines as text (for people) or one JSON object per line (for log collectors).
    #[arg(long, global = true, env = "TIDEMARK_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::logging::LogFormat::Text)]
    pub log_format: crate::telemetry::logging::LogFormat,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the stream processor: join the consumer group and process until SIGTERM/SIGINT.
    Run(RunArgs),
    /// Zero-install demo: an in-process mock Kafka cluster, a generated order stream and the
    /// example topology, with a live status line and a final summary.
    Demo(DemoArgs),
    /// Generate a deterministic order-event log (and inventory snapshots) from a seed.
    Gen(GenArgs),
    /// Validate a topology file and report every error with its location.
    Validate {
        /// The topology file (TOML).
        file: PathBuf,
    },
    /// Create the topology's topics (orders with LogAppendTime, compacted outputs).
    Topics(TopicsArgs),
    /// Read results back from the output topics.
    #[command(subcommand)]
    Query(QueryCommand),
    /// The finance close: reproducible batch runs over frozen offset ranges (docs/finance.md).
    #[command(subcommand)]
    Batch(BatchCommand),
    /// Micro-batch mode: the dashboard and provisional finance over consecutive offset
    /// slices on a schedule, one slice at a time (docs/modes.md).
    Microbatch(MicrobatchArgs),
    /// Shadow replay: run stream, micro-batch and batch over one frozen offset range and
    /// compare their results key by key; exit 3 on an unexplained mismatch (docs/modes.md).
    Shadow(ShadowArgs),
    /// Inventory actions in a state directory's outbox: list them, and re-send failed
    /// (dead-lettered) ones with the same key and payload, audited (docs/actions.md).
    #[command(subcommand)]
    Actions(ActionsCommand),
}

#[derive(Args, Debug)]
pub struct MicrobatchArgs {
    /// The topology file.
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// RocksDB state directory of the micro-batch job (its own; never a stream's).
    #[arg(long, env = "TIDEMARK_STATE_DIR", default_value = "./state-microbatch")]
    pub state_dir: PathBuf,
    /// Start a slice this often (humantime, e.g. `2m`); a slice that overruns delays the next.
    #[arg(long, default_value = "2m", value_parser = positive_duration)]
    pub every: Duration,
    /// Freshness budget of the results: a slice reports whether `every + its duration` fits.
    #[arg(long, default_value = "5m", value_parser = positive_duration)]
    pub deadline: Duration,
    /// Write dashboard rows here instead of the topology's `sinks.dashboard`.
    #[arg(long)]
    pub dashboard_topic: Option<String>,
    /// Write provisional finance rows here instead of `sinks.finance_provisional`.
    #[arg(long)]
    pub finance_topic: Option<String>,
    /// Do not write dead-letter and late records (when a stream beside this job writes them).
    #[arg(long)]
    pub no_side_outputs: bool,
    /// Create missing output topics at start (compacted, the topology's partition counts).
    #[arg(long)]
    pub create_topics: bool,
    #[arg(long, default_value_t = 1)]
    pub replication: i32,
    /// Append one JSON line per slice to this file (see docs/modes.md for the fields).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Stop after this many slices (0 = run until SIGTERM).
    #[arg(long, default_value_t = 0)]
    pub max_slices: u64,
    /// At most this many records in one slice, split evenly over the partitions: a slice
    /// holds its records' dedup ids and staged state in memory until it commits (~150 B
    /// each). A job further behind catches up in consecutive capped slices, without waiting
    /// `--every` between them. 0 = no cap (a slice takes everything up to the high watermark).
    #[arg(long, default_value_t = 2_000_000)]
    pub max_slice_records: u64,
    /// Stop after a slice that found no new records.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Serve `/metrics` (slice durations, deadline misses, backlog age), `/healthz` and
    /// `/readyz` here, e.g. `0.0.0.0:9464`.
    #[arg(long)]
    pub http_addr: Option<std::net::SocketAddr>,
    /// Seconds between backlog-age probes (with --http-addr).
    #[arg(long, default_value_t = 2)]
    pub backlog_probe_every: u64,
    /// Continue when records the state has not seen were already deleted from the log
    /// (a fresh state over a log whose head expired, or a job that fell behind retention).
    #[arg(long, alias = "allow-partial-rebuild")]
    pub accept_gaps: bool,
}

#[derive(Args, Debug)]
pub struct ShadowArgs {
    /// The topology file.
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// The frozen history: end offsets (exclusive) of every orders partition, `p:offset,...`,
    /// or `end` for the high watermarks now.
    #[arg(long)]
    pub range: String,
    /// Start offsets, `p:offset,...`. Default: the start of each partition's log.
    #[arg(long)]
    pub from: Option<String>,
    /// The stream replay commits every this many records per partition.
    #[arg(long, default_value_t = 500)]
    pub stream_commit_records: usize,
    /// The micro-batch replay cuts each partition's range into this many slices, or more
    /// when a slice would hold over 1,000,000 records (a slice is held in memory).
    #[arg(long, default_value_t = 4)]
    pub slices: usize,
    /// Compare the action path only when the orders range plus the inventory log hold at most
    /// this many records: its replay holds them in memory, ~1.6 KiB each (docs/modes.md), so
    /// the default keeps the whole shadow under 1 GiB. Above it the report says
    /// `actions.compared: false` and why; 0 never compares actions.
    #[arg(long, default_value_t = 400_000)]
    pub actions_max_records: u64,
    /// Write the JSON report here (the human report goes to stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "TIDEMARK_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Extra librdkafka property (repeatable), e.g. `-X security.protocol=SASL_SSL`.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub kafka_option: Vec<String>,
    /// File of librdkafka properties (`key=value` lines), e.g. TLS/SASL settings from a Secret.
    #[arg(long, env = "TIDEMARK_KAFKA_CONFIG")]
    pub kafka_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The topology file.
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Consumer group id.
    #[arg(long, env = "TIDEMARK_GROUP", default_value = "tidemark")]
    pub group: String,
    /// Static group member id (the pod name in a StatefulSet).
    #[arg(long, env = "TIDEMARK_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// RocksDB state directory (a PersistentVolume in Kubernetes).
    #[arg(long, env = "TIDEMARK_STATE_DIR", default_value = "./state")]
    pub state_dir: PathBuf,
    /// Create missing topics at start (replication factor below).
    #[arg(long)]
    pub create_topics: bool,
    #[arg(long, default_value_t = 1)]
    pub replication: i32,
    /// Exit once the work derived from the log is done (batch-like runs, tests): every
    /// assigned partition at the end of the log, every SKU repartition record consumed and
    /// applied, every pending action dispatched and every audit record acknowledged.
    #[arg(long)]
    pub exit_at_end: bool,
    /// With `--exit-at-end`: how long that work may take once every input partition has
    /// reached its log end (humantime, e.g. `30s`). When it runs out, the process commits,
    /// states how many records and actions remain, and exits with status 1; a run from the
    /// same state continues from there.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub drain_timeout: std::time::Duration,
    /// Print a status line every N seconds (0 = off).
    #[arg(long, default_value_t = 0)]
    pub status_every: u64,
    /// Static partition ownership for a StatefulSet of this many replicas: the pod with
    /// ordinal k (the number ending `--instance-id`, or `--ordinal`) owns partition p of every
    /// input topic iff p % replicas == k. Partitions never move between pods, so state never
    /// has to be rebuilt elsewhere; a pod's partitions wait while it restarts. Without it,
    /// partitions are balanced by the consumer group (and a moved partition is rebuilt from
    /// the log by its new owner).
    #[arg(long, env = "TIDEMARK_REPLICAS")]
    pub replicas: Option<i32>,
    /// Group-managed assignment (without `--replicas`): how long the group waits for a
    /// member that stopped heartbeating before its partitions go to the others (Kafka's
    /// `session.timeout.ms`; the broker bounds it, 6 s to 30 min by default). With static
    /// membership (`--instance-id`) a pod that restarts within it gets its partitions back
    /// without a rebalance; one that does not come back holds them that long.
    #[arg(long, env = "TIDEMARK_SESSION_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub session_timeout: std::time::Duration,
    /// This pod's ordinal for `--replicas` (default: parsed from the end of --instance-id).
    #[arg(long, env = "TIDEMARK_ORDINAL")]
    pub ordinal: Option<i32>,
    /// Serve `/metrics`, `/startupz`, `/healthz`, `/readyz` here, e.g. `0.0.0.0:9090`.
    /// Off when not given (and then so is the admin listener).
    #[arg(long, env = "TIDEMARK_HTTP_ADDR")]
    pub http_addr: Option<std::net::SocketAddr>,
    /// Serve the admin endpoints `POST /pause` and `POST /resume` here (with --http-addr).
    /// Loopback unless --admin-token-file is given; `off` disables them. When the default
    /// address is taken (several processes on one host) the listener stays off.
    #[arg(long, env = "TIDEMARK_ADMIN_ADDR")]
    pub admin_addr: Option<String>,
    /// A file holding the bearer token the admin endpoints require (`Authorization: Bearer
    /// <token>`), e.g. a mounted Secret; read again on each request. Required when
    /// --admin-addr is not a loopback address.
    #[arg(long, env = "TIDEMARK_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// `/readyz` answers 503 while the backlog age of any partition is above this many
    /// seconds (0 = no bound: ready once the lag is known).
    #[arg(long, env = "TIDEMARK_READY_MAX_LAG_SECONDS", default_value_t = 60)]
    pub ready_max_lag_seconds: u64,
    /// What the state store's memtables (RocksDB's write buffers, over every column family)
    /// may hold together, in MiB; the largest is flushed when they reach it. The process's
    /// memory is this, the 256 MiB block cache at most, and what the tasks hold
    /// (`tidemark_task_entries`). 0: no budget (each column family up to two 64 MiB memtables).
    #[arg(long, env = "TIDEMARK_STATE_MEMTABLE_MB", default_value_t = 64)]
    pub state_memtable_mb: usize,
    /// Recent dedup entries the state store keeps in memory, over every partition, before the
    /// largest partition's are folded into a table file: ~25 bytes each (up to twice this
    /// while folds run), and every one not folded yet is read back at a restart. Smaller: less
    /// memory and a shorter restart, more and smaller files to compact.
    #[arg(long, env = "TIDEMARK_STATE_DEDUP_RUNS_MAX", default_value_t = tidemark_state::DEFAULT_DEDUP_RUNS_MAX_ENTRIES)]
    pub state_dedup_runs_max: usize,
    /// Threads the tasks work on: a poll's records ingested (parse, normalise, SKU merge input)
    /// and each commit's tasks finished (dedup, derive, merge, rules), each task on one thread
    /// at a time and its writes applied in partition order, so outputs and action keys are the
    /// same whatever the count. Default: the cores this process may use (its CPU quota in a container).
    #[arg(long, env = "TIDEMARK_THREADS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Whether the SKU repartition records a commit sends to one partition go out as one
    /// log record (a pack; docs/formats.md) instead of one log record each: the same data,
    /// ~1/500 of the records to produce, store, fetch and poll. Versions before packs cannot
    /// read them: a rolling upgrade from such a version runs with `off` first, then rolls
    /// again without it (docs/operations.md, "Upgrading").
    #[arg(long, env = "TIDEMARK_REPARTITION_PACKING", value_enum, default_value_t = Switch::On)]
    pub repartition_packing: Switch,
    /// Seconds between two measurements of backlog age per partition.
    #[arg(long, default_value_t = 2)]
    pub backlog_probe_every: u64,
    /// Continue when records a partition's state has not processed were already deleted
    /// from the log (retention outran the processor, or a fresh state over a log whose head
    /// expired): the partition moves to the log start, and the loss is logged and counted in
    /// `tidemark_skipped_records_total`. Without it such a partition stops the process with
    /// the lost offset range (SPEC §1.4).
    #[arg(long, alias = "allow-partial-rebuild")]
    pub accept_gaps: bool,
    /// Accept input topics (`orders`, `inventory`) whose `message.timestamp.type` is
    /// `CreateTime`. Logical time then comes from producer clocks: a producer with a wrong
    /// clock moves windows, dedup expiry and the future-event check, and two replays of one
    /// log agree only because the timestamps are stored. Without it, start is refused.
    #[arg(long)]
    pub allow_create_time: bool,
    /// Keep a snapshot of every owned partition's state here, shared by all pods: a bucket
    /// URL (`s3://bucket/prefix`, `gs://…`, `az://…`; credentials and endpoint from the
    /// environment, e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT_URL) or a directory (a ReadWriteMany volume). A partition assigned to a
    /// pod that holds no newer state for it (a new pod, a moved partition, a wiped volume) is
    /// restored from its newest snapshot and replays only the log after it. Off when not
    /// given (docs/operations.md, "Snapshots").
    #[arg(long, env = "TIDEMARK_SNAPSHOT_DIR")]
    pub snapshot_dir: Option<String>,
    /// How often each owned partition that moved is exported (humantime, e.g. `5m`); a
    /// final round follows the last commit on SIGTERM. Each round rewrites a moved
    /// partition's whole state.
    #[arg(long, env = "TIDEMARK_SNAPSHOT_INTERVAL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub snapshot_interval: std::time::Duration,
    /// Snapshots kept per partition (the newest ones).
    #[arg(long, env = "TIDEMARK_SNAPSHOT_KEEP", default_value_t = 2)]
    pub snapshot_keep: usize,
    /// Standby tasks: warm copies of input partitions this process does not own, kept by
    /// replaying the log without side effects (no outputs, no actions), so a partition the
    /// group moves to a process with a copy (a pod gone, a scale-down) starts from a
    /// checkpoint one commit behind instead of a snapshot import and its replay. A number
    /// `N`: each partition has N copies on members other than its owner, placed by
    /// rendezvous hashing of the members' --instance-id (needs --instance-id); `all`: a copy
    /// of every partition on every process (each then processes the whole log); `none` or
    /// `0` (default): off. Group-managed assignment only (not with --replicas).
    #[arg(long, env = "TIDEMARK_STANDBYS", default_value = "none", value_parser = crate::standby::Copies::parse)]
    pub standbys: crate::standby::Copies,
    /// With --standbys: how long a starting process waits for its standby tasks to
    /// catch up with the log before it joins the group (KIP-441's warm-up), so partitions a
    /// scale-up moves to it arrive warm. Past it, it joins anyway.
    #[arg(long, env = "TIDEMARK_WARMUP_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub warmup_timeout: std::time::Duration,
    /// The local state of a partition this process neither owns nor shadows (it moved away)
    /// is deleted after this long (humantime, at least 1m); one that comes back sooner keeps
    /// its state. `off` keeps it forever.
    #[arg(long, env = "TIDEMARK_DROP_MOVED_AFTER", default_value = "10m", value_parser = crate::tasks::moved_away::parse_grace)]
    pub drop_moved_after: crate::tasks::moved_away::Grace,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Order-topic records to generate.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Wall-clock production rate (events/s); the generator is paced open-loop.
    #[arg(long, default_value_t = 20_000.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Where the demo keeps its RocksDB state (deleted first).
    #[arg(long, default_value = "./.tidemark/demo-state")]
    pub state_dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct GenArgs {
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Order-topic records (including duplicates and malformed ones).
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Simulated events per second (spacing of event times).
    #[arg(long, default_value_t = 20_000.0)]
    pub rate: f64,
    /// Simulated start time (RFC 3339) or `now`.
    #[arg(long, default_value = "2026-11-28T00:00:00Z")]
    pub start: String,
    /// Spike profile `AT_S:DURATION_S:FACTOR`, e.g. `60:30:10`.
    #[arg(long, value_parser = spike)]
    pub spike: Option<Spike>,
    #[arg(long, default_value_t = 0.02)]
    pub late_fraction: f64,
    /// Maximum lateness (humantime), e.g. `6h`.
    #[arg(long, default_value = "6h", value_parser = humantime::parse_duration)]
    pub max_lateness: Duration,
    #[arg(long, default_value_t = 0.01)]
    pub dup_fraction: f64,
    #[arg(long, default_value_t = 0.001)]
    pub malformed_fraction: f64,
    #[arg(long, default_value_t = 0.5)]
    pub v2_fraction: f64,
    #[arg(long, default_value_t = 2000)]
    pub skus: u32,
    #[arg(long, default_value_t = 12)]
    pub stores: u32,
    #[arg(long, default_value_t = 50_000)]
    pub open_orders: u32,
    /// One inventory snapshot every N order events (0 = none).
    #[arg(long, default_value_t = 1000)]
    pub inventory_every: u64,
    /// Pad events to about this many bytes (0 = no padding).
    #[arg(long, default_value_t = 1024)]
    pub event_bytes: usize,
    /// Write records to this file instead of Kafka: JSON lines `{"topic":…,"key":…,"value":…}`,
    /// the value as a JSON string (docs/formats.md, "tidemark gen").
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Orders topic (the `topic` field with --out).
    #[arg(long, default_value = "orders")]
    pub orders_topic: String,
    /// Inventory topic (the `topic` field with --out).
    #[arg(long, default_value = "inventory")]
    pub inventory_topic: String,
    /// Pace production in wall-clock time at the simulated rate (open loop) instead of as
    /// fast as possible.
    #[arg(long)]
    pub paced: bool,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

#[derive(Args, Debug)]
pub struct TopicsArgs {
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    #[arg(long, default_value_t = 1)]
    pub replication: i32,
}

#[derive(Subcommand, Debug)]
pub enum QueryCommand {
    /// Exact dashboard totals per window, store and currency, read from the dashboard topic.
    Dashboard(QueryDashboardArgs),
}

#[derive(Args, Debug)]
pub struct QueryDashboardArgs {
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Only this store.
    #[arg(long)]
    pub store: Option<String>,
    /// Only windows starting at or after this instant (RFC 3339).
    #[arg(long)]
    pub from: Option<String>,
    /// Only windows starting before this instant (RFC 3339).
    #[arg(long)]
    pub to: Option<String>,
    /// `table` (human) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// Print per-partition partials instead of combined totals.
    #[arg(long)]
    pub partials: bool,
}

#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Close a business day: read a frozen offset range of the orders log, compute the
    /// finance rows, stage and validate them, then publish one manifest record.
    Close(BatchCloseArgs),
    /// Adjust a closed day with the events appended after its close (or last adjustment).
    Adjust(BatchAdjustArgs),
    /// Print the published close of a day, its adjustments and the adjusted totals.
    Show(BatchShowArgs),
    /// Shadow replay: compare the stream's dashboard with the published close of a day, key
    /// by key, and give every difference its reason; fails on an unexplained one.
    Shadow(BatchShadowArgs),
}

/// The day and the topology every batch command works on.
#[derive(Args, Debug, Clone)]
pub struct BatchDayArgs {
    /// The topology file: topics, finance time zone, dedup retention.
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// The business day, `YYYY-MM-DD` in the topology's `finance.time_zone`, or `today` /
    /// `yesterday` in that zone (for schedulers).
    #[arg(long)]
    pub business_day: String,
}

#[derive(Args, Debug)]
pub struct BatchCloseArgs {
    #[command(flatten)]
    pub day: BatchDayArgs,
    /// Take records appended before this instant (RFC 3339). Default: end of the business
    /// day plus `--grace`.
    #[arg(long, conflicts_with = "to")]
    pub cutoff: Option<String>,
    /// Explicit end offsets (exclusive) of every partition, `p:offset,p:offset,...`.
    #[arg(long)]
    pub to: Option<String>,
    /// Explicit start offsets of every partition, `p:offset,...`. Default: the first record
    /// appended at or after the day's start minus 1 h (the future-skew limit) minus 1 h.
    #[arg(long)]
    pub from: Option<String>,
    /// How long after the end of the day the default cutoff lies: covers the late tail.
    #[arg(long, default_value = "7h", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Publish a close without rows (a day without sales) instead of failing validation.
    #[arg(long)]
    pub allow_empty: bool,
}

#[derive(Args, Debug)]
pub struct BatchAdjustArgs {
    #[command(flatten)]
    pub day: BatchDayArgs,
    /// Take records appended before this instant (RFC 3339). Default: now.
    #[arg(long, conflicts_with = "to")]
    pub cutoff: Option<String>,
    /// Explicit end offsets (exclusive) of every partition, `p:offset,p:offset,...`.
    #[arg(long)]
    pub to: Option<String>,
}

#[derive(Args, Debug)]
pub struct BatchShowArgs {
    #[command(flatten)]
    pub day: BatchDayArgs,
    /// `table` (human), `json` (one document: close, adjustments, adjusted totals) or `rows`
    /// (the close's row values as published, one per line: their SHA-256 is the checksum).
    #[arg(long, value_enum, default_value_t = ShowFormat::Table)]
    pub format: ShowFormat,
}

#[derive(Args, Debug)]
pub struct BatchShadowArgs {
    #[command(flatten)]
    pub day: BatchDayArgs,
    /// `table` (human) or `json` (one document).
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// A feature switch (`on` / `off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// `--format` of `query` and `batch shadow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned text for people.
    Table,
    /// JSON.
    Json,
}

/// `--format` of `batch show`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShowFormat {
    /// Aligned text for people.
    Table,
    /// One document: close, adjustments, adjusted totals.
    Json,
    /// The close's row values as published, one per line.
    Rows,
}

/// A spike profile `AT_S:DURATION_S:FACTOR`, e.g. `60:30:10`.
fn spike(text: &str) -> Result<Spike, String> {
    let parts: Result<Vec<f64>, _> = text.split(':').map(str::parse).collect();
    match parts.as_deref() {
        Ok(&[at_s, duration_s, factor]) => Ok(Spike { at_s, duration_s, factor }),
        _ => Err("expected three numbers AT_S:DURATION_S:FACTOR, e.g. 60:30:10".into()),
    }
}

/// A humantime duration above zero, e.g. `2m`.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be positive".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (expected a duration like 2m)")),
    }
}

#[derive(Subcommand, Debug)]
pub enum ActionsCommand {
    /// List the outbox rows of a state directory. Opens it read-only, so it works beside the
    /// running processor (e.g. through `kubectl exec`), and shows what was durable then.
    List(ActionsListArgs),
    /// Mark failed (dead-lettered) actions pending again, audited with event `resend`; the
    /// next `tidemark run` on this state directory sends them with the same key and payload.
    /// Needs the processor stopped: it refuses while another process holds the store.
    Resend(ActionsResendArgs),
}

/// Which outbox rows `tidemark actions list` shows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionStateFilter {
    /// Pending and failed: what has not reached the endpoint.
    Open,
    /// Committed, not yet at a final state (being sent, or waiting for the next run).
    Pending,
    /// Refused with a permanent 4xx and dead-lettered.
    Failed,
    /// Recorded and audited, never sent (rules in `shadow` mode).
    Shadow,
    /// Answered 2xx.
    Delivered,
    /// Answered 409: the endpoint already had it.
    Conflict,
    All,
}

/// How a listing is printed.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFormat {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line, with the payload.
    Json,
}

#[derive(Args, Debug)]
pub struct ActionsListArgs {
    /// The RocksDB state directory of a `tidemark run`.
    #[arg(long, env = "TIDEMARK_STATE_DIR", default_value = "./state")]
    pub state_dir: PathBuf,
    /// Only rows in this state.
    #[arg(long, value_enum, default_value_t = ActionStateFilter::Open)]
    pub state: ActionStateFilter,
    /// Only actions of this rule id.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only actions for this SKU.
    #[arg(long)]
    pub sku: Option<String>,
    #[arg(long, value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Args, Debug)]
pub struct ActionsResendArgs {
    /// The topology file the processor runs (audit topic, store owner).
    #[arg(long, env = "TIDEMARK_TOPOLOGY")]
    pub topology: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// The processor's consumer group id (the state directory belongs to topology and group).
    #[arg(long, env = "TIDEMARK_GROUP", default_value = "tidemark")]
    pub group: String,
    /// The RocksDB state directory of the stopped processor.
    #[arg(long, env = "TIDEMARK_STATE_DIR", default_value = "./state")]
    pub state_dir: PathBuf,
    /// An action key to re-send (repeatable). Every key must name a failed row, or nothing
    /// is changed.
    #[arg(long = "key", value_name = "KEY", required_unless_present = "all_failed", conflicts_with = "all_failed")]
    pub keys: Vec<String>,
    /// Re-send every failed row of the state directory.
    #[arg(long)]
    pub all_failed: bool,
    /// Why, recorded in the audit record of every re-sent action.
    #[arg(long)]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tidemark").chain(args.iter().copied()))
    }

    #[test]
    fn malformed_formats_and_durations_are_refused_by_clap_before_any_command_runs() {
        let day = ["--topology", "t.toml", "--business-day", "2026-11-28"];
        let close = |grace: &str| parse(&[&["batch", "close"], &day[..], &["--grace", grace]].concat());
        assert_eq!(close("soon").err().map(|e| e.kind()), Some(ErrorKind::ValueValidation));
        assert!(close("90m").is_ok());
        let shadow = |format: &str| parse(&[&["batch", "shadow"], &day[..], &["--format", format]].concat());
        assert_eq!(shadow("yaml").err().map(|e| e.kind()), Some(ErrorKind::InvalidValue));
        assert!(shadow("json").is_ok());
        let every = |every: &str| parse(&["microbatch", "--topology", "t.toml", "--every", every]);
        assert_eq!(every("0s").err().map(|e| e.kind()), Some(ErrorKind::ValueValidation));
        assert!(every("30s").is_ok());
        let gen = |flag: &str, value: &str| parse(&["gen", flag, value]);
        assert_eq!(gen("--max-lateness", "late").err().map(|e| e.kind()), Some(ErrorKind::ValueValidation));
        assert!(gen("--max-lateness", "90m").is_ok());
        for malformed in ["60:30", "60:x:10", "60:30:10:1"] {
            assert_eq!(
                gen("--spike", malformed).err().map(|e| e.kind()),
                Some(ErrorKind::ValueValidation),
                "{malformed}"
            );
        }
        assert!(gen("--spike", "60:30:10").is_ok());
    }
}
