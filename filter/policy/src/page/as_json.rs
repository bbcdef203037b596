//! The page as JSON, at `status_path` + `.json`: for a machine, with every span in whole
//! milliseconds and every string quoted by the core's own writer (no serializer in the module).

use super::model::{balancer, changes, lines};
use crate::etcd::shown::{Holder, Shown};
use crate::history::timestamp;
use crate::json_string::quoted;
use crate::outcome::About;
use crate::pool::Pool;
use crate::time::{millis, Time};
use std::fmt::Write;

/// JSON: `{"backends": [{"name", "routable", "status", "ejected", "failures", "accepting",
/// "outlier", "overruled", "last_change", "draining", "warming", "last_probe",
/// "last_probe_ago_ms"}],
/// "pool_guard": bool, "pool_guard_reason": string}`; `outlier` is `null` or, while an outlier
/// ejection is in force, `{"verdict", "ends_in_ms"}`; `overruled` is `null` or why its probes do
/// not decide (they time out while its pages answer, or fail alike with its peers'); `last_change`
/// is `null` or the operator's last change to it, who asked and why (`upstreams[].note`); `draining` is
/// `null` or, while it drains, `{"by", "since_ms"}` (what said so; how long ago); `warming` is
/// `null` or, while it warms up, `{"percent", "ends_in_ms"}` (its share of its weight, and when it
/// gets the whole); `probe_duty` is `null` without a fleet, else `"here"`, `"nobody"` (while no
/// balancer holds it) or the holder's lease ID in hex; `failing_behind` lists the other balancers
/// of the fleet that see it failing (within `fail_duration`), each `{"balancer", "path"}` (its
/// lease ID in hex; whether what it sees may be its path to the backend rather than the backend).
/// `fleet` is `null` or `{"balancer",
/// "balancers", "local", "last_read_ago_ms", "watch"}` (this balancer's lease ID in hex, `"0"`
/// before it has one; how many balancers the last read counted; whether it has fallen back to
/// local; how long ago its view was last current, `null` if never; `watch` is `null` when it
/// reads the prefix on the clock, else `{"live", "revision", "events", "resyncs",
/// "last_event_ago_ms"}`: whether etcd's watch is in place, the revision held, the changes heard,
/// the fresh reads after the first, how long ago the last change came). `history` lists the pool's changes,
/// newest first, each `{"at" (RFC 3339, UTC), "ago_ms", "backend" (`null` for the pool guard),
/// "from", "to", "type" (as in the JSON log), "cause"}`.
pub fn json<H>(pool: &Pool<H>, fleet: Option<&Shown>, now: Time) -> String {
    let mut out = String::from("{\"backends\":[");
    for (i, l) in lines(pool, fleet, now).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"name\":{},\"routable\":{},\"status\":\"{}\",\"ejected\":{},\"failures\":{},\"accepting\":{}",
            quoted(l.name),
            l.routable,
            l.status,
            l.ejected,
            l.failures,
            l.accepting
        );
        match &l.outlier {
            Some((verdict, until)) => {
                let _ = write!(
                    out,
                    ",\"outlier\":{{\"verdict\":{},\"ends_in_ms\":{}}}",
                    quoted(verdict),
                    millis(until.saturating_sub(now))
                );
            }
            None => out.push_str(",\"outlier\":null"),
        }
        match l.overruled(now) {
            Some(note) => {
                let _ = write!(out, ",\"overruled\":{}", quoted(&note));
            }
            None => out.push_str(",\"overruled\":null"),
        }
        match l.note {
            Some(note) => {
                let _ = write!(out, ",\"last_change\":{}", quoted(note));
            }
            None => out.push_str(",\"last_change\":null"),
        }
        match l.drain {
            Some(drain) => {
                let _ = write!(
                    out,
                    ",\"draining\":{{\"by\":{},\"since_ms\":{}}}",
                    quoted(&drain.by.to_string()),
                    millis(now.saturating_sub(drain.since))
                );
            }
            None => out.push_str(",\"draining\":null"),
        }
        match l.warming {
            Some(w) => {
                let _ = write!(
                    out,
                    ",\"warming\":{{\"percent\":{},\"ends_in_ms\":{}}}",
                    w.percent(),
                    millis(w.until.saturating_sub(now))
                );
            }
            None => out.push_str(",\"warming\":null"),
        }
        out.push_str(",\"probe_duty\":");
        match &l.duty {
            None => out.push_str("null"),
            Some(Holder::Here) => out.push_str("\"here\""),
            Some(Holder::Other(lease)) => {
                let _ = write!(out, "\"{lease:x}\"");
            }
            Some(Holder::Nobody) => out.push_str("\"nobody\""),
        }
        out.push_str(",\"failing_behind\":[");
        for (n, (lease, about)) in l.failing_elsewhere.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let path = *about == About::Path;
            let _ = write!(out, "{{\"balancer\":\"{lease:x}\",\"path\":{path}}}");
        }
        out.push(']');
        match l.last_probe {
            Some((at, outcome)) => {
                let _ = write!(
                    out,
                    ",\"last_probe\":{},\"last_probe_ago_ms\":{}}}",
                    quoted(&outcome.to_string()),
                    millis(now.saturating_sub(at))
                );
            }
            None => out.push_str(",\"last_probe\":null,\"last_probe_ago_ms\":null}"),
        }
    }
    let guard = pool.guard();
    let _ = write!(
        out,
        "],\"pool_guard\":{},\"pool_guard_reason\":{}",
        guard.engaged(),
        quoted(&guard.to_string())
    );
    match fleet {
        Some(f) => {
            let _ = write!(
                out,
                ",\"fleet\":{{\"balancer\":\"{:x}\",\"balancers\":{},\"local\":{},\"last_read_ago_ms\":",
                balancer(f),
                f.balancers(),
                f.local()
            );
            match f.read() {
                Some(at) => {
                    let _ = write!(out, "{}", millis(now.saturating_sub(at)));
                }
                None => out.push_str("null"),
            }
            match f.watching() {
                Some(w) => {
                    let _ = write!(
                        out,
                        ",\"watch\":{{\"live\":{},\"revision\":{},\"events\":{},\"resyncs\":{},\"last_event_ago_ms\":",
                        w.live, w.revision, w.events, w.resyncs
                    );
                    match w.last_event {
                        Some(at) => {
                            let _ = write!(out, "{}}}}}", millis(now.saturating_sub(at)));
                        }
                        None => out.push_str("null}}"),
                    }
                }
                None => out.push_str(",\"watch\":null}"),
            }
        }
        None => out.push_str(",\"fleet\":null"),
    }
    json_history(&mut out, pool, now);
    out.push('}');
    out
}

/// The history as the JSON form's `history` member (its shape: [`json`]).
fn json_history<H>(out: &mut String, pool: &Pool<H>, now: Time) {
    out.push_str(",\"history\":[");
    for (i, c) in changes(pool).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"at\":\"{}\",\"ago_ms\":{},\"backend\":{},\"from\":\"{}\",\"to\":\"{}\",\"type\":\"{}\",\"cause\":{}}}",
            timestamp(c.at),
            millis(now.saturating_sub(c.at)),
            c.backend.as_deref().map_or_else(|| "null".to_owned(), quoted),
            c.kind.from(),
            c.kind.to(),
            c.kind.event_type(),
            quoted(&c.cause)
        );
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::fixtures::pool;
    use std::time::Duration;

    #[test]
    fn the_json_status_is_valid_json_with_every_backend() {
        let json = json(&pool(), None, Duration::from_secs(1));
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(v["backends"][0]["name"], "app1");
        assert_eq!(v["backends"][0]["routable"], true);
        assert_eq!(v["backends"][1]["name"], "app-2");
        assert_eq!(v["backends"][1]["status"], "unhealthy");
        assert_eq!(v["backends"][1]["last_probe"], "answered 502");
        assert_eq!(v["backends"][1]["last_probe_ago_ms"], 980);
        assert_eq!(v["pool_guard"], false);
    }
}
