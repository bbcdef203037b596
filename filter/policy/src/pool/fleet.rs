//! The fleet's view in: on the prober, which backends another balancer probes, and the probe
//! state it published, taken in as this VM's own so its workers get it from the probe table as
//! they get every other result ([`crate::fleet`]).

use super::Pool;
use crate::events::Effects;
use crate::fleet::{Duty, Fleet};
use crate::tables::PassiveChange;
use crate::time::Time;

impl<H> Pool<H> {
    /// Takes in where each backend's probe duty is: a backend another balancer probes is not
    /// probed here and takes that balancer's published state; one whose duty comes here is
    /// probed at its time (at once if that has passed).
    pub fn fleet_view(&mut self, fleet: &Fleet, now: Time) -> Effects {
        let mut effects = Effects::default();
        let mut adopted = false;
        let mut back = false;
        for m in &mut self.members {
            match fleet.duty(&m.key) {
                Duty::Here => {
                    back |= std::mem::take(&mut m.elsewhere);
                }
                Duty::Elsewhere { health, .. } => {
                    m.elsewhere = true;
                    if let Some(health) = health.filter(|h| *h != m.evidence.active) {
                        m.evidence.active = health;
                        self.changed = true;
                        self.heard |= m.evidence.heard_from();
                        adopted = true;
                    }
                }
            }
        }
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
    fn fleet_evidence(&self, fleet: &Fleet, now: Time, effects: &mut Effects) {
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

    /// The puts that publish the failures this process counted at its backends, where they
    /// changed ([`Fleet::evidence`]).
    pub fn evidence(&self, fleet: &Fleet) -> Vec<crate::fleet::Request> {
        self.members
            .iter()
            .filter_map(|m| fleet.evidence(&m.key, m.evidence.passive.failures.iter()))
            .collect()
    }

    /// Whether another balancer probes backend `index` ([`Pool::fleet_view`]).
    pub fn probed_elsewhere(&self, index: usize) -> bool {
        self.members.get(index).is_some_and(|m| m.elsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::active::Health;
    use crate::fleet::tests::{balancers, Etcd, S, TICK};

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
        let _ = pool.lease(true, now, 1);
        pool
    }

    #[test]
    fn a_pool_probes_only_the_backends_whose_duty_it_holds_and_takes_the_others_results_in() {
        let mut etcd = Etcd::default();
        let names = ["app0", "app1"];
        let mut pools = [pool_of(&names, S), pool_of(&names, S)];
        let mut fleet = balancers(2, S);
        let mut now = S;
        let mut probed = [[0u32; 2]; 2];
        for tick in 0..40 {
            for (b, pool) in fleet.iter_mut().zip(pools.iter_mut()) {
                let own = pool.active_table();
                for request in b.fleet.tick(now, &own) {
                    b.token += 1;
                    b.fleet.sent(request.call.clone(), b.token);
                    let (status, body) = etcd.answer(&request, now);
                    b.fleet.answered(b.token, status, &body, now);
                }
                let _ = pool.fleet_view(&b.fleet, now);
            }
            for (p, pool) in pools.iter_mut().enumerate() {
                for index in pool.tick(now).probes {
                    // Counted once the duties settled: at the start the first balancer holds both
                    // until the second registers, then gives one back.
                    if tick >= 10 {
                        probed[p][index] += 1;
                    }
                    // Every probe passes at once.
                    pool.probe_sent(index, 1, now);
                    let _ = pool.probe_answered(1, Some(200), false, b"", now);
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
    use crate::fleet::tests::{balancers, Balancer, Etcd, S, TICK};
    use crate::outcome::{ProxyFailure, RequestOutcome};
    use crate::pool::{Pool, Routed};
    use crate::tables::PassiveTable;
    use crate::time::Time;

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
                let more = self
                    .pool
                    .passive_written(&self.table, Some((&change, applied)), now);
                self.carry(more.share, now);
            }
        }

        fn fail(&mut self, id: u32, index: usize, now: Time) {
            let routed = Routed {
                index,
                generation: self.pool.generation(),
            };
            let failed = RequestOutcome::Failed(ProxyFailure::Reset);
            let share = self
                .pool
                .request_settled(id, routed, None, failed, || now)
                .share;
            self.carry(share, now);
        }

        /// One tick of the prober: the fleet's calls, answered by `etcd` at once, and the view.
        fn tick(&mut self, etcd: &mut Etcd, now: Time) {
            let b = &mut self.b;
            let mut requests = b.fleet.tick(now, &self.pool.active_table());
            requests.extend(self.pool.evidence(&b.fleet));
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

    fn sites(now: Time) -> (Etcd, Vec<Site>) {
        let names = ["app0", "app1", "app2"];
        let sites = balancers(2, now)
            .into_iter()
            .map(|b| Site {
                pool: pool_of(&names, now),
                table: Vec::new(),
                b,
            })
            .collect();
        (Etcd::default(), sites)
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
        let notes = sites[0].b.fleet.take_notes();
        for (key, _) in &values {
            assert!(
                notes
                    .iter()
                    .any(|n| n.text.contains(&format!("ignored the value at {key:?}"))),
                "{key}: {notes:?}"
            );
        }
    }
}
