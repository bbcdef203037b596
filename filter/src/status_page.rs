//! The status page filter (`"role": "status_page"`): the same module on a listener of its own,
//! answering every request there itself with the pool's health, so no request of the traffic
//! listener ever pays for the page. What to answer is the policy's ([`page::answer`]); this reads
//! the request's path and local address, takes in the tables the pool's traffic filters share,
//! (and what the prober shows of the fleet), and sends the answer. It never probes, announces,
//! routes or writes shared data.
//!
//! At [`page::METRICS_PATH`] it answers the module's metrics in Prometheus' text format, rendered
//! by the policy ([`page::prometheus`]) from each metric's value as the host keeps it, read back
//! here (`proxy_get_metric`) through handles this VM defines at the first such request and keeps
//! apart from its pool's ([`crate::metrics::PageMetrics`]): the same names return the same
//! process-wide stats, and this VM never writes them.

use crate::abi::{Action, HeaderMap};
use crate::hostcall as hostcalls;
use crate::metrics::{BackendMetrics, PageMetrics, PoolMetrics};
use crate::shared;
use crate::vm::{self, Vm};
use upcheck_policy::page::{self, Answer, Stat};

/// One request to the status page listener.
pub struct PageContext {
    vm: vm::Handle,
}

impl PageContext {
    /// A context for one request on the status page listener.
    pub fn new(vm: vm::Handle) -> PageContext {
        PageContext { vm }
    }

    /// The request's headers: answered here, or left to the listener's route when this VM
    /// serves no status page. Never inlined: the page's rendering stays out of the callback every
    /// user request goes through, whose instructions it would otherwise change.
    #[inline(never)]
    pub fn on_request_headers(&mut self) -> Action {
        match vm::with(&self.vm, answer) {
            Some(true) => Action::Pause,
            // Not configured as a status page: the listener's own route answers (a 404).
            _ => Action::Continue,
        }
    }
}

/// Answers the current request; false if this VM serves no status page.
fn answer(v: &mut Vm) -> bool {
    let Some(page) = v
        .pool
        .as_ref()
        .and_then(|p| p.config().status_page())
        .cloned()
    else {
        return false;
    };
    let path = hostcalls::get_map_value(HeaderMap::Request, ":path")
        .ok()
        .flatten()
        .unwrap_or_default();
    let local = hostcalls::get_property("destination\0address")
        .ok()
        .flatten()
        .and_then(|a| String::from_utf8(a).ok());
    let answer = page::answer(&page, &path, local.as_deref());
    let (content_type, body) = match (answer, answer.refusal(&page)) {
        (Answer::Page(form), _) => {
            let now = vm::now();
            // Both tables read anew, changed or not: with no tick here, that is also what
            // brings ejections that expired since up to date. Then the history of changes.
            v.resync();
            v.take_in(now);
            v.take_in_history();
            let Some(pool) = v.pool.as_ref() else {
                return false;
            };
            let fleet = pool.config().fleet.as_ref();
            let shown = fleet.and_then(|f| shared::read_fleet(&f.prefix));
            (form.content_type(), form.render(pool, shown.as_ref(), now))
        }
        (Answer::Metrics, _) => (page::METRICS_CONTENT_TYPE, metrics(v)),
        (_, refusal) => ("text/plain", refusal.unwrap_or_default()),
    };
    let headers = vec![
        ("content-type", content_type),
        ("cache-control", "no-store"),
    ];
    match hostcalls::send_http_response(answer.status(), headers, Some(body.as_bytes())) {
        Ok(()) => true,
        Err(status) => {
            log::warn!("upcheck: the status page could not be sent ({status:?})");
            false
        }
    }
}

/// The module's metrics in Prometheus' text format, each read back from the host; the handles to
/// read them by defined first if this VM has not yet.
fn metrics(v: &mut Vm) -> String {
    let Some(pool) = v.pool.as_ref() else {
        return String::new();
    };
    let handles = v.page_metrics.get_or_insert_with(|| {
        let name = pool.config().pool.as_deref();
        PageMetrics {
            backends: (pool.members().iter())
                .map(|m| BackendMetrics::define(name, &m.upstream))
                .collect(),
            pool: PoolMetrics::define(name),
        }
    });
    let fleet = pool.config().fleet.as_ref();
    let shown = fleet.and_then(|f| shared::read_fleet(&f.prefix));
    let value = |id: Option<u32>| id.and_then(|id| hostcalls::get_metric(id).ok());
    let backend = |index: usize| handles.backends.get(index);
    page::prometheus(pool, shown.as_ref(), |stat| match stat {
        Stat::Backend(index, metric) => value(backend(index)?.id(metric)),
        Stat::State(index, state) => value(backend(index)?.state_id(state)),
        Stat::Pool(metric) => value(handles.pool.id(metric)),
    })
}
