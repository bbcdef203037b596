//! The other balancers of the fleet, as the pool meets them ([`crate::etcd`]). Their view in: on
//! the prober, which backends another balancer probes, and the probe state it published, taken
//! in as this VM's own so its workers get it from the probe table as they get every other
//! result; the others' failures and ejections, taken into the process's passive table; their
//! request counts, for the prober's peer comparison. And this balancer's evidence out: its
//! failures, ejections and counts.

use super::Pool;
use crate::etcd::{Duty, FleetPart};
use crate::events::Effects;
use crate::outlier::Traffic;
use crate::tables::PassiveChange;
use crate::time::Time;

impl<H> Pool<H> {
    /// Takes in where each backend's probe duty is: a backend another balancer probes is not
    /// probed here and takes that balancer's published state; one whose duty comes here is
    /// probed at its time (at once if that has passed).
    pub(crate) fn fleet_view(&mut self, fleet: &FleetPart, now: Time) -> Effects {
        let mut effects = Effects::default();
        let mut adopted = false;
        let mut back = false;
        for (i, m) in self.members.iter_mut().enumerate() {
            match fleet.fleet_traffic(i, &m.key) {
                Some(theirs) if *theirs != m.counts.fleet => m.counts.fleet = theirs.clone(),
                Some(_) => {}
                None => m.counts.fleet = Traffic::default(),
            }
            let outlier = &m.evidence.passive.outlier;
            if let Some(shared) = fleet.shared_ejection(&m.key) {
                if !outlier.is_ejected(now) && shared.standing.is_ejected(now) {
                    effects.share.push(PassiveChange::Adopt {
                        key: m.key.clone(),
                        at: now,
                        by: shared.by,
                        standing: shared.standing.clone(),
                    });
                }
            }
            match fleet.duty(&m.key) {
                Duty::Here => {
                    back |= std::mem::take(&mut m.probing.elsewhere);
                }
                Duty::Elsewhere { health, .. } => {
                    m.probing.elsewhere = true;
                    if let Some(health) = health.filter(|h| *h != m.evidence.active) {
                        m.evidence.active = health;
                        self.layout.changed();
                        adopted = true;
                    }
                }
            }
        }
        self.hear();
        self.fleet_evidence(fleet, now, &mut effects);
        if let Some(prober) = self.prober.as_mut() {
            prober.unpublished |= adopted;
            if back {
                prober.earliest = now;
            }
        }
        if adopted {
            self.refresh(now, &mut effects);
        }
        effects
    }

    /// Shares the failures read from the other balancers that this process does not remember
    /// yet and would still count.
    fn fleet_evidence(&self, fleet: &FleetPart, now: Time, effects: &mut Effects) {
        let passive = &self.config.health_checks.passive;
        for m in &self.members {
            let known = &m.evidence.passive;
            let mut failures = fleet.fleet_failures(&m.key);
            failures.retain(|t| !known.failures.contains(t) && known.counts(*t, now, passive));
            if !failures.is_empty() {
                effects.share.push(PassiveChange::Fleet {
                    key: m.key.clone(),
                    failures,
                });
            }
        }
    }

    /// What this process has to tell the fleet at `now`: the failures it counted at its
    /// backends, where they changed ([`FleetPart::evidence`]); the outlier ejections in force, not
    /// published yet ([`FleetPart::share_ejections`]); its request counts ([`FleetPart::share_traffic`]).
    pub(crate) fn evidence(&self, fleet: &mut FleetPart, now: Time) -> Vec<crate::etcd::Request> {
        let mut out: Vec<_> = self
            .members
            .iter()
            .filter_map(|m| fleet.evidence(&m.key, m.evidence.passive.failures.iter()))
            .collect();
        let ejections: Vec<_> = self
            .members
            .iter()
            .filter(|m| m.evidence.passive.outlier.is_ejected(now))
            .map(|m| (m.key.clone(), m.evidence.passive.outlier.clone()))
            .collect();
        let outlier = &self.config.health_checks.outlier;
        out.extend(fleet.share_ejections(&ejections, outlier.max_ejection, now));
        // Every backend, in the configuration's order, so the others find each at its place.
        let counts = || {
            let count = |m: &super::Member<H>| (m.key.clone(), m.evidence.passive.traffic.clone());
            self.members.iter().map(count).collect()
        };
        out.extend(fleet.share_traffic(counts, outlier.window, now));
        out
    }

    /// Whether another balancer probes backend `index` ([`Pool::fleet_view`]).
    pub fn probed_elsewhere(&self, index: usize) -> bool {
        self.members.get(index).is_some_and(|m| m.probing.elsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::active::{Health, MadeBy, ProbeAnswer};
    use crate::etcd::tests::{Etcd, S, TICK};
    use crate::etcd::ToEtcd;
    use crate::events::Effects;

    /// Carries out the fleet's calls among `effects` on `etcd`, each answered at once (the
    /// call numbered after `token`), and the calls those answers ask for in turn.
    fn answer_at_once(
        pool: &mut Pool,
        etcd: &mut Etcd,
        effects: Effects,
        token: &mut u32,
        now: Time,
    ) {
        let mut asked = effects.etcd;
        while !asked.is_empty() {
            let mut more = Vec::new();
            for call in asked {
                if let ToEtcd::Call(request) = call {
                    *token += 1;
                    let _ = pool.etcd_sent(request.call.clone(), *token);
                    let (status, body) = etcd.answer(&request, now);
                    more.extend(pool.etcd_answered(*token, status, &body, now).etcd);
                }
            }
            asked = more;
        }
    }

    /// The pool of one balancer, with the fleet object, holding its process's probing lease.
    pub(super) fn pool_of(names: &[&str], now: Time) -> Pool {
        let upstreams: Vec<String> = names
            .iter()
            .map(|n| format!("{{\"name\":\"{n}\"}}"))
            .collect();
        let json = format!(
            r#"{{"upstreams":[{}],"health_checks":{{"active":{{"interval":"1s","timeout":"500ms"}}}},"fleet":{{"cluster":"etcd"}}}}"#,
            upstreams.join(",")
        );
        let config = upcheck_config::Config::parse(json.as_bytes()).unwrap();
        let mut pool = Pool::new(config, now, |_| ());
        let _ = pool.lease(crate::pool::LeaseHeld::Here { seed: 1 }, now);
        pool
    }

    #[test]
    fn a_pool_probes_only_the_backends_whose_duty_it_holds_and_takes_the_others_results_in() {
        let mut etcd = Etcd::default();
        let names = ["app0", "app1"];
        let mut pools = [pool_of(&names, S), pool_of(&names, S)];
        // Each pool's calls to etcd are numbered apart from its probes'.
        let mut tokens = [1000u32, 1000];
        let mut now = S;
        let mut probed = [[0u32; 2]; 2];
        for tick in 0..40 {
            for (p, pool) in pools.iter_mut().enumerate() {
                let mut effects = pool.tick(now);
                let probes = std::mem::take(&mut effects.probes);
                answer_at_once(pool, &mut etcd, effects, &mut tokens[p], now);
                for index in probes {
                    // Counted once the duties settled: at the start the first balancer holds both
                    // until the second registers, then gives one back.
                    if tick >= 10 {
                        probed[p][index] += 1;
                    }
                    // Every probe passes at once.
                    let _ = pool.probe_sent(index, 1, now);
                    let _ = pool.probe_answered(
                        1,
                        ProbeAnswer {
                            status: 200,
                            made_by: MadeBy::Backend,
                            signalled: false,
                            body: b"",
                        },
                        now,
                    );
                }
            }
            now += TICK;
        }
        // Each backend is probed by one of the two, once per interval (30 ticks: 6 s).
        for backend in 0..2 {
            let by: Vec<u32> = probed.iter().map(|p| p[backend]).collect();
            assert_eq!(
                by.iter().filter(|n| **n > 0).count(),
                1,
                "backend {backend}: {probed:?}"
            );
            assert!(
                (5..=7).contains(&by.iter().sum::<u32>()),
                "backend {backend}: {probed:?}"
            );
        }
        // And the other takes its state in from etcd, as published.
        for (p, pool) in pools.iter().enumerate() {
            for (i, m) in pool.members().iter().enumerate() {
                assert_eq!(
                    m.evidence.active.status,
                    Health::Healthy,
                    "pool {p}, backend {i}"
                );
                assert_eq!(
                    pool.probed_elsewhere(i),
                    probed[p][i] == 0,
                    "pool {p}, backend {i}"
                );
            }
        }
    }
}

#[cfg(test)]
mod evidence_tests {
    use super::tests::pool_of;
    use crate::etcd::tests::{balancers, Balancer, Etcd, S, TICK};
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
            self.settle(id, index, RequestOutcome::Failed(ProxyFailure::Reset), now);
        }

        /// An outlier ejection of backend `index` decided here at `now`.
        fn eject(&mut self, index: usize, now: Time) {
            let verdict = Verdict::Run {
                failed: 5,
                kind: FailureKind::Status(500),
                peers_failed: 0,
                peers_requests: 40,
            };
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

        /// One tick of the prober: the fleet's calls, answered by `etcd` at once, and the view.
        fn tick(&mut self, etcd: &mut Etcd, now: Time) {
            let b = &mut self.b;
            let mut requests = b.fleet.tick(now, &self.pool.active_table());
            requests.extend(self.pool.evidence(&mut b.fleet, now));
            for request in requests {
                b.token += 1;
                b.fleet.sent(request.call.clone(), b.token);
                let (status, body) = etcd.answer(&request, now);
                b.fleet.answered(b.token, status, &body, now);
            }
            let share = self.pool.fleet_view(&b.fleet, now).share;
            self.carry(share, now);
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
        let forged = format!("failures/v2 {at} {at} {at}");
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
    fn an_ejection_corrupt_of_another_version_or_longer_than_max_ejection_ejects_nobody_and_is_logged(
    ) {
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
                by: lease,
                standing,
            }
        };
        let max_ejection = sites[0].pool.config().health_checks.outlier.max_ejection;
        let tag = [b'u', b'c', b'e', 1];
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
        let served = RequestOutcome::Answered {
            status: 200,
            latency: Duration::from_millis(3),
        };
        for id in 0..12 {
            sites[1].settle(id, 0, served, now);
        }
        sites[1].settle(12, 0, RequestOutcome::Failed(ProxyFailure::Reset), now);
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
}
