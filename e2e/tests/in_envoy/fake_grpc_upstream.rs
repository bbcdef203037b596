//! The fake gRPC backends and their users behave as their modes say, talked to directly (no
//! Envoy): the gRPC scenarios will rely on it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::{timeout, Instant};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};
use tonic_health::pb::health_check_response::ServingStatus as Watched;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use upcheck_e2e::grpc_replay::{call_once, GrpcCall, GrpcReplay};
use upcheck_e2e::grpc_upstream::{CallMode, GrpcUpstream, HealthMode, ServingStatus};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client of `app`'s health service on a connection of its own.
async fn health(app: &GrpcUpstream) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(app.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn asking(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

/// What `Check` answers for `service`: a status, or the call's code.
async fn check(health: &mut HealthClient<Channel>, service: &str) -> Result<Watched, Code> {
    match health.check(asking(service)).await {
        Ok(answer) => Ok(watched(answer.get_ref())),
        Err(status) => Err(status.code()),
    }
}

fn watched(answer: &HealthCheckResponse) -> Watched {
    Watched::try_from(answer.status).unwrap()
}

/// The next message of a `Watch` stream, waiting at most 5 s for it.
async fn next(stream: &mut Streaming<HealthCheckResponse>) -> Watched {
    let message = timeout(ms(5000), stream.message()).await;
    watched(&message.expect("a message within 5 s").unwrap().unwrap())
}

/// One user call to `app`, with a deadline of 2 s.
async fn user_call(app: &GrpcUpstream) -> GrpcCall {
    call_once(&app.url(), ms(2000)).await.unwrap()
}

/// What a test reads of a call: its code, who answered, whether the status came trailers-only.
fn seen(call: &GrpcCall) -> (Code, Option<&str>, bool) {
    (call.code, call.backend.as_deref(), call.trailers_only)
}

#[tokio::test]
async fn check_answers_the_status_set_for_the_server_and_for_a_named_service_and_not_found_for_an_unknown_one(
) {
    let app = GrpcUpstream::start("app1").await.unwrap();
    let mut health = health(&app).await;
    assert_eq!(check(&mut health, "").await, Ok(Watched::Serving));
    assert_eq!(check(&mut health, "orders").await, Err(Code::NotFound));

    app.set_serving_status("orders", ServingStatus::Serving)
        .await;
    assert_eq!(check(&mut health, "orders").await, Ok(Watched::Serving));
    app.set_serving_status("", ServingStatus::NotServing).await;
    app.set_serving_status("orders", ServingStatus::NotServing)
        .await;
    assert_eq!(check(&mut health, "").await, Ok(Watched::NotServing));
    assert_eq!(check(&mut health, "orders").await, Ok(Watched::NotServing));

    app.forget_service("orders").await;
    assert_eq!(check(&mut health, "orders").await, Err(Code::NotFound));
    let counts = app.counts();
    assert_eq!((counts.checks, counts.calls, counts.watches), (6, 0, 0));
}

#[tokio::test]
async fn a_watch_receives_serving_then_not_serving_within_100_ms_of_the_change() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    app.set_serving_status("orders", ServingStatus::Serving)
        .await;
    let mut health = health(&app).await;
    let mut stream = health.watch(asking("orders")).await.unwrap().into_inner();
    assert_eq!(next(&mut stream).await, Watched::Serving);

    let changed = Instant::now();
    app.set_serving_status("orders", ServingStatus::NotServing)
        .await;
    assert_eq!(next(&mut stream).await, Watched::NotServing);
    let took = changed.elapsed();
    println!("NOT_SERVING reached the watch {took:?} after the change");
    assert!(took < ms(100), "pushed at once, not polled: {took:?}");
    let counts = app.counts();
    assert_eq!((counts.watches, counts.watches_open), (1, 1));
}

#[tokio::test]
async fn a_watch_of_an_unknown_service_says_so_and_stays_open_until_it_is_known() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    let mut health = health(&app).await;
    let mut stream = health.watch(asking("orders")).await.unwrap().into_inner();
    assert_eq!(next(&mut stream).await, Watched::ServiceUnknown);

    app.set_serving_status("orders", ServingStatus::Serving)
        .await;
    assert_eq!(next(&mut stream).await, Watched::Serving);
    // A status set again is no change, so the next message is the next change.
    app.set_serving_status("orders", ServingStatus::Serving)
        .await;
    app.set_serving_status("orders", ServingStatus::NotServing)
        .await;
    assert_eq!(next(&mut stream).await, Watched::NotServing);
    app.forget_service("orders").await;
    assert_eq!(next(&mut stream).await, Watched::ServiceUnknown);
}

#[tokio::test]
async fn as_tonic_health_a_watch_of_an_unknown_service_ends_at_once_with_not_found() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    app.set_health_mode(HealthMode::TonicHealth);
    let mut health = health(&app).await;
    let unknown = health.watch(asking("orders")).await.err().map(|s| s.code());
    assert_eq!(unknown, Some(Code::NotFound));
    assert_eq!(check(&mut health, "orders").await, Err(Code::NotFound));
    assert_eq!(check(&mut health, "").await, Ok(Watched::Serving));

    // The statuses set are the same in either mode.
    app.set_serving_status("orders", ServingStatus::NotServing)
        .await;
    let mut stream = health.watch(asking("orders")).await.unwrap().into_inner();
    assert_eq!(next(&mut stream).await, Watched::NotServing);
    app.set_serving_status("orders", ServingStatus::Serving)
        .await;
    assert_eq!(next(&mut stream).await, Watched::Serving);
    // Forgotten while watched: the stream ends, with OK.
    app.forget_service("orders").await;
    let end = timeout(ms(5000), stream.message()).await.unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn without_the_health_service_check_and_watch_answer_unimplemented_and_user_calls_still_work()
{
    let app = GrpcUpstream::start("app1").await.unwrap();
    app.set_health_mode(HealthMode::Absent);
    let mut health = health(&app).await;
    assert_eq!(check(&mut health, "").await, Err(Code::Unimplemented));
    let watching = health.watch(asking("")).await.err().map(|s| s.code());
    assert_eq!(watching, Some(Code::Unimplemented));
    assert_eq!(
        seen(&user_call(&app).await),
        (Code::Ok, Some("app1"), false)
    );

    app.set_health_mode(HealthMode::Standard);
    assert_eq!(check(&mut health, "").await, Ok(Watched::Serving));
    let counts = app.counts();
    assert_eq!((counts.checks, counts.watches, counts.calls), (2, 1, 1));
}

#[tokio::test]
async fn user_calls_answer_ok_with_the_backends_name_then_the_status_set_trailers_only() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    let call = user_call(&app).await;
    assert_eq!(seen(&call), (Code::Ok, Some("app1"), false));
    assert!(call.answered);

    for code in [Code::Unavailable, Code::Internal, Code::InvalidArgument] {
        app.set_call_mode(CallMode::Status(code));
        let call = user_call(&app).await;
        assert_eq!(seen(&call), (code, Some("app1"), true), "{call:?}");
        assert!(call.answered);
    }
    // The same status after the answer's headers: only the trailers carry it.
    app.set_call_mode(CallMode::StatusInTrailers(Code::Unavailable));
    let call = user_call(&app).await;
    assert_eq!(seen(&call), (Code::Unavailable, Some("app1"), false));
    assert_eq!(app.counts().calls, 5);
}

#[tokio::test]
async fn a_delayed_backend_answers_its_status_after_the_delay_unless_the_deadline_comes_first() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    app.set_call_mode(CallMode::Delayed(ms(300), Code::Unavailable));
    let call = user_call(&app).await;
    assert_eq!(seen(&call), (Code::Unavailable, Some("app1"), true));
    assert!(call.latency >= ms(300), "{call:?}");

    app.set_call_mode(CallMode::Delayed(ms(300), Code::Ok));
    let call = user_call(&app).await;
    assert_eq!(seen(&call), (Code::Ok, Some("app1"), false));
    assert!(call.latency >= ms(300), "{call:?}");

    app.set_call_mode(CallMode::Delayed(ms(5000), Code::Ok));
    let call = call_once(&app.url(), ms(300)).await.unwrap();
    assert_eq!(seen(&call), (Code::DeadlineExceeded, None, false));
    assert!(!call.answered);
    assert!(call.latency >= ms(300), "{call:?}");
}

#[tokio::test]
async fn a_stopped_backend_fails_calls_as_unavailable_drops_its_watches_and_serves_again_on_its_port(
) {
    let app = GrpcUpstream::start("app1").await.unwrap();
    let mut health = health(&app).await;
    let mut stream = health.watch(asking("")).await.unwrap().into_inner();
    assert_eq!(next(&mut stream).await, Watched::Serving);
    assert_eq!(user_call(&app).await.code, Code::Ok);

    app.stop().await.unwrap();
    assert!(!app.is_serving());
    let end = timeout(ms(5000), stream.message()).await.unwrap();
    assert!(end.is_err(), "the watch broke with its connection: {end:?}");
    let call = user_call(&app).await;
    assert_eq!(seen(&call), (Code::Unavailable, None, false));
    assert!(!call.answered);
    assert!(call.message.contains("refused"), "{}", call.message);
    let report = GrpcReplay::new(app.url(), 20, ms(500)).run().await.unwrap();
    assert_eq!(report.by_code(), BTreeMap::from([("UNAVAILABLE", 10)]));
    // Nothing reached it, and the watch it had is gone.
    let deadline = Instant::now() + ms(5000);
    while app.counts().watches_open > 0 && Instant::now() < deadline {
        tokio::time::sleep(ms(10)).await;
    }
    let counts = app.counts();
    assert_eq!(
        (counts.calls, counts.watches, counts.watches_open),
        (1, 1, 0)
    );

    app.start_again().await.unwrap();
    assert_eq!(
        seen(&user_call(&app).await),
        (Code::Ok, Some("app1"), false)
    );
    assert_eq!(check(&mut health, "").await, Ok(Watched::Serving));
    assert_eq!(app.counts().calls, 2);
}

#[tokio::test]
async fn a_replay_at_20_calls_a_second_for_2_s_reports_40_calls_and_their_codes() {
    let app = GrpcUpstream::start("app1").await.unwrap();
    let started = Instant::now();
    let report = GrpcReplay::new(app.url(), 20, ms(2000))
        .run()
        .await
        .unwrap();
    println!("{report}");
    assert!(started.elapsed() >= ms(1950), "sent on schedule");
    assert_eq!(report.calls(), 40);
    assert_eq!(report.by_code(), BTreeMap::from([("OK", 40)]));
    assert_eq!(
        report.by_backend(),
        BTreeMap::from([("app1".to_owned(), 40)])
    );
    let counts = app.counts();
    assert_eq!(
        (counts.calls, counts.connections),
        (40, 1),
        "one connection"
    );

    app.set_call_mode(CallMode::Status(Code::Unavailable));
    let report = GrpcReplay::new(app.url(), 20, ms(1000))
        .connection_per_call()
        .run()
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(report.calls(), 20);
    assert_eq!(report.failed(), 20);
    assert_eq!(report.by_code(), BTreeMap::from([("UNAVAILABLE", 20)]));
    assert!(report.samples.iter().all(|c| c.answered && c.trailers_only));
    let counts = app.counts();
    assert_eq!((counts.calls, counts.connections), (60, 21), "one per call");
}
