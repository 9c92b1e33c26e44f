//! Test support that ships with the library, so unit tests, `tests/` and downstream users
//! can exercise a topology without a broker.
//!
//! - [`driver`]: [`driver::TopologyDriver`], the broker-free topology test driver (it lives in
//!   `tasks::driver`, since `tidemark shadow` replays logs with it too);
//! - [`rules`]: rule sections that fire on small generated histories.

pub use crate::tasks::driver;
pub mod rules;
