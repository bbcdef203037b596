//! The same upcheck.wasm in both proxy-wasm hosts the test host behaves as ([`Profile`]): Envoy
//! 1.40, and NGINX with Kong's ngx_wasm_module. What the module imports against what each host
//! declares (the refusals that differ between them, a log-level import of another signature and
//! a second tick period, are in `host_mechanics.rs`), and the scenarios that make sense without Envoy's response flags (the
//! incident, a database blip, a backend booted but failing its pages, a hang), run in both.

use crate::support::{ok, secs};
use std::collections::BTreeSet;
use std::time::Duration;
use upcheck_host_tests::{
    Behaviour, Host, HostOptions, Load, Outcome, Profile, RequestSpec, Traffic, UPCHECK_WASM,
};

const PROFILES: [Profile; 2] = [Profile::Envoy, Profile::Nginx];

/// The host calls upcheck makes (`filter/src/hostcall.rs`), and all it imports: the module speaks
/// the ABI itself, so no SDK trait's default links in a call it never makes (ngx_wasm_module
/// traps in several of those, [`upcheck_host_tests::nginx`]).
const CALLED: [&str; 24] = [
    "proxy_continue_stream",
    "proxy_define_metric",
    "proxy_get_buffer_bytes",
    "proxy_get_current_time_nanoseconds",
    "proxy_get_header_map_pairs",
    "proxy_get_header_map_value",
    "proxy_get_metric",
    "proxy_get_property",
    "proxy_get_shared_data",
    "proxy_get_status",
    "proxy_grpc_call",
    "proxy_grpc_cancel",
    "proxy_grpc_send",
    "proxy_grpc_stream",
    "proxy_http_call",
    "proxy_increment_metric",
    "proxy_log",
    "proxy_record_metric",
    "proxy_remove_header_map_value",
    "proxy_replace_header_map_value",
    "proxy_send_local_response",
    "proxy_set_effective_context",
    "proxy_set_shared_data",
    "proxy_set_tick_period_milliseconds",
];

fn options(profile: Profile) -> HostOptions {
    HostOptions {
        profile,
        ..HostOptions::default()
    }
}

fn host(profile: Profile) -> Host {
    Host::from_file(UPCHECK_WASM, options(profile))
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads in {profile:?} (run `make build`): {e}"))
}

fn run(host: &mut Host, rate: u32, duration: Duration) -> Traffic {
    let traffic = ok(host.traffic(rate, duration));
    println!("{traffic}");
    traffic
}

/// The plugin configuration for backends `names` as `profile`'s proxy takes it: in Envoy each
/// name is its cluster; NGINX is told so (`"proxy": "nginx"`) and dispatches each backend's
/// probes to its address, its `cluster`. `extra` adds top-level fields.
fn config(host: &Host, profile: Profile, names: &[&str], extra: &str) -> String {
    let upstreams: Vec<String> = names
        .iter()
        .map(|name| match profile {
            Profile::Envoy => format!(r#"{{"name":"{name}"}}"#),
            Profile::Nginx => {
                let address = host.address(name).expect("upstream scripted before");
                format!(r#"{{"name":"{name}","cluster":"{address}"}}"#)
            }
        })
        .collect();
    let proxy = match profile {
        Profile::Envoy => "",
        Profile::Nginx => r#""proxy":"nginx","#,
    };
    format!(r#"{{{proxy}"upstreams":[{}]{extra}}}"#, upstreams.join(","))
}

fn logged(host: &Host, line: &str) -> bool {
    host.logs().iter().any(|l| l.message == line)
}

#[test]
fn the_module_imports_only_what_it_calls_and_loads_in_both_hosts() {
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::from_file(&engine, UPCHECK_WASM)
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} (run `make build`): {e}"));
    let imports: BTreeSet<String> = module
        .imports()
        .map(|import| format!("{}.{}", import.module(), import.name()))
        .collect();
    let expected: BTreeSet<String> = CALLED.iter().map(|name| format!("env.{name}")).collect();
    assert_eq!(imports, expected);
    assert!(!imports.contains("env.proxy_get_log_level"));
    for profile in PROFILES {
        Host::new(std::fs::read(UPCHECK_WASM).expect("read"), options(profile))
            .unwrap_or_else(|e| panic!("does not load in {profile:?}: {e}"));
    }
}

/// The incident: app1 serving, app2 joining by a configuration update while `broken`.
fn app2_added(profile: Profile, broken: Behaviour) -> Host {
    let mut host = host(profile);
    host.upstream("app1");
    host.upstream("app2")
        .others(broken.clone())
        .path("/up", broken);
    ok(host.start(&config(&host, profile, &["app1"], "")));
    let before = run(&mut host, 40, secs(5));
    ok(host.reconfigure(&config(&host, profile, &["app1", "app2"], "")));
    let after = run(&mut host, 40, secs(40));
    assert!(
        before.failures().is_empty() && after.failures().is_empty(),
        "{profile:?}: {after}"
    );
    assert_eq!(
        host.requests_routed("app2"),
        0,
        "{profile:?}: app2 saw users"
    );
    assert!(host.probes_sent("app2") >= 4, "{profile:?}: app2 probed");
    host
}

#[test]
fn in_both_hosts_a_backend_added_answering_502_never_sees_a_user() {
    for profile in PROFILES {
        let host = app2_added(profile, Behaviour::status(502));
        assert!(
            logged(&host, "upcheck: app2 unhealthy: 1 probe answered 502"),
            "{profile:?}"
        );
    }
}

#[test]
fn in_both_hosts_a_probe_to_a_refusing_backend_finds_nothing_serving() {
    for profile in PROFILES {
        let host = app2_added(profile, Behaviour::Refuse);
        assert!(
            logged(
                &host,
                "upcheck: app2 unhealthy: 1 probe found nothing serving (connection failed)"
            ),
            "{profile:?}: {:#?}",
            host.logs()
        );
    }
}

#[test]
fn in_both_hosts_a_db_blip_failing_every_probe_fails_no_user() {
    for profile in PROFILES {
        let mut host = host(profile);
        for app in ["app1", "app2"] {
            host.upstream(app)
                .path("/up", Behaviour::status(200))
                .from(secs(20), Behaviour::status(503))
                .from(secs(40), Behaviour::status(200));
        }
        ok(host.start(&config(&host, profile, &["app1", "app2"], "")));
        let during = run(&mut host, 40, secs(30));
        assert_eq!(host.metric("upcheck.pool_guard"), Some(1), "{profile:?}");
        let after = run(&mut host, 40, secs(30));
        assert!(
            during.failures().is_empty() && after.failures().is_empty(),
            "{profile:?}: {during}\n{after}"
        );
        assert_eq!(host.metric("upcheck.pool_guard"), Some(0), "{profile:?}");
    }
}

#[test]
fn in_both_hosts_a_booted_backend_whose_pages_fail_is_ejected_within_ten_failures() {
    for profile in PROFILES {
        let mut host = host(profile);
        host.upstream("app1");
        host.upstream("app2")
            .path("/up", Behaviour::status(200))
            .others(Behaviour::status(200))
            .from(secs(20), Behaviour::status(500));
        ok(host.start(&config(&host, profile, &["app1", "app2"], "")));
        let traffic = run(&mut host, 40, secs(80));
        let failed = traffic.failures().len();
        assert!(failed > 0, "{profile:?}: the fault was not exercised");
        assert!(failed <= 10, "{profile:?}: {failed} failed: {traffic}");
        assert!(
            host.metric("upcheck.app2.outlier_failing") >= Some(1),
            "{profile:?}"
        );
    }
}

#[test]
fn in_both_hosts_a_hang_is_a_timed_out_probe_and_fails_only_requests_sent_before_it() {
    for profile in PROFILES {
        let mut host = host(profile);
        host.upstream("app1");
        host.upstream("app2").all_from(secs(20), Behaviour::Hang);
        ok(host.start(&config(&host, profile, &["app1", "app2"], "")));
        let traffic = run(&mut host, 40, secs(60));
        let failures = traffic.failures();
        assert!(
            !failures.is_empty(),
            "{profile:?}: the hang was not exercised"
        );
        assert!(
            failures
                .iter()
                .all(|r| r.upstream.as_deref() == Some("app2") && r.sent < secs(36)),
            "{profile:?}: {traffic}"
        );
        assert!(failures.len() <= 25, "{profile:?}: {traffic}");
        assert!(
            logged(
                &host,
                "upcheck: app2 unhealthy: 1 probe timed out after 5.0s"
            ),
            "{profile:?}"
        );
    }
}

/// A cold start with app2 `broken` from the first instant, as NGINX starts: every VM compiles
/// the module for a second while users arrive at 10 a second, and the requests of that second
/// reach the workers all at once when they are up.
fn cold_start(profile: Profile, broken: Behaviour) -> (Host, Traffic) {
    let options = HostOptions {
        compile: secs(1),
        ..options(profile)
    };
    let mut host = Host::from_file(UPCHECK_WASM, options).expect("loads");
    host.upstream("app1");
    host.upstream("app2")
        .others(broken.clone())
        .path("/up", broken);
    ok(host.start(&config(&host, profile, &["app1", "app2"], "")));
    let traffic = run(&mut host, 10, secs(20));
    (host, traffic)
}

#[test]
fn in_both_hosts_users_arriving_while_workers_compile_wait_for_a_probe_and_none_reaches_a_broken_backend(
) {
    for profile in PROFILES {
        for broken in [Behaviour::status(502), Behaviour::Refuse, Behaviour::Hang] {
            let (host, traffic) = cold_start(profile, broken.clone());
            let case = format!("{profile:?}, app2 {broken:?}");
            assert!(traffic.failures().is_empty(), "{case}: {traffic}");
            assert_eq!(host.requests_routed("app2"), 0, "{case}: app2 saw users");
            let waited = traffic
                .requests
                .iter()
                .filter(|r| r.sent < secs(1))
                .all(|r| r.routed.is_some_and(|routed| routed >= secs(1)));
            assert!(
                waited,
                "{case}: the window's requests reached a worker early"
            );
            // Envoy's tick resumes a held request; in NGINX each held request waits on a probe
            // of its own, and only the requests of the window are held.
            let window = traffic
                .requests
                .iter()
                .filter(|r| r.sent <= secs(1))
                .count();
            // A request whose probe found its backend refusing probes another that is still
            // unheard: count requests, not probes.
            let probes: Vec<(usize, u32)> = host
                .calls()
                .iter()
                .filter(|c| c.from_request)
                .map(|c| (c.vm, c.context))
                .collect();
            let held = probes
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len();
            let longest = traffic
                .requests
                .iter()
                .filter_map(|r| Some(r.routed?.saturating_sub(r.sent)))
                .max();
            println!(
                "{case}: {held} of {window} held on {} probes, longest wait {longest:?}",
                probes.len()
            );
            match profile {
                Profile::Envoy => assert_eq!(held, 0, "{case}"),
                Profile::Nginx => assert!((1..=window).contains(&held), "{case}: {held} held"),
            }
        }
    }
}

#[test]
fn in_nginx_a_client_that_leaves_while_held_on_its_probe_costs_no_one_after_it() {
    let options = HostOptions {
        compile: secs(1),
        ..options(Profile::Nginx)
    };
    let mut host = Host::from_file(UPCHECK_WASM, options).expect("loads");
    host.upstream("app1");
    host.upstream("app2")
        .others(Behaviour::Hang)
        .path("/up", Behaviour::Hang);
    ok(host.start(&config(&host, Profile::Nginx, &["app1", "app2"], "")));
    let request = RequestSpec {
        give_up_after: Some(secs(2)),
        ..RequestSpec::default()
    };
    let traffic = ok(host.load(Load {
        rate: 10,
        duration: secs(20),
        request,
    }));
    println!("{traffic}");
    let (left, stayed): (Vec<_>, Vec<_>) = traffic
        .requests
        .iter()
        .partition(|r| r.outcome == Outcome::Disconnected);
    assert!(!left.is_empty(), "nobody left while held: {traffic}");
    assert!(
        left.iter()
            .all(|r| r.sent <= secs(1) && r.upstream.is_none()),
        "only requests held at cold start left, unrouted: {traffic}"
    );
    assert!(
        stayed.iter().all(|r| r.outcome == Outcome::Status(200)),
        "{traffic}"
    );
    assert_eq!(host.requests_routed("app2"), 0);
}

/// A request to the status page's server at `127.0.0.1:9902` for `path`.
fn page_request(path: &str) -> RequestSpec {
    RequestSpec {
        path: path.to_string(),
        source_address: "127.0.0.1:40000".to_string(),
        destination_address: "127.0.0.1:9902".to_string(),
        ..RequestSpec::default()
    }
}

#[test]
fn in_nginx_the_status_page_is_served_only_when_the_configuration_opens_it_to_its_server() {
    // ngx_wasm_module does not tell the filter the address a connection was made to, so the
    // page filter cannot see that its server is on loopback: `upcheck nginx` sets
    // `status_public` and binds the server to loopback instead.
    for (public, status) in [("", 403), (r#","status_public":true"#, 200)] {
        let mut host = host(Profile::Nginx);
        host.upstream("app1");
        host.upstream("app2").path("/up", Behaviour::status(502));
        let traffic = config(&host, Profile::Nginx, &["app1", "app2"], "");
        let page = config(
            &host,
            Profile::Nginx,
            &["app1", "app2"],
            &format!(r#","role":"status_page"{public}"#),
        );
        ok(host.listen("127.0.0.1:9902", &page));
        ok(host.start(&traffic));
        ok(host.advance(secs(2)));
        let answer = ok(host.request(page_request("/upcheck/status")));
        assert_eq!(answer.status(), Some(status), "{public:?}: {answer:?}");
        if status == 200 {
            let text = String::from_utf8_lossy(&answer.body);
            assert!(
                text.contains("app2") && text.contains("unhealthy"),
                "{text}"
            );
        }
    }
}
