//! The idempotent, signed HTTP dispatcher of actions.
//!
//! One call to [`Dispatcher::attempt`] is one POST of an outbox row to the action or the
//! notification endpoint, classified into an [`Outcome`]: done ([`Outcome::Delivered`],
//! [`Outcome::Conflict`]), dead-letter ([`Outcome::PermanentFailure`]) or try again later
//! ([`Outcome::Retry`]). Scheduling, persistence of the attempt count, auditing and metrics
//! belong to the caller; this module performs no retries of its own, so a crash never hides
//! a POST the outbox does not know about.
//!
//! Every request carries:
//!
//! | header | value |
//! |---|---|
//! | `Content-Type` | `application/json` |
//! | `Idempotency-Key` | the action's deterministic key |
//! | `webhook-id` | the same key (Standard Webhooks: stable across retries) |
//! | `webhook-timestamp` | unix seconds at this attempt |
//! | `webhook-signature` | `v1,<base64 HMAC-SHA256>` of `{id}.{timestamp}.{body}` per secret (two, space-separated, during a rotation), when a secret is configured |
//! | `tidemark-source-append-time` | broker append time (ms) of the input record that fired the action |
//!
//! - [`client`]: [`Dispatcher`], one pooled HTTP client with bounded concurrency.
//! - [`outcome`]: [`Outcome`] and the pure status classification.
//! - [`retry`]: [`RetryPolicy`], exponential backoff with full jitter.
//! - [`signer`]: [`Signer`], Standard Webhooks signatures with one or two secrets, and
//!   [`SecretWatch`], which picks up a rotated secret file.
//! - [`tls`]: [`TlsConfig`], trust roots, CA file and client certificate.
//! - [`error`]: [`DispatchError`], which failures a retry can cure.
//! - [`testkit`]: a scripted HTTP endpoint on 127.0.0.1 for tests.

pub mod client;
pub mod error;
pub mod outcome;
pub mod retry;
pub mod signer;
pub mod testkit;
pub mod tls;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Duration;

use tidemark_topology::config::RuleMode;

pub use client::{Dispatcher, Permit};
pub use error::DispatchError;
pub use outcome::Outcome;
pub use retry::RetryPolicy;
pub use signer::{SecretChange, SecretWatch, Signer, SignerSlot};
pub use tls::{TlsConfig, Trust};

/// Where actions go. A target without a URL may only be used by rules in `shadow` mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub action_url: Option<reqwest::Url>,
    pub notify_url: Option<reqwest::Url>,
    /// Whole-request budget: connect, send, and read the response.
    pub timeout: Duration,
}

impl Endpoints {
    pub fn url(&self, target: Target) -> Option<&reqwest::Url> {
        match target {
            Target::Act => self.action_url.as_ref(),
            Target::Notify => self.notify_url.as_ref(),
        }
    }
}

/// Which endpoint a delivery goes to; follows the rule's enablement mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Act,
    Notify,
}

impl Target {
    /// The endpoint a rule mode sends to; `None` for shadow rules, which never send.
    pub fn of(mode: RuleMode) -> Option<Target> {
        match mode {
            RuleMode::Act => Some(Target::Act),
            RuleMode::Notify => Some(Target::Notify),
            RuleMode::Shadow => None,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Target::Act => "act",
            Target::Notify => "notify",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One outbox row to POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The idempotency key; also the Standard Webhooks message id.
    pub key: String,
    pub target: Target,
    /// The JSON payload, sent byte for byte: a key is never sent with two payloads.
    pub body: Vec<u8>,
    /// Attempts already made, as persisted by the caller (0 for the first attempt).
    pub attempt: u32,
    /// Broker append time (ms) of the input record that fired the action; sent as
    /// `tidemark-source-append-time` so a receiver can measure append→delivery exactly.
    pub source_append_ms: i64,
}
