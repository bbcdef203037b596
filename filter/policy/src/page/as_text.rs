//! The page as plain text, at `status_path`: one line per backend, for `curl` and for scripts that
//! grep it.

use super::model::{ago, changes, duty, failing_elsewhere, fleet_summary, lines, subject};
use crate::etcd::shown::Shown;
use crate::history::timestamp;
use crate::pool::Pool;
use crate::time::Time;
use std::fmt::Write;

/// Plain text: one line per backend, then the pool guard.
pub fn text<H>(pool: &Pool<H>, fleet: Option<&Shown>, now: Time) -> String {
    let mut out = String::from("upcheck\n");
    for l in lines(pool, fleet, now) {
        let _ = write!(
            out,
            "{:<24} {:<9} {:<9} failures={} {}",
            l.name,
            l.traffic(),
            l.status,
            l.failures,
            if l.ejected { "ejected " } else { "" },
        );
        if let Some(drain) = l.drain {
            let _ = write!(
                out,
                "draining (for {}: {}) ",
                ago(now, drain.since),
                drain.by
            );
        }
        if let Some((verdict, until)) = &l.outlier {
            let _ = write!(out, "(outlier for {} more: {verdict}) ", ago(*until, now));
        }
        if let Some(note) = l.overruled(now) {
            let _ = write!(out, "({note}) ");
        }
        if let Some(w) = l.warming {
            let _ = write!(
                out,
                "warming {} % for {} more ",
                w.percent(),
                ago(w.until, now)
            );
        }
        if let Some(holder) = &l.duty {
            duty(&mut out, holder);
            out.push(' ');
        }
        if !l.failing_elsewhere.is_empty() {
            failing_elsewhere(&mut out, &l.failing_elsewhere);
            out.push(' ');
        }
        if let Some(note) = l.note {
            let _ = write!(out, "(last change: {note}) ");
        }
        match l.last_probe {
            Some((at, outcome)) => {
                let _ = writeln!(out, "last probe {outcome} {} ago", ago(now, at));
            }
            None => out.push_str("not probed yet\n"),
        }
    }
    if let Some(fleet) = fleet {
        fleet_summary(&mut out, fleet, now);
        out.push('\n');
    }
    let guard = pool.guard();
    let _ = writeln!(out, "pool guard: {guard}");
    text_history(&mut out, pool, now);
    out
}

/// The history, newest first, after the pool guard: one line per change (when, how long ago,
/// backend, from -> to, why); nothing while there is none.
fn text_history<H>(out: &mut String, pool: &Pool<H>, now: Time) {
    if pool.history().is_empty() {
        return;
    }
    out.push_str("history, newest first:\n");
    for c in changes(pool) {
        let _ = writeln!(
            out,
            "  {} ({} ago) {} {} → {}: {}",
            timestamp(c.at),
            ago(now, c.at),
            subject(c),
            c.kind.from(),
            c.kind.to(),
            c.cause
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::fixtures::{noted_pool, pool};
    use std::time::Duration;

    #[test]
    fn the_text_status_reads_one_line_per_backend() {
        let text = text(&pool(), None, Duration::from_secs(1));
        assert!(text.contains("app1                     in        healthy   failures=0 last probe passed 990ms ago"), "{text}");
        assert!(
            text.contains("out       unhealthy failures=0 last probe answered 502 980ms ago"),
            "{text}"
        );
        assert!(text.ends_with("pool guard: off\n"), "{text}");
    }

    #[test]
    fn every_form_shows_who_made_a_backends_last_change_and_why() {
        let now = Duration::from_secs(1);
        let said = "drain by alice@ops-1 at 2026-12-06 22:30:01 UTC";
        let text = text(&noted_pool(), None, now);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_default()
        };
        let app2 = line("app-2 ");
        assert!(
            app2.contains(&format!(
                "(last change: {said}: <b>sale</b> & more) last probe"
            )),
            "{text}"
        );
        assert!(!line("app1 ").is_empty() && !line("app1 ").contains("last change"));
        let html = crate::page::html(&noted_pool(), None, now);
        assert!(
            html.contains(&format!(
                "<span class=\"change\">last change: {said}: &lt;b&gt;sale&lt;/b&gt; &amp; more</span>"
            )),
            "{html}"
        );
        let json = crate::page::json(&noted_pool(), None, now);
        assert!(
            json.contains(&format!("\"last_change\":\"{said}: <b>sale</b> & more\"")),
            "{json}"
        );
        assert!(
            json.contains("\"last_change\":null"),
            "app1 has none: {json}"
        );
    }
}
