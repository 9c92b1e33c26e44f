//! Test support that ships with the library, so unit tests, `tests/` and downstream users
//! can exercise a topology without a broker.
//!
//! - [`driver`]: [`driver::TopologyDriver`], the broker-free topology test driver (it lives in
//!   `tasks::driver`, since `tidemark shadow` replays logs with it too);
//! - [`rules`]: rule sections that fire on small generated histories;
//! - [`s3`]: a real S3-compatible object store (versitygw) on 127.0.0.1 that can go down and
//!   come back.

pub use crate::tasks::driver;
pub mod rules;
pub mod s3;
