//! The simulated clock: when each order record is due, and RFC 3339 rendering of instants.
//!
//! Only `+ - * /` on `f64` are used (correctly rounded by IEEE 754 on every platform), never
//! `ln`/`powf`, so the schedule is bit-identical on every machine.

use super::Spike;

/// Maps the n-th order record (0-based) to its due offset in ms from the simulated start.
#[derive(Clone, Debug)]
pub(super) struct Clock {
    /// Base rate in records per millisecond.
    per_ms: f64,
    spike: Option<SpikeSpan>,
}

#[derive(Clone, Debug)]
struct SpikeSpan {
    at_ms: f64,
    duration_ms: f64,
    factor: f64,
    /// Records due before the spike starts.
    before: f64,
    /// Records due before the spike ends.
    through: f64,
}

impl Clock {
    pub(super) fn new(rate_per_s: f64, spike: Option<Spike>) -> Clock {
        let per_ms = rate_per_s / 1000.0;
        let spike = spike.map(|s| {
            let at_ms = s.at_s * 1000.0;
            let duration_ms = s.duration_s * 1000.0;
            let before = per_ms * at_ms;
            SpikeSpan {
                at_ms,
                duration_ms,
                factor: s.factor,
                before,
                through: before + s.factor * per_ms * duration_ms,
            }
        });
        Clock { per_ms, spike }
    }

    /// Due offset of record `n`: the inverse of the cumulative count `N(t)`, which grows at
    /// the base rate outside the spike and at `factor ×` the base rate inside it.
    pub(super) fn due_ms(&self, n: u64) -> i64 {
        let n = n as f64;
        let t = match &self.spike {
            Some(s) if n >= s.through => s.at_ms + s.duration_ms + (n - s.through) / self.per_ms,
            Some(s) if n >= s.before => s.at_ms + (n - s.before) / (s.factor * self.per_ms),
            _ => n / self.per_ms,
        };
        // `as` saturates; validation keeps real runs far below i64::MAX.
        t.floor() as i64
    }
}

/// Writes `epoch_ms` as RFC 3339 in the local time of a fixed UTC offset (`Z` for 0).
/// Milliseconds are written when `with_ms` is set. Years must be in 0..=9999.
pub(super) fn push_rfc3339(buf: &mut Vec<u8>, epoch_ms: i64, offset_min: i32, with_ms: bool) {
    let local = epoch_ms + i64::from(offset_min) * 60_000;
    let days = local.div_euclid(86_400_000);
    let in_day = local.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    push_digits(buf, y.clamp(0, 9999) as u64, 4);
    buf.push(b'-');
    push_digits(buf, u64::from(m), 2);
    buf.push(b'-');
    push_digits(buf, u64::from(d), 2);
    buf.push(b'T');
    let secs = in_day / 1000;
    push_digits(buf, (secs / 3600) as u64, 2);
    buf.push(b':');
    push_digits(buf, (secs / 60 % 60) as u64, 2);
    buf.push(b':');
    push_digits(buf, (secs % 60) as u64, 2);
    if with_ms {
        buf.push(b'.');
        push_digits(buf, (in_day % 1000) as u64, 3);
    }
    if offset_min == 0 {
        buf.push(b'Z');
    } else {
        buf.push(if offset_min < 0 { b'-' } else { b'+' });
        let abs = offset_min.unsigned_abs();
        push_digits(buf, u64::from(abs / 60), 2);
        buf.push(b':');
        push_digits(buf, u64::from(abs % 60), 2);
    }
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Writes `n` zero-padded to exactly `width` digits (higher digits are dropped).
pub(super) fn push_digits(buf: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut tmp = [b'0'; 20];
    let width = width.min(tmp.len());
    for slot in tmp[..width].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    buf.extend_from_slice(&tmp[..width]);
}
