//! Operations surface: Prometheus metrics, health, pause/resume, and the backlog-age prober.
//!
//! Hot-path counting happens in plain atomics ([`crate::engine::Stats`]) and in histogram
//! handles resolved once ([`events::Latencies`]); the exporter copies the atomics into the
//! registry when `/metrics` is scraped. Label values are bounded: partition numbers, the
//! eleven reject reasons, five latency segments, four dispatch outcomes.

pub mod backlog;
pub mod events;
pub mod http;
pub mod progress;

pub use progress::Progress;
