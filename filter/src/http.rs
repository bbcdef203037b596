//! Per request: route by the policy, never by the client, and report how it went.
//!
//! The client's copy of the route header is removed whatever its case or count, the pick is set,
//! and Envoy's `cluster_header` route sends the request there. When the answer comes, its status
//! and, where the policy asks for them ([`RequestOutcome::ended`]), Envoy's response flags go to
//! the policy, which tells a backend's own 503 from Envoy's "could not connect" 503, and from
//! the 503 Envoy answers for itself when it never sent the request. A response carrying the
//! drain signal ([`drain::SIGNAL_HEADER`]) says so to the policy, and the header is removed on
//! its way to the client: it is the backend's word to the balancer, not to users.
//!
//! A gRPC backend's calls ([`Pool::speaks_grpc`]) end in `grpc-status`: in the response headers
//! of a trailers-only answer, which settle the call then, or in the trailers, which settle it
//! when they come; meanwhile it waits on its backend no more ([`Pool::request_answered`]). The
//! core reads the value ([`call`]).
//!
//! At cold start, before any probe has answered, the policy holds a request instead
//! ([`Pick::Wait`], [`Pick::Probe`]): parked for the tick to resume, where the host resumes a
//! request whenever asked (Envoy), or paused on a probe the request sends itself, where the host
//! resumes a request only on its own calls' answers (ngx_wasm_module); that answer goes to the
//! policy as any probe's, and the request is picked for again.

use crate::abi::{Action, HeaderMap};
use crate::hostcall as hostcalls;
use crate::probes;
use crate::retry_headers;
use crate::route::route;
use crate::vm::{self, Handle, Holding, Vm};
use std::time::Duration;
use upcheck_policy::grpc::call::{self, CallEnd};
use upcheck_policy::grpc::status::Code;
use upcheck_policy::host::Held;
use upcheck_policy::outcome::status_code;
use upcheck_policy::retry::safe_to_repeat;
use upcheck_policy::{drain, Pick, Pool, RequestOutcome, Retried, Routed, RoutingMode, Time};

/// How a request ended, as the proxy's callbacks tell it.
struct Ending {
    /// The status the client was answered with, if response headers reached it.
    status: Option<u16>,
    /// A gRPC call's code, if it ended with one.
    grpc: Option<Code>,
    /// Whether the answer carried the drain signal.
    signalled: bool,
    /// Whether to ask the proxy how the request went (its response flags, its retries): not of
    /// a request that ended while parked at cold start, which reached no backend.
    ask_proxy: bool,
}

/// One request's context.
pub struct Http {
    id: u32,
    vm: Handle,
    standing: Progress,
    /// Whether its pool's backends speak gRPC, as it stood when the request was routed.
    grpc: bool,
}

/// Where a request stands with the policy.
#[derive(Debug, Clone, Copy)]
enum Progress {
    /// Not sent on by upcheck (yet): before its headers, not configured, or parked at cold start
    /// (its pick is then in the VM's `resumed` once the tick resumed it).
    Unrouted,
    /// Sent to this backend, and when if latency is tracked.
    Routed(Routed, Option<Time>),
    /// Held at cold start on the probe with this token ([`Pick::Probe`]), until it is answered.
    Holding(u32),
    /// A gRPC call whose response headers came `latency` after it started: its trailers say
    /// how it went.
    Trailing {
        routed: Routed,
        latency: Duration,
        signalled: bool,
    },
    /// Its outcome has gone to the policy: nothing more is said of it.
    Settled,
}

/// Routes request `id` by the policy's pick, or holds it at cold start, and says where it stands
/// in `standing`: whether it goes on, or waits (`None` if the VM is not configured).
#[inline(always)]
fn decide(v: &mut Vm, id: u32, standing: &mut Progress) -> Option<Action> {
    match v.pick()? {
        Pick::Backend(i) => send(v, id, i, standing),
        pick => hold(v, id, pick, standing),
    }
}

/// Sends request `id` to backend `i`, with the retry advice a GET or HEAD gets.
#[inline(always)]
fn send(v: &mut Vm, id: u32, i: usize, standing: &mut Progress) -> Option<Action> {
    route(v.pool.as_ref()?, Some(i), &mut v.joined);
    let (routed, started) = advised(v, id, i)?;
    *standing = Progress::Routed(routed, started);
    Some(Action::Continue)
}

/// Counts the current request (`id`) routed to backend `i` and writes the retry advice a GET
/// or HEAD gets: the request as it must settle, and when it started.
#[inline(always)]
pub fn advised(v: &mut Vm, id: u32, i: usize) -> Option<(Routed, Option<Time>)> {
    let repeatable = v.pool.as_ref()?.advises_retries() && repeatable();
    let (routed, started, advice) = v.routed(id, i, repeatable)?;
    retry_headers::write(advice, i, &mut v.timeouts);
    Some((routed, started))
}

/// Whether the current request is safe to repeat, as the core says of its `:method`.
fn repeatable() -> bool {
    hostcalls::read_map_value(HeaderMap::Request, ":method", safe_to_repeat)
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Holds request `id` at cold start as the pool says ([`upcheck_policy::host::hold`]). Out of
/// line: only requests at cold start come here.
#[inline(never)]
fn hold(v: &mut Vm, id: u32, pick: Pick, standing: &mut Progress) -> Option<Action> {
    let held = v.hold(pick)?;
    if let Held::Backend(i) = held {
        return send(v, id, i, standing);
    }
    route(v.pool.as_ref()?, None, &mut v.joined);
    retry_headers::write(Default::default(), 0, &mut v.timeouts);
    match held {
        Held::Parked => v.parked.push(id),
        Held::OnProbe { token, .. } => {
            v.holding.push(Holding { token, context: id });
            *standing = Progress::Holding(token);
        }
        // Not reached while the pool has backends; the client's copy of the route header is
        // gone anyway.
        Held::Backend(_) | Held::Nowhere => return None,
    }
    Some(Action::Pause)
}

/// Resumes the current request, held at cold start.
pub fn resume() {
    if let Err(status) = hostcalls::resume_http_request() {
        log::warn!("upcheck: a request held at cold start could not resume ({status:?})");
    }
}

impl Http {
    /// A context for request `id`.
    pub fn new(id: u32, vm: Handle) -> Http {
        Http {
            id,
            vm,
            standing: Progress::Unrouted,
            grpc: false,
        }
    }

    /// Settles the request as `ending` says, once: the policy gets its outcome, with the
    /// latency where requests are timed, and, in `host` routing, whether the proxy retried it
    /// and which backend gave the final answer.
    fn settle(&mut self, ending: Ending) {
        let standing = std::mem::replace(&mut self.standing, Progress::Settled);
        let id = self.id;
        vm::with(&self.vm, |v| {
            let mut answered_after = None;
            let (backend, started) = match standing {
                Progress::Settled => return,
                Progress::Routed(backend, started) => (backend, started),
                Progress::Trailing {
                    routed, latency, ..
                } => {
                    answered_after = Some(latency);
                    (routed, None)
                }
                Progress::Unrouted => {
                    let at = v.resumed.iter().position(|r| r.context == id);
                    let Some(resumed) = at.map(|at| v.resumed.swap_remove(at)) else {
                        v.parked.retain(|context| *context != id);
                        return;
                    };
                    (resumed.backend, resumed.started)
                }
                Progress::Holding(token) => {
                    v.holding.retain(|h| h.token != token);
                    if let Some(pool) = v.pool.as_mut() {
                        let effects = pool.held_probe_dropped(token);
                        v.carry_out_when_any(effects);
                    }
                    return;
                }
            };
            // The clock is read here only where latency matters, or later if the outcome counts.
            let now = started.map(|_| vm::now());
            let latency = match (now, started) {
                (Some(now), Some(started)) => now.saturating_sub(started),
                _ => answered_after.unwrap_or_default(),
            };
            let Some(pool) = v.pool.as_mut() else {
                return;
            };
            let config = pool.config();
            let flags_reported = ending.ask_proxy && config.proxy.reports_response_flags();
            let flags = || response_flags(flags_reported);
            let outcome = match ending.grpc {
                Some(code) => RequestOutcome::called(code, latency, flags),
                None => RequestOutcome::ended(ending.status, latency, flags),
            }
            .signalled(ending.signalled);
            let retried = match ending.ask_proxy && config.routing == RoutingMode::Host {
                true => retried(pool),
                false => Retried::No,
            };
            let clock = || now.unwrap_or_else(vm::now);
            let effects = pool.request_ended(id, backend, retried, outcome, clock);
            if let Some(effects) = effects.filter(|e| !e.is_empty()) {
                v.carry_out(effects, now.unwrap_or_else(vm::now));
            }
        });
    }
}

/// Whether the proxy retried this request and, if so, which of `pool`'s backends gave the final
/// answer, as Envoy's properties say; asked only in `host` routing (where the route may retry).
/// Hosts without the properties are taken at their word that it was not.
fn retried<H>(pool: &Pool<H>) -> Retried {
    let attempts = hostcalls::read_property("upstream\0request_attempt_count", le_u64)
        .ok()
        .flatten()
        .flatten()
        .unwrap_or(1);
    if attempts <= 1 {
        return Retried::No;
    }
    let address = hostcalls::get_property("upstream\0address")
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok());
    Retried::Yes {
        final_answer: address.as_deref().and_then(|a| pool.index_at(a)),
    }
}

/// Envoy's response flags for this stream (0 when the host does not say), asked for only of a
/// proxy that reports them: ngx_wasm_module answers NotFound and logs an error for each ask.
fn response_flags(reported: bool) -> u64 {
    if !reported {
        return 0;
    }
    hostcalls::read_property("response\0flags", le_u64)
        .ok()
        .flatten()
        .flatten()
        .unwrap_or(0)
}

/// A number property as Envoy hands it over: eight bytes, little-endian.
fn le_u64(bytes: &[u8]) -> Option<u64> {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

impl Http {
    /// The request's headers: the pick, the route header, or a wait at cold start.
    pub fn on_request_headers(&mut self) -> Action {
        let id = self.id;
        let (standing, grpc) = (&mut self.standing, &mut self.grpc);
        vm::with(&self.vm, |v| {
            *grpc = v.pool.as_ref().is_some_and(Pool::speaks_grpc);
            decide(v, id, standing)
        })
        .flatten()
        // Not configured: leave the request to the proxy's own routing.
        .unwrap_or(Action::Continue)
    }

    /// The answer to call `token` of this request: the probe it was held on at cold start,
    /// taken in as any probe's answer; then the request is picked for again. Whether it goes on
    /// now (the caller resumes it), rather than wait on another probe.
    #[inline(never)]
    pub fn on_http_call_response(&mut self, token: u32, body_size: usize) -> bool {
        if !matches!(self.standing, Progress::Holding(held) if held == token) {
            return false;
        }
        self.standing = Progress::Unrouted;
        let id = self.id;
        let standing = &mut self.standing;
        let action = vm::with(&self.vm, |v| {
            v.holding.retain(|h| h.token != token);
            let now = vm::now();
            let pool = v.pool.as_mut()?;
            let effects = probes::answer(pool, token, body_size, now);
            v.carry_out(effects, now);
            decide(v, id, standing)
        })
        .flatten();
        // No longer configured: on to the proxy's own routing.
        action.unwrap_or(Action::Continue) == Action::Continue
    }

    /// The response's headers: the outcome, with the drain signal taken off.
    pub fn on_response_headers(&mut self) -> Action {
        let status = hostcalls::read_map_value(HeaderMap::Response, ":status", status_code)
            .ok()
            .flatten()
            .flatten();
        let Some(status) = status else {
            return Action::Continue;
        };
        let signalled =
            hostcalls::read_map_value(HeaderMap::Response, drain::SIGNAL_HEADER, |_| ())
                .ok()
                .flatten()
                .is_some();
        if signalled {
            let _ = hostcalls::remove_map_value(HeaderMap::Response, drain::SIGNAL_HEADER);
        }
        if self.grpc {
            self.grpc_headers(status, signalled);
            return Action::Continue;
        }
        self.settle(Ending {
            status: Some(status),
            grpc: None,
            signalled,
            ask_proxy: true,
        });
        Action::Continue
    }

    /// A gRPC call's response headers (HTTP `status`): settled now if they say how it ended or
    /// are no gRPC answer, or left for its trailers. Out of line: HTTP backends never come here.
    #[inline(never)]
    fn grpc_headers(&mut self, status: u16, signalled: bool) {
        let heard = hostcalls::read_map_value(HeaderMap::Response, call::STATUS_HEADER, |v| {
            call::heard(status, Some(v))
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| call::heard(status, None));
        let grpc = match heard {
            CallEnd::Ended(code) => Some(code),
            CallEnd::Http(_) => None,
            CallEnd::InTrailers => match self.standing {
                Progress::Routed(routed, Some(started)) => {
                    let latency = vm::now().saturating_sub(started);
                    let id = self.id;
                    vm::with(&self.vm, |v| {
                        if let Some(pool) = v.pool.as_mut() {
                            pool.request_answered(id, routed);
                        }
                    });
                    self.standing = Progress::Trailing {
                        routed,
                        latency,
                        signalled,
                    };
                    return;
                }
                // Held at cold start, or not timed: its answer is taken as it stands.
                _ => None,
            },
        };
        self.settle(Ending {
            status: Some(status),
            grpc,
            signalled,
            ask_proxy: true,
        });
    }

    /// The response's trailers: a gRPC call's `grpc-status`, which settles it.
    pub fn on_response_trailers(&mut self) -> Action {
        let Progress::Trailing { signalled, .. } = self.standing else {
            return Action::Continue;
        };
        let found =
            hostcalls::read_map_value(HeaderMap::ResponseTrailers, call::STATUS_HEADER, |v| {
                call::in_trailers(Some(v))
            });
        let code = found
            .ok()
            .flatten()
            .unwrap_or_else(|| call::in_trailers(None));
        self.settle(Ending {
            status: Some(200),
            grpc: Some(code),
            signalled,
            ask_proxy: true,
        });
        Action::Continue
    }

    /// The request has ended: settled now if no response headers settled it.
    pub fn on_log(&mut self) {
        if !matches!(self.standing, Progress::Settled) {
            self.settle_unanswered();
        }
    }

    /// Settles a request no response headers reached: the backend failed, or the client left.
    /// A request still parked when it ended reached no backend, so the proxy has no flags for
    /// it. Out of line: most requests were settled by their answer, and the log callback then
    /// sets up nothing.
    #[inline(never)]
    fn settle_unanswered(&mut self) {
        let signalled = match self.standing {
            Progress::Trailing { signalled, .. } => signalled,
            _ => false,
        };
        self.settle(Ending {
            status: None,
            grpc: None,
            signalled,
            ask_proxy: matches!(
                self.standing,
                Progress::Routed(..) | Progress::Trailing { .. }
            ),
        });
    }
}
