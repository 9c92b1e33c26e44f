//! Operations surface: Prometheus metrics and probes ([`http`]), pause/resume on a separate
//! admin listener ([`admin`]), the backlog-age prober ([`backlog`]), and which partitions
//! the process owns and restores ([`ownership`]).
//!
//! Hot-path counting happens in plain atomics ([`crate::engine::Stats`]) and in histogram
//! handles resolved once ([`events::Latencies`]); the exporter copies the atomics into the
//! registry when `/metrics` is scraped. Label values are bounded: partition numbers, the
//! twelve reject reasons, five latency segments, four dispatch outcomes; `source` and `partition` of skipped records; the dead-letter and late `topic` of side-output retries.

pub mod actions;
pub mod admin;
pub mod backlog;
pub mod describe;
pub mod disk;
pub mod events;
pub mod http;
pub mod logging;
pub mod microbatch;
pub mod outputs;
pub mod ownership;
pub mod process;
pub mod progress;
pub mod snapshots;
pub mod standby;
pub mod stream;

pub use progress::Progress;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;

use crate::engine::Stats;
use crate::kafka::KafkaSettings;

/// What `--http-addr` starts: the metrics recorder, the HTTP endpoint on `rt`, the admin
/// listener, and the backlog prober of `topics` (its thread ends when `stop` is set).
pub struct Surface<'a> {
    /// `--http-addr`; `None` serves nothing.
    pub addr: Option<SocketAddr>,
    pub settings: &'a KafkaSettings,
    /// The topic of each source (`PartitionId::source`) whose partitions the progress tracks.
    pub topics: Vec<(u16, String)>,
    pub stats: &'a Arc<Stats>,
    pub progress: &'a Arc<Progress>,
    pub stop: &'a Arc<AtomicBool>,
    /// `--backlog-probe-every`, seconds (at least 1).
    pub probe_every_s: u64,
    /// The admin listener (`run` only); started along with the HTTP endpoint.
    pub admin: Option<admin::Config>,
}

/// Serves the HTTP surface and starts the backlog prober when an address is given; returns
/// the prober's thread.
pub fn serve(rt: &tokio::runtime::Runtime, s: Surface<'_>) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(addr) = s.addr else { return Ok(None) };
    // Checked before anything listens: an exposed admin listener without a token is refused.
    let admin = match s.admin {
        Some(cfg) => {
            let token = cfg.check().map_err(anyhow::Error::msg)?;
            rt.block_on(admin::bind(&cfg))?.map(|l| (l, cfg, token))
        }
        None => None,
    };
    let handle = events::install()?;
    describe::all();
    let listener = rt.block_on(http::bind(addr)).with_context(|| format!("binding --http-addr {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /startupz, /healthz, /readyz");
    rt.spawn(http::serve(listener, handle, Arc::clone(s.stats), Arc::clone(s.progress)));
    if let Some((listener, cfg, token)) = admin {
        tracing::info!(
            addr = %listener.local_addr()?,
            token = token.is_some(),
            "serving POST /pause, POST /resume on the admin listener"
        );
        rt.spawn(admin::serve(listener, cfg, token, Arc::clone(s.progress)));
    }
    let every = Duration::from_secs(s.probe_every_s.max(1));
    backlog::spawn(s.settings, s.topics, Arc::clone(s.progress), Arc::clone(s.stop), every).map(Some)
}
