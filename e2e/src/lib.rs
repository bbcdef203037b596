//! End-to-end tests of upcheck.wasm inside a real Envoy.
//!
//! The pieces a scenario is made of, each in its own module: fake backends that break on command
//! ([`upstream`], [`mode`], down to the bytes on the [`wire`]), one in a process of its own that
//! can be crashed ([`upstream_process`]), user traffic that reports what users saw ([`replay`]),
//! and a real Envoy per test ([`envoy`], started by the launcher the benchmarks share,
//! [`envoy_process`]) whose configuration ([`envoy_config`], the CLI's pieces) is served from
//! files ([`xds`]) so it can change while Envoy runs, in either routing mode
//! ([`envoy_config::Routing`]), the plugin configuration the incident scenarios share
//! ([`plugin`]), requests written by hand ([`raw_http`]), and an address of this machine that is
//! not loopback ([`local_address`]), a headless browser to look at the status page with
//! ([`browser`]), and the operators' Caddy JSON turned into an Envoy configuration by the built
//! `upcheck` binary ([`caddy`]). A real Prometheus scrapes an Envoy as an operator's would
//! ([`prometheus`]). Fleets of balancers share a real etcd ([`etcd`]), and their faults are made
//! for real: a path cut by the kernel ([`path_cut`]), a wall clock set off for one process
//! ([`clock`]), an etcd answering late through a relay ([`relay`]). gRPC backends are real gRPC
//! servers ([`grpc_upstream`]: the standard health service, whose statuses change on command, and
//! a test service whose calls fail on command), and their users make unary calls at a fixed rate
//! and report each call's gRPC status ([`grpc_replay`]). A scenario reads:
//!
//! ```no_run
//! # async fn scenario() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use upcheck_e2e::{envoy::Envoy, mode::Mode, replay::Replay, upstream::FakeUpstream};
//!
//! let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
//! let app2 = FakeUpstream::start("app2", Mode::Status(502)).await?;
//! let envoy = Envoy::builder()
//!     .concurrency(2)
//!     .upstream(&app1)
//!     .upstream(&app2)
//!     .wasm_filter(serde_json::json!({
//!         "upstreams": [{"name": "app1"}, {"name": "app2"}],
//!         "health_checks": {
//!             "active": {"path": "/up", "interval": "1s", "timeout": "500ms"},
//!             "passive": {"fail_duration": "2s", "max_fails": 3}}}))
//!     .start()
//!     .await?;
//! let report = Replay::new(envoy.url("/"), 40, Duration::from_secs(10)).run().await?;
//! println!("{report}");
//! assert_eq!(report.failures(), 0);
//! assert_eq!(app2.counts().requests, 0);
//! # Ok(())
//! # }
//! ```

pub mod browser;
pub mod caddy;
pub mod clock;
pub mod envoy;
pub mod envoy_config;
pub mod envoy_process;
pub mod etcd;
pub mod grpc_replay;
pub mod grpc_upstream;
pub mod local_address;
pub mod mode;
pub mod path_cut;
pub mod plugin;
pub mod ports;
pub mod prometheus;
pub mod raw_http;
pub mod relay;
pub mod replay;
pub mod tls;
pub mod upstream;
pub mod upstream_process;
pub mod wire;
pub mod xds;
