//! `tidemark run`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tidemark_topology::config;
use tracing::info;

use crate::cli::RunArgs;
use crate::engine::Stats;
use crate::kafka::{admin, KafkaSettings};
use crate::telemetry::{self, Progress};
use crate::{actions, signal, snapshot, standby, status, stream};

/// `--admin-addr` (default `127.0.0.1:9091`, `off`) and `--admin-token-file`.
fn admin_config(args: &RunArgs) -> anyhow::Result<Option<telemetry::admin::Config>> {
    let (addr, explicit) = match args.admin_addr.as_deref().map(str::trim) {
        Some("off") => return Ok(None),
        Some(a) => (a.parse().with_context(|| format!("--admin-addr {a}: expected host:port or off"))?, true),
        None => (std::net::SocketAddr::from(([127, 0, 0, 1], 9091)), false),
    };
    Ok(Some(telemetry::admin::Config {
        addr,
        explicit,
        token_file: args.admin_token_file.clone(),
        state_dir: Some(args.state_dir.clone()),
    }))
}

/// `--snapshot-dir` (a directory, created, or a bucket URL) and its companions.
fn snapshot_config(
    dir: &Option<String>,
    interval: Duration,
    keep: usize,
    opts: &stream::StreamOptions,
) -> anyhow::Result<Option<snapshot::SnapshotConfig>> {
    let Some(dir) = dir else { return Ok(None) };
    anyhow::ensure!(interval >= Duration::from_secs(1), "--snapshot-interval must be at least 1s");
    anyhow::ensure!(keep >= 1, "--snapshot-keep must be at least 1");
    let cfg = snapshot::SnapshotConfig {
        bucket: Arc::new(snapshot::Bucket::open(dir)?),
        interval,
        keep,
        topology: opts.topology.name.clone(),
        group: opts.group_id.clone(),
        topics: crate::tasks::Sources::of(&opts.topology),
    };
    info!(dir = %dir, interval = ?interval, keep, "snapshots on");
    Ok(Some(cfg))
}

/// With standbys: a partition whose local copy is at most this many records behind the
/// snapshot its last owner handed over replays them rather than importing the snapshot
/// (about 0.1 s of replay against the import of the whole partition).
const STANDBY_REPLAY_WITHIN: i64 = 5_000;

pub fn run(args: RunArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let topology = config::load(&args.topology)?;
    let settings = KafkaSettings::from_args(&args.kafka)?;
    let static_assignment = match args.replicas {
        None => None,
        Some(replicas) => {
            let ordinal = match args.ordinal {
                Some(o) => o,
                None => args
                    .instance_id
                    .as_deref()
                    .and_then(|id| id.rsplit('-').next())
                    .and_then(|n| n.parse().ok())
                    .context(
                    "--replicas needs --ordinal, or an --instance-id ending in -<ordinal> (a StatefulSet pod name)",
                )?,
            };
            anyhow::ensure!(
                replicas > 0 && (0..replicas).contains(&ordinal),
                "--ordinal {ordinal} is not in 0..{replicas}"
            );
            Some((ordinal, replicas))
        }
    };
    // The store opens (after a crash: replays its write-ahead log) while the broker is
    // checked and the endpoints start: all three are on the way to the first action after a
    // restart (issue 33). Both results are taken before anything reads the input or the
    // store; an error stops the process there.
    // Claimed below, once the broker check passed: a refused start claims nothing.
    let store_options = tidemark_state::StoreOptions {
        claim_later: true,
        dedup_runs_max_entries: args.state_dedup_runs_max,
        ..stream::store_options(&topology, &args.group, args.state_memtable_mb.saturating_mul(1 << 20))
    };
    let owner = store_options.owner.clone();
    let opening = {
        let (dir, o) = (args.state_dir.clone(), store_options);
        std::thread::Builder::new()
            .name("tidemark-open".into())
            .spawn(move || {
                let started = Instant::now();
                stream::open_store_at(&dir, o).map(|store| (store, started.elapsed()))
            })
            .context("starting the thread that opens the store")?
    };
    if args.create_topics {
        let created = rt.block_on(admin::ensure_topics(&settings, &topology, args.replication))?;
        if !created.is_empty() {
            info!(topics = ?created, "created topics");
        }
    }
    let checking = {
        let (s, allow) = (settings.clone(), args.allow_create_time);
        let inputs = [topology.orders.topic.clone(), topology.inventory.topic.clone()];
        rt.spawn(async move {
            let started = Instant::now();
            admin::check_log_append_time(&s, &[&inputs[0], &inputs[1]], allow).await.map(|()| started.elapsed())
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal::install_handler(rt, Arc::clone(&stop));
    let stats = Arc::new(Stats::default());
    let printer = (args.status_every > 0)
        .then(|| status::spawn_printer(Arc::clone(&stats), Arc::clone(&stop), Duration::from_secs(args.status_every)));
    let progress = Arc::new(Progress::default().with_ready_bound(Some(args.ready_max_lag_seconds as f64)));
    let admin = admin_config(&args)?;
    if admin.is_some() && args.http_addr.is_some() {
        telemetry::admin::restore_pause(&args.state_dir, &progress);
    }
    let prober = telemetry::serve(
        rt,
        telemetry::Surface {
            addr: args.http_addr,
            settings: &settings,
            topics: crate::tasks::Sources::of(&topology).by_source(),
            stats: &stats,
            progress: &progress,
            stop: &stop,
            probe_every_s: args.backlog_probe_every,
            admin,
        },
    )?;
    crate::build_info::register_metric();
    tracing::info!(version = crate::build_info::LONG_VERSION, "tidemark starting");
    let mut opts = stream::StreamOptions {
        settings,
        topology,
        state_dir: args.state_dir,
        group_id: args.group,
        instance_id: args.instance_id,
        stop: Arc::clone(&stop),
        stats: Arc::clone(&stats),
        exit_at_end: args.exit_at_end.then(|| Arc::new(AtomicBool::new(true))),
        drain_timeout: args.drain_timeout,
        accept_gaps: args.accept_gaps,
        progress,
        rows: None,
        store: None,
        sku_owned: Default::default(),
        static_assignment,
        snapshots: None,
        handover: None,
        gate: None,
        session_timeout: args.session_timeout,
        standbys: None,
        warmup_timeout: args.warmup_timeout,
        recall: None,
        lifecycle: Arc::default(),
        memtable_budget_bytes: args.state_memtable_mb.saturating_mul(1 << 20),
        threads: args.threads.map_or_else(stream::default_threads, usize::from),
        repartition_packing: args.repartition_packing == crate::cli::Switch::On,
    };
    let waited = Instant::now();
    let checked = rt.block_on(checking).context("checking the input topics")??;
    tracing::info!(
        took_ms = checked.as_millis() as u64,
        waited_ms = waited.elapsed().as_millis() as u64,
        "input topics checked (LogAppendTime)"
    );
    let waited = Instant::now();
    let (store, took) = opening.join().map_err(|_| anyhow::anyhow!("the thread opening the store panicked"))??;
    store.claim(&owner)?;
    opts.progress.store_opened();
    tracing::info!(
        took_ms = took.as_millis() as u64,
        waited_ms = waited.elapsed().as_millis() as u64,
        "state store opened"
    );
    let disk = telemetry::disk::spawn(opts.state_dir.clone(), Arc::clone(&store), Arc::clone(&stop));
    let actions = actions::spawn(
        rt,
        &opts.settings,
        &opts.topology,
        Arc::clone(&store),
        Arc::clone(&stop),
        Arc::clone(&opts.stats),
    )?;
    opts.rows = Some(actions.rows);
    let still_owned = Arc::clone(&actions.owned);
    opts.sku_owned = actions.owned;
    opts.gate = Some(Arc::clone(&actions.gate));
    opts.recall = Some(Arc::new(actions::Recall::new(
        opts.settings.clone(),
        opts.topology.audit.topic.clone(),
        Arc::clone(&actions.settled),
        Arc::clone(&stop),
    )));
    let snapshots = snapshot_config(&args.snapshot_dir, args.snapshot_interval, args.snapshot_keep, &opts)?;
    let copies = args.standbys;
    let standbys_on = copies.is_on();
    let taker = match &snapshots {
        Some(cfg) => {
            let replay_within = if standbys_on { STANDBY_REPLAY_WITHIN } else { 0 };
            opts.snapshots = Some(Arc::new(snapshot::Restorer::new(cfg).replaying_within(replay_within)));
            let taken_by = opts.instance_id.clone().unwrap_or_else(|| format!("pid-{}", std::process::id()));
            // With a copy everywhere the next owner has a warm one (it joined only once warm),
            // so a revocation is not exported: a move then costs a commit, not an export. With
            // a count of copies the group's assignor does not know where they are.
            if copies != standby::Copies::All {
                opts.handover = Some(snapshot::Handover::new(cfg, taken_by.clone()));
            }
            let taker = snapshot::Taker::new(cfg.clone(), Arc::clone(&store), Arc::clone(&opts.progress), taken_by);
            Some(snapshot::taker::spawn(taker, Arc::clone(&stop))?)
        }
        None => None,
    };
    let standby_thread = if standbys_on {
        anyhow::ensure!(
            opts.static_assignment.is_none(),
            "--standbys {copies} needs group-managed assignment: drop --replicas (standby tasks follow the group's moves)"
        );
        let me = match (copies, &opts.instance_id) {
            (standby::Copies::Count(_), None) => anyhow::bail!(
                "--standbys {copies} needs --instance-id: the copies are placed by the members' stable names"
            ),
            (_, id) => id.clone().unwrap_or_default(),
        };
        if matches!(copies, standby::Copies::Count(_)) && snapshots.is_none() {
            tracing::warn!(
                "--standbys {copies} without --snapshot-dir: a partition the group moves to a pod without a copy \
                 replays its log from the start"
            );
        }
        let rows = Arc::new(actions::StandbyRows::new(Arc::clone(&store), Arc::clone(&actions.settled)));
        let tail = standby::audit_tail::AuditTail::new(
            opts.settings.clone(),
            opts.topology.audit.topic.clone(),
            Arc::clone(&rows),
        );
        let (standbys, requests) = standby::Standbys::new(rows, tail);
        // The standby thread imports whatever snapshot is ahead (no replay allowance).
        let restorer = snapshots.as_ref().map(|cfg| Arc::new(snapshot::Restorer::new(cfg)));
        let cfg = standby::runner::StandbyConfig {
            settings: opts.settings.clone(),
            group_id: opts.group_id.clone(),
            topology: opts.topology.clone(),
            store: Arc::clone(&store),
            standbys: Arc::clone(&standbys),
            restorer,
            stop: Arc::clone(&stop),
            lifecycle: Arc::clone(&opts.lifecycle),
            copies,
            me,
        };
        opts.standbys = Some(standbys);
        match copies {
            standby::Copies::Count(n) => {
                info!(copies = n, "standby tasks on: each partition kept warm on {n} members other than its owner")
            }
            _ => info!("standby tasks on: every partition this process does not own is kept warm"),
        }
        Some(standby::runner::spawn(cfg, requests)?)
    } else {
        None
    };
    let janitor = match args.drop_moved_after.0 {
        Some(grace) => {
            let janitor = crate::tasks::moved_away::Janitor::new(
                Arc::clone(&store),
                Arc::clone(&opts.lifecycle),
                opts.standbys.clone(),
                grace,
            );
            Some(crate::tasks::moved_away::spawn(janitor, Arc::clone(&stop))?)
        }
        None => None,
    };
    opts.store = Some(store);
    let started = Instant::now();
    let endpoint_timeout = Duration::from_millis(u64::try_from(opts.topology.endpoints.timeout_ms).unwrap_or(5_000));
    let result = stream::run(opts);
    stop.store(true, Ordering::Relaxed);
    // A clean stop, as a hand-over: no new attempt starts, and those under way store their
    // outcome before the process goes, so a restart sends none of them again.
    let left: Vec<i32> = still_owned.lock().map(|o| o.iter().copied().collect()).unwrap_or_default();
    let busy = actions.gate.release(&left, endpoint_timeout + Duration::from_secs(2));
    if !busy.is_empty() {
        tracing::warn!(partitions = ?busy, "actions still under way at shutdown; the next start may send them again");
    }
    if let Some(t) = standby_thread {
        let _ = t.join();
    }
    if let Some(t) = janitor {
        let _ = t.join();
    }
    if let Some(t) = taker {
        // After the stream's final commit: a pod leaving on SIGTERM hands over current state.
        t.finish();
    }
    if let Some(p) = prober {
        let _ = p.join();
    }
    if let Some(p) = printer {
        let _ = p.join();
    }
    let _ = disk.join();
    // A summary of nothing before an error (a stream that never started) only hides the error.
    if result.is_ok() || Stats::get(&stats.records) > 0 {
        eprintln!("tidemark: {}", status::summary(&stats, started.elapsed()));
    }
    result
}
