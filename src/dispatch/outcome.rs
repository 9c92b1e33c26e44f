//! What one attempt means for an outbox row, and the pure mapping from HTTP status to it.

use std::time::Duration;

/// The result of one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: the endpoint acted. The row is done.
    Delivered { status: u16 },
    /// 409: the endpoint had already acted on this key. The row is done.
    Conflict,
    /// Trying again cannot help (4xx other than 408/409/429, 3xx, or retries exhausted):
    /// dead-letter and audit. `status` is 0 when no response arrived.
    PermanentFailure { status: u16, body_snippet: String },
    /// Try again no sooner than `after`. `reason` is short and bounded: `status 503`,
    /// `timeout`, `connection reset`, ...
    Retry { reason: String, after: Duration },
}

impl Outcome {
    /// The metric label: `delivered`, `conflict`, `retry` or `permanent_failure`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Delivered { .. } => "delivered",
            Outcome::Conflict => "conflict",
            Outcome::Retry { .. } => "retry",
            Outcome::PermanentFailure { .. } => "permanent_failure",
        }
    }

    /// Whether the outbox row is finished with successfully (2xx or 409).
    pub fn is_done(&self) -> bool {
        matches!(self, Outcome::Delivered { .. } | Outcome::Conflict)
    }
}

/// How an HTTP status settles a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    Delivered,
    Conflict,
    Retriable,
    Permanent,
}

/// 2xx delivered; 409 conflict (already done); 5xx, 408 (request timeout) and 429 (rate
/// limited) retriable, since a spike must not dead-letter actions the endpoint merely
/// deferred; every other status permanent. Redirects are not followed (a POST turned into
/// a GET would drop the action), so 3xx is a misconfigured URL and permanent too.
pub fn classify_status(status: u16) -> StatusClass {
    match status {
        200..=299 => StatusClass::Delivered,
        409 => StatusClass::Conflict,
        408 | 429 | 500..=599 => StatusClass::Retriable,
        _ => StatusClass::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_classify_as_the_spec_says() {
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(classify_status(s), StatusClass::Delivered, "{s}");
        }
        assert_eq!(classify_status(409), StatusClass::Conflict);
        for s in [400, 401, 403, 404, 410, 413, 422, 301, 302, 307, 100] {
            assert_eq!(classify_status(s), StatusClass::Permanent, "{s}");
        }
        for s in [500, 502, 503, 504, 599, 408, 429] {
            assert_eq!(classify_status(s), StatusClass::Retriable, "{s}");
        }
    }

    #[test]
    fn labels_are_the_four_metric_outcomes() {
        let outcomes = [
            Outcome::Delivered { status: 200 },
            Outcome::Conflict,
            Outcome::Retry { reason: "timeout".into(), after: Duration::ZERO },
            Outcome::PermanentFailure { status: 400, body_snippet: String::new() },
        ];
        let labels: Vec<_> = outcomes.iter().map(Outcome::label).collect();
        assert_eq!(labels, crate::telemetry::events::DISPATCH_OUTCOMES);
    }
}
