//! Active checks on the wire: sending the probes the policy asks for and reading their answers.
//!
//! Probes go out through `dispatch_http_call` to each backend's cluster (an Envoy cluster's name,
//! or the `host:port` ngx_wasm_module connects to). An answer is read as
//! its status, its header names (which tell the policy whether the proxy made it itself,
//! [`active::made_by`], and whether it carries the drain signal, [`drain::signalled`]) and
//! as much of the body as the policy needs; the policy classifies it. A call that came back
//! with no answer at all (ngx_wasm_module's shape of a failed dispatch: no headers) is handed
//! over with the host's reason, its `:dispatch_status`. A gRPC backend's health is asked by
//! `Check` through `proxy_grpc_call`, and pushed by its `Watch` on a gRPC stream the policy
//! asks to open ([`upcheck_policy::grpc::watch`]), each message and end handed over as read.

use crate::abi::{BufferType, HeaderMap, Status};
use crate::hostcall as hostcalls;
use crate::metrics::{self, BackendMetrics};
use upcheck_policy::config::Active;
use upcheck_policy::grpc::health::{self, MAX_ANSWER};
use upcheck_policy::grpc::status::Code;
use upcheck_policy::host::Dispatch;
use upcheck_policy::outcome::status_code;
use upcheck_policy::{active, drain};
use upcheck_policy::{Config, Effects, GrpcProbeAnswer, MadeBy, Member, Pool, ProbeAnswer, Time};

/// Where ngx_wasm_module says why a dispatch came back without an answer.
const DISPATCH_STATUS: &str = ":dispatch_status";

/// Sends a probe, by `config`, to `member`: its token, or what the proxy said in refusing it.
pub fn dispatch(config: &Config, member: &Member<BackendMetrics>) -> Dispatch {
    let active = &config.health_checks.active;
    if let Some(grpc) = &active.grpc {
        metrics::increment(member.handles.probes);
        let call = hostcalls::grpc_call(
            member.upstream.cluster(),
            (health::SERVICE, health::CHECK),
            &configured_headers(active).collect::<Vec<_>>(),
            &health::request(&grpc.service),
            active.timeout,
        );
        return match call {
            Ok(token) => Dispatch::Sent(token),
            Err(status) => Dispatch::Refused(describe(status)),
        };
    }
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "GET"),
        (":path", active.path.as_str()),
        (":authority", member.upstream.authority()),
        ("user-agent", "upcheck"),
    ];
    headers.extend(configured_headers(active));
    metrics::increment(member.handles.probes);
    let call = hostcalls::dispatch_http_call(
        member.upstream.cluster(),
        headers,
        None,
        vec![],
        active.timeout,
    );
    match call {
        Ok(token) => Dispatch::Sent(token),
        Err(status) => Dispatch::Refused(describe(status)),
    }
}

/// Reads the answer to probe `token` (its body is `body_size` bytes) and hands it to the policy.
pub fn answer(pool: &mut Pool<BackendMetrics>, token: u32, body_size: usize, now: Time) -> Effects {
    let headers = hostcalls::get_map(HeaderMap::CallResponse).unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| status_code(v.as_bytes()));
    let Some(status) = status else {
        // No answer at all: ngx_wasm_module says why in a pseudo-header of its own.
        let reason = hostcalls::get_map_value(HeaderMap::CallResponse, DISPATCH_STATUS).ok();
        return pool.probe_unanswered(token, reason.flatten().as_deref(), now);
    };
    let made_by = active::made_by(headers.iter().map(|(n, _)| n.as_str()));
    let signalled = drain::signalled(headers.iter().map(|(n, _)| n.as_str()));
    let wanted = pool.probe_body_wanted(body_size, made_by);
    let body = if wanted > 0 {
        hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, wanted)
            .ok()
            .flatten()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let answer = ProbeAnswer {
        status,
        made_by,
        signalled,
        body: &body,
    };
    pool.probe_answered(token, answer, now)
}

/// gRPC health check `token` answered, `size` bytes: `OK`, and what the answer says of the
/// service's health, handed to the policy (an answer that does not decode says nothing, and is
/// logged).
pub fn grpc_answered(
    pool: &mut Pool<BackendMetrics>,
    token: u32,
    size: usize,
    now: Time,
) -> Effects {
    let message = grpc_message(size);
    let serving = health::serving(&message)
        .map_err(|why| log::warn!("upcheck: a health check's answer refused: {why}"))
        .ok();
    let answer = GrpcProbeAnswer {
        code: Code::Ok,
        made_by: MadeBy::Backend,
        serving,
    };
    pool.probe_grpc_answered(token, answer, now)
}

/// gRPC health check `token` failed with `code`: handed to the policy, with who ended it as
/// Envoy's message says ([`active::grpc_check_ended`]).
pub fn grpc_failed(pool: &mut Pool<BackendMetrics>, token: u32, code: u32, now: Time) -> Effects {
    let message = grpc_close_message();
    log::debug!("upcheck: a health check failed: {code} {message:?}");
    let (code, made_by) = active::grpc_check_ended(code, &message);
    let answer = GrpcProbeAnswer {
        code,
        made_by,
        serving: None,
    };
    pool.probe_grpc_answered(token, answer, now)
}

/// Opens `member`'s health `Watch`, by `config`: the stream, then its one request, the last it
/// sends (a server-streaming method reads its request to its end before it answers).
pub fn open_watch(config: &Config, member: &Member<BackendMetrics>) -> Result<u32, &'static str> {
    let active = &config.health_checks.active;
    let service = active.grpc.as_ref().map_or("", |g| g.service.as_str());
    hostcalls::open_grpc_stream(
        member.upstream.cluster(),
        (health::SERVICE, health::WATCH),
        &configured_headers(active).collect::<Vec<_>>(),
        (&health::request(service), true),
    )
    .map_err(describe)
}

/// A message of health `Watch` `token`, `size` bytes, handed to the policy as read.
pub fn watch_message(
    pool: &mut Pool<BackendMetrics>,
    token: u32,
    size: usize,
    now: Time,
) -> Effects {
    let message = grpc_message(size);
    pool.health_pushed(token, &message, now)
}

/// Health `Watch` `token` ended with `code`: handed to the policy, with who ended it as Envoy's
/// message says ([`active::grpc_made_by`]).
pub fn watch_closed(pool: &mut Pool<BackendMetrics>, token: u32, code: u32, now: Time) -> Effects {
    let message = grpc_close_message();
    let by_backend = active::grpc_made_by(&message) == MadeBy::Backend;
    log::debug!("upcheck: a health Watch ended: {code} {message:?}");
    pool.health_watch_closed(token, Code::of(code), by_backend, now)
}

/// The probe headers `active` configures (`health_checks.active.headers`), as a call sends them:
/// an HTTP probe's headers, a gRPC check's or Watch's metadata.
fn configured_headers(active: &Active) -> impl Iterator<Item = (&str, &str)> {
    active.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))
}

/// The gRPC message being delivered, `size` bytes (at most [`MAX_ANSWER`] of them read).
fn grpc_message(size: usize) -> Vec<u8> {
    hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size.min(MAX_ANSWER))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The status message of the gRPC close being delivered (empty if none).
fn grpc_close_message() -> String {
    hostcalls::grpc_status()
        .map(|(_, message)| message)
        .unwrap_or_default()
}

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument",
        Status::NotFound => "not found",
        Status::InternalFailure => "internal failure",
        _ => "refused",
    }
}
