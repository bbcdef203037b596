//! How a host is set up: the options a test picks before the host starts, and the proxy it
//! behaves as. A module of its own because the hostcalls and each VM's state read the profile
//! too, below the host that takes the options.

use crate::abi::LogLevel;
use std::time::Duration;

/// How the host is set up; `HostOptions::default()` matches `config/envoy-simple.yaml` with 2 workers.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Worker VMs (ids 1..=workers) besides the main-thread VM (id 0). Default 2.
    pub workers: usize,
    /// Route timeout for user requests (Envoy's default is 15 s).
    pub route_timeout: Duration,
    /// The request header whose value names the cluster (the route's `cluster_header`).
    pub route_header: String,
    /// The VM configuration handed to `proxy_on_vm_start`. Default empty.
    pub vm_config: String,
    /// What `proxy_get_log_level` answers (Envoy's default: info). Every log line is captured.
    pub log_level: LogLevel,
    /// What a guest trap does.
    pub on_trap: OnTrap,
    /// Which proxy the host behaves as. Default [`Profile::Envoy`].
    pub profile: Profile,
    /// How long each VM takes to compile the module when the host starts, for the window in
    /// which requests arrive before any VM can take them. NGINX opens its listeners in the
    /// master process and each worker compiles the module itself as it starts (0.5–1.5 s
    /// measured with wasmtime under load), so the requests of that window wait in the listen
    /// queue and reach the worker all at once when it is up. Default zero: every VM is up when
    /// [`crate::Host::start`] returns.
    pub compile: Duration,
}

/// Which proxy-wasm host the host behaves as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// Envoy 1.40 ([`crate::envoy`]).
    #[default]
    Envoy,
    /// NGINX with Kong's ngx_wasm_module ([`crate::nginx`]): its import signatures, its tick
    /// rule, dispatches by `host:port` failing with no headers, NotFound for the properties it
    /// lacks, metrics that trap when used as the other kind, no response flags, NGINX's own
    /// 502 and 504.
    Nginx,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            workers: 2,
            route_timeout: Duration::from_secs(15),
            route_header: "x-upcheck-upstream".to_string(),
            vm_config: String::new(),
            log_level: LogLevel::Info,
            on_trap: OnTrap::Fail,
            profile: Profile::Envoy,
            compile: Duration::ZERO,
        }
    }
}

/// What happens when a guest traps (a Rust panic in the filter is a trap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTrap {
    /// The host call that ran the guest returns [`crate::HostError::Trap`]: the test fails,
    /// clearly.
    Fail,
    /// As in Envoy without `FAIL_RELOAD`: the VM is dead, its ticks stop, and its worker answers
    /// every request with Envoy's 503 `wasm_fail_stream`. See [`crate::Host::vm_status`].
    Crash,
}
