//! The figures of a dashboard or finance row, defined once: the order count, a second count
//! (units on the dashboard, events in finance), and the money.
//!
//! - [`Figures::apply`] is the one definition of what an event adds: a placed event one
//!   order and its lines to `gross`, a cancelled event its lines to `cancelled`, a refund
//!   its amount to `refunded`; shipped events carry no money and add nothing. The second
//!   count is the type parameter's rule ([`Units`], [`Events`]), so dashboard and finance
//!   figures cannot be added to each other. A change here that changes a result must bump
//!   [`crate::finance::DEFINITION_VERSION`], as one in `finance` must.
//! - `net = gross − cancelled − refunded` is derived, never stored in an aggregate.
//! - Aggregates persist `Figures` with bincode: the fields in the order above, amounts as
//!   decimal strings, the same bytes as when each aggregate declared them itself.
//! - Published rows carry the figures flat in their JSON, in one place and order:
//!   `orders, <units|events>, gross, cancelled, refunded, net`. [`published_row!`] declares
//!   such a row and writes that form; serde's `flatten` cannot, as it does not combine with
//!   `deny_unknown_fields`.

use std::fmt;
use std::marker::PhantomData;

use rust_decimal::Decimal;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use crate::currency::Currency;
use crate::event::{CanonicalEvent, EventKind};

/// What the second count of a row counts.
pub trait Count: Copy + Default + fmt::Debug + PartialEq + Eq {
    /// Its field name in published rows.
    const NAME: &'static str;
    /// What one event with money adds to it.
    fn of(event: &CanonicalEvent) -> u64;
}

/// Dashboard rows count the units of placed orders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Units;

impl Count for Units {
    const NAME: &'static str = "units";
    fn of(event: &CanonicalEvent) -> u64 {
        if event.kind == EventKind::Placed {
            event.units()
        } else {
            0
        }
    }
}

/// Finance rows count the events applied (placed, cancelled, refunded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events;

impl Count for Events {
    const NAME: &'static str = "events";
    fn of(_: &CanonicalEvent) -> u64 {
        1
    }
}

/// Orders, the second count and the amounts of one row, in one currency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures<C> {
    /// Placed events.
    pub orders: u64,
    /// Units or events, per `C`.
    pub count: u64,
    // Decimal's default serde impl needs a self-describing format; state is bincode.
    #[serde(with = "rust_decimal::serde::str")]
    pub gross: Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    pub cancelled: Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    pub refunded: Decimal,
    #[serde(skip)]
    counts: PhantomData<C>,
}

impl<C: Count> Figures<C> {
    pub fn new(orders: u64, count: u64, gross: Decimal, cancelled: Decimal, refunded: Decimal) -> Figures<C> {
        Figures { orders, count, gross, cancelled, refunded, counts: PhantomData }
    }

    /// What one deduplicated event adds; `None` for events without money (shipped).
    pub fn of(event: &CanonicalEvent) -> Option<Figures<C>> {
        let mut f = Figures::default();
        f.apply(event).then_some(f)
    }

    /// Adds one deduplicated event. Returns false, changing nothing, for shipped events.
    pub fn apply(&mut self, event: &CanonicalEvent) -> bool {
        match event.kind {
            EventKind::Placed => {
                self.orders += 1;
                self.gross += event.lines_amount();
            }
            EventKind::Cancelled => self.cancelled += event.lines_amount(),
            EventKind::Refunded => self.refunded += event.refund_amount.unwrap_or_default(),
            EventKind::Shipped => return false,
        }
        self.count += C::of(event);
        true
    }

    pub fn net(&self) -> Decimal {
        self.gross - self.cancelled - self.refunded
    }

    /// Adds another row's figures (a sibling partial, an adjustment).
    pub fn add(&mut self, other: &Figures<C>) {
        self.orders += other.orders;
        self.count += other.count;
        self.gross += other.gross;
        self.cancelled += other.cancelled;
        self.refunded += other.refunded;
    }

    /// Every amount at the currency's scale, as published.
    pub fn canonical(&self, c: Currency) -> Figures<C> {
        Figures::new(
            self.orders,
            self.count,
            c.canonical(self.gross),
            c.canonical(self.cancelled),
            c.canonical(self.refunded),
        )
    }

    /// The published fields, `orders, <C::NAME>, gross, cancelled, refunded, net`, written
    /// into a row's JSON object. `net` is the row's own (a reader checks it, see
    /// [`crate::finance::validate`]).
    pub fn serialize_published<S: SerializeStruct>(&self, net: &Decimal, s: &mut S) -> Result<(), S::Error> {
        s.serialize_field("orders", &self.orders)?;
        s.serialize_field(C::NAME, &self.count)?;
        s.serialize_field("gross", &self.gross)?;
        s.serialize_field("cancelled", &self.cancelled)?;
        s.serialize_field("refunded", &self.refunded)?;
        s.serialize_field("net", net)
    }
}

impl Figures<Units> {
    pub fn units(&self) -> u64 {
        self.count
    }
}

impl Figures<Events> {
    pub fn events(&self) -> u64 {
        self.count
    }
}

/// Declares a published row whose [`Figures`] sit, flat, between its leading and trailing
/// fields, with its JSON form: the leading fields, `orders, <count>, gross, cancelled,
/// refunded, net`, then the trailing fields, in declaration order.
///
/// ```ignore
/// published_row! {
///     /// Doc of the row.
///     #[serde(deny_unknown_fields)]
///     pub struct Row {
///         pub day: String,
///         ..figures(events: Events),
///         pub version: u64,
///     }
/// }
/// ```
///
/// The row gets `pub figures: Figures<C>` and `pub net: Decimal` (as published; readers
/// check it rather than recompute it). Serialisation writes every field through
/// `serialize_struct`, exactly as a derive would; deserialisation reads a flat twin struct
/// derived with the given `#[serde(...)]` container attributes.
macro_rules! published_row {
    (
        $(#[doc = $doc:literal])*
        $(#[serde($($serde:tt)*)])?
        pub struct $name:ident {
            $( $(#[$hm:meta])* pub $head:ident : $hty:ty, )*
            ..figures($count:ident : $c:ty),
            $( $(#[$tm:meta])* pub $tail:ident : $tty:ty, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$hm])* pub $head: $hty, )*
            pub figures: $crate::figures::Figures<$c>,
            /// `gross − cancelled − refunded` at the currency's scale, as published.
            pub net: rust_decimal::Decimal,
            $( $(#[$tm])* pub $tail: $tty, )*
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let fields = [$(stringify!($head),)* $(stringify!($tail),)*].len() + 6;
                let mut st = s.serialize_struct(stringify!($name), fields)?;
                $( st.serialize_field(stringify!($head), &self.$head)?; )*
                self.figures.serialize_published(&self.net, &mut st)?;
                $( st.serialize_field(stringify!($tail), &self.$tail)?; )*
                st.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                $(#[serde($($serde)*)])?
                struct Flat {
                    $( $head: $hty, )*
                    orders: u64,
                    $count: u64,
                    gross: rust_decimal::Decimal,
                    cancelled: rust_decimal::Decimal,
                    refunded: rust_decimal::Decimal,
                    net: rust_decimal::Decimal,
                    $( $tail: $tty, )*
                }
                let f = Flat::deserialize(d)?;
                Ok($name {
                    $( $head: f.$head, )*
                    figures: $crate::figures::Figures::new(f.orders, f.$count, f.gross, f.cancelled, f.refunded),
                    net: f.net,
                    $( $tail: f.$tail, )*
                })
            }
        }
    };
}

pub(crate) use published_row;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::DashAgg;
    use crate::event::test_event as ev;
    use crate::provisional::ProvAgg;

    const BINCODE: bincode::config::Configuration = bincode::config::standard();

    /// [`DashAgg`] as stored before the figures were one type: the fields declared inline.
    #[derive(Serialize)]
    struct InlineDashAgg {
        orders: u64,
        units: u64,
        #[serde(with = "rust_decimal::serde::str")]
        gross: Decimal,
        #[serde(with = "rust_decimal::serde::str")]
        cancelled: Decimal,
        #[serde(with = "rust_decimal::serde::str")]
        refunded: Decimal,
        version: u64,
        as_of_ms: i64,
    }

    /// [`ProvAgg`] as stored then, its sums a struct of their own.
    #[derive(Serialize)]
    struct InlineProvAgg {
        sums: InlineFinanceAgg,
        as_of_ms: i64,
    }

    #[derive(Serialize)]
    struct InlineFinanceAgg {
        orders: u64,
        events: u64,
        #[serde(with = "rust_decimal::serde::str")]
        gross: Decimal,
        #[serde(with = "rust_decimal::serde::str")]
        cancelled: Decimal,
        #[serde(with = "rust_decimal::serde::str")]
        refunded: Decimal,
    }

    fn round_trip<T: serde::de::DeserializeOwned + Serialize>(old: &impl Serialize) -> (T, bool) {
        let bytes = bincode::serde::encode_to_vec(old, BINCODE).expect("encode");
        let (new, read): (T, usize) = bincode::serde::decode_from_slice(&bytes, BINCODE).expect("decode");
        let same = read == bytes.len() && bincode::serde::encode_to_vec(&new, BINCODE).expect("encode") == bytes;
        (new, same)
    }

    #[test]
    fn stored_aggregates_with_inline_fields_decode_as_figures_and_encode_to_the_same_bytes() {
        let (gross, cancelled, refunded) = (Decimal::new(59_70, 2), Decimal::new(19_90, 2), Decimal::new(5, 1));
        let old = InlineDashAgg { orders: 3, units: 7, gross, cancelled, refunded, version: 9, as_of_ms: -4 };
        let (dash, same) = round_trip::<DashAgg>(&old);
        assert!(same, "a dashboard aggregate re-encodes to other bytes");
        assert_eq!(dash, DashAgg { figures: Figures::new(3, 7, gross, cancelled, refunded), version: 9, as_of_ms: -4 });

        let old = InlineProvAgg {
            sums: InlineFinanceAgg { orders: 2, events: 5, gross, cancelled, refunded },
            as_of_ms: 1_764_378_000_000,
        };
        let (prov, same) = round_trip::<ProvAgg>(&old);
        assert!(same, "a provisional aggregate re-encodes to other bytes");
        assert_eq!(prov, ProvAgg { sums: Figures::new(2, 5, gross, cancelled, refunded), as_of_ms: 1_764_378_000_000 });
    }

    #[test]
    fn an_event_adds_one_order_and_its_lines_when_placed_and_nothing_when_shipped() {
        let placed = ev(EventKind::Placed, 0, vec![(2, "1980"), (1, "500")], None);
        let cancelled = ev(EventKind::Cancelled, 0, vec![(1, "500")], None);
        let refunded = ev(EventKind::Refunded, 0, vec![], Some("100"));
        let shipped = ev(EventKind::Shipped, 0, vec![(3, "1")], None);
        let mut dash = Figures::<Units>::default();
        let mut fin = Figures::<Events>::default();
        for e in [&placed, &cancelled, &refunded] {
            assert!(dash.apply(e) && fin.apply(e));
        }
        assert!(!dash.apply(&shipped) && !fin.apply(&shipped));
        assert_eq!((dash.orders, dash.units(), fin.orders, fin.events()), (1, 3, 1, 3));
        assert_eq!((dash.gross, dash.cancelled, dash.refunded), (4460.into(), 500.into(), 100.into()));
        assert_eq!(dash.net(), Decimal::from(4460 - 500 - 100));
        assert_eq!(Figures::<Events>::of(&shipped), None);
    }

    #[test]
    fn adding_a_partial_adds_every_field() {
        let mut sum = Figures::<Events>::new(2, 3, 100.into(), 10.into(), 0.into());
        sum.add(&Figures::new(1, 1, 5.into(), 0.into(), 1.into()));
        assert_eq!(sum, Figures::new(3, 4, 105.into(), 10.into(), 1.into()));
    }

    published_row! {
        /// A row for the tests of the macro.
        #[serde(deny_unknown_fields)]
        pub struct Strict {
            pub key: String,
            ..figures(events: Events),
            pub version: u64,
        }
    }

    published_row! {
        pub struct Lenient {
            pub key: String,
            ..figures(units: Units),
        }
    }

    #[test]
    fn a_published_row_writes_its_figures_flat_in_place_and_reads_them_back() {
        let usd = Currency::from_code("USD").expect("usd");
        let raw = Figures::<Events>::new(1, 2, 30.into(), 5.into(), 0.into());
        let (figures, net) = (raw.canonical(usd), usd.canonical(raw.net()));
        let row = Strict { key: "k".into(), figures, net, version: 4 };
        let json = serde_json::to_string(&row).expect("json");
        assert_eq!(
            json,
            r#"{"key":"k","orders":1,"events":2,"gross":"30.00","cancelled":"5.00","refunded":"0.00","net":"25.00","version":4}"#
        );
        assert_eq!(serde_json::from_str::<Strict>(&json).expect("parse"), row);
        let lenient = r#"{"key":"k","orders":1,"units":2,"gross":"1","cancelled":"0","refunded":"0","net":"1"}"#;
        let parsed: Lenient = serde_json::from_str(lenient).expect("parse");
        assert_eq!(serde_json::to_string(&parsed).expect("json"), lenient);
    }

    #[test]
    fn a_strict_row_refuses_unknown_and_missing_fields_and_a_lenient_one_ignores_unknown_ones() {
        let extra = r#"{"key":"k","orders":1,"events":2,"gross":"1","cancelled":"0","refunded":"0","net":"1","version":4,"x":0}"#;
        let err = serde_json::from_str::<Strict>(extra).expect_err("unknown field");
        assert!(err.to_string().contains("unknown field `x`"), "{err}");
        let missing = r#"{"key":"k","orders":1,"gross":"1","cancelled":"0","refunded":"0","net":"1","version":4}"#;
        let err = serde_json::from_str::<Strict>(missing).expect_err("missing field");
        assert!(err.to_string().contains("missing field `events`"), "{err}");
        let extra = r#"{"key":"k","orders":1,"units":2,"gross":"1","cancelled":"0","refunded":"0","net":"1","x":0}"#;
        assert!(serde_json::from_str::<Lenient>(extra).is_ok());
    }
}
