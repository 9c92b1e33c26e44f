//! Which SKU partitions the dispatcher may still send for, and the attempts under way in each.
//!
//! When a rebalance takes a SKU partition away, the stream thread closes the gate for it and
//! waits for the attempts under way to record their outcome before it hands the partition's
//! state over ([`Gate::release`]). The next owner then finds every acknowledged action
//! recorded as such, and sends again only what was never acknowledged: a move re-sends
//! nothing, as no crash happened.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Owned;

pub struct Gate {
    owned: Owned,
    attempting: Mutex<HashMap<i32, usize>>,
}

/// One attempt under way, from before its POST until its outcome is stored.
pub struct Attempt<'a> {
    gate: &'a Gate,
    partition: i32,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Ok(mut a) = self.gate.attempting.lock() {
            if let Some(n) = a.get_mut(&self.partition) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

impl Gate {
    pub fn new(owned: Owned) -> Self {
        Gate { owned, attempting: Mutex::default() }
    }

    /// An attempt for a row of SKU partition `partition`, if this process still owns it.
    pub fn enter(&self, partition: i32) -> Option<Attempt<'_>> {
        let mut attempting = self.attempting.lock().ok()?;
        if !self.owned.lock().ok()?.contains(&partition) {
            return None;
        }
        *attempting.entry(partition).or_default() += 1;
        Some(Attempt { gate: self, partition })
    }

    /// Closes the gate for `partitions` (no new attempt starts) and waits, blocking, up to
    /// `limit` for the attempts under way to end. Returns the partitions still busy then.
    pub fn release(&self, partitions: &[i32], limit: Duration) -> Vec<i32> {
        if let (Ok(_attempting), Ok(mut owned)) = (self.attempting.lock(), self.owned.lock()) {
            for p in partitions {
                owned.remove(p);
            }
        }
        let started = Instant::now();
        loop {
            let busy: Vec<i32> = match self.attempting.lock() {
                Ok(a) => partitions.iter().copied().filter(|p| a.get(p).is_some_and(|n| *n > 0)).collect(),
                Err(_) => return partitions.to_vec(),
            };
            if busy.is_empty() || started.elapsed() >= limit {
                return busy;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn gate(owned: &[i32]) -> Arc<Gate> {
        let set: Owned = Arc::default();
        set.lock().unwrap().extend(owned.iter().copied());
        Arc::new(Gate::new(set))
    }

    #[test]
    fn no_attempt_starts_for_a_partition_that_is_not_owned_or_was_released() {
        let g = gate(&[1]);
        assert!(g.enter(2).is_none());
        assert!(g.enter(1).is_some());
        assert!(g.release(&[1], Duration::ZERO).is_empty());
        assert!(g.enter(1).is_none());
    }

    #[test]
    fn a_release_waits_for_the_attempt_under_way_to_end() {
        let g = gate(&[3]);
        let attempt = g.enter(3).expect("owned");
        assert_eq!(g.release(&[3], Duration::from_millis(30)), vec![3], "still busy after the limit");
        let g2 = Arc::clone(&g);
        let waiter = std::thread::spawn(move || g2.release(&[3], Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(50));
        drop(attempt);
        assert!(waiter.join().unwrap().is_empty(), "released once the attempt ended");
    }
}
