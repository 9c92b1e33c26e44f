//! One module per CLI command.

pub mod batch;
pub mod demo;
pub mod gen;
pub mod query;
pub mod run;
