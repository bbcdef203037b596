//! The status page: every backend's health as the policy sees it, for a person (text) and for a
//! machine (JSON), rendered from a [`Pool`] with no I/O.

use crate::active::{Health, ProbeOutcome};
use crate::config::Config;
use crate::duration;
use crate::pool::Pool;
use crate::Time;
use std::fmt::Write;

/// Whether a request that arrived at `local_address` (the connection's local `ip:port`, Envoy's
/// `destination.address`) may read the page. Unless `status_public` is set, only a connection
/// made to a loopback address may: Linux never delivers a packet for 127.0.0.0/8 or ::1 from
/// another machine, so such a connection comes from this one. The client's own address is no
/// help: Envoy takes it from `X-Forwarded-For` unless `use_remote_address` is set, so a client
/// can claim to be 127.0.0.1.
pub fn open_to(local_address: Option<&str>, config: &Config) -> bool {
    config.status_public
        || local_address
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .is_some_and(|a| a.ip().is_loopback())
}

/// One backend's line, shared by both renderings.
struct Line<'a> {
    name: &'a str,
    routable: bool,
    status: Health,
    ejected: bool,
    failures: u32,
    last_probe: Option<(Time, ProbeOutcome)>,
    accepting: bool,
    /// The outlier ejection in force: why, and when it ends.
    outlier: Option<(String, Time)>,
}

fn lines<H>(pool: &Pool<H>, now: Time) -> impl Iterator<Item = Line<'_>> {
    let passive = &pool.config().health_checks.passive;
    pool.members().iter().map(move |m| Line {
        name: m.name(),
        routable: m.routable,
        status: m.evidence.active.status,
        ejected: m.ejected,
        failures: m.evidence.passive.count(now, passive),
        last_probe: m.evidence.active.last,
        accepting: m.evidence.accepting(),
        outlier: m
            .evidence
            .passive
            .outlier
            .in_force(now)
            .map(|(verdict, until)| (verdict.to_string(), until)),
    })
}

fn ago(now: Time, at: Time) -> String {
    duration::display(now.saturating_sub(at))
}

/// Plain text: one line per backend, then the fleet guard.
pub fn text<H>(pool: &Pool<H>, now: Time) -> String {
    let mut out = String::from("upcheck\n");
    for l in lines(pool, now) {
        let _ = write!(
            out,
            "{:<24} {:<9} {:<9} failures={} {}",
            l.name,
            if l.routable { "in" } else { "out" },
            l.status,
            l.failures,
            if l.ejected { "ejected " } else { "" },
        );
        if let Some((verdict, until)) = &l.outlier {
            let _ = write!(out, "(outlier for {} more: {verdict}) ", ago(*until, now));
        }
        match l.last_probe {
            Some((at, outcome)) => {
                let _ = writeln!(out, "last probe {outcome} {} ago", ago(now, at));
            }
            None => out.push_str("not probed yet\n"),
        }
    }
    let guard = pool.guard();
    let _ = writeln!(out, "fleet guard: {guard}");
    out
}

/// JSON: `{"backends": [{"name", "routable", "status", "ejected", "failures", "accepting",
/// "outlier", "last_probe", "last_probe_ago_ms"}], "fleet_guard": bool, "fleet_guard_reason":
/// string}`; `outlier` is `null` or, while an outlier ejection is in force, `{"verdict",
/// "ends_in_ms"}`.
pub fn json<H>(pool: &Pool<H>, now: Time) -> String {
    let mut out = String::from("{\"backends\":[");
    for (i, l) in lines(pool, now).enumerate() {
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
                let ms = until.saturating_sub(now).as_millis();
                let _ = write!(
                    out,
                    ",\"outlier\":{{\"verdict\":{},\"ends_in_ms\":{}}}",
                    quoted(verdict),
                    u64::try_from(ms).unwrap_or(u64::MAX)
                );
            }
            None => out.push_str(",\"outlier\":null"),
        }
        match l.last_probe {
            Some((at, outcome)) => {
                let ms = now.saturating_sub(at).as_millis();
                let _ = write!(
                    out,
                    ",\"last_probe\":{},\"last_probe_ago_ms\":{}}}",
                    quoted(&outcome.to_string()),
                    u64::try_from(ms).unwrap_or(u64::MAX)
                );
            }
            None => out.push_str(",\"last_probe\":null,\"last_probe_ago_ms\":null}"),
        }
    }
    let guard = pool.guard();
    let _ = write!(
        out,
        "],\"fleet_guard\":{},\"fleet_guard_reason\":{}}}",
        guard.engaged(),
        quoted(&guard.to_string())
    );
    out
}

/// A JSON string literal.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    fn pool() -> Pool {
        let config = Config::parse(br#"{"upstreams":[{"name":"app1"},{"name":"app-2"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut pool = Pool::new(config, Duration::ZERO, |_| ());
        pool.lease(true, Duration::ZERO, 1);
        pool.probe_sent(0, 1, Duration::ZERO);
        pool.probe_sent(1, 2, Duration::ZERO);
        pool.probe_answered(1, Some(200), false, b"", Duration::from_millis(10));
        pool.probe_answered(2, Some(502), false, b"", Duration::from_millis(20));
        pool
    }

    #[test]
    fn the_json_status_is_valid_json_with_every_backend() {
        let json = json(&pool(), Duration::from_secs(1));
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(v["backends"][0]["name"], "app1");
        assert_eq!(v["backends"][0]["routable"], true);
        assert_eq!(v["backends"][1]["name"], "app-2");
        assert_eq!(v["backends"][1]["status"], "unhealthy");
        assert_eq!(v["backends"][1]["last_probe"], "answered 502");
        assert_eq!(v["backends"][1]["last_probe_ago_ms"], 980);
        assert_eq!(v["fleet_guard"], false);
    }

    #[test]
    fn only_a_connection_to_a_loopback_address_reads_the_page_unless_it_is_public() {
        let config = pool().config().clone();
        assert!(open_to(Some("127.0.0.1:8080"), &config));
        assert!(open_to(Some("127.0.0.9:8080"), &config));
        assert!(open_to(Some("[::1]:8080"), &config));
        assert!(!open_to(Some("10.0.0.1:8080"), &config));
        assert!(
            !open_to(Some("127.0.0.1"), &config),
            "no port: not Envoy's form"
        );
        assert!(!open_to(None, &config), "a host that does not say");
        let public = Config {
            status_public: true,
            ..config
        };
        assert!(open_to(Some("10.0.0.1:8080"), &public));
    }

    #[test]
    fn json_strings_escape_quotes_and_control_characters() {
        assert_eq!(quoted("a\"b\\c\nd"), r#""a\"b\\c\u000ad""#);
    }

    #[test]
    fn the_text_status_reads_one_line_per_backend() {
        let text = text(&pool(), Duration::from_secs(1));
        assert!(text.contains("app1                     in        healthy   failures=0 last probe passed 990ms ago"), "{text}");
        assert!(
            text.contains("out       unhealthy failures=0 last probe answered 502 980ms ago"),
            "{text}"
        );
        assert!(text.ends_with("fleet guard: off\n"), "{text}");
    }
}
