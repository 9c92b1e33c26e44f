//! A real S3-compatible object store on 127.0.0.1 for `tests/` and the chaos suite:
//! versitygw (Apache-2.0, installed by scripts/setup.sh) over a directory, on a fixed port so
//! that it can be stopped and started again in place — an object-store outage.
//!
//! A process reaches it as a pod would: `--snapshot-dir s3://BUCKET/prefix` and the AWS
//! variables of [`Gateway::env`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

pub const ACCESS: &str = "tidemark-test";
pub const SECRET: &str = "tidemark-test-secret";
pub const BUCKET: &str = "snapshots";

/// The gateway binary: `TIDEMARK_VERSITYGW`, the cache scripts/setup.sh installs into, or PATH.
pub fn versitygw() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("TIDEMARK_VERSITYGW") {
        return Ok(PathBuf::from(p));
    }
    let cache = std::env::var("TIDEMARK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/tidemark"));
    let cached = cache.join("bin/versitygw");
    if cached.exists() {
        return Ok(cached);
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("versitygw"))
        .find(|p| p.exists())
        .context("versitygw not found: run scripts/setup.sh, which installs it (or set TIDEMARK_VERSITYGW)")
}

/// versitygw's posix backend over `root`: the bucket [`BUCKET`] is the directory `root/BUCKET`.
pub struct Gateway {
    child: Option<Child>,
    pub port: u16,
    root: PathBuf,
}

impl Gateway {
    /// Creates the bucket below `root` and starts the gateway on a free port.
    pub fn start(root: &Path) -> anyhow::Result<Gateway> {
        std::fs::create_dir_all(root.join(BUCKET))
            .with_context(|| format!("creating the bucket in {}", root.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut g = Gateway { child: None, port, root: root.to_path_buf() };
        g.restart()?;
        Ok(g)
    }

    /// Starts it again on the same port and directory (after [`Gateway::kill`]).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log_path = self.root.with_extension("versitygw.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let child = Command::new(versitygw()?)
            .args(["--access", ACCESS, "--secret", SECRET, "--port", &format!("127.0.0.1:{}", self.port), "posix"])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting versitygw")?;
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "versitygw did not listen on 127.0.0.1:{} within 30 s (log: {})",
                self.port,
                log_path.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops it (SIGKILL): every request fails until [`Gateway::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `--snapshot-dir` for the objects below `prefix`.
    pub fn snapshot_dir(prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The environment a process needs to reach it: credentials, region, endpoint.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), ACCESS.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET.into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ENDPOINT_URL".into(), format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
        ]
    }

    /// Manifests stored below `prefix`, as files of the gateway's directory.
    pub fn manifests(&self, prefix: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.file_name().is_some_and(|n| n == "manifest.json") {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root.join(BUCKET).join(prefix), &mut out);
        out
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}
