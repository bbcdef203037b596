//! The floor: the least a proxy-wasm filter in Rust (SDK 0.2.5) can do on the request path that
//! upcheck is on, so the benchmarks can tell what upcheck's policy costs from what any filter
//! costs.
//!
//! It sets `x-upcheck-upstream: app1` on every request, as upcheck sets it to its pick: Envoy
//! re-selects the route after the header changed and sends the request to that cluster, so both
//! filters take the same path through Envoy and only the decision differs. It keeps no state,
//! reads nothing and has no root context of its own (the SDK's default one).

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

/// The header upcheck routes on (`cluster_header` in `config/envoy-simple.yaml`).
const ROUTE_HEADER: &str = "x-upcheck-upstream";

/// The cluster every request goes to.
const CLUSTER: &str = "app1";

proxy_wasm::main! {{
    proxy_wasm::set_http_context(|_, _| -> Box<dyn HttpContext> { Box::new(Floor) });
}}

/// One request's context: nothing to remember.
struct Floor;

impl Context for Floor {}

impl HttpContext for Floor {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        self.set_http_request_header(ROUTE_HEADER, Some(CLUSTER));
        Action::Continue
    }
}
