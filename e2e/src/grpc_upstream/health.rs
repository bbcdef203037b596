//! The fake backend's health service (`grpc.health.v1.Health`): `Check` and `Watch` answered
//! from the backend's state as the test sets it, or by tonic-health's own service
//! ([`HealthMode::TonicHealth`]), with each open `Watch` counted.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus as WatchedStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::HealthService;

use super::{HealthMode, Shared};

/// The health service's answers, from the backend's state.
pub(super) struct HealthAnswers(pub(super) Arc<Shared>);

/// A `Watch` stream as served: its messages, counted open while it lives.
type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthAnswers {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let shared = &self.0;
        if shared.health.borrow().mode == HealthMode::TonicHealth {
            return HealthService::from_health_reporter(shared.reporter.clone())
                .check(request)
                .await;
        }
        let service = &request.get_ref().service;
        let known = shared.health.borrow().statuses.get(service).copied();
        match known {
            Some(status) => Ok(Response::new(answer(status.into()))),
            None => Err(Status::not_found(format!("unknown service {service:?}"))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let shared = &self.0;
        let inner: WatchStream = if shared.health.borrow().mode == HealthMode::TonicHealth {
            let stock = HealthService::from_health_reporter(shared.reporter.clone())
                .watch(request)
                .await?;
            Box::pin(stock.into_inner())
        } else {
            Box::pin(follow(shared, request.into_inner().service))
        };
        Ok(Response::new(Box::pin(OpenWatch::new(shared, inner))))
    }
}

fn answer(status: WatchedStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

/// The messages of a standard `Watch` on `service`: its status now (`SERVICE_UNKNOWN` if not
/// known), then each change, until the stream is dropped (its call ended or its connection
/// closed) or the backend is.
fn follow(shared: &Shared, service: String) -> ReceiverStream<Result<HealthCheckResponse, Status>> {
    let (messages, stream) = mpsc::channel(4);
    let mut health = shared.health.subscribe();
    tokio::spawn(async move {
        let mut sent = None;
        loop {
            let now = health
                .borrow_and_update()
                .statuses
                .get(&service)
                .map_or(WatchedStatus::ServiceUnknown, |status| (*status).into());
            if sent != Some(now) {
                if messages.send(Ok(answer(now))).await.is_err() {
                    return;
                }
                sent = Some(now);
            }
            tokio::select! {
                changed = health.changed() => if changed.is_err() { return },
                () = messages.closed() => return,
            }
        }
    });
    ReceiverStream::new(stream)
}

/// A `Watch` stream counted in [`GrpcCounts::watches_open`] while it lives.
struct OpenWatch {
    inner: WatchStream,
    shared: Arc<Shared>,
}

impl OpenWatch {
    fn new(shared: &Arc<Shared>, inner: WatchStream) -> Self {
        shared.watches_open.fetch_add(1, Ordering::Relaxed);
        OpenWatch {
            inner,
            shared: shared.clone(),
        }
    }
}

impl Stream for OpenWatch {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.shared.watches_open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc_upstream::ServingStatus;
    use tokio_stream::StreamExt as _;
    use tonic::Code;
    use tonic_health::server::HealthReporter;

    /// What [`HealthMode::TonicHealth`] says of tonic-health's own service, asked directly.
    #[tokio::test]
    async fn tonic_healths_own_service_answers_not_found_to_a_watch_of_an_unknown_service() {
        let reporter = HealthReporter::new();
        let service = HealthService::from_health_reporter(reporter.clone());
        let ask = |name: &str| {
            Request::new(HealthCheckRequest {
                service: name.to_owned(),
            })
        };
        let unknown = service.watch(ask("nope")).await.err().map(|s| s.code());
        assert_eq!(unknown, Some(Code::NotFound));
        let unknown = service.check(ask("nope")).await.err().map(|s| s.code());
        assert_eq!(unknown, Some(Code::NotFound));

        // A watched service forgotten ends the stream, without an error.
        reporter
            .set_service_status("app", ServingStatus::Serving)
            .await;
        let mut stream = service.watch(ask("app")).await.unwrap().into_inner();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.status, WatchedStatus::Serving as i32);
        // The same status set again is sent again.
        reporter
            .set_service_status("app", ServingStatus::Serving)
            .await;
        let again = stream.next().await.unwrap().unwrap();
        assert_eq!(again.status, WatchedStatus::Serving as i32);
        reporter.clone().clear_service_status("app").await;
        assert!(stream.next().await.is_none());
    }
}
