//! Fault scenarios. Each one: fresh input topics, a seeded history produced (paced) while
//! the faulty "pods" run and faults land, then a clean reference run over the same final log,
//! then the checker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tidemark::dispatch::testkit::{Behaviour, TestServer};
use tidemark::kafka::KafkaSettings;
use tidemark::testkit::s3;

use crate::broker::Broker;
use crate::checker::{self, ProcessEnd, ScenarioReport};
use crate::history;
use crate::placement::{self, PodView};
use crate::pod::{input_lag, metric_sum, Pod};
use crate::takeover::{self, Takeover, WARM_LOG};

/// Every failpoint compiled into the binary (src/failpoint.rs).
pub const FAILPOINTS: [&str; 5] = [
    "commit.before_outputs_flushed",
    "commit.after_outputs_before_state",
    "commit.after_state_before_group",
    "restore.mid",
    "dispatch.after_ack_before_mark",
];

/// Every failpoint of `tidemark microbatch`.
pub const MICROBATCH_FAILPOINTS: [&str; 3] =
    ["microbatch.after_plan", "microbatch.before_flush", "microbatch.after_commit"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a random pod at random moments, restart it after a random pause.
    RandomKills(u32),
    /// Restart a pod with each failpoint armed at a random hit, one after another.
    Failpoints,
    /// The endpoint answers 503, then stalls past the timeout, then resets connections.
    EndpointChaos,
    /// kill -9 the broker mid-run and restart it.
    BrokerRestart,
    /// kill -9 the broker mid-run and keep it down this long (SPEC §6: 10 minutes). Every pod
    /// must stay up and live, and say it is not ready, then catch up once it is back.
    BrokerOutage(Duration),
    /// SIGTERM and restart, several times; each exit must be clean and in time.
    SigtermCycles(u32),
    /// Append the whole log a second time.
    AppendTwice,
    /// Delete a pod's state directory while it is down; it must rebuild correctly.
    WipeState,
    /// Scale the group to this many pods: new pods join, or the newest leave on SIGTERM
    /// (group-managed scenarios).
    ScaleTo(usize),
    /// SIGKILL a pod that never comes back: its partitions move to the others.
    GoneForGood,
    /// SIGKILL a group-managed pod mid-run and delete its state directory; it stays down until
    /// the others own its partitions, then starts empty and must rejoin.
    VolumeLost,
    /// Partitions go A → B → A (group-managed, two pods): A leaves on SIGTERM and B takes
    /// everything, B delivers for a moment and is SIGKILLed (often before its next snapshot
    /// round), A comes back and takes everything at its own older checkpoint, then B rejoins.
    /// What B delivered must not be sent again by A.
    BackAndForth,
    /// The endpoint answers 200 this late from now on (within the client's timeout): the
    /// attempts of the faults that follow are under way when partitions move.
    SlowAnswers(Duration),
    /// The broker refuses the dashboard (main) and dead-letter (side) topics' records for
    /// this long (their `max.message.bytes` below any record), then takes them again. Every
    /// pod must stay up and live, say it is not ready, and lose nothing.
    OutputsRefused(Duration),
    /// A graceful move both ways (group-managed, two pods): A leaves on SIGTERM and B takes
    /// everything, then A starts again and takes its share back from B.
    HandOverAndBack,
    /// Not a fault, a check before the faults that follow (`--standbys N`): every owned
    /// partition has this many warm copies, each on another pod, within a minute.
    CopiesPlaced(usize),
    /// The object store ([`Snapshots::ObjectStore`]) is down this long while input is
    /// produced: every pod stays up and live, keeps processing, counts the failures
    /// (`tidemark_snapshot_failures_total`), and uploads again once it is back.
    ObjectStoreDown(Duration),
    /// Not a fault, a check after moves (scale cycles, `--drop-moved-after` = this grace):
    /// within the grace and two janitor looks, no pod holds the state of a partition it
    /// neither owns nor shadows (`tidemark_state_partition_local`).
    MovedAwayDropped(Duration),
}

/// Where the pods of a group-managed scenario keep snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Snapshots {
    #[default]
    Off,
    /// A directory shared by the pods (`--snapshot-dir DIR`).
    Directory,
    /// A real S3-compatible store started for the run (versitygw, `s3://` URL, credentials
    /// in the environment as in a pod).
    ObjectStore,
}

#[derive(Clone, Debug, Default)]
pub struct Scenario {
    pub name: &'static str,
    pub pods: usize,
    /// The faulty pods run `tidemark microbatch` (the reference is still the stream): its
    /// dashboard and finance rows must equal the stream's; it sends no actions.
    pub microbatch: bool,
    /// Group-managed assignment (cooperative-sticky, static membership) instead of
    /// `--replicas`: partitions move between pods.
    pub group: bool,
    /// Snapshots shared by the pods: moved or lost partitions restore from them.
    pub snapshots: Snapshots,
    /// `--standbys` (group-managed). With `all` every pod keeps a standby task for each
    /// partition it does not own, and the scenario fails unless a surviving pod took
    /// partitions from its standby tasks after a kill, so a silent fallback to a snapshot
    /// import cannot pass. With a count N, N pods hold each partition's copy and the group
    /// hands a dead pod's partition to one of them only by chance: a surviving pod must have
    /// resumed some partition from a copy or a snapshot, and [`Fault::CopiesPlaced`] checks
    /// the placement.
    pub standbys: Option<&'static str>,
    /// More arguments for the faulty pods' `tidemark run`.
    pub args: &'static [&'static str],
    /// The faulty pods fence idle partitions (`internal.idle_promise = "fence"`), the
    /// reference keeps the clock promise: both read the same inputs, fences included.
    pub fences: bool,
    pub faults: Vec<Fault>,
    pub events: u64,
}

pub struct Env {
    pub bin: PathBuf,
    pub broker: Broker,
    pub dir: PathBuf,
    pub rt: tokio::runtime::Runtime,
}

pub fn short_profile() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "random-sigkills",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::RandomKills(3)],
            events: 6000,
        },
        Scenario {
            name: "random-sigkills-with-fences",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: true,
            args: &[],
            pods: 2,
            faults: vec![Fault::RandomKills(3)],
            events: 6000,
        },
        Scenario {
            name: "every-failpoint",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::Failpoints],
            events: 6000,
        },
        Scenario {
            name: "endpoint-chaos-and-log-replayed",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::EndpointChaos, Fault::AppendTwice],
            events: 6000,
        },
        Scenario {
            name: "broker-kill-and-sigterm-cycles",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::BrokerRestart, Fault::SigtermCycles(2)],
            events: 6000,
        },
        Scenario {
            name: "outputs-refused-by-the-broker",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::OutputsRefused(Duration::from_secs(20))],
            events: 24_000,
        },
        Scenario {
            name: "state-directory-wiped",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::WipeState],
            events: 4000,
        },
        Scenario {
            name: "scale-up-and-down",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::ScaleTo(3), Fault::ScaleTo(1)],
            events: 6000,
        },
        Scenario {
            name: "pod-gone-for-good",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::GoneForGood],
            events: 6000,
        },
        Scenario {
            name: "volume-wiped-with-snapshots",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::WipeState],
            events: 6000,
        },
        Scenario {
            name: "volume-wiped-with-standby",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: Some("all"),
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::VolumeLost],
            // 16 s of input: the kill lands while it is still produced, after a cold start's
            // warm-up (up to 8 s on a new group) and the join.
            events: 24_000,
        },
        Scenario {
            name: "pod-gone-for-good-with-standby",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: Some("all"),
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::GoneForGood],
            // 16 s of input: the kill lands while it is still produced, after a cold start's
            // warm-up (up to 8 s on a new group) and the join.
            events: 24_000,
        },
        Scenario {
            // Issue 39's operator trial: 2 → 3 pods, then two of them gone for good; snapshots
            // and no standbys. It re-sent 65 of 140 completed actions before the fix.
            name: "three-pods-two-gone-for-good",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::ScaleTo(3), Fault::GoneForGood, Fault::GoneForGood],
            events: 48_000,
        },
        Scenario {
            name: "partition-moves-back-and-forth",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::BackAndForth],
            // 24 s of input: B still receives input after A has left.
            events: 36_000,
        },
        Scenario {
            name: "slow-endpoint-during-a-hand-over",
            microbatch: false,
            group: true,
            snapshots: Snapshots::Directory,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            // 300 ms answers against a 500 ms client timeout: every hand-over finds attempts
            // under way and attempts waiting for an HTTP place. No pod crashes here, so no
            // key may be POSTed again at all.
            faults: vec![Fault::SlowAnswers(Duration::from_millis(300)), Fault::HandOverAndBack],
            events: 24_000,
        },
        Scenario {
            // Issue 35: three pods with one warm copy per partition (placed by rendezvous
            // over the members), snapshots in a real S3-compatible store, one pod gone for
            // good while input is produced.
            name: "one-standby-on-three-pods-one-gone-for-good",
            group: true,
            snapshots: Snapshots::ObjectStore,
            standbys: Some("1"),
            pods: 3,
            faults: vec![Fault::CopiesPlaced(1), Fault::GoneForGood],
            events: 24_000,
            ..Scenario::default()
        },
        Scenario {
            // Issue 35: the object store down for 12 s mid-run, then a pod gone for good: its
            // partitions restore from the snapshots uploaded after the outage.
            name: "object-store-down-mid-run",
            group: true,
            snapshots: Snapshots::ObjectStore,
            pods: 2,
            faults: vec![Fault::ObjectStoreDown(Duration::from_secs(12)), Fault::GoneForGood],
            // 24 s of input: it is still produced through the outage.
            events: 36_000,
            ..Scenario::default()
        },
        Scenario {
            // Issue 35: five scale cycles 2 → 3 → 2 without standbys; then each pod's disk
            // holds only the partitions it owns (--drop-moved-after at its minimum, 60 s).
            name: "five-scale-cycles-leave-only-owned-state",
            group: true,
            snapshots: Snapshots::Directory,
            args: &["--drop-moved-after", "60s"],
            pods: 2,
            faults: [[Fault::ScaleTo(3), Fault::ScaleTo(2)]; 5]
                .into_iter()
                .flatten()
                .chain([Fault::MovedAwayDropped(Duration::from_secs(60))])
                .collect(),
            events: 24_000,
            ..Scenario::default()
        },
        Scenario {
            name: "microbatch-kills-and-failpoints",
            microbatch: true,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::RandomKills(3), Fault::Failpoints, Fault::AppendTwice],
            events: 6000,
        },
        // Dedup entries folded into table files every few commits (a budget of 64 entries
        // where the default is 524,288): kills land between a fold's ingest and its runs'
        // deletion, and mid-fold (state/src/runs.rs).
        Scenario {
            name: "random-sigkills-while-folding-dedup-runs",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &["--state-dedup-runs-max", "64"],
            pods: 2,
            faults: vec![Fault::RandomKills(3)],
            events: 6000,
        },
    ]
}

/// SPEC §6's broker outage: 10 minutes down mid-run (not in CI's short profile: it takes ~14
/// minutes; docs/operations.md "When the broker is down" has its last result).
pub fn outage_profile() -> Vec<Scenario> {
    vec![Scenario {
        name: "broker-down-ten-minutes",
        microbatch: false,
        group: true,
        snapshots: Snapshots::Off,
        standbys: None,
        fences: false,
        args: &[],
        pods: 2,
        faults: vec![Fault::BrokerOutage(Duration::from_secs(600))],
        // 16 s of input: the outage lands while it is still produced, after the warm-up.
        events: 24_000,
    }]
}

pub fn soak_profile(round: u64) -> Vec<Scenario> {
    let kills = 5 + u32::try_from(round % 10).unwrap_or(0);
    vec![
        Scenario {
            name: "soak-random-sigkills",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 3,
            faults: vec![Fault::RandomKills(kills)],
            events: 20_000,
        },
        Scenario {
            name: "soak-microbatch",
            microbatch: true,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 1,
            faults: vec![Fault::RandomKills(kills), Fault::Failpoints, Fault::BrokerRestart, Fault::AppendTwice],
            events: 20_000,
        },
        Scenario {
            name: "soak-failpoints",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![Fault::Failpoints, Fault::RandomKills(3)],
            events: 20_000,
        },
        Scenario {
            name: "soak-everything",
            microbatch: false,
            group: false,
            snapshots: Snapshots::Off,
            standbys: None,
            fences: false,
            args: &[],
            pods: 2,
            faults: vec![
                Fault::EndpointChaos,
                Fault::RandomKills(3),
                Fault::BrokerRestart,
                Fault::SigtermCycles(2),
                Fault::AppendTwice,
            ],
            events: 20_000,
        },
    ]
}

fn log(msg: &str) {
    eprintln!("[chaos] {msg}");
}

/// How long every pod must look caught up before a run counts as settled.
const CALM_FOR: Duration = Duration::from_secs(3);

/// Input records a fencing run may have appended and not yet read back at any moment: one
/// fence per input partition of the example topology (4 orders, 4 inventory).
const FENCES_UNDER_WAY: f64 = 8.0;

/// Waits until every pod is caught up (an input lag of at most `lag_allowed`: fences under
/// way), nothing is pending in any outbox, and the endpoint has been quiet for `quiet`.
/// A pod found gone is recorded in `ends` and started again.
fn settle(
    pods: &mut [Pod],
    server: &TestServer,
    (quiet, limit, lag_allowed): (Duration, Duration, f64),
    ends: &mut Ends,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = (usize::MAX, Instant::now());
    let mut calm_since: Option<Instant> = None;
    loop {
        for pod in pods.iter_mut() {
            if !pod.is_running() {
                if let Some(status) = pod.reap() {
                    ends.record(pod, &format!("{} exited by itself ({status})", pod.name), !status.success());
                }
                pod.start(None)?;
            }
        }
        let n = server.request_count();
        if n != last.0 {
            last = (n, Instant::now());
        }
        let pages: Vec<Option<String>> = pods.iter().map(Pod::metrics).collect();
        let calm = pods.iter().zip(&pages).all(|(p, page)| {
            // A micro-batch job has no outbox.
            let no_outbox = if p.microbatch { 0.0 } else { 1.0 };
            page.as_deref().is_some_and(|page| {
                input_lag(page).is_some_and(|lag| lag <= lag_allowed)
                    && metric_sum(page, "tidemark_outbox_pending").unwrap_or(no_outbox) == 0.0
            })
        }) && every_partition_owned(&pages, pods.iter().any(|p| p.microbatch));
        // Calm must hold for a while: a partition assigned a moment ago reports no lag until
        // the consumer's next statistics, and would pass for caught up.
        calm_since = if calm { calm_since.or(Some(Instant::now())) } else { None };
        if calm_since.is_some_and(|t| t.elapsed() >= CALM_FOR) && last.1.elapsed() >= quiet {
            return Ok(());
        }
        if started.elapsed() > limit {
            let tails: Vec<String> = pods
                .iter()
                .zip(&pages)
                .map(|(p, page)| format!("--- {}: {}\n{}", p.name, unsettled(page.as_deref()), p.log_tail(15)))
                .collect();
            anyhow::bail!("did not settle within {limit:?}\n{}", tails.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// What a pod's page says of the settle conditions: input lag, pending outbox rows, owned
/// partitions and the lag series above 0.
fn unsettled(page: Option<&str>) -> String {
    let Some(page) = page else { return "no /metrics answer".into() };
    let lagging: Vec<&str> =
        page.lines().filter(|l| l.starts_with("tidemark_consumer_lag_records{") && !l.ends_with(" 0")).collect();
    format!(
        "input lag {:?}, outbox pending {:?}, owned {:?} of {:?}, lag series above 0: {lagging:?}",
        input_lag(page),
        metric_sum(page, "tidemark_outbox_pending"),
        metric_sum(page, "tidemark_partition_owned"),
        metric_sum(page, "tidemark_input_partitions"),
    )
}

/// Waits until every input partition is owned and every pod owns some: a group has
/// settled its assignment, so a fault that follows moves partitions that are being processed.
fn wait_balanced(pods: &[Pod], limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let pages: Vec<Option<String>> = pods.iter().map(Pod::metrics).collect();
        let each = pages
            .iter()
            .all(|p| p.as_deref().and_then(|p| metric_sum(p, "tidemark_partition_owned")).is_some_and(|n| n > 0.0));
        if each && every_partition_owned(&pages, false) {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < limit, "the group did not give every pod partitions within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Lines containing `needle` in the logs of every pod of `group` (removed pods' included).
fn lines_in_logs(dir: &Path, group: &str, needle: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&format!("{group}-")) && n.ends_with(".log")))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|text| text.lines().filter(|l| l.contains(needle)).count())
        .sum()
}

/// Every input partition is owned by one of the pods: a partition whose owner is gone (and
/// not yet replaced) has no lag series, so "every pod at lag 0" alone would pass without it.
fn every_partition_owned(pages: &[Option<String>], microbatch: bool) -> bool {
    if microbatch {
        return true;
    }
    let Some(total) = pages.iter().flatten().find_map(|p| metric_sum(p, "tidemark_input_partitions")) else {
        return false;
    };
    let owned: f64 = pages.iter().flatten().filter_map(|p| metric_sum(p, "tidemark_partition_owned")).sum();
    owned == total
}

fn actions_of(server: &TestServer) -> BTreeMap<String, Vec<checker::Post>> {
    let mut m: BTreeMap<String, Vec<checker::Post>> = BTreeMap::new();
    for r in server.requests() {
        let acknowledged = matches!(r.answered, Some(s) if (200..300).contains(&s) || s == 409);
        m.entry(r.header("idempotency-key").unwrap_or_default().to_string()).or_default().push(checker::Post {
            body: r.body,
            acknowledged,
            arrived: r.arrived,
        });
    }
    m
}

/// How the pods of a run own partitions.
#[derive(Clone, Debug)]
struct Mode {
    /// `--replicas n` when false; group-managed when true.
    group: bool,
    /// `--snapshot-dir`, with the environment it needs.
    snapshots: Option<(String, Vec<(String, String)>)>,
    standbys: Option<&'static str>,
    args: &'static [&'static str],
}

impl Mode {
    /// One pod, `--replicas 1`, nothing shared: the reference run.
    const ALONE: Mode = Mode { group: false, snapshots: None, standbys: None, args: &[] };
}

fn pods(env: &Env, n: usize, topology: &Path, group: &str, mode: &Mode) -> anyhow::Result<Vec<Pod>> {
    (0..n).map(|i| pod(env, i, n, topology, group, mode)).collect()
}

fn pod(env: &Env, i: usize, n: usize, topology: &Path, group: &str, mode: &Mode) -> anyhow::Result<Pod> {
    let mut pod = Pod::new(&format!("{group}-{i}"), &env.bin, topology, &env.dir, &env.broker.bootstrap(), group)?;
    pod.replicas = (!mode.group).then_some(n);
    if let Some((dir, vars)) = &mode.snapshots {
        pod.snapshots = Some(dir.clone());
        pod.env = vars.clone();
    }
    pod.standbys = mode.standbys.map(str::to_string);
    pod.args = mode.args.iter().map(|a| a.to_string()).collect();
    Ok(pod)
}

pub fn run(env: &Env, sc: &Scenario, seed: u64) -> ScenarioReport {
    let mut report = ScenarioReport { scenario: sc.name.to_string(), seed, ..ScenarioReport::default() };
    if let Err(e) = run_inner(env, sc, seed, &mut report) {
        report.error = Some(format!("{e:#}"));
        report.passed = false;
    }
    report
}

fn run_inner(env: &Env, sc: &Scenario, seed: u64, report: &mut ScenarioReport) -> anyhow::Result<()> {
    let lag_allowed = if sc.fences { FENCES_UNDER_WAY } else { 0.0 };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let bootstrap = env.broker.bootstrap();
    let settings = KafkaSettings::new(&bootstrap);
    let inputs = format!("c{seed}");
    let faulty_server = env.rt.block_on(TestServer::start(Behaviour::Ok))?;
    let reference_server = env.rt.block_on(TestServer::start(Behaviour::Ok))?;
    let url = |s: &TestServer, p: &str| s.url(p).to_string();
    let (faulty_topo, faulty_topics) = history::prepare_run(
        &env.bin,
        &bootstrap,
        &env.dir,
        &inputs,
        &format!("f{seed}"),
        &url(&faulty_server, "/act"),
        &url(&faulty_server, "/notify"),
        sc.fences,
    )?;
    let (reference_topo, reference_topics) = history::prepare_run(
        &env.bin,
        &bootstrap,
        &env.dir,
        &inputs,
        &format!("r{seed}"),
        &url(&reference_server, "/act"),
        &url(&reference_server, "/notify"),
        false,
    )?;

    let faulty_group = format!("f{seed}");
    // `--snapshot-dir` and the environment it needs; an object store is started for the run.
    let (mut gateway, snapshots) = match sc.snapshots {
        Snapshots::Off => (None, None),
        Snapshots::Directory => {
            (None, Some((env.dir.join(format!("{faulty_group}-snapshots")).display().to_string(), Vec::new())))
        }
        Snapshots::ObjectStore => {
            let g = s3::Gateway::start(&env.dir.join(format!("{faulty_group}-s3")))?;
            let snapshots = Some((s3::Gateway::snapshot_dir(&faulty_group), g.env()));
            (Some(g), snapshots)
        }
    };
    let mode = Mode { group: sc.group, snapshots, standbys: sc.standbys, args: sc.args };
    let mut faulty = pods(env, sc.pods, &faulty_topo, &faulty_group, &mode)?;
    // Every faulty process that ends, with what its log had under way: the crashes that may
    // repeat a POST.
    let mut ends = Ends::new();
    for p in faulty.iter_mut() {
        p.microbatch = sc.microbatch;
        p.start(None)?;
    }
    let (bin, b, t, events) = (env.bin.clone(), bootstrap.clone(), faulty_topics.clone(), sc.events);
    let generator = std::thread::spawn(move || history::generate(&bin, &b, &t, seed, events, 1500));
    log(&format!("{}: seed {seed}, {} pod(s), faults {:?}", sc.name, sc.pods, sc.faults));

    let spawn = |i: usize| pod(env, i, sc.pods, &faulty_topo, &faulty_group, &mode);
    let mut survivors = Vec::new();
    for fault in &sc.faults {
        let mut cx = Faults {
            report: &mut *report,
            topics: &faulty_topics,
            survivors: &mut survivors,
            ends: &mut ends,
            gateway: gateway.as_mut(),
        };
        inject(env, *fault, &mut faulty, &spawn, &faulty_server, &mut rng, &generator, &mut cx)?;
    }
    generator.join().map_err(|_| anyhow::anyhow!("generator thread panicked"))??;
    if sc.faults.contains(&Fault::AppendTwice) {
        let n = history::append_again(&bootstrap, &faulty_topics.orders)?;
        history::append_again(&bootstrap, &faulty_topics.inventory)?;
        report.faults.push(format!("appended the whole log again ({n} order records)"));
    }
    faulty_server.set_behaviour(Behaviour::Ok);
    settle(&mut faulty, &faulty_server, (Duration::from_secs(5), Duration::from_secs(180), lag_allowed), &mut ends)?;
    if sc.faults.contains(&Fault::WipeState) {
        // Rebuilt from the log (or imported from snapshots), the pod re-derives every action:
        // those completed must be recalled, not sent again. Only what the kill caught under
        // way may go again, as after any crash.
        let pod = &mut faulty[0];
        if pod.sigkill()? {
            ends.record(pod, &format!("SIGKILL {} (its state directory then deleted)", pod.name), true);
        }
        pod.wipe_state()?;
        report.kills += 1;
        report.faults.push(format!("{}: state directory deleted while down", pod.name));
        pod.start(None)?;
        settle(
            &mut faulty,
            &faulty_server,
            (Duration::from_secs(5), Duration::from_secs(180), lag_allowed),
            &mut ends,
        )?;
    }
    for p in faulty.iter_mut() {
        let clean = p.sigterm(Duration::from_secs(30))?;
        ends.stopped(p, "final SIGTERM", clean);
        if !clean {
            report.faults.push(format!("{}: final SIGTERM did not end cleanly", p.name));
        }
    }
    // The task lifecycle (src/tasks/lifecycle.rs) refused nothing: every partition went
    // through the states in an allowed order, and never had two writers.
    let refused = lines_in_logs(&env.dir, &faulty_group, "task transition refused");
    if refused > 0 {
        fail(report, &format!("{refused} task transition(s) refused (see the pods' logs)"));
    }
    if let Some(copies) = sc.standbys {
        // The survivors must have continued the lost partitions from their standby copies.
        let mut t = Takeover::default();
        for m in &survivors {
            if let Some(p) = faulty.iter().find(|p| p.name == m.pod) {
                t.add(takeover::read(&p.log_since(m.offset)));
            }
        }
        report.faults.push(format!(
            "after the kill: {} standby promotion(s) on a surviving pod; {} partition(s) resumed from the standby \
             copy, from a snapshot {:?}, from offset 0 {:?}",
            t.promotions,
            t.from_standby.len(),
            t.from_snapshot,
            t.from_start
        ));
        if t.promotions == 0 {
            fail(report, "no surviving pod took a partition from its standby tasks");
        } else if copies == "all" && t.from_standby.is_empty() {
            fail(report, "no partition a surviving pod took over resumed from its standby copy");
        } else if t.from_standby.is_empty() && t.from_snapshot.is_empty() {
            fail(report, "no partition a surviving pod took over resumed from a standby copy or a snapshot");
        }
    }
    if sc.snapshots != Snapshots::Off {
        // A move or a lost volume must have come from a snapshot, not a replay from offset 0.
        // With standbys it comes from the standby copy, which a snapshot only backs.
        let restored = lines_in_logs(&env.dir, &faulty_group, "restored from snapshot");
        report.faults.push(format!("{restored} partition restores from snapshots"));
        if restored == 0 && sc.standbys.is_none() {
            report.error = Some("no partition was restored from a snapshot".into());
        }
    }

    let mut reference = pods(env, 1, &reference_topo, &format!("r{seed}"), &Mode::ALONE)?;
    reference[0].start(None)?;
    settle(
        &mut reference,
        &reference_server,
        (Duration::from_secs(5), Duration::from_secs(180), 0.0),
        &mut Ends::new(),
    )?;
    reference[0].sigterm(Duration::from_secs(30))?;

    // For reading only: a POST after an acknowledgement needs a crash that caught its key.
    report.redeliveries = faulty.iter().map(Pod::redeliveries).sum();
    // Micro-batch computes no actions: only its rows are compared.
    let actions = |s: &TestServer| if sc.microbatch { BTreeMap::new() } else { actions_of(s) };
    let reference_out = checker::collect(&settings, &reference_topics, actions(&reference_server))?;
    let faulty_out = checker::collect(&settings, &faulty_topics, actions(&faulty_server))?;
    let expected = checker::expectations(&settings, &faulty_topics.orders)?;
    checker::check(report, &reference_out, &faulty_out, &expected, &ends.list);
    Ok(())
}

/// The faulty pods' process ends so far, each with the keys its log had under way.
pub(crate) struct Ends {
    started: Instant,
    list: Vec<ProcessEnd>,
}

impl Ends {
    fn new() -> Self {
        Ends { started: Instant::now(), list: Vec::new() }
    }

    /// Records the end of `pod`'s last process, which is gone (killed and reaped, aborted,
    /// exited): now, and the keys its own log segment shows posted with no stored outcome.
    pub(crate) fn record(&mut self, pod: &Pod, what: &str, crash: bool) {
        let at = Instant::now();
        let what = format!("{what} at {:.1} s", at.duration_since(self.started).as_secs_f64());
        self.list.push(ProcessEnd { what, at, crash, at_risk: checker::at_risk(&pod.process_log()) });
    }

    /// Records a SIGTERM stop: a crash unless it ended cleanly in time (an unclean one may have
    /// been SIGKILLed after the grace period).
    fn stopped(&mut self, pod: &Pod, why: &str, clean: bool) {
        let what = format!("{why} {}: {}", pod.name, if clean { "clean exit" } else { "NOT clean" });
        self.record(pod, &what, !clean);
    }
}

/// What a fault writes to besides the pods.
struct Faults<'a> {
    report: &'a mut ScenarioReport,
    /// The faulty run's topics.
    topics: &'a history::RunTopics,
    /// Where the surviving pods' logs stood at a kill (scenarios with standbys read past it).
    survivors: &'a mut Vec<LogMark>,
    ends: &'a mut Ends,
    /// The object store of a [`Snapshots::ObjectStore`] scenario.
    gateway: Option<&'a mut s3::Gateway>,
}

/// Whether a fault landed while the history was still being produced.
fn input_state(generator: &std::thread::JoinHandle<anyhow::Result<()>>) -> &'static str {
    if generator.is_finished() {
        "after the input ended"
    } else {
        "while input is still produced"
    }
}

/// Records a failed check, keeping any earlier one.
pub(crate) fn fail(report: &mut ScenarioReport, msg: &str) {
    report.error = Some(match report.error.take() {
        Some(e) => format!("{e}; {msg}"),
        None => msg.to_string(),
    });
}

/// Where a pod's log stood when another pod was killed: what it logs after is its answer to
/// the fault.
struct LogMark {
    pod: String,
    offset: u64,
}

fn marks(pods: &[Pod]) -> Vec<LogMark> {
    pods.iter().map(|p| LogMark { pod: p.name.clone(), offset: p.log_len() }).collect()
}

/// Waits until the pods other than `gone` own every input partition between them (the dead
/// member's partitions have moved to them).
fn wait_taken_over(pods: &[Pod], gone: usize, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let pages: Vec<Option<String>> =
            pods.iter().enumerate().filter(|&(j, _)| j != gone).map(|(_, p)| p.metrics()).collect();
        if every_partition_owned(&pages, false) {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < limit, "the other pods did not take the partitions over within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Probes every pod each second for `length` while a fault holds: each must stay up (one
/// that exits is recorded as a crash and started again), stay live (`/healthz` 200: a kubelet
/// would restart it otherwise) and say at least once that it is not ready (`/readyz` 503).
/// Returns what did not hold, each finding once per pod.
fn watch_through(
    pods: &mut [Pod],
    ends: &mut Ends,
    length: Duration,
    when: &str,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let since = Instant::now();
    let mut not_ready = vec![false; pods.len()];
    let mut found = std::collections::BTreeSet::new();
    while since.elapsed() < length {
        for (k, p) in pods.iter_mut().enumerate() {
            if let Some(status) = p.reap() {
                let what = format!("{} exited {when} ({status})", p.name);
                ends.record(p, &what, true);
                found.insert(what);
                p.start(None)?;
                continue;
            }
            match p.get("/healthz") {
                Some((200, _)) => {}
                Some((status, _)) => {
                    found.insert(format!("{}: /healthz {status} {when}", p.name));
                }
                None => {
                    found.insert(format!("{}: /healthz did not answer {when}", p.name));
                }
            }
            not_ready[k] |= p.get("/readyz").is_some_and(|(s, _)| s == 503);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    for (p, seen) in pods.iter().zip(&not_ready) {
        if !seen {
            found.insert(format!("{} never said it was not ready {when}", p.name));
        }
    }
    Ok(found)
}

/// Reads every pod's partitions until `wrong` finds nothing (the views, and how long it
/// took) or `limit` passes (what was still wrong).
fn wait_for_views(
    pods: &[Pod],
    limit: Duration,
    wrong: impl Fn(&[PodView]) -> Vec<String>,
) -> (Result<Vec<PodView>, Vec<String>>, Duration) {
    let started = Instant::now();
    loop {
        let views: Vec<PodView> =
            pods.iter().map(|p| PodView::read(&p.name, &p.metrics().unwrap_or_default())).collect();
        let found = wrong(&views);
        if found.is_empty() {
            return (Ok(views), started.elapsed());
        }
        if started.elapsed() > limit {
            return (Err(found), started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[allow(clippy::too_many_arguments)]
fn inject(
    env: &Env,
    fault: Fault,
    pods: &mut Vec<Pod>,
    spawn: &dyn Fn(usize) -> anyhow::Result<Pod>,
    server: &TestServer,
    rng: &mut ChaCha8Rng,
    generator: &std::thread::JoinHandle<anyhow::Result<()>>,
    cx: &mut Faults<'_>,
) -> anyhow::Result<()> {
    let Faults { report, topics, survivors, ends, gateway } = cx;
    let pause = |rng: &mut ChaCha8Rng, lo: u64, hi: u64| Duration::from_millis(rng.gen_range(lo..hi));
    match fault {
        Fault::RandomKills(n) => {
            for _ in 0..n {
                std::thread::sleep(pause(rng, 400, 1800));
                let i = rng.gen_range(0..pods.len());
                if pods[i].sigkill()? {
                    ends.record(&pods[i], &format!("SIGKILL {}", pods[i].name), true);
                }
                report.kills += 1;
                report.faults.push(format!("SIGKILL {}", pods[i].name));
                std::thread::sleep(pause(rng, 200, 1200));
                pods[i].start(None)?;
            }
        }
        Fault::Failpoints => {
            let points: &[&str] = if pods[0].microbatch { &MICROBATCH_FAILPOINTS } else { &FAILPOINTS };
            for fp in points {
                let at = rng.gen_range(1..4);
                let pod = &mut pods[0];
                // Killed to be started again with the failpoint armed: a crash like any other.
                if pod.sigkill()? {
                    ends.record(pod, &format!("SIGKILL {} to arm {fp}={at}", pod.name), true);
                }
                pod.start(Some(&format!("{fp}={at}")))?;
                let started = Instant::now();
                let mut died = false;
                while started.elapsed() < Duration::from_secs(10) {
                    // Polled every 50 ms: the abort is recorded at most that late, with the
                    // log as the process left it.
                    if let Some(status) = pod.reap() {
                        ends.record(pod, &format!("{} aborted at {fp}={at} ({status})", pod.name), true);
                        died = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if !died && pod.sigkill()? {
                    ends.record(pod, &format!("SIGKILL {}: {fp}={at} not reached in 10 s", pod.name), true);
                }
                report.kills += 1;
                report.faults.push(format!(
                    "{fp}={at}: {}",
                    if died { "aborted there" } else { "not reached in 10 s; SIGKILLed" }
                ));
                pod.start(None)?;
                if generator.is_finished() {
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        Fault::EndpointChaos => {
            for (behaviour, label) in [
                (Behaviour::Status(503), "endpoint 503 for 2 s"),
                (Behaviour::Slow(Duration::from_secs(2)), "endpoint stalls past the timeout for 2 s"),
                (Behaviour::Reset, "endpoint resets connections for 2 s"),
            ] {
                server.set_behaviour(behaviour);
                report.faults.push(label.to_string());
                std::thread::sleep(Duration::from_secs(2));
            }
            server.set_behaviour(Behaviour::Ok);
        }
        Fault::BrokerRestart => {
            std::thread::sleep(pause(rng, 500, 2000));
            env.broker.kill_and_restart()?;
            report.faults.push("broker kill -9 and restart".into());
        }
        Fault::BrokerOutage(length) => {
            // For reading a failure quickly: TIDEMARK_CHAOS_OUTAGE_S shortens the outage.
            let length = std::env::var("TIDEMARK_CHAOS_OUTAGE_S")
                .ok()
                .and_then(|s| s.parse().ok())
                .map_or(length, Duration::from_secs);
            // In steady state, with input still produced: commits and actions under way.
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 2500));
            env.broker.kill()?;
            report.faults.push(format!("broker kill -9, down for {} s ({})", length.as_secs(), input_state(generator)));
            let findings = watch_through(pods, ends, length, "during the broker outage")?;
            env.broker.restart()?;
            report.faults.push("broker started again".into());
            for finding in findings {
                fail(report, &finding);
            }
        }
        Fault::OutputsRefused(length) => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 2000));
            let bootstrap = env.broker.bootstrap();
            let refused = [topics.dashboard.as_str(), topics.dead_letter.as_str()];
            for t in refused {
                history::set_topic_config(&env.rt, &bootstrap, t, "max.message.bytes", "64")?;
            }
            report.faults.push(format!(
                "{} refused by the broker for {} s ({})",
                refused.join(" and "),
                length.as_secs(),
                input_state(generator)
            ));
            let findings = watch_through(pods, ends, length, "while outputs were refused")?;
            for t in refused {
                history::set_topic_config(&env.rt, &bootstrap, t, "max.message.bytes", "1048588")?;
            }
            report.faults.push("the topics take records again".into());
            for finding in findings {
                fail(report, &finding);
            }
        }
        Fault::SigtermCycles(n) => {
            for _ in 0..n {
                std::thread::sleep(pause(rng, 300, 1500));
                let i = rng.gen_range(0..pods.len());
                let clean = pods[i].sigterm(Duration::from_secs(30))?;
                ends.stopped(&pods[i], "SIGTERM", clean);
                report.faults.push(format!(
                    "SIGTERM {}: {}",
                    pods[i].name,
                    if clean { "clean exit" } else { "NOT clean" }
                ));
                if !clean {
                    report.error = Some(format!("{} did not exit cleanly on SIGTERM", pods[i].name));
                }
                pods[i].start(None)?;
            }
        }
        Fault::ScaleTo(n) => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 3000));
            while pods.len() < n {
                let mut p = spawn(pods.len())?;
                p.start(None)?;
                report.faults.push(format!("scale up: {} joins", p.name));
                pods.push(p);
            }
            while pods.len() > n {
                let Some(mut p) = pods.pop() else { break };
                let clean = p.sigterm(Duration::from_secs(30))?;
                ends.stopped(&p, "scale down: SIGTERM", clean);
                report.faults.push(format!(
                    "scale down: {} leaves ({})",
                    p.name,
                    if clean { "clean exit" } else { "NOT clean" }
                ));
                if !clean {
                    report.error = Some(format!("{} did not exit cleanly on SIGTERM", p.name));
                }
            }
        }
        Fault::GoneForGood => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 3000));
            anyhow::ensure!(pods.len() > 1, "a pod gone for good needs another to take over");
            let i = rng.gen_range(0..pods.len());
            let mut p = pods.remove(i);
            survivors.extend(marks(pods));
            if p.sigkill()? {
                ends.record(&p, &format!("SIGKILL {}, never restarted", p.name), true);
            }
            report.kills += 1;
            report.faults.push(format!("SIGKILL {}, never restarted ({})", p.name, input_state(generator)));
        }
        Fault::VolumeLost => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 3000));
            anyhow::ensure!(pods.len() > 1, "a lost volume needs another pod to take over");
            let i = rng.gen_range(0..pods.len());
            survivors.extend(marks(pods).into_iter().filter(|m| m.pod != pods[i].name));
            if pods[i].sigkill()? {
                ends.record(&pods[i], &format!("SIGKILL {}, state directory then deleted", pods[i].name), true);
            }
            pods[i].wipe_state()?;
            report.kills += 1;
            report.faults.push(format!(
                "SIGKILL {}, state directory deleted ({})",
                pods[i].name,
                input_state(generator)
            ));
            // Down past the session timeout, as a pod waiting for a new volume would be: its
            // partitions go to the others before it comes back.
            wait_taken_over(pods, i, Duration::from_secs(60))?;
            let mark = pods[i].log_len();
            pods[i].start(None)?;
            report.faults.push(format!("{}: restarted empty after the others took its partitions", pods[i].name));
            // It rejoins (with standbys: once its standby copies have caught up) and gets
            // partitions back.
            wait_balanced(pods, Duration::from_secs(120))?;
            if pods[i].standbys.is_some() && !pods[i].log_since(mark).contains(WARM_LOG) {
                fail(report, &format!("{} rejoined without its standby tasks warm", pods[i].name));
            }
        }
        Fault::BackAndForth => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 3000));
            anyhow::ensure!(pods.len() == 2, "partitions move back and forth between two pods");
            let a = rng.gen_range(0..2);
            let b = 1 - a;
            let clean = pods[a].sigterm(Duration::from_secs(30))?;
            ends.stopped(&pods[a], "back and forth: SIGTERM", clean);
            if !clean {
                fail(report, &format!("{} did not exit cleanly on SIGTERM", pods[a].name));
            }
            wait_taken_over(pods, a, Duration::from_secs(60))?;
            report.faults.push(format!("{} left on SIGTERM; {} took every partition", pods[a].name, pods[b].name));
            // B delivers for the partitions it took, then dies, often before its next
            // snapshot round (every 2 s).
            std::thread::sleep(pause(rng, 800, 2500));
            if pods[b].sigkill()? {
                ends.record(&pods[b], &format!("SIGKILL {} after it took every partition", pods[b].name), true);
            }
            report.kills += 1;
            pods[a].start(None)?;
            wait_taken_over(pods, b, Duration::from_secs(60))?;
            report.faults.push(format!(
                "SIGKILL {} ({}); {} came back and took every partition",
                pods[b].name,
                input_state(generator),
                pods[a].name
            ));
            pods[b].start(None)?;
            wait_balanced(pods, Duration::from_secs(120))?;
            report.faults.push(format!("{} rejoined", pods[b].name));
        }
        Fault::HandOverAndBack => {
            wait_balanced(pods, Duration::from_secs(60))?;
            std::thread::sleep(pause(rng, 1000, 2500));
            anyhow::ensure!(pods.len() == 2, "a hand-over both ways needs two pods");
            let a = rng.gen_range(0..2);
            let clean = pods[a].sigterm(Duration::from_secs(30))?;
            ends.stopped(&pods[a], "hand-over: SIGTERM", clean);
            if !clean {
                fail(report, &format!("{} did not exit cleanly on SIGTERM", pods[a].name));
            }
            wait_taken_over(pods, a, Duration::from_secs(60))?;
            report.faults.push(format!("{} left on SIGTERM; {} took every partition", pods[a].name, pods[1 - a].name));
            std::thread::sleep(pause(rng, 800, 2000));
            pods[a].start(None)?;
            wait_balanced(pods, Duration::from_secs(120))?;
            report.faults.push(format!("{} came back and took its share back", pods[a].name));
        }
        Fault::SlowAnswers(delay) => {
            server.set_behaviour(Behaviour::SlowAnswer(delay));
            report.faults.push(format!("endpoint answers 200 after {} ms from here on", delay.as_millis()));
        }
        Fault::CopiesPlaced(copies) => {
            wait_balanced(pods, Duration::from_secs(60))?;
            let (found, waited) =
                wait_for_views(pods, Duration::from_secs(60), |v| placement::misplaced_copies(v, copies));
            match found {
                Ok(views) => report.faults.push(format!(
                    "{copies} standby copy per owned partition on another pod after {:.1} s ({})",
                    waited.as_secs_f64(),
                    views
                        .iter()
                        .map(|v| format!("{}: {} owned, {} shadowed", v.name, v.owned.len(), v.shadowed.len()))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Err(wrong) => fail(report, &format!("standby copies not placed within 60 s: {}", wrong.join("; "))),
            }
        }
        Fault::ObjectStoreDown(length) => {
            let gateway = gateway.as_deref_mut().context("an object-store outage needs Snapshots::ObjectStore")?;
            crate::outage::object_store_down(pods, gateway, server, length, ends, report, input_state(generator))?;
        }
        Fault::MovedAwayDropped(grace) => {
            wait_balanced(pods, Duration::from_secs(60))?;
            // The janitor looks every grace/4 (at most 30 s): a partition moved away just now
            // goes after the grace and at most two looks.
            let limit = grace + 2 * (grace / 4).min(Duration::from_secs(30)) + Duration::from_secs(15);
            let (found, waited) = wait_for_views(pods, limit, |v| {
                let mut wrong = placement::held_beyond_need(v);
                wrong.extend(
                    v.iter().filter(|p| p.local.is_empty()).map(|p| format!("{} publishes no local state", p.name)),
                );
                wrong
            });
            match found {
                Ok(views) => report.faults.push(format!(
                    "after {:.0} s every pod's disk holds only what it owns or shadows: {}",
                    waited.as_secs_f64(),
                    views
                        .iter()
                        .map(|v| format!("{}: {} partitions, {:.1} MB", v.name, v.local.len(), v.disk_bytes / 1e6))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Err(wrong) => fail(
                    report,
                    &format!("state of partitions that moved away still held after {limit:?}: {}", wrong.join("; ")),
                ),
            }
        }
        Fault::AppendTwice | Fault::WipeState => {}
    }
    Ok(())
}
