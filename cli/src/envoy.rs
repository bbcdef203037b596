//! The Envoy 1.40 configuration of a [`Deployment`], as commented YAML.
//!
//! Written as text, not serialized: the comments are half of it. Each setting whose absence was
//! measured to cost users (README, "Routing modes") is explained next to it, so that whoever
//! reads or edits the file learns why it is there. The shapes are those the e2e tests run
//! (`e2e/src/envoy_config.rs`): in host routing a `pool` cluster with the `override_host` load
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

use std::fmt::Write as _;
use std::net::SocketAddr;

use upcheck_policy::duration::display;
use upcheck_policy::RoutingMode;

use crate::deployment::{Backend, Deployment, Endpoint, POOL};

/// Where comments are wrapped.
const WIDTH: usize = 100;

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
}

/// The whole configuration file.
pub fn render(d: &Deployment, s: &Settings) -> String {
    let mut out = String::new();
    header(&mut out, d, s);
    out.push('\n');
    listener(&mut out, d, s);
    out.push('\n');
    clusters(&mut out, d);
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

fn listener(out: &mut String, d: &Deployment, s: &Settings) {
    out.push_str("admin:\n");
    comment(
        out,
        2,
        "Stats (/stats?filter=wasmcustom.upcheck), readiness (/ready) and control endpoints: \
         loopback only, never on the public interface.",
    );
    let _ = write!(
        out,
        "  address:\n    socket_address: {}\n\n",
        socket(&Endpoint::Ip(s.admin))
    );
    out.push_str("static_resources:\n  listeners:\n");
    listener_head(out, "web", s.listen, "upcheck", "apps");
    match d.routing {
        RoutingMode::Host => host_routes(out, d),
        RoutingMode::Cluster => cluster_route(out, d),
    }
    out.push_str("                http_filters:\n");
    let about = match d.routing {
        RoutingMode::Host => {
            "The plugin configuration (JSON), from the input: `routing: host`, and each \
             upstream's address is its endpoint in the pool, written exactly as Envoy prints it \
             (ip:port); an address that is not in the pool is not an error to Envoy, it silently \
             round-robins instead. Probes go to each upstream's own cluster (its `cluster`, else \
             its name). Durations are nanoseconds, or strings such as \"10s\"."
        }
        RoutingMode::Cluster => {
            "The plugin configuration (JSON), from the input: `routing: cluster`, and each \
             upstream's cluster (its `cluster`, else its name) is a cluster below, which holds \
             its address. Durations are nanoseconds, or strings such as \"10s\"."
        }
    };
    wasm_filter(out, "upcheck", about, &d.plugin, s);
    router(out, d);
    status_listener(out, d, s);
}

/// The status page's listener: the same module in the same `vm_id`, so it reads what the
/// traffic filters share; a 404 route behind the filter, which answers every request itself.
fn status_listener(out: &mut String, d: &Deployment, s: &Settings) {
    out.push('\n');
    let bound = if s.status.ip().is_loopback() {
        "Bound to loopback: no other machine can reach it, and the filter serves the page only \
         on connections made to a loopback address anyway (`status_public` in the input lifts \
         that)."
    } else {
        "Not on loopback: the input sets `status_public`, so any client that reaches this \
         address reads the page."
    };
    comment(
        out,
        4,
        &format!(
            "The status page, on a listener of its own so that no user request pays for it: \
             {path} (text), {path}.json, {path}.html. {bound}",
            path = d.page.path
        ),
    );
    listener_head(out, "status", s.status, "status", "status");
    comment(
        out,
        22,
        "The filter answers every request here itself (the page, or 404 for any other path); \
         this route answers only if it lets one through, and routes nowhere.",
    );
    out.push_str(
        "                      routes:
                        - match: { prefix: \"/\" }
                          direct_response: { status: 404 }
                http_filters:
",
    );
    wasm_filter(
        out,
        "upcheck-status",
        "The pool's plugin configuration as above, with `role: status_page` first: this filter \
         shows the health the traffic filters share and never probes, routes or changes it.",
        &d.page_plugin,
        s,
    );
    out.push_str(
        "                  - name: envoy.filters.http.router
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
",
    );
}

/// The header the filter writes, lowercase as Envoy keeps header names.
/// A listener `name` on `addr` with an HTTP connection manager, up to its one virtual host's
/// domains: the users' listener and the status page's differ only in names, routes and filters.
fn listener_head(out: &mut String, name: &str, addr: SocketAddr, route: &str, host: &str) {
    let _ = write!(
        out,
        "    - name: {name}
      address:
        socket_address: {socket}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: {name}
                route_config:
                  name: {route}
                  virtual_hosts:
                    - name: {host}
                      domains: [\"*\"]
",
        socket = socket(&Endpoint::Ip(addr)),
    );
}

fn route_header(d: &Deployment) -> String {
    scalar(&d.config.route_header.to_ascii_lowercase())
}

fn host_routes(out: &mut String, d: &Deployment) {
    let header = d.config.route_header.to_ascii_lowercase();
    comment(
        out,
        22,
        &format!(
            "Both routes go to the pool; they differ only in what they retry. Neither removes \
             {header} with `request_headers_to_remove`: measured on 1.40, that misroutes \
             requests (the load balancer must still read it). The router's upstream filter \
             below removes it once the backend is chosen."
        ),
    );
    out.push_str("                      routes:\n");
    comment(
        out,
        24,
        "Reads: GET and HEAD change nothing on the server, so a failure of the first attempt \
         may be repeated on another backend even when it reached the app: a 502, 503 or 504 \
         (gateway-error), a reset, no answer within per_try_timeout. Not `5xx`: a 500 is the \
         app's answer (a bug behind one URL fails on every backend alike), and upcheck counts \
         every retried request as a failure of the backend it picked, so retrying 500s would \
         eject backends for app bugs.",
    );
    out.push_str(
        "                        - match:
                            prefix: \"/\"
                            headers:
                              - name: \":method\"
                                string_match: { safe_regex: { regex: \"GET|HEAD\" } }
                          route:
                            cluster: pool
                            retry_policy:
                              retry_on: gateway-error,reset,connect-failure,refused-stream
",
    );
    comment(
        out,
        30,
        "One retry, on another backend: with two backends, a second would go back to one that \
         already failed this request.",
    );
    out.push_str("                              num_retries: 1\n");
    comment(
        out,
        30,
        &format!(
            "How long one attempt may take before it is abandoned and retried: a little above \
             your slowest healthy GET (raise it if pages are slower). A hung backend costs each \
             request it gets this much extra latency, until the filter ejects it ({} such \
             requests).",
            d.config.health_checks.passive.max_fails
        ),
    );
    out.push_str("                              per_try_timeout: 3s\n");
    comment(
        out,
        30,
        "The retry never picks the host that already failed this request; without this \
         predicate half the retries went back to it.",
    );
    retry_host_predicate(out);
    comment(
        out,
        24,
        "Everything else (POST, PUT, PATCH, DELETE, ...) may have changed something once it \
         reached the app, so it is retried only when it never reached a backend: the connection \
         was refused or not established in time, or an HTTP/2 backend refused the stream before \
         reading it. A POST that got a 502 is not repeated; that 502 reaches the user and counts \
         against the backend as a passive failure.",
    );
    out.push_str(
        "                        - match: { prefix: \"/\" }
                          route:
                            cluster: pool
                            retry_policy:
                              retry_on: connect-failure,refused-stream
                              num_retries: 1
",
    );
    retry_host_predicate(out);
}

fn retry_host_predicate(out: &mut String) {
    out.push_str(
        "                              retry_host_predicate:
                                - name: envoy.retry_host_predicates.previous_hosts
                                  typed_config:
                                    \"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate
                              host_selection_retry_max_attempts: 3
",
    );
}

fn cluster_route(out: &mut String, d: &Deployment) {
    let header = route_header(d);
    out.push_str(
        "                      routes:
                        - match: { prefix: \"/\" }
                          route:
",
    );
    comment(
        out,
        28,
        "The filter sets this header on every request it lets through (and drops any value a \
         client sent); Envoy re-selects the route after the filter changed a header, so the \
         cluster named here is the filter's pick.",
    );
    let _ = writeln!(out, "                            cluster_header: {header}");
    comment(
        out,
        26,
        "Routing already happened when this applies: the backend never sees the header.",
    );
    let _ = writeln!(
        out,
        "                          request_headers_to_remove: [{header}]"
    );
}

/// The wasm filter named `name` with the plugin configuration `plugin`, explained by `about`.
fn wasm_filter(out: &mut String, name: &str, about: &str, plugin: &str, s: &Settings) {
    let _ = write!(
        out,
        "                  - name: envoy.filters.http.wasm
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
                      config:
                        name: {name}
                        root_id: upcheck
                        vm_config:
                          # Every VM with this id shares health state (proxy-wasm shared data).
                          vm_id: upcheck
                          runtime: envoy.wasm.runtime.v8
                          code:
                            local: {{ filename: {wasm} }}
                        # A crashed VM is recreated instead of failing its worker's requests for ever.
                        failure_policy: FAIL_RELOAD
",
        wasm = scalar(&s.wasm),
    );
    comment(out, 24, about);
    out.push_str(
        "                        configuration:
                          \"@type\": type.googleapis.com/google.protobuf.StringValue
                          value: |
",
    );
    for line in plugin.lines() {
        let _ = writeln!(out, "                            {line}");
    }
}

fn router(out: &mut String, d: &Deployment) {
    out.push_str(
        "                  - name: envoy.filters.http.router
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
",
    );
    if d.routing == RoutingMode::Cluster {
        return;
    }
    comment(
        out,
        22,
        "Filters on each attempt, after its backend was chosen. The routing header has done \
         its work by then (the load balancer has read it), so the backend never sees it.",
    );
    let _ = write!(
        out,
        "                      upstream_http_filters:
                        - name: envoy.filters.http.header_mutation
                          typed_config:
                            \"@type\": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
                            mutations:
                              request_mutations:
                                - remove: {header}
                        - name: envoy.filters.http.upstream_codec
                          typed_config:
                            \"@type\": type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec
",
        header = route_header(d),
    );
}

fn clusters(out: &mut String, d: &Deployment) {
    let none = "No `health_checks` and no `outlier_detection` on any cluster, on purpose: upcheck \
                is the only health policy, so Envoy never ejects a backend behind its back (or \
                keeps one the filter has taken out).";
    match d.routing {
        RoutingMode::Host => {
            comment(out, 2, none);
            out.push_str("  clusters:\n");
            pool(out, d);
            out.push('\n');
            let probes = match d.backends.first() {
                Some(b) if b.probe != b.address => format!(
                    " Probes go to port {} of each backend, requests to the port in the pool.",
                    b.probe.port()
                ),
                _ => String::new(),
            };
            comment(
                out,
                4,
                &format!(
                    "One cluster per backend for upcheck's probes only, named as in the plugin \
                     configuration.{probes}"
                ),
            );
        }
        RoutingMode::Cluster => {
            comment(
                out,
                2,
                &format!("One cluster per backend, named as in the plugin configuration. {none}"),
            );
            out.push_str("  clusters:\n");
        }
    }
    let first_name = d
        .backends
        .iter()
        .position(|b| matches!(b.probe, Endpoint::Name { .. }));
    for (i, backend) in d.backends.iter().enumerate() {
        let explain = Explain {
            timeout: d.routing == RoutingMode::Cluster && i == 0,
            dns: first_name == Some(i),
        };
        own_cluster(out, backend, explain);
    }
}

/// Which comments a cluster carries: each is written once, on the first cluster it applies to.
struct Explain {
    /// The connect timeout's (in cluster routing, where no pool explains it).
    timeout: bool,
    /// Resolving a host name.
    dns: bool,
}

fn pool(out: &mut String, d: &Deployment) {
    comment(
        out,
        4,
        &format!(
            "Every backend, for user requests. The load balancer sends each attempt to the next \
             address the filter wrote into {}; it falls back to round robin when there is none \
             (the filter is not configured).",
            d.config.route_header.to_ascii_lowercase()
        ),
    );
    let _ = writeln!(out, "    - name: {POOL}\n      type: STATIC");
    comment(
        out,
        6,
        "A backend that does not complete the TCP handshake in time counts as a connection \
         failure (and is retried, for every method).",
    );
    let _ = write!(
        out,
        "      connect_timeout: 1s
      load_balancing_policy:
        policies:
          - typed_extension_config:
              name: envoy.load_balancing_policies.override_host
              typed_config:
                \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost
                override_host_sources:
                  - header: {header}
                fallback_policy:
                  policies:
                    - typed_extension_config:
                        name: envoy.load_balancing_policies.round_robin
                        typed_config:
                          \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
",
        header = route_header(d),
    );
    comment(
        out,
        6,
        "Envoy allows 3 retries in flight per cluster by default: under load, a backend \
         breaking then turned most retries into 502s (625 of 1,000 concurrent requests, \
         measured). A request retries at most once, so retries in flight never outnumber \
         requests in flight: with max_retries equal to max_requests the retry breaker never \
         trips before the request one.",
    );
    out.push_str(
        "      circuit_breakers:
        thresholds:
          - priority: DEFAULT
            max_connections: 1024
            max_pending_requests: 1024
            max_requests: 1024
            max_retries: 1024
",
    );
    let _ = write!(
        out,
        "      load_assignment:\n        cluster_name: {POOL}\n        endpoints:\n          - lb_endpoints:\n"
    );
    for b in &d.backends {
        let _ = writeln!(
            out,
            "              - endpoint:\n                  address:\n                    socket_address: {} # {}",
            socket(&b.address),
            b.name
        );
    }
}

/// A backend's own cluster.
fn own_cluster(out: &mut String, b: &Backend, explain: Explain) {
    let cluster = scalar(&b.cluster);
    let _ = writeln!(out, "    - name: {cluster}");
    match &b.probe {
        Endpoint::Ip(_) => out.push_str("      type: STATIC\n"),
        Endpoint::Name { .. } => {
            if explain.dns {
                comment(
                    out,
                    6,
                    "A backend given by host name is resolved by DNS, and every address the \
                     name has is an endpoint; IPv4 first, as most app servers listen on it, IPv6 \
                     when the name has no IPv4 address.",
                );
            }
            out.push_str("      type: STRICT_DNS\n      dns_lookup_family: V4_PREFERRED\n");
        }
    }
    if explain.timeout {
        comment(
            out,
            6,
            "A backend that does not complete the TCP handshake in time counts as a connection \
             failure.",
        );
    }
    let _ = write!(
        out,
        "      connect_timeout: 1s
      load_assignment:
        cluster_name: {cluster}
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {}
",
        socket(&b.probe)
    );
}

/// `{ address: …, port_value: … }`.
fn socket(endpoint: &Endpoint) -> String {
    format!(
        "{{ address: {}, port_value: {} }}",
        scalar(&endpoint.host()),
        endpoint.port()
    )
}

/// A YAML scalar that reads back as the string `text`: plain when it plainly is one (names,
/// IPv4 addresses, paths), else double-quoted with JSON's escapes, which YAML shares.
fn scalar(text: &str) -> String {
    let safe_chars = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'));
    let starts_well = text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        || (text.starts_with(|c: char| c.is_ascii_digit()) && text.contains('.'));
    let lower = text.to_ascii_lowercase();
    let special = text.parse::<f64>().is_ok()
        || ["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&lower.as_str());
    if safe_chars && starts_well && !special {
        text.to_owned()
    } else {
        crate::plugin::compact(&serde_json::Value::String(text.to_owned()))
    }
}

/// Writes `text` as comment lines at `indent`, wrapped at [`WIDTH`]: a `\n` ends a paragraph,
/// an empty line is a bare `#`, and a line starting with two spaces is kept as it is (a
/// command). Characters YAML could read as a line break are escaped.
fn comment(out: &mut String, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    for line in text.split('\n') {
        if line.is_empty() {
            let _ = writeln!(out, "{pad}#");
            continue;
        }
        if line.starts_with("  ") {
            let _ = writeln!(out, "{pad}# {}", visible(line));
            continue;
        }
        let mut current = String::new();
        for word in line.split_whitespace().map(visible) {
            if !current.is_empty() && indent + 2 + current.len() + 1 + word.len() > WIDTH {
                let _ = writeln!(out, "{pad}# {current}");
                current.clear();
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(&word);
        }
        if !current.is_empty() {
            let _ = writeln!(out, "{pad}# {current}");
        }
    }
}

/// `text` with control characters (and the other characters YAML 1.1 reads as line breaks)
/// escaped.
fn visible(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_are_only_those_yaml_reads_as_the_same_string() {
        for plain in [
            "127.0.0.1",
            "app1",
            "x-upcheck-upstream",
            "/etc/upcheck/upcheck.wasm",
        ] {
            assert_eq!(scalar(plain), plain);
        }
        for quoted in [
            "::1", "3001", "1.5", "true", "No", "0x1F", "a b", "a#b", "-x", "",
        ] {
            assert!(
                scalar(quoted).starts_with('"'),
                "{quoted}: {}",
                scalar(quoted)
            );
        }
    }

    #[test]
    fn comments_wrap_at_the_width_and_keep_commands_and_paragraphs() {
        let mut out = String::new();
        let long = "word ".repeat(40);
        comment(
            &mut out,
            4,
            &format!("{long}\n\n  envoy -c envoy.yaml\nend"),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines
            .iter()
            .all(|l| l.len() <= WIDTH && l.starts_with("    #")));
        assert!(lines.contains(&"    #"));
        assert!(lines.contains(&"    #   envoy -c envoy.yaml"));
        assert_eq!(lines.last(), Some(&"    # end"));
    }

    proptest::proptest! {
        #[test]
        fn no_text_from_the_input_ever_leaves_a_comment(text in "\\PC*|[\\s\\S]{0,300}", indent in 0usize..40) {
            let mut out = String::new();
            comment(&mut out, indent, &text);
            let pad = " ".repeat(indent);
            for line in out.lines() {
                proptest::prop_assert!(line.starts_with(&format!("{pad}#")), "{:?}", line);
            }
            let breaks = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
            proptest::prop_assert!(!out.trim_end_matches('\n').contains(|c: char| breaks(c) && c != '\n'));
        }
    }

    #[test]
    fn a_line_break_from_the_input_never_leaves_a_comment() {
        let mut out = String::new();
        comment(&mut out, 0, "a\rb\u{1}c\u{2028}d\n  e\u{85}f");
        assert_eq!(out, "# a b\\u{1}c d\n#   e\\u{85}f\n");
    }
}
