//! The retry advice ([`upcheck_policy::retry`]): a request's 5xx is repeated elsewhere while its
//! backend stands apart from its peers or nothing is known either way, never while they fail
//! alike; the budget; per-try timeouts from the peers' latency; and what a repeated attempt
//! counts toward.

use crate::support::*;
use std::time::Duration;
use upcheck_policy::config::{Config, Retries};
use upcheck_policy::retry::{Budget, BudgetNews, Extra, Grounds, Plan, Spent};
use upcheck_policy::{Event, ProbeOutcome, Retried};

/// Three backends in host routing, each passing its probes at 0, with `extra` top-level fields
/// and `upstream` fields for app2.
fn host(extra: &str, app2: &str) -> Proxy {
    let json = format!(
        r#"{{"routing":"host","upstreams":[
            {{"name":"app1","address":"127.0.0.1:3001"}},
            {{"name":"app2","address":"127.0.0.1:3002"{app2}}},
            {{"name":"app3","address":"127.0.0.1:3003"}}]{extra}}}"#
    );
    let config = Config::parse(json.as_bytes()).expect("test config parses");
    given_every_backend_passing_at(config, Duration::ZERO)
}

/// The advice a GET routed to `name` at `at` gets (the request then answered 200).
fn advice(proxy: &mut Proxy, name: &str, at: Duration) -> upcheck_policy::retry::Advice {
    let i = proxy.pool.index_of(name).expect("known backend");
    let (routed, advice) = proxy.pool.request_routed(900_000, i, None, true);
    let ended = proxy
        .pool
        .request_ended(900_000, routed, Retried::No, answered(200), || at);
    proxy.carry_out(ended.unwrap_or_default(), at);
    advice
}

/// 40 requests a second from 1 s to 6 s, where `fails` says which (backend, n-th request to it)
/// answer 500; the rest answer 200.
fn traffic(proxy: &mut Proxy, mut fails: impl FnMut(&str, u32) -> bool) {
    let mut seen = std::collections::HashMap::<String, u32>::new();
    proxy.serve(secs(1), secs(6), 40, |name, _| {
        let n = seen.entry(name.to_owned()).or_default();
        *n += 1;
        Some(answered(if fails(name, *n) { 500 } else { 200 }))
    });
}

#[test]
fn before_any_failure_a_500_is_not_repeated_but_each_attempt_is_timed_by_the_peers_and_hedged() {
    let mut proxy = host("", "");
    traffic(&mut proxy, |_, _| false);
    let advice = advice(&mut proxy, "app2", secs(6));
    assert_eq!(advice.grounds, Grounds::NoEvidence);
    assert!(!advice.on_5xx && advice.hedge, "{advice:?}");
    assert_eq!(
        advice.try_timeout_ms,
        Some(250),
        "peers answering at once: the floor"
    );
}

#[test]
fn a_5xx_of_a_backend_failing_while_its_peers_do_not_is_repeated_elsewhere() {
    let mut proxy = host("", "");
    traffic(&mut proxy, |name, n| name == "app2" && n % 3 == 0);
    let advice = advice(&mut proxy, "app2", secs(6));
    assert_eq!(advice.grounds, Grounds::OddOneOut);
    assert!(advice.on_5xx);
    let peer = self::advice(&mut proxy, "app1", secs(6));
    assert_eq!(
        peer.grounds,
        Grounds::NoEvidence,
        "app1's peers include app2, which fails, but not app1 and app3 alike: {peer:?}"
    );
}

#[test]
fn the_status_page_says_a_backend_kept_in_rotation_is_retried_around_while_it_fails_alone() {
    let mut proxy = host(r#","max_ejection_percent":0"#, "");
    traffic(&mut proxy, |name, n| name == "app2" && n % 3 == 0);
    let app2 = proxy.pool.index_of("app2").expect("app2");
    assert!(proxy.routable().contains(&"app2"), "kept in by the cap");
    assert_eq!(proxy.pool.retry_grounds(app2), Some(Grounds::OddOneOut));
    let html = upcheck_policy::page::html(&proxy.pool, None, secs(6));
    assert!(
        html.contains("its 5xx are repeated on its peers: it fails while they serve"),
        "{html}"
    );
}

#[test]
fn an_app_bug_failing_a_fifth_of_the_pages_on_every_backend_is_never_repeated() {
    let mut proxy = host("", "");
    traffic(&mut proxy, |_, n| n % 5 == 0);
    for name in ["app1", "app2", "app3"] {
        let advice = advice(&mut proxy, name, secs(6));
        assert_eq!(advice.grounds, Grounds::Alike, "{name}");
        assert!(!advice.on_5xx, "{name}: {advice:?}");
    }
    assert!(
        proxy.ejected().iter().all(|e| !e),
        "and nobody is ejected for it"
    );
    let html = upcheck_policy::page::html(&proxy.pool, None, secs(6));
    assert!(
        html.contains("its 5xx reach users: its peers fail alike (an app bug or a shared dependency), so none is repeated"),
        "the status page says why the 500s reach users"
    );
}

#[test]
fn with_the_pool_guard_engaged_nothing_is_repeated_and_no_timeout_is_tightened() {
    let mut proxy = host("", "");
    for name in ["app1", "app2", "app3"] {
        proxy.probe(name, ProbeOutcome::Timeout(secs(5)), secs(10));
    }
    proxy.tick(secs(10));
    let advice = advice(&mut proxy, "app1", secs(10));
    assert_eq!(advice.grounds, Grounds::Guarded);
    assert!(!advice.asks(), "{advice:?}");
}

#[test]
fn a_draining_backends_5xx_is_repeated_on_a_backend_that_stays() {
    let mut proxy = host("", r#","drain":true"#);
    proxy.tick(secs(1));
    let advice = advice(&mut proxy, "app2", secs(1));
    assert_eq!(advice.grounds, Grounds::Draining);
    assert!(advice.on_5xx);
}

#[test]
fn a_backend_warming_up_after_it_came_back_is_repeated_around() {
    let mut proxy = host(r#","health_checks":{"slow_start":"60s"}"#, "");
    proxy.probe("app2", ProbeOutcome::Refused, secs(20));
    proxy.probe("app2", ProbeOutcome::Pass, secs(30));
    proxy.tick(secs(31));
    let advice = advice(&mut proxy, "app2", secs(31));
    assert_eq!(advice.grounds, Grounds::Warming);
    assert!(advice.on_5xx);
}

#[test]
fn a_backend_with_no_peer_in_rotation_is_not_repeated() {
    let json = r#"{"routing":"host","upstreams":[{"name":"app1","address":"127.0.0.1:3001"}]}"#;
    let config = Config::parse(json.as_bytes()).expect("parses");
    let mut proxy = given_every_backend_passing_at(config, Duration::ZERO);
    proxy.tick(secs(1));
    let advice = advice(&mut proxy, "app1", secs(1));
    assert_eq!(advice.grounds, Grounds::Alone);
    assert!(!advice.asks());
}

#[test]
fn only_a_get_or_a_head_is_safe_to_repeat() {
    assert!(upcheck_policy::retry::safe_to_repeat(b"GET"));
    assert!(upcheck_policy::retry::safe_to_repeat(b"HEAD"));
    for method in [&b"POST"[..], b"PUT", b"PATCH", b"DELETE", b"get", b""] {
        assert!(!upcheck_policy::retry::safe_to_repeat(method), "{method:?}");
    }
}

#[test]
fn a_post_and_cluster_routing_get_no_advice_and_retries_can_be_turned_off() {
    let mut proxy = host("", "");
    proxy.tick(secs(1));
    let (post, advice) = proxy.pool.request_routed(1, 0, None, false);
    assert!(!advice.asks() && post.timed.is_none(), "a POST: {advice:?}");

    let mut cluster = given_backends_passing_their_probes(&["app1", "app2"], "");
    cluster.tick(secs(1));
    assert!(!cluster.pool.advises_retries());
    assert!(!cluster.pool.request_routed(1, 0, None, true).1.asks());

    let mut off = host(r#","retries":{"enabled":false}"#, "");
    off.tick(secs(1));
    assert!(!off.pool.request_routed(1, 0, None, true).1.asks());
}

#[test]
fn per_try_timeouts_follow_the_peers_slowest_requests_within_the_floor_and_the_ceiling() {
    let retries = Retries::default();
    let timeout =
        |p99: Option<Duration>| Plan::new(Grounds::NoEvidence, p99, &retries).try_timeout_ms;
    assert_eq!(timeout(Some(ms(10))), Some(250), "the floor");
    assert_eq!(timeout(Some(ms(200))), Some(800), "4 × the peers' p99");
    assert_eq!(
        timeout(Some(ms(750))),
        None,
        "at the ceiling: the route's own per-try timeout"
    );
    assert_eq!(
        timeout(None),
        None,
        "nothing known of the peers: the route's own"
    );
}

/// Spends `budget` as far as it allows, a request for each extra attempt: how many it allowed.
fn spend_all(budget: &mut Budget) -> u32 {
    let mut allowed = 0;
    while budget.allows() {
        budget.spend();
        allowed += 1;
    }
    allowed
}

#[test]
fn the_budget_allows_a_tenth_of_the_requests_plus_the_floor_and_refuses_past_its_edge() {
    let window = secs(10);
    let tenth = Retries {
        min_per_second: 0,
        ..Retries::default()
    };
    let mut budget = Budget::default();
    let _ = budget.tick(Spent::default(), window, &tenth);
    for _ in 0..90 {
        let _ = budget.allows();
    }
    for n in 0..10 {
        assert!(budget.allows(), "extra attempt {n}");
        budget.spend();
    }
    assert!(
        !budget.allows(),
        "10 extra for 101 requests: the 11th is over"
    );
    for _ in 0..8 {
        let _ = budget.allows();
    }
    assert!(budget.allows(), "110 requests allow 11");
    let news = budget.tick(Spent::default(), window, &tenth);
    assert_eq!(
        news,
        Some(BudgetNews::Spent { refused: 18 }),
        "the requests that went without their advice are counted for the tick: the first 9, \
         before there were 10 to allow one, and the 9 past the edge"
    );

    let floor = Retries::default();
    let mut quiet = Budget::default();
    let _ = quiet.tick(Spent::default(), window, &floor);
    assert_eq!(
        spend_all(&mut quiet),
        33,
        "30 from the floor (3 a second over 10 s), 3 as 10 % of 33"
    );
    let spent = Spent {
        requests: 33.0,
        extra: 33.0,
    };
    let _ = quiet.tick(spent, window, &floor);
    assert!(!quiet.allows(), "the next tick counts them in the window");
    assert_eq!(
        quiet.tick(Spent::default(), window, &floor),
        Some(BudgetNews::StillSpent { refused: 1 })
    );
    assert!(quiet.allows(), "a window later the floor is there again");
    assert_eq!(
        quiet.tick(Spent::default(), window, &floor),
        Some(BudgetNews::Available),
        "said once"
    );
    assert_eq!(quiet.tick(Spent::default(), window, &floor), None);
}

#[test]
fn the_workers_of_a_process_spend_from_one_budget_each_knowing_the_others_spending_at_its_tick() {
    let window = secs(10);
    let tenth = Retries {
        min_per_second: 0,
        ..Retries::default()
    };
    let process = Spent {
        requests: 200.0,
        extra: 0.0,
    };
    let (mut one, mut other) = (Budget::default(), Budget::default());
    let _ = one.tick(process, window, &tenth);
    let _ = other.tick(process, window, &tenth);
    assert_eq!(
        spend_all(&mut one),
        22,
        "a tenth of the process's 200 requests and of the worker's own 22 since"
    );
    // The next tick, each worker reads the process's counts: the first one's are in them.
    let process = Spent {
        requests: 222.0,
        extra: 22.0,
    };
    let _ = one.tick(process, window, &tenth);
    let _ = other.tick(process, window, &tenth);
    assert!(
        !other.allows(),
        "the other worker's share was spent by the first"
    );
    for _ in 0..6 {
        let _ = other.allows();
    }
    assert!(other.allows(), "until more requests come: 8 more allow one");
}

#[test]
fn a_process_that_spent_its_budget_repeats_nothing_more_and_says_so_once() {
    let mut proxy = host(
        r#","retries":{"min_per_second":0},"health_checks":{"outlier":{"window":"10s"}}"#,
        "",
    );
    traffic(&mut proxy, |name, n| name == "app2" && n % 3 == 0);
    let app2 = proxy.pool.index_of("app2").expect("app2");
    let app1 = proxy.pool.index_of("app1");
    assert!(
        advice(&mut proxy, "app2", secs(6)).on_5xx,
        "app2 stands out"
    );
    // The proxy repeats 30 of app2's requests on app1: about a tenth of 200 is 20.
    let earlier = proxy.events.len();
    let mut id = 1_000;
    for _ in 0..30 {
        id += 1;
        let (routed, _) = proxy.pool.request_routed(id, app2, None, true);
        let effects = proxy.pool.request_ended(
            id,
            routed,
            Retried::Yes { final_answer: app1 },
            answered(200),
            || secs(6),
        );
        proxy.carry_out(effects.unwrap_or_default(), secs(6));
    }
    let recovered = proxy.events[earlier..]
        .iter()
        .filter(|e| matches!(e, Event::Retried { extra: Extra::Repeated, by: Some(by), status: Some(200), .. } if by == "app1"))
        .count();
    assert_eq!(recovered, 30, "each repeat reported, answered by app1");
    // The next tick shares them as the process's; the one after reads them back.
    let _ = proxy.tick(secs(6) + TICK);
    let _ = proxy.tick(secs(6) + TICK * 2);
    let advice = advice(&mut proxy, "app2", secs(6) + TICK * 2);
    assert!(!advice.on_5xx, "over budget: {advice:?}");
    let _ = proxy.tick(secs(6) + TICK * 3);
    let said: Vec<&Event> = proxy.events[earlier..]
        .iter()
        .filter(|e| matches!(e, Event::RetryBudget(_)))
        .collect();
    assert!(
        matches!(
            said.as_slice(),
            [
                Event::RetryBudget(BudgetNews::Spent { refused: 12 }),
                Event::RetryBudget(BudgetNews::StillSpent { refused: 1 })
            ]
        ),
        "12 of the 30 repeated went without their advice, then the request after: {said:?}"
    );
    assert_eq!(said[0].level(), upcheck_policy::Level::Warn);
}

#[test]
fn a_repeated_attempt_counts_toward_max_fails_unless_it_outlasted_a_per_try_timeout_from_the_peers()
{
    let mut proxy = host("", "");
    traffic(&mut proxy, |_, _| false);
    let app2 = proxy.pool.index_of("app2").expect("app2");
    let passive = proxy.pool.config().health_checks.passive.clone();
    let count = |proxy: &Proxy| {
        proxy.pool.members()[app2]
            .evidence
            .passive
            .count(secs(9), &passive)
    };
    let retried = Retried::Yes {
        final_answer: proxy.pool.index_of("app1"),
    };
    let end = |proxy: &mut Proxy, id: u32, at: Duration| {
        let (routed, _) = proxy.pool.request_routed(id, app2, None, true);
        assert_eq!(routed.timed, Some(250));
        let effects = proxy
            .pool
            .request_ended(id, routed, retried, answered(200), || at);
        proxy.carry_out(effects.unwrap_or_default(), at);
    };
    // Routed at the latest tick (6 s): repeated 2 s later, it outlasted its 250 ms.
    end(&mut proxy, 1, secs(8));
    assert_eq!(
        count(&proxy),
        0,
        "a slow attempt: maybe an ordinary slow page"
    );
    // Repeated at once: it failed (a 502, a reset).
    end(&mut proxy, 2, secs(6));
    assert_eq!(count(&proxy), 1, "a failed attempt counts as any failure");

    let (routed, _) = proxy.pool.request_routed(3, app2, None, true);
    let won_by_first = Retried::Yes {
        final_answer: Some(app2),
    };
    let effects = proxy
        .pool
        .request_ended(3, routed, won_by_first, answered(200), || secs(9));
    proxy.carry_out(effects.unwrap_or_default(), secs(9));
    assert_eq!(
        count(&proxy),
        1,
        "a hedge the first attempt won is no failure"
    );
}
