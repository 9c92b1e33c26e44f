//! One `tidemark run` (or `tidemark microbatch`) process standing in for a StatefulSet pod.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

pub struct Pod {
    pub name: String,
    bin: PathBuf,
    topology: PathBuf,
    pub state_dir: PathBuf,
    bootstrap: String,
    group: String,
    pub port: u16,
    log: PathBuf,
    /// Where the current (or last) process's output begins in the log, which every start
    /// appends to: its segment for [`Pod::process_log`].
    process_log_start: u64,
    child: Option<Child>,
    /// Restarts so far (each start after the first).
    pub restarts: u32,
    /// `--replicas` (static partition ownership by ordinal), as the Helm chart runs it by
    /// default; `None`: group-managed (cooperative-sticky, static membership).
    pub replicas: Option<usize>,
    /// `--snapshot-dir` (a directory or an `s3://` URL), shared by every pod of the group.
    pub snapshots: Option<String>,
    /// Environment for the process besides the defaults (the object store's credentials).
    pub env: Vec<(String, String)>,
    /// More arguments for `tidemark run`.
    pub args: Vec<String>,
    /// Runs `tidemark microbatch` (slices every 300 ms) instead of the stream.
    pub microbatch: bool,
    /// `--standbys`: `all` (a standby task for every input partition the pod does not own)
    /// or a count of copies per partition.
    pub standbys: Option<String>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Pod {
    pub fn new(
        name: &str,
        bin: &Path,
        topology: &Path,
        dir: &Path,
        bootstrap: &str,
        group: &str,
    ) -> anyhow::Result<Self> {
        Ok(Pod {
            name: name.to_string(),
            bin: bin.to_path_buf(),
            topology: topology.to_path_buf(),
            state_dir: dir.join(format!("{name}-state")),
            bootstrap: bootstrap.to_string(),
            group: group.to_string(),
            port: free_port()?,
            log: dir.join(format!("{name}.log")),
            process_log_start: 0,
            child: None,
            restarts: 0,
            replicas: Some(1),
            snapshots: None,
            env: Vec::new(),
            args: Vec::new(),
            microbatch: false,
            standbys: None,
        })
    }

    /// Starts the process; `failpoints` arms `TIDEMARK_FAILPOINTS`.
    pub fn start(&mut self, failpoints: Option<&str>) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.bin);
        if self.microbatch {
            cmd.args(["microbatch", "--bootstrap", &self.bootstrap, "--every", "300ms"]);
        } else {
            cmd.args(["run", "--bootstrap", &self.bootstrap, "--group", &self.group, "--instance-id", &self.name]);
            match self.replicas {
                Some(n) => cmd.args(["--replicas", &n.to_string()]),
                // The broker's smallest session timeout: a pod gone for good frees its
                // partitions after 6 s.
                None => cmd.args(["--session-timeout", "6s"]),
            };
            if let Some(dir) = &self.snapshots {
                cmd.arg("--snapshot-dir").arg(dir).args(["--snapshot-interval", "2s"]);
            }
            if let Some(n) = &self.standbys {
                cmd.args(["--standbys", n]);
            }
            cmd.args(&self.args);
        }
        cmd.arg("--topology")
            .arg(&self.topology)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(["--http-addr", &format!("127.0.0.1:{}", self.port), "--backlog-probe-every", "1"])
            .env("TIDEMARK_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log);
        match failpoints {
            Some(f) => cmd.env("TIDEMARK_FAILPOINTS", f),
            None => cmd.env_remove("TIDEMARK_FAILPOINTS"),
        };
        if self.child.is_none() && self.log_len() > 0 {
            self.restarts += 1;
        }
        self.process_log_start = self.log_len();
        self.child = Some(cmd.spawn().with_context(|| format!("starting pod {}", self.name))?);
        Ok(())
    }

    /// Bytes in the pod's log so far: a mark for [`Pod::log_since`].
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// What the pod logged after byte `offset` (over every restart).
    pub fn log_since(&self, offset: u64) -> String {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// What the current (or last) process logged: from its start to now, or to its end once
    /// it is gone.
    pub fn process_log(&self) -> String {
        self.log_since(self.process_log_start)
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Collects the exit status if the process ended (e.g. at a failpoint).
    pub fn reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// SIGKILL and reap the process; returns whether there was one (it may have exited
    /// already, unreaped: it is gone either way).
    pub fn sigkill(&mut self) -> anyhow::Result<bool> {
        let Some(mut c) = self.child.take() else { return Ok(false) };
        c.kill()?;
        c.wait()?;
        Ok(true)
    }

    /// SIGTERM and wait for the graceful exit; returns whether it was clean and in time.
    pub fn sigterm(&mut self, grace: Duration) -> anyhow::Result<bool> {
        let Some(mut c) = self.child.take() else { return Ok(true) };
        Command::new("kill").args(["-TERM", &c.id().to_string()]).status()?;
        let started = Instant::now();
        while started.elapsed() < grace {
            if let Some(status) = c.try_wait()? {
                if !status.success() {
                    eprintln!("[chaos]   {}: exited with {status} after SIGTERM", self.name);
                }
                return Ok(status.success());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("[chaos]   {}: still running {} s after SIGTERM; killed", self.name, grace.as_secs());
        c.kill()?;
        c.wait()?;
        Ok(false)
    }

    pub fn wipe_state(&self) -> anyhow::Result<()> {
        if self.state_dir.exists() {
            std::fs::remove_dir_all(&self.state_dir)?;
        }
        Ok(())
    }

    /// The pod's `/metrics` page, if it answers.
    pub fn metrics(&self) -> Option<String> {
        self.get("/metrics").map(|(_, text)| text)
    }

    /// GET `path` on the pod's HTTP port: (status, whole response), if it answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text))
    }

    /// Redeliveries this pod's processes logged, over every restart: the durable twin of
    /// `tidemark_dispatch_redeliveries_total`, which a SIGKILL or failpoint abort discards.
    pub fn redeliveries(&self) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|l| l.contains(tidemark::actions::REDELIVERY_LOG)).count()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.sigkill();
    }
}

/// Sum of `tidemark_consumer_lag_records` over the input topics. The SKU repartition topic
/// receives progress marks at every upstream commit, so its lag is never 0 for long.
pub fn input_lag(page: &str) -> Option<f64> {
    let inputs: String =
        page.lines().filter(|l| !l.contains("source=\"sku-repartition\"")).collect::<Vec<_>>().join("\n");
    metric_sum(&inputs, "tidemark_consumer_lag_records")
}

/// Sum of a metric family's values on a Prometheus page.
pub fn metric_sum(page: &str, name: &str) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let metric = series.split('{').next().unwrap_or(series);
        if metric == name {
            found = true;
            sum += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    found.then_some(sum)
}

/// The partitions, as `source[partition]`, whose series of `name` (labelled `source` and
/// `partition`) is 1 on a Prometheus page.
pub fn partitions_at_one(page: &str, name: &str) -> std::collections::BTreeSet<String> {
    let label = |series: &str, key: &str| {
        let start = series.find(&format!("{key}=\""))? + key.len() + 2;
        let len = series[start..].find('"')?;
        Some(series[start..start + len].to_string())
    };
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, value)| series.split('{').next() == Some(name) && value.trim() == "1")
        .filter_map(|(series, _)| Some(format!("{}[{}]", label(series, "source")?, label(series, "partition")?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partitions_whose_series_is_one_are_named_source_and_partition() {
        let page = "# TYPE tidemark_partition_owned gauge\n\
            tidemark_partition_owned{source=\"orders\",partition=\"3\"} 1\n\
            tidemark_partition_owned{source=\"orders\",partition=\"1\"} 0\n\
            tidemark_partition_owned{source=\"sku-repartition\",partition=\"0\"} 1\n\
            tidemark_partition_owned_other{source=\"orders\",partition=\"2\"} 1\n";
        let got: Vec<String> = partitions_at_one(page, "tidemark_partition_owned").into_iter().collect();
        assert_eq!(got, vec!["orders[3]".to_string(), "sku-repartition[0]".to_string()]);
    }
}
