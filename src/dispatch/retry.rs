//! Exponential backoff with full jitter.
//!
//! The delay before retry `n` (n = attempts already made) is uniform in
//! `[0, min(cap, base · 2ⁿ)]`. Full jitter spreads a burst of failed deliveries (an
//! endpoint's 5xx storm) over the whole window instead of re-synchronising them.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub cap: Duration,
    /// Attempts after which a retriable failure becomes permanent; `None` retries forever.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { base: Duration::from_millis(200), cap: Duration::from_secs(30), max_attempts: None }
    }
}

impl RetryPolicy {
    /// The upper bound of the jittered delay after `attempt` attempts: `min(cap, base · 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        1u32.checked_shl(attempt).and_then(|factor| self.base.checked_mul(factor)).map_or(self.cap, |d| d.min(self.cap))
    }

    /// A delay drawn uniformly from `[0, ceiling(attempt)]`.
    pub fn backoff(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.gen_range(0..=ceiling))
    }

    /// Whether `attempts_made` attempts use up the budget.
    pub fn exhausted(&self, attempts_made: u32) -> bool {
        self.max_attempts.is_some_and(|max| attempts_made >= max)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn the_ceiling_doubles_per_attempt_until_the_cap() {
        let p = policy();
        let ms: Vec<u128> = (0..10).map(|n| p.ceiling(n).as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000]);
        assert_eq!(p.ceiling(31), p.cap);
        assert_eq!(p.ceiling(32), p.cap, "a shift past the width saturates");
        assert_eq!(p.ceiling(u32::MAX), p.cap);
    }

    #[test]
    fn backoff_is_jittered_within_the_ceiling_and_never_exceeds_the_cap() {
        let p = policy();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for attempt in [0, 1, 2, 5, 8, 20, 1_000, u32::MAX] {
            let samples: Vec<Duration> = (0..500).map(|_| p.backoff(attempt, &mut rng)).collect();
            let ceiling = p.ceiling(attempt);
            assert!(samples.iter().all(|d| *d <= ceiling && *d <= p.cap), "attempt {attempt}");
            let distinct: std::collections::BTreeSet<_> = samples.iter().collect();
            assert!(distinct.len() > 450, "attempt {attempt}: jitter spreads the delays");
            // Full jitter: the draws cover the whole window, low and high.
            assert!(samples.iter().any(|d| *d < ceiling / 10), "attempt {attempt}");
            assert!(samples.iter().any(|d| *d > ceiling * 9 / 10), "attempt {attempt}");
        }
    }

    #[test]
    fn mean_backoff_grows_exponentially_until_the_cap() {
        let p = policy();
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let mean = |attempt: u32, rng: &mut ChaCha8Rng| {
            let total: Duration = (0..2_000).map(|_| p.backoff(attempt, rng)).sum();
            total.as_secs_f64() / 2_000.0
        };
        let means: Vec<f64> = (0..8).map(|n| mean(n, &mut rng)).collect();
        for pair in means.windows(2) {
            let ratio = pair[1] / pair[0];
            assert!((1.8..2.2).contains(&ratio), "means {means:?}");
        }
        let capped = mean(12, &mut rng);
        assert!((capped - 15.0).abs() < 1.0, "mean at the cap is cap/2, got {capped}");
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let p = policy();
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..10).map(|n| p.backoff(n, &mut rng)).collect::<Vec<_>>()
        };
        // The same seed drawn straight from the generator over the documented windows
        // `[0, min(30 s, 200 ms · 2ⁿ)]`, without going through `backoff`.
        let windows_ms: [u64; 10] = [200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000];
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let expected: Vec<Duration> =
            windows_ms.iter().map(|ms| Duration::from_nanos(rng.gen_range(0..=ms * 1_000_000))).collect();
        assert_eq!(draw(3), expected);
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn max_attempts_bounds_the_budget_and_none_retries_forever() {
        assert!(!policy().exhausted(u32::MAX));
        let p = RetryPolicy { max_attempts: Some(3), ..policy() };
        assert!(!p.exhausted(2));
        assert!(p.exhausted(3));
        assert!(p.exhausted(4));
    }
}
