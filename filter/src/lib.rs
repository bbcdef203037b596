//! upcheck.wasm: the proxy-wasm adapter over the `upcheck-policy` core.
//!
//! The policy decides; this crate only turns host callbacks into policy inputs and policy
//! outputs into host calls. A panic here would kill the worker's VM (503 forever, timers
//! stopped), so nothing in it may panic: no `unwrap`, no indexing, every host call's status
//! handled. It speaks the ABI itself rather than through the Rust SDK (proxy-wasm 0.2.5), which
//! panics by itself on a status a call was not written to expect (hosts differ in what they
//! answer) and costs more per request than upcheck's own work: the callbacks come in at
//! [`callbacks`], the calls go out through [`hostcall`], which hands every status back.

mod abi;
mod callbacks;
mod fleet;
mod hostcall;
mod http;
mod logger;
mod metrics;
mod probes;
mod retry_headers;
mod root;
mod route;
mod shared;
mod status_page;
mod vm;
