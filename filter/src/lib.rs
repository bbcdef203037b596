//! upcheck.wasm: the proxy-wasm adapter over the `upcheck-policy` core.
//!
//! The policy decides; this crate only turns host callbacks into policy inputs and policy
//! outputs into host calls. A panic here would kill the worker's VM (503 forever, timers
//! stopped), so nothing in it may panic: no `unwrap`, no indexing, every host call's status
//! handled. The SDK (proxy-wasm 0.2.5) panics by itself on a status a call was not written to
//! expect, and hosts differ in what they answer, so the calls go through [`hostcall`], on the
//! raw ABI, which hands every status back.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod etcd_calls;
mod hostcall;
mod http;
mod logger;
mod metrics;
mod probes;
mod root;
mod shared;
mod status_page;
mod vm;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(root::Root::default()));
}}
