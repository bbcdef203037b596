//! Requests held at cold start on probes they send themselves.
//!
//! Until a backend passes its probes, or every backend was heard from, a request waits (at most
//! one probe timeout after start) rather than go to a backend that may never have booted: a
//! backend that refuses at once must not end the wait while another still hangs unheard. Envoy resumes a paused
//! request whenever the filter asks, so the tick resumes it once the first probe has answered
//! ([`Pick::Wait`]). ngx_wasm_module resumes a paused request only when the calls that request
//! made itself are answered; the tick cannot. So there the request sends a probe of its own to
//! the backend whose turn it is ([`Pick::Probe`]) and waits for that answer, which is taken in as
//! any probe's: it counts for the requests after it, and the request is then picked for again.
//! Each held request costs its backend one probe, and only in the window before the first
//! answer, when workers that compiled the module while requests queued take them all at once.

use super::probes::abandon_after;
use super::{Pick, Pool, SentProbe};
use crate::active::Health;
use crate::events::Effects;
use crate::time::Time;

/// Whether anything was heard yet from any backend, and the probes requests held until then
/// sent.
#[derive(Debug, Clone)]
pub(super) struct ColdStart {
    /// When the pool's backends were first configured: a request waits one probe timeout from
    /// then at most.
    started: Time,
    /// Whether enough was heard that the routing rests on no backend nothing is known of (then
    /// there is no cold-start wait).
    heard: bool,
    /// Probes sent by requests held at cold start ([`Pick::Probe`]), on any VM.
    held: Vec<SentProbe>,
}

impl ColdStart {
    /// The pool's backends are all new as of `now`: a request waits from then.
    pub(super) fn restart(&mut self, now: Time) {
        self.started = now;
    }

    /// Whether enough was heard to route without waiting.
    #[inline(always)]
    pub(super) fn heard(&self) -> bool {
        self.heard
    }

    /// Says whether enough was heard of the backends of a new configuration.
    pub(super) fn heard_of_configured(&mut self, heard: bool) {
        self.heard = heard;
    }

    /// Takes the held request's probe `token` off the wire, if it is one.
    /// Whether probe `token` is held here.
    pub(super) fn holds(&self, token: u32) -> bool {
        self.held.iter().any(|p| p.token == token)
    }

    pub(super) fn take(&mut self, token: u32) -> Option<SentProbe> {
        let at = self.held.iter().position(|p| p.token == token)?;
        Some(self.held.swap_remove(at))
    }

    /// Nothing heard yet, as of `now`.
    pub(super) fn new(now: Time) -> ColdStart {
        ColdStart {
            started: now,
            heard: false,
            held: Vec::new(),
        }
    }
}

impl<H> Pool<H> {
    /// Takes in that something was heard of a backend: the wait ends once a backend passes its
    /// probes or every backend was heard from (or drains), and stays ended.
    pub(super) fn hear(&mut self) {
        if !self.cold_start.heard {
            self.cold_start.heard = self.settled();
        }
    }

    /// Whether the routing rests on no backend nothing is known of: one passes its probes
    /// (rule 2 of [`crate::guard`] then leaves the unknown ones out), or none is unknown.
    pub(super) fn settled(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.evidence.active.status == Health::Healthy)
            || self
                .members
                .iter()
                .all(|m| m.evidence.heard_from() || m.evidence.draining())
    }

    /// How a request is held at cold start at `now`, with nothing heard yet from any backend:
    /// `None` once one probe timeout has passed since start. Out of line: the pick of every
    /// request after cold start skips it.
    #[inline(never)]
    pub(super) fn held(&mut self, now: Time) -> Option<Pick> {
        let wait_until = self
            .cold_start
            .started
            .saturating_add(self.config.health_checks.active.timeout);
        if now >= wait_until {
            return None;
        }
        if self.config.proxy.resumes_held_requests() {
            return Some(Pick::Wait);
        }
        self.layout.next().map(Pick::Probe)
    }

    /// A request held at cold start sent its probe of backend `index` as `token`: its answer
    /// comes back through [`Pool::probe_answered`] or [`Pool::probe_unanswered`], as the
    /// prober's do, on whichever VM the request is.
    pub fn held_probe_sent(&mut self, index: usize, token: u32, now: Time) -> Effects {
        if let Some(m) = self.members.get(index) {
            self.cold_start.held.push(SentProbe {
                token,
                key: m.key.clone(),
                sent: now,
            });
        }
        Effects::default()
    }

    /// Whether probe `token`, sent by a request held at cold start, still awaits its answer.
    pub fn awaits_held_probe(&self, token: u32) -> bool {
        self.cold_start.held.iter().any(|p| p.token == token)
    }

    /// The request that sent probe `token` ended before its answer came (the client left): the
    /// proxy drops the call with the request, so no answer will come.
    pub fn held_probe_dropped(&mut self, token: u32) -> Effects {
        self.cold_start.held.retain(|p| p.token != token);
        Effects::default()
    }

    /// Forgets held probes never answered: the host answers every call within its timeout while
    /// the request that made it lives, so one still here long after went with its request,
    /// and says nothing about the backend.
    pub(super) fn forget_held_probes(&mut self, now: Time) {
        if self.cold_start.held.is_empty() {
            return;
        }
        let timeout = self.config.health_checks.active.timeout;
        self.cold_start
            .held
            .retain(|p| now.saturating_sub(p.sent) < abandon_after(timeout));
    }
}
