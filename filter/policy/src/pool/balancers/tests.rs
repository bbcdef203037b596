//! The probe duties and views of a fleet of balancers, each pool against an etcd in memory.

use super::*;
use crate::active::{Health, MadeBy, ProbeAnswer};
use crate::etcd::tests::{Etcd, S, TICK};
use crate::etcd::ToEtcd;
use crate::events::Effects;

/// Carries out the fleet's calls among `effects` on `etcd`, each answered at once (the
/// call numbered after `token`), and the calls those answers ask for in turn.
fn answer_at_once(pool: &mut Pool, etcd: &mut Etcd, effects: Effects, token: &mut u32, now: Time) {
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
