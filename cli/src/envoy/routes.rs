//! The routes and the router that carries them out: where a request goes once the filter has
//! picked its backend, what is retried, and where the routing header is removed so that no
//! backend sees it.

use std::time::Duration;

use super::{Routing, Shape};
use crate::deployment::POOL;
use crate::tree::{double_quoted, list, map, number, plain, text, Node};

impl Shape {
    /// The routes: one `cluster_header` route that removes the header, or the pool's two routes
    /// (reads retried after any failure, other methods only before reaching a backend).
    pub(super) fn routes(&self) -> Node {
        let header = &self.header;
        let Routing::Host { per_try_timeout } = self.routing else {
            let cluster_header = (
                "cluster_header",
                text(header).note(
                    "The filter sets this header on every request it lets through (and drops \
                     any value a client sent); Envoy re-selects the route after the filter \
                     changed a header, so the cluster named here is the filter's pick.",
                ),
            );
            let grpc = self.grpc.then(grpc_timeouts).into_iter().flatten();
            let route = map([cluster_header].into_iter().chain(grpc));
            let route = map([
                ("match", map([("prefix", double_quoted("/"))]).flow()),
                ("route", route),
                (
                    "request_headers_to_remove",
                    list([text(header)]).flow().note(
                        "Routing already happened when this applies: the backend never sees the \
                         header.",
                    ),
                ),
            ]);
            let route = match self.grpc {
                false => route,
                true => route.note(
                    "gRPC calls take this route as any request does, to the cluster the filter \
                     named, and are never retried: a call whose backend answers UNAVAILABLE, or \
                     resets, fails for its user until the filter ejects that backend (`upcheck \
                     envoy --routing host` retries them on another backend).",
                ),
            };
            return list([route]);
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
        let grpc = self.grpc.then(|| self.grpc_route(per_try_timeout));
        let http = [
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
        ];
        let (routes, which) = match grpc {
            None => ("Both routes", "Neither"),
            Some(_) => ("All three routes", "None"),
        };
        list(grpc.into_iter().chain(http)).note(format!(
            "{routes} go to the pool; they differ only in what they retry. {which} removes \
             {header} with `request_headers_to_remove`: measured on 1.40, that misroutes \
             requests (the load balancer must still read it). The router's upstream filter \
             below removes it once the backend is chosen."
        ))
    }

    /// The route of gRPC calls in host routing ([`Shape::grpc`]): every call is a POST, so the
    /// reads' and writes' split by method does not fit them; gRPC names its own failures that
    /// are safe to repeat elsewhere.
    fn grpc_route(&self, per_try_timeout: Duration) -> Node {
        let retry = map([
            (
                "retry_on",
                plain("unavailable,reset,connect-failure,refused-stream").note(
                    "`unavailable`: a trailers-only answer with grpc-status 14 (UNAVAILABLE), \
                     which by gRPC's convention the server answers before doing the call's work; \
                     a status in trailers after the answer began cannot be retried, the user \
                     already has its headers. Not `internal` or `unknown`: those are the app's \
                     answer, and the same call fails on every backend alike.",
                ),
            ),
            ("num_retries", number(1)),
            (
                "per_try_timeout",
                plain(format!("{}s", per_try_timeout.as_secs_f64())).note(
                    "As for GETs: how long an attempt may take until the backend starts its \
                     answer. Once the answer has begun (a stream's first message, or its \
                     headers) Envoy no longer applies it, so a long stream is not cut.",
                ),
            ),
            ("retry_host_predicate", previous_hosts()),
            ("host_selection_retry_max_attempts", number(3)),
        ]);
        let route = [("cluster", text(POOL)), ("retry_policy", retry)]
            .into_iter()
            .chain(grpc_timeouts());
        map([
            (
                "match",
                map([
                    ("prefix", double_quoted("/")),
                    ("grpc", map(Vec::<(String, Node)>::new()).flow()),
                ])
                .flow(),
            ),
            ("route", map(route)),
        ])
        .note(
            "gRPC calls (content-type application/grpc, or application/grpc+proto, ...): every \
             call is a POST, so the method says nothing about what may be repeated; gRPC says it \
             in its status instead. A call is retried once, on another backend, when its backend \
             answered UNAVAILABLE before starting the answer, reset the stream, refused the \
             connection or the stream, or did not start its answer within per_try_timeout. A \
             call reset or abandoned at per_try_timeout may have run on the first backend, as \
             with gRPC's own retries: a method that must not run twice needs to be idempotent, \
             or a per_try_timeout above its slowest answer. Every other request (a health \
             endpoint or REST beside the gRPC service) takes the two HTTP routes below.",
        )
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

/// What bounds a gRPC call in time: its own deadline (`grpc-timeout`, which Envoy then keeps),
/// not the route's default of 15 s, which would end every stream longer than that.
fn grpc_timeouts() -> [(&'static str, Node); 2] {
    [
        (
            "timeout",
            plain("0s").note(
                "No limit of the route's own on a whole call (Envoy's default is 15 s, which \
                 would end every longer stream, a Watch or a download): the call's deadline \
                 below bounds it instead.",
            ),
        ),
        (
            "max_stream_duration",
            map([("grpc_timeout_header_max", plain("0s"))]).flow().note(
                "A call's deadline is the grpc-timeout its client sent, whatever it is; a \
                     call sent without one runs as long as the client waits.",
            ),
        ),
    ]
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
