//! The status page filter (`"role": "status_page"`): the same module on a listener of its own,
//! answering every request there itself with the pool's health, so no request of the traffic
//! listener ever pays for the page. What to answer is the policy's ([`page::answer`]); this reads
//! the request's path and local address, takes in the tables the pool's traffic filters share,
//! (and what the prober shows of the fleet), and sends the answer. It never probes, announces,
//! routes or writes shared data.

use crate::abi::{Action, HeaderMap};
use crate::hostcall as hostcalls;
use crate::shared;
use crate::vm::{self, Vm};
use upcheck_policy::page::{self, Answer};

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
    /// serves no status page.
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
