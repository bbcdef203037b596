//! A fake gRPC backend on 127.0.0.1: a real gRPC server that is healthy, unhealthy or gone on
//! command, as [`crate::upstream`] is for HTTP.
//!
//! gRPC backends are checked differently from HTTP ones: actively by the gRPC Health Checking
//! Protocol (`grpc.health.v1.Health`, its unary `Check` and its server-streaming `Watch`), and
//! passively by the `grpc-status` of user calls, which an HTTP status of 200 does not reveal. So a
//! scenario needs a server that speaks both for real, over HTTP/2 in plaintext (h2c) as backends
//! behind Envoy do, and whose every answer the test chooses while it runs:
//! - the **health service**, for the whole server (`""`, `SERVING` from the start) and for named
//!   services ([`GrpcUpstream::set_serving_status`], [`GrpcUpstream::forget_service`]): `Check`
//!   answers the status, or `NOT_FOUND` for a service it does not know; `Watch` sends the status
//!   at once and every change as it is made, `SERVICE_UNKNOWN` for a service it does not know.
//!   It can also answer as tonic-health's own service does, or be absent, as in a server built
//!   without it ([`HealthMode`]);
//! - a **test service for user calls**, `upcheck.test.Echo/Call` (unary, [`EchoRequest`] to
//!   [`EchoReply`]), answering OK, a status of the test's choosing in a trailers-only answer or
//!   in trailers after the headers, or either after a delay ([`CallMode`]);
//! - every answer, of either service or none, names the backend in [`NAME_HEADER`], so a test
//!   behind a proxy knows who answered, failures included.
//!
//! It can stop serving and start again on the same port ([`GrpcUpstream::stop`],
//! [`GrpcUpstream::start_again`]), and counts what it received ([`GrpcCounts`]): the questions
//! the scenarios ask are "did the checks go out once per interval", "is a Watch held open" and
//! "did any user call reach the broken backend".
//!
//! The server is tonic's per-method machinery (`tonic::server::Grpc`, the health service's code
//! that `tonic-health` ships) behind an accept loop and hyper's HTTP/2 of its own, rather than
//! tonic's transport: that is what lets it refuse connections while stopped, drop the ones it
//! has, and keep its port.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::Service as _;
use tonic::server::{Grpc, ServerStreamingService, UnaryService};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthReporter;
use tonic_prost::ProstCodec;

use crate::upstream::{hold, rebind};

mod health;

use health::HealthAnswers;

pub use tonic_health::ServingStatus;

/// The response header (initial metadata, or the one header block of a trailers-only answer)
/// that names the backend that answered: every answer carries it.
pub const NAME_HEADER: &str = "x-upcheck-backend";

/// The standard health service's full name.
pub const HEALTH_SERVICE: &str = tonic_health::pb::health_server::SERVICE_NAME;

/// The path of the health service's unary `Check`.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// The path of the health service's server-streaming `Watch`.
pub const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";

/// The test service's full name, for user calls.
pub const ECHO_SERVICE: &str = "upcheck.test.Echo";

/// The path of the test service's one method, unary: [`EchoRequest`] in, [`EchoReply`] out.
pub const ECHO_CALL: &str = "/upcheck.test.Echo/Call";

/// How long [`GrpcUpstream::stop`] and [`GrpcUpstream::start_again`] wait for the change.
const CHANGE_WITHIN: Duration = Duration::from_secs(5);

/// A user's call to the test service (`message EchoRequest { string text = 1; }`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    /// Anything; it comes back in the reply.
    #[prost(string, tag = "1")]
    pub text: String,
}

/// The test service's answer (`message EchoReply { string text = 1; string backend = 2; }`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    /// The request's text.
    #[prost(string, tag = "1")]
    pub text: String,
    /// The name of the backend that answered.
    #[prost(string, tag = "2")]
    pub backend: String,
}

/// How the test service answers user calls; [`CallMode::Ok`] unless set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallMode {
    /// Answers every call at once with a reply and status OK.
    #[default]
    Ok,
    /// Answers every call at once with this status (OK: as [`CallMode::Ok`]) in a trailers-only
    /// answer: one header block carrying `grpc-status`, no message, as a server answers a call
    /// it rejects before starting its answer.
    Status(Code),
    /// Answers every call with the headers first, then trailers carrying this status and no
    /// message (OK: as [`CallMode::Ok`]), as a server does when it fails after starting its
    /// answer: the status is only in the trailers.
    StatusInTrailers(Code),
    /// Answers every call after this long, then with this status as [`CallMode::Status`] does
    /// (OK: a reply).
    Delayed(Duration, Code),
}

/// Whether, and how, the backend serves `grpc.health.v1.Health`; [`HealthMode::Standard`] unless
/// set. The statuses set are kept whatever the mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HealthMode {
    /// As the protocol says: `Check` answers a known service's status, `NOT_FOUND` for an
    /// unknown one; `Watch` sends the status at once, then a message for each change of it, and
    /// for a service it does not know sends `SERVICE_UNKNOWN` and keeps the stream open until the
    /// service becomes known (or unknown again).
    #[default]
    Standard,
    /// As tonic-health 0.14's own service (`tonic_health::server::HealthService`, which this mode
    /// runs) answers: as [`HealthMode::Standard`], except that `Watch` for a service it does not
    /// know ends at once with `NOT_FOUND`, a service forgotten while watched ends its streams
    /// with `OK`, and setting a status again sends it again.
    TonicHealth,
    /// Not served: every call to it answers `UNIMPLEMENTED`, as a server built without it does.
    /// Streams already open go on.
    Absent,
}

/// What a gRPC backend has received so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpcCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Health `Check` calls, answered or not (also while the health service is absent).
    pub checks: u64,
    /// Health `Watch` streams asked for, answered or not.
    pub watches: u64,
    /// `Watch` streams open now.
    pub watches_open: u64,
    /// Calls to the test service: user calls.
    pub calls: u64,
}

/// A running fake gRPC backend; dropping it closes its port and every connection.
pub struct GrpcUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

/// State shared by the accept loop, the connections, the services and the handle.
struct Shared {
    name: String,
    name_header: HeaderValue,
    health: watch::Sender<HealthState>,
    /// The statuses again, for tonic-health's own service ([`HealthMode::TonicHealth`]).
    reporter: HealthReporter,
    call_mode: Mutex<CallMode>,
    /// Whether it should serve: false from [`GrpcUpstream::stop`] to
    /// [`GrpcUpstream::start_again`].
    serve: watch::Sender<bool>,
    /// Whether its port listens now, as the accept loop last made it.
    listening: watch::Sender<bool>,
    /// Connections open now.
    open: watch::Sender<u64>,
    connections: AtomicU64,
    checks: AtomicU64,
    watches: AtomicU64,
    watches_open: AtomicU64,
    calls: AtomicU64,
}

/// The health service's state: its mode and the status of each service it knows.
#[derive(Clone, Debug)]
struct HealthState {
    mode: HealthMode,
    statuses: BTreeMap<String, ServingStatus>,
}

impl GrpcUpstream {
    /// Starts a backend named `name` on a free port of 127.0.0.1 ([`crate::ports::free_addr`]):
    /// health service [`HealthMode::Standard`] with the whole server (`""`) `SERVING` and no
    /// named service, user calls [`CallMode::Ok`]. An error if `name` cannot be a header value
    /// or no port could be listened on.
    pub async fn start(name: &str) -> anyhow::Result<Self> {
        let name_header = HeaderValue::from_str(name)
            .with_context(|| format!("{name:?} cannot name a backend in a header"))?;
        let listener = listen_on_a_free_port().await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            name_header,
            health: watch::Sender::new(HealthState {
                mode: HealthMode::Standard,
                statuses: BTreeMap::from([(String::new(), ServingStatus::Serving)]),
            }),
            // Starts with "" serving, as the state above.
            reporter: HealthReporter::new(),
            call_mode: Mutex::new(CallMode::Ok),
            serve: watch::Sender::new(true),
            listening: watch::Sender::new(true),
            open: watch::Sender::new(0),
            connections: AtomicU64::new(0),
            checks: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            watches_open: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(accept_loop(
            listener,
            addr,
            shared.clone(),
            shutdown.clone(),
        ));
        Ok(GrpcUpstream {
            addr,
            shared,
            shutdown,
        })
    }

    /// The address it listens on (also while stopped: it listens there again afterwards).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, what a gRPC client connects to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The name it answers with.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What it has received so far.
    pub fn counts(&self) -> GrpcCounts {
        let shared = &self.shared;
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        GrpcCounts {
            connections: load(&shared.connections),
            checks: load(&shared.checks),
            watches: load(&shared.watches),
            watches_open: load(&shared.watches_open),
            calls: load(&shared.calls),
        }
    }

    /// Sets the status of `service` (`""`: the whole server), known from now on; the open
    /// `Watch` streams on it are sent the change at once.
    pub async fn set_serving_status(&self, service: &str, status: ServingStatus) {
        self.shared.health.send_modify(|health| {
            health.statuses.insert(service.to_owned(), status);
        });
        self.shared
            .reporter
            .set_service_status(service, status)
            .await;
    }

    /// Forgets `service` (`""` too): `Check` answers `NOT_FOUND` for it from now on, and the open
    /// `Watch` streams on it are sent `SERVICE_UNKNOWN`.
    pub async fn forget_service(&self, service: &str) {
        self.shared.health.send_modify(|health| {
            health.statuses.remove(service);
        });
        self.shared
            .reporter
            .clone()
            .clear_service_status(service)
            .await;
    }

    /// The status `service` has, `None` if it is not known.
    pub fn serving_status(&self, service: &str) -> Option<ServingStatus> {
        self.shared.health.borrow().statuses.get(service).copied()
    }

    /// Changes how the health service answers from the next call on.
    pub fn set_health_mode(&self, mode: HealthMode) {
        self.shared.health.send_modify(|health| health.mode = mode);
    }

    /// How the health service answers now.
    pub fn health_mode(&self) -> HealthMode {
        self.shared.health.borrow().mode
    }

    /// Changes how user calls are answered from the next call on.
    pub fn set_call_mode(&self, mode: CallMode) {
        *self.shared.call_mode() = mode;
    }

    /// How user calls are answered now.
    pub fn call_mode(&self) -> CallMode {
        *self.shared.call_mode()
    }

    /// Stops serving, as a crashed server does: once this returns, its port refuses connections
    /// (while it stays bound, so no one else takes it) and every connection it had is closed,
    /// its calls and `Watch` streams with it. An error if that took more than 5 s.
    pub async fn stop(&self) -> anyhow::Result<()> {
        self.shared.serve.send_replace(false);
        let mut listening = self.shared.listening.subscribe();
        let mut open = self.shared.open.subscribe();
        tokio::time::timeout(CHANGE_WITHIN, async {
            // Neither sender is dropped while `self` holds them: these waits do not fail.
            let _ = listening.wait_for(|listening| !listening).await;
            let _ = open.wait_for(|open| *open == 0).await;
        })
        .await
        .with_context(|| format!("{} did not stop within {CHANGE_WITHIN:?}", self.name()))
    }

    /// Serves again on the same port after [`GrpcUpstream::stop`]; once this returns, it accepts
    /// connections. An error if it could not listen there again within 5 s.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        self.shared.serve.send_replace(true);
        let mut listening = self.shared.listening.subscribe();
        tokio::time::timeout(CHANGE_WITHIN, listening.wait_for(|listening| *listening))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|_| ())
            .with_context(|| format!("{} could not listen on {} again", self.name(), self.addr))
    }

    /// Whether it serves now (not stopped).
    pub fn is_serving(&self) -> bool {
        *self.shared.serve.borrow()
    }
}

impl Drop for GrpcUpstream {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Shared {
    fn call_mode(&self) -> MutexGuard<'_, CallMode> {
        // A mode is whole whatever a holder did: take it as it is.
        self.call_mode
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a connection open until the returned guard is dropped.
    fn connection_opened(self: &Arc<Self>) -> OpenConnection {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.open.send_modify(|open| *open += 1);
        OpenConnection(self.clone())
    }
}

/// A connection counted in [`Shared::open`] while it lives.
struct OpenConnection(Arc<Shared>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0
            .open
            .send_modify(|open| *open = open.saturating_sub(1));
    }
}

/// Binds a free port of 127.0.0.1 from [`crate::ports::free_addr`], trying another if some
/// other process took the one offered in between.
async fn listen_on_a_free_port() -> anyhow::Result<TcpListener> {
    let mut last = None;
    for _ in 0..5 {
        let addr = crate::ports::free_addr()?;
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!("no free port to listen on: {last:?}"))
}

/// A backend's port: listened on, or held without listening while stopped.
enum Port {
    Listening(TcpListener),
    Held(Option<TcpSocket>),
}

/// Accepts connections while the backend serves. While stopped it holds its port without
/// listening (see [`hold`]): connections are refused as by a closed port, and no other test's
/// server can take the port meanwhile.
async fn accept_loop(
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let mut serve = shared.serve.subscribe();
    let mut port = Port::Listening(listener);
    loop {
        let serving = *serve.borrow_and_update();
        port = match (serving, port) {
            (false, Port::Listening(listener)) => {
                drop(listener);
                Port::Held(hold(addr))
            }
            (true, Port::Held(held)) => {
                drop(held);
                match rebind(addr, &shutdown).await {
                    Some(listener) => Port::Listening(listener),
                    None => return,
                }
            }
            (_, same) => same,
        };
        let listener = match &port {
            Port::Listening(listener) => Some(listener),
            Port::Held(_) => None,
        };
        shared.listening.send_replace(listener.is_some());
        let accept = async {
            match listener {
                Some(listener) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = serve.changed() => if changed.is_err() { return },
            accepted = accept => match accepted {
                Ok((stream, _)) => {
                    let open = shared.connection_opened();
                    tokio::spawn(connection(stream, open, shutdown.clone()));
                }
                Err(e) => {
                    eprintln!("grpc-upstream {}: accept failed: {e}", shared.name);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Serves one HTTP/2 connection until it ends, the backend stops, or it is dropped.
async fn connection(stream: TcpStream, open: OpenConnection, shutdown: CancellationToken) {
    let shared = open.0.clone();
    let mut serve = shared.serve.subscribe();
    let service = service_fn(|request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(route(request, shared).await) }
    });
    let _ = stream.set_nodelay(true);
    let serving =
        http2::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = serving => {}
        _ = shutdown.cancelled() => {}
        _ = serve.wait_for(|serve| !serve) => {}
    }
    drop(open);
}

/// Answers one call by its path, and names the backend in the answer's headers.
async fn route(request: hyper::Request<Incoming>, shared: Arc<Shared>) -> hyper::Response<Body> {
    let path = request.uri().path().to_owned();
    let mut response = match path.as_str() {
        HEALTH_CHECK | HEALTH_WATCH => {
            let counter = if path == HEALTH_CHECK {
                &shared.checks
            } else {
                &shared.watches
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if shared.health.borrow().mode == HealthMode::Absent {
                Status::unimplemented(format!("{HEALTH_SERVICE} is not served here")).into_http()
            } else {
                let mut server = HealthServer::new(HealthAnswers(shared.clone()));
                match server.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            }
        }
        ECHO_CALL => {
            shared.calls.fetch_add(1, Ordering::Relaxed);
            echo(request, &shared).await
        }
        _ => Status::unimplemented(format!("{path} is not served here")).into_http(),
    };
    response
        .headers_mut()
        .insert(NAME_HEADER, shared.name_header.clone());
    response
}

/// Answers a user call as the call mode says.
async fn echo(request: hyper::Request<Incoming>, shared: &Shared) -> hyper::Response<Body> {
    let mode = *shared.call_mode();
    let mut grpc = Grpc::new(ProstCodec::<EchoReply, EchoRequest>::default());
    match mode {
        CallMode::StatusInTrailers(code) if code != Code::Ok => {
            let failing = FailInTrailers(status(&shared.name, code));
            grpc.server_streaming(failing, request).await
        }
        CallMode::Ok | CallMode::StatusInTrailers(_) => {
            let answer = EchoAnswer::new(shared, Duration::ZERO, Code::Ok);
            grpc.unary(answer, request).await
        }
        CallMode::Status(code) => {
            let answer = EchoAnswer::new(shared, Duration::ZERO, code);
            grpc.unary(answer, request).await
        }
        CallMode::Delayed(after, code) => {
            let answer = EchoAnswer::new(shared, after, code);
            grpc.unary(answer, request).await
        }
    }
}

/// The status a failing call is answered with: the code, and who failed it.
fn status(name: &str, code: Code) -> Status {
    let named = upcheck_policy::grpc::status::Code::of(u32::try_from(code as i32).unwrap_or(2));
    Status::new(code, format!("{name} answers {}", named.name()))
}

/// A user call's answer: after `after`, a reply (OK) or `code` alone, trailers-only.
struct EchoAnswer {
    name: String,
    after: Duration,
    code: Code,
}

impl EchoAnswer {
    fn new(shared: &Shared, after: Duration, code: Code) -> Self {
        EchoAnswer {
            name: shared.name.clone(),
            after,
            code,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;

impl UnaryService<EchoRequest> for EchoAnswer {
    type Response = EchoReply;
    type Future = BoxFuture<Response<EchoReply>>;

    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        let (name, after, code) = (self.name.clone(), self.after, self.code);
        Box::pin(async move {
            // A zero sleep would still wait for tokio's next 1 ms timer tick.
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            if code != Code::Ok {
                return Err(status(&name, code));
            }
            Ok(Response::new(EchoReply {
                text: request.into_inner().text,
                backend: name,
            }))
        })
    }
}

/// A user call answered with headers, then no message, then trailers carrying this status.
struct FailInTrailers(Status);

impl ServerStreamingService<EchoRequest> for FailInTrailers {
    type Response = EchoReply;
    type ResponseStream = tokio_stream::Once<Result<EchoReply, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>>;

    fn call(&mut self, _request: Request<EchoRequest>) -> Self::Future {
        let status = self.0.clone();
        // The answer starts (its headers go out); the stream's error becomes the trailers.
        Box::pin(async move { Ok(Response::new(tokio_stream::once(Err(status)))) })
    }
}
