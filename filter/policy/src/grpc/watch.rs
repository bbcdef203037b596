//! Pushed health: a gRPC backend's `grpc.health.v1.Health/Watch`, one stream per backend held by
//! the VM that probes it ([`crate::pool::Pool::tick`] opens it, as the fleet's part opens etcd's
//! watch), so that a server changing its serving status is heard as it changes, not at the next
//! `Check` up to an interval later. Here is what each message and each end of the stream means,
//! and the stream's life: opened, heard, ended or stalled, and opened again after a backoff.
//!
//! Why each word means what it does:
//! - `NOT_SERVING` is how a gRPC server drains (its health service flips before it stops), so it
//!   starts a drain ([`crate::drain::Signal::Watch`]), never a failure: the drain rules apply,
//!   and the prober shares it at once, so no worker sends it a new call once the change is
//!   carried out. A `Check` that answers `NOT_SERVING` while the backend drains by its Watch
//!   agrees with it and is taken as the same drain, not as a failure.
//! - `SERVING` is taken as a passing probe, sent and answered now: it ends a drain at once, as a
//!   passing probe does, and counts as one pass toward `passes`. A backend the Watch drained
//!   never stopped being healthy, so it is back in rotation at once whatever `passes` is; one
//!   its `Check`s took down (unreachable, timing out, failing) earned the thresholds the
//!   operator set against a backend that flaps, and the Watch's one word does not waive them
//!   (with the default `passes` of 1, it is back at once too). A Watch speaks only when the
//!   status changes, so it could never make up a threshold of several passes by itself: the
//!   `Check`s on the interval do.
//! - `SERVICE_UNKNOWN` and `UNKNOWN`, and a stream the backend ends `NOT_FOUND` (tonic-health's
//!   answer for a service it does not know, where the protocol says `SERVICE_UNKNOWN`), fail as
//!   the `Check`'s mapping fails them: a failure with its reason, not a drain.
//! - `UNIMPLEMENTED`: the backend has no health service, or no `Watch`. Trying again soon cannot
//!   mend that, so the stream waits the longest backoff before it is tried again, its `Check`
//!   covers the backend meanwhile, and the pool says it once.
//! - Any other end (the server closing it, a reset, the proxy's own end when nothing serves, the
//!   proxy refusing to open it) is no word on the backend: its `Check` on the interval covers it
//!   exactly as without a Watch, and the stream is opened again after [`FIRST_WAIT`], doubling
//!   to [`MAX_WAIT`], the wait starting over once a message arrives.
//!
//! When a `Check` and the Watch disagree, the newest word wins: a Watch message counts as a probe
//! sent when it arrived, and a `Check` sent before it and answered after it is older, so it is
//! dropped as any probe overtaken by a newer one is. A backend's word on its stream is as
//! current as a `Check`'s, and whichever it said last is what it says now.

use super::health::{self, Serving};
use super::status::Code;
use crate::backoff::Backoff;
use crate::time::Time;
use std::time::Duration;

/// The wait before a stream that ended is opened again, the first time.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The longest wait before a stream that keeps ending is opened again.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// A Watch stream the pool asks the host to open or cancel ([`crate::events::Effects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchCall {
    /// Open the Watch of backend `index` (its cluster, the configured service); the token or the
    /// proxy's refusal goes back in ([`crate::pool::Pool::health_watch_opened`],
    /// [`crate::pool::Pool::health_watch_refused`]).
    Open(usize),
    /// Cancel the stream of this token.
    Cancel(u32),
}

/// What a Watch's message or end says of its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// `SERVING`: a passing probe.
    Serving,
    /// `NOT_SERVING`: it drains.
    NotServing,
    /// A failing probe: a serving status that is neither `SERVING` nor `NOT_SERVING`
    /// (`SERVICE_UNKNOWN`, `UNKNOWN`).
    Failed(Serving),
    /// A failing probe: the backend ended the Watch with this status, which says the service
    /// is not there (`NOT_FOUND`).
    EndedFailing(Code),
    /// No word on the backend: its `Check` covers it.
    Nothing,
}

/// What a message of a Watch says: an error naming what is wrong for bytes that are no health
/// answer.
pub fn heard(message: &[u8]) -> Result<Pushed, String> {
    Ok(match health::serving(message)? {
        Serving::Serving => Pushed::Serving,
        Serving::NotServing => Pushed::NotServing,
        said => Pushed::Failed(said),
    })
}

/// What a Watch that ended with `code` says of its backend, `by_backend` if the backend ended
/// it (not the proxy, for want of it).
pub fn ended(code: Code, by_backend: bool) -> Pushed {
    match (by_backend, code) {
        (true, Code::NotFound) => Pushed::EndedFailing(code),
        _ => Pushed::Nothing,
    }
}

/// Where a backend's stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchLine {
    /// None open; one is opened at the first tick from `after` on.
    Closed {
        /// When it may be opened.
        after: Time,
    },
    /// Asked of the proxy, not yet handed back.
    Opening,
    /// Open as `token` since `since`; `heard`: whether a message came on it.
    Open {
        /// The stream's token.
        token: u32,
        /// When it opened.
        since: Time,
        /// Whether a message came on it.
        heard: bool,
    },
}

/// One backend's Watch, as the VM that probes it keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthWatch {
    line: WatchLine,
    backoff: Backoff,
    unimplemented: bool,
}

impl Default for HealthWatch {
    fn default() -> Self {
        HealthWatch::new()
    }
}

impl HealthWatch {
    /// A Watch not opened yet, to be opened at once.
    pub const fn new() -> HealthWatch {
        HealthWatch {
            line: WatchLine::Closed { after: Time::ZERO },
            backoff: Backoff::new(FIRST_WAIT, MAX_WAIT),
            unimplemented: false,
        }
    }

    /// Whether the stream is to be opened at `now`: then it is taken as opening.
    pub fn due(&mut self, now: Time) -> bool {
        match self.line {
            WatchLine::Closed { after } if after <= now => {
                self.line = WatchLine::Opening;
                true
            }
            _ => false,
        }
    }

    /// Whether it is opening: what the proxy hands back is wanted.
    pub fn opening(&self) -> bool {
        self.line == WatchLine::Opening
    }

    /// The proxy opened it as `token` at `now`.
    pub fn opened(&mut self, token: u32, now: Time) {
        self.line = WatchLine::Open {
            token,
            since: now,
            heard: false,
        };
    }

    /// The proxy would not open it at `now`: it is tried again after the backoff.
    pub fn refused(&mut self, now: Time) {
        self.line = WatchLine::Closed {
            after: now.saturating_add(self.backoff.failed()),
        };
    }

    /// Whether `token` is its stream.
    pub fn owns(&self, token: u32) -> bool {
        matches!(self.line, WatchLine::Open { token: t, .. } if t == token)
    }

    /// A message came on it: the backoff starts over, and the backend implements the Watch.
    pub fn heard(&mut self) {
        if let WatchLine::Open { token, since, .. } = self.line {
            self.line = WatchLine::Open {
                token,
                since,
                heard: true,
            };
        }
        self.unimplemented = false;
        self.backoff.reset();
    }

    /// A stream open for longer than `timeout` at `now` without a message (a server answers a
    /// Watch with the status at once): its token, to cancel, and it is opened again after the
    /// backoff.
    pub fn stalled(&mut self, now: Time, timeout: Duration) -> Option<u32> {
        match self.line {
            WatchLine::Open {
                token,
                since,
                heard: false,
            } if now.saturating_sub(since) > timeout => {
                self.refused(now);
                Some(token)
            }
            _ => None,
        }
    }

    /// The stream ended at `now` with `code`, `by_backend` if the backend ended it: what that
    /// says of the backend, and whether it newly found the backend does not implement the Watch.
    /// It is opened again after the backoff (the longest, for `UNIMPLEMENTED`).
    pub fn closed(&mut self, code: Code, by_backend: bool, now: Time) -> (Pushed, bool) {
        let unimplemented = by_backend && code == Code::Unimplemented;
        let wait = if unimplemented {
            self.backoff.gave_up()
        } else {
            self.backoff.failed()
        };
        self.line = WatchLine::Closed {
            after: now.saturating_add(wait),
        };
        let newly = unimplemented && !self.unimplemented;
        self.unimplemented |= unimplemented;
        (ended(code, by_backend), newly)
    }

    /// Stops it: the token of the stream to cancel, if one is open. A stream that was open or
    /// opening is opened again at once once wanted; one waiting out its backoff keeps waiting.
    pub fn stop(&mut self) -> Option<u32> {
        match self.line {
            WatchLine::Open { token, .. } => {
                self.line = WatchLine::Closed { after: Time::ZERO };
                Some(token)
            }
            WatchLine::Opening => {
                self.line = WatchLine::Closed { after: Time::ZERO };
                None
            }
            WatchLine::Closed { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Time {
        Duration::from_secs(n)
    }

    #[test]
    fn each_serving_status_a_watch_pushes_means_a_pass_a_drain_or_a_failure() {
        assert_eq!(heard(b"\x08\x01"), Ok(Pushed::Serving));
        assert_eq!(heard(b"\x08\x02"), Ok(Pushed::NotServing));
        assert_eq!(
            heard(b"\x08\x03"),
            Ok(Pushed::Failed(Serving::ServiceUnknown))
        );
        assert_eq!(heard(b""), Ok(Pushed::Failed(Serving::Unknown)));
        assert!(heard(b"\x08").is_err());
    }

    #[test]
    fn only_the_backends_not_found_ends_a_watch_as_a_failure() {
        let not_found = Pushed::EndedFailing(Code::NotFound);
        assert_eq!(ended(Code::NotFound, true), not_found);
        assert_eq!(ended(Code::NotFound, false), Pushed::Nothing);
        assert_eq!(ended(Code::Unavailable, true), Pushed::Nothing);
        assert_eq!(ended(Code::Unimplemented, true), Pushed::Nothing);
        assert_eq!(ended(Code::Ok, true), Pushed::Nothing);
    }

    #[test]
    fn a_stream_that_keeps_ending_is_opened_again_later_each_time_and_soon_once_it_spoke() {
        let mut watch = HealthWatch::new();
        let mut opened_at = Vec::new();
        let mut now = secs(0);
        for token in 1..=7 {
            while !watch.due(now) {
                now += Duration::from_millis(200);
            }
            opened_at.push(now.as_secs());
            watch.opened(token, now);
            let _ = watch.closed(Code::Unavailable, false, now);
        }
        assert_eq!(opened_at, [0, 1, 3, 7, 15, 31, 61]);
        assert!(watch.due(secs(91)));
        watch.opened(8, secs(91));
        watch.heard();
        let _ = watch.closed(Code::Ok, true, secs(100));
        assert!(!watch.due(secs(100)));
        assert!(watch.due(secs(101)), "the wait started over");
    }

    #[test]
    fn a_backend_without_the_watch_is_tried_again_only_after_the_longest_wait_and_said_once() {
        let mut watch = HealthWatch::new();
        assert!(watch.due(secs(0)));
        watch.opened(1, secs(0));
        assert_eq!(
            watch.closed(Code::Unimplemented, true, secs(0)),
            (Pushed::Nothing, true)
        );
        assert!(!watch.due(secs(29)));
        assert!(watch.due(secs(30)));
        watch.opened(2, secs(30));
        assert_eq!(
            watch.closed(Code::Unimplemented, true, secs(30)),
            (Pushed::Nothing, false),
            "said once"
        );
        assert!(!watch.due(secs(59)));
    }

    #[test]
    fn a_stream_that_says_nothing_within_the_timeout_is_cancelled_and_opened_again() {
        let mut watch = HealthWatch::new();
        assert!(watch.due(secs(0)));
        watch.opened(5, secs(0));
        assert_eq!(watch.stalled(secs(5), secs(5)), None);
        assert_eq!(watch.stalled(secs(6), secs(5)), Some(5));
        assert!(!watch.owns(5));
        assert!(watch.due(secs(7)));
    }

    #[test]
    fn a_stopped_stream_hands_back_its_token_and_is_opened_again_at_once_when_wanted() {
        let mut watch = HealthWatch::new();
        assert!(watch.due(secs(0)));
        watch.opened(5, secs(0));
        assert_eq!(watch.stop(), Some(5));
        assert_eq!(watch.stop(), None);
        assert!(watch.due(secs(0)));
    }
}
