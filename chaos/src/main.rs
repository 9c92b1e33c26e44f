//! `tidemark-chaos`: runs a profile of fault scenarios and writes the invariant report.
//!
//! ```text
//! tidemark-chaos --profile short                 # CI: twenty scenarios, about 12 minutes
//! tidemark-chaos --profile soak --minutes 30     # soak: rounds of heavier scenarios
//! tidemark-chaos --profile short --seed 1234     # replay a failure (seeds are printed)
//! tidemark-chaos --profile outage                # the broker down for 10 minutes mid-run
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tidemark_chaos::broker::Broker;
use tidemark_chaos::checker::ScenarioReport;
use tidemark_chaos::scenario::{self, Env};

#[derive(Parser)]
#[command(about = "Kill tidemark in every way a StatefulSet can, and check SPEC §3")]
struct Args {
    /// `short` (CI), `soak` or `outage`.
    #[arg(long, default_value = "short")]
    profile: String,
    /// Soak duration.
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Base seed; scenario i of round r uses seed + 100 r + i.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Port of the suite's own Kafka broker.
    #[arg(long, default_value_t = 19492)]
    port: u16,
    /// The tidemark binary (default: $CARGO_TARGET_DIR/release/tidemark).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Run only the scenario of this name (its seed stays the one it has in the profile).
    #[arg(long)]
    only: Option<String>,
    /// Keep the pods' logs, state and snapshot directories here instead of a temporary
    /// directory removed at the end (for reading a failure).
    #[arg(long)]
    keep_dir: Option<PathBuf>,
    /// Where the JSON report goes.
    #[arg(long, default_value = "chaos/results/report.json")]
    report: PathBuf,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tidemark-chaos: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let args = Args::parse();
    let repo = std::env::current_dir()?;
    let bin = args.bin.clone().unwrap_or_else(|| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        PathBuf::from(target).join("release/tidemark")
    });
    anyhow::ensure!(bin.exists(), "{} not found: build it with `cargo build --release`", bin.display());
    let temp = tempfile::tempdir()?;
    let dir = match &args.keep_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let env = Env { bin, broker: Broker::new(&repo, args.port), dir, rt: tokio::runtime::Runtime::new()? };
    env.broker.start()?;
    let started = Instant::now();
    let mut reports: Vec<ScenarioReport> = Vec::new();
    let mut round = 0u64;
    loop {
        let scenarios = match args.profile.as_str() {
            "short" => scenario::short_profile(),
            "soak" => scenario::soak_profile(round),
            "outage" => scenario::outage_profile(),
            other => anyhow::bail!("--profile {other}: expected short, soak or outage"),
        };
        for (i, sc) in scenarios.iter().enumerate() {
            if args.only.as_deref().is_some_and(|name| name != sc.name) {
                continue;
            }
            let seed = args.seed + 100 * round + i as u64;
            let r = scenario::run(&env, sc, seed);
            eprintln!(
                "[chaos] {} seed {}: {} (kills {}, actions {}, lost {}, wrong {}, duplicate POSTs {} over {} key(s) excused by a crash and {} not, dashboard/finance mismatches {}/{}, dead letters missing/unexpected {}/{}, totals {})",
                r.scenario,
                r.seed,
                if r.passed { "PASS" } else { "FAIL" },
                r.kills,
                r.actions_checked,
                r.lost.len(),
                r.wrong.len(),
                r.duplicate_posts,
                r.duplicate_keys_excused.len(),
                r.duplicate_keys_unexcused.len(),
                r.dashboard_mismatches,
                r.finance_mismatches,
                r.dead_letters_missing,
                r.dead_letters_unexpected,
                if r.totals_match { "match" } else { "DIFFER" }
            );
            if let Some(e) = &r.error {
                eprintln!("[chaos]   error: {e}");
            }
            for k in r.duplicate_keys_unexcused.iter().take(20) {
                let under_way = if k.under_way_at.is_empty() {
                    "no process had it under way when it ended".to_string()
                } else {
                    format!("under way at {} (not an excusing crash)", k.under_way_at.join("; "))
                };
                eprintln!("[chaos]   duplicate, no crash explains it: {} ({} POSTs; {under_way})", k.key, k.posts);
            }
            if r.duplicate_keys_unexcused.len() > 20 {
                eprintln!("[chaos]   … {} more in the report", r.duplicate_keys_unexcused.len() - 20);
            }
            reports.push(r);
        }
        round += 1;
        if args.profile != "soak" || started.elapsed() >= Duration::from_secs(args.minutes * 60) {
            break;
        }
    }
    env.broker.stop()?;
    if let Some(parent) = args.report.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let passed = reports.iter().filter(|r| r.passed).count();
    let failed = reports.len() - passed;
    let summary = serde_json::json!({
        "profile": args.profile,
        "elapsed_s": started.elapsed().as_secs(),
        "scenarios": reports.len(),
        "kills": reports.iter().map(|r| r.kills).sum::<u32>(),
        "actions_checked": reports.iter().map(|r| r.actions_checked).sum::<usize>(),
        "lost": reports.iter().map(|r| r.lost.len()).sum::<usize>(),
        "wrong": reports.iter().map(|r| r.wrong.len()).sum::<usize>(),
        "duplicate_posts": reports.iter().map(|r| r.duplicate_posts).sum::<usize>(),
        "duplicate_keys_unexcused": reports.iter().map(|r| r.duplicate_keys_unexcused.len()).sum::<usize>(),
        "reports": reports,
    });
    let mut f = std::fs::File::create(&args.report)?;
    writeln!(f, "{}", serde_json::to_string_pretty(&summary)?)?;
    for r in reports.iter().filter(|r| !r.passed) {
        // `--seed` is the base seed (scenario i of round r runs with seed + 100 r + i), so the
        // scenario's own seed replays only through `--only` with the base it came from.
        eprintln!(
            "[chaos] FAILED: scenario {} (seed {}) — replay with: tidemark-chaos --profile {} --seed {} --only {}",
            r.scenario, r.seed, args.profile, args.seed, r.scenario
        );
    }
    println!("chaos: {passed} passed, {failed} failed");
    Ok(failed == 0)
}
