//! What `upcheck nginx` writes is a configuration NGINX accepts: Debian's `nginx -t` checks it
//! with the module's directives (the `wasm` block, `proxy_wasm`) left out, since stock NGINX
//! lacks ngx_wasm_module and the project does not build it. The plugin configurations embedded
//! in the `proxy_wasm` lines are checked by the module's own parser. NGINX comes from
//! `UPCHECK_NGINX` (`make e2e` installs Debian's and sets it); the tests fail without it, never
//! skip.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{stderr, upcheck, workspace};
use upcheck_cli::nginx::without_module;
use upcheck_policy::{Config, Proxy};

fn nginx() -> PathBuf {
    let path = std::env::var_os("UPCHECK_NGINX")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("UPCHECK_NGINX is not set: run these tests through `make e2e`"));
    assert!(
        path.is_file(),
        "UPCHECK_NGINX={} is not a file",
        path.display()
    );
    path
}

/// `upcheck nginx args`, run at the workspace root: the configuration it writes.
fn written(args: &[&str]) -> String {
    let output = upcheck(&workspace(), args, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    String::from_utf8(output.stdout).expect("utf-8")
}

/// `nginx -t` on `conf`, its log and pid file moved into a temporary directory: Ok, or what
/// NGINX said.
fn check(conf: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().display().to_string();
    let conf = conf
        .replace("/var/log/nginx/", &format!("{root}/"))
        .replace("/run/nginx.pid", &format!("{root}/nginx.pid"));
    let path = dir.path().join("nginx.conf");
    std::fs::write(&path, conf).expect("written");
    let output = Command::new(nginx())
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&path)
        .output()
        .expect("nginx runs");
    if output.status.success() {
        Ok(())
    } else {
        Err(stderr(&output))
    }
}

/// The plugin configurations of the `proxy_wasm` lines, unquoted as NGINX reads them.
fn plugin_configurations(conf: &str) -> Vec<String> {
    conf.lines()
        .filter_map(|line| line.trim().strip_prefix("proxy_wasm upcheck '"))
        .map(|rest| {
            rest.trim_end_matches("';")
                .replace("\\'", "'")
                .replace("\\\\", "\\")
        })
        .collect()
}

#[test]
fn the_configuration_written_from_caddy_passes_nginx_t_without_the_modules_directives() {
    let conf = written(&["nginx", "--from-caddy", "config/caddy.json"]);
    check(&without_module(&conf)).unwrap_or_else(|e| panic!("nginx -t refused it: {e}\n{conf}"));
    let refused = check(&conf).expect_err("stock NGINX knows no wasm block");
    assert!(refused.contains("unknown directive \"wasm\""), "{refused}");
}

#[test]
fn the_embedded_plugin_configurations_are_the_modules_for_nginx() {
    let conf = written(&["nginx", "--from-caddy", "config/caddy.json"]);
    let plugins = plugin_configurations(&conf);
    // The traffic filter's, the status page's and the metrics' location's (the page's again).
    assert_eq!(plugins.len(), 3, "{conf}");
    assert_eq!(plugins[2], plugins[1], "the metrics are the page filter's");
    let traffic = Config::parse(plugins[0].as_bytes()).expect("the traffic filter's parses");
    let page = Config::parse(plugins[1].as_bytes()).expect("the page filter's parses");
    assert_eq!(traffic.proxy, Proxy::Nginx);
    let clusters: Vec<&str> = traffic.upstreams.iter().map(|u| u.cluster()).collect();
    assert_eq!(clusters, ["127.0.0.1:3001", "127.0.0.1:3002"]);
    assert!(page.status_page().is_some_and(|p| p.public));
}

#[test]
fn a_plugin_configuration_with_a_host_name_and_a_quote_in_a_probe_header_passes_nginx_t() {
    let input = br#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
        {"name": "app2", "address": "localhost:3002", "weight": 2}],
        "health_checks": {"active": {"path": "/up", "headers": {"x-probe": "it's \\ me"}}}}"#;
    let output = upcheck(&workspace(), &["nginx", "-"], input);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let conf = String::from_utf8(output.stdout).expect("utf-8");
    check(&without_module(&conf)).unwrap_or_else(|e| panic!("nginx -t refused it: {e}\n{conf}"));
    let plugins = plugin_configurations(&conf);
    let traffic = Config::parse(plugins[0].as_bytes()).expect("parses");
    assert_eq!(
        traffic.health_checks.active.headers,
        [("x-probe".to_string(), "it's \\ me".to_string())]
    );
    assert_eq!(traffic.upstreams[1].cluster(), "localhost:3002");
}

#[test]
fn a_grpc_check_is_refused_for_nginx_naming_the_field_and_writing_nothing() {
    let output = upcheck(
        &workspace(),
        &["nginx", "-"],
        br#"{"upstreams": [{"name": "a", "address": "127.0.0.1:50051"}],
             "health_checks": {"active": {"grpc": {"service": ""}}}}"#,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output)
            .contains("standard input: health_checks.active.grpc: gRPC health checks need Envoy"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn host_routing_and_a_public_status_server_are_refused_naming_what_to_change() {
    let output = upcheck(
        &workspace(),
        &["nginx", "-"],
        br#"{"routing": "host", "upstreams": [{"name": "a", "address": "127.0.0.1:1"}]}"#,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("standard input: routing: \"host\" needs Envoy"),
        "{}",
        stderr(&output)
    );
    let output = upcheck(
        &workspace(),
        &[
            "nginx",
            "--from-caddy",
            "config/caddy.json",
            "--status",
            "0.0.0.0:9902",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--status 0.0.0.0:9902"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_module_given_is_loaded_by_nginx_before_anything_else_and_the_log_and_pid_go_where_told() {
    let module = std::env::var("UPCHECK_NGINX_MODULE").unwrap_or_else(|_| {
        panic!("UPCHECK_NGINX_MODULE is not set: run these tests through `make e2e`")
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("upcheck-error.log").display().to_string();
    let pid = dir.path().join("upcheck.pid").display().to_string();
    let args = [
        "nginx",
        "--from-caddy",
        "config/caddy.json",
        "--module",
        &module,
        "--error-log",
        &log,
        "--pid",
        &pid,
    ];
    let conf = written(&args);
    let first = conf
        .lines()
        .find(|line| !line.starts_with('#') && !line.is_empty());
    assert_eq!(
        first,
        Some(format!("load_module {module};  # ngx_wasm_module").as_str()),
        "{conf}"
    );
    assert!(conf.contains(&format!("error_log {log} info;")), "{conf}");
    assert!(conf.contains(&format!("pid {pid};")), "{conf}");
    assert!(!conf.contains("/var/log/nginx/") && !conf.contains("/run/nginx.pid"));
    check(&without_module(&conf)).unwrap_or_else(|e| panic!("nginx -t refused it: {e}\n{conf}"));

    let missing = written(&[
        "nginx",
        "--from-caddy",
        "config/caddy.json",
        "--module",
        "/nonexistent/ngx_wasmx_module.so",
    ]);
    let refused = check(&without_module(&missing)).expect_err("no module at that path");
    assert!(
        refused.contains("/nonexistent/ngx_wasmx_module.so"),
        "{refused}"
    );
}

#[test]
fn without_a_module_the_file_loads_none_and_names_what_it_was_checked_with() {
    let conf = written(&["nginx", "--from-caddy", "config/caddy.json"]);
    assert!(!conf.contains("\nload_module"), "{conf}");
    assert!(
        conf.contains(&format!(
            "# Checked with {}.",
            upcheck_cli::nginx::CHECKED_WITH
        )),
        "{conf}"
    );
    assert!(conf.contains("error_log /var/log/nginx/error.log info;"));
    assert!(conf.contains("pid /run/nginx.pid;"));
}
