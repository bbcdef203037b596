//! The Envoy 1.40 configuration of a [`Deployment`], as commented YAML, and its pieces, which
//! the e2e harness and the benchmarks serve to Envoy as JSON ([`Shape`]).
//!
//! Built as a [`tree`](crate::tree) that carries its comments: they are half of the file. Each
//! setting whose absence was measured to cost users (docs/routing.md) is explained next
//! to it, so that whoever reads or edits the file learns why it is there. This is the one place
//! the shapes are stated; the e2e tests run them as they are written here: in host routing a `pool` cluster with the `override_host` load
//! balancer, two routes that retry once on another backend (`previous_hosts`, the retry circuit
//! breaker raised to the request one), the routing header kept on the route and removed by the
//! router's upstream filter, and a probe cluster per backend; in cluster routing one cluster per
//! backend and a `cluster_header` route. Both: the wasm filter before the router, the plugin
//! configuration embedded, no Envoy health checks or outlier detection, admin on loopback, and
//! the status page on a listener of its own on loopback (the same module and `vm_id`, the pool's
//! configuration with `"role": "status_page"`, a 404 route behind it).
//!
//! Everything that comes from the input is written so YAML reads it back as the same string:
//! scalars are quoted unless plainly safe, the plugin configuration sits in a block scalar one
//! JSON line to a line, and comments are wrapped with every line starting with `#`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use upcheck_policy::duration::display;
use upcheck_policy::series;
use upcheck_policy::RoutingMode;

use crate::deployment::{Backend, Deployment, POOL};
use crate::endpoint::{socket, Endpoint};
use crate::tree::{comment, lines, list, map, number, plain, quoted, text, Node};

/// How long one attempt of a GET or HEAD may take in host routing before it is retried, as
/// written by `upcheck envoy`.
pub const PER_TRY_TIMEOUT: Duration = Duration::from_secs(3);

/// What the command line adds to a deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where users connect. Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// Envoy's admin interface, on loopback. Default `127.0.0.1:9901`.
    pub admin: SocketAddr,
    /// The status page's listener, on loopback unless the page is public. Default
    /// `127.0.0.1:9902`.
    pub status: SocketAddr,
    /// Path of upcheck.wasm on the load balancer. Default `/etc/upcheck/upcheck.wasm`.
    pub wasm: String,
    /// Envoy's worker threads (a command-line flag of Envoy's, shown in the header). Default 2.
    pub concurrency: u32,
    /// What the configuration was written from, for the header, e.g. `config/caddy.json`.
    pub input: String,
    /// The directory (absolute) Envoy reads the clusters and both filters' configurations from,
    /// which `upcheck backends` rewrites while it runs ([`crate::membership`]). Default: none,
    /// everything in the one file.
    pub membership: Option<PathBuf>,
}

/// The resource type of a wasm filter's configuration.
const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

/// The name of the file in a membership directory that holds filter `name`'s configuration.
pub fn filter_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// The name of the file in a membership directory that holds the clusters.
pub fn clusters_file(dir: &Path) -> PathBuf {
    dir.join("clusters.json")
}

/// The whole configuration file.
pub fn render(d: &Deployment, s: &Settings) -> String {
    let mut out = String::new();
    header(&mut out, d, s);
    out.push('\n');
    out.push_str(&document(d, s).yaml());
    out
}

fn header(out: &mut String, d: &Deployment, s: &Settings) {
    let active = &d.config.health_checks.active;
    let passive = &d.config.health_checks.passive;
    let header = d.config.route_header.to_ascii_lowercase();
    let backends: Vec<String> = d
        .backends
        .iter()
        .map(|b| {
            if b.probe == b.address {
                format!("{} at {}", b.name, b.address)
            } else {
                format!(
                    "{} at {} (probed at port {})",
                    b.name,
                    b.address,
                    b.probe.port()
                )
            }
        })
        .collect();
    let (intro, places, other) = match d.routing {
        RoutingMode::Host => (
            "Envoy 1.40 on the load balancer, with upcheck deciding which app server gets each \
             request, and Envoy retrying a request whose backend failed it on another backend \
             (\"invisible failover\").",
            "Each address is in three places below (the pool, the backend's probe cluster, the \
             plugin configuration) and they must agree",
            "`upcheck envoy --routing cluster` writes the same deployment without retries.",
        ),
        RoutingMode::Cluster => (
            "The simple deployment: Envoy 1.40 on the load balancer, with upcheck deciding which \
             app server gets each request; one cluster per backend, no retries. A request that \
             reaches a backend as it breaks fails for its user. `upcheck envoy --routing host` \
             writes the recommended deployment, which retries those requests on another \
             backend.",
            "Each backend's address is in its cluster below",
            "",
        ),
    };
    let how = match d.routing {
        RoutingMode::Host => format!(
            "How it fits together: Envoy itself runs no health checks and ejects nothing. The \
             upcheck filter probes every backend (GET {path}, through the backend's own probe \
             cluster), watches every response, picks one trusted backend per request and writes \
             its address, then the address of the backend a retry should go to, into the \
             `{header}` request header (`routing: host`). Every request goes to the one `{POOL}` \
             cluster, whose override_host load balancer sends each attempt to the next address \
             in that header. If the first attempt fails in a way that is safe to repeat, the \
             route's retry policy sends the request once more, to another backend; the user \
             sees only the second answer. The filter reads how many attempts a request took and \
             counts the failed first attempt against the backend it picked, so {fails} such \
             failures within {window} still eject it, as they do without retries.",
            path = active.path,
            fails = passive.max_fails,
            window = display(passive.fail_duration),
        ),
        RoutingMode::Cluster => format!(
            "How it fits together: Envoy itself runs no health checks and ejects nothing. The \
             upcheck filter probes every backend (GET {path}), watches every response, picks one \
             trusted backend per request and names its cluster in the `{header}` request header; \
             the route sends the request to the cluster of that name ({fails} failures within \
             {window} eject a backend). A cluster per backend is what lets the filter both probe \
             and route by name.",
            path = active.path,
            fails = passive.max_fails,
            window = display(passive.fail_duration),
        ),
    };
    let text = format!(
        "{intro}\n\
         \n\
         Written by `upcheck envoy` from {input}. The backends: {backends}. {places}: to change \
         one, change the input and run `upcheck envoy` again.\n\
         \n\
         To deploy: copy upcheck.wasm (`make build` writes target/upcheck.wasm) to {wasm}, then\n\
         \x20 envoy -c envoy.yaml --concurrency {concurrency}\n\
         Check the file first with `envoy --mode validate -c envoy.yaml`. {other}\n\
         \n\
         {how}\n\
         \n\
         The status page, on the load balancer:\n\
         \x20 curl http://{status}{path}\n\
         (and {path}.json, {path}.html in a browser). It is served on a listener of its \
         own{closed}.",
        input = s.input,
        backends = backends.join(", "),
        wasm = s.wasm,
        concurrency = s.concurrency,
        status = s.status,
        path = d.page.path,
        closed = if s.status.ip().is_loopback() {
            ", bound to loopback: no user request pays for it, and no other machine reaches it"
        } else {
            ": no user request pays for it"
        },
    );
    comment(out, 0, &text);
}

/// How a route reaches the backend the filter picked (the plugin's `routing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Routing {
    /// `routing: cluster`: one cluster per backend, named by the routing header; no retries.
    #[default]
    Cluster,
    /// `routing: host`: the [`POOL`] cluster picks the address in the routing header; GET and
    /// HEAD are retried once elsewhere after a gateway error, reset or `per_try_timeout`, every
    /// other method only when it never reached a backend. Each backend also has its own cluster,
    /// for probes.
    Host {
        /// How long one attempt of a GET or HEAD may take before it is retried.
        per_try_timeout: Duration,
    },
}

/// What every piece of one Envoy configuration shares: how requests are routed, by which
/// header, with which module.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// How the route reaches the filter's pick.
    pub routing: Routing,
    /// The routing header, lowercase as Envoy keeps header names.
    pub header: String,
    /// Path of upcheck.wasm where Envoy runs.
    pub wasm: String,
    /// How many failed requests eject a backend (the passive rule's `max_fails`), for the
    /// comments only.
    pub max_fails: u32,
    /// Where each filter's configuration is read from (ECDS, [`filter_file`]), if not inline.
    pub discovery: Option<PathBuf>,
}

impl Shape {
    /// The shape `upcheck envoy` writes for `d`.
    pub fn of(d: &Deployment, s: &Settings) -> Shape {
        Shape {
            routing: match d.routing {
                RoutingMode::Host => Routing::Host {
                    per_try_timeout: PER_TRY_TIMEOUT,
                },
                RoutingMode::Cluster => Routing::Cluster,
            },
            header: d.config.route_header.to_ascii_lowercase(),
            wasm: s.wasm.clone(),
            max_fails: d.config.health_checks.passive.max_fails,
            discovery: s.membership.clone(),
        }
    }

    /// The users' listener `name` on `addr`, with the filter and its plugin configuration
    /// `plugin` (JSON) before the router, or without a filter (requests are then routed by the
    /// routing header the client sends). The routing header names a cluster
    /// ([`Routing::Cluster`]) or an address in the pool ([`Routing::Host`]); either way the
    /// backend never sees it. Every listener's filter runs in the same `vm_id`, as two listeners
    /// of one operator's Envoy would.
    pub fn listener(&self, name: &str, addr: SocketAddr, plugin: Option<&str>) -> Node {
        let about = match self.routing {
            Routing::Host { .. } => {
                "The plugin configuration (JSON), from the input: `routing: host`, and each \
                 upstream's address is its endpoint in the pool, written exactly as Envoy prints \
                 it (ip:port); an address that is not in the pool is not an error to Envoy, it \
                 silently round-robins instead. Probes go to each upstream's own cluster (its \
                 `cluster`, else its name). Durations are nanoseconds, or strings such as \"10s\"."
            }
            Routing::Cluster => {
                "The plugin configuration (JSON), from the input: `routing: cluster`, and each \
                 upstream's cluster (its `cluster`, else its name) is a cluster below, which holds \
                 its address. Durations are nanoseconds, or strings such as \"10s\"."
            }
        };
        let filters = plugin
            .map(|plugin| self.wasm_filter("upcheck", about, plugin))
            .into_iter()
            .chain([self.router()]);
        http_listener(
            name,
            addr,
            ("upcheck", "apps"),
            self.routes(),
            list(filters),
            self.discovery.is_some(),
        )
    }

    /// The status page's listener `name` on `addr`: the same module in the same `vm_id`, so it
    /// reads what the traffic filters share, with `plugin` (the pool's plugin configuration with
    /// `"role": "status_page"`); the filter answers every request itself, and the 404 route
    /// behind it routes nowhere.
    pub fn status_listener(&self, name: &str, addr: SocketAddr, plugin: &str) -> Node {
        let routes = list([map([
            ("match", map([("prefix", quoted("/"))]).flow()),
            ("direct_response", map([("status", number(404))]).flow()),
        ])])
        .note(
            "The filter answers every request here itself (the page, or 404 for any other \
             path); this route answers only if it lets one through, and routes nowhere.",
        );
        let filter = self.wasm_filter(
            "upcheck-status",
            "The pool's plugin configuration as above, with `role: status_page` first: this \
             filter shows the health the traffic filters share and never probes, routes or \
             changes it.",
            plugin,
        );
        http_listener(
            name,
            addr,
            ("status", "status"),
            routes,
            list([filter, router(None)]),
            self.discovery.is_some(),
        )
    }

    /// The routes: one `cluster_header` route that removes the header, or the pool's two routes
    /// (reads retried after any failure, other methods only before reaching a backend).
    fn routes(&self) -> Node {
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
                ("match", map([("prefix", quoted("/"))]).flow()),
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
            ("prefix", quoted("/")),
            (
                "headers",
                list([map([
                    ("name", quoted(":method")),
                    (
                        "string_match",
                        map([("safe_regex", map([("regex", quoted("GET|HEAD"))]).flow())]).flow(),
                    ),
                ])]),
            ),
        ]);
        list([
            map([("match", by_method), ("route", pool(reads))]).note(
                "Reads: GET and HEAD change nothing on the server, so a failure of the first \
                 attempt may be repeated on another backend even when it reached the app: a 502, \
                 503 or 504 (gateway-error), a reset, no answer within per_try_timeout. Not \
                 `5xx`: a 500 is the app's answer (a bug behind one URL fails on every backend \
                 alike), and upcheck counts every retried request as a failure of the backend it \
                 picked, so retrying 500s would eject backends for app bugs.",
            ),
            map([
                ("match", map([("prefix", quoted("/"))]).flow()),
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
                                    list([map([("remove", text(&self.header))])]),
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
                 done its work by then (the load balancer has read it), so the backend never \
                 sees it.",
            ),
        ))
    }

    /// The wasm filter as plugin `name`, with the plugin configuration `plugin` (JSON),
    /// explained by `about`.
    /// With [`Shape::discovery`] the filter names the file its configuration is read from and
    /// Envoy takes each new one in for the streams that start after it (ECDS), leaving the
    /// listener and its connections as they are.
    pub fn wasm_filter(&self, name: &str, about: &str, plugin: &str) -> Node {
        let Some(dir) = &self.discovery else {
            return map([
                ("name", text("envoy.filters.http.wasm")),
                ("typed_config", self.wasm_config(name, about, plugin)),
            ]);
        };
        let source = map([
            (
                "path_config_source",
                map([("path", text(filter_file(dir, name).display().to_string()))]),
            ),
            ("resource_api_version", plain("V3")),
        ]);
        map([
            ("name", text(name)),
            (
                "config_discovery",
                map([
                    ("config_source", source),
                    ("type_urls", list([text(WASM_TYPE)])),
                ]),
            ),
        ])
        .note(format!(
            "{about} Read from the file named (`upcheck backends` rewrites it): the              configuration in force is there."
        ))
    }

    /// The wasm filter's own configuration as plugin `name`, with the plugin configuration
    /// `plugin` (JSON), explained by `about`.
    pub fn wasm_config(&self, name: &str, about: &str, plugin: &str) -> Node {
        map([
            ("@type", text(WASM_TYPE)),
            (
                "config",
                map([
                    ("name", text(name)),
                    ("root_id", text("upcheck")),
                    ("vm_config", self.vm_config()),
                    (
                        "failure_policy",
                        text("FAIL_RELOAD").note(
                            "A crashed VM is recreated instead of failing its worker's \
                                     requests for ever.",
                        ),
                    ),
                    ("configuration", plugin_configuration(plugin).note(about)),
                ]),
            ),
        ])
    }

    /// The VM every listener's upcheck runs in: one `vm_id`, one runtime, one module, so Envoy
    /// gives each thread one VM for all of them.
    pub fn vm_config(&self) -> Node {
        map([
            (
                "vm_id",
                text("upcheck")
                    .note("Every VM with this id shares health state (proxy-wasm shared data)."),
            ),
            ("runtime", text("envoy.wasm.runtime.v8")),
            (
                "code",
                map([("local", map([("filename", text(&self.wasm))]).flow())]),
            ),
        ])
    }

    /// The clusters of `backends`: in [`Routing::Host`] the [`POOL`] of them all (where their
    /// requests go), then one per backend (for its probes; in [`Routing::Cluster`] for its
    /// requests too). No Envoy health checks or outlier detection on any.
    pub fn clusters(&self, backends: &[Backend]) -> Vec<Node> {
        let host = matches!(self.routing, Routing::Host { .. });
        let first_name = backends
            .iter()
            .position(|b| matches!(b.probe, Endpoint::Name { .. }));
        let own = backends.iter().enumerate().map(|(i, backend)| {
            let cluster = own_cluster(
                backend,
                Explain {
                    timeout: !host && i == 0,
                    dns: first_name == Some(i),
                },
            );
            match backends.first() {
                Some(b) if host && i == 0 => {
                    let probes = if b.probe == b.address {
                        String::new()
                    } else {
                        format!(
                            " Probes go to port {} of each backend, requests to the port in the \
                             pool.",
                            b.probe.port()
                        )
                    };
                    cluster.gap().note(format!(
                        "One cluster per backend for upcheck's probes only, named as in the \
                         plugin configuration.{probes}"
                    ))
                }
                _ => cluster,
            }
        });
        let pool = host.then(|| self.pool(backends));
        pool.into_iter().chain(own).collect()
    }

    fn pool(&self, backends: &[Backend]) -> Node {
        let endpoints = backends.iter().map(|b| {
            map([(
                "endpoint",
                map([(
                    "address",
                    map([("socket_address", socket(&b.address).tail(&b.name))]),
                )]),
            )])
        });
        let round_robin = map([(
            "typed_extension_config",
            map([
                ("name", text("envoy.load_balancing_policies.round_robin")),
                (
                    "typed_config",
                    map([("@type", text("type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"))]),
                ),
            ]),
        )]);
        let override_host = map([(
            "typed_extension_config",
            map([
                ("name", text("envoy.load_balancing_policies.override_host")),
                (
                    "typed_config",
                    map([
                        ("@type", text("type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost")),
                        (
                            "override_host_sources",
                            list([map([("header", text(&self.header))])]),
                        ),
                        (
                            "fallback_policy",
                            map([("policies", list([round_robin]))]),
                        ),
                    ]),
                ),
            ]),
        )]);
        let breakers = map([
            ("priority", text("DEFAULT")),
            ("max_connections", number(1024)),
            ("max_pending_requests", number(1024)),
            ("max_requests", number(1024)),
            ("max_retries", number(1024)),
        ]);
        map([
            ("name", text(POOL)),
            ("type", text("STATIC")),
            (
                "connect_timeout",
                plain("1s").note(
                    "A backend that does not complete the TCP handshake in time counts as a \
                     connection failure (and is retried, for every method).",
                ),
            ),
            (
                "load_balancing_policy",
                map([("policies", list([override_host]))]),
            ),
            (
                "circuit_breakers",
                map([("thresholds", list([breakers]))]).note(
                    "Envoy allows 3 retries in flight per cluster by default: under load, a \
                     backend breaking then turned most retries into 502s (625 of 1,000 \
                     concurrent requests, measured). A request retries at most once, so retries \
                     in flight never outnumber requests in flight: with max_retries equal to \
                     max_requests the retry breaker never trips before the request one.",
                ),
            ),
            (
                "load_assignment",
                map([
                    ("cluster_name", text(POOL)),
                    (
                        "endpoints",
                        list([map([("lb_endpoints", list(endpoints))])]),
                    ),
                ]),
            ),
        ])
        .note(format!(
            "Every backend, for user requests. The load balancer sends each attempt to the next \
             address the filter wrote into {}; it falls back to round robin when there is none \
             (the filter is not configured).",
            self.header
        ))
    }
}

/// The whole configuration of `d` as `upcheck envoy` writes it: admin, the users' and the
/// status page's listeners, the clusters.
fn document(d: &Deployment, s: &Settings) -> Node {
    let shape = Shape::of(d, s);
    let bound = if s.status.ip().is_loopback() {
        "Bound to loopback: no other machine can reach it, and the filter serves the page only \
         on connections made to a loopback address anyway (`status_public` in the input lifts \
         that)."
    } else {
        "Not on loopback: the input sets `status_public`, so any client that reaches this \
         address reads the page."
    };
    let status = shape
        .status_listener("status", s.status, &d.page_plugin)
        .gap()
        .note(format!(
            "The status page, on a listener of its own so that no user request pays for it: \
             {path} (text), {path}.json, {path}.html. {bound}",
            path = d.page.path
        ));
    let none = "No `health_checks` and no `outlier_detection` on any cluster, on purpose: upcheck \
                is the only health policy, so Envoy never ejects a backend behind its back (or \
                keeps one the filter has taken out).";
    let clusters_note = match d.routing {
        RoutingMode::Host => none.to_owned(),
        RoutingMode::Cluster => {
            format!("One cluster per backend, named as in the plugin configuration. {none}")
        }
    };
    let clusters = list(
        shape
            .clusters(&d.backends)
            .into_iter()
            .chain(d.etcd.iter().flat_map(crate::etcd::clusters)),
    )
    .gap()
    .note(clusters_note.clone());
    let listeners = list([shape.listener("web", s.listen, Some(&d.plugin)), status]);
    let resources = match &s.membership {
        None => vec![(
            "static_resources",
            map([("listeners", listeners), ("clusters", clusters)]).gap(),
        )],
        Some(dir) => {
            let cds = map([
                (
                    "path_config_source",
                    map([("path", text(clusters_file(dir).display().to_string()))]),
                ),
                ("resource_api_version", plain("V3")),
            ]);
            vec![
                (
                    "node",
                    map([("id", text("upcheck")), ("cluster", text("upcheck"))]).note(
                        "Envoy names itself so to the files it reads its clusters from.",
                    ),
                ),
                ("static_resources", map([("listeners", listeners)]).gap()),
                (
                    "dynamic_resources",
                    map([("cds_config", cds)]).gap().note(format!(
                        "The clusters, read from {} and taken in whenever `upcheck backends`                          replaces it. {clusters_note}",
                        clusters_file(dir).display()
                    )),
                ),
            ]
        }
    };
    let head = [
        ("stats_config", stats_config()),
        (
            "admin",
            map([(
                "address",
                map([("socket_address", socket(&Endpoint::Ip(s.admin)))]).note(
                    "Stats (/stats?filter=wasmcustom.upcheck), readiness (/ready) and control \
                     endpoints: loopback only, never on the public interface.",
                ),
            )]),
        ),
    ];
    map(head.into_iter().chain(resources))
}

/// With [`Settings::membership`], the files of its directory Envoy reads while it runs, each
/// with its text: the clusters (CDS) and each filter's configuration (ECDS), JSON. Empty
/// without it.
pub fn membership_files(d: &Deployment, s: &Settings) -> Vec<(PathBuf, String)> {
    let Some(dir) = &s.membership else {
        return Vec::new();
    };
    let shape = Shape {
        discovery: None,
        ..Shape::of(d, s)
    };
    let cluster_type = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    let clusters = shape
        .clusters(&d.backends)
        .into_iter()
        .chain(d.etcd.iter().flat_map(crate::etcd::clusters))
        .map(|c| c.first("@type", text(cluster_type)));
    let resources = |items: Vec<Node>| {
        let json = map([("resources", list(items))]).json();
        format!("{json:#}\n")
    };
    let filter = |name: &str, plugin: &str| {
        let config = map([
            (
                "@type",
                text("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"),
            ),
            ("name", text(name)),
            ("typed_config", shape.wasm_config(name, "", plugin)),
        ]);
        (filter_file(dir, name), resources(vec![config]))
    };
    vec![
        (clusters_file(dir), resources(clusters.collect())),
        filter("upcheck", &d.plugin),
        filter("upcheck-status", &d.page_plugin),
    ]
}

/// Envoy's tag rules for upcheck's metrics ([`series::STATS_TAGS`]), so that Prometheus sees
/// the backend (and the state, and the pool where the configuration names one) as a label: the
/// bootstrap's `stats_config`.
pub fn stats_config() -> Node {
    let rules = series::STATS_TAGS.iter().map(|rule| {
        map([
            ("tag_name", text(rule.label)),
            ("regex", quoted(rule.regex)),
        ])
        .note(rule.about)
    });
    map([("stats_tags", list(rules))]).note(
        "upcheck's metrics carry the backend in their names (wasmcustom.upcheck.app1.healthy); \
         these rules make it a label, so /stats/prometheus shows upcheck_healthy{backend=\"app1\"} \
         and one alert or dashboard panel covers every backend (docs/operating.md lists the \
         series). A plugin configuration with a `pool` name adds a pool label, for an Envoy that \
         runs several pools.",
    )
}

/// A listener `name` on `addr` with an HTTP connection manager whose one virtual host, for every
/// domain, has `routes`, and `http_filters`: the users' listener and the status page's differ
/// only in names, routes and filters. `(route config name, virtual host name)`.
/// A listener of one HTTP connection manager. `clusters_read`: whether the clusters its routes
/// name come from a file Envoy reads while it runs, which `envoy --mode validate` does not read:
/// then the route table does not ask for them to exist at load (`validate_clusters`), as a
/// route table served by xDS does not.
fn http_listener(
    name: &str,
    addr: SocketAddr,
    (route, host): (&str, &str),
    routes: Node,
    http_filters: Node,
    clusters_read: bool,
) -> Node {
    let virtual_host = map([
        ("name", text(host)),
        ("domains", list([quoted("*")]).flow()),
        ("routes", routes),
    ]);
    let manager = map([
        ("@type", text("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager")),
        ("stat_prefix", text(name)),
        (
            "route_config",
            map(
                [
                    ("name", text(route)),
                    ("virtual_hosts", list([virtual_host])),
                ]
                .into_iter()
                .chain(clusters_read.then(|| ("validate_clusters", plain("false")))),
            ),
        ),
        ("http_filters", http_filters),
    ]);
    let filter = map([
        (
            "name",
            text("envoy.filters.network.http_connection_manager"),
        ),
        ("typed_config", manager),
    ]);
    map([
        ("name", text(name)),
        (
            "address",
            map([("socket_address", socket(&Endpoint::Ip(addr)))]),
        ),
        ("filter_chains", list([map([("filters", list([filter]))])])),
    ])
}

/// The router, with `upstream_http_filters` if any.
fn router(upstream_http_filters: Option<Node>) -> Node {
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

/// The plugin configuration `plugin` (JSON) as a wasm filter's `configuration`.
pub fn plugin_configuration(plugin: &str) -> Node {
    map([
        (
            "@type",
            text("type.googleapis.com/google.protobuf.StringValue"),
        ),
        ("value", lines(plugin)),
    ])
}

/// Which comments a cluster carries: each is written once, on the first cluster it applies to.
struct Explain {
    /// The connect timeout's (in cluster routing, where no pool explains it).
    timeout: bool,
    /// Resolving a host name.
    dns: bool,
}

/// A backend's own cluster.
fn own_cluster(b: &Backend, explain: Explain) -> Node {
    let kind = match &b.probe {
        Endpoint::Ip(_) => vec![("type", text("STATIC"))],
        Endpoint::Name { .. } => {
            let strict = text("STRICT_DNS");
            vec![
                (
                    "type",
                    if explain.dns {
                        strict.note(
                            "A backend given by host name is resolved by DNS, and every \
                             address the name has is an endpoint; IPv4 first, as most app \
                             servers listen on it, IPv6 when the name has no IPv4 address.",
                        )
                    } else {
                        strict
                    },
                ),
                ("dns_lookup_family", text("V4_PREFERRED")),
            ]
        }
    };
    let timeout = plain("1s");
    let timeout = if explain.timeout {
        timeout.note(
            "A backend that does not complete the TCP handshake in time counts as a connection \
             failure.",
        )
    } else {
        timeout
    };
    let endpoint = map([(
        "endpoint",
        map([("address", map([("socket_address", socket(&b.probe))]))]),
    )]);
    map([("name", text(&b.cluster))].into_iter().chain(kind).chain([
        ("connect_timeout", timeout),
        (
            "load_assignment",
            map([
                ("cluster_name", text(&b.cluster)),
                (
                    "endpoints",
                    list([map([("lb_endpoints", list([endpoint]))])]),
                ),
            ]),
        ),
    ]))
}
