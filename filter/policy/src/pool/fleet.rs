//! The fleet's view in: on the prober, which backends another balancer probes, and the probe
//! state it published, taken in as this VM's own so its workers get it from the probe table as
//! they get every other result ([`crate::fleet`]).

use super::Pool;
use crate::events::Effects;
use crate::fleet::{Duty, Fleet};
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
    fn pool_of(names: &[&str], now: Time) -> Pool {
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
