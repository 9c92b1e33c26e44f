//! Microbatch metrics (`tidemark_microbatch_*`): one per slice, and the deadline misses.

use std::time::Duration;

use metrics::{counter, gauge, histogram};

/// Makes the deadline-miss series exist (at 0), so its rate reads 0 rather than no data.
pub fn started() {
    counter!("tidemark_microbatch_deadline_misses_total").absolute(0);
}

/// A slice: how long it ran, the staleness bound it kept, and whether it kept its deadline.
pub fn slice(took: Duration, staleness: Duration, within_deadline: bool) {
    histogram!("tidemark_microbatch_slice_seconds").record(took.as_secs_f64());
    counter!("tidemark_microbatch_slices_total").increment(1);
    gauge!("tidemark_microbatch_staleness_bound_seconds").set(staleness.as_secs_f64());
    if !within_deadline {
        counter!("tidemark_microbatch_deadline_misses_total").increment(1);
    }
}
