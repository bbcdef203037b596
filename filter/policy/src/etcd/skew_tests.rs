//! The fleet with one balancer's clock 5 s off the others', from a step of its clock on: what it
//! shares (a probe state, an ejection, request counts) is taken in at the others' clock, and
//! none of it is refused as from the future.

use super::tests::{balancers_with, keys, run, watching, Balancer, Etcd, Skew, S, TICK};
use super::*;
use crate::active::{Health, ProbeOutcome};
use crate::outcome::FailureKind;
use crate::outlier::{Standing, Traffic, Verdict};
use upcheck_config::Outlier;

/// How far the clock is off.
const OFF: Duration = Duration::from_secs(5);

/// Two watching balancers settled on two backends, then the first's clock stepped `OFF` ahead
/// (or behind): `(etcd, balancers, backends, now by etcd's clock)`.
fn one_clock_off(ahead: bool) -> (Etcd, Vec<Balancer>, Vec<(String, ActiveHealth)>, Time) {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 2, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 40);
    fleet[0].skew = Skew { by: OFF, ahead };
    (etcd, fleet, own, now)
}

/// What `b` logged of values it refused.
fn refused(b: &mut Balancer) -> Vec<String> {
    let notes = b.fleet.take_notes();
    notes
        .into_iter()
        .map(|n| n.text)
        .filter(|t| t.contains("ignored the value"))
        .collect()
}

/// Sends `b`'s `requests` to `etcd` and hands back the answers, at `now` on etcd's clock.
fn send(b: &mut Balancer, etcd: &mut Etcd, requests: Vec<Request>, now: Time) {
    for request in requests {
        b.token += 1;
        b.fleet.sent(request.call.clone(), b.token);
        let (status, body) = etcd.answer(&request, now);
        assert!(b.fleet.answered(b.token, status, &body, b.clock(now)));
    }
}

#[test]
fn a_probe_state_published_by_a_clock_five_seconds_off_is_held_by_the_others_at_their_time() {
    for ahead in [true, false] {
        let (mut etcd, mut fleet, mut own, now) = one_clock_off(ahead);
        let Some(held) = own
            .iter()
            .position(|(k, _)| fleet[0].fleet.duty(k) == Duty::Here)
        else {
            panic!("the first balancer holds a duty");
        };
        // It probes its backend failing, at its own clock's time.
        let probed = fleet[0].clock(now);
        if let Some((_, health)) = own.get_mut(held) {
            health.status = Health::Unhealthy;
            health.last = Some((probed, ProbeOutcome::Refused));
            health.since = probed;
        }
        run(&mut etcd, &mut fleet, &own, now, 2);
        let key = &own[held].0;
        let Duty::Elsewhere {
            health: Some(health),
            ..
        } = fleet[1].fleet.duty(key)
        else {
            panic!("ahead {ahead}: the other holds no state of {key}");
        };
        assert_eq!(health.status, Health::Unhealthy);
        assert_eq!(
            health.last.map(|(at, _)| at),
            Some(now),
            "ahead {ahead}: probed at the other's time"
        );
        assert_eq!(
            refused(&mut fleet[1]),
            Vec::<String>::new(),
            "ahead {ahead}"
        );
    }
}

#[test]
fn an_ejection_decided_by_a_clock_five_seconds_off_ends_on_the_others_when_it_ends_on_it() {
    let verdict = Verdict::Run {
        failed: 5,
        kind: FailureKind::Status(500),
        peers_failed: 0,
        peers_requests: 40,
    };
    let config = Outlier::default();
    for ahead in [true, false] {
        let (mut etcd, mut fleet, own, now) = one_clock_off(ahead);
        let key = own[0].0.clone();
        let mut standing = Standing::default();
        let ejection = standing.eject(verdict.clone(), fleet[0].clock(now), &config);
        // The grant of its lease, then the put.
        for _ in 0..2 {
            let own = [(key.clone(), standing.clone())];
            let clock = fleet[0].clock(now);
            let requests = fleet[0]
                .fleet
                .share_ejections(&own, config.max_ejection, clock);
            send(&mut fleet[0], &mut etcd, requests, now);
        }
        run(&mut etcd, &mut fleet, &own, now, 1);
        let Some(shared) = fleet[1].fleet.shared_ejection(&key) else {
            panic!(
                "ahead {ahead}: the other holds no ejection; {:?}",
                refused(&mut fleet[1])
            );
        };
        let until = shared.standing.in_force(now).map(|(_, until)| until);
        assert_eq!(
            until,
            Some(now + ejection.length),
            "ahead {ahead}: it ends {:?} from now on both",
            ejection.length
        );
        assert_eq!(
            refused(&mut fleet[1]),
            Vec::<String>::new(),
            "ahead {ahead}"
        );
    }
}

#[test]
fn request_counts_made_by_a_clock_five_seconds_off_count_in_the_others_window_as_made_now() {
    let window = Duration::from_secs(10);
    for ahead in [true, false] {
        let (mut etcd, mut fleet, own, now) = one_clock_off(ahead);
        let key = own[0].0.clone();
        // The window the counts are kept in, as the other's pool says at each tick.
        let _ = fleet[1].fleet.share_traffic(Vec::new, window, now);
        // Ten requests, four failing, counted at the first's clock; the same counted at the
        // other's, for reference.
        let (mut counted, mut reference) = (Traffic::default(), Traffic::default());
        for i in 0..10u32 {
            let failed = (i < 4).then_some(FailureKind::Status(500));
            counted.record(fleet[0].clock(now), failed, None, window);
            reference.record(now, failed, None, window);
        }
        let clock = fleet[0].clock(now);
        let counts = vec![(key.clone(), counted)];
        let request = fleet[0].fleet.share_traffic(|| counts, window, clock);
        send(&mut fleet[0], &mut etcd, request.into_iter().collect(), now);
        let later = run(&mut etcd, &mut fleet, &own, now + TICK, 11);
        let Some(theirs) = fleet[1].fleet.fleet_traffic(0, &key) else {
            panic!("ahead {ahead}: no counts; {:?}", refused(&mut fleet[1]));
        };
        assert_eq!(
            theirs.failures(later, window),
            reference.failures(later, window),
            "ahead {ahead}: they count as if counted at the other's clock"
        );
        assert!(reference.failures(later, window) > 2.0);
        assert_eq!(
            refused(&mut fleet[1]),
            Vec::<String>::new(),
            "ahead {ahead}"
        );
    }
}
