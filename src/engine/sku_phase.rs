//! One phase of a SKU task's merge: a [`SkuProcessor`] over some of the rules, the
//! upstreams whose progress gates it, what it has applied, and where its state lives.
//!
//! A rule waits only for the inputs it reads (SPEC §2). A SKU task therefore runs up to two
//! phases over the one merge buffer, each in logical-time order:
//! - the **stock phase**: the rules that read stock (`oversell`, `low_stock`, expression
//!   rules that read `stock.*` or fire per snapshot), over lines and snapshots, released
//!   below the lowest promise of every upstream, `orders` and `inventory`;
//! - the **window phase**: the rules that read no stock (`velocity_spike`, window-only
//!   expression rules), over lines alone, released below the lowest promise of the `orders`
//!   upstreams, so an idle `inventory` partition never holds them back.
//!
//! Each phase applies the same lines in the same order as one merge of everything would, and
//! its rules read only what its own processor holds, so the intents of both phases together
//! are exactly those of a single merge (`sku_task::split_tests`). With rules of one kind
//! only, the task runs one phase.

use std::collections::{BTreeMap, HashSet};

use tidemark_state::{codec, Namespace, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::config::Rule;
use tidemark_topology::logical::LogicalTime;
use tidemark_topology::sku::{ActionIntent, SkuProcessor, SkuState};
use tidemark_topology::window::WindowPolicy;

use super::derive::Derived;

pub(super) type Upstream = (u16, i32);

/// Which rules a phase runs, and so which inputs gate it and where its state is persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PhaseKind {
    /// Rules that read stock: lines and snapshots, every upstream. State in
    /// `Namespace::Sku` with line rows in `Namespace::SkuLines`.
    Stock,
    /// Rules that read no stock: lines only, the `orders` upstreams. State in
    /// `Namespace::SkuWindows`, without line rows.
    Windows,
}

pub(super) struct Phase {
    pub(super) kind: PhaseKind,
    pub(super) processor: SkuProcessor,
    /// Upstreams whose promises gate this phase.
    upstreams: Vec<Upstream>,
    /// The last record applied per upstream: `(offset, line index)`.
    pub(super) applied: BTreeMap<Upstream, (i64, u32)>,
    /// SKUs whose rows were read from the store (or that had none there).
    loaded: HashSet<String>,
}

/// Splits a task's rules into its phases: the stock phase first when any rule reads stock,
/// then the window phase when any rule reads none. A topology without rules runs one window
/// phase (it holds and decides nothing, but keeps the merge's bookkeeping).
pub(super) fn phases(rules: &[Rule], window: WindowPolicy, upstreams: &[Upstream]) -> Vec<Phase> {
    let (stock, windows): (Vec<Rule>, Vec<Rule>) = rules.iter().cloned().partition(Rule::reads_stock);
    let orders: Vec<Upstream> = upstreams.iter().copied().filter(|u| u.0 == PartitionId::ORDERS).collect();
    let mut out = Vec::with_capacity(2);
    if !stock.is_empty() {
        out.push(Phase::new(PhaseKind::Stock, stock, window, upstreams.to_vec()));
    }
    if !windows.is_empty() || out.is_empty() {
        out.push(Phase::new(PhaseKind::Windows, windows, window, orders));
    }
    out
}

impl Phase {
    fn new(kind: PhaseKind, rules: Vec<Rule>, window: WindowPolicy, upstreams: Vec<Upstream>) -> Phase {
        Phase {
            kind,
            processor: SkuProcessor::new(rules, window),
            upstreams,
            applied: BTreeMap::new(),
            loaded: HashSet::new(),
        }
    }

    fn state_ns(&self) -> Namespace {
        match self.kind {
            PhaseKind::Stock => Namespace::Sku,
            PhaseKind::Windows => Namespace::SkuWindows,
        }
    }

    /// The lowest promise over this phase's upstreams; `None` until each has spoken.
    pub(super) fn bound(&self, bounds: &BTreeMap<Upstream, LogicalTime>) -> Option<LogicalTime> {
        let mut lowest: Option<LogicalTime> = None;
        for u in &self.upstreams {
            let b = *bounds.get(u)?;
            lowest = Some(lowest.map_or(b, |l| l.min(b)));
        }
        lowest
    }

    /// Whether this phase applied the record `seq` of `upstream` already.
    pub(super) fn has_applied(&self, upstream: Upstream, seq: (i64, u32)) -> bool {
        self.applied.get(&upstream).is_some_and(|a| *a >= seq)
    }

    /// Whether a record of this kind takes part in this phase.
    pub(super) fn reads(&self, derived: &Derived) -> bool {
        match derived {
            Derived::Line { .. } => true,
            Derived::Snapshot { .. } => self.kind == PhaseKind::Stock,
            Derived::Mark { .. } => false,
        }
    }

    /// Reads a SKU's committed rows on its first touch. Nothing about a SKU not yet loaded
    /// can be staged in the open batch, so the committed rows are current.
    fn load_sku<S: StateView + ?Sized>(&mut self, store: &S, id: PartitionId, sku: &str) -> Result<(), StateError> {
        if self.loaded.contains(sku) {
            return Ok(());
        }
        if let Some(v) = store.get_aggregate(id, self.state_ns(), sku.as_bytes())? {
            let state: SkuState = codec::decode("sku state", &v)?;
            self.processor.restore(sku.to_string(), state);
        }
        if self.kind == PhaseKind::Stock {
            for (k, v) in store.scan_aggregates(id, Namespace::SkuLines, &line_prefix(sku))? {
                let (_, t) = decode_line_key(&k)?;
                self.processor.restore_line(sku, t, codec::decode("sku line", &v)?);
            }
        }
        self.loaded.insert(sku.to_string());
        Ok(())
    }

    /// The window phase of a task whose state was written by one processor of every rule
    /// (before the phases, or before its first window rule): its window counts and fired
    /// window rules are split off the stock state of every SKU, once, so it goes on exactly
    /// where that processor was. Persisted at the next [`Phase::stage`].
    pub(super) fn split_off<S: StateView + ?Sized>(
        &mut self,
        store: &S,
        id: PartitionId,
        applied: &BTreeMap<Upstream, (i64, u32)>,
        max_event_ms: Option<i64>,
    ) -> Result<(), StateError> {
        self.applied = applied.clone();
        self.processor.restore_watermark(max_event_ms);
        for (k, v) in store.load_aggregates(id, Namespace::Sku)? {
            let sku = String::from_utf8_lossy(&k).into_owned();
            let state: SkuState = codec::decode("sku state", &v)?;
            self.loaded.insert(sku.clone());
            self.processor.adopt(sku, state.window_part());
        }
        Ok(())
    }

    /// Applies one released line or snapshot and returns the intents it fired.
    pub(super) fn apply<S: StateView + ?Sized>(
        &mut self,
        store: &S,
        id: PartitionId,
        derived: &Derived,
    ) -> Result<Vec<ActionIntent>, StateError> {
        match derived {
            Derived::Line { lt, idx, .. } => {
                self.applied.insert(lt.upstream(), (lt.offset, *idx));
            }
            Derived::Snapshot { lt, .. } => {
                self.applied.insert(lt.upstream(), (lt.offset, 0));
                if !self.processor.tracks_stock() {
                    return Ok(Vec::new());
                }
            }
            Derived::Mark { .. } => {}
        }
        let Some(input) = derived.sku_input() else { return Ok(Vec::new()) };
        self.load_sku(store, id, input.sku())?;
        Ok(self.processor.apply(&input))
    }

    /// Stages the SKUs that changed and those that expired.
    pub(super) fn stage<W: StateWrite>(&mut self, batch: &mut W, id: PartitionId) -> Result<(), StateError> {
        let ns = self.state_ns();
        for d in self.processor.take_dirty() {
            batch.put_aggregate(id, ns, d.sku.as_bytes(), &codec::encode(&d.core)?);
            for (t, units) in d.lines {
                let key = line_key(&d.sku, t);
                match units {
                    Some(u) => batch.put_aggregate(id, Namespace::SkuLines, &key, &codec::encode(&u)?),
                    None => batch.delete_aggregate(id, Namespace::SkuLines, &key),
                }
            }
        }
        for (sku, lines) in self.processor.expire() {
            batch.delete_aggregate(id, ns, sku.as_bytes());
            for t in lines {
                batch.delete_aggregate(id, Namespace::SkuLines, &line_key(&sku, t));
            }
        }
        Ok(())
    }

    /// SKUs whose rows are in memory.
    pub(super) fn loaded_skus(&self) -> usize {
        self.loaded.len()
    }
}

/// `[sku length u16 BE][sku][event time ms, sign bit flipped, BE]`: one SKU's rows are
/// contiguous and in time order.
pub(super) fn line_key(sku: &str, t: i64) -> Vec<u8> {
    let mut k = line_prefix(sku);
    k.extend_from_slice(&((t as u64) ^ (1 << 63)).to_be_bytes());
    k
}

/// The part of [`line_key`] shared by every row of one SKU (and no other: it is
/// length-prefixed).
pub(super) fn line_prefix(sku: &str) -> Vec<u8> {
    let len = u16::try_from(sku.len()).unwrap_or(u16::MAX);
    let mut k = Vec::with_capacity(2 + sku.len() + 8);
    k.extend_from_slice(&len.to_be_bytes());
    k.extend_from_slice(&sku.as_bytes()[..usize::from(len)]);
    k
}

pub(super) fn decode_line_key(k: &[u8]) -> Result<(String, i64), StateError> {
    let bad = || StateError::Decode { what: "sku line key", detail: format!("{} bytes", k.len()) };
    let len = usize::from(u16::from_be_bytes(k.get(..2).and_then(|b| b.try_into().ok()).ok_or_else(bad)?));
    let sku = k.get(2..2 + len).ok_or_else(bad)?;
    let t: [u8; 8] = k.get(2 + len..).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    Ok((String::from_utf8_lossy(sku).into_owned(), (u64::from_be_bytes(t) ^ (1 << 63)) as i64))
}
