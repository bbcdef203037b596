//! The host itself, proven with hand-written guests: memory safety, linking, shared data, http
//! calls, the virtual clock, traps, configuration and the request path.

use crate::common;

use common::{guest, wat_map};
use std::time::Duration;
use upcheck_host_tests::envoy::{DC, NC, UF, UT};
use upcheck_host_tests::{
    Behaviour, Host, HostError, HostOptions, OnTrap, Outcome, Profile, RequestSpec, Val, VmStatus,
};

const INVALID_MEMORY_ACCESS: i32 = 6;
const NOT_FOUND: i32 = 1;
const BAD_ARGUMENT: i32 = 2;
const CAS_MISMATCH: i32 = 8;

fn options(workers: usize) -> HostOptions {
    HostOptions {
        workers,
        ..HostOptions::default()
    }
}

fn call_i32(host: &mut Host, vm: usize, export: &str, args: &[i32]) -> i32 {
    let args: Vec<Val> = args.iter().copied().map(Val::I32).collect();
    let results = host
        .call(vm, export, &args)
        .expect("guest call")
        .expect("export exists");
    results[0].unwrap_i32()
}

fn messages(host: &Host) -> Vec<(Duration, usize, String)> {
    host.logs()
        .into_iter()
        .map(|line| (line.at, line.vm, line.message))
        .collect()
}

#[test]
fn a_guest_passing_an_out_of_bounds_pointer_gets_invalid_memory_access_and_the_host_survives() {
    let wasm = guest(
        r#"
  (data (i32.const 100) "still here")
  (func (export "log_beyond_memory") (result i32)
    (call $log (i32.const 2) (i32.const 65530) (i32.const 100)))
  (func (export "log_negative_length") (result i32)
    (call $log (i32.const 2) (i32.const 100) (i32.const -1)))
  (func (export "time_straddling_the_end") (result i32)
    (call $now (i32.const 65532)))
  (func (export "shared_data_into_nowhere") (result i32)
    (drop (call $set_shared (i32.const 100) (i32.const 5) (i32.const 100) (i32.const 10) (i32.const 0)))
    (call $get_shared (i32.const 100) (i32.const 5) (i32.const -8) (i32.const 8004) (i32.const 8008)))
  (func (export "log_fine") (result i32)
    (call $log (i32.const 2) (i32.const 100) (i32.const 10)))"#,
    );
    let mut host = Host::new(wasm, options(0)).unwrap();
    for export in [
        "log_beyond_memory",
        "log_negative_length",
        "time_straddling_the_end",
        "shared_data_into_nowhere",
    ] {
        assert_eq!(
            call_i32(&mut host, 0, export, &[]),
            INVALID_MEMORY_ACCESS,
            "{export}"
        );
    }
    assert_eq!(call_i32(&mut host, 0, "log_fine", &[]), 0);
    assert_eq!(
        messages(&host),
        [(Duration::ZERO, 0, "still here".to_string())]
    );
    assert_eq!(host.vm_status(0), VmStatus::Running);
}

#[test]
fn an_import_the_host_does_not_provide_fails_at_link_time() {
    let wasm = r#"(module
  (import "env" "proxy_frobnicate" (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "proxy_abi_version_0_2_1")))"#;
    match Host::new(wasm, options(1)) {
        Err(HostError::Load(message)) => assert!(message.contains("proxy_frobnicate"), "{message}"),
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("an unknown import linked"),
    }
}

#[test]
fn a_module_without_the_abi_0_2_1_marker_is_refused() {
    let wasm = r#"(module (memory (export "memory") 1))"#;
    assert!(matches!(Host::new(wasm, options(0)), Err(HostError::Load(m)) if m.contains("0_2_1")));
}

#[test]
fn shared_data_cas_starts_at_one_grows_on_every_set_and_rejects_stale_writers_across_vms() {
    let wasm = guest(
        r#"
  (data (i32.const 100) "k")
  (data (i32.const 110) "v")
  (func (export "set") (param $cas i32) (result i32)
    (call $set_shared (i32.const 100) (i32.const 1) (i32.const 110) (i32.const 1) (local.get $cas)))
  (func (export "get") (result i32)
    (call $get_shared (i32.const 100) (i32.const 1) (i32.const 8000) (i32.const 8004) (i32.const 8008)))"#,
    );
    let mut host = Host::new(wasm, options(1)).unwrap();
    let cas = |host: &mut Host, vm| {
        assert_eq!(call_i32(host, vm, "get", &[]), 0);
        call_i32(host, vm, "load", &[8008])
    };
    assert_eq!(call_i32(&mut host, 1, "get", &[]), NOT_FOUND);
    assert_eq!(call_i32(&mut host, 0, "set", &[0]), 0);
    assert_eq!(cas(&mut host, 1), 1);
    assert_eq!(call_i32(&mut host, 0, "set", &[1]), 0);
    assert_eq!(call_i32(&mut host, 1, "set", &[1]), CAS_MISMATCH);
    assert_eq!(cas(&mut host, 1), 2);
    assert_eq!(call_i32(&mut host, 1, "set", &[0]), 0, "cas 0 always wins");
    assert_eq!(host.shared_data("k"), Some((b"v".to_vec(), 3)));
}

/// A guest that dispatches http calls on demand and logs each answer's `:status` and body.
fn caller_guest() -> String {
    guest(&format!(
        r#"
  (data (i32.const 100) "{good}")
  (data (i32.const 400) "{no_authority}")
  (data (i32.const 1000) ":status")
  (data (i32.const 1100) "app1app2app3nope")
  (func (export "dispatch") (param $cluster i32) (param $headers i32) (param $headers_len i32) (result i32)
    (call $http_call (i32.add (i32.const 1100) (i32.mul (local.get $cluster) (i32.const 4))) (i32.const 4)
      (local.get $headers) (local.get $headers_len) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 5000) (i32.const 8100)))
  (func (export "proxy_on_http_call_response") (param $ctx i32) (param $token i32) (param $headers i32) (param $body i32) (param $trailers i32)
    (drop (call $get_header (i32.const 6) (i32.const 1000) (i32.const 7) (i32.const 8000) (i32.const 8004)))
    (drop (call $log (i32.const 2) (i32.load (i32.const 8000)) (i32.load (i32.const 8004))))
    (drop (call $get_buffer (i32.const 4) (i32.const 0) (local.get $body) (i32.const 8008) (i32.const 8012)))
    (drop (call $log (i32.const 2) (i32.load (i32.const 8008)) (i32.load (i32.const 8012)))))"#,
        good = wat_map(&[(":method", "GET"), (":path", "/up"), (":authority", "app")]),
        no_authority = wat_map(&[(":method", "GET"), (":path", "/up")]),
    ))
}

const GOOD_HEADERS: (i32, i32) = (100, 4 + 3 * 8 + 8 + 4 + 6 + 4 + 11 + 4);
const NO_AUTHORITY: (i32, i32) = (400, 4 + 2 * 8 + 8 + 4 + 6 + 4);

#[test]
fn an_http_call_to_an_unknown_cluster_or_without_authority_is_a_bad_argument_at_once() {
    let mut host = Host::new(caller_guest(), options(0)).unwrap();
    host.upstream("app1");
    let (good, good_len) = GOOD_HEADERS;
    let (bare, bare_len) = NO_AUTHORITY;
    assert_eq!(
        call_i32(&mut host, 0, "dispatch", &[3, good, good_len]),
        BAD_ARGUMENT
    );
    assert_eq!(
        call_i32(&mut host, 0, "dispatch", &[0, bare, bare_len]),
        BAD_ARGUMENT
    );
    host.advance(Duration::from_secs(10)).unwrap();
    assert!(
        host.logs().is_empty(),
        "no response may follow a refused call"
    );
    assert_eq!(host.probes_sent("app1"), 0);
}

#[test]
fn http_call_answers_arrive_on_the_virtual_clock_as_the_backend_or_envoy_would_give_them() {
    let mut host = Host::new(caller_guest(), options(1)).unwrap();
    host.upstream("app1").path(
        "/up",
        Behaviour::status(200)
            .after(Duration::from_millis(40))
            .body("OK"),
    );
    host.upstream("app2").others(Behaviour::Refuse);
    host.upstream("app3").path("/up", Behaviour::Hang);
    let (good, good_len) = GOOD_HEADERS;
    assert_eq!(call_i32(&mut host, 1, "dispatch", &[0, good, good_len]), 0);
    assert_eq!(call_i32(&mut host, 1, "load", &[8100]), 1, "first token");
    assert_eq!(call_i32(&mut host, 0, "dispatch", &[1, good, good_len]), 0);
    assert_eq!(call_i32(&mut host, 0, "dispatch", &[2, good, good_len]), 0);
    assert_eq!(
        call_i32(&mut host, 0, "load", &[8100]),
        3,
        "tokens are process-wide"
    );

    host.advance(Duration::from_millis(39)).unwrap();
    let refused = "upstream connect error or disconnect/reset before headers. reset reason: \
                   connection failure, transport failure reason: delayed connect error: 111";
    assert_eq!(
        messages(&host),
        [
            (Duration::ZERO, 0, "503".to_string()),
            (Duration::ZERO, 0, refused.to_string())
        ]
    );
    host.advance(Duration::from_millis(1)).unwrap();
    host.advance(Duration::from_millis(4959)).unwrap();
    host.advance(Duration::from_millis(1)).unwrap();
    let at = |ms| Duration::from_millis(ms);
    assert_eq!(
        messages(&host)[2..],
        [
            (at(40), 1, "200".to_string()),
            (at(40), 1, "OK".to_string()),
            (at(5000), 0, "504".to_string()),
            (at(5000), 0, "upstream request timeout".to_string()),
        ]
    );
    assert_eq!(host.counts("app3").probes.get("/up"), Some(&1));
}

#[test]
fn every_vm_ticks_at_its_period_in_time_order_and_sees_virtual_time() {
    let wasm = guest(
        r#"
  (data (i32.const 100) "tick")
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $tick_period (i32.const 1000)))
    (i32.const 1))
  (func (export "proxy_on_tick") (param i32)
    (drop (call $now (i32.const 8000)))
    (drop (call $log (i32.const 2) (i32.const 100) (i32.const 4))))
  (func (export "last_tick_time") (result i64) (i64.load (i32.const 8000)))"#,
    );
    let mut host = Host::new(wasm, options(2)).unwrap();
    host.start("{}").unwrap();
    host.advance(Duration::from_millis(999)).unwrap();
    assert!(
        host.logs().is_empty(),
        "the first tick comes one period after start"
    );
    host.advance(Duration::from_millis(2501)).unwrap();
    let ticks: Vec<(u64, usize)> = host
        .logs()
        .iter()
        .map(|line| (line.at.as_secs(), line.vm))
        .collect();
    assert_eq!(
        ticks,
        [
            (1, 0),
            (1, 1),
            (1, 2),
            (2, 0),
            (2, 1),
            (2, 2),
            (3, 0),
            (3, 1),
            (3, 2)
        ]
    );
    let now = host.call(2, "last_tick_time", &[]).unwrap().unwrap()[0].unwrap_i64();
    assert_eq!(
        now as u64,
        upcheck_host_tests::clock::EPOCH_NANOS + 3_000_000_000
    );
    assert_eq!(host.now(), Duration::from_millis(3500));
}

#[test]
fn a_stopped_vm_no_longer_ticks_while_the_others_do() {
    let wasm = guest(
        r#"
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $tick_period (i32.const 1000)))
    (i32.const 1))
  (func (export "proxy_on_tick") (param i32))"#,
    );
    let mut host = Host::new(wasm, options(2)).unwrap();
    host.start("{}").unwrap();
    host.stop_vm(0);
    host.advance(Duration::from_secs(5)).unwrap();
    let ticks = |vm| host.vm_fuel(vm).get("proxy_on_tick").map_or(0, |f| f.calls);
    assert_eq!((ticks(0), ticks(1), ticks(2)), (0, 5, 5));
}

const PANICKING_TICK: &str = r#"
  (data (i32.const 100) "panicked at src/lib.rs:1:1: boom")
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $tick_period (i32.const 1000)))
    (i32.const 1))
  (func (export "proxy_on_tick") (param i32)
    (drop (call $log (i32.const 5) (i32.const 100) (i32.const 32)))
    unreachable)"#;

#[test]
fn a_guest_trap_fails_the_call_with_the_vm_the_callback_and_the_panic_message() {
    let mut host = Host::new(guest(PANICKING_TICK), options(1)).unwrap();
    host.start("{}").unwrap();
    let error = host.advance(Duration::from_secs(2)).unwrap_err();
    let text = error.to_string();
    match error {
        HostError::Trap { vm, callback, .. } => {
            assert_eq!((vm, callback.as_str()), (0, "proxy_on_tick"))
        }
        other => panic!("wrong error: {other}"),
    }
    assert!(
        text.contains("unreachable") && text.contains("boom"),
        "{text}"
    );
    assert!(matches!(host.vm_status(0), VmStatus::Crashed(_)));
    assert_eq!(host.vm_status(1), VmStatus::Running);
}

#[test]
fn with_crash_semantics_a_trapped_vm_stops_ticking_and_its_worker_fails_requests() {
    let mut host = Host::new(
        guest(PANICKING_TICK),
        HostOptions {
            workers: 1,
            on_trap: OnTrap::Crash,
            ..HostOptions::default()
        },
    )
    .unwrap();
    host.start("{}").unwrap();
    host.advance(Duration::from_secs(3)).unwrap();
    assert_eq!(host.fuel().get("proxy_on_tick").map(|f| f.calls), Some(2));
    let record = host.request(RequestSpec::default()).unwrap();
    assert_eq!(record.outcome, Outcome::Status(503));
    assert_eq!(record.details, "wasm_fail_stream");
}

#[test]
fn a_false_on_configure_is_rejected_with_the_reason_the_guest_logged() {
    let wasm = guest(
        r#"
  (data (i32.const 100) "upstreams[0].name: missing")
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $log (i32.const 4) (i32.const 100) (i32.const 26)))
    (i32.const 0))"#,
    );
    let mut host = Host::new(wasm, options(1)).unwrap();
    match host.start("{}") {
        Err(HostError::Rejected { vm, callback, log }) => {
            assert_eq!((vm, callback), (0, "proxy_on_configure"));
            assert_eq!(log.len(), 1);
            assert_eq!(log[0].message, "upstreams[0].name: missing");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Routes each request to the cluster named by the client's `x-want` header (none: empty), and
/// stores `response.flags` in shared data `flags` from `on_log`.
fn router_guest() -> String {
    guest(
        r#"
  (data (i32.const 100) "x-want")
  (data (i32.const 200) "x-upcheck-upstream")
  (data (i32.const 300) "response\00flags")
  (data (i32.const 400) "flags")
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (i32.store (i32.const 8000) (i32.const 0))
    (i32.store (i32.const 8004) (i32.const 0))
    (drop (call $get_header (i32.const 0) (i32.const 100) (i32.const 6) (i32.const 8000) (i32.const 8004)))
    (drop (call $replace_header (i32.const 0) (i32.const 200) (i32.const 18)
      (i32.load (i32.const 8000)) (i32.load (i32.const 8004))))
    (i32.const 0))
  (func (export "proxy_on_log") (param i32)
    (drop (call $get_property (i32.const 300) (i32.const 14) (i32.const 8010) (i32.const 8014)))
    (drop (call $set_shared (i32.const 400) (i32.const 5)
      (i32.load (i32.const 8010)) (i32.load (i32.const 8014)) (i32.const 0))))"#,
    )
}

fn wanting(cluster: &str) -> RequestSpec {
    RequestSpec {
        headers: vec![("x-want".to_string(), cluster.to_string())],
        ..RequestSpec::default()
    }
}

fn logged_flags(host: &Host) -> u64 {
    let (bytes, _) = host.shared_data("flags").expect("on_log ran");
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

#[test]
fn a_request_goes_where_the_routing_header_says_and_fails_as_envoy_fails_it() {
    let mut host = Host::new(router_guest(), options(2)).unwrap();
    host.upstream("app1")
        .others(Behaviour::status(200).after(Duration::from_millis(30)));
    host.upstream("app2").others(Behaviour::Refuse);
    host.upstream("app3").others(Behaviour::Hang);
    host.start("{}").unwrap();

    let ok = host.request(wanting("app1")).unwrap();
    assert_eq!(
        (ok.outcome.clone(), ok.upstream.as_deref()),
        (Outcome::Status(200), Some("app1"))
    );
    assert_eq!(ok.completed, Some(ok.sent + Duration::from_millis(30)));
    assert_eq!(logged_flags(&host), 0);

    let refused = host.request(wanting("app2")).unwrap();
    assert_eq!(
        (refused.outcome.clone(), refused.flags),
        (Outcome::Status(503), UF)
    );
    assert!(
        refused.details.contains("connection_failure"),
        "{}",
        refused.details
    );
    assert_eq!(logged_flags(&host), UF);

    let hung = host.request(wanting("app3")).unwrap();
    assert_eq!(
        (hung.outcome.clone(), hung.flags),
        (Outcome::Status(504), UT)
    );
    assert_eq!(hung.completed, Some(hung.sent + Duration::from_secs(15)));
    assert_eq!(hung.details, "upstream_response_timeout");

    let nowhere = host.request(RequestSpec::default()).unwrap();
    assert_eq!(
        (nowhere.outcome.clone(), nowhere.flags),
        (Outcome::Status(503), NC)
    );
    assert_eq!(nowhere.upstream, None);

    assert_eq!(host.requests_routed("app3"), 1);
    assert!(ok.fuel > 0);
    assert_eq!(
        host.request(wanting("app1")).unwrap().fuel,
        ok.fuel,
        "fuel is deterministic"
    );
}

#[test]
fn a_client_that_gives_up_gets_no_response_but_the_request_is_still_logged() {
    let mut host = Host::new(router_guest(), options(1)).unwrap();
    host.upstream("app3").others(Behaviour::Hang);
    host.start("{}").unwrap();
    let record = host
        .request(RequestSpec {
            give_up_after: Some(Duration::from_secs(2)),
            ..wanting("app3")
        })
        .unwrap();
    assert_eq!(record.outcome, Outcome::Disconnected);
    assert_eq!(record.completed, Some(record.sent + Duration::from_secs(2)));
    assert_eq!(logged_flags(&host), DC);
}

#[test]
fn traffic_is_sent_at_the_given_rate_round_robin_over_the_workers() {
    let mut host = Host::new(router_guest(), options(2)).unwrap();
    host.upstream("app1").others(Behaviour::status(200));
    host.upstream("app2").others(Behaviour::status(502));
    host.start("{}").unwrap();
    let traffic = host
        .load(upcheck_host_tests::Load {
            rate: 40,
            duration: Duration::from_secs(1),
            request: wanting("app2"),
        })
        .unwrap();
    assert_eq!(traffic.len(), 40);
    assert_eq!(traffic.requests[1].sent, Duration::from_millis(25));
    let workers: Vec<usize> = traffic.requests.iter().take(4).map(|r| r.worker).collect();
    assert_eq!(workers, [1, 2, 1, 2]);
    assert_eq!(
        traffic.failures_by_upstream().get("app2"),
        Some(&40),
        "{traffic}"
    );
    assert_eq!(
        traffic.last_failure_sent(),
        Some(Duration::from_millis(975))
    );
}

#[test]
fn a_paused_request_waits_until_the_filter_continues_it_from_an_http_call_answer() {
    let wasm = guest(&format!(
        r#"
  (data (i32.const 100) "{probe}")
  (data (i32.const 300) "app1x-upcheck-upstream")
  (func (export "proxy_on_request_headers") (param $ctx i32) (param i32 i32) (result i32)
    (i32.store (i32.const 9000) (local.get $ctx))
    (drop (call $http_call (i32.const 300) (i32.const 4) (i32.const 100) (i32.const {probe_len})
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 5000) (i32.const 8100)))
    (i32.const 1))
  (func (export "proxy_on_http_call_response") (param i32 i32 i32 i32 i32)
    (drop (call $set_effective_context (i32.load (i32.const 9000))))
    (drop (call $replace_header (i32.const 0) (i32.const 304) (i32.const 18) (i32.const 300) (i32.const 4)))
    (drop (call $continue_stream (i32.const 0))))"#,
        probe = wat_map(&[(":method", "GET"), (":path", "/up"), (":authority", "app")]),
        probe_len = GOOD_HEADERS.1,
    ));
    let mut host = Host::new(wasm, options(1)).unwrap();
    host.upstream("app1").path(
        "/up",
        Behaviour::status(200).after(Duration::from_millis(100)),
    );
    host.start("{}").unwrap();
    let record = host.request(RequestSpec::default()).unwrap();
    assert_eq!(record.outcome, Outcome::Status(200));
    assert_eq!(record.upstream.as_deref(), Some("app1"));
    assert_eq!(record.completed, Some(Duration::from_millis(101)));
    assert_eq!(host.counts("app1").requests.get("/"), Some(&1));
}

#[test]
fn a_local_response_reaches_the_user_and_passes_the_filters_response_callbacks() {
    let wasm = guest(
        r#"
  (data (i32.const 100) "teapot")
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $send_local_response (i32.const 418) (i32.const 0) (i32.const 0)
      (i32.const 100) (i32.const 6) (i32.const 200) (i32.const 4) (i32.const -1)))
    (i32.const 1))
  (data (i32.const 200) "\00\00\00\00")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))"#,
    );
    let mut host = Host::new(wasm, options(1)).unwrap();
    host.start("{}").unwrap();
    let record = host.request(RequestSpec::default()).unwrap();
    assert_eq!(
        (record.outcome, record.completed),
        (Outcome::Status(418), Some(Duration::ZERO))
    );
    assert_eq!(
        host.fuel()
            .get("proxy_on_response_headers")
            .map(|f| f.calls),
        Some(1)
    );
}

/// Writes, from `on_request_headers`, the root context its request was created under into
/// shared data `root`; sets no routing header.
fn root_guest() -> String {
    guest(
        r#"
  (data (i32.const 400) "root")
  (func (export "proxy_on_context_create") (param $context i32) (param $parent i32)
    (if (i32.ne (local.get $parent) (i32.const 0))
      (then (i32.store (i32.const 9000) (local.get $parent)))))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $set_shared (i32.const 400) (i32.const 4) (i32.const 9000) (i32.const 4) (i32.const 0)))
    (i32.const 0))"#,
    )
}

fn root_of_last_request(host: &Host) -> u32 {
    let (bytes, _) = host.shared_data("root").expect("on_request_headers ran");
    u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

#[test]
fn a_request_to_a_listeners_address_goes_to_its_plugin_and_its_route_answers_404() {
    let mut host = Host::new(root_guest(), options(2)).unwrap();
    host.listen("127.0.0.1:9902", "{}").unwrap();
    host.start("{}").unwrap();

    let users = host.request(RequestSpec::default()).unwrap();
    assert_eq!(root_of_last_request(&host), 1);
    assert_eq!((users.outcome, users.flags), (Outcome::Status(503), NC));

    let page = host
        .request(RequestSpec {
            destination_address: "127.0.0.1:9902".to_string(),
            ..RequestSpec::default()
        })
        .unwrap();
    assert_eq!(
        root_of_last_request(&host),
        2,
        "the listener's root context"
    );
    assert_eq!(page.outcome, Outcome::Status(404));
    assert_eq!(page.details, "direct_response");

    let late = host.listen("127.0.0.1:9903", "{}").unwrap_err();
    assert!(
        late.to_string().contains("added after the host started"),
        "{late}"
    );
}

#[test]
fn a_tick_period_set_by_a_listeners_plugin_traps_rather_than_taking_the_users_plugins_timer() {
    let wasm = guest(
        r#"
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $tick_period (i32.const 100)))
    (i32.const 1))"#,
    );
    let mut host = Host::new(wasm, options(0)).unwrap();
    host.listen("127.0.0.1:9902", "{}").unwrap();
    let error = host.start("{}").unwrap_err().to_string();
    assert!(
        error.contains("vm0 trapped in proxy_on_configure")
            && error.contains("a tick period set by root context 2"),
        "{error}"
    );
}

/// One VM of `profile`'s host.
fn profile(profile: Profile) -> HostOptions {
    HostOptions {
        profile,
        ..options(0)
    }
}

#[test]
fn a_module_importing_the_sdks_log_level_loads_in_envoy_and_is_refused_by_nginx() {
    let wasm = r#"(module
  (import "env" "proxy_get_log_level" (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "proxy_abi_version_0_2_1")))"#;
    assert!(Host::new(wasm, profile(Profile::Envoy)).is_ok());
    match Host::new(wasm, profile(Profile::Nginx)) {
        Err(HostError::Load(why)) => assert!(
            why.contains("incompatible import type") && why.contains("proxy_get_log_level"),
            "{why}"
        ),
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("loaded in the NGINX profile"),
    }
}

#[test]
fn a_second_tick_period_is_taken_by_envoy_and_traps_in_nginx() {
    let wasm = guest(
        r#"
  (func (export "two_periods") (result i32)
    (drop (call $tick_period (i32.const 20)))
    (call $tick_period (i32.const 200)))
  (func (export "stop_then_start") (result i32)
    (drop (call $tick_period (i32.const 20)))
    (drop (call $tick_period (i32.const 0)))
    (call $tick_period (i32.const 200)))"#,
    );
    let mut envoy = Host::new(&wasm, profile(Profile::Envoy)).unwrap();
    let answered = envoy
        .call(0, "two_periods", &[])
        .unwrap()
        .expect("export exists");
    assert_eq!(answered[0].unwrap_i32(), 0);
    let mut nginx = Host::new(&wasm, profile(Profile::Nginx)).unwrap();
    match nginx.call(0, "two_periods", &[]) {
        Err(HostError::Trap { message, .. }) => {
            assert!(message.contains("tick_period already set"), "{message}")
        }
        other => panic!("no trap: {other:?}"),
    }
    let mut nginx = Host::new(&wasm, profile(Profile::Nginx)).unwrap();
    let answered: Vec<Val> = nginx
        .call(0, "stop_then_start", &[])
        .unwrap()
        .expect("export exists");
    assert_eq!(
        answered[0].unwrap_i32(),
        0,
        "a period cleared may be set again"
    );
}

/// A guest that opens gRPC streams on demand (to `etcdserverpb.Watch/<method>`, with one of two
/// metadata maps) and keeps what each callback gave it: counts at 9000 (initial metadata,
/// messages, trailing metadata, closes), the last close status at 9016, the last metadata
/// sizes at 9020 and 9024, every message in shared data as `m0`, `m1`...; it logs the
/// `content-type` of the initial metadata, the `grpc-status` of the trailers and the close's
/// message (`proxy_get_status`), whose code it leaves at 8020.
fn streamer_guest() -> String {
    guest(&format!(
        r#"
  (data (i32.const 100) "etcdscriptednowhere")
  (data (i32.const 200) "etcdserverpb.Watch")
  (data (i32.const 240) "WatchNope")
  (data (i32.const 300) "{token}")
  (data (i32.const 400) "{plain}")
  (data (i32.const 600) "{watch}")
  (data (i32.const 1000) "content-type")
  (data (i32.const 1020) "grpc-status")
  (data (i32.const 1040) "m0")
  (func (export "open") (param $cluster i32) (param $cluster_len i32) (param $method i32) (param $method_len i32)
      (param $metadata i32) (param $metadata_len i32) (result i32)
    (call $grpc_stream (local.get $cluster) (local.get $cluster_len) (i32.const 200) (i32.const 18)
      (local.get $method) (local.get $method_len) (local.get $metadata) (local.get $metadata_len) (i32.const 8100)))
  (func (export "send") (param $token i32) (param $end i32) (result i32)
    (call $grpc_send (local.get $token) (i32.const 600) (i32.const {watch_len}) (local.get $end)))
  (func (export "cancel") (param $token i32) (result i32) (call $grpc_cancel (local.get $token)))
  (func (export "close") (param $token i32) (result i32) (call $grpc_close (local.get $token)))
  (func $count (param $at i32)
    (i32.store (local.get $at) (i32.add (i32.load (local.get $at)) (i32.const 1))))
  (func $log_header (param $map i32) (param $name i32) (param $name_len i32)
    (if (i32.eqz (call $get_header (local.get $map) (local.get $name) (local.get $name_len) (i32.const 8000) (i32.const 8004)))
      (then (drop (call $log (i32.const 2) (i32.load (i32.const 8000)) (i32.load (i32.const 8004)))))))
  (func (export "proxy_on_grpc_receive_initial_metadata") (param $ctx i32) (param $token i32) (param $headers i32)
    (call $count (i32.const 9000))
    (i32.store (i32.const 9020) (local.get $headers))
    (call $log_header (i32.const 4) (i32.const 1000) (i32.const 12)))
  (func (export "proxy_on_grpc_receive") (param $ctx i32) (param $token i32) (param $size i32)
    (drop (call $get_buffer (i32.const 5) (i32.const 0) (local.get $size) (i32.const 8008) (i32.const 8012)))
    (i32.store8 (i32.const 1041) (i32.add (i32.const 48) (i32.load (i32.const 9004))))
    (drop (call $set_shared (i32.const 1040) (i32.const 2) (i32.load (i32.const 8008)) (i32.load (i32.const 8012)) (i32.const 0)))
    (call $count (i32.const 9004)))
  (func (export "proxy_on_grpc_receive_trailing_metadata") (param $ctx i32) (param $token i32) (param $trailers i32)
    (call $count (i32.const 9008))
    (i32.store (i32.const 9024) (local.get $trailers))
    (call $log_header (i32.const 5) (i32.const 1020) (i32.const 11)))
  (func (export "proxy_on_grpc_close") (param $ctx i32) (param $token i32) (param $status i32)
    (call $count (i32.const 9012))
    (i32.store (i32.const 9016) (local.get $status))
    (drop (call $get_status (i32.const 8020) (i32.const 8024) (i32.const 8028)))
    (drop (call $log (i32.const 2) (i32.load (i32.const 8024)) (i32.load (i32.const 8028)))))"#,
        token = wat_map(&[("token", "forged")]),
        plain = wat_map(&[("x-upcheck", "host-test")]),
        watch = common::wat_bytes(&WATCH_REQUEST),
        watch_len = WATCH_REQUEST.len(),
    ))
}

/// `open`'s arguments: cluster `etcd`, `scripted` or `nowhere`; method `Watch` or `Nope`;
/// metadata with etcd's auth `token` (a forged one) or without.
const ETCD: [i32; 2] = [100, 4];
const SCRIPTED: [i32; 2] = [104, 8];
const NOWHERE: [i32; 2] = [112, 7];
const WATCH: [i32; 2] = [240, 5];
const NOPE: [i32; 2] = [245, 4];
const TOKEN: [i32; 2] = [300, 4 + 8 + 6 + 7];
const PLAIN: [i32; 2] = [400, 4 + 8 + 10 + 10];

/// `open`'s six arguments.
fn open_args(cluster: [i32; 2], method: [i32; 2], metadata: [i32; 2]) -> [i32; 6] {
    [
        cluster[0],
        cluster[1],
        method[0],
        method[1],
        metadata[0],
        metadata[1],
    ]
}

/// etcd's `WatchRequest { create_request { key: "watched/", range_end: "watched0" } }`: every
/// key under `watched/`, hand-encoded (field 1, length-delimited, holding fields 1 and 2).
const WATCH_REQUEST: [u8; 22] = [
    0x0a, 20, 0x0a, 8, b'w', b'a', b't', b'c', b'h', b'e', b'd', b'/', 0x12, 8, b'w', b'a', b't',
    b'c', b'h', b'e', b'd', b'0',
];

const PARSE_FAILURE: i32 = 4;
const INTERNAL_FAILURE: i32 = 10;

/// The guest's counters: initial metadata, messages, trailing metadata and closes it was given.
fn heard(host: &mut Host, vm: usize) -> [i32; 4] {
    [9000, 9004, 9008, 9012].map(|at| call_i32(host, vm, "load", &[at]))
}

/// Advances `host` in step with real time (the server's) until `done`, for at most 10 s.
fn paced_until(host: &mut Host, mut done: impl FnMut(&mut Host) -> bool) {
    let started = std::time::Instant::now();
    while !done(host) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still waiting after 10 s: {:?}",
            host.real_streams()
        );
        std::thread::sleep(Duration::from_millis(10));
        host.advance(Duration::from_millis(10)).unwrap();
    }
}

/// The fields of a protobuf message, by number: varints as numbers, length-delimited fields
/// as their bytes (enough of the wire format to read etcd's answers).
fn proto(mut bytes: &[u8]) -> Vec<(u64, Result<u64, Vec<u8>>)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = bytes.split_first().expect("a whole varint");
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut fields = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes);
        let value = match key & 7 {
            0 => Ok(varint(&mut bytes)),
            2 => {
                let len = varint(&mut bytes) as usize;
                let (value, rest) = bytes.split_at(len);
                bytes = rest;
                Err(value.to_vec())
            }
            wire => panic!("wire type {wire} in {bytes:?}"),
        };
        fields.push((key >> 3, value));
    }
    fields
}

/// Field `number` of `message`, length-delimited.
fn nested(message: &[u8], number: u64) -> Vec<u8> {
    proto(message)
        .into_iter()
        .find_map(|(n, value)| value.err().filter(|_| n == number))
        .unwrap_or_else(|| panic!("no field {number} in {message:?}"))
}

/// A real etcd (`UPCHECK_ETCD`) on free loopback ports, and a runtime to write to it with.
fn etcd() -> (upcheck_e2e::etcd::Etcd, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let etcd = runtime
        .block_on(upcheck_e2e::etcd::Etcd::start(1))
        .expect("etcd starts (UPCHECK_ETCD)");
    (etcd, runtime)
}

/// Lets real time pass with the host in step, for things that must not arrive.
fn paced_for(host: &mut Host, span: Duration) {
    let started = std::time::Instant::now();
    while started.elapsed() < span {
        std::thread::sleep(Duration::from_millis(10));
        host.advance(Duration::from_millis(10)).unwrap();
    }
}

#[test]
fn a_watch_opened_as_a_grpc_stream_gets_etcds_created_answer_then_a_puts_event_and_nothing_once_cancelled(
) {
    let (etcd, runtime) = etcd();
    let mut host = Host::new(streamer_guest(), options(1)).unwrap();
    host.real_cluster("etcd", etcd.clients()[0]);
    // The metadata reaches etcd: a forged auth token gets its refusal.
    let forged = open_args(ETCD, WATCH, TOKEN);
    assert_eq!(call_i32(&mut host, 0, "open", &forged), 0);
    let forged = call_i32(&mut host, 0, "load", &[8100]);
    assert_eq!(call_i32(&mut host, 0, "send", &[forged, 0]), 0);
    paced_until(&mut host, |host| heard(host, 0)[1] == 1);
    let (refused, _) = host.shared_data("m0").expect("etcd's answer");
    let reason = String::from_utf8_lossy(&nested(&refused, 6)).into_owned();
    assert!(reason.contains("invalid auth token"), "{reason}");
    assert_eq!(call_i32(&mut host, 0, "cancel", &[forged]), 0);

    let opened = host.now();
    assert_eq!(
        call_i32(&mut host, 1, "open", &open_args(ETCD, WATCH, PLAIN)),
        0
    );
    let token = call_i32(&mut host, 1, "load", &[8100]);
    assert_ne!(token, forged);
    assert_eq!(call_i32(&mut host, 1, "send", &[token, 0]), 0);
    paced_until(&mut host, |host| heard(host, 1)[1] == 1);
    assert_eq!(heard(&mut host, 1), [1, 1, 0, 0]);
    let initial: Vec<(usize, String)> = messages(&host)
        .into_iter()
        .map(|(_, vm, message)| (vm, message))
        .collect();
    let content_type = "application/grpc".to_string();
    assert_eq!(initial, [(0, content_type.clone()), (1, content_type)]);
    let (created, _) = host.shared_data("m0").expect("vm1's first message");
    assert!(
        proto(&created).contains(&(3, Ok(1))),
        "WatchResponse.created: {created:?}"
    );

    runtime.block_on(etcd.put("watched/k", b"v1")).expect("put");
    paced_until(&mut host, |host| heard(host, 1)[1] == 2);
    let (event, _) = host.shared_data("m1").expect("the second message");
    let kv = proto(&nested(&nested(&event, 11), 2));
    assert!(kv.contains(&(1, Err(b"watched/k".to_vec()))), "{kv:?}");
    assert!(kv.contains(&(5, Err(b"v1".to_vec()))), "{kv:?}");

    assert_eq!(call_i32(&mut host, 1, "cancel", &[token]), 0);
    runtime.block_on(etcd.put("watched/k", b"v2")).expect("put");
    paced_for(&mut host, Duration::from_millis(500));
    assert_eq!(heard(&mut host, 1), [1, 2, 0, 0], "nothing after a cancel");
    assert_eq!(call_i32(&mut host, 1, "cancel", &[token]), NOT_FOUND);
    assert_eq!(call_i32(&mut host, 1, "send", &[token, 0]), NOT_FOUND);
    let streams = host.real_streams();
    assert_eq!(streams.len(), 2);
    let stream = &streams[1];
    assert_eq!(
        (stream.token, stream.vm, stream.cluster.as_str()),
        (token as u32, 1, "etcd")
    );
    assert_eq!(
        (
            stream.service.as_str(),
            stream.method.as_str(),
            stream.opened
        ),
        ("etcdserverpb.Watch", "Watch", opened)
    );
    assert_eq!(
        (stream.messages_out, stream.bytes_out),
        (1, WATCH_REQUEST.len() as u64)
    );
    assert_eq!(
        (stream.messages_in, stream.bytes_in),
        (2, (created.len() + event.len()) as u64)
    );
    assert_eq!((stream.status, stream.cancelled), (None, true));
}

#[test]
fn a_method_etcd_does_not_have_closes_with_its_status_from_a_trailers_only_answer() {
    let (etcd, _runtime) = etcd();
    let mut host = Host::new(streamer_guest(), options(0)).unwrap();
    host.real_cluster("etcd", etcd.clients()[0]);
    assert_eq!(
        call_i32(&mut host, 0, "open", &open_args(ETCD, NOPE, PLAIN)),
        0
    );
    let token = call_i32(&mut host, 0, "load", &[8100]);
    assert_eq!(call_i32(&mut host, 0, "send", &[token, 1]), 0);
    assert_eq!(
        call_i32(&mut host, 0, "send", &[token, 0]),
        BAD_ARGUMENT,
        "nothing goes after the end of the request"
    );

    paced_until(&mut host, |host| heard(host, 0)[3] == 1);
    const UNIMPLEMENTED: i32 = 12;
    assert_eq!(heard(&mut host, 0), [1, 0, 1, 1]);
    assert_eq!(
        call_i32(&mut host, 0, "load", &[9020]),
        0,
        "no initial metadata"
    );
    assert_eq!(call_i32(&mut host, 0, "load", &[9016]), UNIMPLEMENTED);
    assert_eq!(call_i32(&mut host, 0, "load", &[8020]), UNIMPLEMENTED);
    let logged: Vec<String> = messages(&host).into_iter().map(|(_, _, m)| m).collect();
    assert_eq!(logged[0], "12", "the trailers' grpc-status");
    assert!(logged[1].contains("Nope"), "{logged:?}");
    assert_eq!(host.real_streams()[0].status, Some(12));
    // Closed by the server, the stream is the guest's until it closes it too.
    assert_eq!(call_i32(&mut host, 0, "close", &[token]), 0);
    assert_eq!(call_i32(&mut host, 0, "close", &[token]), NOT_FOUND);
}

#[test]
fn a_grpc_stream_to_a_closed_port_closes_unavailable_with_envoys_words_and_a_stopped_vm_hears_nothing(
) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut host = Host::new(streamer_guest(), options(1)).unwrap();
    host.real_cluster("etcd", closed);
    let open = open_args(ETCD, WATCH, PLAIN);
    assert_eq!(call_i32(&mut host, 0, "open", &open), 0);
    let token = call_i32(&mut host, 0, "load", &[8100]);
    assert_eq!(call_i32(&mut host, 1, "open", &open), 0);
    let other = call_i32(&mut host, 1, "load", &[8100]);
    assert_ne!(token, other);
    assert_eq!(
        call_i32(&mut host, 0, "send", &[other, 0]),
        NOT_FOUND,
        "another VM's stream"
    );
    host.stop_vm(1);

    paced_until(&mut host, |host| heard(host, 0)[3] == 1);
    const UNAVAILABLE: i32 = 14;
    assert_eq!(heard(&mut host, 0), [1, 0, 1, 1]);
    assert_eq!(call_i32(&mut host, 0, "load", &[9016]), UNAVAILABLE);
    assert_eq!(call_i32(&mut host, 0, "load", &[8020]), UNAVAILABLE);
    let refused = "upstream connect error or disconnect/reset before headers. reset reason: \
                   connection failure, transport failure reason: delayed connect error: 111";
    paced_until(&mut host, |host| {
        host.real_streams().iter().all(|s| s.status.is_some())
    });
    let logged: Vec<(usize, String)> = messages(&host)
        .into_iter()
        .map(|(_, vm, message)| (vm, message))
        .collect();
    assert_eq!(
        logged,
        [(0, "14".to_string()), (0, refused.to_string())],
        "the trailers' grpc-status and the close's message; vm1 stopped and heard nothing"
    );
    assert_eq!(call_i32(&mut host, 0, "cancel", &[token]), 0);
    assert_eq!(call_i32(&mut host, 0, "close", &[token]), NOT_FOUND);
}

#[test]
fn a_grpc_stream_to_no_cluster_is_a_parse_failure_to_a_scripted_one_an_internal_failure_and_nginx_traps(
) {
    let mut host = Host::new(streamer_guest(), options(0)).unwrap();
    host.upstream("scripted");
    assert_eq!(
        call_i32(&mut host, 0, "open", &open_args(NOWHERE, WATCH, PLAIN)),
        PARSE_FAILURE
    );
    assert_eq!(
        call_i32(&mut host, 0, "open", &open_args(SCRIPTED, WATCH, PLAIN)),
        INTERNAL_FAILURE
    );
    for export in ["cancel", "close"] {
        assert_eq!(call_i32(&mut host, 0, export, &[2]), NOT_FOUND, "{export}");
    }
    assert_eq!(call_i32(&mut host, 0, "send", &[2, 0]), NOT_FOUND);
    host.advance(Duration::from_secs(1)).unwrap();
    assert!(host.real_streams().is_empty());
    assert!(host.logs().is_empty());

    let mut nginx = Host::new(streamer_guest(), profile(Profile::Nginx)).unwrap();
    let open = open_args(NOWHERE, WATCH, PLAIN).map(Val::I32);
    match nginx.call(0, "open", &open) {
        Err(HostError::Trap { message, .. }) => {
            assert!(message.contains("proxy_grpc_stream"), "{message}")
        }
        other => panic!("ngx_wasm_module does not implement gRPC streams: {other:?}"),
    }
}
