//! Which proxy runs the module (`proxy`) and how the pick reaches it (`routing`). A module of its
//! own because both say what may be asked of the host, not what is decided: the adapter reads
//! them to talk to its proxy, `validate` to refuse what the proxy cannot do.

use serde::Serialize;

/// Which proxy runs the module. Both speak proxy-wasm, but not alike: what upcheck asks of
/// each, and what it reads from each, follows from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proxy {
    /// Envoy 1.40 (the default): `cluster` names an Envoy cluster, the response flags tell the
    /// proxy's own failures from a backend's, retries follow upcheck's word (`routing: "host"`),
    /// and a request can wait at cold start for the first probe.
    #[default]
    Envoy,
    /// NGINX with Kong's ngx_wasm_module: `cluster` is the `host:port` probes are dispatched to,
    /// and what the route header carries for NGINX to map onto an `upstream` block. It has no
    /// response flags (a refused connection and a backend's own 503 look alike), no retry
    /// policy upcheck can steer (`routing: "host"` is refused), and a paused request resumes
    /// only when the calls it made itself are answered, so a request held at cold start waits
    /// on a probe it sends itself.
    Nginx,
}

impl Proxy {
    /// Whether the proxy reports why it failed a request itself (Envoy's response flags);
    /// where it does not, they are not asked for.
    #[inline]
    pub fn reports_response_flags(self) -> bool {
        self == Proxy::Envoy
    }

    /// Whether a request paused at cold start can be resumed from the tick; where it cannot,
    /// the request waits on a probe of its own.
    #[inline]
    pub fn resumes_held_requests(self) -> bool {
        self == Proxy::Envoy
    }
}

/// How the pick reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    /// The route header names the backend's cluster; the route uses `cluster_header`.
    #[default]
    Cluster,
    /// The route header names the backend's address within one pool cluster whose load
    /// balancing policy is `override_host`; a failed attempt can then be retried on another
    /// backend by the route's retry policy.
    Host,
}
