//! gRPC streams to real servers: what lets the module follow etcd with its Watch (a bidi stream
//! opened with `proxy_grpc_stream`) from this host, against a real etcd.
//!
//! Why: etcd's Watch answers (the "created" response, events, compactions, its statuses) are
//! what the module must be right about, as with the JSON gateway ([`crate::loopback`]). So a
//! stream to a cluster named with [`crate::Host::real_cluster`] is opened, as Envoy's gRPC
//! client opens it, over HTTP/2 in plaintext (prior knowledge, as etcd's client port speaks it):
//! `POST /{service}/{method}` with `content-type: application/grpc`, `te: trailers` and the
//! guest's initial metadata. Each stream runs on a thread of its own so the VMs go on meanwhile;
//! there are at most [`MAX_STREAMS`] at once and messages of at most [`MAX_MESSAGE`] bytes.
//!
//! What arrives is delivered, in order, at the first [`crate::Host::advance`] after it arrived,
//! to the context that opened the stream, as Envoy's `AsyncStreamImpl` reports it (its
//! `onHeaders`, `onData`, `onTrailers`, `streamError`): initial metadata (empty when the answer
//! was trailers only), each whole message, trailing metadata, and the close with the
//! `grpc-status` of the trailers (2 UNKNOWN when there is none, or when the body ends without
//! trailers; 1 CANCELLED for an HTTP status other than 200; 13 INTERNAL for a compressed or
//! broken frame or a reset; 8 RESOURCE_EXHAUSTED for a message over [`MAX_MESSAGE`]). A stream
//! that fails before the answer's headers (connection refused, not HTTP/2) closes as Envoy's
//! router makes it, with a gRPC local reply: 14 UNAVAILABLE, with Envoy's text as `grpc-message`.
//!
//! The guest's side, as Envoy's wasm `Context` keeps it (`grpcSend`, `grpcClose`, `grpcCancel`):
//! a cancel resets the stream and nothing more is delivered; a close ends the request side and
//! the answers keep coming until the server closes. A stream is known to the context that opened
//! it until it is cancelled, or both closed by the guest and closed by the server.
//!
//! Opening: a stream's token comes from the process's counter of http-call tokens, so the two
//! never collide (Envoy keeps them apart by their low bits instead). A name that is no cluster
//! is ParseFailure, as Envoy's `grpcStream` answers (the SDK passes it on; BadArgument would make
//! it panic); a scripted cluster, which speaks no gRPC here, InternalFailure, as Envoy answers a
//! stream its client cannot start; so are a stream beyond [`MAX_STREAMS`] and names or metadata
//! that make no HTTP/2 request. A stream has no timeout, as in Envoy. A stream opened by an
//! HTTP context that has finished stays open but delivers nothing.

use crate::abi::{Headers, Status};
use crate::envoy::Reply;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// The most streams open at once in one process; one more is refused with InternalFailure.
pub const MAX_STREAMS: usize = 64;
/// The largest message sent or received, in bytes.
pub const MAX_MESSAGE: usize = 4 << 20;
/// How long connecting may take (Envoy's default `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// gRPC status codes the host reports itself.
const CANCELLED: u32 = 1;
const UNKNOWN: u32 = 2;
const RESOURCE_EXHAUSTED: u32 = 8;
const INTERNAL: u32 = 13;
const UNAVAILABLE: u32 = 14;

/// One gRPC stream opened to a real server ([`crate::Host::real_streams`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealStream {
    /// The token the guest got for it.
    pub token: u32,
    /// The VM that opened it.
    pub vm: usize,
    /// The cluster it went to.
    pub cluster: String,
    /// The gRPC service, e.g. `etcdserverpb.Watch`.
    pub service: String,
    /// The method, e.g. `Watch`.
    pub method: String,
    /// When it was opened, in virtual time since the host started.
    pub opened: Duration,
    /// Messages the guest sent.
    pub messages_out: u64,
    /// Bytes of those messages (without gRPC's 5-byte prefix).
    pub bytes_out: u64,
    /// Messages that arrived from the server while the stream was open.
    pub messages_in: u64,
    /// Bytes of those messages (without gRPC's 5-byte prefix).
    pub bytes_in: u64,
    /// The status the stream closed with (`proxy_on_grpc_close`), once it has.
    pub status: Option<u32>,
    /// Whether the guest cancelled it before it closed.
    pub cancelled: bool,
}

/// What arrives on a stream, in the order the guest is given it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    InitialMetadata(Headers),
    Message(Vec<u8>),
    TrailingMetadata(Headers),
    Close { status: u32, message: String },
}

impl Arrival {
    /// The callback that delivers it, and its last argument.
    pub(crate) fn callback(&self) -> (&'static str, i32) {
        let len = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        match self {
            Arrival::InitialMetadata(headers) => {
                ("proxy_on_grpc_receive_initial_metadata", len(headers.len()))
            }
            Arrival::Message(message) => ("proxy_on_grpc_receive", len(message.len())),
            Arrival::TrailingMetadata(headers) => (
                "proxy_on_grpc_receive_trailing_metadata",
                len(headers.len()),
            ),
            Arrival::Close { status, .. } => ("proxy_on_grpc_close", *status as i32),
        }
    }
}

/// What the guest asks of a stream's thread; dropping the sender cancels the stream.
enum Command {
    /// A framed message, and whether it ends the request side.
    Send(Bytes, bool),
    /// End the request side.
    End,
}

/// A stream the guest may still address.
struct Open {
    vm: usize,
    context: u32,
    commands: UnboundedSender<Command>,
    /// The request side has ended (a send with end of stream, or a close).
    ended: bool,
    /// The guest closed it.
    closed: bool,
    /// The server closed it (delivered).
    remote_closed: bool,
    /// Index of its record.
    record: usize,
}

/// A stream to open, as the guest asked for it.
pub(crate) struct Opening<'a> {
    pub token: u32,
    pub vm: usize,
    pub context: u32,
    pub cluster: &'a str,
    pub address: SocketAddr,
    pub service: &'a str,
    pub method: &'a str,
    pub metadata: &'a Headers,
    /// Virtual time of the opening.
    pub now: Duration,
}

/// The gRPC streams of one process.
pub(crate) struct Streams {
    open: BTreeMap<u32, Open>,
    /// Where the streams' threads send what arrived, and where the host takes it.
    report_to: mpsc::Sender<(u32, Arrival)>,
    arrived: mpsc::Receiver<(u32, Arrival)>,
    /// Every stream opened, in order (so by token).
    pub records: Vec<RealStream>,
}

impl Default for Streams {
    fn default() -> Self {
        let (report_to, arrived) = mpsc::channel();
        Streams {
            open: BTreeMap::new(),
            report_to,
            arrived,
            records: Vec::new(),
        }
    }
}

impl Streams {
    /// Opens `opening` on a thread of its own. InternalFailure when [`MAX_STREAMS`] are open or
    /// the names or metadata make no HTTP/2 request (as Envoy when its client cannot start one).
    pub(crate) fn open(&mut self, opening: Opening<'_>) -> Result<(), Status> {
        if self.open.values().filter(|s| !s.remote_closed).count() >= MAX_STREAMS {
            return Err(Status::InternalFailure);
        }
        let request = request(
            opening.cluster,
            opening.service,
            opening.method,
            opening.metadata,
        )
        .ok_or(Status::InternalFailure)?;
        let (commands, receiver) = unbounded_channel();
        let report = Report {
            token: opening.token,
            to: self.report_to.clone(),
        };
        let address = opening.address;
        std::thread::spawn(move || run(address, request, receiver, report));
        self.open.insert(
            opening.token,
            Open {
                vm: opening.vm,
                context: opening.context,
                commands,
                ended: false,
                closed: false,
                remote_closed: false,
                record: self.records.len(),
            },
        );
        self.records.push(RealStream {
            token: opening.token,
            vm: opening.vm,
            cluster: opening.cluster.to_string(),
            service: opening.service.to_string(),
            method: opening.method.to_string(),
            opened: opening.now,
            messages_out: 0,
            bytes_out: 0,
            messages_in: 0,
            bytes_in: 0,
            status: None,
            cancelled: false,
        });
        Ok(())
    }

    /// The stream `token` of `context` in `vm`.
    fn find(&mut self, vm: usize, context: u32, token: u32) -> Option<&mut Open> {
        self.open
            .get_mut(&token)
            .filter(|s| (s.vm, s.context) == (vm, context))
    }

    /// `proxy_grpc_send`: NotFound for a stream the context does not have; BadArgument after
    /// its request side ended (Envoy asserts) or for a message over [`MAX_MESSAGE`].
    pub(crate) fn send(
        &mut self,
        vm: usize,
        context: u32,
        token: u32,
        message: &[u8],
        end: bool,
    ) -> Result<(), Status> {
        let stream = self.find(vm, context, token).ok_or(Status::NotFound)?;
        if stream.ended || message.len() > MAX_MESSAGE {
            return Err(Status::BadArgument);
        }
        stream.ended = end;
        // A stream whose thread is over takes no more; the close tells the guest why.
        let _ = stream.commands.send(Command::Send(frame(message), end));
        let record = stream.record;
        if let Some(record) = self.records.get_mut(record) {
            record.messages_out += 1;
            record.bytes_out += message.len() as u64;
        }
        Ok(())
    }

    /// `proxy_grpc_close`: ends the request side; the stream is forgotten once the server has
    /// closed it too.
    pub(crate) fn close(&mut self, vm: usize, context: u32, token: u32) -> Result<(), Status> {
        let stream = self.find(vm, context, token).ok_or(Status::NotFound)?;
        if !stream.ended {
            stream.ended = true;
            let _ = stream.commands.send(Command::End);
        }
        stream.closed = true;
        if stream.remote_closed {
            self.open.remove(&token);
        }
        Ok(())
    }

    /// `proxy_grpc_cancel`: resets the stream; nothing more is delivered.
    pub(crate) fn cancel(&mut self, vm: usize, context: u32, token: u32) -> Result<(), Status> {
        self.find(vm, context, token).ok_or(Status::NotFound)?;
        self.forget(token);
        Ok(())
    }

    /// Drops stream `token`, which resets it if it is still running.
    fn forget(&mut self, token: u32) {
        if let Some(stream) = self.open.remove(&token) {
            if let Some(record) = self.records.get_mut(stream.record) {
                record.cancelled = !stream.remote_closed;
            }
        }
    }

    /// Resets every stream of `vm`, as Envoy does when it destroys a VM's contexts.
    pub(crate) fn forget_vm(&mut self, vm: usize) {
        let tokens: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, s)| s.vm == vm)
            .map(|(token, _)| *token)
            .collect();
        for token in tokens {
            self.forget(token);
        }
    }

    /// What arrived since the last look, for streams still open: (vm, context, token, arrival).
    pub(crate) fn take_arrivals(&mut self) -> Vec<(usize, u32, u32, Arrival)> {
        let mut arrivals = Vec::new();
        while let Ok((token, arrival)) = self.arrived.try_recv() {
            if let Some(stream) = self.open.get(&token) {
                arrivals.push((stream.vm, stream.context, token, arrival));
            }
        }
        arrivals
    }

    /// Books `arrival` on stream `token` as it is delivered; false if the stream was cancelled
    /// since it arrived (then nothing is delivered).
    pub(crate) fn deliver(&mut self, token: u32, arrival: &Arrival) -> bool {
        let Some(stream) = self.open.get_mut(&token) else {
            return false;
        };
        let record = self.records.get_mut(stream.record);
        match (arrival, record) {
            (Arrival::Message(message), Some(record)) => {
                record.messages_in += 1;
                record.bytes_in += message.len() as u64;
            }
            (Arrival::Close { status, .. }, record) => {
                if let Some(record) = record {
                    record.status = Some(*status);
                }
                stream.remote_closed = true;
                if stream.closed {
                    self.open.remove(&token);
                }
            }
            _ => {}
        }
        true
    }
}

/// The request that starts a call of `service`/`method` on `cluster` (its `:authority`, as
/// Envoy's gRPC client names it); `None` if the names or metadata make no valid request.
fn request(
    cluster: &str,
    service: &str,
    method: &str,
    metadata: &Headers,
) -> Option<http::Request<()>> {
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{cluster}/{service}/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in metadata {
        request = request.header(name.as_str(), value.as_str());
    }
    request.body(()).ok()
}

/// `message` framed as gRPC: not compressed, its length as 4 big-endian bytes, the bytes.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// Takes the whole messages at the front of `buffer`, leaving a partial one; `Err` is the
/// status Envoy closes the stream with for what it cannot take.
fn unframe(buffer: &mut BytesMut) -> Result<Vec<Vec<u8>>, u32> {
    let mut messages = Vec::new();
    while let Some(prefix) = buffer.get(..5) {
        let compressed = prefix.first().copied().unwrap_or(0);
        let mut length = [0u8; 4];
        length.copy_from_slice(prefix.get(1..5).unwrap_or(&[0; 4]));
        let length = u32::from_be_bytes(length) as usize;
        if length > MAX_MESSAGE {
            return Err(RESOURCE_EXHAUSTED);
        }
        if compressed != 0 && length > 0 {
            return Err(INTERNAL);
        }
        if buffer.len() < 5 + length {
            break;
        }
        buffer.advance(5);
        messages.push(buffer.split_to(length).to_vec());
    }
    Ok(messages)
}

/// Where a stream's thread sends what arrived.
struct Report {
    token: u32,
    to: mpsc::Sender<(u32, Arrival)>,
}

impl Report {
    fn send(&self, arrival: Arrival) {
        // The host may be gone by now; then nobody wants it.
        let _ = self.to.send((self.token, arrival));
    }

    /// The end of the stream: its trailing metadata, then its close.
    fn close(&self, end: Closed) {
        let status = end
            .status
            .or_else(|| header(&end.trailers, "grpc-status")?.parse().ok())
            .unwrap_or(UNKNOWN);
        let message = end
            .message
            .or_else(|| header(&end.trailers, "grpc-message").map(str::to_string))
            .unwrap_or_default();
        self.send(Arrival::TrailingMetadata(end.trailers));
        self.send(Arrival::Close { status, message });
    }
}

fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// How a stream ended: its trailing metadata, and the status and message Envoy reports
/// unless the trailers' own say.
struct Closed {
    trailers: Headers,
    status: Option<u32>,
    message: Option<String>,
}

impl Closed {
    /// `streamError`: no trailers, Envoy's status.
    fn error(status: u32, message: String) -> Closed {
        Closed {
            trailers: Headers::new(),
            status: Some(status),
            message: Some(message),
        }
    }
}

/// A stream's thread: runs the exchange, then reports how it ended (nothing if cancelled).
fn run(
    address: SocketAddr,
    request: http::Request<()>,
    commands: UnboundedReceiver<Command>,
    report: Report,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build();
    let end = match runtime {
        Ok(runtime) => runtime.block_on(exchange(address, request, commands, &report)),
        Err(_) => Some(unavailable(&report, Reply::connection_failure())),
    };
    if let Some(end) = end {
        report.close(end);
    }
}

/// A failure before the answer's headers, as Envoy's router answers a gRPC request it could not
/// send: a trailers-only local reply with 14 UNAVAILABLE and its text as `grpc-message`.
/// `reply` is the answer Envoy would have made of the failure to a plain request.
fn unavailable(report: &Report, reply: Reply) -> Closed {
    let message = String::from_utf8_lossy(&reply.body).into_owned();
    report.send(Arrival::InitialMetadata(Headers::new()));
    Closed {
        trailers: vec![
            (":status".to_string(), "200".to_string()),
            ("content-type".to_string(), "application/grpc".to_string()),
            ("grpc-status".to_string(), UNAVAILABLE.to_string()),
            ("grpc-message".to_string(), message),
        ],
        status: None,
        message: None,
    }
}

/// Carries out `command` on the request side; false when the guest cancelled (the sender is gone).
fn apply(command: Option<Command>, send: &mut h2::SendStream<Bytes>) -> bool {
    // A failed send means the stream is over; the answer's side reports how.
    match command {
        Some(Command::Send(framed, end)) => {
            let _ = send.send_data(framed, end);
            true
        }
        Some(Command::End) => {
            let _ = send.send_data(Bytes::new(), true);
            true
        }
        None => {
            send.send_reset(h2::Reason::CANCEL);
            false
        }
    }
}

/// The call on the wire, until it ends (`None`: the guest cancelled it).
async fn exchange(
    address: SocketAddr,
    request: http::Request<()>,
    mut commands: UnboundedReceiver<Command>,
    report: &Report,
) -> Option<Closed> {
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(address));
    let Ok(Ok(tcp)) = connected.await else {
        return Some(unavailable(report, Reply::connection_failure()));
    };
    let _ = tcp.set_nodelay(true);
    let (client, connection) = match h2::client::handshake(tcp).await {
        Ok(handshake) => handshake,
        Err(_) => return Some(unavailable(report, Reply::protocol_error())),
    };
    tokio::spawn(connection);
    let started = match client.ready().await {
        Ok(mut client) => client.send_request(request, false),
        Err(_) => return Some(unavailable(report, Reply::protocol_error())),
    };
    let (response, mut send) = match started {
        Ok(started) => started,
        Err(_) => return Some(unavailable(report, Reply::protocol_error())),
    };
    tokio::pin!(response);
    let response = loop {
        tokio::select! {
            response = &mut response => break response,
            command = commands.recv() => if !apply(command, &mut send) { return None },
        }
    };
    let (head, mut body) = match response {
        Ok(response) => response.into_parts(),
        Err(_) => return Some(unavailable(report, Reply::protocol_error())),
    };
    let mut headers = vec![(":status".to_string(), head.status.as_str().to_string())];
    headers.extend(head.headers.iter().map(|(name, value)| {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        (name.as_str().to_string(), value)
    }));
    if body.is_end_stream() {
        // Trailers only: no initial metadata, the headers are the trailers.
        report.send(Arrival::InitialMetadata(Headers::new()));
        let has_status = header(&headers, "grpc-status").is_some();
        return Some(if head.status == http::StatusCode::OK || has_status {
            Closed {
                trailers: headers,
                status: None,
                message: None,
            }
        } else {
            Closed::error(CANCELLED, String::new())
        });
    }
    report.send(Arrival::InitialMetadata(headers));
    if head.status != http::StatusCode::OK {
        return Some(Closed::error(CANCELLED, String::new()));
    }
    let mut buffer = BytesMut::new();
    loop {
        tokio::select! {
            data = body.data() => match data {
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    buffer.extend_from_slice(&chunk);
                    match unframe(&mut buffer) {
                        Ok(messages) => messages
                            .into_iter()
                            .for_each(|message| report.send(Arrival::Message(message))),
                        Err(status) => return Some(Closed::error(status, String::new())),
                    }
                }
                Some(Err(e)) => return Some(Closed::error(INTERNAL, e.to_string())),
                None => break,
            },
            command = commands.recv() => if !apply(command, &mut send) { return None },
        }
    }
    Some(match body.trailers().await {
        Ok(Some(trailers)) => Closed {
            trailers: trailers
                .iter()
                .map(|(name, value)| {
                    let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.as_str().to_string(), value)
                })
                .collect(),
            status: None,
            message: None,
        },
        Ok(None) => Closed::error(UNKNOWN, String::new()),
        Err(e) => Closed::error(INTERNAL, e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_across_chunks_come_out_whole_and_in_order() {
        let mut wire = frame(b"first").to_vec();
        wire.extend_from_slice(&frame(b""));
        wire.extend_from_slice(&frame(b"third"));
        let mut buffer = BytesMut::from(&wire[..7]);
        assert_eq!(unframe(&mut buffer), Ok(Vec::new()));
        buffer.extend_from_slice(&wire[7..wire.len() - 1]);
        assert_eq!(
            unframe(&mut buffer),
            Ok(vec![b"first".to_vec(), Vec::new()])
        );
        buffer.extend_from_slice(&wire[wire.len() - 1..]);
        assert_eq!(unframe(&mut buffer), Ok(vec![b"third".to_vec()]));
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_message_over_the_bound_or_compressed_closes_the_stream_as_envoy_does() {
        let mut huge = BytesMut::from(&[0, 0x00, 0x40, 0x00, 0x01][..]);
        assert_eq!(unframe(&mut huge), Err(RESOURCE_EXHAUSTED));
        let mut compressed = BytesMut::from(&[1, 0, 0, 0, 1, b'x'][..]);
        assert_eq!(unframe(&mut compressed), Err(INTERNAL));
        let mut empty_compressed = BytesMut::from(&[1, 0, 0, 0, 0][..]);
        assert_eq!(unframe(&mut empty_compressed), Ok(vec![Vec::new()]));
    }

    #[test]
    fn a_request_carries_the_path_the_grpc_headers_and_the_metadata() {
        let metadata = vec![("token".to_string(), "secret".to_string())];
        let watch = request("etcd", "etcdserverpb.Watch", "Watch", &metadata).unwrap();
        assert_eq!(watch.uri().path(), "/etcdserverpb.Watch/Watch");
        assert_eq!(watch.uri().authority().unwrap().as_str(), "etcd");
        let headers = watch.headers();
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["te"], "trailers");
        assert_eq!(headers["token"], "secret");
        let pseudo = vec![(":path".to_string(), "/x".to_string())];
        assert!(request("etcd", "s", "m", &pseudo).is_none());
        assert!(request("et cd", "s", "m", &Headers::new()).is_none());
    }
}
