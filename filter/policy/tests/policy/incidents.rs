//! The incident and its cousins, as the policy sees them: who gets traffic.

use crate::support;

use std::time::Duration;
use support::*;
use upcheck_policy::tables::ActiveTable;
use upcheck_policy::{ActiveHealth, Config, Event, Guard, Health, Pick, Pool, ProbeOutcome, Said};

/// app1 serving and known healthy; app2 added by a reconfiguration at 30 s.
fn given_app2_added_at_30s() -> Proxy {
    let mut pool = pool(&["app1"]);
    probe(&mut pool, "app1", ProbeOutcome::Pass, ms(20));
    pool.reconfigure(config(&["app1", "app2"], ""), secs(30));
    pool
}

/// A worker of NGINX, which resumes a request only on its own calls' answers, that does not
/// probe: app1 and app2 at their addresses, nothing known yet.
fn given_an_nginx_worker() -> Pool {
    let json = r#"{"proxy":"nginx","upstreams":[
        {"name":"app1","cluster":"127.0.0.1:8081"},{"name":"app2","cluster":"127.0.0.1:8082"}]}"#;
    let config = Config::parse(json.as_bytes()).expect("parses");
    Pool::new(config, Duration::ZERO, |_| ())
}

/// app1 and app2 passing their probes; app2 then answers 502 to a request at 1, 2 and 3 s.
fn given_app2_ejected_by_three_502s() -> Proxy {
    let mut pool = given_two_backends_passing_their_probes();
    for t in 1..=3 {
        request(&mut pool, "app2", answered(502), secs(t));
    }
    pool
}

#[test]
fn a_backend_added_while_answering_502_is_never_selected() {
    let mut pool = given_app2_added_at_30s();
    assert_eq!(
        picks(&mut pool, 4, secs(30)),
        ["app1"; 4],
        "unknown, so no traffic"
    );
    probe(&mut pool, "app2", SOFT_503, secs(30) + ms(3));
    probe(
        &mut pool,
        "app2",
        ProbeOutcome::Soft(Said::Status(502)),
        secs(40),
    );
    assert_eq!(picks(&mut pool, 4, secs(41)), ["app1"; 4]);
}

#[test]
fn a_backend_added_while_hanging_or_refusing_is_never_selected() {
    for outcome in [TIMEOUT, ProbeOutcome::Refused] {
        let mut pool = given_app2_added_at_30s();
        assert_eq!(picks(&mut pool, 2, secs(31)), ["app1"; 2]);
        probe(&mut pool, "app2", outcome, secs(35));
        assert_eq!(picks(&mut pool, 2, secs(36)), ["app1"; 2]);
    }
}

#[test]
fn a_reconfiguration_keeps_what_is_known_about_backends_that_stay() {
    let pool = given_app2_added_at_30s();
    let app1 = pool.index_of("app1").expect("app1 stays");
    assert_eq!(
        pool.members()[app1].evidence.active.status,
        upcheck_policy::Health::Healthy
    );
}

#[test]
fn at_cold_start_requests_wait_for_the_first_passing_probe_at_most_one_timeout() {
    let mut pool = pool(&["app1", "app2"]);
    assert_eq!(pool.pick(ms(10)), Pick::Wait);
    probe(&mut pool, "app1", ProbeOutcome::Pass, ms(30));
    assert_eq!(picks(&mut pool, 3, ms(31)), ["app1"; 3]);

    let mut silent = support::pool(&["app1", "app2"]);
    assert_eq!(silent.pick(ms(4_999)), Pick::Wait);
    assert_eq!(
        picks(&mut silent, 2, secs(5)),
        ["app1", "app2"],
        "then unknowns are used"
    );
}

#[test]
fn at_cold_start_a_backend_refusing_at_once_ends_no_wait_while_another_is_unheard() {
    let mut pool = pool(&["app1", "app2", "app3"]);
    probe(&mut pool, "app3", ProbeOutcome::Refused, ms(5));
    assert_eq!(pool.pick(ms(10)), Pick::Wait, "app1 and app2 may hang");
    probe(&mut pool, "app1", ProbeOutcome::Pass, ms(30));
    assert_eq!(
        picks(&mut pool, 3, ms(31)),
        ["app1"; 3],
        "unheard app2 stays out"
    );

    let mut all_heard = support::pool(&["app1", "app2"]);
    probe(&mut all_heard, "app1", ProbeOutcome::Refused, ms(5));
    probe(&mut all_heard, "app2", ProbeOutcome::Refused, ms(6));
    assert_eq!(
        picks(&mut all_heard, 2, ms(7)),
        ["app1", "app2"],
        "every backend heard: the guard routes, nobody waits"
    );
}

#[test]
fn at_cold_start_in_nginx_each_request_waits_on_a_probe_of_its_own_until_a_backend_passes() {
    let mut pool = given_an_nginx_worker();
    let mut offered = [pool.pick(ms(10)), pool.pick(ms(10))];
    offered.sort_by_key(|pick| format!("{pick:?}"));
    assert_eq!(
        offered,
        [Pick::Probe(0), Pick::Probe(1)],
        "each backend in turn"
    );

    let _ = pool.held_probe_sent(1, 7, ms(10));
    let answer = answer_from_backend(502);
    let effects = pool.probe_answered(7, answer, ms(12));
    assert!(
        effects
            .events
            .iter()
            .any(|e| matches!(e, Event::HealthChanged { .. }))
            && !effects.publish_active,
        "a worker says what it heard, and leaves the probe table to the prober: {effects:?}"
    );
    assert_eq!(
        [pool.pick(ms(13)), pool.pick(ms(13))],
        [Pick::Probe(0); 2],
        "app2 failing ends no wait while app1 is unheard: it may hang"
    );
    let _ = pool.held_probe_sent(0, 8, ms(13));
    let _ = pool.probe_answered(8, answer_from_backend(200), ms(14));
    assert_eq!(
        [pool.pick(ms(14)), pool.pick(ms(14))],
        [Pick::Backend(0); 2]
    );

    let unknown: ActiveTable = pool
        .members()
        .iter()
        .map(|m| (m.key.clone(), ActiveHealth::new(Duration::ZERO)))
        .collect();
    let _ = pool.active_published(&unknown, ms(14));
    assert_eq!(
        pool.pick(ms(14)),
        Pick::Backend(0),
        "a table that has not heard of app2 since does not undo what this worker heard"
    );

    let mut prober = given_an_nginx_worker();
    let _ = prober.lease(upcheck_policy::LeaseHeld::Here { seed: 1 }, ms(15));
    for (i, token) in [(0, 1), (1, 2)] {
        let _ = prober.probe_sent(i, token, ms(15));
        let passed = answer_from_backend(200);
        let _ = prober.probe_answered(token, passed, ms(16));
    }
    let _ = pool.active_published(&prober.active_table(), ms(17));
    let picks: Vec<Pick> = (0..2).map(|_| pool.pick(ms(17))).collect();
    assert!(
        picks.contains(&Pick::Backend(1)),
        "the prober's newer word on app2 is taken: {picks:?}"
    );
}

#[test]
fn a_worker_whose_held_probe_the_proxy_refuses_leaves_the_probe_table_to_the_prober() {
    let mut pool = given_an_nginx_worker();
    let effects = pool.probe_refused(1, "bad argument", ms(10));
    assert!(!effects.publish_active, "{effects:?}");
    assert_eq!(pool.pick(ms(11)), Pick::Probe(0), "app1 is still unheard");
}

#[test]
fn a_held_probe_whose_request_left_or_that_went_unanswered_for_two_timeouts_is_forgotten() {
    let mut pool = given_an_nginx_worker();
    let answer = answer_from_backend(502);
    let _ = pool.held_probe_sent(1, 7, ms(10));
    let _ = pool.held_probe_dropped(7);
    let _ = pool.probe_answered(7, answer, ms(12));
    assert!(matches!(pool.pick(ms(13)), Pick::Probe(_)), "nothing heard");

    let _ = pool.held_probe_sent(1, 8, ms(20));
    let _ = pool.tick(ms(20) + secs(10));
    let _ = pool.probe_answered(8, answer, ms(20) + secs(10));
    let app2 = &pool.members()[1];
    assert!(
        app2.routable && app2.evidence.active.last.is_none(),
        "an answer to a forgotten probe says nothing"
    );
}

#[test]
fn in_nginx_requests_go_on_unheld_one_probe_timeout_after_start_if_no_probe_answered() {
    let mut pool = given_an_nginx_worker();
    assert!(matches!(pool.pick(ms(4_999)), Pick::Probe(_)));
    assert!(matches!(pool.pick(secs(5)), Pick::Backend(_)));
}

#[test]
fn a_db_blip_failing_every_probe_at_once_keeps_both_backends_routable() {
    let mut pool = given_two_backends_passing_their_probes();
    probe(&mut pool, "app1", SOFT_503, secs(10));
    assert_eq!(routable(&pool), ["app2"]);
    probe(&mut pool, "app2", SOFT_503, secs(10) + ms(400));
    assert_eq!(routable(&pool), ["app1", "app2"]);
    assert_eq!(pool.guard(), Guard::LastDown);
    probe(&mut pool, "app1", ProbeOutcome::Pass, secs(30));
    assert_eq!(routable(&pool), ["app1"]);
    assert_eq!(pool.guard(), Guard::Off);
}

#[test]
fn at_max_ejection_percent_100_the_backends_a_blip_keeps_in_may_all_be_ejected_but_the_last() {
    let names = ["app1", "app2", "app3"];
    let mut pool = given_backends_passing_their_probes(&names, r#""max_ejection_percent": 100"#);
    for (k, name) in names.iter().enumerate() {
        probe(&mut pool, name, SOFT_503, secs(10) + ms(100 * k as u64));
    }
    assert_eq!(routable(&pool), names);
    assert_eq!(pool.guard(), Guard::LastDown);
    // Rule 4 still applies to those the guard keeps: of three, all but the last to fail go.
    for (k, name) in names.iter().enumerate() {
        for t in 0..3 {
            request(&mut pool, name, answered(502), secs(11 + k as u64) + ms(t));
        }
    }
    assert_eq!(pool.ejected(), [true, true, false]);
    assert_eq!(routable(&pool), ["app3"]);
    assert_eq!(pool.guard(), Guard::LastDown);
}

#[test]
fn a_blip_after_app2_already_went_down_keeps_app2_out() {
    let mut pool = given_two_backends_passing_their_probes();
    probe(&mut pool, "app2", TIMEOUT, secs(15));
    probe(&mut pool, "app1", SOFT_503, secs(120));
    assert_eq!(routable(&pool), ["app1"]);
    assert_eq!(pool.guard(), Guard::LastDown);
    assert_eq!(picks(&mut pool, 3, secs(121)), ["app1"; 3]);
}

#[test]
fn a_probe_that_timed_out_dates_a_backends_fall_from_when_it_was_sent() {
    // app2's probe, sent at 10 ms, times out 5 s later, the proxy's timer half a millisecond
    // late; app1's probe two rounds later answers 503 at once. app2 went down 20 s before app1,
    // more than a round (15 s): it stays out.
    let mut pool = pool(&["app1", "app2"]);
    probe(&mut pool, "app1", ProbeOutcome::Pass, ms(10));
    probe(
        &mut pool,
        "app2",
        TIMEOUT,
        secs(5) + ms(10) + Duration::from_micros(500),
    );
    probe(&mut pool, "app1", SOFT_503, secs(20) + ms(10));
    assert_eq!(
        routable(&pool),
        ["app1"],
        "app2 went down two rounds before"
    );
    assert_eq!(pool.guard(), Guard::LastDown);

    // The same timeout, and app1 failing at its next probe, one round later: 10 s apart.
    let mut together = support::pool(&["app1", "app2"]);
    probe(&mut together, "app1", ProbeOutcome::Pass, ms(10));
    probe(&mut together, "app2", TIMEOUT, secs(5) + ms(10));
    probe(&mut together, "app1", SOFT_503, secs(10) + ms(10));
    assert_eq!(
        routable(&together),
        ["app1", "app2"],
        "within a round of each other"
    );
}

#[test]
fn of_backends_going_down_one_after_another_only_those_within_a_round_of_the_last_keep_serving() {
    let mut pool = given_backends_passing_their_probes(&["app1", "app2", "app3"], "");
    probe(&mut pool, "app1", SOFT_503, secs(1));
    probe(&mut pool, "app2", SOFT_503, secs(11));
    assert_eq!(routable(&pool), ["app3"]);
    probe(&mut pool, "app3", SOFT_503, secs(21));
    assert_eq!(
        routable(&pool),
        ["app2", "app3"],
        "app1 went down 20 s before app3, more than a round (15 s), though within one of app2"
    );
    assert_eq!(pool.guard(), Guard::LastDown);
}

#[test]
fn backends_that_went_down_together_but_refuse_connections_are_left_out() {
    let mut pool = pool(&["app1", "app2"]);
    probe(&mut pool, "app1", SOFT_503, ms(10));
    probe(&mut pool, "app2", ProbeOutcome::Refused, ms(20));
    assert_eq!(routable(&pool), ["app1"]);
}

#[test]
fn a_backend_that_refuses_connections_does_not_date_the_last_round() {
    let mut pool = given_backends_passing_their_probes(&["app1", "app2", "app3"], "");
    probe(&mut pool, "app1", SOFT_503, secs(1));
    probe(&mut pool, "app2", SOFT_503, secs(15));
    probe(&mut pool, "app3", ProbeOutcome::Refused, secs(28));
    assert_eq!(
        routable(&pool),
        ["app1", "app2"],
        "app2 went down last of those that accept; app1 within a round of it"
    );
    assert_eq!(pool.guard(), Guard::LastDown);
}

#[test]
fn when_nothing_accepts_connections_every_backend_is_tried() {
    let mut pool = pool(&["app1", "app2"]);
    probe(&mut pool, "app1", ProbeOutcome::Refused, ms(10));
    probe(&mut pool, "app2", ProbeOutcome::Refused, ms(20));
    assert_eq!(routable(&pool), ["app1", "app2"]);
    assert_eq!(pool.guard(), Guard::NothingServing);
}

#[test]
fn two_of_three_broken_after_a_bad_deploy_are_both_ejected_and_the_healthy_one_serves() {
    let mut pool = given_backends_passing_their_probes(
        &["app1", "app2", "app3"],
        r#""max_ejection_percent": 100"#,
    );
    for t in 1..=3 {
        request(&mut pool, "app2", answered(502), secs(t));
        request(&mut pool, "app3", answered(503), secs(t));
    }
    assert_eq!(routable(&pool), ["app1"]);
    assert_eq!(picks(&mut pool, 3, secs(4)), ["app1"; 3]);
}

#[test]
fn passive_ejection_may_take_one_of_two_backends_but_never_both() {
    let mut pool = given_app2_ejected_by_three_502s();
    assert_eq!(routable(&pool), ["app1"]);
    for t in 4..=6 {
        request(&mut pool, "app1", answered(502), secs(t));
    }
    assert_eq!(
        routable(&pool),
        ["app1"],
        "the second ejection is over the cap"
    );
    assert_eq!(pool.ejected(), [false, true]);
}

#[test]
fn at_max_ejection_percent_100_every_failing_backend_may_go_but_never_the_last_one() {
    let names = ["app1", "app2", "app3", "app4"];
    for n in 1..=names.len() {
        let fleet = &names[..n];
        let mut pool = given_backends_passing_their_probes(fleet, r#""max_ejection_percent": 100"#);
        // Each fails its pages, the last of them last.
        for t in 1..=3 {
            for (k, name) in fleet.iter().enumerate() {
                request(&mut pool, name, answered(502), secs(t) + ms(k as u64));
            }
        }
        let mut expected = vec![true; n];
        expected[n - 1] = false;
        assert_eq!(
            pool.ejected(),
            expected,
            "of {n}, all but the last to fail are ejected"
        );
        assert_eq!(routable(&pool), [names[n - 1]], "of {n}");
        assert_eq!(pool.guard(), Guard::Off, "of {n}");
    }
}

#[test]
fn the_cap_counts_only_backends_passing_active_checks() {
    let mut pool = pool(&["app1", "app2", "app3", "app4"]);
    for name in ["app1", "app2"] {
        probe(&mut pool, name, ProbeOutcome::Pass, ms(10));
    }
    for name in ["app3", "app4"] {
        probe(&mut pool, name, TIMEOUT, ms(10));
    }
    for t in 1..=3 {
        request(&mut pool, "app1", answered(502), secs(t));
        request(&mut pool, "app2", answered(502), secs(t));
    }
    assert_eq!(
        routable(&pool),
        ["app2"],
        "one of the two passing may go, not both"
    );
}

#[test]
fn at_max_ejection_percent_75_the_cap_takes_its_share_of_the_backends_passing_active_checks() {
    // Three of four pass: 75 % of three lets two go; of all four it would let all three.
    let names = ["app1", "app2", "app3", "app4"];
    let mut pool = Proxy::new(config(&names, r#""max_ejection_percent": 75"#), secs(0));
    for name in ["app1", "app2", "app3"] {
        probe(&mut pool, name, ProbeOutcome::Pass, ms(10));
    }
    probe(&mut pool, "app4", TIMEOUT, ms(10));
    for t in 1..=3 {
        for (k, name) in ["app1", "app2", "app3"].iter().enumerate() {
            request(&mut pool, name, answered(502), secs(t) + ms(k as u64));
        }
    }
    assert_eq!(pool.ejected(), [true, true, false, false]);
    assert_eq!(routable(&pool), ["app3"]);
}

#[test]
fn a_refused_request_takes_a_backend_out_until_it_answers_again() {
    let mut pool = given_two_backends_passing_their_probes();
    request(&mut pool, "app2", REFUSED, secs(1));
    assert_eq!(routable(&pool), ["app1"]);
    probe(&mut pool, "app2", ProbeOutcome::Pass, secs(10));
    assert_eq!(routable(&pool), ["app1", "app2"]);
}

#[test]
fn below_min_healthy_percent_traffic_spreads_over_every_backend_that_accepts() {
    let c: Config = config(
        &["app1", "app2", "app3", "app4"],
        r#""min_healthy_percent": 50"#,
    );
    let mut pool = Proxy::new(c, secs(0));
    probe(&mut pool, "app1", ProbeOutcome::Pass, ms(10));
    probe(&mut pool, "app2", SOFT_503, ms(10));
    probe(&mut pool, "app3", SOFT_503, ms(10));
    probe(&mut pool, "app4", ProbeOutcome::Refused, ms(10));
    assert_eq!(routable(&pool), ["app1", "app2", "app3"]);
    assert_eq!(pool.guard(), Guard::Panic);
}

#[test]
fn exactly_min_healthy_percent_routable_is_enough_and_one_fewer_spreads_the_traffic() {
    let mut pool = given_backends_passing_their_probes(
        &["app1", "app2", "app3", "app4"],
        r#""min_healthy_percent": 50"#,
    );
    probe(&mut pool, "app3", SOFT_503, secs(1));
    probe(&mut pool, "app4", SOFT_503, secs(1));
    assert_eq!(routable(&pool), ["app1", "app2"], "two of four: not fewer");
    assert_eq!(pool.guard(), Guard::Off);
    probe(&mut pool, "app2", SOFT_503, secs(2));
    assert_eq!(routable(&pool), ["app1", "app2", "app3", "app4"]);
    assert_eq!(pool.guard(), Guard::Panic);
}

#[test]
fn weights_share_traffic_in_proportion() {
    let json = r#"{"upstreams":[{"name":"big","weight":3},{"name":"small"}]}"#;
    let mut pool =
        given_every_backend_passing_at(Config::parse(json.as_bytes()).expect("parses"), ms(10));
    let got = picks(&mut pool, 400, secs(1));
    assert_eq!(got.iter().filter(|n| *n == "big").count(), 300);
}

#[test]
fn a_backend_that_fails_only_first_attempts_is_ejected_like_one_whose_failures_reach_users() {
    let mut pool = given_two_backends_passing_their_probes();
    for t in 1..=3 {
        request(
            &mut pool,
            "app2",
            upcheck_policy::RequestOutcome::RetriedElsewhere,
            secs(t),
        );
    }
    assert_eq!(routable(&pool), ["app1"]);
}

#[test]
fn a_request_answered_after_a_refused_probe_is_shared_as_something_serving_again() {
    let mut pool = given_two_backends_passing_their_probes();
    probe(&mut pool, "app2", ProbeOutcome::Refused, secs(1));
    assert!(!pool.members()[1].evidence.accepting());
    request(&mut pool, "app2", answered(200), secs(2));
    assert!(
        pool.members()[1].evidence.accepting(),
        "the answer says something is serving again"
    );
    assert_eq!(
        pool.table.len(),
        1,
        "the contact was shared with the other VMs"
    );
}

#[test]
fn an_ejection_ends_when_it_is_no_longer_earned_not_when_the_backend_also_fails_its_probes() {
    let mut pool = given_app2_ejected_by_three_502s();
    let ended = |pool: &Proxy| {
        pool.events
            .iter()
            .filter(|e| matches!(e, upcheck_policy::Event::EjectionEnded { .. }))
            .count()
    };
    probe(&mut pool, "app2", SOFT_503, secs(5));
    assert_eq!(routable(&pool), ["app1"]);
    assert_eq!(ended(&pool), 0, "still ejected, and failing its probes too");
    pool.tick(secs(12));
    assert_eq!(ended(&pool), 1, "its failures expired: {:?}", pool.events);
}

#[test]
fn a_reconfiguration_that_removes_backends_never_picks_a_position_that_is_gone() {
    let mut pool =
        given_backends_passing_their_probes(&["app1", "app2", "app3", "app4", "app5"], "");
    pool.reconfigure(config(&["app5", "app3", "app1"], ""), secs(1));
    let got = picks(&mut pool, 6, secs(1));
    assert_eq!(got, ["app5", "app3", "app1", "app5", "app3", "app1"]);
}

/// Traffic at 20 requests a second from `from` until `until`, every request answered 200 at once
/// except those to a backend named in `hung`, which never end.
fn serve_pages(pool: &mut Proxy, from: Duration, until: Duration, hung: &[&str]) {
    pool.serve(from, until, 20, |name, _| {
        (!hung.contains(&name)).then(|| answered(200))
    });
}

/// A probe of `name` that timed out at `at`, sent the timeout (5 s) before.
fn timed_out(pool: &mut Proxy, name: &str, at: Duration) {
    let sent = at.saturating_sub(secs(5));
    pool.probe_sent_at(name, TIMEOUT, sent, at);
}

fn logged(pool: &Proxy, pattern: impl Fn(&Event) -> bool) -> usize {
    pool.events.iter().filter(|e| pattern(e)).count()
}

/// The lines that brought a backend back with its peers, in order.
fn back_alike(pool: &Proxy) -> Vec<String> {
    pool.events
        .iter()
        .filter(|e| matches!(e, Event::BackAlike { .. }))
        .map(ToString::to_string)
        .collect()
}

/// `names` passing their probes, then a second of pages (from 20 ms), all answered.
fn given_pages_served_for_a_second(names: &[&str]) -> Proxy {
    let mut pool = given_backends_passing_their_probes(names, "");
    serve_pages(&mut pool, ms(20), secs(1), &[]);
    pool
}

/// A second of pages from 40 s, all answered; then `name`'s probe times out at 48 s.
fn when_its_probe_times_out_at_48s_while_pages_answer(pool: &mut Proxy, name: &str) {
    serve_pages(pool, secs(40), secs(41), &[]);
    timed_out(pool, name, secs(48));
}

/// app1 and app2 served a second of pages, all answered; then app1's probe timed out at 8 s.
fn given_app1_timed_out_while_its_pages_answered() -> Proxy {
    let mut pool = given_pages_served_for_a_second(&["app1", "app2"]);
    timed_out(&mut pool, "app1", secs(8));
    pool
}

#[test]
fn a_probe_that_times_out_while_pages_answer_leaves_its_backend_in_rotation() {
    let mut pool = given_two_backends_passing_their_probes();
    serve_pages(&mut pool, ms(20), secs(20), &[]);
    timed_out(&mut pool, "app1", secs(20));
    assert_eq!(routable(&pool), ["app1", "app2"]);
    serve_pages(&mut pool, secs(20), secs(30), &[]);
    timed_out(&mut pool, "app1", secs(30));
    assert_eq!(routable(&pool), ["app1", "app2"]);
    let contradicted =
        |e: &Event| matches!(e, Event::ProbeContradicted { name, .. } if name == "app1");
    assert_eq!(logged(&pool, contradicted), 1, "reported once per stretch");
    assert_eq!(pool.members()[0].evidence.active.status, Health::Healthy);
}

#[test]
fn a_probe_that_times_out_while_its_requests_hang_takes_its_backend_out() {
    let mut pool = given_two_backends_passing_their_probes();
    serve_pages(&mut pool, ms(20), secs(10), &[]);
    serve_pages(&mut pool, secs(10), secs(20), &["app1"]);
    timed_out(&mut pool, "app1", secs(20));
    assert_eq!(routable(&pool), ["app2"]);
}

#[test]
fn backends_whose_probes_time_out_rounds_apart_while_pages_answer_all_come_back() {
    // Little traffic: no page answered while app1's probe waited, but its last ones were.
    let mut pool = given_app1_timed_out_while_its_pages_answered();
    assert_eq!(routable(&pool), ["app2"]);
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app2");
    assert_eq!(routable(&pool), ["app1", "app2"], "40 s apart, alike");
    let back = pool.events.iter().find_map(|e| match e {
        Event::BackAlike { name, peers, .. } => Some((name.clone(), peers.clone())),
        _ => None,
    });
    assert_eq!(back, Some(("app1".to_owned(), vec!["app2".to_owned()])));
    assert_eq!(
        back_alike(&pool),
        ["app1 back in rotation: its probes and app2's fail alike (timeout) while pages answer"]
    );
}

#[test]
fn a_backend_whose_pages_failed_when_it_went_down_stays_out_when_the_rest_fail_alike() {
    let mut pool = given_two_backends_passing_their_probes();
    pool.serve(ms(20), secs(1), 20, |name, _| {
        Some(answered(if name == "app1" { 500 } else { 200 }))
    });
    timed_out(&mut pool, "app1", secs(8));
    assert_eq!(routable(&pool), ["app2"]);
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app2");
    assert_eq!(
        routable(&pool),
        ["app2"],
        "app1 went down for its own reasons"
    );
}

/// Pages served at 20 requests a second from `from` until `until`: `name`'s answered 500, the
/// others' 200.
fn pages_fail_at(pool: &mut Proxy, name: &str, from: Duration, until: Duration) {
    pool.serve(from, until, 20, |to, _| {
        Some(answered(if to == name { 500 } else { 200 }))
    });
}

#[test]
fn a_backend_back_with_its_peers_gives_way_to_them_when_its_own_pages_start_failing() {
    let mut pool = given_app1_timed_out_while_its_pages_answered();
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app2");
    assert_eq!(routable(&pool), ["app1", "app2"], "a shared cause");
    pages_fail_at(&mut pool, "app2", secs(50), secs(51));
    assert_eq!(
        routable(&pool),
        ["app1"],
        "app2, the last to go down, now fails for its own reasons; app1's pages answer"
    );
}

#[test]
fn when_the_last_backend_to_go_down_fails_its_pages_those_a_shared_cause_took_out_earlier_serve() {
    let mut pool = given_app1_timed_out_while_its_pages_answered();
    assert_eq!(routable(&pool), ["app2"]);
    pages_fail_at(&mut pool, "app2", secs(40), secs(41));
    timed_out(&mut pool, "app2", secs(48));
    assert_eq!(routable(&pool), ["app1"]);
    assert_eq!(
        back_alike(&pool),
        ["app1 back in rotation: its probes failed (timeout) while its pages answered; app2's pages fail"]
    );
}

#[test]
fn the_last_backend_to_go_down_while_its_pages_answered_sets_how_a_shared_cause_fails() {
    let mut pool = given_pages_served_for_a_second(&["app1", "app2", "app3"]);
    probe(&mut pool, "app1", SOFT_503, secs(2));
    timed_out(&mut pool, "app2", secs(8));
    assert_eq!(routable(&pool), ["app3"]);
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app3");
    assert_eq!(
        routable(&pool),
        ["app2", "app3"],
        "app3's probes time out like app2's; app1's answered 503"
    );
    assert_eq!(
        back_alike(&pool),
        ["app2 back in rotation: its probes and app3's fail alike (timeout) while pages answer"]
    );
}

#[test]
fn a_shared_cause_brings_nobody_back_unless_every_backend_that_went_down_last_failed_alike() {
    let mut pool = given_pages_served_for_a_second(&["app1", "app2", "app3"]);
    timed_out(&mut pool, "app1", secs(8));
    assert_eq!(routable(&pool), ["app2", "app3"]);
    serve_pages(&mut pool, secs(40), secs(41), &[]);
    probe(&mut pool, "app3", SOFT_503, secs(41));
    timed_out(&mut pool, "app2", secs(48));
    assert_eq!(
        routable(&pool),
        ["app2", "app3"],
        "app3 went down with app2 but answered 503: app1's timeouts are not explained"
    );
    assert!(back_alike(&pool).is_empty());
}

#[test]
fn a_shared_cause_among_the_backends_that_stay_leaves_a_draining_one_out_and_names_them() {
    let mut pool = given_backends_passing_their_probes(&["app1", "app2", "app3"], "");
    request(&mut pool, "app1", answered(200).signalled(true), ms(20));
    serve_pages(&mut pool, ms(20), secs(1), &[]);
    timed_out(&mut pool, "app2", secs(8));
    assert_eq!(routable(&pool), ["app3"]);
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app3");
    assert_eq!(routable(&pool), ["app2", "app3"]);
    assert_eq!(
        back_alike(&pool),
        ["app2 back in rotation: its probes and app3's fail alike (timeout) while pages answer"]
    );
}

#[test]
fn backends_that_went_down_differently_are_not_a_shared_cause() {
    let mut pool = given_pages_served_for_a_second(&["app1", "app2"]);
    probe(&mut pool, "app1", SOFT_503, secs(2));
    when_its_probe_times_out_at_48s_while_pages_answer(&mut pool, "app2");
    assert_eq!(routable(&pool), ["app2"]);
}

/// Found by the history property through the .wasm: an ejection the cap lifts and imposes again
/// (a peer's probes changing how many backends the cap counts) probed the backend "at once" each
/// time, several probes in one interval.
#[test]
fn a_backend_is_probed_at_once_once_per_ejection_however_often_the_cap_lets_it_back() {
    let names = ["app1", "app2", "app3"];
    let mut pool = given_backends_passing_their_probes(&names, r#""max_ejection_percent":34"#);
    let probes_of_app2 = |pool: &mut Proxy, at| pool.tick(at).contains(&1);
    pool.tick(ms(200)); // the first round
    assert!(!probes_of_app2(&mut pool, ms(400)));
    for t in 1..=3 {
        request(&mut pool, "app2", answered(502), secs(1) + ms(t));
    }
    assert_eq!(pool.ejected(), [false, true, false]);
    assert!(
        probes_of_app2(&mut pool, secs(2)),
        "probed at once when ejected"
    );
    for (k, (app3, ejected)) in [(SOFT_503, false), (ProbeOutcome::Pass, true)]
        .into_iter()
        .cycle()
        .take(4)
        .enumerate()
    {
        let at = secs(2) + ms(400) * (k as u32 + 1);
        probe(&mut pool, "app3", app3, at);
        assert_eq!(pool.ejected(), [false, ejected, false], "{k}");
        assert!(!probes_of_app2(&mut pool, at), "not again ({k})");
    }
}

/// Found by the history property through the .wasm: a backend re-added while its failures are
/// still on record is probed as it joins, and its first passing probe lets the cap eject it on
/// those failures; it was then probed "at once" again, 20 ms after the probe that just passed.
#[test]
fn a_backend_re_added_with_failures_on_record_is_not_probed_twice_as_it_joins() {
    let mut pool = given_two_backends_passing_their_probes();
    pool.tick(ms(200)); // the first round
    for t in 1..=3 {
        request(&mut pool, "app2", answered(502), secs(1) + ms(t));
    }
    pool.reconfigure(config(&["app1"], ""), secs(2));
    pool.reconfigure(config(&["app1", "app2"], ""), secs(3));
    let table = pool.table.clone();
    let effects = pool.pool.passive_written(&table, None, secs(3));
    pool.carry_out(effects, secs(3));
    assert!(
        pool.tick(secs(3)).contains(&1),
        "the new member is probed as it joins"
    );
    probe(&mut pool, "app2", ProbeOutcome::Pass, secs(3) + ms(1));
    assert_eq!(
        pool.ejected(),
        [false, true],
        "its failures eject it once it passes"
    );
    assert!(
        pool.tick(secs(3) + ms(20)).is_empty(),
        "a probe just passed"
    );
}

/// Found by the history property through the .wasm: a slow probe answer that arrived after a
/// newer probe's failure made a backend healthy again (a probe sent as it was re-added, answered
/// 300 ms later, overtaken by the next round's 502).
#[test]
fn a_slow_probe_answer_overtaken_by_a_newer_probes_failure_is_dropped() {
    let mut pool = given_two_backends_passing_their_probes();
    let _ = pool.pool.probe_sent(0, 100, secs(1));
    probe(&mut pool, "app1", SOFT_503, secs(2));
    assert_eq!(routable(&pool), ["app2"]);
    let effects = pool
        .pool
        .probe_answered(100, answer_from_backend(200), secs(2) + ms(300));
    pool.carry_out(effects, secs(2) + ms(300));
    assert_eq!(routable(&pool), ["app2"], "the older probe says less");
}

/// Found on a real Envoy: a backend whose probe saw its break before any user did went down
/// "while its pages answered", and came back with a peer that broke the same way later. Brought
/// back, its first failed page takes it out again.
#[test]
fn a_backend_back_with_its_peers_leaves_again_at_its_first_failed_page() {
    let mut pool = given_pages_served_for_a_second(&["app1", "app2"]);
    let soft_502 = ProbeOutcome::Soft(Said::Status(502));
    probe(&mut pool, "app1", soft_502, secs(2));
    serve_pages(&mut pool, secs(39), secs(40), &[]);
    probe(&mut pool, "app2", soft_502, secs(40));
    assert_eq!(
        routable(&pool),
        ["app1", "app2"],
        "down alike, pages answering"
    );
    request(&mut pool, "app1", answered(502), secs(41));
    assert_eq!(routable(&pool), ["app2"]);
}

/// The re-pick the module makes per request: a backend with a failure on record here may just
/// have been ejected by another VM, so its pick is checked against the process-wide table first,
/// and only such a pick reads it.
#[test]
fn a_pick_of_a_backend_another_vm_just_ejected_is_checked_and_goes_elsewhere() {
    let (mut here, mut there) = (
        given_two_backends_passing_their_probes(),
        given_two_backends_passing_their_probes(),
    );
    request(&mut here, "app2", answered(502), secs(1));
    for t in 1..=3 {
        request(&mut there, "app2", answered(502), secs(1) + ms(t));
    }
    assert_eq!(there.ejected(), [false, true]);
    assert_eq!(here.ejected(), [false, false], "one failure here");
    let mut reads = 0;
    let mut carried = Vec::new();
    let picks: Vec<Pick> = (0..4)
        .map(|_| {
            here.pool.pick_checked(
                secs(2),
                || {
                    reads += 1;
                    Some(there.table.clone())
                },
                |_, effects| carried.push(effects),
            )
        })
        .collect();
    assert_eq!(picks, [Pick::Backend(0); 4], "never the ejected backend");
    assert_eq!(reads, 1, "only the suspect pick reads the table");
    assert_eq!(carried.len(), 1);
    assert!(here.ejected()[1], "taken in from the table");
}
