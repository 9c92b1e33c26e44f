//! [`Dispatcher`]: one POST per call, through one pooled client, at most `max_in_flight`
//! at a time.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use tokio::sync::Semaphore;

use super::outcome::{classify_status, StatusClass};
use super::signer::SignerSlot;
use super::{Delivery, DispatchError, Endpoints, Outcome, RetryPolicy, Signer, TlsConfig};

/// Bytes of a failure body kept for the dead letter and the audit record.
const SNIPPET_BYTES: usize = 512;
/// Bytes of a response read to keep its connection reusable; a longer body costs a new
/// connection rather than an unbounded read.
const DRAIN_BYTES: usize = 64 * 1024;
/// At most one TLS-failure error line per this span: every pending action fails the same
/// way, and each attempt is audited anyway.
const TLS_LOG_EVERY: Duration = Duration::from_secs(10);

/// A place among the dispatcher's `max_in_flight` requests ([`Dispatcher::permit`]).
pub struct Permit<'a> {
    _held: tokio::sync::SemaphorePermit<'a>,
}

pub struct Dispatcher {
    client: reqwest::Client,
    endpoints: Endpoints,
    signer: SignerSlot,
    retry: RetryPolicy,
    permits: Semaphore,
    max_in_flight: usize,
    /// When a TLS failure was last logged as an error, and how many were not since.
    tls_logged: Mutex<(Option<Instant>, u64)>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("endpoints", &self.endpoints)
            .field("signer", &self.signer)
            .field("retry", &self.retry)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// [`Dispatcher::with_tls`] with the default [`TlsConfig`] (webpki roots, no client
    /// certificate).
    pub fn new(
        endpoints: Endpoints,
        signer: Option<Signer>,
        retry: RetryPolicy,
        max_in_flight: usize,
    ) -> Result<Self, DispatchError> {
        Dispatcher::with_tls(endpoints, &TlsConfig::default(), signer, retry, max_in_flight)
    }

    /// Validates the whole configuration, reading the TLS files, and reports every problem
    /// at once.
    pub fn with_tls(
        endpoints: Endpoints,
        tls: &TlsConfig,
        signer: Option<Signer>,
        retry: RetryPolicy,
        max_in_flight: usize,
    ) -> Result<Self, DispatchError> {
        let mut problems = Vec::new();
        if max_in_flight == 0 || max_in_flight > Semaphore::MAX_PERMITS {
            problems
                .push(format!("max_in_flight must be between 1 and {}, got {max_in_flight}", Semaphore::MAX_PERMITS));
        }
        if endpoints.timeout.is_zero() {
            problems.push("timeout must be positive".to_string());
        }
        if retry.base.is_zero() {
            problems.push("retry base must be positive".to_string());
        }
        if retry.cap < retry.base {
            problems.push(format!("retry cap {:?} is below the base {:?}", retry.cap, retry.base));
        }
        if retry.max_attempts == Some(0) {
            problems.push("max_attempts must be at least 1, or unset to retry forever".to_string());
        }
        for (name, url) in [("action", &endpoints.action_url), ("notify", &endpoints.notify_url)] {
            if let Some(url) = url {
                if !matches!(url.scheme(), "http" | "https") {
                    problems.push(format!("{name} url scheme must be http or https, got `{}`", url.scheme()));
                }
            }
        }
        let builder = tls.apply(reqwest::Client::builder().use_rustls_tls(), &mut problems);
        if !problems.is_empty() {
            return Err(DispatchError::Config { problems });
        }
        let client = builder
            .timeout(endpoints.timeout)
            .connect_timeout(endpoints.timeout)
            // A redirected POST may become a GET and silently drop the action.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(max_in_flight)
            .tcp_nodelay(true)
            .user_agent(concat!("tidemark/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| tls.build_error(e))?;
        let signer = SignerSlot::new(signer);
        Ok(Dispatcher {
            client,
            endpoints,
            signer,
            retry,
            permits: Semaphore::new(max_in_flight),
            max_in_flight,
            tls_logged: Mutex::new((None, 0)),
        })
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The signer in use; a [`SecretWatch`](super::SecretWatch) replaces it on rotation.
    pub fn signer_slot(&self) -> SignerSlot {
        self.signer.clone()
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// One of the `max_in_flight` places for a request. Taken before anything that must not
    /// wait behind other requests is checked (the action gate: see `actions::deliver`), and
    /// held until the outcome is stored.
    pub async fn permit(&self) -> Result<Permit<'_>, DispatchError> {
        self.permits
            .acquire()
            .await
            .map(|held| Permit { _held: held })
            .map_err(|_| DispatchError::Transport("dispatcher closed".into()))
    }

    /// Makes one POST of `d` and classifies the answer, after waiting for a place
    /// ([`Dispatcher::permit`]). Never retries by itself: the caller persists `attempt + 1`
    /// and schedules the next try after `Retry::after`.
    pub async fn attempt(&self, d: &Delivery) -> Outcome {
        match self.permit().await {
            Ok(permit) => self.attempt_with(&permit, d).await,
            Err(e) => settle(&self.retry, d.attempt, Err(e), &mut rand::thread_rng()),
        }
    }

    /// [`Dispatcher::attempt`] in a place already taken.
    pub async fn attempt_with(&self, _permit: &Permit<'_>, d: &Delivery) -> Outcome {
        let result = self.post(d).await;
        // The status of the answer, if one arrived, and the failure in full, for the log.
        let (status, error) = match &result {
            Ok(status) => (Some(*status), None),
            Err(err) => (Some(err.status()).filter(|s| *s != 0), Some(err.to_string())),
        };
        let tls = matches!(result, Err(DispatchError::Tls(_)));
        let outcome = settle(&self.retry, d.attempt, result, &mut rand::thread_rng());
        let (key, target, attempt, error) = (&d.key, d.target, d.attempt, error.as_deref());
        match &outcome {
            Outcome::Delivered { .. } => tracing::debug!(%key, %target, attempt, status, "action delivered"),
            Outcome::Conflict => tracing::debug!(%key, %target, attempt, status, "action already done"),
            // A TLS failure will not cure itself: say so loudly, with the fix, at a bounded rate.
            Outcome::Retry { reason, after } if tls => {
                let host = self.endpoints.url(target).and_then(|u| u.host_str()).unwrap_or_default();
                match self.tls_log_due() {
                    Some(suppressed) => tracing::error!(
                        %key, %target, host, attempt, reason, ?after, error, suppressed,
                        "TLS failure: action stays pending"
                    ),
                    None => tracing::debug!(%key, %target, host, attempt, reason, ?after, error, "TLS failure"),
                }
            }
            Outcome::Retry { reason, after } => {
                tracing::debug!(%key, %target, attempt, status, reason, ?after, error, "action will be retried")
            }
            Outcome::PermanentFailure { body_snippet, .. } => {
                tracing::warn!(%key, %target, attempt, status, body = body_snippet, error, "action failed permanently")
            }
        }
        outcome
    }

    /// `Some(failures not logged since the last error line)` when a TLS failure should be
    /// logged as an error now.
    fn tls_log_due(&self) -> Option<u64> {
        let mut logged = self.tls_logged.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, suppressed) = &mut *logged;
        if last.is_some_and(|at| at.elapsed() < TLS_LOG_EVERY) {
            *suppressed += 1;
            return None;
        }
        *last = Some(Instant::now());
        Some(std::mem::take(suppressed))
    }

    /// Sends the request; `Ok` carries a status that settles the delivery (2xx or 409).
    async fn post(&self, d: &Delivery) -> Result<u16, DispatchError> {
        let url = self.endpoints.url(d.target).ok_or(DispatchError::NoEndpoint(d.target))?;
        let key = HeaderValue::from_str(&d.key).map_err(|_| DispatchError::InvalidKey)?;
        // The permit is held by the caller and taken before the timestamp, so a receiver
        // enforcing a freshness window sees the time the request actually left.
        let timestamp = chrono::Utc::now().timestamp();
        let mut request = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("idempotency-key", key.clone())
            .header("webhook-id", key)
            .header("webhook-timestamp", timestamp)
            .header("tidemark-source-append-time", d.source_append_ms)
            .body(d.body.clone());
        if let Some(signer) = self.signer.current() {
            let mut signature = HeaderValue::try_from(signer.sign(&d.key, timestamp, &d.body))
                .map_err(|_| DispatchError::Transport("signature is not a header value".into()))?;
            signature.set_sensitive(true);
            request = request.header("webhook-signature", signature);
        }
        let timeout = self.endpoints.timeout;
        let mut response = request.send().await.map_err(|e| DispatchError::from_reqwest(e, timeout))?;
        let status = response.status().as_u16();
        match classify_status(status) {
            StatusClass::Delivered | StatusClass::Conflict => {
                // The endpoint has acted: a body cut short must not cause a second POST.
                let _ = read_body(&mut response, 0).await;
                Ok(status)
            }
            StatusClass::Retriable => {
                let body_snippet = read_body(&mut response, SNIPPET_BYTES).await.unwrap_or_default();
                Err(DispatchError::Status { status, body_snippet })
            }
            StatusClass::Permanent => {
                let body_snippet = read_body(&mut response, SNIPPET_BYTES)
                    .await
                    .map_err(|e| DispatchError::from_reqwest(e, timeout))?;
                Err(DispatchError::Status { status, body_snippet })
            }
        }
    }
}

/// Reads up to [`DRAIN_BYTES`] of the body and returns its first `keep` bytes as text.
async fn read_body(response: &mut reqwest::Response, keep: usize) -> Result<String, reqwest::Error> {
    let mut kept = Vec::new();
    let mut read = 0;
    while read < DRAIN_BYTES {
        let Some(chunk) = response.chunk().await? else { break };
        read += chunk.len();
        let room = keep.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
    }
    Ok(String::from_utf8_lossy(&kept).trim().to_string())
}

/// Turns the result of one attempt into an [`Outcome`]. `attempt` counts the attempts made
/// before this one; a retriable failure that uses up `max_attempts` becomes permanent.
pub fn settle(policy: &RetryPolicy, attempt: u32, result: Result<u16, DispatchError>, rng: &mut impl Rng) -> Outcome {
    match result {
        Ok(409) => Outcome::Conflict,
        Ok(status) => Outcome::Delivered { status },
        Err(err) if err.is_retriable() => {
            let attempts_made = attempt.saturating_add(1);
            if policy.exhausted(attempts_made) {
                Outcome::PermanentFailure {
                    status: err.status(),
                    body_snippet: format!("gave up after {attempts_made} attempts, last: {}", err.reason()),
                }
            } else {
                Outcome::Retry { reason: err.reason(), after: policy.backoff(attempt, rng) }
            }
        }
        Err(DispatchError::Status { status, body_snippet }) => Outcome::PermanentFailure { status, body_snippet },
        Err(err) => Outcome::PermanentFailure { status: 0, body_snippet: err.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::dispatch::Target;

    fn status(status: u16) -> Result<u16, DispatchError> {
        Err(DispatchError::Status { status, body_snippet: "nope".into() })
    }

    #[test]
    fn settle_maps_results_to_outcomes() {
        let p = RetryPolicy::default();
        let rng = &mut ChaCha8Rng::seed_from_u64(1);
        assert_eq!(settle(&p, 0, Ok(204), rng), Outcome::Delivered { status: 204 });
        assert_eq!(settle(&p, 0, Ok(409), rng), Outcome::Conflict);
        assert_eq!(
            settle(&p, 0, status(422), rng),
            Outcome::PermanentFailure { status: 422, body_snippet: "nope".into() }
        );
        assert!(matches!(settle(&p, 0, status(503), rng), Outcome::Retry { reason, .. } if reason == "status 503"));
        assert!(matches!(
            settle(&p, 0, Err(DispatchError::Timeout(Duration::from_secs(1))), rng),
            Outcome::Retry { reason, .. } if reason == "timeout"
        ));
        assert!(matches!(
            settle(&p, 0, Err(DispatchError::NoEndpoint(Target::Notify)), rng),
            Outcome::Retry { reason, .. } if reason == "no notify endpoint"
        ));
        assert!(matches!(
            settle(&p, 0, Err(DispatchError::InvalidKey), rng),
            Outcome::PermanentFailure { status: 0, .. }
        ));
    }

    #[test]
    fn a_retry_waits_the_policy_backoff_for_the_attempts_already_made() {
        let p = RetryPolicy::default();
        for attempt in [0, 3, 40] {
            let outcome = settle(&p, attempt, status(500), &mut ChaCha8Rng::seed_from_u64(9));
            let expected = p.backoff(attempt, &mut ChaCha8Rng::seed_from_u64(9));
            assert_eq!(outcome, Outcome::Retry { reason: "status 500".into(), after: expected });
        }
    }

    #[test]
    fn the_last_allowed_attempt_turns_a_retriable_failure_permanent() {
        let p = RetryPolicy { max_attempts: Some(3), ..RetryPolicy::default() };
        let rng = &mut ChaCha8Rng::seed_from_u64(1);
        assert!(matches!(settle(&p, 1, status(503), rng), Outcome::Retry { .. }));
        assert_eq!(
            settle(&p, 2, status(503), rng),
            Outcome::PermanentFailure {
                status: 503,
                body_snippet: "gave up after 3 attempts, last: status 503".into()
            }
        );
        assert!(matches!(
            settle(&p, 2, Err(DispatchError::Timeout(Duration::from_secs(1))), rng),
            Outcome::PermanentFailure { status: 0, .. }
        ));
        assert_eq!(settle(&p, 2, Ok(200), rng), Outcome::Delivered { status: 200 });
    }
}
