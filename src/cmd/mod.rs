//! One module per CLI command.

pub mod actions;
pub mod batch;
pub mod demo;
pub mod gen;
pub mod microbatch;
pub mod query;
pub mod run;
pub mod shadow;
