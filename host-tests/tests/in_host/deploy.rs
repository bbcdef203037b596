//! Rolling deploys and restarts through the real upcheck.wasm, on the virtual clock: each backend
//! in turn is told to stop (with the drain signal, or without warning), closes its port for 8 s,
//! boots (accepts and answers nothing for a second), then serves again; 40 users a second over
//! two workers, probes every 10 s, cluster routing (nothing is retried). The failures per run
//! are deterministic here, so they are asserted; the same deploy in a real Envoy, both routing
//! modes, is `e2e/tests/in_envoy/deploy.rs`.

use crate::support::{host, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, Load, RequestSpec, Traffic};
use upcheck_policy::drain::SIGNAL_HEADER;

const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;

/// `max_fails` by default: what a backend that vanishes may cost users when nothing is retried.
const MAX_FAILS: usize = 3;

/// How long a backend's port stays closed in a restart.
const DOWN: Duration = Duration::from_secs(8);

/// How long a booting backend accepts connections and answers nothing.
const BOOT: Duration = Duration::from_secs(1);

/// How long a backend drains before its process exits, when it is told to stop with the signal.
const DRAIN: Duration = Duration::from_secs(5);

/// When each backend's turn begins.
const TURNS: [(&str, Duration); 2] = [
    ("app1", Duration::from_secs(20)),
    ("app2", Duration::from_secs(60)),
];

/// The answer of a backend that drains: 200, with the signal.
fn signalled() -> Behaviour {
    Behaviour::status(200).header(SIGNAL_HEADER, "true")
}

/// 40 users a second for `duration`.
fn users(host: &mut Host, duration: Duration) -> Traffic {
    let traffic = host
        .load(Load {
            rate: 40,
            duration,
            request: RequestSpec::default(),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{traffic}");
    traffic
}

/// Failed user requests sent in `[from, to)`.
fn failed_between(traffic: &Traffic, from: Duration, to: Duration) -> usize {
    traffic
        .failures()
        .iter()
        .filter(|r| (from..to).contains(&r.sent))
        .count()
}

/// Each backend restarts in its turn, draining first when `drain`; returns each turn's failures.
fn rolling_deploy(drain: bool) -> Vec<usize> {
    let mut host = host();
    for (name, at) in TURNS {
        let stop = if drain { at + DRAIN } else { at };
        let mut script = host.upstream(name);
        if drain {
            script = script.all_from(at, signalled());
        }
        script
            .all_from(stop, Behaviour::Refuse)
            .all_from(stop + DOWN, Behaviour::Hang)
            .all_from(stop + DOWN + BOOT, Behaviour::status(200));
    }
    host.start(BOTH).unwrap_or_else(|e| panic!("{e}"));
    let traffic = users(&mut host, secs(100));
    let turns: Vec<usize> = TURNS
        .iter()
        .zip(TURNS.iter().skip(1).map(|(_, at)| *at).chain([secs(100)]))
        .map(|((_, from), to)| failed_between(&traffic, *from, to))
        .collect();
    assert_eq!(
        failed_between(&traffic, secs(0), secs(20)),
        0,
        "before the deploy"
    );
    turns
}

#[test]
fn a_rolling_deploy_with_the_drain_signal_fails_no_user() {
    let turns = rolling_deploy(true);
    println!("with the drain signal, failed per turn: {turns:?}");
    assert_eq!(turns, [0, 0]);
}

#[test]
fn a_rolling_deploy_without_warning_fails_at_most_max_fails_users_per_restart() {
    let turns = rolling_deploy(false);
    println!("without warning, failed per turn: {turns:?}");
    assert!(turns.iter().all(|f| *f <= MAX_FAILS), "{turns:?}");
    assert!(
        turns.iter().any(|f| *f > 0),
        "a port closed under users costs the requests that meet it: {turns:?}"
    );
}

#[test]
fn a_restart_while_the_other_backend_drains_fails_at_most_max_fails_users() {
    let mut host = host();
    host.upstream("app1").all_from(secs(10), signalled());
    host.upstream("app2")
        .all_from(secs(20), Behaviour::Refuse)
        .all_from(secs(20) + DOWN, Behaviour::Hang)
        .all_from(secs(20) + DOWN + BOOT, Behaviour::status(200));
    host.start(BOTH).unwrap_or_else(|e| panic!("{e}"));
    let traffic = users(&mut host, secs(60));
    let failed = traffic.failures().len();
    let by_backend = traffic.by_upstream();
    println!("app2 restarts while app1 drains: {failed} failed; routed {by_backend:?}");
    assert!(failed <= MAX_FAILS, "{traffic}");
    let app1_while_app2_down = traffic
        .requests
        .iter()
        .filter(|r| r.upstream.as_deref() == Some("app1"))
        .filter(|r| (secs(21)..secs(28)).contains(&r.sent))
        .count();
    assert!(
        app1_while_app2_down > 200,
        "the draining app1 served while app2's port was closed: {app1_while_app2_down}"
    );
    let app1_after = traffic
        .requests
        .iter()
        .filter(|r| r.upstream.as_deref() == Some("app1") && r.sent >= secs(45))
        .count();
    assert_eq!(
        app1_after, 0,
        "app2 is back: app1, still draining, takes nothing new"
    );
    assert_eq!(host.metric("upcheck.app1.draining"), Some(1));
}
