//! A proxy-wasm host on wasmtime that drives a real proxy-wasm module (upcheck.wasm) the way
//! Envoy 1.40 does, deterministically, on a virtual clock.
//!
//! Why: the policy's promises (a backend added broken never sees a user; a probe blip on every
//! backend 503s nobody; one prober per process) are about time, several VMs and shared state.
//! Real Envoy is slow and flaky to test that with, and proxy-wasm/test-framework has no virtual
//! time and stubs shared data. This host runs the compiled module in one main-thread VM plus N
//! worker VMs sharing one shared-data store, scripts the upstreams, and reproduces what Envoy
//! makes up on failures (see [`envoy`] for the sources), so a test reads like the incident.
//!
//! ```no_run
//! use std::time::Duration;
//! use upcheck_host_tests::{Behaviour, Host, HostOptions};
//!
//! # fn main() -> Result<(), upcheck_host_tests::HostError> {
//! let mut host = Host::from_file(
//!     upcheck_host_tests::UPCHECK_WASM,
//!     HostOptions { workers: 2, ..HostOptions::default() },
//! )?;
//! host.upstream("app1");
//! host.upstream("app2")
//!     .path("/up", Behaviour::Hang)
//!     .others(Behaviour::status(502));
//! host.start(r#"{"upstreams": [{"name": "app1"}, {"name": "app2"}]}"#)?;
//! host.advance(Duration::from_secs(1))?;
//! let traffic = host.traffic(40, Duration::from_secs(20))?;
//! assert!(traffic.failures().is_empty(), "{traffic}");
//! assert_eq!(host.requests_routed("app2"), 0);
//! # Ok(()) }
//! ```
//!
//! Public API, in short:
//! - [`Host::new`] / [`Host::from_file`] with [`HostOptions`] (workers, route timeout, routing
//!   header, VM config, log level, [`OnTrap`], and the [`Profile`]: Envoy 1.40, or NGINX with
//!   ngx_wasm_module as [`nginx`] describes it); unknown imports fail here
//!   ([`HostError::Load`]), and so do imports the profile declares otherwise.
//! - [`Host::start`] (vm start + configure on every VM; a `false` is [`HostError::Rejected`] with
//!   the VM's log lines), [`Host::reconfigure`]; [`Host::listen`] before it adds a listener
//!   with a plugin configuration of its own (the status page's), reached by its address, and
//!   [`Host::reconfigure_listener`] changes it.
//! - [`Host::upstream`] → [`Script`]: `.path("/up", b)`, `.others(b)`, `.from(t, b)`,
//!   `.all_from(t, b)` with [`Behaviour`] `status(200).after(d).body(..)`, `Hang`, `Refuse`.
//! - [`Host::advance`], [`Host::now`]: virtual time since start (guests see
//!   [`clock::EPOCH_NANOS`] + that).
//! - [`Host::traffic`] / [`Host::load`] / [`Host::request`] → [`Traffic`] / [`RequestRecord`]
//!   (outcome, upstream, flags, details, fuel, times) with summaries; [`Host::send`] to send
//!   one request without waiting, [`Host::records`] for every request so far; for long runs,
//!   [`Host::send_load`] then [`Host::take_finished_records`].
//! - Observation: [`Host::metric`], [`Host::histogram`], [`Host::metrics`], [`Host::logs`],
//!   [`Host::counts`], [`Host::probes_sent`], [`Host::requests_routed`], [`Host::shared_data`],
//!   [`Host::shared_data_usage`], [`Host::memory_pages`], [`Host::fuel`], [`Host::vm_fuel`],
//!   [`Host::vm_status`], [`Host::calls`] (every probe as a [`CallRecord`]: sent when, by which
//!   VM, answered what, delivered when).
//! - A real server behind a cluster: [`Host::real_cluster`] (etcd for the fleet, as
//!   [`loopback`] says), [`Host::real_calls`] ([`RealCall`]: path, status, bytes, real time);
//!   gRPC streams to it ([`grpc`]: etcd's Watch), [`Host::real_streams`] ([`RealStream`]:
//!   messages and bytes each way, the status it closed with).
//! - Faults: [`Host::stop_vm`], [`Host::restart_vm`]; guest traps per [`OnTrap`].
//! - [`Host::call`]: call any export, for tests of the host itself with hand-written guests.

/// Where `make build` puts upcheck.wasm, optimized as shipped, for scenario tests.
pub const UPCHECK_WASM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/upcheck.wasm");

mod abi;
pub mod clock;
pub mod envoy;
mod error;
pub mod grpc;
mod host;
mod imports;
pub mod loopback;
mod memory;
pub mod nginx;
mod options;
mod process;
mod state;
mod traffic;
mod upstream;
mod vm;

pub use abi::{Headers, LogLevel};
pub use error::HostError;
pub use grpc::RealStream;
pub use host::Host;
pub use loopback::RealCall;
pub use options::{HostOptions, OnTrap, Profile};
pub use process::{CallRecord, LogLine, SharedDataUsage};
pub use traffic::{Load, Outcome, RequestRecord, RequestSpec, Traffic};
pub use upstream::{Behaviour, Counts, Script};
pub use vm::{Fuel, VmStatus};
pub use wasmtime::Val;
