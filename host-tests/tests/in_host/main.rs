//! The real upcheck.wasm in a wasmtime proxy-wasm host, on a virtual clock: one test binary, so the
//! module is compiled by Cranelift once per run and linked once. Each module is a suite of its own
//! (docs/testing.md); `soak` and `fleet_scale` are ignored unless asked for (`make host-test`).

mod common;

mod deploy;
mod drain;
mod fleet_scale;
mod grpc_watch;
mod histories;
mod host_mechanics;
mod hosts;
mod membership;
mod metrics_page;
mod operator_metrics;
mod peers;
mod probe_bodies;
mod process;
mod routing;
mod scenarios;
mod shared_cause;
mod soak;
mod support;
mod warm_up;
