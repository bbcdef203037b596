//! Active checks on the wire: sending the probes the policy asks for and reading their answers.
//!
//! Probes go out through `dispatch_http_call` to each backend's cluster. An answer is read as
//! its status, whether the proxy made it itself (Envoy's bare 503 when nothing accepts the
//! connection, 504 when the probe timed out: they carry only `:status`, `content-length` and
//! `content-type`) and as much of the body as the policy needs; the policy classifies it.

use crate::metrics::{self, BackendMetrics};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status};
use upcheck_policy::{Effects, Pool, Time};

/// Headers a proxy-made answer carries; a backend's own answer has more (`date`, `server`, …).
const PROXY_MADE_HEADERS: [&str; 3] = [":status", "content-length", "content-type"];

/// Sends a probe to each of `due` (backend positions).
pub fn send(pool: &mut Pool<BackendMetrics>, due: &[usize], now: Time) -> Effects {
    let mut effects = Effects::default();
    for &i in due {
        let Some(m) = pool.members().get(i) else {
            continue;
        };
        let active = &pool.config().health_checks.active;
        let mut headers: Vec<(&str, &str)> = vec![
            (":method", "GET"),
            (":path", active.path.as_str()),
            (":authority", m.upstream.authority()),
            ("user-agent", "upcheck"),
        ];
        headers.extend(active.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        metrics::increment(m.handles.probes);
        let call = hostcalls::dispatch_http_call(
            m.upstream.cluster(),
            headers,
            None,
            vec![],
            active.timeout,
        );
        match call {
            Ok(token) => pool.probe_sent(i, token, now),
            Err(status) => effects.extend(pool.probe_refused(i, describe(status), now)),
        }
    }
    effects
}

/// Reads the answer to probe `token` (its body is `body_size` bytes) and hands it to the policy.
pub fn answer(pool: &mut Pool<BackendMetrics>, token: u32, body_size: usize, now: Time) -> Effects {
    let headers = hostcalls::get_map(MapType::HttpCallResponseHeaders).unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| v.trim().parse::<u16>().ok());
    let proxy_made = headers
        .iter()
        .all(|(n, _)| PROXY_MADE_HEADERS.contains(&n.to_ascii_lowercase().as_str()));
    let wanted = pool.probe_body_wanted(body_size, proxy_made);
    let body = if wanted > 0 {
        hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, wanted)
            .ok()
            .flatten()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    pool.probe_answered(token, status, proxy_made, &body, now)
}

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument",
        Status::NotFound => "not found",
        Status::InternalFailure => "internal failure",
        _ => "refused",
    }
}
