//! The open-order book: places orders and moves them through their lifecycle
//! (placed → optionally partly or fully cancelled → shipped → optionally refunded).
//!
//! Memory is bounded by the number of open orders; finished orders are dropped.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::catalog::{Catalog, Store};

pub(super) const MAX_LINES: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Placed,
    Cancelled,
    Shipped,
    Refunded,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Line {
    /// 0-based SKU index.
    pub(super) sku: u32,
    pub(super) qty: u32,
    pub(super) unit_minor: i64,
}

/// One well-formed order event, before it is given an id, a time and a schema.
#[derive(Clone, Debug)]
pub(super) struct OrderEvent {
    pub(super) kind: Kind,
    pub(super) order_serial: u64,
    pub(super) store: u32,
    lines: [Line; MAX_LINES],
    n_lines: usize,
    /// Refunded amount in minor units (refunds only).
    pub(super) refund_minor: i64,
}

impl OrderEvent {
    pub(super) fn lines(&self) -> &[Line] {
        &self.lines[..self.n_lines]
    }
}

#[derive(Clone, Copy, Debug)]
enum Stage {
    Placed,
    /// Some lines were cancelled; cancelled at most once.
    PartlyCancelled,
    /// Shipped and waiting for a refund.
    AwaitingRefund,
}

#[derive(Clone, Debug)]
struct Order {
    serial: u64,
    store: u32,
    lines: [Line; MAX_LINES],
    cancelled: [u32; MAX_LINES],
    n_lines: usize,
    stage: Stage,
}

const P_PLACE: f64 = 0.5;
const P_CANCEL: f64 = 0.15;
const P_REFUND_AFTER_SHIP: f64 = 0.12;
const P_FULL_REFUND: f64 = 0.3;

#[derive(Debug)]
pub(super) struct OrderBook {
    open: Vec<Order>,
    cap: usize,
    next_serial: u64,
}

impl OrderBook {
    pub(super) fn new(open_orders: u32) -> OrderBook {
        let cap = open_orders.max(1) as usize;
        OrderBook { open: Vec::with_capacity(cap.min(1 << 20)), cap, next_serial: 0 }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// A serial that no order uses (for records that are not part of any lifecycle).
    pub(super) fn fresh_serial(&mut self) -> u64 {
        let s = self.next_serial;
        self.next_serial += 1;
        s
    }

    /// The next event: a new order, or the next step of a random open order.
    pub(super) fn next_event(&mut self, rng: &mut ChaCha8Rng, catalog: &Catalog, stores: &[Store]) -> OrderEvent {
        let place = self.open.is_empty() || (self.open.len() < self.cap && rng.gen_bool(P_PLACE));
        if place {
            return self.place(rng, catalog, stores);
        }
        let idx = rng.gen_range(0..self.open.len());
        self.advance(idx, rng)
    }

    fn place(&mut self, rng: &mut ChaCha8Rng, catalog: &Catalog, stores: &[Store]) -> OrderEvent {
        let store = rng.gen_range(0..stores.len().max(1)) as u32;
        let currency = stores.get(store as usize).map(Store::currency);
        let mut lines = [Line::default(); MAX_LINES];
        let n_lines = pick_lines(rng, catalog, &mut lines, 1);
        for line in &mut lines[..n_lines] {
            line.qty = pick_qty(rng);
            if let Some(c) = currency {
                line.unit_minor = catalog.price_minor(line.sku, c);
            }
        }
        let order = Order {
            serial: self.fresh_serial(),
            store,
            lines,
            cancelled: [0; MAX_LINES],
            n_lines,
            stage: Stage::Placed,
        };
        let ev = OrderEvent { kind: Kind::Placed, order_serial: order.serial, store, lines, n_lines, refund_minor: 0 };
        self.open.push(order);
        ev
    }

    fn advance(&mut self, idx: usize, rng: &mut ChaCha8Rng) -> OrderEvent {
        let order = &mut self.open[idx];
        let mut ev = OrderEvent {
            kind: Kind::Shipped,
            order_serial: order.serial,
            store: order.store,
            lines: [Line::default(); MAX_LINES],
            n_lines: 0,
            refund_minor: 0,
        };
        let done = match order.stage {
            Stage::Placed if rng.gen_bool(P_CANCEL) => {
                ev.kind = Kind::Cancelled;
                cancel(order, &mut ev, rng);
                let all_cancelled = (0..order.n_lines).all(|i| order.cancelled[i] == order.lines[i].qty);
                order.stage = Stage::PartlyCancelled;
                all_cancelled
            }
            Stage::Placed | Stage::PartlyCancelled => {
                for i in 0..order.n_lines {
                    let remaining = order.lines[i].qty - order.cancelled[i];
                    if remaining > 0 {
                        ev.lines[ev.n_lines] = Line { qty: remaining, ..order.lines[i] };
                        ev.n_lines += 1;
                    }
                }
                order.stage = Stage::AwaitingRefund;
                !rng.gen_bool(P_REFUND_AFTER_SHIP)
            }
            Stage::AwaitingRefund => {
                ev.kind = Kind::Refunded;
                ev.refund_minor = refund(order, rng);
                true
            }
        };
        if done {
            self.open.swap_remove(idx);
        }
        ev
    }
}

/// Cancels a non-empty subset of the order's units and records them in `ev`.
fn cancel(order: &mut Order, ev: &mut OrderEvent, rng: &mut ChaCha8Rng) {
    let whole = rng.gen_bool(0.3);
    let forced = rng.gen_range(0..order.n_lines);
    for i in 0..order.n_lines {
        if !(whole || i == forced || rng.gen_bool(0.4)) {
            continue;
        }
        let line = order.lines[i];
        let qty = if whole { line.qty } else { rng.gen_range(1..=line.qty) };
        order.cancelled[i] = qty;
        ev.lines[ev.n_lines] = Line { qty, ..line };
        ev.n_lines += 1;
    }
}

/// A refund of either everything that was shipped or some units of one shipped line, so it
/// never exceeds the order's gross minus its cancellations.
fn refund(order: &Order, rng: &mut ChaCha8Rng) -> i64 {
    let shipped = |i: usize| i64::from(order.lines[i].qty - order.cancelled[i]);
    if rng.gen_bool(P_FULL_REFUND) {
        return (0..order.n_lines).map(|i| shipped(i) * order.lines[i].unit_minor).sum();
    }
    let candidates = (0..order.n_lines).filter(|&i| shipped(i) > 0).count();
    let pick = rng.gen_range(0..candidates.max(1));
    match (0..order.n_lines).filter(|&i| shipped(i) > 0).nth(pick) {
        Some(i) => rng.gen_range(1..=shipped(i)) * order.lines[i].unit_minor,
        None => 0,
    }
}

/// Fills `lines` with between `min` and 4 distinct SKUs; returns how many.
pub(super) fn pick_lines(rng: &mut ChaCha8Rng, catalog: &Catalog, lines: &mut [Line; MAX_LINES], min: usize) -> usize {
    let wanted = match rng.gen_range(0..100u32) {
        0..=44 => 1,
        45..=74 => 2,
        75..=89 => 3,
        _ => 4,
    }
    .max(min)
    .min(catalog.len() as usize);
    let mut n = 0;
    // A few redraws keep SKUs distinct without looping forever on tiny catalogues.
    for _ in 0..wanted * 4 {
        if n == wanted {
            break;
        }
        let sku = catalog.sample(rng);
        if lines[..n].iter().all(|l| l.sku != sku) {
            lines[n] = Line { sku, qty: 1, unit_minor: 0 };
            n += 1;
        }
    }
    n
}

pub(super) fn pick_qty(rng: &mut ChaCha8Rng) -> u32 {
    match rng.gen_range(0..100u32) {
        0..=69 => 1,
        70..=89 => 2,
        90..=96 => 3,
        _ => rng.gen_range(4..=6),
    }
}
