//! One VM's state, shared by its root context (ticks, probes) and its HTTP contexts (requests),
//! and the one place the policy's effects are carried out.
//!
//! It holds this VM's [`Pool`]: a copy of the process-wide tables refreshed every tick, plus
//! whatever this VM itself just observed, so a worker reacts to its own failures at once and to
//! everyone else's within one tick, and to a backend another worker took out before its next
//! pick. Whatever the pool returns goes through [`Vm::carry_out`]:
//! changes are shared by compare-and-swap and the written table goes back in, probes are sent,
//! the probe table is published, and events become log lines and metrics.

use crate::fleet::{self, FleetGauges};
use crate::hostcall as hostcalls;
use crate::metrics::{self, BackendMetrics, PageMetrics, PoolMetrics};
use crate::probes;
use crate::retry_headers::TimeoutValues;
use crate::route::RouteValues;
use crate::shared;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use upcheck_policy::config::HealthChecks;
use upcheck_policy::etcd::shown::Shown;
use upcheck_policy::etcd::{OpenWatch, Request};
use upcheck_policy::events::Counted;
use upcheck_policy::history::HistoryTable;
use upcheck_policy::host::{self, Dispatch, Held, Host, PassiveWrite};
use upcheck_policy::retry::Advice;
use upcheck_policy::tables::{ActiveTable, PassiveChange};
use upcheck_policy::{Config, Effects, Event, Level, Member, Pick, Pool, Routed, Time};

/// The handle a VM's root and HTTP contexts share.
pub type Handle = Rc<RefCell<Vm>>;

/// Runs `f` on the VM state unless it is already in use (never the case in a single-threaded
/// VM, but a double borrow must not become a panic).
pub fn with<R>(vm: &Handle, f: impl FnOnce(&mut Vm) -> R) -> Option<R> {
    match vm.try_borrow_mut() {
        Ok(mut v) => Some(f(&mut v)),
        Err(_) => {
            crate::logger::busy("VM state", None);
            None
        }
    }
}

/// The host's clock.
pub fn now() -> Time {
    hostcalls::get_current_time().unwrap_or(Duration::ZERO)
}

/// A request parked at cold start, resumed once a backend could be picked.
#[derive(Debug, Clone, Copy)]
pub struct Resumed {
    /// Its HTTP context.
    pub context: u32,
    /// The backend picked for it.
    pub backend: Routed,
    /// When it was sent on, if requests are timed.
    pub started: Option<Time>,
}

/// A request held at cold start on a probe of its own: ngx_wasm_module hands the probe's answer
/// to the root context, which finds the request by the probe's token.
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    /// The probe's token.
    pub token: u32,
    /// The request's HTTP context.
    pub context: u32,
}

/// One VM's state.
#[derive(Default)]
pub struct Vm {
    /// The pool as this VM sees it, each backend with its metric handles; `None` until
    /// configured.
    pub pool: Option<Pool<BackendMetrics>>,
    /// The pool's own metrics (the pool guard's gauge, the retry budget's refusals).
    pub pool_metrics: PoolMetrics,
    /// On a status page's VM: the handles its metrics are read back by, defined at the first
    /// request for them after a configuration.
    pub page_metrics: Option<PageMetrics>,
    /// On the VM that speaks for its process in a fleet of balancers: the gauges that show it.
    fleet: FleetGauges,
    /// The passive table's compare-and-swap number when its failures were last offered to the
    /// fleet between ticks ([`Vm::between_ticks`]).
    offered: Option<u32>,
    /// Requests (HTTP contexts) waiting at cold start.
    pub parked: Vec<u32>,
    /// Requests resumed after waiting, with their picks.
    pub resumed: Vec<Resumed>,
    /// Requests held at cold start on probes of their own ([`Pick::Probe`]).
    pub holding: Vec<Holding>,
    /// The host routing header's values as written ([`crate::http::route`]), kept so that a
    /// request's is mostly written already.
    pub joined: RouteValues,
    /// The per-try timeout's digits as last written per backend ([`crate::retry_headers`]).
    pub timeouts: TimeoutValues,
    /// Backends with requests counted since the last flush, so that a flush visits only those
    /// (a tick at 1,000 backends would otherwise walk them all).
    counted: Vec<usize>,
    /// The time of the last tick (or configuration): what picks use instead of reading the
    /// clock per request; it only matters at cold start, where a tick's precision is plenty.
    pub last_tick: Time,
    seen_announced: Option<u32>,
    seen_active: Option<u32>,
    seen_passive: Option<u32>,
    /// How many passive changes had taken a backend out when this VM last looked.
    seen_passive_taken_out: Option<u32>,
    seen_history: Option<u32>,
}

impl Vm {
    /// Picks the backend for one request. The passive table goes in first if a VM took a
    /// backend out since this one last looked (one read of a count), so a backend another worker
    /// ejected a moment ago gets none of this worker's users either; and the policy checks a
    /// suspect pick against the table ([`Pool::pick_checked`]), read here only when it asks.
    pub fn pick(&mut self) -> Option<Pick> {
        if let Some(count) = shared::passive_taken_out_since(self.seen_passive_taken_out) {
            self.seen_passive_taken_out = Some(count);
            self.take_in_passive(now());
        }
        let now = self.last_tick;
        let pool = self.pool.as_mut()?;
        let seen = &mut self.seen_passive;
        let latest = || {
            let (table, cas) = shared::read_passive(*seen)?;
            *seen = Some(cas);
            Some(table)
        };
        // The host is made only for a suspect pick's effects, not for every request.
        let pick = pool.pick_checked(now, latest, |pool, effects| {
            let mut envoy = Envoy {
                pool_metrics: self.pool_metrics,
                gauges: &mut self.fleet,
                now,
            };
            host::carry_out(pool, &mut envoy, effects, now);
        });
        Some(pick)
    }

    /// Forgets the requests held on probes the pool no longer awaits ([`Pool::tick`] forgets one
    /// unanswered for two timeouts: its request went without a word).
    pub fn forget_holding(&mut self) {
        if self.holding.is_empty() {
            return;
        }
        if let Some(pool) = self.pool.as_ref() {
            self.holding.retain(|h| pool.awaits_held_probe(h.token));
        }
    }

    /// Holds the current request at cold start as `pick` says ([`host::hold`]): a probe it
    /// sends of its own goes out from it.
    pub fn hold(&mut self, pick: Pick) -> Option<Held> {
        let now = now();
        let pool = self.pool.as_mut()?;
        let mut envoy = Envoy {
            pool_metrics: self.pool_metrics,
            gauges: &mut self.fleet,
            now,
        };
        Some(host::hold(pool, &mut envoy, pick, now, self.last_tick))
    }

    /// Counts a request routed to `backend`, and starts timing it when requests are timed:
    /// returns the backend as the request must name it when it settles, when it started, and
    /// the retry advice for it (some for a `repeatable` one).
    #[inline(always)]
    pub fn routed(
        &mut self,
        context: u32,
        backend: usize,
        repeatable: bool,
    ) -> Option<(Routed, Option<Time>, Advice)> {
        let pool = self.pool.as_mut()?;
        if pool.handles_mut(backend).is_some_and(|m| m.count_request()) {
            self.counted.push(backend);
        }
        let started = pool.times_requests().then(now);
        let (routed, advice) = pool.request_routed(context, backend, started, repeatable);
        Some((routed, started, advice))
    }

    /// Adds each backend's requests counted since the last flush to its `requests` counter.
    pub fn flush_requests(&mut self) {
        let counted = std::mem::take(&mut self.counted);
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        for index in counted {
            if let Some(m) = pool.handles_mut(index) {
                m.flush_requests();
            }
        }
    }

    /// Takes in what other VMs published since the last look; `fingerprint` is this root
    /// context's configuration, for the announcements.
    pub fn sync(&mut self, fingerprint: u64, now: Time) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        if let Some((table, cas)) = shared::read_announced(self.seen_announced) {
            let effects = pool.announced(&table, fingerprint, now);
            self.seen_announced = Some(cas);
            self.carry_out(effects, now);
        }
        self.take_in(now);
    }

    /// Takes in the probe and passive tables if they changed since the last look: all a status
    /// page needs, which never probes and so has no use for the announcements.
    pub fn take_in(&mut self, now: Time) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        if let Some((table, cas)) = shared::read_active(self.seen_active) {
            let effects = pool.active_published(&table, now);
            self.seen_active = Some(cas);
            self.carry_out(effects, now);
        }
        self.take_in_passive(now);
    }

    /// Takes in the passive table if it changed since the last look.
    pub fn take_in_passive(&mut self, now: Time) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        let Some((table, cas)) = shared::read_passive(self.seen_passive) else {
            return;
        };
        self.seen_passive = Some(cas);
        let effects = pool.passive_published(&table, now);
        self.carry_out(effects, now);
    }

    /// Takes in the history of changes if it changed since the last look: only the status page
    /// shows it.
    pub fn take_in_history(&mut self) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        if let Some((table, cas)) = shared::read_history(self.seen_history) {
            let effects = pool.history_published(&table);
            self.seen_history = Some(cas);
            self.carry_out_when_any(effects);
        }
    }

    /// Carries out `effects` ([`Vm::carry_out`]), reading the clock only when there are any.
    pub fn carry_out_when_any(&mut self, effects: Effects) {
        if !effects.is_empty() {
            self.carry_out(effects, now());
        }
    }

    /// Forgets what was read, so the next sync takes everything in again.
    pub fn resync(&mut self) {
        self.seen_announced = None;
        self.seen_active = None;
        self.seen_passive = None;
        self.seen_passive_taken_out = None;
        self.seen_history = None;
    }

    /// Carries out what the policy asked for ([`host::carry_out`]).
    pub fn carry_out(&mut self, effects: Effects, now: Time) {
        if effects.is_empty() {
            return;
        }
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        let mut envoy = Envoy {
            pool_metrics: self.pool_metrics,
            gauges: &mut self.fleet,
            now,
        };
        host::carry_out(pool, &mut envoy, effects, now);
    }

    /// A wake-up between ticks: on the VM that speaks for its process in a fleet, when the
    /// process counted a failure since its failures were last offered (the passive table's
    /// compare-and-swap number moved, read without copying the table; whichever VM wrote it,
    /// this one included), the table goes in and the pool offers them now.
    pub fn between_ticks(&mut self, now: Time) {
        if !self.pool.as_ref().is_some_and(Pool::in_fleet) {
            return;
        }
        let cas = shared::passive_cas();
        if cas == self.offered {
            return;
        }
        self.offered = cas;
        self.take_in_passive(now);
        if let Some(pool) = self.pool.as_mut() {
            let effects = pool.offer_to_fleet(now);
            self.carry_out(effects, now);
        }
    }

    /// The answer to call `token`, its body `body_size` bytes, if it is one of the fleet's
    /// calls: handed to the pool, and true; false for a probe's.
    pub fn etcd_answered(&mut self, token: u32, body_size: usize, now: Time) -> bool {
        let Some(pool) = self.pool.as_mut().filter(|p| p.awaits_etcd(token)) else {
            return false;
        };
        let effects = fleet::answer(pool, token, body_size, now);
        self.carry_out(effects, now);
        true
    }

    /// A message of gRPC stream `token`, `size` bytes: the pool's to take in (a stream with no
    /// pool to hear it is cancelled).
    pub fn stream_message(&mut self, token: u32, size: usize, now: Time) {
        // A gRPC call's answer is its end: Envoy closes only a call that failed.
        if let Some(pool) = self.pool.as_mut().filter(|p| p.awaits_probe(token)) {
            let effects = probes::grpc_answered(pool, token, size, now);
            self.carry_out(effects, now);
            return;
        }
        if let Some(pool) = self.pool.as_mut().filter(|p| p.awaits_health_watch(token)) {
            let effects = probes::watch_message(pool, token, size, now);
            self.carry_out(effects, now);
            return;
        }
        let Some(pool) = self.pool.as_mut() else {
            fleet::cancel(token);
            return;
        };
        let effects = fleet::message(pool, token, size, now);
        self.carry_out(effects, now);
    }

    /// gRPC stream `token` ended with `status`.
    pub fn stream_closed(&mut self, token: u32, status: u32, now: Time) {
        if let Some(pool) = self.pool.as_mut().filter(|p| p.awaits_probe(token)) {
            let effects = probes::grpc_failed(pool, token, status, now);
            self.carry_out(effects, now);
            return;
        }
        if let Some(pool) = self.pool.as_mut().filter(|p| p.awaits_health_watch(token)) {
            let effects = probes::watch_closed(pool, token, status, now);
            self.carry_out(effects, now);
            return;
        }
        if let Some(pool) = self.pool.as_mut() {
            let effects = pool.watch_closed(token, status);
            self.carry_out(effects, now);
        }
    }
}

/// The host the policy's effects are carried out on: shared data by compare-and-swap, probes
/// by `dispatch_http_call`, events as log lines and metrics.
struct Envoy<'a> {
    /// The pool's own metrics.
    pool_metrics: PoolMetrics,
    /// The gauges that show the fleet of balancers.
    gauges: &'a mut FleetGauges,
    /// When the effects are carried out: the time a change is logged with.
    now: Time,
}

impl Host<BackendMetrics> for Envoy<'_> {
    fn report(&mut self, pool: &Pool<BackendMetrics>, event: &Event) {
        report(pool, self.pool_metrics, event, self.now);
    }

    fn share(&mut self, change: &PassiveChange, checks: &HealthChecks) -> Option<PassiveWrite> {
        shared::update_passive(change, checks)
    }

    fn probe(
        &mut self,
        config: &Config,
        _index: usize,
        member: &Member<BackendMetrics>,
    ) -> Dispatch {
        probes::dispatch(config, member)
    }

    fn publish_active(&mut self, table: ActiveTable) {
        shared::write_active(&table);
    }

    fn record(&mut self, append: &dyn Fn(&mut HistoryTable)) -> Option<HistoryTable> {
        shared::update_history(append)
    }

    fn call_etcd(&mut self, cluster: &str, request: &Request) -> Result<u32, &'static str> {
        fleet::call(cluster, request)
    }

    fn open_watch(&mut self, open: &OpenWatch) -> Result<u32, &'static str> {
        fleet::open_watch(open)
    }

    fn open_health_watch(
        &mut self,
        config: &Config,
        _index: usize,
        member: &Member<BackendMetrics>,
    ) -> Result<u32, &'static str> {
        probes::open_watch(config, member)
    }

    fn cancel_stream(&mut self, token: u32) {
        fleet::cancel(token);
    }

    fn show_fleet(&mut self, pool: &Pool<BackendMetrics>, shown: &Shown) {
        if let Some(settings) = pool.config().fleet.as_ref() {
            self.gauges.show(pool, shown, &settings.prefix);
        }
    }
}

/// Turns an event into a log line (in the pool's `log_format`) and metrics, as the core
/// describes it ([`Event::described`]).
fn report(pool: &Pool<BackendMetrics>, pool_metrics: PoolMetrics, event: &Event, now: Time) {
    let described = event.described();
    let handles = |index: usize| pool.members().get(index).map(|m| &m.handles);
    match described.counted {
        Counted::Nothing => {}
        Counted::Probe {
            index,
            latency,
            failed,
        } => {
            let m = handles(index);
            if let Some(m) = m {
                m.set_probe_latency(latency);
            }
            if failed {
                metrics::increment(m.and_then(|m| m.probe_failures));
            }
        }
        Counted::State {
            index,
            state,
            since,
            change,
        } => {
            if let Some(m) = handles(index) {
                m.set_state(state, since);
                if change {
                    metrics::increment(m.state_changes);
                }
            }
        }
        Counted::RequestFailure { index } => {
            metrics::increment(handles(index).and_then(|m| m.request_failures));
        }
        Counted::Ejection { index, outlier } => {
            let m = handles(index);
            metrics::increment(m.and_then(|m| m.ejections));
            if let Some(verdict) = outlier {
                metrics::increment(m.and_then(|m| m.outliers.of(verdict)));
            }
        }
        Counted::InService { index, in_service } => {
            metrics::set(
                handles(index).and_then(|m| m.healthy),
                u64::from(in_service),
            );
        }
        Counted::Draining { index, draining } => {
            metrics::set(handles(index).and_then(|m| m.draining), u64::from(draining));
        }
        Counted::Guard { engaged } => pool_metrics.set_guard(engaged),
        Counted::Retried {
            index,
            extra,
            recovered,
        } => {
            if let Some(m) = handles(index) {
                m.retries.count(extra, recovered);
            }
        }
        Counted::RetriesRefused { requests } => pool_metrics.count_refused(requests),
    }
    let level = match described.level {
        Level::Error => log::Level::Error,
        Level::Warn => log::Level::Warn,
        Level::Info => log::Level::Info,
        Level::Debug => log::Level::Debug,
    };
    if log::log_enabled!(level) {
        log::log!(level, "upcheck: {}", pool.log_line(event, now));
    }
}
