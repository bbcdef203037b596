//! Properties of the policy over random histories of probes, requests and time, for 1 to 50
//! backends.

use crate::support;

use proptest::prelude::*;
use std::time::Duration;
use support::*;
use upcheck_policy::outcome::Contact;
use upcheck_policy::{Config, Evidence, Pick, ProbeOutcome, ProxyFailure, RequestOutcome};

#[derive(Debug, Clone)]
enum Step {
    Probe(usize, ProbeOutcome),
    Request(usize, RequestOutcome),
    Advance(u64),
}

fn probe_outcome() -> impl Strategy<Value = ProbeOutcome> {
    prop_oneof![
        3 => Just(ProbeOutcome::Pass),
        1 => Just(SOFT_503),
        1 => Just(TIMEOUT),
        1 => Just(ProbeOutcome::Refused),
    ]
}

fn request_outcome() -> impl Strategy<Value = RequestOutcome> {
    prop_oneof![
        3 => (200u16..600, 0u64..3_000).prop_map(|(status, l)| RequestOutcome::Answered { status, latency: ms(l), grpc: None }),
        1 => Just(REFUSED),
        1 => Just(RequestOutcome::Failed(ProxyFailure::Reset)),
        1 => Just(RequestOutcome::Failed(ProxyFailure::Timeout)),
        1 => (0u64..5_000).prop_map(|w| RequestOutcome::StillWaiting(ms(w))),
        1 => Just(RequestOutcome::ClientGone),
        1 => Just(RequestOutcome::RetriedElsewhere),
    ]
}

fn step(n: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..n, probe_outcome()).prop_map(|(i, o)| Step::Probe(i, o)),
        4 => (0..n, request_outcome()).prop_map(|(i, o)| Step::Request(i, o)),
        2 => (0u64..4_000).prop_map(Step::Advance),
    ]
}

fn scenario() -> impl Strategy<Value = (Vec<u32>, u8, bool, Vec<Step>)> {
    (1usize..=50).prop_flat_map(|n| {
        (
            proptest::collection::vec(1u32..=5, n),
            0u8..=100,
            any::<bool>(),
            proptest::collection::vec(step(n), 0..300),
        )
    })
}

fn build(weights: &[u32], max_ejection: u8, latency: bool) -> Config {
    let ups: Vec<String> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!(r#"{{"name":"b{i}","weight":{w}}}"#))
        .collect();
    let passive = if latency {
        r#","health_checks":{"passive":{"unhealthy_latency":"1s"}}"#
    } else {
        ""
    };
    let json = format!(
        r#"{{"upstreams":[{}],"max_ejection_percent":{max_ejection}{passive}}}"#,
        ups.join(",")
    );
    Config::parse(json.as_bytes()).expect("generated config parses")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_pool_guard_holds_over_any_history((weights, max_ejection, latency, steps) in scenario()) {
        let n = weights.len();
        let mut proxy = Proxy::new(build(&weights, max_ejection, latency), Duration::ZERO);
        let names: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
        let mut now = Duration::ZERO;
        // Whether each backend's latest contact (probe or request) was a refusal.
        let mut refused = vec![false; n];
        for step in steps {
            // Distinct events happen at distinct instants; the model orders them the same way.
            now += Duration::from_micros(1);
            match step {
                Step::Probe(i, o) => {
                    proxy.probe(&names[i], o, now);
                    refused[i] = o == ProbeOutcome::Refused;
                }
                Step::Request(i, o) => {
                    proxy.request(&names[i], o, now);
                    if let Some(found) = o.contact() {
                        refused[i] = found == Contact::Refused;
                    }
                }
                Step::Advance(d) => now += ms(d),
            }
            proxy.tick(now);
            let evidence: Vec<Evidence> = proxy.members().iter().map(|m| m.evidence.clone()).collect();
            let expected = upcheck_policy::guard::route(&evidence, now, proxy.config());
            let routable: Vec<bool> = proxy.members().iter().map(|m| m.routable).collect();
            let ejected = proxy.ejected();
            prop_assert_eq!(&routable, &expected.routable, "a refresh that skipped work left a stale routing");
            prop_assert_eq!(&ejected, &expected.ejected, "stale ejections");
            prop_assert_eq!(proxy.guard(), expected.guard, "stale guard");

            prop_assert!(routable.contains(&true), "nothing routable");

            let out = ejected.iter().filter(|e| **e).count();
            let base = routable.iter().zip(&ejected).filter(|(r, e)| **r || **e).count();
            prop_assert!(out * 100 <= usize::from(max_ejection) * base, "{out} of {base} ejected");
            prop_assert!(out < base.max(1), "every backend ejected");

            if let Pick::Backend(i) = proxy.pick(now) {
                prop_assert!(!refused[i] || refused.iter().all(|r| *r),
                    "picked b{i}, which refused, while another accepts");
            }
        }
    }

    #[test]
    fn selection_matches_weights_within_one_percent((weights, max_ejection, latency, steps) in scenario()) {
        let names: Vec<String> = (0..weights.len()).map(|i| format!("b{i}")).collect();
        let mut proxy = Proxy::new(build(&weights, max_ejection, latency), Duration::ZERO);
        let mut now = Duration::ZERO;
        for step in steps {
            match step {
                Step::Probe(i, o) => proxy.probe(&names[i], o, now),
                Step::Request(i, o) => proxy.request(&names[i], o, now),
                Step::Advance(d) => now += ms(d),
            }
        }
        now += secs(5);
        proxy.tick(now);
        let routable: Vec<bool> = proxy.members().iter().map(|m| m.routable).collect();
        let total_weight: u32 = weights.iter().zip(&routable).filter(|(_, r)| **r).map(|(w, _)| *w).sum();
        let rounds = 20_000usize;
        let mut got = vec![0usize; weights.len()];
        for _ in 0..rounds {
            if let Pick::Backend(i) = proxy.pick(now) { got[i] += 1; }
        }
        for (i, w) in weights.iter().enumerate() {
            let expected = if routable[i] { f64::from(*w) / f64::from(total_weight) } else { 0.0 };
            let share = got[i] as f64 / rounds as f64;
            prop_assert!((share - expected).abs() <= 0.01, "b{i}: share {share}, expected {expected}");
        }
    }
}

proptest! {
    #[test]
    fn a_status_read_from_bytes_is_the_status_the_text_parses_as(value in "[ +0-9a\t]{0,8}") {
        let text = value.trim().parse::<u16>().ok();
        prop_assert_eq!(upcheck_policy::outcome::status_code(value.as_bytes()), text);
    }

    #[test]
    fn whole_milliseconds_and_nanoseconds_are_durations_own_saturated_to_u64(
        secs in prop_oneof![
            0u64..100_000,
            any::<u64>(),
            Just(u64::MAX / 1_000),
            Just(u64::MAX / 1_000_000_000),
            Just(u64::MAX / 1_000_000_000 + 1),
        ],
        nanos in 0u32..1_000_000_000,
    ) {
        let t = Duration::new(secs, nanos);
        let saturated = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
        prop_assert_eq!(upcheck_policy::time::millis(t), saturated(t.as_millis()));
        prop_assert_eq!(upcheck_policy::time::nanos(t), saturated(t.as_nanos()));
    }
}
