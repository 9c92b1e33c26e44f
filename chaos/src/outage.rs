//! An object-store outage mid-run (SPEC §5, issue 35): the S3 gateway is killed while input
//! is produced and actions are under way, and started again after `length`. Snapshots are a
//! copy for moves and lost volumes, not part of the commit: processing and actions must go
//! on, the failures must show in `tidemark_snapshot_failures_total`, and uploads must resume
//! once the store is back.

use std::time::{Duration, Instant};

use tidemark::dispatch::testkit::TestServer;
use tidemark::testkit::s3;

use crate::checker::ScenarioReport;
use crate::pod::{metric_sum, Pod};
use crate::scenario::Ends;

/// Sum of `name` over the pods' pages (a pod that does not answer counts 0).
fn total(pods: &[Pod], name: &str) -> f64 {
    pods.iter().filter_map(Pod::metrics).filter_map(|p| metric_sum(&p, name)).sum()
}

/// Waits up to `limit` for `ok`; returns whether it held and how long it took.
fn wait(limit: Duration, mut ok: impl FnMut() -> bool) -> (bool, Duration) {
    let started = Instant::now();
    loop {
        if ok() {
            return (true, started.elapsed());
        }
        if started.elapsed() > limit {
            return (false, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs the outage; what did not hold is added to the report's error.
pub(crate) fn object_store_down(
    pods: &mut [Pod],
    gateway: &mut s3::Gateway,
    server: &TestServer,
    length: Duration,
    ends: &mut Ends,
    report: &mut ScenarioReport,
    input: &str,
) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    // In steady state: every pod has published snapshots before the store goes.
    let (uploading, _) = wait(Duration::from_secs(60), || {
        pods.iter().all(|p| {
            p.metrics().and_then(|m| metric_sum(&m, "tidemark_snapshot_upload_bytes_total")).is_some_and(|b| b > 0.0)
        })
    });
    anyhow::ensure!(uploading, "not every pod uploaded a snapshot within 60 s of the start");
    gateway.kill();
    let (records, posts) = (total(pods, "tidemark_records_total"), server.request_count());
    report.faults.push(format!("object store down for {} s ({input})", length.as_secs()));

    // Through the outage: each pod stays up and live every second.
    let since = Instant::now();
    while since.elapsed() < length {
        for p in pods.iter_mut() {
            if let Some(status) = p.reap() {
                let what = format!("{} exited during the object-store outage ({status})", p.name);
                ends.record(p, &what, true);
                wrong.push(what);
                p.start(None)?;
            } else if p.get("/healthz").map(|(s, _)| s) != Some(200) {
                wrong.push(format!("{}: /healthz not 200 during the object-store outage", p.name));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let (records_during, posts_during) =
        (total(pods, "tidemark_records_total") - records, server.request_count() - posts);
    let failures: Vec<f64> = pods
        .iter()
        .map(|p| p.metrics().and_then(|m| metric_sum(&m, "tidemark_snapshot_failures_total")).unwrap_or(0.0))
        .collect();
    report.faults.push(format!(
        "during the outage: {records_during} records processed, {posts_during} POSTs, snapshot failures counted per pod {failures:?}"
    ));
    if records_during <= 0.0 {
        wrong.push("no record processed while the object store was down".into());
    }
    if failures.iter().all(|f| *f == 0.0) {
        wrong.push("no pod counted a failed snapshot operation (tidemark_snapshot_failures_total)".into());
    }

    let uploaded = total(pods, "tidemark_snapshot_upload_bytes_total");
    gateway.restart()?;
    let (resumed, after) =
        wait(Duration::from_secs(60), || total(pods, "tidemark_snapshot_upload_bytes_total") > uploaded);
    if resumed {
        report.faults.push(format!("object store back: uploads resumed after {:.1} s", after.as_secs_f64()));
    } else {
        wrong.push("no snapshot uploaded within 60 s of the object store's return".into());
    }
    if !wrong.is_empty() {
        crate::scenario::fail(report, &wrong.join("; "));
    }
    Ok(())
}
