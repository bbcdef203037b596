//! The policy core's integration tests, natively: one test binary, each module a suite of its own
//! (docs/testing.md).

// The crate's no-panic lints (the workspace's `[workspace.lints]`) hold the module's code, not
// its tests; clippy.toml lets `#[test]` functions and `#[cfg(test)]` modules unwrap, index and
// panic, and this binary is test code throughout, its helpers too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

mod config;
mod config_docs;
mod drain;
mod fleet_config;
mod grpc;
mod health;
mod history;
mod imports;
mod incidents;
mod json;
mod names;
mod outlier;
mod pools;
mod properties;
mod repository_map;
mod retries;
mod states;
mod warm_up;
mod watch;
