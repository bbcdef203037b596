//! The core's retry advice written for the proxy ([`upcheck_policy::retry`]), in Envoy's
//! per-request retry headers, and every copy of those headers a client sent removed first: a
//! client must never choose how often its request is repeated, or how long each attempt may
//! take. Envoy's connection manager strips them only from requests it deems external, and a
//! client on the balancer's own network is internal to it.

use crate::abi::HeaderMap;
use crate::hostcall as hostcalls;
use upcheck_policy::retry::{decimal, Advice};

/// Envoy's request headers that steer its router's retries and timeouts: none may come from a
/// client.
const STEERING: [&str; 9] = [
    RETRY_ON,
    "x-envoy-retry-grpc-on",
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-max-retries",
    "x-envoy-upstream-rq-timeout-ms",
    PER_TRY_TIMEOUT,
    HEDGE,
    "x-envoy-upstream-rq-timeout-alt-response",
];

/// Repeat on these conditions.
const RETRY_ON: &str = "x-envoy-retry-on";
/// One attempt's timeout, in milliseconds.
const PER_TRY_TIMEOUT: &str = "x-envoy-upstream-rq-per-try-timeout-ms";
/// Keep the first attempt running past its timeout.
const HEDGE: &str = "x-envoy-hedge-on-per-try-timeout";

/// Removes every client copy of the steering headers from the current request.
pub fn strip() {
    for name in STEERING {
        let _ = hostcalls::remove_map_value(HeaderMap::Request, name);
    }
}

/// Writes `advice` on the current request, whose client copies [`strip`] removed.
pub fn write(advice: Advice) {
    if advice.on_5xx {
        let _ = hostcalls::set_map_value(HeaderMap::Request, RETRY_ON, Some("5xx"));
    }
    if let Some(ms) = advice.try_timeout_ms {
        let mut digits = [0u8; 10];
        let _ = hostcalls::set_map_value(
            HeaderMap::Request,
            PER_TRY_TIMEOUT,
            Some(decimal(ms, &mut digits)),
        );
        if advice.hedge {
            let _ = hostcalls::set_map_value(HeaderMap::Request, HEDGE, Some("true"));
        }
    }
}
