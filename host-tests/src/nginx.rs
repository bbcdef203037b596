//! What NGINX with Kong's ngx_wasm_module does differently from Envoy, for the host's second
//! profile ([`crate::Profile::Nginx`]): the same module, the same scripted upstreams, the host
//! answering as that proxy-wasm host does.
//!
//! Sources: ngx_wasm_module's `docs/PROXY_WASM.md` (dispatches take `host:port`; a failed one
//! comes back with no headers and a `:dispatch_status` pseudo-header naming the failure; they
//! may be sent only from `on_request_headers`, `on_request_body`, `on_tick`,
//! `on_http_call_response` and `on_foreign_function`) and its host-function table
//! (`ngx_proxy_wasm_host.c`, the `main` branch as of April 2025): `proxy_get_log_level` is
//! declared as `(i32, i32) -> i32` and not implemented; `proxy_done`, `proxy_close_stream`,
//! the gRPC calls, `proxy_get_status` and `proxy_resolve_shared_queue` are not implemented
//! either (calling one traps); a second non-zero `proxy_set_tick_period_milliseconds` in a
//! root context traps ("tick_period already set"); `proxy_set_effective_context` does
//! nothing; `proxy_increment_metric` on a gauge traps ("metric not a counter") and
//! `proxy_record_metric` on a counter traps ("metric is a counter"), and `proxy_get_metric` of an
//! id it does not know traps too, while it reads a counter as its sum over every worker; its
//! property table answers NotFound for `response.flags`, `response.code_details` and anything it
//! does not list (`upstream.request_attempt_count`), and `destination.address` is the PROXY protocol's,
//! absent without it. A request paused with calls of its own resumes once the last of them is
//! answered, whatever the filter asked, and only then; the answer to a request's call names the
//! filter's root context, not the request's, while the host calls made in it act on the request
//! (`ngx_http_proxy_wasm_dispatch.c`, `ngx_http_proxy_wasm.c`). NGINX's own answers to a user
//! request whose upstream failed are its error pages: 502 for a refused connection, 504 for a
//! timeout, with the headers NGINX sends.

use crate::abi::Headers;
use crate::envoy::{answer_in_time, Reply};
use crate::upstream::Behaviour;
use std::time::Duration;

/// `proxy_get_log_level` as ngx_wasm_module declares it: `(i32, i32) -> i32`, where the SDK
/// imports `(i32) -> i32`; a module importing the SDK's does not instantiate.
pub(crate) const LOG_LEVEL_ARITY: usize = 2;

/// The imports ngx_wasm_module declares but does not implement (its `nop` host function, which
/// traps when called), with their parameter counts (every parameter an i32).
pub(crate) const NOT_IMPLEMENTED: [(&str, usize); 9] = [
    ("proxy_done", 0),
    ("proxy_close_stream", 1),
    ("proxy_grpc_call", 12),
    ("proxy_grpc_stream", 9),
    ("proxy_grpc_send", 4),
    ("proxy_grpc_cancel", 1),
    ("proxy_grpc_close", 1),
    ("proxy_get_status", 3),
    ("proxy_resolve_shared_queue", 5),
];

/// The callbacks a dispatch may be sent from.
pub(crate) const DISPATCH_STEPS: [&str; 5] = [
    "proxy_on_request_headers",
    "proxy_on_request_body",
    "proxy_on_tick",
    "proxy_on_http_call_response",
    "proxy_on_foreign_function",
];

/// Whether ngx_wasm_module has the property at `path`: what it lacks answers NotFound.
pub(crate) fn has_property(path: &[&str]) -> bool {
    !matches!(
        path,
        ["response", "flags"]
            | ["response", "code_details"]
            | ["upstream", "request_attempt_count"]
            | ["destination", "address"]
            | ["xds", ..]
    )
}

/// A dispatch that failed: no headers, no body, and why in `:dispatch_status`.
fn failed_dispatch(why: &'static str) -> Reply {
    Reply {
        status: 0,
        headers: Headers::new(),
        body: Vec::new(),
        flags: 0,
        details: why.to_string(),
        dispatch_status: Some(why),
    }
}

/// When, after sending, and with what a dispatch to an upstream behaving as `behaviour` comes
/// back, with `timeout` (ngx_wasm_module applies it to connecting, sending and reading); `None`
/// never.
pub(crate) fn dispatch(
    behaviour: Behaviour,
    timeout: Option<Duration>,
    server: &str,
    wall_nanos: u64,
) -> Option<(Duration, Reply)> {
    match behaviour {
        Behaviour::Refuse | Behaviour::Overflow => {
            Some((Duration::ZERO, failed_dispatch("broken connection")))
        }
        _ => answer_in_time(&behaviour, timeout, server, wall_nanos)
            .or_else(|| timeout.map(|timeout| (timeout, failed_dispatch("timeout")))),
    }
}

/// A dispatch to a `host:port` nothing is known at: the resolver found nothing.
pub(crate) fn unresolved() -> (Duration, Reply) {
    (Duration::ZERO, failed_dispatch("resolver failure"))
}

/// NGINX's own error page of `status` (502 Bad Gateway, 504 Gateway Time-out).
fn error_page(status: u16, reason: &str, details: &str) -> Reply {
    let body = format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    );
    Reply {
        status,
        headers: vec![
            (":status".to_string(), status.to_string()),
            ("server".to_string(), "nginx".to_string()),
            ("content-type".to_string(), "text/html".to_string()),
            ("content-length".to_string(), body.len().to_string()),
        ],
        body: body.into_bytes(),
        flags: 0,
        details: details.to_string(),
        dispatch_status: None,
    }
}

/// What NGINX answers a user request sent to an upstream behaving as `behaviour`, within
/// `timeout` (`proxy_read_timeout`): the backend's answer, or NGINX's 502 or 504.
pub(crate) fn proxy(
    behaviour: Behaviour,
    timeout: Duration,
    server: &str,
    wall_nanos: u64,
) -> Option<(Duration, Reply)> {
    match behaviour {
        Behaviour::Refuse | Behaviour::Overflow => Some((
            Duration::ZERO,
            error_page(
                502,
                "Bad Gateway",
                "connect() failed (111: Connection refused)",
            ),
        )),
        Behaviour::Answer {
            status,
            body,
            delay,
            headers,
        } if delay < timeout => {
            let at = wall_nanos.saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(0));
            let mut reply = Reply::backend(status, &body, server, at);
            reply.headers.extend(headers);
            Some((delay, reply))
        }
        Behaviour::Answer { .. } | Behaviour::Hang => Some((
            timeout,
            error_page(504, "Gateway Time-out", "upstream timed out (110)"),
        )),
    }
}

/// NGINX's answer when the route header names nothing it knows.
pub(crate) fn no_upstream() -> Reply {
    error_page(502, "Bad Gateway", "no upstream")
}
