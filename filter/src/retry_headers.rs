//! The core's retry advice written for the proxy ([`upcheck_policy::retry`]), in Envoy's
//! per-request retry headers, and every copy of those headers a client sent removed first: a
//! client must never choose how often its request is repeated, or how long each attempt may
//! take. Envoy's connection manager strips them only from requests it deems external, and a
//! client on the balancer's own network is internal to it.
//!
//! A backend's per-try timeout changes at most once a tick, so its digits are kept as last
//! written for it ([`TimeoutValues`]): a request writes them as they stand rather than in
//! decimal again.

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

/// Writes `advice` for a request to backend `backend` on the current request: each of Envoy's
/// steering headers is set as the advice says or removed, so that every client copy is gone
/// either way (a replace drops them all). `timeouts` keeps the timeout's digits per backend.
#[inline(always)]
pub fn write(advice: Advice, backend: usize, timeouts: &mut TimeoutValues) {
    let on_5xx = advice.on_5xx.then_some("5xx");
    let _ = hostcalls::set_map_value(HeaderMap::Request, RETRY_ON, on_5xx);
    let timeout = advice
        .try_timeout_ms
        .and_then(|ms| timeouts.digits(backend, ms));
    let hedge = advice.hedge.then_some("true");
    let _ = hostcalls::set_map_bytes(HeaderMap::Request, PER_TRY_TIMEOUT, timeout);
    let _ = hostcalls::set_map_value(HeaderMap::Request, HEDGE, hedge);
    for name in REMOVED {
        let _ = hostcalls::remove_map_value(HeaderMap::Request, name);
    }
}

/// The per-try timeout's header value as last written for each backend, by its position.
#[derive(Debug, Default)]
pub struct TimeoutValues {
    by_backend: Vec<Digits>,
}

/// A timeout in milliseconds and its decimal digits, right-aligned from `from`; none written
/// while `from` is 0 (only a timeout of ten digits starts there, and it is then written each
/// time).
#[derive(Debug, Default, Clone, Copy)]
struct Digits {
    ms: u32,
    from: usize,
    bytes: [u8; 10],
}

impl TimeoutValues {
    /// The digits of `ms` for backend `backend`, written again only if its timeout changed.
    #[inline(always)]
    fn digits(&mut self, backend: usize, ms: u32) -> Option<&[u8]> {
        if backend >= self.by_backend.len() {
            self.grow(backend);
        }
        let kept = self.by_backend.get_mut(backend)?;
        if kept.from == 0 || kept.ms != ms {
            kept.ms = ms;
            kept.from = kept.bytes.len() - decimal(ms, &mut kept.bytes).len();
        }
        kept.bytes.get(kept.from..)
    }

    /// Room for backend `backend`. Out of line: once per backend per VM.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, backend: usize) {
        self.by_backend
            .resize(backend.saturating_add(1), Digits::default());
    }
}
