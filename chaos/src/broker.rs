//! The suite's own broker, on its own port, so it can be killed without touching the
//! broker of the black-box tests.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context as _;

pub struct Broker {
    script: PathBuf,
    pub port: u16,
}

impl Broker {
    pub fn new(repo: &std::path::Path, port: u16) -> Self {
        Broker { script: repo.join("scripts/kafka/kafka.sh"), port }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn call(&self, verb: &str) -> anyhow::Result<()> {
        let status = Command::new("bash")
            .arg(&self.script)
            .arg(verb)
            .env("KAFKA_PORT", self.port.to_string())
            .status()
            .with_context(|| format!("running kafka.sh {verb}"))?;
        anyhow::ensure!(status.success(), "kafka.sh {verb} failed ({status})");
        Ok(())
    }

    /// A fresh broker with an empty log.
    pub fn start(&self) -> anyhow::Result<()> {
        self.call("start")
    }

    pub fn stop(&self) -> anyhow::Result<()> {
        self.call("stop")
    }

    /// SIGKILL, then start again on the same data directory.
    pub fn kill_and_restart(&self) -> anyhow::Result<()> {
        self.kill()?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        self.restart()
    }

    /// SIGKILL: the broker is gone until [`Broker::restart`].
    pub fn kill(&self) -> anyhow::Result<()> {
        self.call("kill")
    }

    /// Starts a killed broker again on its data directory.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.call("restart")
    }
}
