//! The root context of one VM: configuration, the tick that keeps this VM's view current, and —
//! on the VM holding the lease — the probes.
//!
//! Every VM ticks (Envoy ticks the main thread's and each worker's), so every VM tries the lease;
//! one wins and probes for the whole process. The timer is set once for the life of the root
//! context (a host may refuse to change it), at [`WAKE`]; a wake-up does a tick's work when
//! [`tick_due`] says so, at once after a (re)configuration, so the first probe round goes out
//! within one wake-up of start.
//!
//! A configuration whose role is the status page ([`upcheck_policy::Role`]) gets none of that:
//! no tick, no lease, no announcement, no metric written; its requests go to a [`PageContext`]
//! context, which reads the shared tables when the page is asked for.

use crate::abi::BufferType;
use crate::hostcall as hostcalls;
use crate::http;
use crate::metrics::{BackendMetrics, PoolMetrics};
use crate::probes;
use crate::route;
use crate::shared;
use crate::vm::{self, Handle, Resumed, Vm};
use upcheck_policy::{lease, nanos, tick_due, Config, LeaseHeld, Pick, Pool, Time, WAKE};

/// One VM's root context.
#[derive(Default)]
pub struct Root {
    vm: Handle,
    /// This root context's process-unique id (0 until configured).
    id: u64,
    /// Fingerprint of its plugin configuration, for the lease.
    config_fingerprint: u64,
    /// When the last tick's work was done; none since the last (re)configuration.
    last_tick: Option<Time>,
    /// Whether the timer was set (once, for the root context's life).
    ticking: bool,
    /// Whether its configuration serves the status page rather than the traffic.
    serves_page: bool,
}

impl Root {
    /// Starts the timer, the first time only: its period never changes.
    fn start_timer(&mut self) {
        if self.ticking {
            return;
        }
        self.ticking = true;
        if let Err(status) = hostcalls::set_tick_period(WAKE) {
            log::error!("upcheck: the host refused a tick period ({status:?}); probes cannot run");
        }
    }

    /// Takes a status page configuration: a pool to render, without metric handles, that only
    /// ever takes in what the traffic filters share. A root context that routed before ignores
    /// its timer from now on, and its lease lapses.
    fn serve_page(&mut self, config: Config, now: Time) -> bool {
        log::debug!(
            "upcheck: serving the status page of {} backends",
            config.upstreams.len()
        );
        let configured = vm::with(&self.vm, |v| {
            v.flush_requests();
            v.pool = Some(Pool::new(config, now, |_| BackendMetrics::default()));
            v.page_metrics = None;
            v.resync();
        });
        self.serves_page = true;
        configured.is_some()
    }
}

impl Root {
    /// The VM is shutting down: the requests counted since the last tick are flushed.
    pub fn on_done(&mut self) {
        vm::with(&self.vm, Vm::flush_requests);
    }

    /// The request held at cold start on probe `token`, if it is one's: ngx_wasm_module names the
    /// root context in the answer to a request's own call.
    pub fn held_request(&self, token: u32) -> Option<u32> {
        vm::with(&self.vm, |v| {
            let held = v.holding.iter().find(|h| h.token == token)?;
            Some(held.context)
        })
        .flatten()
    }

    /// The answer to call `token` (a probe's or etcd's), its body `body_size` bytes.
    pub fn on_http_call_response(&mut self, token: u32, body_size: usize) {
        let now = vm::now();
        let fingerprint = self.config_fingerprint;
        vm::with(&self.vm, |v| {
            if v.etcd_answered(token, body_size, now) {
                return;
            }
            // What other VMs saw since this VM's last tick first: whether the answer changes
            // what anyone sees (a pass after a refusal a worker just shared) is judged on it.
            v.sync(fingerprint, now);
            let Some(pool) = v.pool.as_mut() else {
                return;
            };
            let effects = probes::answer(pool, token, body_size, now);
            v.carry_out(effects, now);
        });
    }

    /// A message of gRPC stream `token`, `size` bytes: etcd's watch.
    pub fn on_grpc_receive(&mut self, token: u32, size: usize) {
        let now = vm::now();
        vm::with(&self.vm, |v| v.stream_message(token, size, now));
    }

    /// gRPC stream `token` ended with `status`.
    pub fn on_grpc_close(&mut self, token: u32, status: u32) {
        let now = vm::now();
        vm::with(&self.vm, |v| v.stream_closed(token, status, now));
    }

    /// The VM starts: the logger goes in.
    pub fn on_vm_start(&mut self) -> bool {
        crate::logger::install();
        true
    }

    /// Takes the plugin configuration: whether it is valid.
    pub fn on_configure(&mut self) -> bool {
        crate::logger::install();
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
            .ok()
            .flatten()
            .unwrap_or_default();
        let config = match Config::parse(&bytes) {
            Ok(config) => config,
            Err(e) => {
                log::error!("upcheck: invalid configuration: {e}");
                return false;
            }
        };
        crate::logger::set_level(config.log_level);
        let now = vm::now();
        if config.status_page().is_some() {
            return self.serve_page(config, now);
        }
        if self.id == 0 {
            self.id = shared::vm_id();
        }
        let fingerprint = shared::fingerprint(&bytes);
        self.config_fingerprint = fingerprint;
        // A pool that served the page has no metric handles: a traffic pool starts afresh.
        let afresh = std::mem::take(&mut self.serves_page);
        let configured = vm::with(&self.vm, |v| {
            log::debug!(
                "upcheck: configured with {} backends",
                config.upstreams.len()
            );
            let name = config.pool.clone();
            let define = |u: &_| BackendMetrics::define(name.as_deref(), u);
            v.pool_metrics = PoolMetrics::define(name.as_deref());
            v.last_tick = now;
            // Counts for a backend the new configuration drops would go with its record.
            v.flush_requests();
            // A pool given another name has its metrics under other names: it starts afresh too.
            let renamed = v.pool.as_ref().is_some_and(|p| p.config().pool != name);
            let effects = match v.pool.as_mut() {
                Some(pool) if !afresh && !renamed => pool.configure(config, now, define),
                _ => {
                    v.pool = Some(Pool::new(config, now, define));
                    Default::default()
                }
            };
            v.carry_out(effects, now);
            if let Some(pool) = v.pool.as_ref() {
                shared::announce(|table| pool.announce(table, fingerprint));
            }
            // A root context created by a configuration update starts from what the process
            // already knows rather than from a cold start.
            v.resync();
            v.sync(fingerprint, now);
        });
        self.last_tick = None;
        self.start_timer();
        configured.is_some()
    }

    /// The timer: a tick's work when one is due.
    pub fn on_tick(&mut self) {
        if self.serves_page {
            return;
        }
        let now = vm::now();
        if !tick_due(self.last_tick, now) {
            vm::with(&self.vm, |v| v.between_ticks(now));
            return;
        }
        self.last_tick = Some(now);
        let held = shared::hold_lease(self.id, self.config_fingerprint, now, lease::TTL);
        let seed = self.id ^ nanos(now);
        let fingerprint = self.config_fingerprint;
        vm::with(&self.vm, |v| {
            let Some(pool) = v.pool.as_mut() else {
                return;
            };
            if held != pool.probing() {
                // Gaining the lease: take over from the published tables, then probe everything
                // at once. Losing it: take in again what this VM passed over while it probed
                // (its own backends' entries in the probe table), at the sync below.
                v.resync();
                if held {
                    v.sync(fingerprint, now);
                }
            }
            if let Some(pool) = v.pool.as_mut() {
                let lease = match held {
                    true => LeaseHeld::Here { seed },
                    false => LeaseHeld::Elsewhere,
                };
                let effects = pool.lease(lease, now);
                v.carry_out(effects, now);
            }
            v.last_tick = now;
            v.flush_requests();
            v.sync(fingerprint, now);
            if let Some(pool) = v.pool.as_mut() {
                let effects = pool.tick(now);
                v.carry_out(effects, now);
            }
            v.forget_holding();
            resume_parked(v);
        });
    }

    /// Whether its configuration serves the status page rather than the traffic.
    pub fn serves_page(&self) -> bool {
        self.serves_page
    }

    /// The VM state its request streams share.
    pub fn vm(&self) -> Handle {
        self.vm.clone()
    }
}

/// Resumes requests parked at cold start once a backend can be picked.
fn resume_parked(v: &mut Vm) {
    if v.parked.is_empty() {
        return;
    }
    let parked = std::mem::take(&mut v.parked);
    for context in parked {
        let Some(Pick::Backend(backend)) = v.pick() else {
            v.parked.push(context);
            continue;
        };
        if hostcalls::set_effective_context(context).is_err() {
            continue; // the request is gone
        }
        if let Some(pool) = v.pool.as_ref() {
            route::route(pool, Some(backend), &mut v.joined);
        }
        if let Some((backend, started)) = http::advised(v, context, backend) {
            v.resumed.push(Resumed {
                context,
                backend,
                started,
            });
        }
        if let Err(status) = hostcalls::resume_http_request() {
            log::warn!("upcheck: a request parked at cold start could not resume ({status:?})");
        }
    }
}
