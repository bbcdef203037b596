//! The core's retry advice written for the proxy ([`upcheck_policy::retry`]), in Envoy's
//! per-request retry headers, and every copy of those headers a client sent removed first: a
//! client must never choose how often its request is repeated, or how long each attempt may
//! take. Envoy's connection manager strips them only from requests it deems external, and a
//! client on the balancer's own network is internal to it.

use crate::abi::HeaderMap;
use crate::hostcall as hostcalls;
use upcheck_policy::retry::{decimal, Advice};

/// Repeat on these conditions.
const RETRY_ON: &str = "x-envoy-retry-on";
/// One attempt's timeout, in milliseconds.
const PER_TRY_TIMEOUT: &str = "x-envoy-upstream-rq-per-try-timeout-ms";
/// Keep the first attempt running past its timeout.
const HEDGE: &str = "x-envoy-hedge-on-per-try-timeout";
/// The other request headers by which a client could make Envoy's router repeat a request more
/// often or wait longer for it. (`x-envoy-retriable-status-codes` and
/// `x-envoy-retriable-header-names` act only with a `retry_on` that names them, which only the
/// route or `x-envoy-retry-on` can give.)
const REMOVED: [&str; 3] = [
    "x-envoy-retry-grpc-on",
    "x-envoy-max-retries",
    "x-envoy-upstream-rq-timeout-ms",
];

/// Writes `advice` on the current request: each of Envoy's steering headers is set as the advice
/// says or removed, so that every client copy is gone either way (a replace drops them all).
pub fn write(advice: Advice) {
    let on_5xx = advice.on_5xx.then_some("5xx");
    let _ = hostcalls::set_map_value(HeaderMap::Request, RETRY_ON, on_5xx);
    let mut digits = [0u8; 10];
    let timeout = advice.try_timeout_ms.map(|ms| decimal(ms, &mut digits));
    let hedge = (advice.hedge && timeout.is_some()).then_some("true");
    let _ = hostcalls::set_map_bytes(HeaderMap::Request, PER_TRY_TIMEOUT, timeout);
    let _ = hostcalls::set_map_value(HeaderMap::Request, HEDGE, hedge);
    for name in REMOVED {
        let _ = hostcalls::remove_map_value(HeaderMap::Request, name);
    }
}
