//! The routes and the router that carries them out: where a request goes once the filter has
//! picked its backend, what is retried, and where the routing header is removed so that no
//! backend sees it.

use super::{Routing, Shape};
use crate::deployment::POOL;
use crate::tree::{double_quoted, list, map, number, plain, text, Node};

impl Shape {
    /// The routes: one `cluster_header` route that removes the header, or the pool's two routes
    /// (reads retried after any failure, other methods only before reaching a backend).
    pub(super) fn routes(&self) -> Node {
        let header = &self.header;
        let Routing::Host { per_try_timeout } = self.routing else {
            let route = map([(
                "cluster_header",
                text(header).note(
                    "The filter sets this header on every request it lets through (and drops \
                     any value a client sent); Envoy re-selects the route after the filter \
                     changed a header, so the cluster named here is the filter's pick.",
                ),
            )]);
            return list([map([
                ("match", map([("prefix", double_quoted("/"))]).flow()),
                ("route", route),
                (
                    "request_headers_to_remove",
                    list([text(header)]).flow().note(
                        "Routing already happened when this applies: the backend never sees the \
                         header.",
                    ),
                ),
            ])]);
        };
        let reads = map([
            (
                "retry_on",
                plain("gateway-error,reset,connect-failure,refused-stream"),
            ),
            (
                "num_retries",
                number(1).note(
                    "One retry, on another backend: with two backends, a second would go back \
                     to one that already failed this request.",
                ),
            ),
            (
                "per_try_timeout",
                plain(format!("{}s", per_try_timeout.as_secs_f64())).note(format!(
                    "How long one attempt may take before it is abandoned and retried: a little \
                     above your slowest healthy GET (raise it if pages are slower). A hung \
                     backend costs each request it gets this much extra latency, until the \
                     filter ejects it ({} such requests).",
                    self.max_fails
                )),
            ),
            (
                "retry_host_predicate",
                previous_hosts().note(
                    "The retry never picks the host that already failed this request; without \
                     this predicate half the retries went back to it.",
                ),
            ),
            ("host_selection_retry_max_attempts", number(3)),
        ]);
        let writes = map([
            ("retry_on", plain("connect-failure,refused-stream")),
            ("num_retries", number(1)),
            ("retry_host_predicate", previous_hosts()),
            ("host_selection_retry_max_attempts", number(3)),
        ]);
        let pool = |retry_policy| map([("cluster", text(POOL)), ("retry_policy", retry_policy)]);
        let by_method = map([
            ("prefix", double_quoted("/")),
            (
                "headers",
                list([map([
                    ("name", double_quoted(":method")),
                    (
                        "string_match",
                        map([(
                            "safe_regex",
                            map([("regex", double_quoted("GET|HEAD"))]).flow(),
                        )])
                        .flow(),
                    ),
                ])]),
            ),
        ]);
        list([
            map([("match", by_method), ("route", pool(reads))]).note(
                "Reads: GET and HEAD change nothing on the server, so a failure of the first \
                 attempt may be repeated on another backend even when it reached the app: a 502, \
                 503 or 504 (gateway-error), a reset, no answer within per_try_timeout. Not \
                 `5xx` here: a 500 is the app's answer, and a bug behind one URL fails on every \
                 backend alike. The filter adds `5xx` per request (x-envoy-retry-on) only while \
                 the backend it picked fails and its peers do not, drains or warms up, within \
                 its retry budget, and sets each request's per-try timeout from the peers' latency, \
                 hedged (the plugin configuration's `retries`).",
            ),
            map([
                ("match", map([("prefix", double_quoted("/"))]).flow()),
                ("route", pool(writes)),
            ])
            .note(
                "Everything else (POST, PUT, PATCH, DELETE, ...) may have changed something once \
                 it reached the app, so it is retried only when it never reached a backend: the \
                 connection was refused or not established in time, or an HTTP/2 backend refused \
                 the stream before reading it. A POST that got a 502 is not repeated; that 502 \
                 reaches the user and counts against the backend as a passive failure.",
            ),
        ])
        .note(format!(
            "Both routes go to the pool; they differ only in what they retry. Neither removes \
             {header} with `request_headers_to_remove`: measured on 1.40, that misroutes \
             requests (the load balancer must still read it). The router's upstream filter \
             below removes it once the backend is chosen."
        ))
    }

    /// The router; in [`Routing::Host`] an upstream filter removes the routing header from each
    /// attempt once its backend is chosen (the route must leave it for the load balancer).
    pub fn router(&self) -> Node {
        let Routing::Host { .. } = self.routing else {
            return router(None);
        };
        router(Some(
            list([
                map([
                    ("name", text("envoy.filters.http.header_mutation")),
                    (
                        "typed_config",
                        map([
                            ("@type", text("type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation")),
                            (
                                "mutations",
                                map([(
                                    "request_mutations",
                                    list(
                                        [self.header.as_str()]
                                            .into_iter()
                                            .chain(RETRY_HEADERS)
                                            .map(|name| map([("remove", text(name))])),
                                    ),
                                )]),
                            ),
                        ]),
                    ),
                ]),
                map([
                    ("name", text("envoy.filters.http.upstream_codec")),
                    (
                        "typed_config",
                        map([("@type", text("type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"))]),
                    ),
                ]),
            ])
            .note(
                "Filters on each attempt, after its backend was chosen. The routing header has \
                 done its work by then (the load balancer has read it), and so have the retry \
                 headers the filter sets per request (the router read them first), so the \
                 backend sees none of them.",
            ),
        ))
    }
}

/// The router's per-request retry headers the filter writes (after removing every client copy):
/// read by the router before any attempt, removed from each attempt.
const RETRY_HEADERS: [&str; 3] = [
    "x-envoy-retry-on",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-hedge-on-per-try-timeout",
];

/// The router, with `upstream_http_filters` if any.
pub(super) fn router(upstream_http_filters: Option<Node>) -> Node {
    let typed = [(
        "@type",
        text("type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"),
    )];
    let upstream = upstream_http_filters.map(|filters| ("upstream_http_filters", filters));
    map([
        ("name", text("envoy.filters.http.router")),
        ("typed_config", map(typed.into_iter().chain(upstream))),
    ])
}

/// A retry never goes back to a host that already failed the request.
fn previous_hosts() -> Node {
    list([map([
        ("name", text("envoy.retry_host_predicates.previous_hosts")),
        (
            "typed_config",
            map([("@type", text("type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"))]),
        ),
    ])])
}
