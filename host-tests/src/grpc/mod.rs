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
//!
//! The process's side of the streams is `streams`'s; each stream's exchange on the wire, on its
//! own thread, is `wire`'s. Unary calls (`proxy_grpc_call`) go to scripted upstreams instead, on
//! the virtual clock, as `call` says.

mod call;
mod streams;
mod wire;

pub(crate) use call::answer as call_answer;
pub(crate) use streams::{Opening, Streams};

use crate::abi::Headers;
use std::time::Duration;

/// The most streams open at once in one process; one more is refused with InternalFailure.
pub const MAX_STREAMS: usize = 64;
/// The largest message sent or received, in bytes.
pub const MAX_MESSAGE: usize = 4 << 20;

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
