//! Peer-relative outlier detection, driven with simulated time at the scenarios' traffic: two
//! backends behind round robin, 40 requests a second in all (2 at low traffic), every outcome
//! counted and every backend judged as each request starts and ends. The last part drives the
//! same through the pool, the pipeline that ships (support's `Proxy` plays the adapter).
//!
//! The figures (failures before an ejection, time to it) are printed; run with
//! `cargo test -p upcheck-policy --test policy outlier:: -- --nocapture` to see them.

use crate::support;

use proptest::prelude::*;
use std::time::Duration;
use support::{
    answered, given_backends_passing_their_probes, given_two_backends_passing_their_probes, ms,
    secs, Proxy, Served,
};
use upcheck_policy::config::Outlier;
use upcheck_policy::events::EjectionReason;
use upcheck_policy::outlier::{
    judge, run_rule, FailureKind, Standing, Traffic, Verdict, WindowClock,
};
use upcheck_policy::{Event, ProbeOutcome, ProxyFailure, RequestOutcome, Retried, Time};

const WINDOW: Duration = Duration::from_secs(10);
const HTTP_500: Option<FailureKind> = Some(FailureKind::Status(500));

/// A pseudo-random sequence (splitmix64): every run sees the same requests.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// A latency between `low` and `high` milliseconds.
    fn between(&mut self, low: u64, high: u64) -> Duration {
        ms(low + self.next() % (high - low))
    }
}

/// How a backend answers one request.
struct Answer {
    failure: Option<FailureKind>,
    latency: Duration,
}

fn ok(latency: Duration) -> Answer {
    Answer {
        failure: None,
        latency,
    }
}

fn http_500() -> Answer {
    Answer {
        failure: HTTP_500,
        latency: ms(5),
    }
}

struct Server {
    /// When it enters rotation.
    joins: Time,
    traffic: Traffic,
    standing: Standing,
}

struct Request {
    backend: usize,
    start: Time,
    end: Time,
    failure: Option<FailureKind>,
    latency: Duration,
}

/// A verdict the detector reached, and the ejection it led to when the simulation ejects.
#[derive(Debug)]
struct Judged {
    at: Time,
    backend: usize,
    verdict: Verdict,
    ejection: Option<Duration>,
}

/// Two or more backends behind round robin; outlier ejections take a backend out of rotation.
struct Sim {
    config: Outlier,
    servers: Vec<Server>,
    in_flight: Vec<Request>,
    /// Every request ended, for counting what users got.
    ended: Vec<Request>,
    cursor: usize,
    /// Whether verdicts eject (else they are only noted).
    ejects: bool,
    judged: Vec<Judged>,
    readmitted: Vec<(Time, usize)>,
}

impl Sim {
    /// Backends entering rotation at `joins`.
    fn new(joins: &[Time]) -> Sim {
        Sim {
            config: Outlier::default(),
            servers: joins
                .iter()
                .map(|&joins| Server {
                    joins,
                    traffic: Traffic::default(),
                    standing: Standing::default(),
                })
                .collect(),
            in_flight: Vec::new(),
            ended: Vec::new(),
            cursor: 0,
            ejects: true,
            judged: Vec::new(),
            readmitted: Vec::new(),
        }
    }

    fn observing_only(mut self) -> Sim {
        self.ejects = false;
        self
    }

    fn in_rotation(&self, backend: usize, now: Time) -> bool {
        let server = &self.servers[backend];
        server.joins <= now && !server.standing.is_ejected(now)
    }

    /// Sends `per_second` requests a second from `from` until `until`, each answered as `answer`
    /// says for (backend, start).
    fn run(
        &mut self,
        from: Time,
        until: Time,
        per_second: u32,
        mut answer: impl FnMut(usize, Time) -> Answer,
    ) {
        let every = secs(1) / per_second;
        let mut now = from;
        while now < until {
            self.settle(now);
            let n = self.servers.len();
            let next = (1..=n)
                .map(|k| (self.cursor + k) % n)
                .find(|&b| self.in_rotation(b, now));
            if let Some(backend) = next {
                self.cursor = backend;
                let Answer { failure, latency } = answer(backend, now);
                self.in_flight.push(Request {
                    backend,
                    start: now,
                    end: now + latency,
                    failure,
                    latency,
                });
                self.judge_all(now);
            }
            now += every;
        }
        self.settle(until);
    }

    /// Ends every request due by `now`, in order, judging after each.
    fn settle(&mut self, now: Time) {
        while let Some(i) = (0..self.in_flight.len())
            .filter(|&i| self.in_flight[i].end <= now)
            .min_by_key(|&i| self.in_flight[i].end)
        {
            let request = self.in_flight.swap_remove(i);
            self.servers[request.backend].traffic.record(
                request.end,
                request.failure,
                Some(request.latency),
                WINDOW,
            );
            let end = request.end;
            self.ended.push(request);
            self.judge_all(end);
        }
        self.judge_all(now);
    }

    fn judge_all(&mut self, now: Time) {
        for backend in 0..self.servers.len() {
            if self.servers[backend].standing.tick(now).is_some() {
                self.readmitted.push((now, backend));
            }
        }
        for backend in 0..self.servers.len() {
            if !self.in_rotation(backend, now) {
                continue;
            }
            let peers = (0..self.servers.len())
                .filter(|&p| p != backend && self.in_rotation(p, now))
                .map(|p| &self.servers[p].traffic);
            let in_flight: Vec<Time> = self
                .in_flight
                .iter()
                .filter(|r| r.backend == backend)
                .map(|r| r.start)
                .collect();
            let server = &self.servers[backend];
            let Some(verdict) = judge(
                &server.traffic,
                &server.standing,
                &in_flight,
                peers,
                &self.config,
                now,
            ) else {
                continue;
            };
            let ejection = self.ejects.then(|| {
                let standing = &mut self.servers[backend].standing;
                standing.eject(verdict.clone(), now, &self.config).length
            });
            self.judged.push(Judged {
                at: now,
                backend,
                verdict,
                ejection,
            });
        }
    }

    /// Requests to `backend` started in [from, to) that failed.
    fn failed(&self, backend: usize, from: Time, to: Time) -> usize {
        self.requests(backend, from, to)
            .filter(|r| r.failure.is_some())
            .count()
    }

    /// Requests to `backend` started in [from, to).
    fn requests(&self, backend: usize, from: Time, to: Time) -> impl Iterator<Item = &Request> {
        self.ended
            .iter()
            .chain(&self.in_flight)
            .filter(move |r| r.backend == backend && from <= r.start && r.start < to)
    }

    /// The first verdict on `backend` at or after `from`.
    fn first_verdict(&self, backend: usize, from: Time) -> Option<&Judged> {
        self.judged
            .iter()
            .find(|j| j.backend == backend && j.at >= from)
    }

    /// The first verdict of `kind` on `backend`.
    fn first(&self, backend: usize, kind: fn(&Verdict) -> bool) -> Option<&Judged> {
        self.judged
            .iter()
            .find(|j| j.backend == backend && kind(&j.verdict))
    }
}

const APP1: usize = 0;
const APP2: usize = 1;

fn failing(v: &Verdict) -> bool {
    matches!(v, Verdict::Failing { .. })
}

fn slow(v: &Verdict) -> bool {
    matches!(v, Verdict::Slow { .. })
}

fn stalled(v: &Verdict) -> bool {
    matches!(v, Verdict::Stalled { .. })
}

/// How long after `from` something happened, for the printed figures.
fn after(at: Time, from: Time) -> String {
    format!("{} ms", (at - from).as_millis())
}

/// app1 serving alone; app2 joins at 20 s having booted without its database and 500s every page
/// until it is fixed at 200 s; it loses its database again at 400 s. 40 requests a second.
fn database_unreachable_on_app2() -> Sim {
    let mut sim = Sim::new(&[secs(0), secs(20)]);
    let mut dice = Dice(1);
    sim.run(secs(0), secs(500), 40, |backend, start| {
        let broken = (start < secs(200) || start >= secs(400)) && backend == APP2;
        if broken {
            http_500()
        } else {
            ok(dice.between(20, 80))
        }
    });
    sim
}

/// What app2's first ejection cost when it started failing every page at `onset`.
struct Cost {
    failed: usize,
    after: Duration,
    verdict: Verdict,
    ejection: Option<Duration>,
}

/// app2 failing every page from `onset`, having just joined the rotation then (`booted`) or
/// having served well until then; app1 serving throughout.
fn app2_failing_from(onset: Time, booted: bool, per_second: u32) -> Cost {
    let joins = if booted { onset } else { secs(0) };
    let mut sim = Sim::new(&[secs(0), joins]);
    let mut dice = Dice(onset.as_millis() as u64);
    sim.run(secs(0), onset + secs(20), per_second, |backend, start| {
        if backend == APP2 && start >= onset {
            http_500()
        } else {
            ok(dice.between(20, 80))
        }
    });
    let first = sim.first_verdict(APP2, secs(0)).expect("app2 is judged");
    assert!(sim.first_verdict(APP1, secs(0)).is_none());
    Cost {
        failed: sim.failed(APP2, onset, first.at),
        after: first.at - onset,
        verdict: first.verdict.clone(),
        ejection: first.ejection,
    }
}

/// The cost at 40 onsets 130 ms apart, across a whole half-window (5 s) and at many offsets from
/// the requests: where in its half-window a failure falls changes its weight.
fn costs(booted: bool, per_second: u32, what: &str) -> Vec<Cost> {
    let costs: Vec<Cost> = (0..40)
        .map(|k| app2_failing_from(secs(20) + ms(130 * k), booted, per_second))
        .collect();
    let failed = costs.iter().map(|c| c.failed);
    let after = costs.iter().map(|c| c.after.as_millis());
    println!(
        "{what} ({per_second} req/s in all, 40 onsets): judged after {}-{} failures, {}-{} ms after the onset; e.g. {}",
        failed.clone().min().unwrap_or_default(),
        failed.max().unwrap_or_default(),
        after.clone().min().unwrap_or_default(),
        after.max().unwrap_or_default(),
        costs[0].verdict
    );
    costs
}

#[test]
fn a_backend_booted_without_its_database_is_ejected_by_its_sixth_failure() {
    for cost in costs(true, 40, "booted without its database") {
        assert!(failing(&cost.verdict), "{:?}", cost.verdict);
        assert!((5..=6).contains(&cost.failed), "{} failures", cost.failed);
        assert_eq!(cost.ejection, Some(secs(30)));
        assert!(cost.verdict.to_string().contains("requests failed (500)"));
    }
}

#[test]
fn a_backend_that_loses_its_database_mid_traffic_is_ejected_a_few_failures_later_than_one_booted_without_it(
) {
    // Its successes still in the window dilute its share: a few more failures than the 5 or 6 of
    // a backend broken from the start.
    for cost in costs(false, 40, "losing its database mid-traffic") {
        assert!(failing(&cost.verdict), "{:?}", cost.verdict);
        assert!((6..=10).contains(&cost.failed), "{} failures", cost.failed);
    }
}

#[test]
fn at_two_requests_a_second_a_backend_failing_every_page_is_ejected_before_its_tenth_failure() {
    for (booted, what) in [
        (true, "booted without its database"),
        (false, "losing its database"),
    ] {
        for cost in costs(booted, 2, what) {
            assert!(failing(&cost.verdict), "{:?}", cost.verdict);
            assert!(cost.failed < 10, "{} failures", cost.failed);
        }
    }
}

#[test]
fn a_readmitted_backend_still_failing_costs_two_requests_and_goes_out_twice_as_long() {
    let sim = database_unreachable_on_app2();
    let ejections: Vec<&Judged> = sim
        .judged
        .iter()
        .filter(|j| j.backend == APP2 && j.at < secs(200))
        .collect();
    let lengths: Vec<Duration> = ejections.iter().filter_map(|j| j.ejection).collect();
    assert_eq!(lengths, [secs(30), secs(60), secs(120)]);
    for pair in ejections.windows(2) {
        let readmitted = pair[0].at + pair[0].ejection.unwrap_or_default();
        let failed = sim.failed(APP2, readmitted, pair[1].at);
        println!(
            "re-admitted at {}: ejected again after {failed} failures, {} later ({} for {})",
            after(readmitted, secs(0)),
            after(pair[1].at, readmitted),
            pair[1].verdict,
            duration(pair[1].ejection),
        );
        assert_eq!(failed, 2, "failures between re-admission and ejection");
        assert!(pair[1]
            .verdict
            .to_string()
            .contains("since it was re-admitted"));
    }
    let readmissions = sim
        .readmitted
        .iter()
        .filter(|(at, b)| *b == APP2 && *at < secs(400));
    assert_eq!(
        readmissions.count(),
        3,
        "re-admitted twice while broken, once after the fix"
    );
}

fn duration(d: Option<Duration>) -> String {
    d.map(|d| format!("{}s", d.as_secs())).unwrap_or_default()
}

#[test]
fn a_backend_back_in_rotation_for_as_long_as_its_last_ejection_is_clean_again() {
    let sim = database_unreachable_on_app2();
    // Fixed at 200 s during its third ejection (120 s): re-admitted about 230 s, clean about 350 s.
    assert!(sim
        .judged
        .iter()
        .all(|j| !(secs(200)..secs(400)).contains(&j.at)));
    let again = sim.first_verdict(APP2, secs(400)).expect("judged again");
    assert_eq!(again.ejection, Some(secs(30)), "a first offence again");
}

#[test]
fn an_app_bug_that_fails_a_fifth_of_requests_on_every_backend_ejects_nobody() {
    let sim = given_both_failing_alike_for_ten_minutes(40, 20, 2);
    let failed = sim.failed(APP1, secs(0), secs(600)) + sim.failed(APP2, secs(0), secs(600));
    println!(
        "a fifth of requests failing everywhere for 10 min: {failed} failures, {} verdicts",
        sim.judged.len()
    );
    assert!(failed > 4_000, "the bug fails requests: {failed}");
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

/// `backends` behind round robin, `per_second` requests a second in all, each failing (500) as
/// `fails` says for (backend, start), else answered in 20-80 ms, from 0 to `until`.
fn run_failing(
    joins: &[Time],
    config: Outlier,
    per_second: u32,
    until: Time,
    seed: u64,
    mut fails: impl FnMut(usize, Time, &mut Dice) -> bool,
) -> Sim {
    let mut sim = Sim::new(joins);
    sim.config = config;
    let mut dice = Dice(seed);
    sim.run(secs(0), until, per_second, |backend, start| {
        if fails(backend, start, &mut dice) {
            http_500()
        } else {
            ok(dice.between(20, 80))
        }
    });
    sim
}

/// Two backends in rotation from 0 s for ten minutes, `per_second` requests a second in all,
/// each failing (500) `percent` times in a hundred (dice from `seed`), else answered in 20-80 ms.
fn given_both_failing_alike_for_ten_minutes(per_second: u32, percent: u64, seed: u64) -> Sim {
    run_failing(
        &[secs(0); 2],
        Outlier::default(),
        per_second,
        secs(600),
        seed,
        |_, _, dice| dice.chance(percent),
    )
}

/// The last of `backends` restarted with a release whose pages fail a third of the time
/// (at random), rejoining the rotation at `onset`; the others serve throughout.
fn bad_release(backends: usize, per_second: u32, onset: Time, config: Outlier) -> Sim {
    let bad = backends - 1;
    let mut joins = vec![secs(0); backends];
    joins[bad] = onset;
    let until = onset + secs(60);
    run_failing(
        &joins,
        config,
        per_second,
        until,
        onset.as_millis() as u64,
        |b, _, dice| b == bad && dice.chance(33),
    )
}

#[test]
fn a_release_failing_a_third_of_one_backends_pages_is_ejected_within_ten_failures() {
    for backends in [2, 5] {
        for per_second in [20, 50] {
            let bad = backends - 1;
            let mut failed = Vec::new();
            for k in 0..20 {
                let onset = secs(20) + ms(250 * k);
                let sim = bad_release(backends, per_second, onset, Outlier::default());
                let first = sim
                    .first_verdict(bad, secs(0))
                    .expect("the release is judged");
                assert!(failing(&first.verdict), "{:?}", first.verdict);
                assert!(
                    sim.judged.iter().all(|j| j.backend == bad),
                    "only the release: {:?}",
                    sim.judged.first()
                );
                failed.push((sim.failed(bad, onset, first.at), first.verdict.clone()));
            }
            let counts = failed.iter().map(|(n, _)| *n);
            let (least, most) = (counts.clone().min(), counts.max());
            println!(
                "a third failing on 1 of {backends} at {per_second} req/s (20 onsets): judged after \
                 {least:?}-{most:?} failures; e.g. {}",
                failed[0].1
            );
            assert!(most.is_some_and(|most| most <= 10), "{failed:?}");
        }
    }
}

#[test]
fn a_release_failing_a_third_of_one_backends_pages_mid_traffic_is_ejected_within_fifteen_failures()
{
    // Serving well until the onset: its successes in the window dilute the share.
    for per_second in [20, 50] {
        let onset = secs(20);
        let sim = run_failing(
            &[secs(0); 2],
            Outlier::default(),
            per_second,
            secs(80),
            9,
            |b, at, dice| b == APP2 && at >= onset && dice.chance(33),
        );
        let first = sim.first_verdict(APP2, secs(0)).expect("judged");
        let failed = sim.failed(APP2, onset, first.at);
        println!(
            "a third failing on app2 from 20 s at {per_second} req/s: judged after {failed} \
             failures, {} later: {}",
            after(first.at, onset),
            first.verdict
        );
        assert!(failing(&first.verdict), "{:?}", first.verdict);
        assert!(failed <= 15, "{failed} failures");
    }
}

#[test]
fn with_failure_gap_at_fifty_a_release_failing_every_third_page_stays_in_rotation() {
    let config = Outlier {
        failure_gap: 50,
        ..Outlier::default()
    };
    let mut pages = 0;
    let sim = run_failing(&[secs(0); 2], config, 50, secs(80), 15, |b, at, _| {
        let failing = b == APP2 && at >= secs(20);
        pages += u32::from(failing);
        failing && pages % 3 == 0
    });
    let failed = sim.failed(APP2, secs(20), secs(80));
    assert!(failed >= 250, "the release fails pages: {failed}");
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

#[test]
fn the_same_share_of_failures_on_every_backend_ejects_nobody() {
    for backends in [2, 5] {
        for per_second in [20, 50] {
            let sim = run_failing(
                &vec![secs(0); backends],
                Outlier::default(),
                per_second,
                secs(600),
                12,
                |_, _, dice| dice.chance(33),
            );
            let failed: usize = (0..backends)
                .map(|b| sim.failed(b, secs(0), secs(600)))
                .sum();
            println!(
                "a third failing on all {backends} at {per_second} req/s for 10 min: {failed} \
                 failures, {} verdicts",
                sim.judged.len()
            );
            assert!(failed as u32 > per_second * 600 / 4, "{failed} failures");
            assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
        }
    }
}

#[test]
fn one_percent_of_failures_on_one_backend_ejects_nobody_over_ten_minutes() {
    // At 200 requests a second the failures alone are unlikely at the peers' rate: the
    // `failure_gap` floor is what holds them back.
    for per_second in [2, 20, 50, 200] {
        let sim = run_failing(
            &[secs(0); 2],
            Outlier::default(),
            per_second,
            secs(600),
            13,
            |b, _, dice| b == APP2 && dice.chance(1),
        );
        let failed = sim.failed(APP2, secs(0), secs(600));
        println!(
            "1% failing on app2 at {per_second} req/s for 10 min: {failed} failures, {} verdicts",
            sim.judged.len()
        );
        assert!(failed > 0);
        assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
    }
}

#[test]
fn at_one_request_a_second_a_fifth_failing_on_every_backend_ejects_nobody() {
    let sim = given_both_failing_alike_for_ten_minutes(1, 20, 14);
    let failed = sim.failed(APP1, secs(0), secs(600)) + sim.failed(APP2, secs(0), secs(600));
    println!(
        "1 req/s, a fifth failing everywhere for 10 min: {failed} failures, {} verdicts",
        sim.judged.len()
    );
    assert!(failed > 60, "{failed} failures");
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

/// Both backends answer in 20-80 ms; from 20 s every request to app2 takes 3 s.
fn app2_slow(sim: &mut Sim) {
    let mut dice = Dice(3);
    sim.run(secs(0), secs(30), 40, |backend, start| {
        if backend == APP2 && start >= secs(20) {
            ok(secs(3))
        } else {
            ok(dice.between(20, 80))
        }
    });
}

#[test]
fn a_backend_that_turns_slow_is_stalled_within_a_second_from_its_requests_in_flight() {
    let mut sim = Sim::new(&[secs(0), secs(0)]);
    app2_slow(&mut sim);
    let first = sim.first_verdict(APP2, secs(0)).expect("app2 is judged");
    let sent = sim.requests(APP2, secs(20), first.at).count();
    println!(
        "turning slow (3 s a request): stalled {} after, {sent} requests sent to it meanwhile: {}",
        after(first.at, secs(20)),
        first.verdict
    );
    assert!(stalled(&first.verdict), "{:?}", first.verdict);
    assert!(first.at < secs(21), "at {:?}", first.at);
    assert_eq!(sim.judged.iter().filter(|j| j.backend == APP1).count(), 0);
}

#[test]
fn a_backend_that_turns_slow_is_judged_slow_once_its_answers_arrive() {
    let mut sim = Sim::new(&[secs(0), secs(0)]).observing_only();
    app2_slow(&mut sim);
    let first_slow = sim.first(APP2, slow).expect("judged slow");
    let answered_slow = sim
        .ended
        .iter()
        .filter(|r| r.backend == APP2 && r.latency == secs(3) && r.end <= first_slow.at)
        .count();
    println!(
        "turning slow (3 s a request): slow {} after, once {answered_slow} slow answers arrived: {}",
        after(first_slow.at, secs(20)),
        first_slow.verdict
    );
    assert!(first_slow.at >= secs(23), "no slow answer before 23 s");
    assert!(first_slow
        .verdict
        .to_string()
        .contains("2.0s to 4.0s (median)"));
    assert!(sim.first(APP2, stalled).expect("stalled first").at < first_slow.at);
    assert!(sim.first(APP1, |_| true).is_none());
}

#[test]
fn a_shared_database_that_slows_every_backend_threefold_ejects_nobody() {
    let mut sim = Sim::new(&[secs(0), secs(0)]);
    let mut dice = Dice(4);
    sim.run(secs(0), secs(600), 40, |_, start| {
        let latency = dice.between(50, 150);
        ok(if start >= secs(20) {
            latency * 3
        } else {
            latency
        })
    });
    let median = sim.servers[APP2]
        .traffic
        .median_latency_bounds(secs(600), WINDOW);
    println!(
        "every backend three times slower for 10 min: median {median:?}, {} verdicts",
        sim.judged.len()
    );
    assert!(
        median.is_some_and(|m| m.low >= sim.config.min_latency),
        "slow enough to be judged alone"
    );
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

#[test]
fn at_two_requests_a_second_one_percent_of_failures_everywhere_ejects_nobody() {
    let sim = given_both_failing_alike_for_ten_minutes(2, 1, 6);
    let failed = sim.failed(APP1, secs(0), secs(600)) + sim.failed(APP2, secs(0), secs(600));
    println!(
        "2 req/s, 1% failing everywhere for 10 min: {failed} failures, {} verdicts",
        sim.judged.len()
    );
    assert!(failed > 0);
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

#[test]
fn where_every_page_takes_five_seconds_a_five_second_request_in_flight_is_no_stall() {
    let mut sim = Sim::new(&[secs(0), secs(0)]);
    let mut dice = Dice(7);
    sim.run(
        secs(0),
        secs(120),
        40,
        |_, _| ok(dice.between(4_500, 5_500)),
    );
    let waiting = sim.in_flight.iter().filter(|r| r.backend == APP2).count();
    assert!(
        waiting >= 3 * 20,
        "{waiting} requests of up to 5.5 s in flight on app2"
    );
    assert!(sim.judged.is_empty(), "{:?}", sim.judged.first());
}

// Boundary pairs, one backend against one peer, at 10 s windows (5 s half-windows).

/// A peer that answered `n` requests in 40 ms around `at`, none failing.
fn peer(n: u32, at: Time) -> Traffic {
    let mut traffic = Traffic::default();
    for i in 0..n {
        traffic.record(at + ms(u64::from(i)), None, Some(ms(40)), WINDOW);
    }
    traffic
}

/// A backend with `failed` of `requests` failing (500), answered in 5 ms, around `at`.
fn failing_backend(failed: u32, requests: u32, at: Time) -> Traffic {
    let mut traffic = Traffic::default();
    for i in 0..requests {
        let failure = if i < failed { HTTP_500 } else { None };
        traffic.record(at + ms(u64::from(i)), failure, Some(ms(5)), WINDOW);
    }
    traffic
}

fn verdict(traffic: &Traffic, peers: &Traffic, now: Time) -> Option<Verdict> {
    judge(
        traffic,
        &Standing::default(),
        &[],
        [peers],
        &Outlier::default(),
        now,
    )
}

#[test]
fn a_failure_counts_until_the_half_window_after_its_own_has_passed_and_not_a_nanosecond_longer() {
    let mut traffic = Traffic::default();
    traffic.record(ms(4_999), HTTP_500, None, WINDOW);
    assert!(traffic.failures(ms(9_999), WINDOW) > 0.0, "just inside");
    assert_eq!(traffic.failures(ms(10_000), WINDOW), 0.0, "just outside");
    assert_eq!(
        traffic.failures(ms(4_999), WINDOW),
        1.0,
        "fully in its own half"
    );
    assert_eq!(
        traffic.failures(ms(7_500), WINDOW),
        0.5,
        "half gone halfway through the next"
    );
}

#[test]
fn a_failure_younger_than_half_the_window_always_counts_and_one_older_than_the_window_never() {
    for phase in (0..5_000).step_by(250) {
        let at = secs(100) + ms(phase);
        let mut traffic = Traffic::default();
        traffic.record(at, HTTP_500, None, WINDOW);
        assert!(
            traffic.failures(at + ms(4_999), WINDOW) > 0.0,
            "at phase {phase} ms"
        );
        assert_eq!(
            traffic.failures(at + ms(10_001), WINDOW),
            0.0,
            "at phase {phase} ms"
        );
    }
}

#[test]
fn five_failures_make_a_backend_failing_and_four_do_not() {
    let peers = peer(10, secs(1));
    let five = failing_backend(5, 5, secs(2));
    let four = failing_backend(4, 4, secs(2));
    let v = verdict(&five, &peers, secs(3)).expect("five failures");
    assert_eq!(
        v.to_string(),
        "5 of 5 requests failed (500) while its peers failed 0 of 10"
    );
    assert_eq!(verdict(&four, &peers, secs(3)), None);
}

#[test]
fn five_failures_judge_a_backend_until_their_half_window_ends_and_fade_just_after() {
    let peers = peer(10, secs(5));
    let five = failing_backend(5, 5, secs(1));
    assert!(
        verdict(&five, &peers, ms(5_000)).is_some(),
        "still counted fully"
    );
    assert_eq!(
        verdict(&five, &peers, ms(5_001)),
        None,
        "4.999 of them left"
    );
}

#[test]
fn a_failure_share_failure_gap_points_above_the_peers_is_failing_and_just_under_is_not() {
    // The default floor, 5 points: 25 of 500 against 0 of 1,000, far too many to be chance.
    let peers = peer(1_000, secs(1));
    assert!(verdict(&failing_backend(25, 500, secs(2)), &peers, secs(3)).is_some());
    // 25 of 501: 4.99 points.
    let under = failing_backend(25, 501, secs(2));
    assert_eq!(verdict(&under, &peers, secs(3)), None);
    // An operator's floor of 50 points: 10 of 20 against 0 of 40 is exactly 50, 10 of 21 under.
    let fifty = Outlier {
        failure_gap: 50,
        ..Outlier::default()
    };
    let peers = peer(40, secs(1));
    let judged = |backend: &Traffic| {
        judge(
            backend,
            &Standing::default(),
            &[],
            [&peers],
            &fifty,
            secs(3),
        )
    };
    assert!(judged(&failing_backend(10, 20, secs(2))).is_some());
    assert_eq!(judged(&failing_backend(10, 21, secs(2))), None);
}

#[test]
fn failures_less_likely_than_one_in_a_million_at_the_peers_rate_are_failing_and_likelier_ones_are_not(
) {
    // A third of 15 against 0 of 100: at the peers' rate (0.5 in 101) five failures in 15 are
    // far rarer than one in a million.
    let spotless = peer(100, secs(1));
    assert!(verdict(&failing_backend(5, 15, secs(2)), &spotless, secs(3)).is_some());
    // The same share against peers failing 2 in 100, whose rate may well be twice that: 5 of 15
    // is not enough, 15 of 45 is.
    let noisy = failing_backend(2, 100, secs(1));
    assert_eq!(
        verdict(&failing_backend(5, 15, secs(2)), &noisy, secs(3)),
        None
    );
    assert!(verdict(&failing_backend(15, 45, secs(2)), &noisy, secs(3)).is_some());
    // Half failing against peers failing a fifth: 30 points, yet likely enough in 20 requests.
    let fifth = failing_backend(20, 100, secs(1));
    assert_eq!(
        verdict(&failing_backend(10, 20, secs(2)), &fifth, secs(3)),
        None
    );
}

#[test]
fn a_backend_with_few_requests_is_not_judged_before_its_fifth_failure_even_against_spotless_peers()
{
    let spotless = peer(1_000, secs(1));
    assert_eq!(
        verdict(&failing_backend(4, 4, secs(2)), &spotless, secs(3)),
        None
    );
    assert_eq!(
        verdict(&failing_backend(4, 12, secs(2)), &spotless, secs(3)),
        None
    );
    assert!(verdict(&failing_backend(5, 15, secs(2)), &spotless, secs(3)).is_some());
}

#[test]
fn peers_with_five_requests_can_be_compared_with_and_peers_with_four_cannot() {
    let backend = failing_backend(8, 8, secs(2));
    assert!(verdict(&backend, &peer(5, secs(1)), secs(3)).is_some());
    assert_eq!(verdict(&backend, &peer(4, secs(1)), secs(3)), None);
}

#[test]
fn a_backend_without_peers_or_with_the_detector_off_is_never_judged() {
    let backend = failing_backend(8, 8, secs(2));
    let none: [&Traffic; 0] = [];
    let off = Outlier {
        enabled: false,
        ..Outlier::default()
    };
    let peers = peer(10, secs(1));
    assert_eq!(
        judge(
            &backend,
            &Standing::default(),
            &[],
            none,
            &Outlier::default(),
            secs(3)
        ),
        None
    );
    assert_eq!(
        judge(&backend, &Standing::default(), &[], [&peers], &off, secs(3)),
        None
    );
}

#[test]
fn three_requests_waiting_past_the_stall_time_are_a_stall_and_two_are_not() {
    // Peers answer within 64 ms (99%): the stall time is 500 ms, not 4 × 64 ms.
    let peers = peer(10, secs(1));
    let quiet = Traffic::default();
    let now = secs(3);
    let stuck = [now - ms(500), now - ms(600), now - ms(700)];
    let v = judge(
        &quiet,
        &Standing::default(),
        &stuck,
        [&peers],
        &Outlier::default(),
        now,
    );
    assert_eq!(
        v.map(|v| v.to_string()).as_deref(),
        Some("3 of its requests have waited 500ms or longer (the oldest 700ms) while its peers answer within 64ms (99%)")
    );
    let young = [now - ms(499), now - ms(600), now - ms(700)];
    assert_eq!(
        judge(
            &quiet,
            &Standing::default(),
            &young,
            [&peers],
            &Outlier::default(),
            now
        ),
        None
    );
    assert_eq!(
        judge(
            &quiet,
            &Standing::default(),
            &stuck[1..],
            [&peers],
            &Outlier::default(),
            now
        ),
        None
    );
}

#[test]
fn a_median_four_times_the_peers_upper_bound_is_slow_and_one_bucket_less_is_not() {
    // Peers answer in 40 ms: their median is below 64 ms, so 256 ms is exactly four times that.
    let peers = peer(10, secs(1));
    let answered_in = |latency: Duration| {
        let mut traffic = Traffic::default();
        for i in 0..5 {
            traffic.record(secs(2) + ms(i), None, Some(latency), WINDOW);
        }
        traffic
    };
    let v = verdict(&answered_in(ms(256)), &peers, secs(3));
    assert_eq!(
        v.map(|v| v.to_string()).as_deref(),
        Some(
            "its requests took 256ms to 512ms (median) while its peers answer within 64ms (median)"
        )
    );
    assert_eq!(verdict(&answered_in(ms(255)), &peers, secs(3)), None);
}

#[test]
fn latency_buckets_are_powers_of_two_milliseconds_and_the_last_is_open() {
    let bounds = |latency: Duration| {
        let mut traffic = Traffic::default();
        traffic.record(secs(1), None, Some(latency), WINDOW);
        let b = traffic
            .median_latency_bounds(secs(1), WINDOW)
            .expect("one answer");
        (b.low, b.high)
    };
    assert_eq!(bounds(Duration::from_micros(999)), (ms(0), ms(1)));
    assert_eq!(bounds(ms(1)), (ms(1), ms(2)));
    assert_eq!(bounds(ms(3_100)), (ms(2_048), ms(4_096)));
    assert_eq!(bounds(ms(16_383)), (ms(8_192), ms(16_384)));
    assert_eq!(bounds(ms(16_384)), (ms(16_384), Duration::MAX));
    assert_eq!(bounds(secs(3_600)), (ms(16_384), Duration::MAX));
}

#[test]
fn ejections_double_for_repeat_offenders_up_to_the_longest() {
    let config = Outlier::default();
    let mut standing = Standing::default();
    let reason = failing_verdict();
    let mut now = secs(0);
    let mut lengths = Vec::new();
    for _ in 0..6 {
        let ejection = standing.eject(reason.clone(), now, &config);
        assert!(standing.is_ejected(ejection.until - ms(1)));
        assert!(!standing.is_ejected(ejection.until));
        let ended = standing.tick(ejection.until).expect("the ejection ends");
        assert_eq!(ended.length, ejection.length);
        assert_eq!(standing.readmitted_at(ejection.until), Some(ejection.until));
        lengths.push(ejection.length.as_secs());
        now = ejection.until + secs(1);
    }
    assert_eq!(lengths, [30, 60, 120, 240, 300, 300]);
    // Clean once back as long as the last ejection (300 s) without an offence.
    assert_eq!(standing.tick(now + secs(298)), None);
    assert_eq!(standing.offences(), 6);
    assert_eq!(standing.readmitted_at(now + secs(299)), None);
    standing.tick(now + secs(299));
    assert_eq!(standing.offences(), 0);
    assert_eq!(
        standing.eject(reason, now + secs(300), &config).length,
        secs(30)
    );
}

fn failing_verdict() -> Verdict {
    let backend = failing_backend(6, 6, secs(2));
    verdict(&backend, &peer(7, secs(1)), secs(3)).expect("failing")
}

#[test]
fn a_verdict_reads_as_the_comparison_that_made_it() {
    assert_eq!(
        failing_verdict().to_string(),
        "6 of 6 requests failed (500) while its peers failed 0 of 7"
    );
    let mut refused = Traffic::default();
    for i in 0..5 {
        let failure = Some(FailureKind::from(ProxyFailure::Refused));
        refused.record(secs(2) + ms(i), failure, None, WINDOW);
    }
    let v = verdict(&refused, &peer(7, secs(1)), secs(3)).expect("failing");
    assert!(v.to_string().contains("(connection failed)"), "{v}");
}

#[test]
fn on_probation_two_failures_eject_again_unless_the_peers_fail_alike() {
    let config = Outlier::default();
    let mut standing = Standing::default();
    let ejection = standing.eject(failing_verdict(), secs(3), &config);
    let back = ejection.until;
    standing.tick(back);
    let two = failing_backend(2, 2, back + ms(100));
    let now = back + ms(200);
    let v = judge(&two, &standing, &[], [&peer(10, back)], &config, now).expect("two failures");
    assert!(
        v.to_string()
            .starts_with("2 of 2 requests failed (500) since it was re-admitted"),
        "{v}"
    );
    let one = failing_backend(1, 1, back + ms(100));
    assert_eq!(
        judge(&one, &standing, &[], [&peer(10, back)], &config, now),
        None
    );
    let peers_failing = failing_backend(6, 10, back);
    assert_eq!(
        judge(&two, &standing, &[], [&peers_failing], &config, now),
        None
    );
    // Without probation, two failures are not enough.
    assert_eq!(verdict(&two, &peer(10, back), now), None);
}

#[test]
fn a_traffic_survives_the_byte_table_unchanged() {
    let mut traffic = failing_backend(3, 9, secs(2));
    traffic.record(secs(7), Some(FailureKind::Timeout), Some(secs(20)), WINDOW);
    let bytes = serde_json::to_vec(&traffic).expect("serializes");
    let back: Traffic = serde_json::from_slice(&bytes).expect("deserializes");
    assert_eq!(back, traffic);
}

/// One request outcome, as a VM counts it.
#[derive(Debug, Clone)]
struct Outcome {
    /// Milliseconds after the previous outcome.
    gap_ms: u64,
    vm: usize,
    failure: Option<FailureKind>,
    latency: Option<Duration>,
    /// Whether every VM shares its counts right after this outcome.
    flush: bool,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    let failure = prop_oneof![
        Just(None),
        Just(HTTP_500),
        Just(Some(FailureKind::Status(503))),
        Just(Some(FailureKind::ConnectionFailed)),
        Just(Some(FailureKind::Timeout)),
    ];
    (
        0u64..2_000,
        0usize..3,
        failure,
        prop::option::of(0u64..40_000),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(gap_ms, vm, failure, latency, flush)| Outcome {
            gap_ms,
            vm,
            failure,
            latency: latency.map(ms),
            flush,
        })
}

proptest! {
    #[test]
    fn merging_each_vms_counts_equals_counting_everything_in_one_place(
        outcomes in prop::collection::vec(outcome(), 0..200),
        reversed in any::<bool>(),
    ) {
        let mut one_place = Traffic::default();
        let mut shared = Traffic::default();
        let mut per_vm = vec![Traffic::default(); 3];
        let share = |shared: &mut Traffic, per_vm: &mut Vec<Traffic>| {
            let mut order: Vec<usize> = (0..per_vm.len()).collect();
            if reversed {
                order.reverse();
            }
            for vm in order {
                shared.merge(&std::mem::take(&mut per_vm[vm]));
            }
        };
        let mut now = secs(0);
        for o in outcomes {
            now += ms(o.gap_ms);
            one_place.record(now, o.failure, o.latency, WINDOW);
            per_vm[o.vm].record(now, o.failure, o.latency, WINDOW);
            if o.flush {
                share(&mut shared, &mut per_vm);
            }
        }
        share(&mut shared, &mut per_vm);
        prop_assert_eq!(&shared, &one_place);
        prop_assert_eq!(shared.failures(now, WINDOW), one_place.failures(now, WINDOW));
    }

    #[test]
    fn merging_is_commutative_and_associative(
        parts in prop::collection::vec(prop::collection::vec(outcome(), 0..40), 3),
    ) {
        let counted: Vec<Traffic> = parts
            .iter()
            .map(|outcomes| {
                let mut traffic = Traffic::default();
                let mut now = secs(0);
                for o in outcomes {
                    now += ms(o.gap_ms);
                    traffic.record(now, o.failure, o.latency, WINDOW);
                }
                traffic
            })
            .collect();
        let merged = |a: &Traffic, b: &Traffic| {
            let mut m = a.clone();
            m.merge(b);
            m
        };
        let (a, b, c) = (&counted[0], &counted[1], &counted[2]);
        prop_assert_eq!(merged(a, b), merged(b, a));
        prop_assert_eq!(merged(&merged(a, b), c), merged(a, &merged(b, c)));
    }
}

// Through the pool: the pipeline that ships, with the passive table in memory, a tick every
// 200 ms, requests picked by the pool and not timed (they start at the latest tick).

/// Every page of `name` answers 500 from `from`; everything else answers 200.
fn failing_from(
    name: &'static str,
    from: Time,
) -> impl FnMut(&str, Time) -> Option<RequestOutcome> {
    move |to, at| Some(answered(if to == name && at >= from { 500 } else { 200 }))
}

/// The outlier ejections that started, as (time order) backend name, length and verdict.
fn outlier_ejections(proxy: &Proxy) -> Vec<(String, Duration, Verdict)> {
    proxy
        .events
        .iter()
        .filter_map(|e| match e {
            Event::EjectionStarted {
                name,
                length,
                reason: EjectionReason::Outlier(verdict),
                ..
            } => Some((name.clone(), *length, verdict.clone())),
            _ => None,
        })
        .collect()
}

/// Requests to `name` sent in [from, to) that failed.
fn failed_at(served: &[Served], name: &str, from: Time, to: Time) -> usize {
    served
        .iter()
        .filter(|s| s.name == name && (from..to).contains(&s.at))
        .filter(|s| {
            s.outcome
                .and_then(RequestOutcome::outlier_failure)
                .is_some()
        })
        .count()
}

#[test]
fn the_run_rule_asks_for_five_failures_in_a_row_with_peers_at_one_percent_nine_at_twenty_and_twenty_at_half(
) {
    let config = Outlier::default();
    let limit = |failed, requests| {
        run_rule(
            &failing_backend(failed, requests, secs(2)),
            &config,
            secs(3),
        )
        .map(|r| r.limit)
    };
    assert_eq!(limit(0, 100), Some(5));
    assert_eq!(limit(1, 100), Some(5));
    assert_eq!(limit(20, 100), Some(9));
    assert_eq!(limit(50, 100), Some(20));
    assert_eq!(limit(0, 4), None, "too few peer requests to compare with");
    assert_eq!(limit(0, 5), Some(5));
    assert_eq!(limit(100, 100), None, "peers failing everything");
}

#[test]
fn through_the_pool_a_backend_that_loses_its_database_mid_traffic_is_out_at_its_fifth_failure_in_a_row(
) {
    let mut proxy = given_two_backends_passing_their_probes();
    let served = proxy.serve(ms(20), secs(30), 40, failing_from("app2", secs(20)));
    let failed = failed_at(&served, "app2", secs(20), secs(30));
    let ejections = outlier_ejections(&proxy);
    println!(
        "through the pool, app2 failing every page from 20 s: {failed} failures; {ejections:?}"
    );
    assert_eq!(failed, 5);
    let [(name, length, verdict)] = &ejections[..] else {
        panic!("one ejection: {ejections:?}")
    };
    assert_eq!((name.as_str(), *length), ("app2", secs(30)));
    assert!(
        matches!(verdict, Verdict::Run { failed: 5, .. }),
        "{verdict:?}"
    );
    assert!(
        verdict
            .to_string()
            .starts_with("its last 5 requests failed (500) while its peers failed 0 of "),
        "{verdict}"
    );
    assert_eq!(proxy.routable(), ["app1"]);
    proxy.probe("app2", ProbeOutcome::Pass, secs(31));
    assert_eq!(
        proxy.routable(),
        ["app1"],
        "a passing probe does not lift it"
    );
    let page = upcheck_policy::page::text(&proxy.pool, None, secs(31));
    assert!(
        page.contains("ejected (outlier for 19.")
            && page.contains("more: its last 5 requests failed"),
        "{page}"
    );
    let json = upcheck_policy::page::json(&proxy.pool, None, secs(31));
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let outlier = &v["backends"][1]["outlier"];
    assert!(
        outlier["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("its last 5 requests failed (500)")),
        "{json}"
    );
    assert!(
        outlier["ends_in_ms"]
            .as_u64()
            .is_some_and(|ms| (19_000..20_000).contains(&ms)),
        "{json}"
    );
    assert_eq!(v["backends"][0]["outlier"], serde_json::Value::Null);
}

#[test]
fn through_the_pool_a_readmitted_backend_still_failing_costs_one_request_and_goes_out_twice_as_long(
) {
    let mut proxy = given_two_backends_passing_their_probes();
    let served = proxy.serve(ms(20), secs(90), 40, failing_from("app2", secs(20)));
    let ejections = outlier_ejections(&proxy);
    let lengths: Vec<Duration> = ejections.iter().map(|(_, length, _)| *length).collect();
    // The first ejection started at the fifth failure, a little after 20 s.
    let readmitted = secs(50);
    let cost = failed_at(&served, "app2", readmitted, secs(90));
    println!("re-admitted: {cost} failures before going out again; {lengths:?}");
    assert_eq!(lengths, [secs(30), secs(60)]);
    assert_eq!(cost, 1, "the run goes on where it stopped");
    let ended: Vec<String> = proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::EjectionEnded { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(ended, ["app2 no longer ejected: its ejection ended"]);
}

#[test]
fn through_the_pool_an_app_bug_failing_a_fifth_of_requests_everywhere_ejects_nobody() {
    let mut proxy = given_two_backends_passing_their_probes();
    let mut dice = Dice(11);
    let served = proxy.serve(ms(20), secs(120), 40, |_, _| {
        Some(answered(if dice.chance(20) { 500 } else { 200 }))
    });
    let failed = failed_at(&served, "app1", secs(0), secs(120))
        + failed_at(&served, "app2", secs(0), secs(120));
    assert!(failed > 800, "{failed} failures");
    let ejected: Vec<&Event> = proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::EjectionStarted { .. } | Event::CapReached { .. }))
        .collect();
    assert!(ejected.is_empty(), "{ejected:?}");
}

#[test]
fn through_the_pool_a_backend_that_hangs_is_judged_stalled_at_a_tick_within_a_second() {
    let mut proxy = given_two_backends_passing_their_probes();
    proxy.serve(ms(20), secs(25), 40, |to, at| {
        (to != "app2" || at < secs(20)).then_some(answered(200))
    });
    let ejections = outlier_ejections(&proxy);
    println!("hung from 20 s: {ejections:?}");
    let [(name, _, Verdict::Stalled { oldest, .. })] = &ejections[..] else {
        panic!("one stall: {ejections:?}")
    };
    assert_eq!(name, "app2");
    // Stalled once 3 requests waited 500 ms (started at their tick): within 1 s of the hang.
    assert!(*oldest <= secs(1), "the oldest waited {oldest:?}");
}

#[test]
fn through_the_pool_an_outlier_ejection_counts_toward_the_cap() {
    // One of three may be out.
    let mut proxy = given_backends_passing_their_probes(
        &["app1", "app2", "app3"],
        r#""max_ejection_percent":34"#,
    );
    proxy.serve(ms(20), secs(30), 60, |to, at| {
        let status = match to {
            "app3" if at >= secs(10) => 502,
            "app2" if at >= secs(20) => 500,
            _ => 200,
        };
        Some(answered(status))
    });
    assert_eq!(proxy.routable(), ["app1", "app2"]);
    let capped: Vec<String> = proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::CapReached { name, .. } if name == "app2"))
        .map(ToString::to_string)
        .collect();
    let [line] = &capped[..] else {
        panic!("app2 kept in once: {capped:?}")
    };
    assert!(
        line.starts_with("app2 stays in rotation although its last 5 requests failed (500)"),
        "{line}"
    );
}

#[test]
fn an_ejection_the_cap_held_back_is_reported_once_when_it_takes_effect() {
    // One of three may be out: app3 is, so app2's ejection is held back until app3 is back.
    let mut proxy = given_backends_passing_their_probes(
        &["app1", "app2", "app3"],
        r#""max_ejection_percent":34"#,
    );
    proxy.serve(ms(20), secs(90), 60, |to, at| {
        let status = match to {
            "app3" if at >= secs(10) && at < secs(25) => 502,
            "app2" if at >= secs(20) => 500,
            _ => 200,
        };
        Some(answered(status))
    });
    let app2: Vec<String> = proxy
        .events
        .iter()
        .filter(|e| {
            matches!(e,
                Event::CapReached { name, .. }
                | Event::CapLifted { name, .. }
                | Event::EjectionStarted { name, .. } if name == "app2")
        })
        .map(ToString::to_string)
        .collect();
    println!("{app2:#?}");
    let held = app2
        .iter()
        .position(|l| l.contains(" stays in rotation although "));
    let lifted: Vec<&String> = app2
        .iter()
        .filter(|l| l.contains("the ejection max_ejection_percent held back takes effect"))
        .collect();
    assert!(held.is_some(), "the cap held app2 back: {app2:#?}");
    assert_eq!(lifted.len(), 1, "reported once: {app2:#?}");
    assert!(lifted[0].starts_with("app2 ejected for "), "{}", lifted[0]);
    assert!(!proxy.routable().contains(&"app2"), "app2 went out");
}

#[test]
fn a_success_at_a_backend_on_no_run_of_failures_reads_no_clock_and_shares_nothing_until_the_tick() {
    let mut proxy = given_two_backends_passing_their_probes();
    proxy.tick(secs(1));
    let (routed, _) = proxy.pool.request_routed(7, 0, None, false);
    let effects = proxy
        .pool
        .request_ended(7, routed, Retried::No, answered(200), || {
            panic!("the clock was read for a success")
        })
        .unwrap_or_default();
    assert!(effects.is_empty(), "{effects:?}");
    let before = proxy.table.clone();
    let tick = proxy.pool.tick(secs(1) + ms(200));
    assert_eq!(
        tick.share.len(),
        1,
        "one change for the tick's counts: {tick:?}"
    );
    proxy.carry_out(tick, secs(1) + ms(200));
    let counted = |table: &upcheck_policy::tables::PassiveTable| {
        table
            .iter()
            .find(|(key, _)| key == "app1@app1")
            .map_or(0.0, |(_, h)| {
                h.traffic.requests_at(WindowClock::new(secs(2), WINDOW))
            })
    };
    assert_eq!((counted(&before), counted(&proxy.table)), (0.0, 1.0));
    let idle = proxy.pool.tick(secs(1) + ms(400));
    assert!(idle.share.is_empty(), "nothing new to share: {idle:?}");
}

#[test]
fn through_the_pool_attempts_retried_elsewhere_make_a_run_of_failures() {
    let mut proxy = given_two_backends_passing_their_probes();
    proxy.serve(ms(20), secs(5), 40, |_, _| Some(answered(200)));
    for id in 0..5 {
        let effects = proxy
            .pool
            .request_ended(
                100 + id,
                proxy.routed(1),
                Retried::Yes {
                    final_answer: Some(0),
                },
                answered(200),
                || secs(5),
            )
            .unwrap_or_default();
        proxy.carry_out(effects, secs(5));
    }
    let ejections = outlier_ejections(&proxy);
    let [(_, _, verdict)] = &ejections[..] else {
        panic!("one ejection: {ejections:?}")
    };
    assert!(
        verdict
            .to_string()
            .contains("5 requests failed (retried elsewhere)"),
        "{verdict}"
    );
}
