//! upcheck's command line: an Envoy configuration written from what the operators already have.
//!
//! Moving from Caddy to Envoy by hand means copying each backend's address into three places of
//! the Envoy configuration (the pool, the backend's probe cluster, the plugin configuration) and
//! keeping them in step. `upcheck envoy` writes the whole file from one input, either an upcheck
//! plugin configuration ([`plugin`]) or Caddy's JSON ([`caddy`]), checked by the module's own
//! parser ([`upcheck_policy::Config::parse`]) so an input that passes here passes in Envoy, and
//! refused with the JSON path and what to do when it cannot be honoured. The pieces:
//! [`deployment`] turns an input into backends with Envoy endpoints ([`endpoint`]), [`envoy`]
//! writes the YAML (and the pieces the e2e harness serves as JSON) as a [`tree`], [`output`]
//! replaces the output file atomically. Input JSON is read by [`input`]. `upcheck nginx` writes
//! the same deployment for NGINX with ngx_wasm_module ([`nginx`]), and `upcheck envoy --units` the
//! systemd units that run it on a VM ([`units`]).
//!
//! `upcheck simulate` asks what a configuration would have done before anyone deploys it:
//! [`scenario`] reads what the backends do over time (each answer a [`mode`], the grammar the e2e
//! harness's fake backends read too), [`simulation`] runs it in the real module
//! on virtual time, [`timeline`] tells what changed and what users saw. They run the module in
//! wasmtime, so they are built only with the `simulate` feature (off by default).

pub mod caddy;
pub mod change_record;
pub mod deployment;
pub mod endpoint;
pub mod envoy;
pub mod etcd;
pub mod etcd_access;
pub mod etcd_client;
pub mod etcd_membership;
pub mod etcd_roles;
pub mod etcd_tls;
pub mod file_membership;
pub mod http1;
mod input;
pub mod membership;
pub mod mode;
pub mod nginx;
pub mod output;
pub mod plugin;
mod regex_text;
#[cfg(feature = "simulate")]
pub mod scenario;
#[cfg(feature = "simulate")]
pub mod simulation;
#[cfg(feature = "simulate")]
pub mod timeline;
pub mod tree;
pub mod units;

use upcheck_policy::ConfigError;

/// An input that cannot be used: where in it, and why (the module's error type, so both read alike).
fn refuse(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        reason: reason.into(),
    }
}
