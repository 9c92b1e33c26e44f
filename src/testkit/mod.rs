//! Test support that ships with the library, so unit tests, `tests/` and downstream users
//! can exercise a topology without a broker.
//!
//! - [`driver`]: [`driver::TopologyDriver`], the broker-free topology test driver;
//! - [`rules`]: rule sections that fire on small generated histories.

pub mod driver;
pub mod rules;
