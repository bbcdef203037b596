//! The root context of one VM: configuration, the tick that keeps this VM's view current, and —
//! on the VM holding the lease — the probes.
//!
//! Every VM ticks (Envoy ticks the main thread's and each worker's), so every VM tries the lease;
//! one wins and probes for the whole process. The first tick comes quickly so the first probe
//! round goes out within 100 ms of start, not one tick period later.

use crate::http::{self, Http};
use crate::metrics::Metrics;
use crate::prober::{lease_ttl, Prober, Published};
use crate::shared;
use crate::worker::{self, Shared};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use std::time::Duration;
use upcheck_policy::{Config, Event, Guard, Pick, Pool, Time};

/// The steady tick: a worker sees another's change within this long.
const TICK: Duration = Duration::from_millis(200);
/// The first tick after (re)configuration, so probing starts at once.
const FIRST_TICK: Duration = Duration::from_millis(20);

/// One VM's root context.
#[derive(Default)]
pub struct Root {
    worker: Shared,
    /// This root context's process-unique id (0 until configured).
    vm: u64,
    /// Fingerprint of its configuration.
    config: u64,
    /// Present while this VM holds the probing lease.
    prober: Option<Prober>,
    /// Probe results not yet published.
    dirty: bool,
    /// Whether the tick period is the steady one.
    steady: bool,
}

impl Root {
    fn set_tick(&mut self, period: Duration) {
        if let Err(status) = hostcalls::set_tick_period(period) {
            log::error!("upcheck: the host refused a tick period ({status:?}); probes cannot run");
        }
        self.steady = period == TICK;
    }
}

impl Context for Root {
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let now = worker::now();
        let Some(prober) = self.prober.as_mut() else {
            return; // the lease moved on; the new holder probes again
        };
        let dirty = &mut self.dirty;
        worker::with(&self.worker, |w| {
            let Some(pool) = w.pool.as_mut() else {
                return;
            };
            match prober.answer(token, body_size, pool, &w.metrics, now) {
                Some(Published::Now) => {
                    take_stock(pool, prober, &w.metrics, now);
                    w.publish_active();
                    *dirty = false;
                }
                Some(Published::Later) => *dirty = true,
                None => {}
            }
        });
    }
}

impl RootContext for Root {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        crate::logger::install();
        true
    }

    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
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
        let now = worker::now();
        if self.vm == 0 {
            self.vm = shared::vm_id();
        }
        self.config = shared::fingerprint(&bytes);
        shared::announce_config(self.config);
        let prober = &mut self.prober;
        let configured = worker::with(&self.worker, |w| {
            let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
            log::debug!(
                "upcheck: configured with {} backends: {}",
                names.len(),
                names.join(", ")
            );
            w.metrics = Metrics::define(&config);
            w.last_tick = now;
            match w.pool.as_mut() {
                Some(pool) => {
                    let kept = pool.reconfigure(config, now);
                    if let Some(p) = prober.as_mut() {
                        p.remap(&kept, now);
                    }
                }
                None => w.pool = Some(Pool::new(config, now)),
            }
            // A root context created by a configuration update starts from what the process
            // already knows rather than from a cold start.
            w.resync();
            w.sync(false);
            if let Some(pool) = w.pool.as_mut() {
                pool.refresh(now);
            }
        });
        self.set_tick(FIRST_TICK);
        configured.is_some()
    }

    fn on_tick(&mut self) {
        let now = worker::now();
        if !self.steady {
            self.set_tick(TICK);
        }
        let holder = shared::hold_lease(self.vm, self.config, now, lease_ttl(TICK));
        if !holder {
            self.prober = None;
        }
        let vm = self.vm;
        let Root {
            worker,
            prober,
            dirty,
            ..
        } = self;
        worker::with(worker, |w| {
            let Some(backends) = w.pool.as_ref().map(|p| p.backends().len()) else {
                return;
            };
            if holder && prober.is_none() {
                // Take over from the published table, then probe everything at once.
                w.resync();
                w.sync(false);
                log::info!("upcheck: this VM (root context {vm}) now probes for the process");
                *prober = Some(Prober::new(backends, now, vm ^ nanos(now)));
            }
            w.last_tick = now;
            w.sync(holder);
            w.count_overdue();
            let worker::Worker { pool, metrics, .. } = w;
            let Some(pool) = pool.as_mut() else {
                return;
            };
            let events = pool.refresh(now);
            if let Some(p) = prober.as_mut() {
                report(pool, &events);
                p.follow(pool, metrics, now);
                if p.round(pool, metrics, now) == Published::Now {
                    *dirty = true;
                    take_stock(pool, p, metrics, now);
                }
            }
            if *dirty {
                w.publish_active();
                *dirty = false;
            }
            resume_parked(w);
        });
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(context_id, self.worker.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

fn nanos(t: Time) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// Recomputes the prober's routing after a change it made, and reports it.
fn take_stock(pool: &mut Pool, prober: &mut Prober, metrics: &Metrics, now: Time) {
    let events = pool.refresh(now);
    report(pool, &events);
    prober.follow(pool, metrics, now);
    // A probe can change a backend's status without changing the routing (under the guard).
    prober.gauges(pool, metrics);
}

/// Logs process-wide routing changes (only the prober does, so each is logged once).
fn report(pool: &Pool, events: &[Event]) {
    for event in events {
        match event {
            Event::Guard(Guard::Off) => log::info!("upcheck: fleet guard released"),
            Event::Guard(guard) => log::warn!("upcheck: fleet guard engaged: {guard}"),
            Event::Routable(i, true) => {
                if let Some(up) = pool.config().upstreams.get(*i) {
                    log::debug!("upcheck: {} takes traffic", up.name);
                }
            }
            Event::Routable(..) | Event::Ejected(_) => {}
        }
    }
}

/// Resumes requests parked at cold start once a backend can be picked.
fn resume_parked(w: &mut worker::Worker) {
    if w.parked.is_empty() {
        return;
    }
    let parked = std::mem::take(&mut w.parked);
    for p in parked {
        let pick = w.pick();
        let Some(Pick::Backend(backend)) = pick else {
            w.parked.push(p);
            continue;
        };
        if hostcalls::set_effective_context(p.context).is_err() {
            continue; // the request is gone
        }
        if let Some(pool) = w.pool.as_ref() {
            http::route(pool, Some(backend));
        }
        let started = w.routed(p.context, backend);
        w.resumed.push((p.context, backend, started));
        if let Err(status) = hostcalls::resume_http_request() {
            log::warn!("upcheck: a request parked at cold start could not resume ({status:?})");
        }
    }
}
