//! The fake backends behave as their modes say; the scenarios rely on it.

use std::path::Path;
use std::time::Duration;

use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::mode::{Mode, Schedule};
use upcheck_e2e::replay::{Outcome, Replay};
use upcheck_e2e::upstream::{Counts, FakeUpstream};
use upcheck_e2e::upstream_process::UpstreamProcess;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What one user sees for `path`, waiting at most 300 ms.
async fn outcome(upstream: &FakeUpstream, path: &str) -> Outcome {
    let url = format!("http://{}{path}", upstream.addr());
    let report = Replay::new(url, 1, Duration::from_secs(1))
        .timeout(ms(300))
        .run()
        .await
        .expect("an HTTP client");
    report.samples[0].outcome.clone()
}

#[tokio::test]
async fn an_ok_backend_answers_200_everywhere_and_counts_probes_apart_from_pages() {
    let app = FakeUpstream::start("app1", Mode::Ok).await.unwrap();
    assert_eq!(outcome(&app, "/up").await, Outcome::Status(200));
    assert_eq!(outcome(&app, "/").await, Outcome::Status(200));
    assert_eq!(outcome(&app, "/orders/1").await, Outcome::Status(200));
    assert_eq!(
        app.counts(),
        Counts {
            probes: 1,
            requests: 2,
            with_routing_header: 0
        }
    );
}

#[tokio::test]
async fn a_status_backend_answers_that_status_to_probes_and_pages_alike() {
    let app = FakeUpstream::start("app2", Mode::Status(502))
        .await
        .unwrap();
    assert_eq!(outcome(&app, "/up").await, Outcome::Status(502));
    assert_eq!(outcome(&app, "/").await, Outcome::Status(502));
}

#[tokio::test]
async fn a_hanging_backend_never_answers_so_the_client_times_out() {
    let app = FakeUpstream::start("app2", Mode::Hang).await.unwrap();
    assert_eq!(outcome(&app, "/").await, Outcome::Timeout);
    assert_eq!(app.counts().requests, 1, "the request was read");
}

#[tokio::test]
async fn a_backend_that_never_accepts_lets_clients_connect_but_never_reads_their_requests() {
    let app = FakeUpstream::start("app2", Mode::NoAccept).await.unwrap();
    // The kernel completes the handshake from its backlog: the port looks alive.
    tokio::net::TcpStream::connect(app.addr()).await.unwrap();
    assert_eq!(outcome(&app, "/up").await, Outcome::Timeout);
    assert_eq!(app.counts(), Counts::default());
}

#[tokio::test]
async fn a_refusing_backend_refuses_connections_and_listens_again_when_it_recovers() {
    let app = FakeUpstream::start("app2", Mode::Refuse).await.unwrap();
    sleep(ms(50)).await;
    match outcome(&app, "/").await {
        Outcome::Error(text) => assert!(text.contains("refused"), "{text}"),
        other => panic!("expected a refused connection, got {other:?}"),
    }
    app.set_mode(Mode::Ok);
    sleep(ms(50)).await;
    assert_eq!(outcome(&app, "/").await, Outcome::Status(200));
}

#[tokio::test]
async fn a_backend_turning_to_refuse_closes_the_connections_it_has() {
    let app = FakeUpstream::start("app2", Mode::Hang).await.unwrap();
    let waiting = tokio::spawn({
        let url = format!("http://{}/", app.addr());
        async move {
            Replay::new(url, 1, Duration::from_secs(1))
                .timeout(ms(2000))
                .run()
                .await
        }
    });
    sleep(ms(200)).await;
    app.set_mode(Mode::Refuse);
    let report = waiting.await.unwrap().unwrap();
    let sample = &report.samples[0];
    assert!(
        matches!(sample.outcome, Outcome::Error(_)),
        "{:?}",
        sample.outcome
    );
    assert!(sample.latency < ms(1000), "closed at once, not timed out");
}

#[tokio::test]
async fn a_blip_fails_the_probe_inside_its_window_while_pages_stay_up() {
    let start = Instant::now();
    let app = FakeUpstream::start("app1", "blip:300ms..900ms".parse::<Mode>().unwrap())
        .await
        .unwrap();
    assert_eq!(outcome(&app, "/up").await, Outcome::Status(200));
    sleep_until(start + ms(500)).await;
    assert_eq!(outcome(&app, "/up").await, Outcome::Status(503));
    assert_eq!(outcome(&app, "/").await, Outcome::Status(200));
    sleep_until(start + ms(1000)).await;
    assert_eq!(outcome(&app, "/up").await, Outcome::Status(200));
}

#[tokio::test]
async fn a_slow_backend_answers_after_its_delay() {
    let app = FakeUpstream::start("app1", Mode::Slow(ms(150)))
        .await
        .unwrap();
    let url = format!("http://{}/", app.addr());
    let report = Replay::new(url, 1, Duration::from_secs(1))
        .run()
        .await
        .unwrap();
    assert_eq!(report.samples[0].outcome, Outcome::Status(200));
    assert!(report.samples[0].latency >= ms(150));
}

#[tokio::test]
async fn a_scheduled_switch_breaks_the_backend_mid_traffic() {
    let app = FakeUpstream::start(
        "app2",
        Schedule::from(Mode::Ok).then(ms(500), Mode::Status(502)),
    )
    .await
    .unwrap();
    let url = format!("http://{}/", app.addr());
    let report = Replay::new(url, 20, Duration::from_secs(1))
        .run()
        .await
        .unwrap();
    let outcomes = report.outcomes();
    assert!(outcomes["200"] >= 8 && outcomes["502"] >= 8, "{report}");
    let first_failure = report
        .samples
        .iter()
        .find(|s| s.outcome.is_failure())
        .unwrap();
    assert!(first_failure.sent >= ms(400), "{report}");
}

#[tokio::test]
async fn setting_the_mode_by_hand_cancels_the_pending_switches() {
    let app = FakeUpstream::start(
        "app2",
        Schedule::from(Mode::Ok).then(ms(200), Mode::Status(502)),
    )
    .await
    .unwrap();
    app.set_mode(Mode::Status(503));
    sleep(ms(300)).await;
    assert_eq!(app.mode(), Mode::Status(503));
}

#[tokio::test]
async fn the_binary_takes_its_schedule_from_flags_and_its_mode_and_counts_over_http() {
    let schedule = Schedule::from(Mode::Ok).then(Duration::from_secs(30), Mode::Status(502));
    let binary = Path::new(env!("CARGO_BIN_EXE_fake-upstream"));
    let app = UpstreamProcess::spawn(binary, "app2", 0, schedule).unwrap();
    let addr = app.addr();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    let page = http.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-fake-upstream"], "app2");
    let probe = http.get(format!("http://{addr}/up")).send().await.unwrap();
    assert_eq!(probe.status(), 200);

    let changed = http
        .put(format!("http://{addr}/__mode"))
        .body("status:503")
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    let page = http.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(page.status(), 503);
    let rejected = http
        .put(format!("http://{addr}/__mode"))
        .body("stauts:503")
        .send()
        .await
        .unwrap();
    assert_eq!(rejected.status(), 400);

    let counts = http
        .get(format!("http://{addr}/__counts"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        counts,
        r#"{"probes":1,"requests":2,"with_routing_header":0}"#
    );
    assert_eq!(
        app.counts().await.unwrap(),
        Counts {
            probes: 1,
            requests: 2,
            with_routing_header: 0
        }
    );
}
