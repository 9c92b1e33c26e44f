//! Test support that ships with the library, so unit tests, `tests/` and downstream users
//! can exercise a topology without a broker.
//!
//! - [`driver`]: [`driver::TopologyDriver`], the broker-free topology test driver.

pub mod driver;
