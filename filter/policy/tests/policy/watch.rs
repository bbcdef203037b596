//! Pushed health: a gRPC backend's `grpc.health.v1.Health/Watch`, through the pool as the module
//! hands it over. One stream per backend on the prober; `NOT_SERVING` drains at once,
//! `SERVING` brings the backend back at once; the stream that ends is opened again after a
//! backoff; the newest word, the Watch's or the `Check`'s, wins.

use super::support::{config, ms, secs, Proxy};
use std::time::Duration;
use upcheck_policy::events::WatchNews;
use upcheck_policy::grpc::health::Serving;
use upcheck_policy::grpc::status::Code;
use upcheck_policy::tables::PassiveChange;
use upcheck_policy::{Event, GrpcProbeAnswer, Health, MadeBy, ProbeOutcome, Said};

const SERVING: &[u8] = b"\x08\x01";
const NOT_SERVING: &[u8] = b"\x08\x02";
const SERVICE_UNKNOWN: &[u8] = b"\x08\x03";

/// Two gRPC backends, `a` and `b`, probed for `shop.Cart` with `extra` active settings, both
/// having passed a `Check` sent at 0 s, their Watches opened at the first tick and saying
/// `SERVING`.
fn watched_with(extra: &str) -> Proxy {
    let json =
        format!(r#""health_checks":{{"active":{{"grpc":{{"service":"shop.Cart"}}{extra}}}}}"#);
    let mut proxy = Proxy::new(config(&["a", "b"], &json), secs(0));
    proxy.tick(secs(0));
    for index in 0..2 {
        check(&mut proxy, index, Some(Serving::Serving), (secs(0), ms(10)));
        // A server answers a Watch with the status at once.
        push(&mut proxy, index, SERVING, ms(20));
    }
    proxy
}

fn watched() -> Proxy {
    watched_with("")
}

/// A `Check` of backend `index` sent at `sent` answered at `at`, `OK` with `serving`.
fn check(
    proxy: &mut Proxy,
    index: usize,
    serving: Option<Serving>,
    (sent, at): (Duration, Duration),
) {
    let token = 10_000 + u32::try_from(proxy.events.len()).unwrap();
    let effects = proxy.pool.probe_sent(index, token, sent);
    proxy.carry_out(effects, sent);
    let answer = GrpcProbeAnswer {
        code: Code::Ok,
        made_by: MadeBy::Backend,
        serving,
    };
    let effects = proxy.pool.probe_grpc_answered(token, answer, at);
    proxy.carry_out(effects, at);
}

/// The token of backend `index`'s newest Watch.
fn stream(proxy: &Proxy, index: usize) -> u32 {
    proxy
        .watches
        .iter()
        .rev()
        .find(|(i, _)| *i == index)
        .map(|(_, token)| *token)
        .expect("a Watch was opened")
}

/// Backend `index`'s Watch pushes `message` at `at`.
fn push(proxy: &mut Proxy, index: usize, message: &[u8], at: Duration) {
    let token = stream(proxy, index);
    assert!(proxy.pool.awaits_health_watch(token));
    let effects = proxy.pool.health_pushed(token, message, at);
    proxy.carry_out(effects, at);
}

/// Backend `index`'s Watch ends at `at` with `code`, `by_backend` or by the proxy.
fn end(proxy: &mut Proxy, index: usize, code: Code, by_backend: bool, at: Duration) {
    let token = stream(proxy, index);
    let effects = proxy.pool.health_watch_closed(token, code, by_backend, at);
    proxy.carry_out(effects, at);
}

/// The log lines of the events since event `from`.
fn said_since(proxy: &Proxy, from: usize) -> Vec<String> {
    proxy.events[from..]
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn health(proxy: &Proxy, index: usize) -> Health {
    proxy.members()[index].evidence.active.status
}

#[test]
fn the_prober_of_a_grpc_pool_opens_one_watch_per_backend_and_keeps_it_across_ticks() {
    let mut proxy = watched();
    assert_eq!(
        proxy.watches.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1]
    );
    for t in 1..50 {
        proxy.tick(ms(200 * t));
    }
    push(&mut proxy, 0, SERVING, secs(10));
    assert_eq!(proxy.watches.len(), 2, "opened once per backend");
}

#[test]
fn an_http_pool_and_a_vm_that_does_not_probe_open_no_watch() {
    let mut http = Proxy::new(config(&["a", "b"], ""), secs(0));
    http.tick(secs(0));
    assert!(http.watches.is_empty());
    let mut grpc = watched();
    let effects = grpc
        .pool
        .lease(upcheck_policy::LeaseHeld::Elsewhere, secs(1));
    grpc.carry_out(effects, secs(1));
    let opened: Vec<u32> = grpc.watches.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        grpc.cancelled, opened,
        "losing the lease cancels every Watch"
    );
    grpc.tick(secs(2));
    assert_eq!(grpc.watches.len(), 2, "and opens none without it");
}

#[test]
fn a_backend_whose_watch_says_not_serving_drains_at_once_and_never_counts_as_failing() {
    let mut proxy = watched();
    let from = proxy.events.len();
    push(&mut proxy, 0, NOT_SERVING, secs(3));
    assert_eq!(proxy.routable(), ["b"], "out before the next tick");
    let said = said_since(&proxy, from);
    assert!(
        said.contains(&"a said NOT_SERVING on its Watch".to_owned()),
        "{said:?}"
    );
    assert!(
        said.contains(&"a draining, no new requests: it said NOT_SERVING on its Watch".to_owned()),
        "{said:?}"
    );
    assert_eq!(health(&proxy, 0), Health::Healthy, "a drain is no failure");
    let key = proxy.members()[0].key.clone();
    let drained = proxy.table.iter().find(|(k, _)| *k == key).unwrap();
    assert!(drained.1.drain.is_some(), "shared with every VM");
    let start = PassiveChange::Drain {
        key,
        at: secs(3),
        by: upcheck_policy::drain::Signal::Watch,
    };
    let mut fresh = Vec::new();
    let applied = start.apply(&mut fresh, &proxy.config().health_checks);
    assert!(
        applied.takes_out(),
        "every worker takes it in before its next pick"
    );
}

#[test]
fn a_backend_whose_watch_says_serving_again_is_back_in_rotation_at_once() {
    let mut proxy = watched();
    push(&mut proxy, 0, NOT_SERVING, secs(3));
    let from = proxy.events.len();
    push(&mut proxy, 0, SERVING, ms(4_500));
    assert_eq!(
        proxy.routable(),
        ["a", "b"],
        "without waiting for the next Check"
    );
    let said = said_since(&proxy, from);
    assert!(
        said.iter().any(|s| s.starts_with(
            "a no longer draining: it serves again (its Watch or its Check said SERVING)"
        )),
        "{said:?}"
    );
}

#[test]
fn a_check_answering_not_serving_while_the_watch_drains_the_backend_is_the_same_drain() {
    let mut proxy = watched();
    push(&mut proxy, 0, NOT_SERVING, secs(3));
    check(
        &mut proxy,
        0,
        Some(Serving::NotServing),
        (secs(10), ms(10_010)),
    );
    assert_eq!(health(&proxy, 0), Health::Healthy, "no failure");
    assert_eq!(proxy.routable(), ["b"]);
    assert_eq!(
        proxy.members()[0].evidence.active.last,
        Some((
            ms(10_010),
            ProbeOutcome::Soft(Said::Health(Serving::NotServing))
        )),
        "the page still shows the Check's answer as the last probe"
    );
    check(
        &mut proxy,
        0,
        Some(Serving::Serving),
        (secs(20), ms(20_010)),
    );
    assert_eq!(proxy.routable(), ["a", "b"], "a passing Check ends it too");
}

#[test]
fn without_a_watch_draining_it_a_check_answering_not_serving_fails_as_before() {
    let mut proxy = watched();
    check(
        &mut proxy,
        0,
        Some(Serving::NotServing),
        (secs(10), ms(10_010)),
    );
    assert_eq!(health(&proxy, 0), Health::Unhealthy);
    assert_eq!(proxy.routable(), ["b"]);
}

#[test]
fn the_newest_word_wins_a_check_sent_before_the_watch_spoke_and_answered_after_is_dropped() {
    let mut proxy = watched();
    push(&mut proxy, 0, NOT_SERVING, secs(10));
    // Sent at 9.9 s, before the Watch's word, answered after it: older.
    check(
        &mut proxy,
        0,
        Some(Serving::Serving),
        (ms(9_900), ms(10_100)),
    );
    assert_eq!(proxy.routable(), ["b"], "the Watch's word stands");
    // Sent after it: newer, and the Check's word stands.
    check(
        &mut proxy,
        0,
        Some(Serving::Serving),
        (ms(10_200), ms(10_300)),
    );
    assert_eq!(proxy.routable(), ["a", "b"]);
    // And a Watch message after a Check is newer than the Check.
    check(
        &mut proxy,
        1,
        Some(Serving::Serving),
        (secs(20), ms(20_010)),
    );
    push(&mut proxy, 1, NOT_SERVING, ms(20_020));
    assert_eq!(proxy.routable(), ["a"]);
}

#[test]
fn service_unknown_on_the_watch_and_a_watch_the_backend_ends_not_found_fail_saying_so() {
    let mut proxy = watched();
    let from = proxy.events.len();
    push(&mut proxy, 0, SERVICE_UNKNOWN, secs(3));
    assert_eq!(health(&proxy, 0), Health::Unhealthy);
    assert!(
        proxy.members()[0].draining().is_none(),
        "a failure, not a drain"
    );
    let said = said_since(&proxy, from);
    assert!(
        said.contains(&"a unhealthy: it said SERVICE_UNKNOWN on its Watch".to_owned()),
        "{said:?}"
    );
    let last = proxy.members()[1].evidence.active.last;
    assert_eq!(last.map(|(_, o)| o), Some(ProbeOutcome::Pass));
    end(&mut proxy, 1, Code::NotFound, true, secs(4));
    assert_eq!(health(&proxy, 1), Health::Unhealthy);
    assert_eq!(
        proxy.members()[1].evidence.active.last.map(|(_, o)| o),
        Some(ProbeOutcome::Soft(Said::WatchEnded(Code::NotFound)))
    );
}

#[test]
fn a_watch_that_ends_is_no_failure_and_opens_again_after_a_doubling_backoff_that_a_message_resets()
{
    let mut proxy = watched();
    let mut opened_at = Vec::new();
    let mut now = ms(0);
    for _ in 0..5 {
        end(&mut proxy, 0, Code::Unavailable, false, now);
        let before = proxy.watches.len();
        while proxy.watches.len() == before {
            now += ms(200);
            proxy.tick(now);
        }
        opened_at.push(now.as_millis());
    }
    assert_eq!(opened_at, [1_000, 3_000, 7_000, 15_000, 31_000]);
    assert_eq!(health(&proxy, 0), Health::Healthy, "its Check covers it");
    push(&mut proxy, 0, SERVING, now);
    end(&mut proxy, 0, Code::Ok, true, now);
    let before = proxy.watches.len();
    proxy.tick(now + ms(800));
    assert_eq!(proxy.watches.len(), before);
    proxy.tick(now + secs(1));
    assert_eq!(proxy.watches.len(), before + 1, "one second again");
}

#[test]
fn a_backend_answering_unimplemented_is_said_once_and_its_watch_waits_the_longest() {
    let mut proxy = watched();
    let from = proxy.events.len();
    end(&mut proxy, 0, Code::Unimplemented, true, secs(1));
    assert_eq!(health(&proxy, 0), Health::Healthy, "its Check covers it");
    let mut now = secs(1);
    while now < secs(62) {
        now += ms(200);
        let before = proxy.watches.len();
        proxy.tick(now);
        if proxy.watches.len() > before {
            end(&mut proxy, 0, Code::Unimplemented, true, now);
        }
    }
    let unimplemented = proxy.events[from..]
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Watch {
                    news: WatchNews::Unimplemented,
                    ..
                }
            )
        })
        .count();
    assert_eq!(unimplemented, 1, "said once");
    let reopened = proxy.watches.iter().filter(|(i, _)| *i == 0).count();
    assert_eq!(reopened, 3, "at 0 s, 31 s and 61 s");
}

#[test]
fn a_serving_push_counts_as_one_pass_toward_the_threshold_of_a_backend_its_checks_took_down() {
    let mut proxy = watched_with(r#","passes":2"#);
    check(&mut proxy, 0, None, (secs(10), ms(10_010)));
    assert_eq!(health(&proxy, 0), Health::Unhealthy);
    push(&mut proxy, 0, SERVING, secs(11));
    assert_eq!(health(&proxy, 0), Health::Unhealthy, "one pass of two");
    let from = proxy.events.len();
    push(&mut proxy, 0, SERVING, secs(12));
    assert_eq!(health(&proxy, 0), Health::Healthy);
    let said = said_since(&proxy, from);
    assert!(
        said.contains(&"a healthy: 2 probes, the last: it said SERVING on its Watch".to_owned()),
        "{said:?}"
    );
    // The Checks' thresholds are the same: a Check's pass is one of two too.
    check(&mut proxy, 0, None, (secs(20), ms(20_010)));
    check(
        &mut proxy,
        0,
        Some(Serving::Serving),
        (secs(30), ms(30_010)),
    );
    assert_eq!(health(&proxy, 0), Health::Unhealthy, "one pass of two");
    check(
        &mut proxy,
        0,
        Some(Serving::Serving),
        (secs(40), ms(40_010)),
    );
    assert_eq!(health(&proxy, 0), Health::Healthy);
    // A drain took nothing from its health: it is back at once whatever `passes` is.
    push(&mut proxy, 0, NOT_SERVING, secs(41));
    push(&mut proxy, 0, SERVING, secs(42));
    assert_eq!(proxy.routable(), ["a", "b"]);
}

#[test]
fn a_watch_the_proxy_refuses_to_open_is_tried_again_after_the_backoff() {
    let json = r#""health_checks":{"active":{"grpc":{"service":"shop.Cart"}}}"#;
    let mut proxy = Proxy::new(config(&["a"], json), secs(0));
    proxy.refuse_watches = Some("bad argument");
    proxy.tick(secs(0));
    assert!(proxy.watches.is_empty());
    proxy.refuse_watches = None;
    proxy.tick(ms(800));
    assert!(proxy.watches.is_empty());
    proxy.tick(secs(1));
    assert_eq!(proxy.watches.len(), 1);
}

#[test]
fn a_new_configuration_cancels_the_watches_and_its_prober_opens_them_again() {
    let mut proxy = watched();
    let json = r#""health_checks":{"active":{"grpc":{"service":"shop.Orders"}}}"#;
    proxy.reconfigure(config(&["a", "b"], json), secs(5));
    assert_eq!(proxy.cancelled.len(), 2);
    proxy.tick(ms(5_200));
    assert_eq!(proxy.watches.len(), 4, "opened again, for the new service");
    let stale = proxy.watches[0].1;
    assert!(!proxy.pool.awaits_health_watch(stale));
}

#[test]
fn a_backend_whose_check_found_no_health_service_is_not_said_again_for_its_watch() {
    let mut proxy = watched();
    let from = proxy.events.len();
    let effects = proxy.pool.probe_sent(0, 99_999, secs(10));
    proxy.carry_out(effects, secs(10));
    let answer = GrpcProbeAnswer {
        code: Code::Unimplemented,
        made_by: MadeBy::Backend,
        serving: None,
    };
    let effects = proxy.pool.probe_grpc_answered(99_999, answer, ms(10_010));
    proxy.carry_out(effects, ms(10_010));
    end(&mut proxy, 0, Code::Unimplemented, true, ms(10_020));
    let said: Vec<&Event> = proxy.events[from..]
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::NoHealthService { .. }
                    | Event::Watch {
                        news: WatchNews::Unimplemented,
                        ..
                    }
            )
        })
        .collect();
    assert!(
        matches!(said.as_slice(), [Event::NoHealthService { .. }]),
        "said once, by the Check: {said:?}"
    );
}
