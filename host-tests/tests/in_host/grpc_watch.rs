//! Pushed health through the real upcheck.wasm: each gRPC backend's
//! `grpc.health.v1.Health/Watch` on a gRPC stream of this host to a real gRPC server (e2e's fake,
//! serving the standard health service, tonic's HTTP/2 in plaintext), opened by the prober.
//!
//! What it covers: the stream opened once per backend for the process (not once per VM), with
//! the service asked for; a `NOT_SERVING` message drains its backend before the next request
//! any worker routes; `SERVING` brings it back as soon; a stream that ends (the server stopped)
//! is opened again after 1 s, then 2 s, then 4 s while the server stays down, and once it is back
//! the backend's status is pushed again. The server lives in real time, so the virtual clock is
//! paced to it while a message is awaited, and requests are sent in virtual time between.
//!
//! This host refuses unary gRPC calls (`proxy_grpc_call`), so each backend's `Check` is refused
//! here (the proxy's refusal, reported once); the interval is 60 s so that only the first round
//! of them, at start, falls in a test, and the Watch's word, newer, stands over it.

use crate::support::{host, ok, secs};
use std::time::{Duration, Instant};
use upcheck_e2e::grpc_upstream::{GrpcUpstream, ServingStatus};
use upcheck_host_tests::{Host, Load, RequestSpec, Traffic};

const SERVICE: &str = "shop.Cart";

const CONFIG: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}],
  "health_checks":{"active":{"grpc":{"service":"shop.Cart"},"interval":"60s"}}}"#;

/// A runtime for the servers, and two backends serving `shop.Cart`, behind clusters `app1` and
/// `app2` of a host (user requests go to its scripted upstreams of the same names, which answer
/// 200), the module started.
fn started() -> (tokio::runtime::Runtime, Vec<GrpcUpstream>, Host) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<GrpcUpstream> = ["app1", "app2"]
        .iter()
        .map(|name| {
            runtime.block_on(async {
                let server = GrpcUpstream::start(name).await.unwrap();
                server
                    .set_serving_status(SERVICE, ServingStatus::Serving)
                    .await;
                server
            })
        })
        .collect();
    let mut host = host();
    for (name, server) in ["app1", "app2"].iter().zip(&servers) {
        host.upstream(name);
        host.real_cluster(name, server.addr());
    }
    ok(host.start(CONFIG));
    (runtime, servers, host)
}

/// Paces the virtual clock to real time, 10 ms at a time, until `done` (at most 20 s).
fn paced_until(host: &mut Host, mut done: impl FnMut(&Host) -> bool) {
    let started = Instant::now();
    while !done(host) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "waited 20 s of real time"
        );
        std::thread::sleep(Duration::from_millis(10));
        ok(host.advance(Duration::from_millis(10)));
    }
}

/// The log lines saying `text` so far.
fn logged(host: &Host, text: &str) -> usize {
    host.logs()
        .iter()
        .filter(|l| l.message.contains(text))
        .count()
}

/// The virtual times the Watches of cluster `cluster` were opened at.
fn watches_opened(host: &Host, cluster: &str) -> Vec<Duration> {
    host.real_streams()
        .iter()
        .filter(|s| s.cluster == cluster && s.method == "Watch")
        .map(|s| s.opened)
        .collect()
}

/// 40 requests a second for `duration`, from now.
fn traffic(host: &mut Host, duration: Duration) -> Traffic {
    let traffic = ok(host.load(Load {
        rate: 40,
        duration,
        request: RequestSpec::default(),
    }));
    println!("{traffic}");
    traffic
}

fn routed_to(traffic: &Traffic, upstream: &str) -> usize {
    traffic
        .requests
        .iter()
        .filter(|r| r.upstream.as_deref() == Some(upstream))
        .count()
}

#[test]
fn one_watch_per_backend_for_the_process_says_not_serving_and_serving_and_each_takes_effect_at_once(
) {
    let (runtime, servers, mut host) = started();
    paced_until(&mut host, |h| {
        logged(h, "app1 healthy") + logged(h, "app2 healthy") == 2
    });
    let before = traffic(&mut host, secs(2));
    assert!(routed_to(&before, "app2") > 20, "{before}");

    runtime.block_on(servers[1].set_serving_status(SERVICE, ServingStatus::NotServing));
    paced_until(&mut host, |h| {
        logged(
            h,
            "app2 draining, no new requests: it said NOT_SERVING on its Watch",
        ) == 1
    });
    let draining = traffic(&mut host, secs(5));
    assert_eq!(routed_to(&draining, "app2"), 0, "{draining}");
    assert!(draining.failures().is_empty(), "{draining}");

    runtime.block_on(servers[1].set_serving_status(SERVICE, ServingStatus::Serving));
    paced_until(&mut host, |h| logged(h, "app2 no longer draining") == 1);
    let back = traffic(&mut host, secs(2));
    assert!(routed_to(&back, "app2") > 20, "{back}");

    assert_eq!(
        host.metric("upcheck.app2.probe_failures").unwrap_or(0),
        1,
        "only the refused Check at start"
    );
    for (name, server) in ["app1", "app2"].iter().zip(&servers) {
        assert_eq!(watches_opened(&host, name).len(), 1, "{name}: one stream");
        let counts = server.counts();
        assert_eq!((counts.watches, counts.watches_open), (1, 1), "{name}");
    }
    let stream = host
        .real_streams()
        .into_iter()
        .find(|s| s.cluster == "app2")
        .unwrap();
    assert_eq!(stream.service, "grpc.health.v1.Health");
    assert_eq!(stream.messages_out, 1, "its one request");
    assert_eq!(stream.messages_in, 3, "SERVING, NOT_SERVING, SERVING");
}

#[test]
fn a_watch_that_ends_is_opened_again_after_one_two_then_four_seconds_and_speaks_again_once_the_server_is_back(
) {
    let (runtime, servers, mut host) = started();
    paced_until(&mut host, |h| logged(h, "app2 healthy") == 1);
    runtime.block_on(servers[1].stop()).unwrap();
    let stopped = host.now();
    paced_until(&mut host, |h| watches_opened(h, "app2").len() == 4);
    let opened = watches_opened(&host, "app2");
    let waits: Vec<u128> = opened
        .windows(2)
        .skip(1)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    println!("app2 stopped at {stopped:?}, its Watch opened at {opened:?}");
    // Each wait runs from the stream's end (a refused connection ends it within a tick or two
    // of real time) to the first tick from then on, 200 ms apart.
    assert!(opened[1] - stopped >= secs(1), "{opened:?}");
    assert!((2_000..2_600).contains(&waits[0]), "{waits:?}");
    assert!((4_000..4_600).contains(&waits[1]), "{waits:?}");
    assert_eq!(
        host.metric("upcheck.app2.probe_failures").unwrap_or(0),
        1,
        "no failure from the Watch"
    );

    runtime.block_on(servers[1].set_serving_status(SERVICE, ServingStatus::NotServing));
    runtime.block_on(servers[1].start_again()).unwrap();
    paced_until(&mut host, |h| {
        logged(
            h,
            "app2 draining, no new requests: it said NOT_SERVING on its Watch",
        ) == 1
    });
    let draining = traffic(&mut host, secs(2));
    assert_eq!(routed_to(&draining, "app2"), 0, "{draining}");
}
