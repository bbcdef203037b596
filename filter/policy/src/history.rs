//! The history of every change: the newest transitions of a pool's backends and of its pool
//! guard, the same for every worker.
//!
//! The status page shows the present; "what happened to app2 at 03:12, and why?" is asked
//! afterwards. Every change is already an [`Event`] with its reason, reported by exactly one VM
//! of the process ([`crate::events`]); that VM also appends it, by compare-and-swap, to one
//! process-wide table in shared data ([`crate::tables::keys::HISTORY`]), and every status page
//! reads that table. So each worker's page shows the same history, and a change's cause is its
//! log line's own words: there is one home for each reason, the event's `Display`.
//!
//! Bounded: the table keeps the newest `history` changes (default
//! [`DEFAULT_HISTORY`](upcheck_config::DEFAULT_HISTORY), at most [`MAX_HISTORY`](upcheck_config::MAX_HISTORY)), and each is
//! at most a few hundred bytes. Pools that share a `vm_id` share that window, each page showing
//! its own pool's changes in it. Bytes that do not decode, or hold more changes or longer text
//! than any writer writes, are ignored ([`crate::tables::decode_history`]).

use crate::active::Health;
use crate::json_string::quoted;
use crate::time::{civil_date, Time};
use serde::{Deserialize, Serialize};
use upcheck_config::MAX_NAME_LEN;

/// The longest cause a change keeps, in bytes (a longer one is cut at a character boundary);
/// the decoder refuses longer, so a table stays bounded.
pub const MAX_CAUSE_LEN: usize = 512;
/// The longest key a change has: a backend's name, cluster and address, or a pool's.
pub const MAX_KEY_LEN: usize = 3 * MAX_NAME_LEN + 64;

/// The process-wide history, oldest first.
pub type HistoryTable = Vec<Change>;

/// One change of a backend or of the pool guard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// When it happened, on the host's clock (since the Unix epoch).
    pub at: Time,
    /// The backend's name; `None` for the pool guard.
    pub backend: Option<String>,
    /// Whose change it is: the backend's key ([`upcheck_config::Upstream::key`]), or for the
    /// pool guard the pool's ([`crate::pool::Pool::history_key`]), so each pool sharing a `vm_id` shows its
    /// own.
    pub key: String,
    /// From what to what.
    pub kind: Kind,
    /// Why, as the log line says it (without the backend's name in front).
    pub cause: String,
}

/// What changed, from what to what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Its health by probes.
    Health {
        /// Before.
        from: Health,
        /// After.
        to: Health,
    },
    /// Passively ejected (a full failure window, an outlier, or an ejection the cap held back
    /// taking effect).
    Ejected,
    /// Its ejection ended.
    NoLongerEjected,
    /// It drains: no new requests.
    Draining,
    /// Its drain ended.
    NoLongerDraining,
    /// Nothing accepts its connections any more.
    Refusing,
    /// Something accepts its connections again.
    Accepting,
    /// Back in rotation with the backends whose probes fail alike (guard rule 3).
    BackAlike,
    /// The pool guard engaged (or changed its reason while engaged).
    GuardEngaged,
    /// The pool guard was released.
    GuardReleased,
}

impl Kind {
    /// The state before, in a word or two.
    pub fn from(self) -> &'static str {
        match self {
            Kind::Health { from, .. } => from.name(),
            Kind::Ejected => "not ejected",
            Kind::NoLongerEjected => "ejected",
            Kind::Draining => "serving",
            Kind::NoLongerDraining => "draining",
            Kind::Refusing => "accepting",
            Kind::Accepting => "refusing",
            Kind::BackAlike => "out",
            Kind::GuardEngaged => "off",
            Kind::GuardReleased => "engaged",
        }
    }

    /// The state after, in a word or two.
    pub fn to(self) -> &'static str {
        match self {
            Kind::Health { to, .. } => to.name(),
            Kind::Ejected => "ejected",
            Kind::NoLongerEjected => "not ejected",
            Kind::Draining => "draining",
            Kind::NoLongerDraining => "serving",
            Kind::Refusing => "refusing",
            Kind::Accepting => "accepting",
            Kind::BackAlike => "back in rotation",
            Kind::GuardEngaged => "engaged",
            Kind::GuardReleased => "off",
        }
    }

    /// Its `type` in the JSON log: Envoy's `HealthCheckEvent` names where it has one
    /// (`eject_unhealthy`, `add_healthy`), upcheck's own otherwise.
    pub fn event_type(self) -> &'static str {
        match self {
            Kind::Health {
                to: Health::Unhealthy,
                ..
            } => "eject_unhealthy",
            Kind::Health {
                to: Health::Healthy,
                ..
            } => "add_healthy",
            Kind::Health { .. } => "health_unknown",
            Kind::Ejected => "eject_passive",
            Kind::NoLongerEjected => "add_passive",
            Kind::Draining => "drain_start",
            Kind::NoLongerDraining => "drain_end",
            Kind::Refusing => "connection_refused",
            Kind::Accepting => "connection_accepted",
            Kind::BackAlike => "back_alike",
            Kind::GuardEngaged => "pool_guard_engaged",
            Kind::GuardReleased => "pool_guard_released",
        }
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

impl Change {
    /// A change at `at`, its cause cut to [`MAX_CAUSE_LEN`].
    pub fn new(
        at: Time,
        backend: Option<String>,
        key: String,
        kind: Kind,
        cause: String,
    ) -> Change {
        Change {
            at,
            backend,
            key,
            kind,
            cause: cut(cause, MAX_CAUSE_LEN),
        }
    }

    /// The change as one JSON object for a log shipper, shaped after Envoy's
    /// `HealthCheckEvent`: `{"type", "backend", "from", "to", "cause", "timestamp"}`, the
    /// backend `null` for the pool guard and the timestamp RFC 3339 in UTC.
    pub fn json(&self) -> String {
        let backend = self
            .backend
            .as_deref()
            .map_or_else(|| "null".to_owned(), quoted);
        format!(
            "{{\"type\":\"{}\",\"backend\":{backend},\"from\":\"{}\",\"to\":\"{}\",\"cause\":{},\"timestamp\":\"{}\"}}",
            self.kind.event_type(),
            self.kind.from(),
            self.kind.to(),
            quoted(&self.cause),
            timestamp(self.at)
        )
    }
}

/// `at` (since the Unix epoch) as an RFC 3339 UTC timestamp to the millisecond,
/// `2026-12-02T03:12:07.250Z`.
pub fn timestamp(at: Time) -> String {
    let secs = at.as_secs();
    let (year, month, day) = civil_date(secs / 86_400);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60,
        at.subsec_millis()
    )
}

/// Appends `changes` to `table` and keeps its newest `size` (the writer's `history`). Pools
/// sharing a `vm_id` share the window, each showing its own changes in it: so the history of a
/// backend no longer configured, or of a configuration gone, ages out like any other. A change
/// its backend's newest entry already says (the same transition, heard by two VMs: a worker's
/// request held at cold start, then the prober) is one change, kept once.
pub fn append(table: &mut HistoryTable, changes: &[Change], size: usize) {
    for change in changes {
        let newest = table.iter().rev().find(|c| c.key == change.key);
        if newest.is_some_and(|c| c.kind == change.kind) {
            continue;
        }
        table.push(change.clone());
    }
    let over = table.len().saturating_sub(size);
    table.drain(..over);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_timestamp_is_the_utc_date_and_time_to_the_millisecond() {
        let at = |secs: u64, ms: u64| Duration::from_secs(secs) + Duration::from_millis(ms);
        assert_eq!(timestamp(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(at(951_782_400, 1)), "2000-02-29T00:00:00.001Z");
        assert_eq!(
            timestamp(at(4_107_542_399, 999)),
            "2100-02-28T23:59:59.999Z"
        );
        assert_eq!(
            timestamp(at(1_796_181_127, 250)),
            "2026-12-02T03:12:07.250Z"
        );
    }

    #[test]
    fn the_same_transition_heard_by_two_vms_is_kept_once_and_the_next_one_again() {
        let change = |at: u64, to: Health| Change {
            at: Duration::from_millis(at),
            backend: Some("app2".into()),
            key: "app2".into(),
            kind: Kind::Health {
                from: Health::Unknown,
                to,
            },
            cause: "1 probe answered 502".into(),
        };
        let mut table = HistoryTable::new();
        append(&mut table, &[change(1, Health::Unhealthy)], 10);
        append(&mut table, &[change(20, Health::Unhealthy)], 10);
        assert_eq!(table, [change(1, Health::Unhealthy)]);
        append(&mut table, &[change(30, Health::Healthy)], 10);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_long_cause_is_cut_at_a_character_boundary() {
        assert_eq!(cut("ab€".to_owned(), 3), "ab");
        assert_eq!(cut("ab€".to_owned(), 5), "ab€");
        assert_eq!(cut("é".repeat(400), MAX_CAUSE_LEN).len(), MAX_CAUSE_LEN);
    }
}
