//! The command line's tests: what `upcheck envoy`, `upcheck nginx`, `upcheck check` and
//! `upcheck simulate` (feature `simulate`) write and refuse, checked by Envoy, NGINX, Prometheus
//! and systemd-analyze where they take part. One test binary; each module a suite of its own
//! (docs/testing.md).

mod common;

mod backends;
mod caddy_import;
mod envoy_validate;
mod etcd_backends;
mod etcd_input;
mod moving_from_caddy;
mod nginx_validate;
mod plugin_input;
mod prometheus;
mod prometheus_module;
mod shipped_configs;
#[cfg(feature = "simulate")]
mod simulate;
mod units;
