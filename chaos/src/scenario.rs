//! Fault scenarios. Each one: fresh input topics, a seeded history produced (paced) while
//! the faulty "pods" run and faults land, then a clean reference run over the same final log,
//! then the checker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tidemark::dispatch::testkit::{Behaviour, TestServer};
use tidemark::kafka::KafkaSettings;

use crate::broker::Broker;
use crate::checker::{self, ScenarioReport};
use crate::history::{self, RunTopics};
use crate::pod::{input_lag, metric_sum, Pod};

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
    /// SIGTERM and restart, several times; each exit must be clean and in time.
    SigtermCycles(u32),
    /// Append the whole log a second time.
    AppendTwice,
    /// Delete a pod's state directory while it is down; it must rebuild correctly.
    WipeState,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub pods: usize,
    /// The faulty pods run `tidemark microbatch` (the reference is still the stream): its
    /// dashboard and finance rows must equal the stream's; it sends no actions.
    pub microbatch: bool,
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
            pods: 2,
            faults: vec![Fault::RandomKills(3)],
            events: 6000,
        },
        Scenario { name: "every-failpoint", microbatch: false, pods: 1, faults: vec![Fault::Failpoints], events: 6000 },
        Scenario {
            name: "endpoint-chaos-and-log-replayed",
            microbatch: false,
            pods: 1,
            faults: vec![Fault::EndpointChaos, Fault::AppendTwice],
            events: 6000,
        },
        Scenario {
            name: "broker-kill-and-sigterm-cycles",
            microbatch: false,
            pods: 1,
            faults: vec![Fault::BrokerRestart, Fault::SigtermCycles(2)],
            events: 6000,
        },
        Scenario {
            name: "state-directory-wiped",
            microbatch: false,
            pods: 1,
            faults: vec![Fault::WipeState],
            events: 4000,
        },
        Scenario {
            name: "microbatch-kills-and-failpoints",
            microbatch: true,
            pods: 1,
            faults: vec![Fault::RandomKills(3), Fault::Failpoints, Fault::AppendTwice],
            events: 6000,
        },
    ]
}

pub fn soak_profile(round: u64) -> Vec<Scenario> {
    let kills = 5 + u32::try_from(round % 10).unwrap_or(0);
    vec![
        Scenario {
            name: "soak-random-sigkills",
            microbatch: false,
            pods: 3,
            faults: vec![Fault::RandomKills(kills)],
            events: 20_000,
        },
        Scenario {
            name: "soak-microbatch",
            microbatch: true,
            pods: 1,
            faults: vec![Fault::RandomKills(kills), Fault::Failpoints, Fault::BrokerRestart, Fault::AppendTwice],
            events: 20_000,
        },
        Scenario {
            name: "soak-failpoints",
            microbatch: false,
            pods: 2,
            faults: vec![Fault::Failpoints, Fault::RandomKills(3)],
            events: 20_000,
        },
        Scenario {
            name: "soak-everything",
            microbatch: false,
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

/// Waits until every pod is caught up, nothing is pending in any outbox, and the endpoint
/// has been quiet for `quiet`.
fn settle(pods: &mut [Pod], server: &TestServer, quiet: Duration, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = (usize::MAX, Instant::now());
    loop {
        for pod in pods.iter_mut() {
            if !pod.is_running() {
                pod.reap();
                pod.start(None)?;
            }
        }
        let n = server.request_count();
        if n != last.0 {
            last = (n, Instant::now());
        }
        let calm = pods.iter().all(|p| {
            // A micro-batch job has no outbox.
            let no_outbox = if p.microbatch { 0.0 } else { 1.0 };
            p.metrics().is_some_and(|page| {
                input_lag(&page) == Some(0.0)
                    && metric_sum(&page, "tidemark_outbox_pending").unwrap_or(no_outbox) == 0.0
            })
        });
        if calm && last.1.elapsed() >= quiet {
            return Ok(());
        }
        if started.elapsed() > limit {
            let tails: Vec<String> = pods.iter().map(|p| format!("--- {}:\n{}", p.name, p.log_tail(15))).collect();
            anyhow::bail!("did not settle within {limit:?}\n{}", tails.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn actions_of(server: &TestServer) -> BTreeMap<String, Vec<checker::Post>> {
    let mut m: BTreeMap<String, Vec<checker::Post>> = BTreeMap::new();
    for r in server.requests() {
        let acknowledged = matches!(r.answered, Some(s) if (200..300).contains(&s) || s == 409);
        m.entry(r.header("idempotency-key").unwrap_or_default().to_string())
            .or_default()
            .push(checker::Post { body: r.body, acknowledged });
    }
    m
}

fn pods(env: &Env, n: usize, topology: &Path, group: &str) -> anyhow::Result<Vec<Pod>> {
    let b = env.broker.bootstrap();
    (0..n)
        .map(|i| {
            let mut pod = Pod::new(&format!("{group}-{i}"), &env.bin, topology, &env.dir, &b, group)?;
            pod.replicas = n;
            Ok(pod)
        })
        .collect()
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
    )?;
    let (reference_topo, reference_topics) = history::prepare_run(
        &env.bin,
        &bootstrap,
        &env.dir,
        &inputs,
        &format!("r{seed}"),
        &url(&reference_server, "/act"),
        &url(&reference_server, "/notify"),
    )?;

    let mut faulty = pods(env, sc.pods, &faulty_topo, &format!("f{seed}"))?;
    for p in faulty.iter_mut() {
        p.microbatch = sc.microbatch;
        p.start(None)?;
    }
    let (bin, b, t, events) = (env.bin.clone(), bootstrap.clone(), faulty_topics.clone(), sc.events);
    let generator = std::thread::spawn(move || history::generate(&bin, &b, &t, seed, events, 1500));
    log(&format!("{}: seed {seed}, {} pod(s), faults {:?}", sc.name, sc.pods, sc.faults));

    for fault in &sc.faults {
        inject(env, *fault, &mut faulty, &faulty_server, &faulty_topics, &mut rng, report, &generator)?;
    }
    generator.join().map_err(|_| anyhow::anyhow!("generator thread panicked"))??;
    if sc.faults.contains(&Fault::AppendTwice) {
        let n = history::append_again(&bootstrap, &faulty_topics.orders)?;
        history::append_again(&bootstrap, &faulty_topics.inventory)?;
        report.faults.push(format!("appended the whole log again ({n} order records)"));
    }
    faulty_server.set_behaviour(Behaviour::Ok);
    settle(&mut faulty, &faulty_server, Duration::from_secs(5), Duration::from_secs(180))?;
    if sc.faults.contains(&Fault::WipeState) {
        let pod = &mut faulty[0];
        pod.sigkill()?;
        pod.wipe_state()?;
        report.kills += 1;
        report.faults.push(format!("{}: state directory deleted while down", pod.name));
        pod.start(None)?;
        settle(&mut faulty, &faulty_server, Duration::from_secs(5), Duration::from_secs(180))?;
        // A rebuilt pod re-derives every action with the same key and payload; the endpoint
        // sees them again (idempotent by key). Allowed, and counted.
        report.allowed_duplicate_posts += faulty_server.request_count();
    }
    for p in faulty.iter_mut() {
        if !p.sigterm(Duration::from_secs(30))? {
            report.faults.push(format!("{}: final SIGTERM did not end cleanly", p.name));
        }
    }

    let mut reference = pods(env, 1, &reference_topo, &format!("r{seed}"))?;
    reference[0].start(None)?;
    settle(&mut reference, &reference_server, Duration::from_secs(5), Duration::from_secs(180))?;
    reference[0].sigterm(Duration::from_secs(30))?;

    // A POST after an acknowledgement is allowed only as a redelivery the processes counted.
    report.redeliveries = faulty.iter().map(Pod::redeliveries).sum();
    report.allowed_duplicate_posts += report.redeliveries;
    // Micro-batch computes no actions: only its rows are compared.
    let actions = |s: &TestServer| if sc.microbatch { BTreeMap::new() } else { actions_of(s) };
    let reference_out = checker::collect(&settings, &reference_topics, actions(&reference_server))?;
    let faulty_out = checker::collect(&settings, &faulty_topics, actions(&faulty_server))?;
    let expected = checker::expectations(&settings, &faulty_topics.orders)?;
    checker::check(report, &reference_out, &faulty_out, &expected);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn inject(
    env: &Env,
    fault: Fault,
    pods: &mut [Pod],
    server: &TestServer,
    _topics: &RunTopics,
    rng: &mut ChaCha8Rng,
    report: &mut ScenarioReport,
    generator: &std::thread::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let pause = |rng: &mut ChaCha8Rng, lo: u64, hi: u64| Duration::from_millis(rng.gen_range(lo..hi));
    match fault {
        Fault::RandomKills(n) => {
            for _ in 0..n {
                std::thread::sleep(pause(rng, 400, 1800));
                let i = rng.gen_range(0..pods.len());
                pods[i].sigkill()?;
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
                pod.sigkill()?;
                pod.start(Some(&format!("{fp}={at}")))?;
                let started = Instant::now();
                let mut died = false;
                while started.elapsed() < Duration::from_secs(10) {
                    if pod.reap().is_some() {
                        died = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if !died {
                    pod.sigkill()?;
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
        Fault::SigtermCycles(n) => {
            for _ in 0..n {
                std::thread::sleep(pause(rng, 300, 1500));
                let i = rng.gen_range(0..pods.len());
                let clean = pods[i].sigterm(Duration::from_secs(30))?;
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
        Fault::AppendTwice | Fault::WipeState => {}
    }
    Ok(())
}
