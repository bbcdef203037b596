//! A gRPC backend probed by the Health Checking Protocol: what each end of a `Check` comes to,
//! through the pool as the module hands it over; and its calls, judged by their `grpc-status`.

use super::support::{config, ms, secs, Proxy};
use upcheck_policy::grpc::health::Serving;
use upcheck_policy::grpc::status::Code;
use upcheck_policy::outcome::{response_flags, About};
use upcheck_policy::{
    Event, GrpcProbeAnswer, Health, MadeBy, Outstanding, ProbeOutcome, ProxyFailure,
    RequestOutcome, Said,
};

/// Two gRPC backends, `a` and `b`, probed for `shop.Cart`, nothing known of them yet.
fn grpc_backends() -> Proxy {
    let extra = r#""health_checks":{"active":{"grpc":{"service":"shop.Cart"}}}"#;
    Proxy::new(config(&["a", "b"], extra), secs(0))
}

/// A `Check` of backend `index` sent at `at` that ends as `code`, `made_by` and `serving` say:
/// what the probe found, and the backend's health after it.
fn check(
    proxy: &mut Proxy,
    index: usize,
    (code, made_by, serving): (Code, MadeBy, Option<Serving>),
    at: u64,
) -> (ProbeOutcome, Option<Health>) {
    let token = 1000 * u32::try_from(index + 1).expect("small") + u32::try_from(at).expect("small");
    let effects = proxy.pool.probe_sent(index, token, secs(at));
    proxy.carry_out(effects, secs(at));
    let answer = GrpcProbeAnswer {
        code,
        made_by,
        serving,
    };
    let effects = proxy.pool.probe_grpc_answered(token, answer, secs(at));
    proxy.carry_out(effects, secs(at));
    let found = proxy.events.iter().rev().find_map(|e| match e {
        Event::Probed { outcome, .. } => Some(*outcome),
        _ => None,
    });
    let health = proxy.events.iter().rev().find_map(|e| match e {
        Event::HealthChanged { to, .. } => Some(*to),
        _ => None,
    });
    (found.expect("a probe found something"), health)
}

#[test]
fn serving_passes_and_every_other_end_of_a_check_fails_saying_what_it_was() {
    use MadeBy::{Backend, Proxy as ByProxy};
    let cases = [
        ((Code::Ok, Backend, Some(Serving::Serving)), "passed"),
        (
            (Code::Ok, Backend, Some(Serving::NotServing)),
            "answered NOT_SERVING",
        ),
        (
            (Code::Ok, Backend, Some(Serving::Unknown)),
            "answered UNKNOWN",
        ),
        ((Code::Ok, Backend, None), "answered UNKNOWN"),
        ((Code::NotFound, Backend, None), "answered NOT_FOUND"),
        ((Code::Unavailable, Backend, None), "answered UNAVAILABLE"),
        (
            (Code::Unimplemented, Backend, None),
            "answered UNIMPLEMENTED",
        ),
        (
            (Code::Unavailable, ByProxy, None),
            "found nothing serving (connection failed)",
        ),
        (
            (Code::DeadlineExceeded, ByProxy, None),
            "timed out after 5.0s",
        ),
    ];
    for (end, says) in cases {
        let mut proxy = grpc_backends();
        let (found, health) = check(&mut proxy, 0, end, 10);
        assert_eq!(found.to_string(), says, "{end:?}");
        let expected = if found.passed() {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
        assert_eq!(health, Some(expected), "{end:?}");
    }
}

#[test]
fn a_backend_turning_not_serving_is_taken_out_at_that_check_and_back_at_its_next_serving() {
    let mut proxy = grpc_backends();
    let serving = (Code::Ok, MadeBy::Backend, Some(Serving::Serving));
    let not_serving = (Code::Ok, MadeBy::Backend, Some(Serving::NotServing));
    check(&mut proxy, 1, serving, 10);
    check(&mut proxy, 0, serving, 10);
    assert_eq!(proxy.routable(), ["a", "b"]);
    let (found, _) = check(&mut proxy, 0, not_serving, 20);
    assert_eq!(found, ProbeOutcome::Soft(Said::Health(Serving::NotServing)));
    assert_eq!(proxy.routable(), ["b"]);
    check(&mut proxy, 0, serving, 30);
    assert_eq!(proxy.routable(), ["a", "b"]);
}

/// Two gRPC backends that passed their first `Check` at 1 s.
fn serving_backends() -> Proxy {
    let mut proxy = grpc_backends();
    for index in [0, 1] {
        check(
            &mut proxy,
            index,
            (Code::Ok, MadeBy::Backend, Some(Serving::Serving)),
            1,
        );
    }
    proxy
}

/// A call to `name` that ended at `at` with `code`, as the backend said it.
fn call(proxy: &mut Proxy, name: &str, code: Code, at: u64) {
    proxy.request(name, RequestOutcome::called(code, ms(4), || 0), secs(at));
}

/// Why each request counted against a backend, as the log says it.
fn counted(proxy: &Proxy) -> Vec<String> {
    proxy
        .events
        .iter()
        .filter_map(|e| match e {
            Event::RequestFailed { name, failure, .. } => Some(format!("{name}: {failure}")),
            _ => None,
        })
        .collect()
}

#[test]
fn calls_ending_unavailable_eject_their_backend_at_max_fails_and_the_log_names_the_code() {
    let mut proxy = serving_backends();
    for at in [2, 3, 4] {
        call(&mut proxy, "a", Code::Unavailable, at);
        call(&mut proxy, "b", Code::Ok, at);
    }
    assert_eq!(proxy.routable(), ["b"]);
    assert_eq!(
        counted(&proxy),
        ["a: a call answered UNAVAILABLE after 4ms"; 3]
    );
}

#[test]
fn deadline_exceeded_counts_as_a_timeout_does_toward_max_fails() {
    let mut proxy = serving_backends();
    for at in [2, 3, 4] {
        call(&mut proxy, "a", Code::DeadlineExceeded, at);
    }
    assert_eq!(proxy.routable(), ["b"]);
}

#[test]
fn the_applications_own_codes_and_overload_never_count_against_a_backend() {
    let mut proxy = serving_backends();
    let own = [
        Code::InvalidArgument,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unauthenticated,
        Code::Cancelled,
        Code::ResourceExhausted,
    ];
    for (at, code) in (2..).zip(own.iter().cycle().take(30)) {
        call(&mut proxy, "a", *code, at);
    }
    assert_eq!(proxy.routable(), ["a", "b"]);
    assert!(counted(&proxy).is_empty(), "{:?}", counted(&proxy));
}

#[test]
fn internal_and_unknown_go_to_the_peer_comparison_as_a_500_and_not_toward_max_fails() {
    let internal = RequestOutcome::called(Code::Internal, ms(4), || 0);
    let unknown = RequestOutcome::called(Code::Unknown, ms(4), || 0);
    for outcome in [internal, unknown] {
        let passive = upcheck_config::Passive::default();
        assert!(outcome.failure(&passive).is_none(), "{outcome:?}");
        let kind = outcome
            .outlier_failure()
            .expect("a failure for the outlier rules");
        assert_eq!(kind.about(), About::Backend);
    }
    let kind = internal.outlier_failure().expect("a failure");
    assert_eq!(kind.to_string(), "INTERNAL");
}

#[test]
fn a_code_the_proxy_answered_for_an_unreachable_backend_is_read_from_its_flags() {
    let refused = RequestOutcome::called(Code::Unavailable, ms(4), || {
        response_flags::UPSTREAM_CONNECT_FAILURE
    });
    assert_eq!(refused, RequestOutcome::Failed(ProxyFailure::Refused));
    // A code below 5xx never asks the proxy.
    let own = RequestOutcome::called(Code::NotFound, ms(4), || panic!("flags read"));
    assert!(matches!(own, RequestOutcome::Answered { status: 404, .. }));
}

#[test]
fn a_call_whose_response_headers_came_is_neither_late_nor_stalled_while_it_streams() {
    let mut flight = Outstanding::default();
    let streaming = flight.begin(1, 0, ms(0)).expect("a slot");
    let waiting = flight.begin(2, 0, ms(0)).expect("a slot");
    flight.answered(1, streaming);
    flight.answered(1, waiting); // not request 1's slot: nothing changes
    assert_eq!(flight.starts(0), [ms(0)], "only request 2 still waits");
    let late: Vec<_> = flight.overdue(ms(60_000), ms(1_000));
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(flight.end(1, streaming), Some((ms(0), false)));
}

#[test]
fn a_backend_without_the_health_service_is_said_once_as_a_configuration_problem() {
    let mut proxy = grpc_backends();
    let unimplemented = (Code::Unimplemented, MadeBy::Backend, None);
    let serving = (Code::Ok, MadeBy::Backend, Some(Serving::Serving));
    let said = |proxy: &Proxy| {
        proxy
            .events
            .iter()
            .filter(|e| matches!(e, Event::NoHealthService { .. }))
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    for at in [1, 11, 21] {
        let (found, _) = check(&mut proxy, 0, unimplemented, at);
        assert!(!found.passed());
    }
    assert_eq!(
        said(&proxy),
        [
            "cannot check a: it answered UNIMPLEMENTED, so it serves no gRPC health service \
          (grpc.health.v1.Health, asked for service \"shop.Cart\"); serve it, or check it by \
          `path`. Treating a as not serving"
        ]
    );
    // An UNIMPLEMENTED that Envoy made up is not the backend's word.
    check(&mut proxy, 1, (Code::Unimplemented, MadeBy::Proxy, None), 1);
    assert_eq!(said(&proxy).len(), 1);
    // Once it serves the health service, losing it again is said again.
    check(&mut proxy, 0, serving, 31);
    check(&mut proxy, 0, unimplemented, 41);
    assert_eq!(said(&proxy).len(), 2);
}

#[test]
fn a_check_envoy_ended_at_its_timeout_or_for_want_of_a_connection_is_the_proxys_and_says_so() {
    use upcheck_policy::active::grpc_check_ended;
    // Each message as Envoy 1.40 wrote it.
    let timed_out = grpc_check_ended(14, "upstream request timeout{response_timeout}");
    assert_eq!(timed_out, (Code::DeadlineExceeded, MadeBy::Proxy));
    let refused = grpc_check_ended(
        14,
        "upstream connect error or disconnect/reset before headers. reset reason: remote \
         connection failure{upstream_reset_before_response_started{remote_connection_failure|\
         delayed_connect_error:_Connection_refused}}",
    );
    assert_eq!(refused, (Code::Unavailable, MadeBy::Proxy));
    let own = grpc_check_ended(14, "the database is down");
    assert_eq!(own, (Code::Unavailable, MadeBy::Backend));
    let mut proxy = grpc_backends();
    let (found, _) = check(&mut proxy, 0, (timed_out.0, timed_out.1, None), 10);
    assert_eq!(found.to_string(), "timed out after 5.0s");
}
