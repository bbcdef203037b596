//! Thresholds at their boundaries: active `passes`/`fails`, the passive window, in-flight latency.

use crate::support;

use support::*;
use upcheck_policy::active::Reason;
use upcheck_policy::outcome::About;
use upcheck_policy::passive::Recorded;
use upcheck_policy::{
    ActiveHealth, Config, Health, Outstanding, Pages, PassiveHealth, ProbeOutcome, Transition,
};

fn active(passes: u32, fails: u32) -> Config {
    let extra = format!(r#""health_checks":{{"active":{{"passes":{passes},"fails":{fails}}}}}"#);
    config(&["a"], &extra)
}

#[test]
fn a_backend_becomes_healthy_on_exactly_the_passes_th_consecutive_pass() {
    let c = active(2, 1);
    let a = &c.health_checks.active;
    let mut h = ActiveHealth::new(secs(0));
    assert_eq!(
        h.observe(ProbeOutcome::Pass, secs(1), a, Pages::Unknown),
        Transition::Pending {
            toward: Health::Healthy,
            seen: 1,
            needed: 2
        }
    );
    assert_eq!(h.status, Health::Unknown);
    assert_eq!(
        h.observe(ProbeOutcome::Pass, secs(2), a, Pages::Unknown),
        Transition::Changed {
            from: Health::Unknown,
            to: Health::Healthy,
            reason: Reason {
                outcome: ProbeOutcome::Pass,
                streak: 2
            }
        }
    );
    assert_eq!(
        h.observe(ProbeOutcome::Pass, secs(3), a, Pages::Unknown),
        Transition::Unchanged
    );
}

#[test]
fn a_failure_between_passes_restarts_the_streak() {
    let c = active(2, 3);
    let a = &c.health_checks.active;
    let mut h = ActiveHealth::new(secs(0));
    h.observe(ProbeOutcome::Pass, secs(1), a, Pages::Unknown);
    h.observe(ProbeOutcome::Pass, secs(2), a, Pages::Unknown);
    h.observe(TIMEOUT, secs(3), a, Pages::Unknown);
    h.observe(TIMEOUT, secs(4), a, Pages::Unknown);
    assert_eq!(
        h.observe(ProbeOutcome::Pass, secs(5), a, Pages::Unknown),
        Transition::Unchanged
    );
    h.observe(TIMEOUT, secs(6), a, Pages::Unknown);
    h.observe(TIMEOUT, secs(7), a, Pages::Unknown);
    assert_eq!(
        h.status,
        Health::Healthy,
        "two of three failures are not enough"
    );
    let t = h.observe(ProbeOutcome::Refused, secs(8), a, Pages::Unknown);
    assert!(
        matches!(
            t,
            Transition::Changed {
                to: Health::Unhealthy,
                ..
            }
        ),
        "{t:?}"
    );
    assert_eq!(h.down_since(), Some(secs(8)));
}

#[test]
fn the_reason_reads_as_a_log_line() {
    let r = Reason {
        outcome: TIMEOUT,
        streak: 1,
    };
    assert_eq!(r.to_string(), "1 probe timed out after 5.0s");
    let r = Reason {
        outcome: SOFT_503,
        streak: 3,
    };
    assert_eq!(r.to_string(), "3 probes answered 503");
}

fn passive_config() -> Config {
    config(&["a"], "")
}

#[test]
fn a_third_failure_9999ms_after_the_first_ejects_and_at_10001ms_does_not() {
    let c = passive_config();
    let p = &c.health_checks.passive;
    let mut h = PassiveHealth::default();
    h.record(ms(0), About::Backend, p);
    h.record(ms(5_000), About::Backend, p);
    assert_eq!(
        h.record(ms(9_999), About::Backend, p),
        Recorded::Filled { until: ms(10_000) }
    );
    assert!(h.full(ms(9_999), p));

    let mut h = PassiveHealth::default();
    h.record(ms(0), About::Backend, p);
    h.record(ms(5_000), About::Backend, p);
    assert_eq!(
        h.record(ms(10_001), About::Backend, p),
        Recorded::Counted { count: 2 }
    );
    assert!(!h.full(ms(10_001), p));
}

#[test]
fn an_ejection_ends_exactly_when_the_oldest_counted_failure_expires() {
    let c = passive_config();
    let p = &c.health_checks.passive;
    let mut h = PassiveHealth::default();
    for t in [1_000, 2_000, 3_000] {
        h.record(ms(t), About::Backend, p);
    }
    assert_eq!(h.ejected_since(ms(10_999), p), Some(ms(3_000)));
    assert_eq!(h.ejected_since(ms(11_000), p), None);
}

#[test]
fn successes_do_not_erase_remembered_failures() {
    let mut pool = given_backends_passing_their_probes(&["a", "b"], "");
    for (t, outcome) in [
        (100, answered(502)),
        (200, answered(200)),
        (300, answered(502)),
        (400, answered(200)),
        (500, answered(502)),
    ] {
        request(&mut pool, "b", outcome, ms(t));
    }
    assert_eq!(routable(&pool), ["a"]);
}

#[test]
fn memory_per_backend_stays_at_max_fails_whatever_the_traffic() {
    let c = passive_config();
    let p = &c.health_checks.passive;
    let mut h = PassiveHealth::default();
    for t in 0..100_000 {
        h.record(ms(t), About::Backend, p);
    }
    let size = |h: &PassiveHealth| {
        upcheck_policy::tables::encode_passive(&vec![("a".to_owned(), h.clone())]).len()
    };
    let grown = size(&h) - size(&PassiveHealth::default());
    assert!(grown < 48, "window grew by {grown} bytes");
    assert_eq!(h.count(ms(100_000), p), 3);
}

#[test]
fn a_request_counts_as_failed_the_moment_it_is_unhealthy_latency_late() {
    let mut flight = Outstanding::default();
    let first = flight.begin(1, 0, ms(0)).expect("a slot");
    let second = flight.begin(2, 1, ms(500)).expect("a slot");
    assert!(flight.overdue(ms(999), ms(1_000)).is_empty());
    assert_eq!(
        flight.overdue(ms(1_000), ms(1_000)),
        [upcheck_policy::passive::Late {
            backend: 0,
            at: ms(1_000),
            waited: ms(1_000)
        }]
    );
    assert!(
        flight.overdue(ms(1_200), ms(1_000)).is_empty(),
        "counted once"
    );
    assert_eq!(
        flight.end(1, first),
        Some((ms(0), true)),
        "its completion must not count again"
    );
    assert_eq!(flight.end(2, first), None, "kept where request 1 was");
    assert_eq!(flight.end(2, second), Some((ms(500), false)));
    assert_eq!(flight.end(2, second), None, "ended once");
    let third = flight.begin(3, 0, ms(600)).expect("a slot");
    assert_eq!(third, second, "a slot a request ended in takes the next");
    assert_eq!(
        flight.end(2, third),
        None,
        "a slot since taken is not request 2's"
    );
    assert_eq!(flight.end(3, third), Some((ms(600), false)));
    assert!(flight.starts(0).is_empty() && flight.starts(1).is_empty());
}

#[test]
fn latency_counts_only_when_unhealthy_latency_is_set_and_reached() {
    let c = config(
        &["a"],
        r#""health_checks":{"passive":{"unhealthy_latency":"1s"}}"#,
    );
    let p = &c.health_checks.passive;
    let slow = |latency| upcheck_policy::RequestOutcome::Answered {
        status: 200,
        latency,
        grpc: None,
    };
    assert!(slow(ms(999)).failure(p).is_none());
    assert!(slow(ms(1_000)).failure(p).is_some());
    assert!(slow(ms(5_000))
        .failure(&passive_config().health_checks.passive)
        .is_none());
    assert!(upcheck_policy::RequestOutcome::ClientGone
        .failure(p)
        .is_none());
}

#[test]
fn a_probe_the_host_never_answers_counts_as_timed_out_after_twice_its_timeout_and_its_late_answer_is_ignored(
) {
    let mut proxy = pool(&["app1", "app2"]);
    probe(&mut proxy, "app1", ProbeOutcome::Pass, ms(10));
    let app2 = proxy.index_of("app2").expect("configured");
    let status = |proxy: &Proxy| proxy.members()[app2].evidence.active.status;
    let _ = proxy.probe_sent(app2, 999, ms(20));
    proxy.tick(secs(10) + ms(19));
    assert_eq!(status(&proxy), Health::Unknown, "still waited for");
    proxy.tick(secs(10) + ms(20));
    assert_eq!(status(&proxy), Health::Unhealthy, "given up as timed out");
    let late = proxy.probe_answered(999, answer_from_backend(200), secs(11));
    proxy.carry_out(late, secs(11));
    assert_eq!(
        status(&proxy),
        Health::Unhealthy,
        "the probe was forgotten: its answer is nobody's"
    );
}
