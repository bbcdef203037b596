//! One stream on the wire: the HTTP/2 request that starts it, gRPC's framing each way, and the
//! thread that runs the exchange and reports what arrived and how the stream ended, as Envoy's
//! gRPC client reports it.

use super::{Arrival, MAX_MESSAGE};
use crate::abi::{header, Headers};
use crate::envoy::Reply;
use bytes::{Buf, Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How long connecting may take (Envoy's default `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// gRPC status codes the host reports itself.
const CANCELLED: u32 = 1;
const UNKNOWN: u32 = 2;
const RESOURCE_EXHAUSTED: u32 = 8;
const INTERNAL: u32 = 13;
const UNAVAILABLE: u32 = 14;

/// What the guest asks of a stream's thread; dropping the sender cancels the stream.
pub(super) enum Command {
    /// A framed message, and whether it ends the request side.
    Send(Bytes, bool),
    /// End the request side.
    End,
}

/// The request that starts a call of `service`/`method` on `cluster` (its `:authority`, as
/// Envoy's gRPC client names it); `None` if the names or metadata make no valid request.
pub(super) fn request(
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
pub(super) fn frame(message: &[u8]) -> Bytes {
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
pub(super) struct Report {
    /// The stream's token.
    pub token: u32,
    /// The process's end of the channel.
    pub to: mpsc::Sender<(u32, Arrival)>,
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
pub(super) fn run(
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
