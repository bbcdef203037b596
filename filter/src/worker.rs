//! One VM's state, shared by its root context (ticks, probes) and its HTTP contexts (requests).
//!
//! It holds this VM's [`Pool`]: a copy of the process-wide tables refreshed every tick, plus
//! whatever this VM itself just observed, so a worker reacts to its own failures at once and to
//! everyone else's within one tick.

use crate::metrics::{self, Metrics};
use crate::shared::{self, ActiveTable, PassiveTable};
use proxy_wasm::hostcalls;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};
use upcheck_policy::passive::Recorded;
use upcheck_policy::{Backend, Config, InFlight, Pick, Pool, RequestOutcome, Time};

/// The handle root and HTTP contexts share.
pub type Shared = Rc<RefCell<Worker>>;

/// Runs `f` on the worker unless it is already in use (never the case in a single-threaded VM,
/// but a double borrow must not become a panic).
pub fn with<R>(worker: &Shared, f: impl FnOnce(&mut Worker) -> R) -> Option<R> {
    match worker.try_borrow_mut() {
        Ok(mut w) => Some(f(&mut w)),
        Err(_) => {
            log::error!("upcheck: worker state busy; callback skipped");
            None
        }
    }
}

/// The host's clock.
pub fn now() -> Time {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or(Duration::ZERO)
}

/// A request paused at cold start, waiting for the first verdict.
#[derive(Debug, Clone, Copy)]
pub struct Parked {
    /// Its HTTP context.
    pub context: u32,
}

/// One VM's state.
#[derive(Default)]
pub struct Worker {
    /// The fleet as this VM sees it; `None` until configured.
    pub pool: Option<Pool>,
    /// Metric handles.
    pub metrics: Metrics,
    /// Requests in flight, tracked only when `unhealthy_latency` is set.
    pub in_flight: InFlight,
    /// Requests waiting at cold start.
    pub parked: Vec<Parked>,
    /// Picks made for parked requests when they were resumed: (context, backend, start time
    /// when latency is tracked).
    pub resumed: Vec<(u32, usize, Option<Time>)>,
    /// The time of the last tick (or configuration): what picks use instead of reading the
    /// clock per request; it only matters at cold start, where a tick's precision is plenty.
    pub last_tick: Time,
    seen_active: Option<u32>,
    seen_passive: Option<u32>,
}

impl Worker {
    /// The configuration in force.
    pub fn config(&self) -> Option<&Config> {
        self.pool.as_ref().map(Pool::config)
    }

    /// Picks the backend for one request. A pick of a backend with failures on record (this
    /// worker's or another's, as of the last sync) is checked against the process-wide table
    /// first, so a backend another worker just ejected is not sent one more request; a clean
    /// backend costs no shared-data read.
    pub fn pick(&mut self) -> Option<Pick> {
        let now = self.last_tick;
        let pool = self.pool.as_mut()?;
        let pick = pool.pick(now);
        let Pick::Backend(i) = pick else {
            return Some(pick);
        };
        let passive = &pool.config().health_checks.passive;
        let suspect = pool
            .backends()
            .get(i)
            .is_some_and(|b| b.passive.count(now, passive) > 0);
        if !suspect {
            return Some(pick);
        }
        let Some((table, cas)) = shared::read_passive(self.seen_passive) else {
            return Some(pick);
        };
        self.seen_passive = Some(cas);
        self.apply_passive(&table);
        let pool = self.pool.as_mut()?;
        pool.refresh(now);
        Some(pool.pick(now))
    }

    /// Whether request latency matters (`unhealthy_latency` is set): only then is the clock
    /// read for every request.
    pub fn tracks_latency(&self) -> bool {
        self.config()
            .is_some_and(|c| c.health_checks.passive.unhealthy_latency.is_some())
    }

    /// Counts a routed request; returns its start time when latency is tracked.
    pub fn routed(&mut self, context: u32, backend: usize) -> Option<Time> {
        if let Some(m) = self.metrics.backend(backend) {
            metrics::increment(m.requests);
        }
        if !self.tracks_latency() {
            return None;
        }
        let now = now();
        self.in_flight.begin(context, backend, now);
        Some(now)
    }

    /// Settles request `context` to `backend` with `outcome`, observed at `now` if the caller
    /// read the clock (else it is read only if the outcome changes anything).
    pub fn settle(
        &mut self,
        context: u32,
        backend: usize,
        outcome: RequestOutcome,
        now: Option<Time>,
    ) {
        // A request counted when it became late is not counted again when it ends.
        let counted_late = self.in_flight.end(context);
        self.observe(backend, outcome, now, !counted_late);
    }

    /// Settles a request the proxy retried: the picked backend's attempt failed; the final
    /// `outcome` belongs to the backend that answered, `answered_by`, when the proxy says which.
    pub fn settle_retried(
        &mut self,
        context: u32,
        picked: usize,
        answered_by: Option<usize>,
        outcome: RequestOutcome,
        now: Option<Time>,
    ) {
        let counted_late = self.in_flight.end(context);
        self.observe(picked, RequestOutcome::RetriedElsewhere, now, !counted_late);
        if let Some(other) = answered_by.filter(|o| *o != picked) {
            self.observe(other, outcome, now, true);
        }
    }

    /// The backend whose route value (address) is `address`.
    pub fn backend_at(&self, address: &str) -> Option<usize> {
        let config = self.config()?;
        config
            .upstreams
            .iter()
            .position(|u| u.address.as_deref() == Some(address))
    }

    /// Counts every in-flight request that just became `unhealthy_latency` late.
    pub fn count_overdue(&mut self) {
        let Some(latency) = self
            .config()
            .and_then(|c| c.health_checks.passive.unhealthy_latency)
        else {
            return;
        };
        let now = now();
        for (backend, _, waited) in self.in_flight.overdue(now, latency) {
            self.observe(
                backend,
                RequestOutcome::StillWaiting(waited),
                Some(now),
                true,
            );
        }
    }

    /// Takes one request outcome into account, process-wide when it changes anything.
    fn observe(&mut self, backend: usize, outcome: RequestOutcome, at: Option<Time>, count: bool) {
        let Some(pool) = self.pool.as_ref() else {
            return;
        };
        let config = pool.config();
        let failure = outcome
            .failure(&config.health_checks.passive)
            .filter(|_| count);
        let contact = match outcome {
            RequestOutcome::Answered { .. } | RequestOutcome::Failed(_) => Some(outcome.refused()),
            RequestOutcome::StillWaiting(_)
            | RequestOutcome::RetriedElsewhere
            | RequestOutcome::ClientGone => None,
        };
        let known_refused = pool
            .backends()
            .get(backend)
            .and_then(|b| b.passive.last_contact)
            .map(|(_, refused)| refused);
        let contact_changes =
            contact.is_some_and(|c| known_refused != Some(c) && (c || known_refused.is_some()));
        if failure.is_none() && !contact_changes {
            return; // the fast path: a success that changes nothing
        }
        let Some(name) = config.upstreams.get(backend).map(|u| u.name.clone()) else {
            return;
        };
        let passive_config = config.health_checks.passive.clone();
        let now = at.unwrap_or_else(now);

        let shared = shared::update_passive(&name, |p| {
            if let Some(refused) = contact {
                p.contact(now, refused);
            }
            failure.map(|_| p.record(now, &passive_config))
        });
        let (table, recorded) = match shared {
            Some(written) => written,
            None => return,
        };
        let was_ejected = self.is_ejected(backend);
        self.apply_passive(&table);
        if let Some(pool) = self.pool.as_mut() {
            pool.refresh(now);
        }
        if let (Some(failure), Some(m)) = (failure, self.metrics.backend(backend)) {
            metrics::increment(m.request_failures);
            log::debug!("upcheck: {name}: {failure}");
        }
        if let (Some(Recorded::Filled { until }), Some(failure)) = (recorded, failure) {
            let within = upcheck_policy::duration::display(passive_config.fail_duration);
            let count = passive_config.max_fails;
            if !was_ejected && self.is_ejected(backend) {
                if let Some(m) = self.metrics.backend(backend) {
                    metrics::increment(m.ejections);
                }
                let for_how_long = upcheck_policy::duration::display(until.saturating_sub(now));
                log::info!(
                    "upcheck: {name} ejected for {for_how_long}: {count} failures within {within}, the last: {failure}"
                );
            } else if !self.is_ejected(backend) {
                log::warn!(
                    "upcheck: {name} has {count} failures within {within} but stays in rotation: max_ejection_percent reached"
                );
            }
        }
    }

    fn is_ejected(&self, backend: usize) -> bool {
        self.pool
            .as_ref()
            .and_then(|p| p.routing().ejected.get(backend).copied())
            .unwrap_or(false)
    }

    /// Replaces, per configured backend, what `update` returns for it (by name and current
    /// state), leaving the others as they are.
    fn merge(&mut self, update: impl Fn(usize, &str, &Backend) -> Option<Backend>) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        let updates: Vec<(usize, Backend)> = pool
            .config()
            .upstreams
            .iter()
            .zip(pool.backends())
            .enumerate()
            .filter_map(|(i, (u, b))| Some((i, update(i, &u.name, b)?)))
            .collect();
        for (i, b) in updates {
            pool.set_backend(i, b);
        }
    }

    fn apply_passive(&mut self, table: &PassiveTable) {
        self.merge(|i, name, b| {
            let passive = entry(table, i, name)?.clone();
            Some(Backend {
                active: b.active,
                passive,
            })
        });
    }

    fn apply_active(&mut self, table: &ActiveTable) {
        self.merge(|i, name, b| {
            let active = *entry(table, i, name)?;
            Some(Backend {
                active,
                passive: b.passive.clone(),
            })
        });
    }

    /// Takes in what other VMs published since the last look. `prober` VMs own the probe table
    /// and skip it.
    pub fn sync(&mut self, prober: bool) {
        if !prober {
            if let Some((table, cas)) = shared::read_active(self.seen_active) {
                self.apply_active(&table);
                self.seen_active = Some(cas);
            }
        }
        if let Some((table, cas)) = shared::read_passive(self.seen_passive) {
            self.apply_passive(&table);
            self.seen_passive = Some(cas);
        }
    }

    /// Forgets what was read, so the next sync takes everything in again.
    pub fn resync(&mut self) {
        self.seen_active = None;
        self.seen_passive = None;
    }

    /// Publishes this VM's probe table (the lease holder's).
    pub fn publish_active(&self) {
        let Some(pool) = self.pool.as_ref() else {
            return;
        };
        let table: Vec<(&str, &upcheck_policy::ActiveHealth)> = pool
            .config()
            .upstreams
            .iter()
            .zip(pool.backends())
            .map(|(u, b)| (u.name.as_str(), &b.active))
            .collect();
        shared::write_active(&table);
    }
}

/// Backend `name`'s entry in a shared table; tables written from the same configuration list
/// backends in its order, so position `i` is tried first.
fn entry<'a, T>(table: &'a [(String, T)], i: usize, name: &str) -> Option<&'a T> {
    table
        .get(i)
        .filter(|(n, _)| n == name)
        .or_else(|| table.iter().find(|(n, _)| n == name))
        .map(|(_, t)| t)
}
