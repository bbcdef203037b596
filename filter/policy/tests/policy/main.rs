//! The policy core's integration tests, natively: one test binary, each module a suite of its own
//! (docs/testing.md).

mod support;

mod config;
mod config_docs;
mod drain;
mod fleet_config;
mod health;
mod history;
mod imports;
mod incidents;
mod json;
mod outlier;
mod pools;
mod properties;
mod repository_map;
mod states;
mod warm_up;
