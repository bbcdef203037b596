//! What the policy tests share: a pool from JSON, and time in readable units.

#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;
use upcheck_policy::{Config, Pick, Pool, ProbeOutcome, ProxyFailure, RequestOutcome};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The seed config (10 s / 5 s, 3 in 10 s) over `names`, with `extra` top-level fields.
pub fn config(names: &[&str], extra: &str) -> Config {
    let ups: Vec<String> = names
        .iter()
        .map(|n| format!(r#"{{"name":"{n}"}}"#))
        .collect();
    let sep = if extra.is_empty() { "" } else { "," };
    let json = format!(r#"{{"upstreams":[{}]{sep}{extra}}}"#, ups.join(","));
    Config::parse(json.as_bytes()).expect("test config parses")
}

pub fn pool(names: &[&str]) -> Pool {
    Pool::new(config(names, ""), Duration::ZERO)
}

pub fn probe(pool: &mut Pool, name: &str, outcome: ProbeOutcome, at: Duration) {
    let i = pool.index_of(name).expect("known backend");
    pool.observe_probe(i, outcome, at);
    pool.refresh(at);
}

pub fn request(pool: &mut Pool, name: &str, outcome: RequestOutcome, at: Duration) {
    let i = pool.index_of(name).expect("known backend");
    pool.observe_request(i, outcome, at);
    pool.refresh(at);
}

pub fn answered(status: u16) -> RequestOutcome {
    RequestOutcome::Answered {
        status,
        latency: ms(5),
    }
}

pub const REFUSED: RequestOutcome = RequestOutcome::Failed(ProxyFailure::Refused);
pub const SOFT_503: ProbeOutcome = ProbeOutcome::Soft(Some(503));
pub const TIMEOUT: ProbeOutcome = ProbeOutcome::Timeout(Duration::from_secs(5));

/// Names of the backends `n` picks at `at` go to, in order.
pub fn picks(pool: &mut Pool, n: usize, at: Duration) -> Vec<String> {
    (0..n)
        .map(|_| match pool.pick(at) {
            Pick::Backend(i) => pool.config().upstreams[i].name.clone(),
            Pick::Wait(until) => format!("wait until {until:?}"),
        })
        .collect()
}

pub fn routable(pool: &Pool) -> Vec<&str> {
    pool.routing()
        .routable
        .iter()
        .zip(&pool.config().upstreams)
        .filter(|(r, _)| **r)
        .map(|(_, u)| u.name.as_str())
        .collect()
}
