//! One source partition's processing: normalise, deduplicate, window, aggregate (dashboard
//! windows and provisional finance days).
//!
//! A task works in two steps per commit interval:
//! 1. [`OrdersTask::ingest`] each polled record in offset order: normalise it (bad input
//!    goes to the dead-letter output at once), advance the watermark, decide lateness, and
//!    keep the event pending.
//! 2. [`OrdersTask::finish`] at the commit point: look up every pending event id in one
//!    batched read, apply the new events to the in-memory aggregates, emit the changed
//!    aggregates, expire windows past retention, and stage all of it plus the new checkpoint
//!    into the commit batch.
//!
//! Every decision depends only on the records and their order within the partition, never on
//! where a commit interval happened to end, so a replay after a crash reproduces the same
//! state, versions and outputs.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use compact_str::CompactString;
use tidemark_state::{codec, Checkpoint, Namespace, PartitionId, StateError, StateView, StateWrite, Store};
use tidemark_topology::config::Topology;
use tidemark_topology::dashboard::{self, DashAgg, DashKey};
use tidemark_topology::event::{CanonicalEvent, EventKind};
use tidemark_topology::finance;
use tidemark_topology::logical::LogicalTime;
use tidemark_topology::normalize::{normalize_order_with, NormalizeLimits};
use tidemark_topology::provisional::{self, DayCalendar, ProvAgg, ProvKey, ProvisionalRecord};
use tidemark_topology::window::{window_start, Watermark, WindowPolicy};

use super::derive::{mark, sku_partition, Derived};
use super::output::{OutputRecord, Sink};
use super::record::SourceRecord;
use super::stats::Stats;

/// What a task needs from the topology.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub topic: String,
    pub window: WindowPolicy,
    pub dedup_retention_ms: i64,
    /// Partitions of the SKU repartition topic; 0 turns the inventory path off.
    pub sku_partitions: i32,
    /// Business days of provisional finance are dates in this zone.
    pub finance_tz: chrono_tz::Tz,
    /// The topology's normalisation limits (identifier length), shared by every mode.
    pub limits: NormalizeLimits,
    /// Whether a stream may hold changed rows back between publications
    /// (`state.publish_interval` above 0): a restored task then publishes every live row
    /// again, since its last owner may have committed changes it had not published yet.
    pub publish_deferred: bool,
}

impl TaskConfig {
    /// The one way a mode builds its task configuration from the topology; `sku_partitions`
    /// is the repartition topic's count (0 in modes without the inventory path).
    pub fn from_topology(t: &Topology, sku_partitions: i32) -> TaskConfig {
        TaskConfig {
            topic: t.orders.topic.clone(),
            window: t.dashboard_window,
            dedup_retention_ms: t.dedup_retention_ms,
            sku_partitions,
            finance_tz: t.finance_time_zone,
            limits: t.normalize,
            publish_deferred: t.publish_interval_ms > 0,
        }
    }

    /// The shipped example topology's configuration without the inventory path (1-minute
    /// windows, 2 m grace, 7 h retention, 7 d dedup, Tokyo days): what engine unit tests run.
    #[cfg(test)]
    pub fn example() -> TaskConfig {
        use tidemark_topology::config::{parse, EXAMPLE};
        TaskConfig::from_topology(&parse(EXAMPLE, "orders.toml").expect("the example topology validates"), 0)
    }
}

struct Pending {
    event: CanonicalEvent,
    append_ms: i64,
    offset: i64,
    /// Running maximum of append times in this partition up to this record.
    effective_append_ms: i64,
    /// Original bytes and offset, kept only when the event is beyond retention (rare).
    late: Option<(Option<Vec<u8>>, Vec<u8>, i64)>,
}

/// The most pending events whose room a task keeps from one batch to the next (~260 bytes
/// each). A commit's batch holds at most `state.max_batch_records` records (20,000 by
/// default), so the room kept is what the largest batch of a partition needed; the room of a
/// larger configured batch is let go after each finish.
const PENDING_KEPT: usize = 1 << 16;

/// First-seen append times by event id, for a batch or the commits in flight. Ids come from
/// the input: the hasher (foldhash) is randomly seeded, not a fixed function.
type IdMap<K> = HashMap<K, i64, foldhash::fast::RandomState>;

/// A live aggregate: `dirty` until its state is staged (every finish), `unpublished` until
/// its row is emitted (a finish that publishes, or the one that expires it).
struct Entry<A> {
    agg: A,
    dirty: bool,
    unpublished: bool,
}

pub struct OrdersTask {
    id: PartitionId,
    cfg: TaskConfig,
    checkpoint: Checkpoint,
    watermark: Watermark,
    pending: Vec<Pending>,
    aggs: BTreeMap<DashKey, Entry<DashAgg>>,
    days: BTreeMap<ProvKey, Entry<ProvAgg>>,
    calendar: DayCalendar,
    uncommitted: bool,
    /// Ids applied by earlier [`OrdersTask::finish`] calls whose batch is not committed
    /// yet; `Some` only when several finishes share one commit (micro-batch slices).
    held_dedup: Option<IdMap<CompactString>>,
    /// The ids the last [`OrdersTask::finish`] put, with their append times: the stream
    /// thread finishes a batch while the one before it is still being written (the store
    /// cannot answer for those ids yet), and one batch at most is in flight. Replaced by
    /// every finish; the strings are the events' own, moved, not copied.
    in_flight_dedup: IdMap<CompactString>,
    /// Indexes of the pending events a finish put (reused).
    put: Vec<usize>,
    /// Whether the next finish emits the rows of changed aggregates ([`OrdersTask::publish`]).
    publishing: bool,
    /// Whether some aggregate's row is not emitted yet.
    unpublished: bool,
}

/// Whether every window of business `day` has expired at watermark `wm`: its row can never
/// change again.
fn day_expired(calendar: &DayCalendar, window: &WindowPolicy, day: NaiveDate, size_ms: i64, wm: Option<i64>) -> bool {
    let last_window = calendar.day_end_ms(day).map(|end| window_start(end - 1, size_ms));
    last_window.is_some_and(|start| window.expired(start, wm))
}

impl OrdersTask {
    /// Rebuilds the task from its last checkpoint: progress and every live aggregate.
    pub fn restore<S: StateView + ?Sized>(store: &S, id: PartitionId, cfg: TaskConfig) -> Result<Self, StateError> {
        let checkpoint = store.checkpoint(id)?.unwrap_or_default();
        let mut aggs = BTreeMap::new();
        for (k, v) in store.load_aggregates(id, Namespace::Dashboard)? {
            let key: DashKey = codec::decode("dashboard key", &k)?;
            let agg: DashAgg = codec::decode("dashboard aggregate", &v)?;
            aggs.insert(key, Entry { agg, dirty: false, unpublished: cfg.publish_deferred });
        }
        let mut days = BTreeMap::new();
        for (k, v) in store.load_aggregates(id, Namespace::Finance)? {
            let key: ProvKey = codec::decode("finance key", &k)?;
            let agg: ProvAgg = codec::decode("finance row", &v)?;
            days.insert(key, Entry { agg, dirty: false, unpublished: cfg.publish_deferred });
        }
        let unpublished = cfg.publish_deferred && !(aggs.is_empty() && days.is_empty());
        Ok(OrdersTask {
            publishing: true,
            unpublished,
            calendar: DayCalendar::new(cfg.finance_tz),
            id,
            cfg,
            watermark: Watermark::from_max_event(checkpoint.max_event_ms),
            checkpoint,
            pending: Vec::new(),
            aggs,
            days,
            uncommitted: false,
            held_dedup: None,
            in_flight_dedup: IdMap::default(),
            put: Vec::new(),
        })
    }

    /// Adds what the task holds in memory to `held` (see [`crate::engine::held`]).
    pub fn held(&self, held: &mut crate::engine::held::Held) {
        held.add("dashboard_windows", self.aggs.len());
        held.add("provisional_days", self.days.len());
    }

    pub fn id(&self) -> PartitionId {
        self.id
    }

    /// The next offset this task expects; records below it are already in the state.
    pub fn next_offset(&self) -> i64 {
        self.checkpoint.next_offset
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// True when records were ingested since the last [`OrdersTask::finish`].
    pub fn has_uncommitted(&self) -> bool {
        self.uncommitted
    }

    /// Moves the checkpoint past offsets that carried nothing to apply (see
    /// [`Checkpoint::skip_to`]); the next commit persists it.
    pub fn skip_to(&mut self, offset: i64) {
        if self.checkpoint.skip_to(offset) {
            self.uncommitted = true;
        }
    }

    /// Step 1 for one record. Returns `false` when the record was already processed or is a
    /// fence (no input record: nothing to count).
    /// Events ingested and not finished yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn ingest(&mut self, rec: SourceRecord<'_>, out: &mut Vec<OutputRecord>, stats: &Stats) -> bool {
        if tidemark_topology::fence::is_fence(rec.value) {
            // No event: only the promise its append time carries (the next mark). The
            // checkpoint moves past it, so lag and backlog age (measured from the committed
            // checkpoint) do not count fences as records waiting.
            if self.checkpoint.pass_fence(rec.offset, rec.append_ms) {
                self.uncommitted = true;
            }
            return false;
        }
        if !self.checkpoint.advance(rec.offset, rec.append_ms) {
            return false;
        }
        self.uncommitted = true;
        Stats::add(&stats.records, 1);
        let source = (self.cfg.topic.as_str(), self.id.partition, rec.offset, rec.append_ms);
        let value = rec.value.unwrap_or_default();
        let event = match normalize_order_with(rec.value, rec.append_ms, self.cfg.limits) {
            Ok(event) => event,
            Err(rejection) => {
                stats.dead_lettered(rejection.reason);
                out.push(OutputRecord::side_output(
                    Sink::DeadLetter,
                    source,
                    rec.key,
                    value,
                    rejection.reason.as_str(),
                    rejection.detail,
                ));
                return true;
            }
        };
        // Lateness is judged against the watermark before this event, so it depends only on
        // the events before it in the partition.
        let wm = self.watermark.value(self.cfg.window.allowed_lateness_ms);
        let start = window_start(event.event_time_ms, self.cfg.window.size_ms);
        let late =
            self.cfg.window.expired(start, wm).then(|| (rec.key.map(<[u8]>::to_vec), value.to_vec(), rec.offset));
        self.watermark.observe(event.event_time_ms);
        self.pending.push(Pending {
            event,
            append_ms: rec.append_ms,
            offset: rec.offset,
            effective_append_ms: self.checkpoint.max_append_ms,
            late,
        });
        true
    }

    /// Whether the next finishes emit the rows of the aggregates that changed (the default),
    /// or only stage their state and hold the rows back until a finish that does: the
    /// stream publishes once per `state.publish_interval`. A row is never held past the
    /// finish that expires its aggregate.
    pub fn publish(&mut self, on: bool) {
        self.publishing = on;
    }

    /// Whether a finish that publishes would emit rows held back.
    pub fn has_unpublished(&self) -> bool {
        self.unpublished
    }

    /// Step 2: dedup, apply, emit and stage the commit. Clears the pending events.
    pub fn finish<S: StateView + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
        out: &mut Vec<OutputRecord>,
        stats: &Stats,
    ) -> Result<(), StateError> {
        self.uncommitted = false;
        let mut pending = std::mem::take(&mut self.pending);
        let ids: Vec<&str> = pending.iter().map(|p| p.event.event_id.as_str()).collect();
        let stored = store.dedup_lookup(self.id, &ids)?;
        let mut seen_now: IdMap<&str> = IdMap::with_capacity_and_hasher(pending.len(), Default::default());
        let size_ms = self.cfg.window.size_ms;
        let mut put = std::mem::take(&mut self.put);
        put.clear();
        for (i, (p, first_seen)) in pending.iter().zip(stored).enumerate() {
            let id = p.event.event_id.as_str();
            let held = self.held_dedup.as_ref().and_then(|h| h.get(id).copied());
            let in_flight = self.in_flight_dedup.get(id).copied();
            let first_seen = seen_now.get(id).copied().or(held).or(in_flight).or(first_seen);
            if finance::is_duplicate(first_seen, p.append_ms, self.cfg.dedup_retention_ms) {
                Stats::add(&stats.dedup_hits, 1);
                continue;
            }
            seen_now.insert(id, p.append_ms);
            put.push(i);
            batch.put_dedup(self.id, id, p.append_ms);
            if let Some((key, value, offset)) = &p.late {
                Stats::add(&stats.late, 1);
                out.push(OutputRecord::side_output(
                    Sink::Late,
                    (self.cfg.topic.as_str(), self.id.partition, *offset, p.append_ms),
                    key.as_deref(),
                    value,
                    "beyond_retention",
                    format!("event time {} is past window retention", dashboard::rfc3339_ms(p.event.event_time_ms)),
                ));
                continue;
            }
            Stats::add(&stats.events_applied, 1);
            if let Some(key) = dashboard::key_for(&p.event, size_ms) {
                let entry = self.aggs.entry(key).or_insert_with(|| Entry {
                    agg: DashAgg::default(),
                    dirty: false,
                    unpublished: false,
                });
                dashboard::apply(&mut entry.agg, &p.event, p.append_ms);
                entry.dirty = true;
            }
            if let Some(key) = provisional::key_for(&p.event, &mut self.calendar) {
                let entry = self.days.entry(key).or_insert_with(|| Entry {
                    agg: ProvAgg::default(),
                    dirty: false,
                    unpublished: false,
                });
                entry.agg.apply(&p.event, p.append_ms);
                entry.dirty = true;
            }
        }

        if let Some(held) = &mut self.held_dedup {
            held.extend(seen_now.into_iter().map(|(id, t)| (CompactString::from(id), t)));
        } else {
            drop(seen_now);
        }
        drop(ids);
        // In put order: an id put twice in this batch (seen again past the retention) keeps
        // its later time, as the store would. The applied events' lines go to their SKUs in
        // the same pass, where the events are ours to take apart: each line's SKU string
        // moves into its repartition record (no copy).
        self.in_flight_dedup.clear();
        out.reserve(put.iter().map(|i| pending[*i].event.lines.len()).sum());
        for i in &put {
            let p = &mut pending[*i];
            if p.late.is_none() {
                self.derive_lines(p, out);
            }
            self.in_flight_dedup.insert(std::mem::take(&mut p.event.event_id), p.append_ms);
        }
        self.put = put;

        // Rows of aggregates that expire in this finish are emitted now, published or not.
        let wm = self.watermark.value(self.cfg.window.allowed_lateness_ms);
        let mut held_back = false;
        for (key, entry) in self.aggs.iter_mut().filter(|(_, e)| e.dirty || e.unpublished) {
            if entry.dirty {
                entry.dirty = false;
                entry.unpublished = true;
                batch.put_aggregate(self.id, Namespace::Dashboard, &codec::encode(key)?, &codec::encode(&entry.agg)?);
            }
            if !self.publishing && !self.cfg.window.expired(key.window_start_ms, wm) {
                held_back = true;
                continue;
            }
            entry.unpublished = false;
            out.push(OutputRecord {
                sink: Sink::Dashboard,
                key: Some(dashboard::record_key(key, self.id.partition).into_bytes()),
                value: dashboard::record_bytes(key, self.id.partition, &entry.agg, size_ms),
                headers: Vec::new(),
                partition: None,
                handed: None,
            });
        }

        for (key, entry) in self.days.iter_mut().filter(|(_, e)| e.dirty || e.unpublished) {
            if entry.dirty {
                entry.dirty = false;
                entry.unpublished = true;
                batch.put_aggregate(self.id, Namespace::Finance, &codec::encode(key)?, &codec::encode(&entry.agg)?);
            }
            if !self.publishing && !day_expired(&self.calendar, &self.cfg.window, key.day, size_ms, wm) {
                held_back = true;
                continue;
            }
            entry.unpublished = false;
            out.push(OutputRecord {
                sink: Sink::Finance,
                key: Some(provisional::record_key(key, self.id.partition).into_bytes()),
                value: ProvisionalRecord::new(key, self.id.partition, &entry.agg).to_bytes(),
                headers: Vec::new(),
                partition: None,
                handed: None,
            });
        }

        self.unpublished = held_back;
        while let Some(entry) = self.aggs.first_entry() {
            if !self.cfg.window.expired(entry.key().window_start_ms, wm) {
                break;
            }
            batch.delete_aggregate(self.id, Namespace::Dashboard, &codec::encode(entry.key())?);
            entry.remove();
        }
        // A day's row is dropped once its last window has expired: every later event of that
        // day goes to the late output, so the row can never change again.
        while let Some(entry) = self.days.first_entry() {
            if !day_expired(&self.calendar, &self.cfg.window, entry.key().day, size_ms, wm) {
                break;
            }
            batch.delete_aggregate(self.id, Namespace::Finance, &codec::encode(entry.key())?);
            entry.remove();
        }

        self.checkpoint.max_event_ms = self.watermark.max_event_ms();
        batch.put_checkpoint(self.id, &self.checkpoint)?;
        // The next batch's events go into this one's room: growing a new vector by doubling
        // moved every event several times per batch (~1 % of a drain's CPU).
        pending.clear();
        if pending.capacity() <= PENDING_KEPT {
            self.pending = pending;
        }
        Ok(())
    }

    /// Forwards the lines of an applied placed/cancelled event to the SKU that owns them,
    /// taking their SKU strings (the event is dropped after its finish).
    fn derive_lines(&self, p: &mut Pending, out: &mut Vec<OutputRecord>) {
        let placed = match p.event.kind {
            EventKind::Placed => true,
            EventKind::Cancelled => false,
            EventKind::Shipped | EventKind::Refunded => return,
        };
        if self.cfg.sku_partitions <= 0 {
            return;
        }
        let lt = LogicalTime::new(p.effective_append_ms, self.id.source, self.id.partition, p.offset);
        for (idx, line) in p.event.lines.iter_mut().enumerate() {
            let partition = sku_partition(&line.sku, self.cfg.sku_partitions);
            let d = Derived::Line {
                lt,
                idx: u32::try_from(idx).unwrap_or(u32::MAX),
                sku: std::mem::take(&mut line.sku),
                placed,
                qty: line.qty,
                event_ms: p.event.event_time_ms,
                append_ms: p.append_ms,
            };
            out.push(OutputRecord::derived(d, partition));
        }
    }

    /// Lets several [`OrdersTask::finish`] calls stage into one commit batch (a
    /// micro-batch slice): ids applied by an earlier call are remembered in memory until
    /// [`OrdersTask::release_held`], since the store cannot see them before the commit.
    pub fn hold_dedup_until_commit(&mut self) {
        self.held_dedup.get_or_insert_with(IdMap::default);
    }

    /// After the shared batch is committed: the store now answers for the held ids.
    pub fn release_held(&mut self) {
        if let Some(held) = &mut self.held_dedup {
            held.clear();
        }
    }

    /// This upstream's progress promise for the SKU merge (see [`super::derive`]).
    pub fn mark(&self, idle_bound_ms: Option<i64>) -> Derived {
        mark(self.id, &self.checkpoint, idle_bound_ms)
    }

    /// After the batch is durable: allow compaction to drop dedup entries that can never
    /// match again. Append times may step back a little (leader change, clock correction),
    /// hence the margin: a tenth of the retention, at most an hour (an hour on a 7-day
    /// retention; a minute on the 10-minute retention of the soak (`bench/run soak`), whose
    /// state would otherwise grow for 70 minutes before the first entry could go).
    pub fn committed(&self, store: &Store) {
        store.set_dedup_horizon(self.id, self.dedup_horizon());
    }

    /// The horizon [`OrdersTask::committed`] sets, for the checkpoint as of now: read it
    /// right after [`OrdersTask::finish`] to apply it once that batch is durable.
    pub fn dedup_horizon(&self) -> i64 {
        dedup_expiry_horizon(self.checkpoint.max_append_ms, self.cfg.dedup_retention_ms)
    }
}

/// Dedup entries first seen before this append time may be dropped by compaction: the
/// retention behind the highest append time so far, less a margin for append times that step
/// back (a tenth of the retention, at most an hour).
fn dedup_expiry_horizon(max_append_ms: i64, retention_ms: i64) -> i64 {
    const MAX_APPEND_TIME_MARGIN_MS: i64 = 3_600_000;
    max_append_ms - retention_ms - (retention_ms / 10).min(MAX_APPEND_TIME_MARGIN_MS)
}

#[cfg(test)]
mod horizon_tests {
    use super::dedup_expiry_horizon;

    const MIN: i64 = 60_000;

    #[test]
    fn a_week_of_retention_keeps_entries_an_hour_longer() {
        assert_eq!(
            dedup_expiry_horizon(100_000 * MIN, 7 * 24 * 60 * MIN),
            100_000 * MIN - 7 * 24 * 60 * MIN - 60 * MIN
        );
    }

    #[test]
    fn a_short_retention_keeps_entries_a_tenth_longer() {
        assert_eq!(dedup_expiry_horizon(1_000 * MIN, 10 * MIN), 1_000 * MIN - 11 * MIN);
    }
}
