//! Whether a request is repeated on another backend, and how long one attempt may take.
//!
//! A request that is safe to repeat (GET, HEAD) and meets a 5xx, a reset or a stall on a backend
//! that misbehaves while its peers serve need not reach its user as a failure: a second attempt on
//! a peer would most likely succeed. Repeating every failure, as a proxy's `retry_on: 5xx` does,
//! also repeats an app bug that every backend shares: double the load on every failing request,
//! and the same answer in the end. The peer comparison already asks the question that tells the
//! two apart, so each request carries the policy's advice ([`Advice`]), from the grounds its
//! backend stands on ([`Grounds`]), worked out at each tick from the counts the outlier rules keep:
//! - a backend that stands out from its peers by its failures ([`crate::outlier::odd_one_out`]),
//!   drains or warms up: its 5xx are repeated elsewhere;
//! - its peers fail as well (an app bug, a shared dependency), the pool guard is engaged, or it
//!   has no peer in rotation: not repeated; the answer reaches the user as the app wrote it;
//! - no evidence either way yet: not repeated either. The proxy cannot say which 5xx a repeated
//!   attempt met, so a repeat counts against its backend, toward `max_fails` too; repeating the
//!   first 500s of an app bug every backend shares would eject backends for it before the
//!   comparison could see the peers fail alike. A backend whose pages start failing stands out
//!   at its second failure while its peers serve.
//!
//! Gateway errors (502, 503, 504), resets and refused connections are the route's own policy,
//! repeated on every grounds, as they were before the advice.
//!
//! Every repeat is an extra attempt, under a budget ([`Budget`]): at most `budget_percent` of the
//! requests of the outlier window plus `min_per_second`; past it a request gets no advice and the
//! route's own policy alone applies. The per-try timeout follows the peers: `try_factor` times
//! their 99th percentile, at least `min_try_timeout`, set only when that is shorter than
//! `max_try_timeout` (the route's own), hedged when `hedge` is on, so a backend that stalls costs
//! a request its peers' tail rather than the route's fixed timeout.

mod budget;

pub use budget::{Budget, BudgetNews, Spent};

use std::time::Duration;
use upcheck_config::Retries;

/// Whether a request with this `:method` is safe to repeat after it reached a backend: a GET or
/// a HEAD changes nothing on the server. Any other method is repeated only by the route, when it
/// never reached one.
pub fn safe_to_repeat(method: &[u8]) -> bool {
    method == b"GET" || method == b"HEAD"
}

/// Why a request to a backend is, or is not, repeated elsewhere after a 5xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grounds {
    /// Nothing says yet whether the backend fails alone: not repeated (a 500 may be an app bug).
    #[default]
    NoEvidence,
    /// It fails while its peers do not: repeated.
    OddOneOut,
    /// It drains: repeated (it is leaving; its peers stay).
    Draining,
    /// It warms up after entering service: repeated.
    Warming,
    /// Its peers fail too (an app bug, a shared dependency): not repeated.
    Alike,
    /// The pool guard is engaged: every backend is in trouble, none is repeated.
    Guarded,
    /// It has no peer in rotation to repeat on: not repeated.
    Alone,
}

impl Grounds {
    /// Whether a 5xx on these grounds is repeated elsewhere.
    pub fn repeats(self) -> bool {
        matches!(
            self,
            Grounds::OddOneOut | Grounds::Draining | Grounds::Warming
        )
    }
}

/// What became of a request's first attempt when the proxy made another for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// It failed (a 5xx, a reset, a refused connection) and was repeated on another backend.
    Repeated,
    /// It outlasted the per-try timeout the policy set, and the other attempt (a hedge, or with
    /// hedging off the retry after the timeout) answered first.
    HedgeWon,
    /// It outlasted the per-try timeout, a hedge went out, and it answered first.
    HedgeLost,
}

impl Extra {
    /// Whether another backend gave the answer.
    pub fn went_elsewhere(self) -> bool {
        self != Extra::HedgeLost
    }

    /// Whether it was a hedge: the first attempt outlasted its per-try timeout.
    pub fn hedged(self) -> bool {
        self != Extra::Repeated
    }
}

/// What a backend's requests are told, worked out at each tick: the grounds, and the per-try
/// timeout its peers' latency gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Why its 5xx are or are not repeated.
    pub grounds: Grounds,
    /// How long one attempt may take, in whole milliseconds (the proxy's unit): set only when
    /// the peers' latency is known and gives less than `max_try_timeout`, so that the advice
    /// only ever shortens the route's own per-try timeout (`upcheck envoy` writes the two equal).
    pub try_timeout_ms: Option<u32>,
}

impl Plan {
    /// The plan for a backend on `grounds` whose peers' slowest requests (99th percentile) take
    /// `peers_p99`, if known.
    pub fn new(grounds: Grounds, peers_p99: Option<Duration>, retries: &Retries) -> Plan {
        let timeout = peers_p99.map(|p99| {
            p99.saturating_mul(retries.try_factor)
                .max(retries.min_try_timeout)
        });
        Plan {
            grounds,
            try_timeout_ms: timeout
                .filter(|t| *t < retries.max_try_timeout)
                .map(|t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1)),
        }
    }
}

/// What one request carries to the proxy: whether its 5xx are repeated on another backend, and
/// how long one attempt may take, hedged or not. The default asks nothing: the route's own
/// policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Advice {
    /// Repeat a 5xx (any, 500 included), a reset or a refused connection on another backend.
    pub on_5xx: bool,
    /// One attempt's timeout, in whole milliseconds, if the policy sets one.
    pub try_timeout_ms: Option<u32>,
    /// Keep the first attempt running when its timeout passes (the first good answer wins).
    pub hedge: bool,
    /// Why.
    pub grounds: Grounds,
}

impl Advice {
    /// Whether the advice asks anything of the proxy beyond the route's own policy.
    pub fn asks(&self) -> bool {
        self.on_5xx || self.try_timeout_ms.is_some()
    }

    /// The advice for a request on `plan`, within budget: the grounds decide the 5xx repeat, the
    /// plan's timeout applies unless the guard is engaged (every backend is in trouble).
    pub fn of(plan: Plan, retries: &Retries) -> Advice {
        let timed = plan.grounds != Grounds::Guarded && plan.grounds != Grounds::Alone;
        let try_timeout_ms = plan.try_timeout_ms.filter(|_| timed);
        Advice {
            on_5xx: plan.grounds.repeats(),
            try_timeout_ms,
            hedge: try_timeout_ms.is_some() && retries.hedge,
            grounds: plan.grounds,
        }
    }
}

/// `n` in decimal ASCII, written into `digits` (a u32 has at most 10), for a header value that
/// costs no allocation.
pub fn decimal(n: u32, digits: &mut [u8; 10]) -> &[u8] {
    let mut at = digits.len();
    let mut rest = n;
    while let Some(slot) = at.checked_sub(1) {
        at = slot;
        if let Some(d) = digits.get_mut(at) {
            // `rest % 10` is below 10.
            *d = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    digits.get(at..).unwrap_or(b"0")
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn numbers_are_written_in_decimal_from_zero_to_the_largest() {
        for n in [0, 7, 10, 250, 3000, 4_294_967_295] {
            let mut digits = [0u8; 10];
            assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes());
        }
    }
}
