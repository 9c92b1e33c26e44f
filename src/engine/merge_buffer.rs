//! A SKU task's merge buffer: the lines and snapshots waiting for their upstreams' promises,
//! kept in logical-time order ([`BufferKey`]).
//!
//! One queue per upstream instead of one ordered map: an upstream sends its records in
//! offset order and, the broker stamping their append times, nearly always in key order too,
//! so a record joins its queue at the back and leaves from the front, and the oldest record
//! of the whole buffer is the lowest of a few queue heads. A record that arrives out of key
//! order (an append time that went back, a row of an earlier version's stored buffer) is
//! placed by a binary search in its queue. What the buffer answers is exactly what an ordered
//! map of the same keys answers (`tests::answers_like_an_ordered_map`); only its cost
//! differs: the map (`BTreeMap`) searched and shifted ~100-byte entries per insert and per
//! removal, 4–5 % of a drain's CPU (profile of ec4549d).

use std::collections::VecDeque;

use tidemark_topology::logical::LogicalTime;

use super::sku_phase::Upstream;

/// Where a line or snapshot waits: its logical time, then its index in its event (0 for a
/// snapshot).
pub(super) type BufferKey = (LogicalTime, u32);

/// The waiting records of one upstream, in key order.
struct Queue<V> {
    upstream: Upstream,
    items: VecDeque<(BufferKey, V)>,
}

impl<V> Queue<V> {
    /// The index of `key`, or where it would go.
    fn find(&self, key: &BufferKey) -> Result<usize, usize> {
        // Nearly every lookup is of a record near the back (the newest): look there first.
        match self.items.back() {
            None => Err(0),
            Some((last, _)) if last < key => Err(self.items.len()),
            Some((last, _)) if last == key => Ok(self.items.len() - 1),
            Some(_) => self.items.binary_search_by(|(k, _)| k.cmp(key)),
        }
    }
}

/// Records in key order, one queue per upstream.
pub(super) struct MergeBuffer<V> {
    queues: Vec<Queue<V>>,
    len: usize,
}

impl<V> Default for MergeBuffer<V> {
    fn default() -> Self {
        MergeBuffer { queues: Vec::new(), len: 0 }
    }
}

impl<V> MergeBuffer<V> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn queue(&self, upstream: Upstream) -> Option<&Queue<V>> {
        self.queues.iter().find(|q| q.upstream == upstream)
    }

    fn queue_mut(&mut self, upstream: Upstream) -> Option<&mut Queue<V>> {
        self.queues.iter_mut().find(|q| q.upstream == upstream)
    }

    /// Puts `value` at `key`; returns the value that was there, if any.
    pub(super) fn insert(&mut self, key: BufferKey, value: V) -> Option<V> {
        let upstream = key.0.upstream();
        let q = match self.queues.iter().position(|q| q.upstream == upstream) {
            Some(i) => &mut self.queues[i],
            None => {
                self.queues.push(Queue { upstream, items: VecDeque::new() });
                let last = self.queues.len() - 1;
                &mut self.queues[last]
            }
        };
        match q.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut q.items[i].1, value)),
            Err(i) => {
                q.items.insert(i, (key, value));
                self.len += 1;
                None
            }
        }
    }

    pub(super) fn contains_key(&self, key: &BufferKey) -> bool {
        self.queue(key.0.upstream()).is_some_and(|q| q.find(key).is_ok())
    }

    pub(super) fn get_mut(&mut self, key: &BufferKey) -> Option<&mut V> {
        let q = self.queue_mut(key.0.upstream())?;
        let i = q.find(key).ok()?;
        Some(&mut q.items[i].1)
    }

    /// The index of the queue whose head is the lowest key of all.
    fn lowest_queue(&self) -> Option<usize> {
        let mut lowest: Option<(usize, &BufferKey)> = None;
        for (i, q) in self.queues.iter().enumerate() {
            if let Some((k, _)) = q.items.front() {
                if lowest.is_none_or(|(_, l)| k < l) {
                    lowest = Some((i, k));
                }
            }
        }
        lowest.map(|(i, _)| i)
    }

    /// Removes and returns the lowest record when its logical time is below `bound`.
    pub(super) fn pop_below(&mut self, bound: LogicalTime) -> Option<(BufferKey, V)> {
        let i = self.lowest_queue()?;
        let q = &mut self.queues[i];
        if q.items.front().is_none_or(|(k, _)| k.0 >= bound) {
            return None;
        }
        let popped = q.items.pop_front();
        if popped.is_some() {
            self.len -= 1;
        }
        popped
    }

    /// The highest key.
    pub(super) fn last_key(&self) -> Option<BufferKey> {
        self.queues.iter().filter_map(|q| q.items.back().map(|(k, _)| *k)).max()
    }

    /// The records at or above `from` (all with `None`), in key order.
    pub(super) fn range_from(&self, from: Option<BufferKey>) -> Range<'_, V> {
        let cursors = self
            .queues
            .iter()
            .map(|q| match from {
                None => 0,
                Some(from) => q.items.partition_point(|(k, _)| *k < from),
            })
            .collect();
        Range { buffer: self, cursors }
    }

    /// Every record, in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.queues.iter().flat_map(|q| q.items.iter().map(|(_, v)| v))
    }
}

/// [`MergeBuffer::range_from`]: the queues merged by their next keys.
pub(super) struct Range<'a, V> {
    buffer: &'a MergeBuffer<V>,
    /// Per queue, the index of its next record.
    cursors: Vec<usize>,
}

impl<'a, V> Iterator for Range<'a, V> {
    type Item = (&'a BufferKey, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        let mut lowest: Option<(usize, &'a (BufferKey, V))> = None;
        for (i, q) in self.buffer.queues.iter().enumerate() {
            if let Some(item) = q.items.get(self.cursors[i]) {
                if lowest.is_none_or(|(_, l)| item.0 < l.0) {
                    lowest = Some((i, item));
                }
            }
        }
        let (i, (k, v)) = lowest?;
        self.cursors[i] += 1;
        Some((k, v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn key(rng: &mut ChaCha8Rng, clock: &mut [i64; 3]) -> BufferKey {
        let u = rng.gen_range(0..3usize);
        // Mostly forward in time per upstream; now and then back (an append time that went
        // back) or far back (a stored row of an earlier version).
        clock[u] += match rng.gen_range(0..20) {
            0 => -rng.gen_range(0..50),
            1 => -rng.gen_range(0..5_000),
            _ => rng.gen_range(0..3),
        };
        let source = if u == 2 { 1 } else { 0 };
        let lt = LogicalTime::new(clock[u], source, u as i32, rng.gen_range(0..40));
        (lt, rng.gen_range(0..3))
    }

    #[test]
    fn answers_like_an_ordered_map() {
        for seed in 0..300u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut clock = [10_000i64; 3];
            let mut model: BTreeMap<BufferKey, u32> = BTreeMap::new();
            let mut buffer: MergeBuffer<u32> = MergeBuffer::default();
            let mut seen: Vec<BufferKey> = Vec::new();
            for step in 0..400u32 {
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let k = key(&mut rng, &mut clock);
                        seen.push(k);
                        assert_eq!(buffer.insert(k, step), model.insert(k, step), "seed {seed} insert {k:?}");
                    }
                    5 => {
                        let pick = seen.get(rng.gen_range(0..seen.len().max(1))).copied();
                        if let Some(k) = pick {
                            assert_eq!(buffer.contains_key(&k), model.contains_key(&k), "seed {seed}");
                            if let (Some(b), Some(m)) = (buffer.get_mut(&k), model.get_mut(&k)) {
                                *b += 1;
                                *m += 1;
                            }
                        }
                    }
                    6 | 7 => {
                        let bound = LogicalTime::new(clock[rng.gen_range(0..3usize)] - rng.gen_range(0..20), 0, 1, 7);
                        loop {
                            let expected = match model.first_key_value() {
                                Some((k, _)) if k.0 < bound => model.pop_first(),
                                _ => None,
                            };
                            let got = buffer.pop_below(bound);
                            assert_eq!(got, expected, "seed {seed} pop below {bound:?}");
                            if got.is_none() {
                                break;
                            }
                        }
                    }
                    8 => {
                        let from = seen.get(rng.gen_range(0..seen.len().max(1))).copied();
                        let lower = from.map_or(Bound::Unbounded, Bound::Included);
                        let want: Vec<_> = model.range((lower, Bound::Unbounded)).collect();
                        let got: Vec<_> = buffer.range_from(from).collect();
                        assert_eq!(got, want, "seed {seed} range from {from:?}");
                    }
                    _ => {
                        assert_eq!(buffer.last_key(), model.keys().next_back().copied(), "seed {seed}");
                        let mut values: Vec<u32> = buffer.values().copied().collect();
                        values.sort_unstable();
                        let mut want: Vec<u32> = model.values().copied().collect();
                        want.sort_unstable();
                        assert_eq!(values, want, "seed {seed}");
                    }
                }
                assert_eq!(buffer.len(), model.len(), "seed {seed}");
                assert_eq!(buffer.is_empty(), model.is_empty(), "seed {seed}");
            }
        }
    }

    #[test]
    fn the_lowest_record_of_all_queues_leaves_first_and_only_below_the_bound() {
        let lt = |ms, partition, offset| LogicalTime::new(ms, 0, partition, offset);
        let mut buffer = MergeBuffer::default();
        buffer.insert((lt(5, 0, 1), 0), "a5");
        buffer.insert((lt(3, 1, 9), 1), "b3/1");
        buffer.insert((lt(3, 1, 9), 0), "b3/0");
        buffer.insert((lt(4, 0, 0), 0), "a4 (arrived late)");
        assert_eq!(buffer.pop_below(lt(4, 0, 0)).map(|r| r.1), Some("b3/0"));
        assert_eq!(buffer.pop_below(lt(4, 0, 0)).map(|r| r.1), Some("b3/1"));
        assert_eq!(buffer.pop_below(lt(4, 0, 0)), None, "a4 is not below the bound");
        assert_eq!(buffer.last_key(), Some((lt(5, 0, 1), 0)));
        let order: Vec<&str> = buffer.range_from(None).map(|(_, v)| *v).collect();
        assert_eq!(order, ["a4 (arrived late)", "a5"]);
        assert_eq!(buffer.len(), 2);
    }
}
