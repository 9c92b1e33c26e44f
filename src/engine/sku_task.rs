//! The downstream task of one SKU repartition partition: merges what every upstream sends
//! in logical-time order, runs the per-SKU rules, and writes outbox rows.
//!
//! Per commit interval:
//! 1. [`SkuTask::ingest`] each repartition record: a progress mark raises its upstream's
//!    bound; a data record already applied (a replay) is skipped; others wait in the merge
//!    buffer, in memory only.
//! 2. [`SkuTask::finish`]: release, in logical-time order, every buffered record below the
//!    lowest bound of the upstreams a phase reads — nothing lower can arrive any more — and
//!    apply it; new action keys become outbox rows; SKU state, bookkeeping and the input
//!    position are staged into the commit batch. Rules that read no stock run in a window
//!    phase gated by the `orders` upstreams alone, ahead of the stock rules, which also wait
//!    for `inventory` ([`super::sku_phase`]).
//!
//! The merge buffer is checkpointed by position, not by writing its records: the persisted
//! checkpoint is the offset of the oldest record still buffered (or the next offset when
//! none is), and the offset actually read to is kept beside it (`read_to`). A restored task
//! reads the repartition log again from that checkpoint: records it already applied are
//! skipped by their upstream sequence, as any replay is, and the rest are buffered again.
//! Records re-read below `read_to` are not counted or dead-lettered a second time. The cost:
//! a buffered record must still be in the repartition topic at restart (1 day retention; a
//! record buffered that long means an upstream was silent for a day, and the gap check
//! stops the task rather than skip it).
//!
//! Which records are released depends on timing; the order they are applied in does not.
//! So the actions, their keys and payloads do not depend on how fast any partition ran.
//!
//! A restored task reads only its bookkeeping and merge buffer (once, after an upgrade from
//! state written by one processor of every rule, the window phase splits its windows off
//! every SKU's state). A SKU's state and line rows
//! are read on the SKU's first touch (one point read and one prefix scan, then kept in
//! memory), so restart time does not grow with the number of SKUs or lines. The processor
//! only ever sees whole SKUs, so what it decides is the same as with everything loaded
//! (pruning a SKU later than it would have been changes no output, see
//! `tidemark_topology::sku`); a SKU never touched again keeps its rows until it is.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tidemark_state::{codec, Checkpoint, Namespace, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::config::{Rule, RuleMode};
use tidemark_topology::logical::LogicalTime;
use tidemark_topology::sku::ActionIntent;
use tidemark_topology::window::WindowPolicy;

use super::derive::{Derived, Head};
use super::merge_buffer::{BufferKey, MergeBuffer};
use super::outbox::{OutboxRow, RowState};
use super::output::OutputRecord;
use super::record::SourceRecord;
use super::sku_phase::{phases, Phase, PhaseKind, Upstream};
use super::stats::Stats;

/// Where a line or snapshot waits in the merge buffer: its logical time, then its index in
/// its event (0 for a snapshot). `None` for a mark, which is never buffered.
fn buffer_key(head: Head) -> Option<BufferKey> {
    match head {
        Head::Line { lt, idx } => Some((lt, idx)),
        Head::Snapshot { lt } => Some((lt, 0)),
        Head::Mark { .. } => None,
    }
}

/// Where a buffered record came from, and so how a restart finds it again.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Origin {
    /// Read from the repartition log at this offset: a restart reads it again from there.
    Log(i64),
    /// A row an earlier version persisted in the store's merge buffer (deleted once released).
    Store,
    /// Handed over in-process by an upstream task of the same process ([`SkuTask::hand_over`])
    /// and not read from the log yet: it is still ahead of the task's read position, so a
    /// restart reads it from the log like any record not yet read.
    Handed,
}

/// A record waiting in the merge buffer, and where it came from.
#[derive(Clone, Debug, PartialEq)]
struct Buffered {
    derived: Derived,
    origin: Origin,
    /// Applied by the window phase already (which runs ahead of the stock phase).
    early_done: bool,
}

/// What an upstream task of the same process handed this task since both have been held
/// there ([`SkuTask::hand_over`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct HandOver {
    /// The upstream position (a source offset) of the first record handed over: every record
    /// of the upstream at or after it reached this task in-process, in order.
    since: Option<i64>,
    /// The log has been read past `since`: everything the upstream sent before the hand-over
    /// began has been read, so its in-process promises (marks) are true here too.
    synced: bool,
}

#[derive(Clone, Debug)]
pub struct SkuTaskConfig {
    pub topic: String,
    /// Every upstream partition whose progress gates the merge.
    pub upstreams: Vec<Upstream>,
    pub rules: Vec<Rule>,
    pub window: WindowPolicy,
}

/// Bookkeeping persisted with the task's state: every upstream's promise, and what the stock
/// phase (or the only phase of a task without one) applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Meta {
    bounds: BTreeMap<Upstream, LogicalTime>,
    applied: BTreeMap<Upstream, (i64, u32)>,
    max_event_ms: Option<i64>,
}

/// What the window phase applied, persisted beside [`Meta`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct WindowMeta {
    applied: BTreeMap<Upstream, (i64, u32)>,
    max_event_ms: Option<i64>,
}

const META_KEY: &[u8] = b"meta";
const WINDOW_META_KEY: &[u8] = b"window_meta";
/// The offset the task had read to at its last commit (an `i64`, codec-encoded).
const READ_TO_KEY: &[u8] = b"read_to";

pub struct SkuTask {
    id: PartitionId,
    cfg: SkuTaskConfig,
    /// The phase that releases records from the buffer (the stock phase when any rule reads
    /// stock), then the window phase running ahead of it, if any (see [`super::sku_phase`]).
    phases: Vec<Phase>,
    checkpoint: Checkpoint,
    meta: Meta,
    buffer: MergeBuffer<Buffered>,
    /// Where the window phase running ahead looks next: every buffered record below it that
    /// it reads is `early_done`.
    early_from: Option<BufferKey>,
    /// Offsets below this were read before the last restart: re-reading them is a replay.
    read_to: i64,
    /// Per upstream of the same process: what it handed over in-process.
    handed: BTreeMap<Upstream, HandOver>,
    /// Promises handed over in-process, above those read from the log (`meta.bounds`). Never
    /// persisted: the records they let through may be in memory only (handed over, not yet
    /// read from the log), and after a restart the merge must wait for the log's marks,
    /// which follow those records there.
    handed_bounds: BTreeMap<Upstream, LogicalTime>,
    /// Rows an earlier version wrote to the store's merge buffer that were released since
    /// the last commit (deleted in its batch).
    released: Vec<BufferKey>,
    uncommitted: bool,
    /// Keys of the outbox rows the last [`SkuTask::finish`] wrote: the stream thread finishes
    /// a batch while the one before it is still being written, so the store cannot answer for
    /// them yet (one batch at most is in flight). Replaced by every finish.
    in_flight_keys: Vec<String>,
}

impl SkuTask {
    pub fn restore<S: StateView + ?Sized>(store: &S, id: PartitionId, cfg: SkuTaskConfig) -> Result<Self, StateError> {
        let stored = store.checkpoint(id)?;
        let checkpoint = stored.unwrap_or_default();
        let mut meta = Meta::default();
        let mut window_meta: Option<WindowMeta> = None;
        let mut phases = phases(&cfg.rules, cfg.window, &cfg.upstreams);
        let mut read_to = checkpoint.next_offset;
        for (k, v) in store.load_aggregates(id, Namespace::SkuMeta)? {
            match k.as_slice() {
                META_KEY => meta = codec::decode("sku task meta", &v)?,
                WINDOW_META_KEY => window_meta = Some(codec::decode("sku task window meta", &v)?),
                READ_TO_KEY => read_to = read_to.max(codec::decode("sku task read position", &v)?),
                _ => {}
            }
        }
        for phase in &mut phases {
            match (phase.kind, &window_meta) {
                (PhaseKind::Stock, _) => {
                    phase.applied = meta.applied.clone();
                    phase.processor.restore_watermark(meta.max_event_ms);
                }
                (PhaseKind::Windows, Some(w)) => {
                    phase.applied = w.applied.clone();
                    phase.processor.restore_watermark(w.max_event_ms);
                }
                // State written by one processor of every rule: split the windows off it.
                (PhaseKind::Windows, None) if stored.is_some() => {
                    phase.split_off(store, id, &meta.applied, meta.max_event_ms)?
                }
                (PhaseKind::Windows, None) => {}
            }
        }
        let mut buffer = MergeBuffer::default();
        for (k, v) in store.load_aggregates(id, Namespace::MergeBuffer)? {
            let key: BufferKey = codec::decode("merge buffer key", &k)?;
            // The versioned codec, or the JSON that versions before it wrote: rows buffered
            // before an upgrade are kept (see `Derived::decode`).
            let derived = Derived::decode(&v)?;
            let early_done = early_applied(&phases, &derived);
            buffer.insert(key, Buffered { derived, origin: Origin::Store, early_done });
        }
        Ok(SkuTask {
            id,
            cfg,
            phases,
            checkpoint,
            meta,
            buffer,
            early_from: None,
            read_to,
            handed: BTreeMap::new(),
            handed_bounds: BTreeMap::new(),
            released: Vec::new(),
            uncommitted: false,
            in_flight_keys: Vec::new(),
        })
    }

    /// Adds what the task holds in memory to `held` (see [`crate::engine::held`]).
    pub fn held(&self, held: &mut crate::engine::held::Held) {
        for phase in &self.phases {
            let p = phase.processor.held();
            held.add("sku_states", p.skus);
            held.add("sku_lines", p.lines);
            held.add("sku_windows", p.windows);
        }
        held.add("sku_loaded", self.loaded_skus());
        held.add("merge_buffer", self.buffer.len());
    }

    /// SKUs whose rows are in memory (summed over the phases).
    pub fn loaded_skus(&self) -> usize {
        self.phases.iter().map(Phase::loaded_skus).sum()
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

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

    /// Records waiting for upstream progress.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    pub fn ingest(&mut self, rec: SourceRecord<'_>, out: &mut Vec<OutputRecord>, stats: &Stats) -> bool {
        if !self.checkpoint.advance(rec.offset, rec.append_ms) {
            return false;
        }
        self.uncommitted = true;
        let value = rec.value.unwrap_or_default();
        let replay = rec.offset < self.read_to;
        let Some(mut records) = super::pack::unpack(value) else {
            self.ingest_one(value, &rec, replay, out, stats);
            return true;
        };
        // A pack: its records in order, each as if it were read alone at the pack's offset.
        while let Some(record) = records.next() {
            match record {
                Ok(bytes) => self.ingest_one(bytes, &rec, replay, out, stats),
                Err(e) if !replay => self.dead_letter(&rec, records.rest(), e, out, stats),
                Err(_) => {}
            }
        }
        true
    }

    /// One repartition record (alone in its log record, or one of a pack).
    fn ingest_one(
        &mut self,
        value: &[u8],
        rec: &SourceRecord<'_>,
        replay: bool,
        out: &mut Vec<OutputRecord>,
        stats: &Stats,
    ) {
        // Most records were handed over in-process already (their echo) or applied before
        // (a replay): their head says so, and the payload is never decoded.
        let head = Derived::head_of(value);
        if head.is_some_and(|h| self.place(h, rec.offset, replay, stats)) {
            return;
        }
        let derived = match Derived::decode(value) {
            Ok(d) => d,
            Err(_) if replay => return,
            Err(e) => return self.dead_letter(rec, value, e, out, stats),
        };
        // A record of the JSON that earlier versions wrote has no codec head: placed here.
        if head.is_none() && self.place(derived.head(), rec.offset, replay, stats) {
            return;
        }
        self.buffer_read(derived, rec.offset, replay, stats);
    }

    /// Only tidemark writes this topic; an unreadable record means a foreign writer or a
    /// newer format. Keep it (the bytes that could not be read), visibly, and go on.
    fn dead_letter(
        &self,
        rec: &SourceRecord<'_>,
        value: &[u8],
        e: StateError,
        out: &mut Vec<OutputRecord>,
        stats: &Stats,
    ) {
        Stats::add(&stats.dead_letters, 1);
        out.push(OutputRecord::internal_unreadable(&self.cfg.topic, self.id.partition, rec, value, e.to_string()));
    }

    /// Places a record read from the log by its head alone, when that is enough: true for a
    /// mark (its bound raised) and for a line or snapshot this task holds already (one handed
    /// over in-process, which now counts as read at `offset`; one buffered or applied, a
    /// duplicate). False for a line or snapshot seen for the first time, which the caller
    /// decodes and buffers. A record an upstream of this process handed over already (its
    /// echo) counts for nothing; reading it tells the task that the log caught up with the
    /// hand-over.
    fn place(&mut self, head: Head, offset: i64, replay: bool, stats: &Stats) -> bool {
        let (upstream, position) = head.position();
        let echo = self.read_in_log(upstream, position);
        if let Head::Mark { upstream, bound } = head {
            let slot = self.meta.bounds.entry(upstream).or_insert(bound);
            *slot = (*slot).max(bound);
            return true;
        }
        let Some(key) = buffer_key(head) else { return true };
        if let Some(b) = self.buffer.get_mut(&key).filter(|b| b.origin == Origin::Handed) {
            b.origin = Origin::Log(offset);
            return true;
        }
        if self.holds(key) {
            if !replay && !echo {
                Stats::add(&stats.dedup_hits, 1);
            }
            return true;
        }
        false
    }

    /// Buffers a line or snapshot read from the log at `offset` for the first time, until
    /// the merge releases it.
    fn buffer_read(&mut self, derived: Derived, offset: i64, replay: bool, stats: &Stats) {
        let Some(key) = buffer_key(derived.head()) else { return };
        let (lt, upstream) = (key.0, key.0.upstream());
        // The upstream promised more: its idle bound (clock − idle_skew) was passed by a
        // record appended later than the skew allowed. The merge still applies it, but
        // possibly after records with higher logical times.
        if !replay && self.meta.bounds.get(&upstream).is_some_and(|b| lt < *b) {
            Stats::add(&stats.broken_promises, 1);
        }
        self.buffer_insert(key, derived, Origin::Log(offset));
    }

    /// Whether the line or snapshot at `key` is here already: applied by the first phase or
    /// waiting in the buffer.
    fn holds(&self, key: BufferKey) -> bool {
        let (lt, idx) = key;
        self.phases.first().is_some_and(|p| p.has_applied(lt.upstream(), (lt.offset, idx)))
            || self.buffer.contains_key(&key)
    }

    /// Puts a line or snapshot into the merge buffer; one the window phase has not applied
    /// yet moves its next look back to it.
    fn buffer_insert(&mut self, key: BufferKey, derived: Derived, origin: Origin) {
        let early_done = early_applied(&self.phases, &derived);
        if !early_done && self.early_from.is_some_and(|from| key < from) {
            self.early_from = Some(key);
        }
        self.buffer.insert(key, Buffered { derived, origin, early_done });
    }

    /// Notes a record of the log for the hand-over of its upstream: whether it is one the
    /// upstream handed over already (at or after the position the hand-over began at); the
    /// first such record means everything the upstream sent before has been read.
    fn read_in_log(&mut self, upstream: Upstream, position: i64) -> bool {
        let Some(h) = self.handed.get_mut(&upstream) else { return false };
        let echo = h.since.is_some_and(|since| position >= since);
        h.synced |= echo;
        echo
    }

    /// Takes a line, snapshot or mark an upstream task of the same process just emitted for
    /// this partition, before it is read back from the log (SPEC §7: one commit cycle from an
    /// order to its action instead of two). The record also goes to the log as always; read
    /// from there it is an echo and changes nothing. Lines and snapshots wait in the merge
    /// buffer like records read from the log (a restart reads them from the log, since they
    /// are ahead of the task's read position); a mark raises its upstream's bound only once
    /// the log has been read past the position the hand-over began at: before that, records
    /// the upstream sent earlier may still be unread in the log, and its promise would pass
    /// them. Such a promise lives in memory only (see `handed_bounds`). Call
    /// [`SkuTask::forget_hand_over`] whenever the upstream's task changes hands.
    pub fn hand_over(&mut self, derived: Derived) {
        let (upstream, position) = derived.head().position();
        if !self.cfg.upstreams.contains(&upstream) {
            return;
        }
        let h = self.handed.entry(upstream).or_default();
        h.since.get_or_insert(position);
        let synced = h.synced;
        match &derived {
            Derived::Mark { bound, .. } => {
                let above_log = self.meta.bounds.get(&upstream).is_none_or(|b| *bound > *b);
                let above_handed = self.handed_bounds.get(&upstream).is_none_or(|b| *bound > *b);
                if synced && above_log && above_handed {
                    self.handed_bounds.insert(upstream, *bound);
                    self.uncommitted = true;
                }
            }
            Derived::Line { .. } | Derived::Snapshot { .. } => {
                let Some(key) = buffer_key(derived.head()) else { return };
                if self.holds(key) {
                    return;
                }
                self.buffer_insert(key, derived, Origin::Handed);
                self.uncommitted = true;
            }
        }
    }

    /// The task of `upstream` in this process was let go or replaced: what it handed over
    /// stays buffered, but its in-process promises count again only once the log has been
    /// read past what its next task hands over.
    pub fn forget_hand_over(&mut self, upstream: Upstream) {
        self.handed.remove(&upstream);
    }

    /// Step 2. New outbox rows are appended to `rows` for the dispatcher (after the commit),
    /// each beside this task's partition, whose outbox holds it.
    ///
    /// The window phase, if it runs ahead, applies the lines below its own bound first (they
    /// stay buffered); then the first phase releases every record below its bound from the
    /// buffer and applies it. The first phase's bound is never above the window phase's (it
    /// waits for a superset of the upstreams), so every record it releases was seen by both.
    pub fn finish<S: StateView + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
        rows: &mut Vec<(PartitionId, OutboxRow)>,
        stats: &Stats,
    ) -> Result<(), StateError> {
        self.uncommitted = false;
        let rows_from = rows.len();
        // One wall-clock read per finish, for the merge's latency metric only.
        let now_ms = if self.buffer.is_empty() { 0 } else { chrono::Utc::now().timestamp_millis() };
        if self.phases.len() > 1 {
            self.run_ahead(store, batch, rows, stats, now_ms)?;
        }
        let bounds = self.bounds();
        if let Some(bound) = self.phases.first().and_then(|p| p.bound(&bounds)) {
            let single = self.phases.len() == 1;
            while let Some((key, buffered)) = self.buffer.pop_below(bound) {
                if single {
                    crate::telemetry::events::merge_released(now_ms - key.0.append_ms);
                }
                if buffered.origin == Origin::Store {
                    self.released.push(key);
                }
                Stats::add(&stats.sku_inputs, 1);
                if let Derived::Line { event_ms, .. } = &buffered.derived {
                    if self.phases[0].processor.is_beyond_retention(*event_ms) {
                        Stats::add(&stats.sku_late_lines, 1);
                    }
                }
                let intents = self.phases[0].apply(store, self.id, &buffered.derived)?;
                self.write_rows(store, batch, intents, rows, stats)?;
            }
        }
        for key in self.released.drain(..) {
            batch.delete_aggregate(self.id, Namespace::MergeBuffer, &codec::encode(&key)?);
        }
        for (i, phase) in self.phases.iter_mut().enumerate() {
            phase.stage(batch, self.id)?;
            // The first phase's progress is the task's (what a replay skips).
            if i == 0 {
                self.meta.applied.clone_from(&phase.applied);
                self.meta.max_event_ms = phase.processor.watermark_state();
            }
            if phase.kind == PhaseKind::Windows {
                let w = WindowMeta { applied: phase.applied.clone(), max_event_ms: phase.processor.watermark_state() };
                batch.put_aggregate(self.id, Namespace::SkuMeta, WINDOW_META_KEY, &codec::encode(&w)?);
            }
        }
        batch.put_aggregate(self.id, Namespace::SkuMeta, META_KEY, &codec::encode(&self.meta)?);
        self.read_to = self.read_to.max(self.checkpoint.next_offset);
        batch.put_aggregate(self.id, Namespace::SkuMeta, READ_TO_KEY, &codec::encode(&self.read_to)?);
        batch.put_checkpoint(self.id, &self.resume_checkpoint())?;
        self.in_flight_keys.clear();
        self.in_flight_keys.extend(rows[rows_from..].iter().filter(|(p, _)| *p == self.id).map(|(_, r)| r.key.clone()));
        Ok(())
    }

    /// The window phase's step: applies, in logical-time order, the buffered lines below its
    /// bound it has not applied yet, and leaves them in the buffer for the stock phase.
    fn run_ahead<S: StateView + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
        rows: &mut Vec<(PartitionId, OutboxRow)>,
        stats: &Stats,
        now_ms: i64,
    ) -> Result<(), StateError> {
        let bounds = self.bounds();
        let Some(bound) = self.phases.get(1).and_then(|p| p.bound(&bounds)) else { return Ok(()) };
        let mut next = None;
        let mut due: Vec<BufferKey> = Vec::new();
        for (key, b) in self.buffer.range_from(self.early_from) {
            if key.0 >= bound {
                next = Some(*key);
                break;
            }
            if !b.early_done && self.phases[1].reads(&b.derived) {
                due.push(*key);
            }
        }
        for key in due {
            let Some(b) = self.buffer.get_mut(&key) else { continue };
            b.early_done = true;
            crate::telemetry::events::merge_released(now_ms - key.0.append_ms);
            let intents = self.phases[1].apply(store, self.id, &b.derived)?;
            self.write_rows(store, batch, intents, rows, stats)?;
        }
        // Everything below `next` is done; with nothing at or above the bound, the next look
        // starts after the last key.
        self.early_from = next.or_else(|| self.buffer.last_key().map(|k| (k.0, k.1.saturating_add(1))));
        Ok(())
    }

    /// Every upstream's promise: the higher of the log's and the one handed over in-process.
    fn bounds(&self) -> Cow<'_, BTreeMap<Upstream, LogicalTime>> {
        if self.handed_bounds.is_empty() {
            return Cow::Borrowed(&self.meta.bounds);
        }
        let mut bounds = self.meta.bounds.clone();
        for (u, b) in &self.handed_bounds {
            let slot = bounds.entry(*u).or_insert(*b);
            *slot = (*slot).max(*b);
        }
        Cow::Owned(bounds)
    }

    /// The checkpoint as persisted: the in-memory one, moved back to the oldest record still
    /// buffered (a restart reads the log again from there).
    fn resume_checkpoint(&self) -> Checkpoint {
        let oldest = self
            .buffer
            .values()
            .filter_map(|b| match b.origin {
                Origin::Log(offset) => Some(offset),
                Origin::Store | Origin::Handed => None,
            })
            .min();
        let mut checkpoint = self.checkpoint;
        if let Some(offset) = oldest {
            checkpoint.next_offset = checkpoint.next_offset.min(offset);
        }
        checkpoint
    }

    /// New action keys become outbox rows, staged in the commit batch; a key already pending
    /// here, in the batch being written, or in the outbox is not written again.
    fn write_rows<S: StateView + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
        intents: Vec<ActionIntent>,
        rows: &mut Vec<(PartitionId, OutboxRow)>,
        stats: &Stats,
    ) -> Result<(), StateError> {
        for intent in intents {
            let pending_here = rows.iter().any(|(_, r)| r.key == intent.key);
            let in_flight = self.in_flight_keys.contains(&intent.key);
            if pending_here || in_flight || store.outbox_get(self.id, &intent.key)?.is_some() {
                continue;
            }
            let row = OutboxRow {
                key: intent.key.clone(),
                rule_id: intent.rule_id.clone(),
                rule_version: intent.rule_version,
                mode: intent.mode,
                action: intent.action.clone(),
                sku: intent.sku.clone(),
                payload: intent.payload_json(),
                state: match intent.mode {
                    RuleMode::Shadow => RowState::Shadow,
                    RuleMode::Notify | RuleMode::Act => RowState::Pending,
                },
                attempts: 0,
                created_at_ms: intent.created_at_ms,
                source_append_ms: intent.source_append_ms,
                committed_wall_ms: 0,
            };
            batch.put_outbox(self.id, &row.key, &codec::encode(&row)?, row.index());
            Stats::add(&stats.actions, 1);
            rows.push((self.id, row));
        }
        Ok(())
    }
}

/// Whether the window phase that runs ahead (the second phase, if any) applied this record
/// already, or has nothing to do with it.
fn early_applied(phases: &[Phase], derived: &Derived) -> bool {
    let Some(early) = phases.get(1) else { return true };
    if !early.reads(derived) {
        return true;
    }
    match (derived, derived.seq()) {
        (Derived::Line { lt, .. }, Some(seq)) => early.has_applied(lt.upstream(), seq),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sku_phase::{decode_line_key, line_key, line_prefix};
    use super::*;
    use tidemark_state::{MemStore, StateStore};

    const MIN: i64 = 60_000;

    fn line(upstream: (u16, i32), append_ms: i64, offset: i64) -> Vec<u8> {
        Derived::Line {
            lt: LogicalTime::new(append_ms, upstream.0, upstream.1, offset),
            idx: 0,
            sku: "SKU-1".into(),
            placed: true,
            qty: 1,
            event_ms: append_ms,
            append_ms,
        }
        .encode()
    }

    fn mark(upstream: (u16, i32), bound_ms: i64, next_offset: i64) -> Vec<u8> {
        Derived::Mark { upstream, bound: LogicalTime::new(bound_ms, upstream.0, upstream.1, next_offset) }.encode()
    }

    #[test]
    fn line_keys_round_trip_and_sort_by_sku_then_time() {
        for (sku, t) in [("SKU-1", 0), ("SKU-1", -5), ("S", i64::MAX), ("", i64::MIN)] {
            assert_eq!(decode_line_key(&line_key(sku, t)).expect("decode"), (sku.to_string(), t));
        }
        assert!(line_key("SKU-1", -5) < line_key("SKU-1", 3));
        assert!(line_key("SKU-1", 3) < line_key("SKU-1", 1_000_000));
        assert!(decode_line_key(b"\x00\x09abc").is_err());
    }

    fn cfg() -> SkuTaskConfig {
        SkuTaskConfig {
            topic: "rep".into(),
            upstreams: vec![(0, 0), (0, 1)],
            // One stock rule: the task runs the stock phase alone, which keeps line rows.
            rules: vec![Rule {
                id: "oversell".into(),
                version: 1,
                mode: RuleMode::Act,
                kind: tidemark_topology::config::RuleKind::Oversell,
            }],
            window: WindowPolicy { size_ms: MIN, allowed_lateness_ms: 0, grace_ms: 2 * MIN, retention_ms: 420 * MIN },
        }
    }

    fn ingest_all(task: &mut SkuTask, records: &[Vec<u8>], first_offset: i64, stats: &Stats) {
        let mut out = Vec::new();
        for (i, value) in records.iter().enumerate() {
            let rec = SourceRecord { key: None, value: Some(value), append_ms: 0, offset: first_offset + i as i64 };
            assert!(task.ingest(rec, &mut out, stats));
        }
    }

    fn commit(task: &mut SkuTask, store: &MemStore, stats: &Stats) -> Result<(), StateError> {
        let mut batch = store.batch();
        task.finish(store, &mut batch, &mut Vec::new(), stats)?;
        store.commit(batch)
    }

    #[test]
    fn the_merge_buffer_is_checkpointed_by_the_offset_of_its_oldest_record_not_written() -> Result<(), StateError> {
        let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
        let log = [
            line((0, 0), 1_000, 0),
            line((0, 1), 2_000, 0),
            mark((0, 0), 1_500, 1), // releases the first line only
            mark((0, 1), 9_000, 1),
            mark((0, 0), 9_000, 2), // releases the second
        ];
        let mut task = SkuTask::restore(&store, id, cfg())?;
        ingest_all(&mut task, &log[..4], 0, &stats);
        commit(&mut task, &store, &stats)?;
        assert_eq!(task.buffered(), 1);
        assert!(store.load_aggregates(id, Namespace::MergeBuffer)?.is_empty(), "no buffer row written");
        let persisted = store.checkpoint(id)?.map(|c| c.next_offset);
        assert_eq!(persisted, Some(1), "the checkpoint stays at the buffered record");
        assert_eq!(task.checkpoint().next_offset, 4, "while the task reads on");

        ingest_all(&mut task, &log[4..], 4, &stats);
        commit(&mut task, &store, &stats)?;
        assert_eq!(store.checkpoint(id)?.map(|c| c.next_offset), Some(5), "nothing buffered: the next offset");
        Ok(())
    }

    #[test]
    fn a_restarted_task_reads_its_buffer_again_from_the_log_and_ends_as_if_it_never_stopped() -> Result<(), StateError>
    {
        let log = [
            line((0, 0), 1_000, 0),
            line((0, 1), 2_000, 0),
            mark((0, 0), 1_500, 1),
            mark((0, 1), 9_000, 1),
            line((0, 0), 1_200, 1), // below its own promise: one broken promise, counted once
            mark((0, 0), 9_000, 2),
        ];
        let (never, never_stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
        let mut all_along = SkuTask::restore(&never, id, cfg())?;
        ingest_all(&mut all_along, &log, 0, &never_stats);
        commit(&mut all_along, &never, &never_stats)?;

        let (store, stats) = (MemStore::new(), Stats::default());
        let mut task = SkuTask::restore(&store, id, cfg())?;
        ingest_all(&mut task, &log[..5], 0, &stats);
        commit(&mut task, &store, &stats)?;
        drop(task); // killed: a restart reads from the persisted checkpoint
        let from = store.checkpoint(id)?.map_or(0, |c| c.next_offset);
        assert_eq!(from, 1);
        let mut restored = SkuTask::restore(&store, id, cfg())?;
        ingest_all(&mut restored, &log[usize::try_from(from).expect("offset")..], from, &stats);
        commit(&mut restored, &store, &stats)?;

        assert_eq!(restored.buffered(), 0);
        assert_eq!(
            restored.phases[0].processor.state("SKU-1"),
            all_along.phases[0].processor.state("SKU-1"),
            "the same SKU state"
        );
        assert_eq!(restored.meta, all_along.meta, "the same bookkeeping");
        for (what, got, want) in [
            ("applied", Stats::get(&stats.sku_inputs), Stats::get(&never_stats.sku_inputs)),
            ("broken promises", Stats::get(&stats.broken_promises), Stats::get(&never_stats.broken_promises)),
            ("dedup hits", Stats::get(&stats.dedup_hits), Stats::get(&never_stats.dedup_hits)),
        ] {
            assert_eq!(got, want, "{what}: the replay is not counted again");
        }
        Ok(())
    }

    #[test]
    fn buffer_rows_written_by_earlier_versions_are_restored_released_and_deleted() -> Result<(), StateError> {
        let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
        // What an earlier version left in the merge buffer: the repartition JSON, in both of
        // its encodings (externally tagged, and the first one tagged by `k`).
        let tagged_json =
            br#"{"line":{"lt":[1000,0,0,0],"idx":0,"sku":"SKU-1","placed":true,"qty":1,"event_ms":1000,"append_ms":1000}}"#;
        let tagged = Derived::decode(tagged_json)?;
        let first = br#"{"k":"line","lt":[1500,0,1,0],"idx":0,"sku":"SKU-1","placed":true,"qty":1,"event_ms":1500,"append_ms":1500}"#;
        let mut batch = store.batch();
        let lt = |d: &Derived| match d {
            Derived::Line { lt, .. } => *lt,
            _ => unreachable!("a line"),
        };
        batch.put_aggregate(id, Namespace::MergeBuffer, &codec::encode(&(lt(&tagged), 0u32))?, tagged_json);
        batch.put_aggregate(
            id,
            Namespace::MergeBuffer,
            &codec::encode(&(LogicalTime::new(1_500, 0, 1, 0), 0u32))?,
            first,
        );
        // And what the version before this one wrote: the versioned codec.
        let coded = Derived::decode(&line((0, 0), 1_700, 1))?;
        batch.put_aggregate(id, Namespace::MergeBuffer, &codec::encode(&(lt(&coded), 0u32))?, &codec::encode(&coded)?);
        store.commit(batch)?;

        let mut task = SkuTask::restore(&store, id, cfg())?;
        assert_eq!(task.buffered(), 3, "every old row is back in the buffer");
        ingest_all(&mut task, &[mark((0, 0), 9_000, 1), mark((0, 1), 9_000, 1)], 0, &stats);
        let mut batch = store.batch();
        task.finish(&store, &mut batch, &mut Vec::new(), &stats)?;
        store.commit(batch)?;
        assert_eq!((task.buffered(), Stats::get(&stats.sku_inputs)), (0, 3), "released and applied");
        assert!(store.load_aggregates(id, Namespace::MergeBuffer)?.is_empty(), "and deleted from the store");
        Ok(())
    }

    /// A store that records every per-key read (namespace, key or prefix).
    struct Reads<'a>(&'a MemStore, std::cell::RefCell<Vec<(Namespace, Vec<u8>)>>);

    impl StateView for Reads<'_> {
        fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
            self.0.checkpoint(p)
        }
        fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<tidemark_state::KeyValue>, StateError> {
            self.1.borrow_mut().push((ns, b"*".to_vec()));
            self.0.load_aggregates(p, ns)
        }
        fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
            self.1.borrow_mut().push((ns, key.to_vec()));
            self.0.get_aggregate(p, ns, key)
        }
        fn scan_aggregates(
            &self,
            p: PartitionId,
            ns: Namespace,
            prefix: &[u8],
        ) -> Result<Vec<tidemark_state::KeyValue>, StateError> {
            self.1.borrow_mut().push((ns, prefix.to_vec()));
            self.0.scan_aggregates(p, ns, prefix)
        }
        fn dedup_lookup(&self, p: PartitionId, ids: &[&str]) -> Result<Vec<Option<i64>>, StateError> {
            self.0.dedup_lookup(p, ids)
        }
        fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
            self.0.outbox_get(p, key)
        }
    }

    fn line_of(sku: &str, upstream: (u16, i32), append_ms: i64, offset: i64) -> Vec<u8> {
        Derived::Line {
            lt: LogicalTime::new(append_ms, upstream.0, upstream.1, offset),
            idx: 0,
            sku: sku.into(),
            placed: true,
            qty: 2,
            event_ms: append_ms,
            append_ms,
        }
        .encode()
    }

    #[test]
    fn a_restored_task_reads_a_skus_rows_only_when_the_sku_is_touched_and_sees_what_it_had() -> Result<(), StateError> {
        let (store, stats, id) = (MemStore::new(), Stats::default(), PartitionId::sku(0));
        let first = [
            line_of("SKU-1", (0, 0), 1_000, 0),
            line_of("SKU-2", (0, 0), 2_000, 1),
            line_of("SKU-1", (0, 1), 3_000, 0),
            mark((0, 0), 9_000, 2),
            mark((0, 1), 9_000, 1),
        ];
        let second = [line_of("SKU-1", (0, 0), 10_000, 2), mark((0, 0), 20_000, 3), mark((0, 1), 20_000, 1)];
        let run =
            |task: &mut SkuTask, view: &dyn StateView, records: &[Vec<u8>], from: i64| -> Result<(), StateError> {
                ingest_all(task, records, from, &stats);
                let mut batch = store.batch();
                task.finish(view, &mut batch, &mut Vec::new(), &stats)?;
                store.commit(batch)
            };
        let mut all_along = SkuTask::restore(&store, id, cfg())?;
        run(&mut all_along, &store, &first, 0)?;
        assert_eq!(store.load_aggregates(id, Namespace::SkuLines)?.len(), 3);

        let reads = Reads(&store, Default::default());
        let mut restored = SkuTask::restore(&reads, id, cfg())?;
        let per_key = |reads: &Reads| reads.1.borrow().iter().filter(|(_, k)| k != b"*").count();
        assert_eq!((restored.loaded_skus(), per_key(&reads)), (0, 0), "no SKU read at restore");
        assert!(
            !reads.1.borrow().iter().any(|(ns, _)| matches!(ns, Namespace::Sku | Namespace::SkuLines)),
            "no SKU or line rows scanned at restore"
        );

        // Only SKU-1 is touched again: its rows are read once, SKU-2's never.
        ingest_all(&mut restored, &second, 5, &stats);
        let mut batch = store.batch();
        restored.finish(&reads, &mut batch, &mut Vec::new(), &stats)?;
        drop(batch);
        assert_eq!(restored.loaded_skus(), 1);
        assert_eq!(*reads.1.borrow().last().expect("read"), (Namespace::SkuLines, line_prefix("SKU-1")));
        assert_eq!(per_key(&reads), 2, "one state read and one line scan");
        run(&mut all_along, &store, &second, 5)?;
        assert_eq!(
            restored.phases[0].processor.state("SKU-1"),
            all_along.phases[0].processor.state("SKU-1"),
            "the same state"
        );
        assert!(restored.phases[0].processor.state("SKU-2").is_none());
        Ok(())
    }

    #[test]
    fn a_record_below_its_upstreams_promise_is_counted_as_a_broken_promise() {
        let store = MemStore::new();
        let mut task = SkuTask::restore(&store, PartitionId::sku(0), cfg()).expect("restore");
        let (stats, mut out) = (Stats::default(), Vec::new());
        let records = [
            line((0, 0), 1_000, 0),
            mark((0, 1), 5_000, 0), // idle upstream 1: "nothing below 5 s from me"
            line((0, 0), 2_000, 1),
            line((0, 1), 6_000, 0), // kept its promise
            mark((0, 0), 9_000, 2),
            line((0, 0), 8_000, 2), // appended before its own promise of 9 s: broken
        ];
        for (offset, value) in records.iter().enumerate() {
            let rec = SourceRecord { key: None, value: Some(value), append_ms: 0, offset: offset as i64 };
            assert!(task.ingest(rec, &mut out, &stats));
        }
        assert_eq!(Stats::get(&stats.broken_promises), 1);
    }
}
