//! upcheck.wasm in a real Envoy 1.40: one test binary whose tests run side by side, as many Envoys
//! at a time as the harness allows (`upcheck_e2e::envoy`); each module a suite of its own
//! (docs/testing.md).

mod backend_breaks_mid_traffic;
mod backend_joins_broken;
mod client_retry_headers;
mod client_routing_header;
mod cold_start;
mod deploy;
mod drain;
mod dynamic_config;
mod envoy_routing;
mod failover;
mod fake_upstream;
mod faults;
mod fleet;
mod fleet_evidence;
mod fleet_paths;
mod health_blip;
mod invalid_config;
mod membership;
mod one_prober;
mod peers;
mod plugin_config;
mod pool_label;
mod retry_table;
mod shared_cause;
mod shipped_configs;
mod status_page_access;
mod status_page_browser;
mod support;
mod two_pools;
