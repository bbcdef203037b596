//! Evidence shared between balancers: failures, ejections and request counts, and what each
//! balancer keeps to itself.

use super::tests::pool_of;
use crate::active::{Health, MadeBy, ProbeAnswer};
use crate::etcd::tests::{balancers, Balancer, Etcd, S, TICK};
use crate::events::Event;
use crate::outcome::{FailureKind, ProxyFailure, RequestOutcome};
use crate::outlier::{Verdict, WindowClock};
use crate::pool::{Pool, Retried, Routed};
use crate::tables::{PassiveChange, PassiveTable};
use crate::time::Time;
use std::time::Duration;

/// One balancer's pool, its process's passive table, and its part in the fleet.
struct Site {
    pool: Pool,
    table: PassiveTable,
    b: Balancer,
}

impl Site {
    fn carry(&mut self, share: Vec<crate::tables::PassiveChange>, now: Time) {
        let checks = self.pool.config().health_checks.clone();
        for change in share {
            let applied = change.apply(&mut self.table, &checks);
            let written = crate::pool::Written {
                change: &change,
                applied,
            };
            let more = self.pool.passive_written(&self.table, Some(written), now);
            self.carry(more.share, now);
        }
    }

    fn settle(&mut self, id: u32, index: usize, outcome: RequestOutcome, now: Time) {
        let routed = Routed {
            index,
            generation: self.pool.generation(),
            flight: None,
            timed: None,
        };
        let share = self
            .pool
            .request_ended(id, routed, Retried::No, outcome, || now)
            .unwrap_or_default()
            .share;
        self.carry(share, now);
    }

    fn fail(&mut self, id: u32, index: usize, now: Time) {
        let answered = RequestOutcome::Answered {
            status: 502,
            latency: Duration::ZERO,
            grpc: None,
        };
        self.settle(id, index, answered, now);
    }

    /// Requests `ids` to backend `index`, each answered 200 in 3 ms at `now`.
    fn serve(&mut self, ids: std::ops::Range<u32>, index: usize, now: Time) {
        let served = RequestOutcome::Answered {
            status: 200,
            latency: Duration::from_millis(3),
            grpc: None,
        };
        for id in ids {
            self.settle(id, index, served, now);
        }
    }

    /// A request to backend `index`, `id`, reset at `now`: a failure that may be this
    /// balancer's path.
    fn reset(&mut self, id: u32, index: usize, now: Time) {
        self.settle(id, index, RequestOutcome::Failed(ProxyFailure::Reset), now);
    }

    /// An outlier ejection of backend `index` decided here at `now`, for a run of 500s.
    fn eject(&mut self, index: usize, now: Time) {
        let verdict = Verdict::Run {
            failed: 5,
            kind: FailureKind::Status(500),
            peers_failed: 0,
            peers_requests: 40,
        };
        self.eject_for(index, verdict, now);
    }

    /// An outlier ejection of backend `index` decided here at `now` for `verdict`.
    fn eject_for(&mut self, index: usize, verdict: Verdict, now: Time) {
        let key = self.pool.members()[index].key.clone();
        self.carry(
            vec![PassiveChange::Eject {
                key,
                at: now,
                verdict,
            }],
            now,
        );
    }

    /// When the ejection of backend `index` in force at `now` ends, in this process.
    fn ejected_until(&self, index: usize, now: Time) -> Option<Time> {
        let outlier = &self.pool.members()[index].evidence.passive.outlier;
        outlier.in_force(now).map(|(_, until)| until)
    }

    /// One tick of the prober: the fleet's calls, answered by `etcd` at once, and the view;
    /// what the view said.
    fn tick(&mut self, etcd: &mut Etcd, now: Time) -> Vec<Event> {
        let b = &mut self.b;
        let mut requests = b.fleet.tick(now, &self.pool.active_table());
        requests.extend(self.pool.evidence(&mut b.fleet, now));
        for request in requests {
            b.token += 1;
            b.fleet.sent(request.call.clone(), b.token);
            let (status, body) = etcd.answer(&request, now);
            b.fleet.answered(b.token, status, &body, now);
        }
        let view = self.pool.fleet_view(&b.fleet, now);
        self.carry(view.share, now);
        view.events
    }

    fn ejected(&self) -> bool {
        self.pool.members().first().is_some_and(|m| m.ejected())
    }
}

/// Asserts that `site`'s fleet logged each of `keys` as ignored.
fn ignored_with_a_line_each<'a>(site: &mut Site, keys: impl Iterator<Item = &'a str>) {
    let notes = site.b.fleet.take_notes();
    for key in keys {
        assert!(
            notes
                .iter()
                .any(|n| n.text.contains(&format!("ignored the value at {key:?}"))),
            "{key}: {notes:?}"
        );
    }
}

fn sites(now: Time) -> (Etcd, Vec<Site>) {
    (Etcd::default(), balancers_at(2, now))
}

fn balancers_at(n: usize, now: Time) -> Vec<Site> {
    let names = ["app0", "app1", "app2"];
    balancers(n, now)
        .into_iter()
        .map(|b| Site {
            pool: pool_of(&names, now),
            table: Vec::new(),
            b,
        })
        .collect()
}

/// Runs every site for `ticks` ticks from `now`.
fn run(etcd: &mut Etcd, sites: &mut [Site], mut now: Time, ticks: u32) -> Time {
    for _ in 0..ticks {
        for site in sites.iter_mut() {
            site.tick(etcd, now);
        }
        now += TICK;
    }
    now
}

#[test]
fn behind_two_balancers_a_backend_is_ejected_after_max_fails_failures_in_all_on_both() {
    let (mut etcd, mut sites) = sites(S);
    let mut now = run(&mut etcd, &mut sites, S, 10);
    // max_fails is 3: two failures behind the first balancer, one behind the second.
    sites[0].fail(1, 0, now);
    sites[0].fail(2, 0, now + TICK / 2);
    assert!(!sites[0].ejected() && !sites[1].ejected());
    now = run(&mut etcd, &mut sites, now + TICK, 5);
    assert!(
        !sites[0].ejected() && !sites[1].ejected(),
        "two failures eject nobody"
    );
    sites[1].fail(3, 0, now);
    assert!(
        sites[1].ejected(),
        "the third failure, behind the second, ejects there"
    );
    // Within a second, the first holds the ejection too.
    run(&mut etcd, &mut sites, now, 5);
    assert!(sites[0].ejected() && sites[1].ejected());
    // Each counted 3 failures, none twice: what each published is its own only.
    for site in &sites {
        let passive = &site.pool.members()[0].evidence.passive;
        assert_eq!(passive.failures.len(), 3);
    }
    let own: Vec<usize> = sites
        .iter()
        .map(|s| etcd.failures_of(&s.b.fleet.me().unwrap(), "app0@app0"))
        .collect();
    assert_eq!(own, [2, 1], "each published its own only");
}

#[test]
fn failures_of_a_forged_or_corrupt_value_count_nothing_and_are_logged() {
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    let lease = sites[1].b.fleet.me().unwrap();
    let at = crate::time::nanos(now);
    let forged = format!("failures/v9 {at} {at} {at}");
    let values: [(String, &[u8]); 4] = [
        (
            format!("upcheck/v1/failures/{lease}/app0@app0"),
            forged.as_bytes(),
        ),
        (
            format!("upcheck/v1/failures/{lease}/app1@app1"),
            b"\xff\x00garbage",
        ),
        ("upcheck/v1/failures/1/app2@app2".into(), b"failures/v1 1 5"),
        (
            format!("upcheck/v1/failures/{lease}/app2@app2"),
            b"failures/v1 999999999999999999",
        ),
    ];
    let id = i64::from_str_radix(&lease, 16).unwrap();
    for (key, value) in &values {
        etcd.put(key, value, id);
    }
    run(&mut etcd, &mut sites, now, 5);
    for site in &sites {
        assert!(site.pool.members().iter().all(|m| !m.ejected()));
        assert_eq!(
            site.table
                .iter()
                .map(|(_, p)| p.failures.len())
                .sum::<usize>(),
            0
        );
    }
    ignored_with_a_line_each(&mut sites[0], values.iter().map(|(k, _)| k.as_ref()));
}

#[test]
fn an_outlier_ejection_decided_behind_one_balancer_holds_on_the_other_within_a_second_and_ends_there_with_it(
) {
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    sites[0].eject(1, now);
    let until = sites[0].ejected_until(1, now).unwrap();
    assert_eq!(sites[1].ejected_until(1, now), None);
    let later = run(&mut etcd, &mut sites, now, 5);
    assert_eq!(
        sites[1].ejected_until(1, later),
        Some(until),
        "held until the same end"
    );
    assert!(sites[1].pool.members()[1].ejected());
    // Published once, under a lease of its own: neither balancer's.
    let published = etcd.under("upcheck/v1/ejected/");
    assert_eq!(published.len(), 1, "{published:?}");
    let leases: Vec<i64> = sites.iter().map(|s| s.b.fleet.lease().unwrap()).collect();
    assert!(
        !leases.contains(&published[0].1),
        "{published:?} {leases:?}"
    );
    // It ends on both at its end, and its key goes with it.
    let after = run(&mut etcd, &mut sites, later, 160);
    assert!(after > until + S);
    for site in &mut sites {
        let share = site.pool.tick(after).share;
        site.carry(share, after);
        assert!(!site.pool.members()[1].ejected());
        assert_eq!(site.ejected_until(1, after), None);
    }
    assert!(etcd.under("upcheck/v1/ejected/").is_empty());
    // The second never published it again.
    assert!(etcd.leases_granted() <= 3, "two balancers and one ejection");
}

#[test]
fn an_ejection_outlives_the_balancer_that_decided_it_and_reaches_one_that_joins_later() {
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    sites[0].eject(2, now);
    let until = sites[0].ejected_until(2, now).unwrap();
    let now = run(&mut etcd, &mut sites, now, 3);
    let published = etcd.under("upcheck/v1/ejected/");
    // The decider dies; its own lease (6 s) expires, the ejection's (30 s) does not.
    sites.remove(0);
    let now = run(&mut etcd, &mut sites, now, 40);
    let mut late = balancers_at(1, now);
    sites.append(&mut late);
    let now = run(&mut etcd, &mut sites, now, 10);
    assert!(now < until);
    for site in &sites {
        assert_eq!(site.ejected_until(2, now), Some(until));
    }
    assert_eq!(
        etcd.under("upcheck/v1/ejected/"),
        published,
        "the decider's, never published again by the others"
    );
}

#[test]
fn an_ejection_corrupt_of_another_version_or_longer_than_max_ejection_ejects_nobody_and_is_logged()
{
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    let lease = sites[1].b.fleet.lease().unwrap();
    let verdict = Verdict::Run {
        failed: 5,
        kind: FailureKind::Status(500),
        peers_failed: 0,
        peers_requests: 40,
    };
    // `length` long, with the configuration's limits otherwise.
    let ejection = |length: Duration| {
        let mut standing = crate::outlier::Standing::default();
        let mut config = sites[0].pool.config().health_checks.outlier.clone();
        (config.ejection, config.max_ejection) = (length, length);
        let _ = standing.eject(verdict.clone(), now, &config);
        crate::etcd::ejections::Shared {
            written: now,
            by: lease,
            standing,
        }
    };
    let max_ejection = sites[0].pool.config().health_checks.outlier.max_ejection;
    let tag = [b'u', b'c', b'e', crate::etcd::keys::VALUES];
    let values: [(&str, Vec<u8>); 3] = [
        ("upcheck/v1/ejected/app0@app0", b"\xff\x00garbage".to_vec()),
        (
            "upcheck/v1/ejected/app1@app1",
            crate::tables::tagged(tag, &ejection(max_ejection * 10)),
        ),
        (
            "upcheck/v1/ejected/app2@app2",
            crate::tables::tagged([b'u', b'c', b'e', 9], &ejection(30 * S)),
        ),
    ];
    for (key, value) in &values {
        etcd.put(key, value, lease);
    }
    run(&mut etcd, &mut sites, now, 5);
    for site in &sites {
        assert!(site.pool.members().iter().all(|m| !m.ejected()));
    }
    ignored_with_a_line_each(&mut sites[0], values.iter().map(|(k, _)| k.as_ref()));
}

#[test]
fn the_prober_judges_each_backend_on_the_requests_every_balancer_counted() {
    let (mut etcd, mut sites) = sites(S);
    let mut now = run(&mut etcd, &mut sites, S, 10);
    sites[1].serve(0..12, 0, now);
    let failed = RequestOutcome::Answered {
        status: 500,
        latency: Duration::from_millis(3),
        grpc: None,
    };
    sites[1].settle(12, 0, failed, now);
    // The process-wide counts are shared with its table at its tick.
    let share = sites[1].pool.tick(now).share;
    sites[1].carry(share, now);
    now = run(&mut etcd, &mut sites, now + TICK, 5);
    let window = sites[0].pool.config().health_checks.outlier.window;
    let clock = WindowClock::new(now, window);
    let theirs = &sites[0].pool.members()[0].counts.fleet;
    assert!(
        (theirs.requests_at(clock) - 13.0).abs() < 1e-9,
        "{theirs:?}"
    );
    let seen = super::super::peers::view(&sites[0].pool.members()[0]);
    assert!((seen.requests_at(clock) - 13.0).abs() < 1e-9);
    assert!((seen.failures(now, window) - 1.0).abs() < 1e-9);
    // Its own are not counted twice: the second reads its own value and leaves it out.
    let own = &sites[1].pool.members()[0];
    assert!(own.counts.fleet.is_empty());
    assert!((super::super::peers::view(own).requests_at(clock) - 13.0).abs() < 1e-9);
}

#[test]
fn a_path_failure_ejects_behind_its_balancer_at_once_and_behind_another_only_once_it_sees_one() {
    let (mut etcd, mut sites) = sites(S);
    let mut now = run(&mut etcd, &mut sites, S, 10);
    for id in 1..=3 {
        sites[0].reset(id, 0, now + TICK / 4 * id);
    }
    assert!(sites[0].ejected(), "3 resets behind the first eject there");
    now = run(&mut etcd, &mut sites, now + TICK, 5);
    assert!(
        !sites[1].ejected(),
        "the second reaches app0 fine: the first's path is not its own"
    );
    assert_eq!(
        sites[1].pool.members()[0].evidence.passive.failures.len(),
        0,
        "nor does it count them"
    );
    let first = sites[0].b.fleet.lease().expect("a lease");
    let key = &sites[1].pool.members()[0].key;
    let shown = crate::etcd::shown::Shown::of(&sites[1].b.fleet, [key.as_str()].into_iter());
    assert_eq!(
        shown.failing(key, now - TICK * 10),
        [(first, crate::outcome::About::Path)],
        "but its page says the first sees it failing, maybe by its path"
    );
    assert!(
        shown.failing(key, now + TICK * 100).is_empty(),
        "until they expire"
    );
    sites[1].reset(4, 0, now);
    now = run(&mut etcd, &mut sites, now, 2);
    assert!(
        sites[1].ejected(),
        "a reset of its own corroborates the first's: 4 failures"
    );
    let _ = now;
}

#[test]
fn a_backends_own_5xx_behind_one_balancer_counts_behind_every_other_at_once() {
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    for id in 1..=3 {
        sites[0].fail(id, 0, now + TICK / 4 * id);
    }
    run(&mut etcd, &mut sites, now + TICK, 2);
    assert!(sites[0].ejected() && sites[1].ejected());
}

#[test]
fn an_ejection_for_stalled_requests_stays_with_the_balancer_that_decided_it() {
    let (mut etcd, mut sites) = sites(S);
    let now = run(&mut etcd, &mut sites, S, 10);
    let stalled = Verdict::Stalled {
        waiting: 4,
        waited: Duration::from_secs(1),
        oldest: Duration::from_secs(3),
        peers_p99: Duration::from_millis(20),
    };
    sites[0].eject_for(1, stalled, now);
    sites[0].eject(2, now);
    let now = run(&mut etcd, &mut sites, now, 5);
    assert!(sites[0].ejected_until(1, now).is_some());
    assert_eq!(
        sites[1].ejected_until(1, now),
        None,
        "requests stalled behind one balancer may be its path"
    );
    assert_eq!(
        sites[1].ejected_until(2, now),
        sites[0].ejected_until(2, now),
        "a run of 500s is the backend's: shared"
    );
}

#[test]
fn the_counts_another_balancer_judges_on_leave_out_the_failures_that_may_be_the_path() {
    let (mut etcd, mut sites) = sites(S);
    let mut now = run(&mut etcd, &mut sites, S, 10);
    sites[1].serve(0..12, 0, now);
    for id in 12..15 {
        sites[1].reset(id, 0, now);
    }
    let share = sites[1].pool.tick(now).share;
    sites[1].carry(share, now);
    now = run(&mut etcd, &mut sites, now + TICK, 5);
    let window = sites[0].pool.config().health_checks.outlier.window;
    let theirs = &sites[0].pool.members()[0].counts.fleet;
    let clock = WindowClock::new(now, window);
    assert!(
        (theirs.requests_at(clock) - 12.0).abs() < 1e-9,
        "{theirs:?}"
    );
    assert_eq!(theirs.failures(now, window), 0.0, "{theirs:?}");
    let own = &sites[1].pool.members()[0].evidence.passive.traffic;
    assert!(
        (own.failures(now, window) - 3.0).abs() < 1e-9,
        "its own process still counts them: {own:?}"
    );
}

/// One tick of traffic at `now` behind each of `sites`: every probe is answered, and a request to
/// app0 goes through each; behind `broken` (if any) app0's requests are reset and its probes time
/// out, as when that balancer's path to it is broken. The events of each site's view.
fn traffic_tick(
    etcd: &mut Etcd,
    sites: &mut [Site],
    broken: Option<usize>,
    id: &mut u32,
    now: Time,
) -> Vec<Vec<Event>> {
    let served = RequestOutcome::Answered {
        status: 200,
        latency: Duration::from_millis(3),
        grpc: None,
    };
    let mut said = Vec::new();
    for (s, site) in sites.iter_mut().enumerate() {
        let cut = broken == Some(s);
        *id += 1;
        match cut {
            true => site.reset(*id, 0, now),
            false => site.settle(*id, 0, served, now),
        }
        let mut effects = site.pool.tick(now);
        for index in std::mem::take(&mut effects.probes) {
            let _ = site.pool.probe_sent(index, 1, now);
            let answered = ProbeAnswer {
                status: 200,
                made_by: MadeBy::Backend,
                signalled: false,
                body: b"",
            };
            let settled = match (cut, index) {
                (true, 0) => site.pool.probe_unanswered(1, Some("timeout"), now),
                _ => site.pool.probe_answered(1, answered, now),
            };
            site.carry(settled.share, now);
        }
        site.carry(effects.share, now);
        said.push(site.tick(etcd, now));
    }
    said
}

#[test]
fn a_backend_its_prober_cannot_reach_stays_in_rotation_behind_a_balancer_whose_requests_it_answers()
{
    let (mut etcd, mut sites) = sites(S);
    let mut id = 0;
    let mut now = S;
    for _ in 0..20 {
        traffic_tick(&mut etcd, &mut sites, None, &mut id, now);
        now += TICK;
    }
    let prober = match sites[0].pool.probed_elsewhere(0) {
        true => 1,
        false => 0,
    };
    let other = 1 - prober;
    assert!(sites.iter().all(|s| s.pool.members()[0].routable));
    // 10 s: behind the prober app0's requests are reset and its probes time out (its path is
    // broken); behind the other, app0 answers every request.
    let mut said = Vec::new();
    for _ in 0..50 {
        let mut events = traffic_tick(&mut etcd, &mut sites, Some(prober), &mut id, now);
        said.append(&mut events[other]);
        now += TICK;
    }
    let here = &sites[prober].pool.members()[0];
    assert!(!here.routable, "out behind the prober");
    assert_eq!(here.evidence.active.status, Health::Unhealthy);
    let there = &sites[other].pool.members()[0];
    assert!(there.routable, "in behind the other: {:?}", there.evidence);
    assert!(there.evidence.active.contradicted.is_some());
    assert!(
        said.iter()
            .any(|e| matches!(e, Event::ProbeContradicted { name, .. } if name == "app0")),
        "{said:?}"
    );
}
