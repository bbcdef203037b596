//! `upcheck nginx`: the NGINX configuration of an upcheck deployment, for an NGINX built with
//! Kong's ngx_wasm_module, from the same inputs as `upcheck envoy`.
//!
//! The module runs as a `proxy_wasm` filter in front of `proxy_pass`. It writes its pick into the
//! route header as the backend's `cluster`, which for NGINX is the backend's `host:port`: that is
//! where ngx_wasm_module dispatches its probes (it takes addresses, not cluster names). A `map`
//! turns the header into the name of the backend's `upstream` block, so a value nobody listed
//! (a request the filter did not see) goes to the pool of every backend, never to an address a
//! client wrote. Each backend's block lists the others as `backup`, so NGINX's own failover
//! (`proxy_next_upstream`) has somewhere to go on a refused connection, and only for the
//! requests NGINX deems safe to repeat. The status page is a second `proxy_wasm` filter, with
//! the pool's configuration and `"role": "status_page"`, on a server bound to loopback; the same
//! filter answers the module's metrics for Prometheus at a location of their own beside it
//! (`/upcheck/metrics`), since ngx_wasm_module shows the module's metrics to nobody.
//!
//! What the file leaves to the operator: TLS, and everything else an NGINX in front of an app
//! has. It loads the module with `load_module` when told where it is (`--module`); an NGINX
//! with the module built in needs no such line.

use std::fmt::Write as _;
use std::net::SocketAddr;

use serde_json::Value;
use upcheck_policy::duration::display;
use upcheck_policy::page::METRICS_PATH;
use upcheck_policy::{Config, ConfigError, RoutingMode};

use crate::deployment::plan as envoy_plan;
use crate::endpoint::Endpoint;
use crate::plugin::{Addresses, Source};

/// What the NGINX configuration is written from.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The traffic filter's plugin configuration, as the module parsed it.
    pub config: Config,
    /// The traffic filter's plugin configuration (JSON, one line).
    pub plugin: String,
    /// The status page filter's plugin configuration (JSON, one line).
    pub page_plugin: String,
    /// The backends, in the configuration's order.
    pub backends: Vec<Backend>,
}

/// One backend as NGINX sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// Its upstream name, also the name of its `upstream` block.
    pub name: String,
    /// Where its requests go.
    pub address: Endpoint,
    /// Where its probes go (`host:port`), its `cluster` in the plugin configuration and what the
    /// route header carries for it.
    pub cluster: String,
}

/// Where NGINX listens and what it loads.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where users connect. Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// The status page's server, on loopback. Default `127.0.0.1:9902`.
    pub status: SocketAddr,
    /// Path of upcheck.wasm on the load balancer. Default `/etc/upcheck/upcheck.wasm`.
    pub wasm: String,
    /// NGINX's worker processes (each runs its own copy of the module). Default 2.
    pub workers: u32,
    /// Path of ngx_wasm_module built as a dynamic module, for a `load_module` line. Default:
    /// none, for an NGINX with the module built in.
    pub module: Option<String>,
    /// Where NGINX logs, at level `info` (upcheck's health changes). Default
    /// `/var/log/nginx/error.log`.
    pub error_log: String,
    /// NGINX's pid file. Default `/run/nginx.pid`.
    pub pid: String,
    /// What the configuration was written from, for the header, e.g. `config/caddy.json`.
    pub input: String,
}

/// What the written file was checked with in a real NGINX, for its header.
pub const CHECKED_WITH: &str = "nginx 1.22.1 (Debian 12) and Kong's ngx_wasm_module (its main \
     branch at 3bed2783, built as a dynamic module) on wasmtime 26.0.1";

/// The name of the `upstream` block of every backend, where a request the filter did not pick
/// for goes.
pub const POOL: &str = "upcheck_pool";

/// The plan for `source`; an error names the path in the input. `routing: "host"` is refused:
/// it needs Envoy's load balancer and retries.
pub fn plan(source: &Source) -> Result<Plan, ConfigError> {
    let locate = |error| source.origins.locate(error);
    // The backends and their addresses as `upcheck envoy` reads them; probes on another port
    // (Caddy's `health_checks.active.port`) only change where each backend's probes go.
    let mut requests = source.clone();
    requests.probe_port = None;
    let deployment = envoy_plan(&requests, Some(RoutingMode::Cluster))?;
    let backends: Vec<Backend> = deployment
        .backends
        .iter()
        .map(|b| {
            let probe = source
                .probe_port
                .map_or_else(|| b.address.to_string(), |port| at_port(&b.address, port));
            Backend {
                name: b.name.clone(),
                address: b.address.clone(),
                cluster: probe,
            }
        })
        .collect();
    let clusters: Vec<String> = backends.iter().map(|b| b.cluster.clone()).collect();
    let document = source.document.for_nginx(&clusters);
    let routing = source.routing.unwrap_or(RoutingMode::Cluster);
    let text = document.text(routing, Addresses::Drop);
    let config = Config::parse(text.as_bytes()).map_err(locate)?;
    let page_text = document.page_text(routing, Addresses::Drop);
    Config::parse(page_text.as_bytes()).map_err(locate)?;
    Ok(Plan {
        config,
        plugin: one_line(&text),
        page_plugin: one_line(&page_text),
        backends,
    })
}

/// `host:port` of `address`'s host at `port`.
fn at_port(address: &Endpoint, port: u16) -> String {
    match address {
        Endpoint::Ip(ip) => SocketAddr::new(ip.ip(), port).to_string(),
        Endpoint::Name { host, .. } => format!("{host}:{port}"),
    }
}

/// A JSON document on one line, as the module reads it.
fn one_line(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .map(|value| value.to_string())
        .unwrap_or_else(|_| text.replace('\n', ""))
}

/// `text` as an NGINX single-quoted string: a backslash and a quote escaped, as NGINX's
/// configuration reader unescapes them.
fn nginx_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `$http_...`: the NGINX variable of request header `name`.
fn header_variable(name: &str) -> String {
    format!("$http_{}", name.to_ascii_lowercase().replace('-', "_"))
}

/// The whole configuration file.
pub fn render(plan: &Plan, s: &Settings) -> String {
    let active = &plan.config.health_checks.active;
    let passive = &plan.config.health_checks.passive;
    let header = plan.config.route_header.to_ascii_lowercase();
    let variable = header_variable(&header);
    let mut out = String::new();
    let mut line = |text: &str| {
        out.push_str(text);
        out.push('\n');
    };
    line(&format!(
        "# NGINX with upcheck, written by `upcheck nginx` from {}.",
        s.input
    ));
    line("#");
    line("# upcheck runs in every worker as a proxy_wasm filter: it probes each backend (GET");
    line(&format!(
        "# {} every {}, timeout {}), ejects one after {} failures within {}, and names the",
        active.path,
        display(active.interval),
        display(active.timeout),
        passive.max_fails,
        display(passive.fail_duration)
    ));
    line(&format!(
        "# backend for each request in the {header} header, which the map below turns into"
    ));
    line("# that backend's upstream block. Backends:");
    for b in &plan.backends {
        if b.cluster == b.address.to_string() {
            line(&format!("#   {} at {}", b.name, b.address));
        } else {
            line(&format!(
                "#   {} at {} (probed at {})",
                b.name, b.address, b.cluster
            ));
        }
    }
    line("#");
    line(
        "# It needs an NGINX built with Kong's ngx_wasm_module (its `main` branch, wasmtime or V8;",
    );
    line("# Kong's prebuilt wasmx-nginx, or NGINX 1.22 or newer with the module compiled in, or");
    line("# loaded by load_module: `upcheck nginx --module PATH` writes that line). Stock NGINX");
    line("# (Debian's) lacks the module: `nginx -t` accepts this file there with the module's");
    line("# directives (its load_module, the wasm block, proxy_wasm) left out.");
    line(&format!("# Checked with {CHECKED_WITH}."));
    line("#");
    line(
        "# What differs from Envoy: NGINX reports no response flags, so a refused connection and a",
    );
    line(
        "# backend's own 502 count alike; a failover NGINX makes (proxy_next_upstream) is not seen",
    );
    line("# by upcheck, whose probes find a refusing backend within one interval; a request that");
    line(
        "# arrives before any probe has answered (workers compile the module as they start) waits",
    );
    line(
        "# on a probe it sends itself, at most one probe timeout, since ngx_wasm_module resumes a",
    );
    line("# request only on the answers to its own calls.");
    line("");
    if let Some(module) = &s.module {
        line(&format!("load_module {module};  # ngx_wasm_module"));
    }
    line(&format!(
        "worker_processes {};  # each its own copy of upcheck; one of them probes for all",
        s.workers
    ));
    line(&format!(
        "error_log {} info;  # upcheck's lines (health changes) are info",
        s.error_log
    ));
    line(&format!("pid {};", s.pid));
    line("");
    line("events {");
    line("    worker_connections 1024;");
    line("}");
    line("");
    line("# ngx_wasm_module: the module, and the shared memory through which the workers' copies");
    line("# share probe results, failures and the probing lease (a few kilobytes; `*` is the zone");
    line("# of keys without a namespace, which upcheck's are).");
    line("wasm {");
    line(&format!("    module upcheck {};", s.wasm));
    line("    shm_kv * 1m;");
    line("}");
    line("");
    line("http {");
    line("    # One upstream block per backend: the backend upcheck picked, then the others as");
    line("    # backups, for NGINX's own failover. max_fails=0: upcheck decides who is healthy.");
    for b in &plan.backends {
        line(&format!("    upstream {} {{", b.name));
        line(&format!("        server {} max_fails=0;", b.address));
        for other in plan.backends.iter().filter(|o| o.name != b.name) {
            line(&format!(
                "        server {} max_fails=0 backup;",
                other.address
            ));
        }
        line("    }");
    }
    line("    # Every backend: where a request goes that the filter did not pick for.");
    line(&format!("    upstream {POOL} {{"));
    for b in &plan.backends {
        line(&format!("        server {} max_fails=0;", b.address));
    }
    line("    }");
    line("");
    line(&format!(
        "    # The filter's pick ({header}, the backend's cluster) to its upstream block; any"
    ));
    line("    # other value, which upcheck never writes, to the pool.");
    line(&format!("    map {variable} $upcheck_upstream {{"));
    line(&format!("        default {POOL};"));
    for b in &plan.backends {
        line(&format!("        \"{}\" {};", b.cluster, b.name));
    }
    line("    }");
    line("");
    line("    server {");
    line(&format!("        listen {};", s.listen));
    line("        location / {");
    line(
        "            # upcheck: removes any copy of the route header a client sent, sets its pick.",
    );
    line(&format!(
        "            proxy_wasm upcheck {};",
        nginx_string(&plan.plugin)
    ));
    line("            proxy_pass http://$upcheck_upstream;");
    line("            # The route header is upcheck's word to NGINX, not to the app.");
    line(&format!("            proxy_set_header {header} \"\";"));
    line("            proxy_set_header Host $host;");
    line("            # Failover to a backup only where it is safe: a connection that failed or timed");
    line("            # out, for methods NGINX repeats (not POST, LOCK, PATCH), at most once.");
    line("            proxy_next_upstream error timeout;");
    line("            proxy_next_upstream_tries 2;");
    line("            proxy_connect_timeout 5s;");
    line("            proxy_read_timeout 15s;");
    line("        }");
    line("    }");
    line("");
    line("    # The status page (text; .json and .html beside it) and the metrics, on loopback");
    line(
        "    # only: this listen is what closes them to other machines, since ngx_wasm_module does",
    );
    line("    # not tell the filter the address a connection was made to.");
    line(&format!(
        "    # curl -s {}{}; curl -s {}{METRICS_PATH}",
        s.status,
        status_path(plan),
        s.status
    ));
    line("    server {");
    line(&format!("        listen {};", s.status));
    line("        # The filter answers every request here; one it let through finds no file.");
    line("        root /nonexistent;");
    line("        location / {");
    line(&format!(
        "            proxy_wasm upcheck {};",
        nginx_string(&plan.page_plugin)
    ));
    line("        }");
    line("        # The module's metrics in Prometheus' text format, the series Envoy's");
    line(&format!(
        "        # /stats/prometheus gives: scrape it with metrics_path {METRICS_PATH}."
    ));
    line(&format!("        location = {METRICS_PATH} {{"));
    line(&format!(
        "            proxy_wasm upcheck {};",
        nginx_string(&plan.page_plugin)
    ));
    line("        }");
    line("    }");
    line("}");
    out
}

/// The status page's path, as the page filter's configuration has it.
fn status_path(plan: &Plan) -> String {
    Config::parse(plan.page_plugin.as_bytes())
        .ok()
        .and_then(|c| c.status_page().map(|p| p.path.clone()))
        .unwrap_or_default()
}

/// Every line of an NGINX configuration written by [`render`] that only an NGINX with
/// ngx_wasm_module understands (the `wasm` block and the `proxy_wasm` directives), left out:
/// what a stock NGINX can check. A `load_module` line stays, for NGINX to load the module it
/// names (a stand-in for ngx_wasm_module's in the tests).
pub fn without_module(conf: &str) -> String {
    let mut out = String::new();
    let mut in_wasm = false;
    for line in conf.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("wasm {") {
            in_wasm = true;
        }
        let skip = in_wasm || trimmed.starts_with("proxy_wasm ");
        if in_wasm && trimmed == "}" {
            in_wasm = false;
        }
        if !skip {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::read;

    fn plan_of(json: &str) -> Result<Plan, String> {
        let source = read(json.as_bytes()).map_err(|e| e.to_string())?;
        plan(&source).map_err(|e| e.to_string())
    }

    const TWO: &str = r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
        {"name": "app2", "address": "127.0.0.1:3002"}]}"#;

    #[test]
    fn each_backends_cluster_is_its_address_and_the_filter_runs_as_nginxs() {
        let plan = plan_of(TWO).expect("plans");
        let clusters: Vec<&str> = plan.config.upstreams.iter().map(|u| u.cluster()).collect();
        assert_eq!(clusters, ["127.0.0.1:3001", "127.0.0.1:3002"]);
        assert_eq!(plan.config.proxy, upcheck_policy::Proxy::Nginx);
        let page = Config::parse(plan.page_plugin.as_bytes()).expect("the page parses");
        assert!(page.status_page().is_some_and(|p| p.public));
        assert!(!plan.plugin.contains('\n'));
    }

    #[test]
    fn host_routing_is_refused_naming_the_field() {
        let e = plan_of(
            r#"{"routing": "host", "upstreams": [{"name": "a", "address": "127.0.0.1:1"}]}"#,
        )
        .expect_err("refused");
        assert!(e.starts_with("routing: \"host\" needs Envoy"), "{e}");
    }

    #[test]
    fn a_quote_in_the_configuration_is_escaped_for_nginx() {
        assert_eq!(
            nginx_string(r#"{"a": "it's \"x\""}"#),
            r#"'{"a": "it\'s \\"x\\""}'"#
        );
    }

    #[test]
    fn the_metrics_have_a_location_on_the_status_pages_server_served_by_the_page_filter() {
        let plan = plan_of(TWO).expect("plans");
        let conf = render(&plan, &settings());
        let server = conf
            .split("listen 127.0.0.1:9902;")
            .nth(1)
            .expect("the status page's server");
        let metrics = server
            .split("location = /upcheck/metrics {")
            .nth(1)
            .expect("the metrics' location, on that server");
        let filter = format!("proxy_wasm upcheck {};", nginx_string(&plan.page_plugin));
        assert!(
            metrics.trim_start().starts_with(&filter),
            "the page's filter answers it: {metrics}"
        );
        assert!(
            conf.contains("curl -s 127.0.0.1:9902/upcheck/metrics"),
            "{conf}"
        );
    }

    fn settings() -> Settings {
        Settings {
            listen: "0.0.0.0:8080".parse().expect("an address"),
            status: "127.0.0.1:9902".parse().expect("an address"),
            wasm: "/etc/upcheck/upcheck.wasm".into(),
            workers: 2,
            module: None,
            error_log: "/var/log/nginx/error.log".into(),
            pid: "/run/nginx.pid".into(),
            input: "test".into(),
        }
    }

    #[test]
    fn leaving_the_module_out_drops_the_wasm_block_and_the_filters_only() {
        let plan = plan_of(TWO).expect("plans");
        let conf = render(&plan, &settings());
        let stock = without_module(&conf);
        assert!(conf.contains("shm_kv * 1m;") && conf.contains("proxy_wasm upcheck '"));
        assert!(!stock.contains("shm_kv") && !stock.contains("proxy_wasm upcheck"));
        assert_eq!(
            conf.lines().count() - stock.lines().count(),
            3 + 4,
            "the three filters (traffic, page, metrics) and the wasm block's four lines"
        );
        assert!(stock.contains("proxy_pass http://$upcheck_upstream;"));
        assert!(stock.contains("\"127.0.0.1:3002\" app2;"));
    }
}
