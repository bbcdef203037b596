//! The proxy-wasm callbacks the bench picks out of a module's exports: below both the host runs
//! that measure them ([`crate::inhost`]) and the copies that count inside them
//! ([`crate::instrument`], [`crate::profile`]).

/// The callbacks whose hostcalls are counted apart: the exports named so.
pub const CALLBACK_PREFIX: &str = "proxy_on_";

/// The callbacks a request goes through, in order.
pub const REQUEST_CALLBACKS: [&str; 6] = [
    "proxy_on_context_create",
    "proxy_on_request_headers",
    "proxy_on_response_headers",
    "proxy_on_log",
    "proxy_on_done",
    "proxy_on_delete",
];
