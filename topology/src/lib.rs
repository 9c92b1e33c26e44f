//! The pure model of tidemark: everything that decides *what* a result is, with no I/O.
//!
//! Module map:
//! - [`currency`]: ISO 4217 currencies known to tidemark and their minor-unit exponents.
//! - [`event`]: the canonical order event every mode works on, and the inventory snapshot.
//! - [`reject`]: machine-readable reasons a source record is dead-lettered.
//! - [`normalize`]: the one shared layer that turns schema v1/v2 bytes into canonical events.
//! - [`fence`]: fence records, the exact progress promise of an idle input partition.
//! - [`logical`]: logical time (append time, topic, partition, offset) of a source record.
//! - [`config`]: the topology file (TOML): load, validate, report every error with its place.
//! - [`expr`]: the expression language of `kind = "expression"` rules: CEL syntax, exact types, total evaluation.
//! - [`figures`]: the figures of a dashboard or finance row (orders, units or events, money), defined once.
//! - [`dashboard`]: per-window, per-store dashboard aggregates and their output records.
//! - [`finance`]: business days, finance rows, the day-close fold and its validation.
//! - [`provisional`]: provisional finance rows the stream keeps per business day, store and currency.
//! - [`combine`]: one row per aggregate key: the sum of the latest partial of every source partition.
//! - [`connect_json`]: Kafka Connect's JSON envelope (schema + payload) for the combined rows.
//! - [`window`]: event-time window arithmetic and the per-partition watermark.
//! - [`sku`]: the per-SKU inventory and velocity rules that turn lines and snapshots into action intents.
//! - [`gen`]: the deterministic, seeded order-event generator used by demo, tests and benches.

pub mod combine;
pub mod config;
pub mod connect_json;
pub mod currency;
pub mod dashboard;
pub mod event;
pub mod expr;
pub mod fence;
pub mod figures;
pub mod finance;
pub mod gen;
pub mod logical;
pub mod normalize;
pub mod provisional;
pub mod reject;
pub mod sku;
pub mod window;
