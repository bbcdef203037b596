//! Active checks on the wire: sending the probes the policy asks for and reading their answers.
//!
//! Probes go out through `dispatch_http_call` to each backend's cluster (an Envoy cluster's name,
//! or the `host:port` ngx_wasm_module connects to). An answer is read as
//! its status, its header names (which tell the policy whether the proxy made it itself,
//! [`active::made_by`], and whether it carries the drain signal, [`drain::signalled`]) and
//! as much of the body as the policy needs; the policy classifies it. A call that came back
//! with no answer at all (ngx_wasm_module's shape of a failed dispatch: no headers) is handed
//! over with the host's reason, its `:dispatch_status`.

use crate::abi::{BufferType, HeaderMap, Status};
use crate::hostcall as hostcalls;
use crate::metrics::{self, BackendMetrics};
use upcheck_policy::host::Dispatch;
use upcheck_policy::outcome::status_code;
use upcheck_policy::{active, drain};
use upcheck_policy::{Config, Effects, Member, Pool, ProbeAnswer, Time};

/// Where ngx_wasm_module says why a dispatch came back without an answer.
const DISPATCH_STATUS: &str = ":dispatch_status";

/// Sends a probe, by `config`, to `member`: its token, or what the proxy said in refusing it.
pub fn dispatch(config: &Config, member: &Member<BackendMetrics>) -> Dispatch {
    let active = &config.health_checks.active;
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "GET"),
        (":path", active.path.as_str()),
        (":authority", member.upstream.authority()),
        ("user-agent", "upcheck"),
    ];
    headers.extend(active.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
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

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument",
        Status::NotFound => "not found",
        Status::InternalFailure => "internal failure",
        _ => "refused",
    }
}
