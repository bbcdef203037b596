//! The page as HTML, at `status_path` + `.html`: for a person at a browser, a table saying per
//! backend why it takes traffic or not ([`super::why`]), reloading itself and loading nothing else.

use super::model::{ago, changes, duty, failing_elsewhere, fleet_summary, lines, subject, Line};
use super::why::why;
use crate::etcd::shown::Shown;
use crate::history::timestamp;
use crate::pool::Pool;
use crate::time::Time;
use std::fmt::Write;
use upcheck_config::duration;

/// Seconds between reloads of the HTML page.
const HTML_REFRESH_SECS: u32 = 2;

/// The page's style: inline, since the page loads nothing else.
const HTML_STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.4em .7em;border-bottom:1px solid #ddd;vertical-align:top}\
th{background:#f3f3f3}\
td.in{color:#0a6b2d;font-weight:bold}td.out{color:#b00020;font-weight:bold}\
tr.out td{background:#fff4f4}\
.guard{margin-top:1em;padding:.5em .7em;border-left:4px solid #0a6b2d}\
.guard.engaged{border-color:#c77700;background:#fff8e6}\
.note{color:#666;font-size:12px}";

/// HTML for a browser: one table row per backend (`<tr id="backend-N">`, N its position) saying
/// whether it takes traffic and why, its probe status, its last probe and its failures in the
/// window; then the pool guard. It reloads itself every 2 s and loads nothing else (inline
/// style, no scripts, an empty icon so a browser does not ask the backends for `/favicon.ico`);
/// every name and reason is HTML-escaped. With a fleet, each row also says which balancer probes
/// the backend, and a line after the pool guard's says when the shared view was last read, or
/// that this balancer has fallen back to local.
pub fn html<H>(pool: &Pool<H>, fleet: Option<&Shown>, now: Time) -> String {
    let passive = &pool.config().health_checks.passive;
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{HTML_REFRESH_SECS}\">\
         <link rel=\"icon\" href=\"data:,\"><title>upcheck status</title><style>{HTML_STYLE}</style></head><body>\
         <h1>upcheck</h1><table><thead><tr><th>backend</th><th>traffic</th><th>why</th>\
         <th>probe status</th><th>last probe</th><th>failures in the last {}</th>\
         </tr></thead><tbody>\n",
        duration::display(passive.fail_duration)
    );
    for (i, line) in lines(pool, fleet, now).enumerate() {
        html_row(&mut out, i, &line, pool, now);
    }
    let guard = pool.guard();
    let _ = write!(
        out,
        "</tbody></table>\n<p id=\"pool-guard\" class=\"guard{}\">pool guard: {}</p>\n",
        engaged_class(guard.engaged()),
        escaped(&guard.to_string())
    );
    if let Some(f) = fleet {
        let class = engaged_class(f.local());
        let _ = write!(out, "<p id=\"fleet\" class=\"guard{class}\">");
        fleet_summary(&mut out, f, now);
        out.push_str("</p>\n");
    }
    html_history(&mut out, pool, now);
    let _ = write!(
        out,
        "<p class=\"note\">Probe status and the last probe are what the prober last shared; \
         upcheck keeps each backend's latest probe only. This page reloads every {HTML_REFRESH_SECS} s.</p>\n\
         </body></html>\n"
    );
    out
}

/// The class that marks a box as engaged (the pool guard, or a fleet fallen back to local), when
/// it is: appended to `guard`.
fn engaged_class(engaged: bool) -> &'static str {
    if engaged {
        " engaged"
    } else {
        ""
    }
}

/// The history as the HTML page's table (`<table id="history">`), newest first: how long ago
/// and when, backend, from → to, why.
fn html_history<H>(out: &mut String, pool: &Pool<H>, now: Time) {
    out.push_str(
        "<h2>History</h2>\n<table id=\"history\"><thead><tr><th>when</th><th>backend</th>\
         <th>change</th><th>why</th></tr></thead><tbody>\n",
    );
    if pool.history().is_empty() {
        out.push_str("<tr><td colspan=\"4\" class=\"note\">no changes yet</td></tr>\n");
    }
    for c in changes(pool) {
        let _ = writeln!(
            out,
            "<tr class=\"change\"><td class=\"when\">{} ago<br><span class=\"note\">{}</span></td>\
             <td class=\"name\">{}</td><td class=\"change\">{} &rarr; {}</td><td class=\"why\">{}</td></tr>",
            ago(now, c.at),
            timestamp(c.at),
            escaped(subject(c)),
            c.kind.from(),
            c.kind.to(),
            escaped(&c.cause)
        );
    }
    out.push_str("</tbody></table>\n");
}

/// One backend's row of the HTML page.
fn html_row<H>(out: &mut String, index: usize, line: &Line<'_>, pool: &Pool<H>, now: Time) {
    let traffic = line.traffic();
    let _ = write!(
        out,
        "<tr id=\"backend-{index}\" class=\"{traffic}\"><td class=\"name\">{}</td>\
         <td class=\"traffic {traffic}\">{traffic}</td><td class=\"why\">{}</td>\
         <td class=\"status\">{} for {}</td><td class=\"probe\">",
        escaped(line.name),
        escaped(&why(line, pool, now)),
        line.status,
        ago(now, line.status_since),
    );
    match line.last_probe {
        Some((at, outcome)) => {
            let _ = write!(
                out,
                "{} {} ago",
                escaped(&outcome.to_string()),
                ago(now, at)
            );
        }
        None => out.push_str("not probed yet"),
    }
    if let Some(holder) = &line.duty {
        out.push_str("<br><span class=\"duty\">");
        duty(out, holder);
        out.push_str("</span>");
    }
    if !line.failing_elsewhere.is_empty() {
        out.push_str("<br><span class=\"failing\">");
        failing_elsewhere(out, &line.failing_elsewhere);
        out.push_str("</span>");
    }
    if let Some(note) = line.note {
        let _ = write!(
            out,
            "<br><span class=\"change\">last change: {}</span>",
            escaped(note)
        );
    }
    let _ = writeln!(
        out,
        "</td><td class=\"failures\">{} of {}</td></tr>",
        line.failures,
        pool.config().health_checks.passive.max_fails
    );
}

/// `s` with the characters HTML gives a meaning to replaced by references, so a name or a
/// reason is shown as written, in an element or an attribute.
fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::active::MadeBy;
    use crate::outcome::{ProxyFailure, RequestOutcome};
    use crate::page::fixtures::{answer, pool, row};
    use crate::pool::{Retried, Routed};
    use std::time::Duration;
    use upcheck_config::Config;

    #[test]
    fn the_html_page_has_one_row_per_backend_saying_in_or_out() {
        let html = html(&pool(), None, Duration::from_secs(1));
        assert_eq!(html.matches("<tr id=\"backend-").count(), 2, "{html}");
        assert!(
            row(&html, 0).contains("<td class=\"name\">app1</td>"),
            "{html}"
        );
        assert!(
            row(&html, 0).contains("<td class=\"traffic in\">in</td>"),
            "{html}"
        );
        assert!(
            row(&html, 1).contains("<td class=\"name\">app-2</td>"),
            "{html}"
        );
        assert!(
            row(&html, 1).contains("<td class=\"traffic out\">out</td>"),
            "{html}"
        );
    }

    #[test]
    fn the_html_page_says_why_a_backend_failing_its_probes_is_out() {
        let html = html(&pool(), None, Duration::from_secs(1));
        let app2 = row(&html, 1);
        assert!(
            app2.contains("failing its probes: 1 in a row, the last answered 502"),
            "{app2}"
        );
        assert!(app2.contains("answered 502 980ms ago"), "{app2}");
        assert!(app2.contains("unhealthy for 980ms"), "{app2}");
        assert!(row(&html, 0).contains(">passing its probes<"), "{html}");
        assert!(html.contains("pool guard: off"), "{html}");
    }

    #[test]
    fn the_html_page_shows_an_ejection_with_its_end_and_reason() {
        let config = Config::parse(br#"{"upstreams":[{"name":"a"},{"name":"b"},{"name":"c"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut pool = Pool::new(config, Duration::ZERO, |_| ());
        let _ = pool.lease(crate::pool::LeaseHeld::Here { seed: 1 }, Duration::ZERO);
        for (token, index) in (1..).zip(0..3) {
            let _ = pool.probe_sent(index, token, Duration::ZERO);
            let _ =
                pool.probe_answered(token, answer(200, MadeBy::Backend), Duration::from_secs(1));
        }
        let mut table = Vec::new();
        for (id, at) in (1..).zip([2, 3, 4]) {
            let at = Duration::from_secs(at);
            let failed = RequestOutcome::Failed(ProxyFailure::Reset);
            for change in pool
                .request_ended(
                    id,
                    Routed {
                        index: 0,
                        generation: pool.generation(),
                        flight: None,
                        timed: None,
                    },
                    Retried::No,
                    failed,
                    || at,
                )
                .unwrap_or_default()
                .share
            {
                let checks = pool.config().health_checks.clone();
                let applied = change.apply(&mut table, &checks);
                let written = crate::pool::Written {
                    change: &change,
                    applied,
                };
                let _ = pool.passive_written(&table, Some(written), at);
            }
        }
        let html = html(&pool, None, Duration::from_secs(5));
        let a = row(&html, 0);
        assert!(a.contains("<td class=\"traffic out\">out</td>"), "{a}");
        assert!(
            a.contains("ejected until 00:00:12 UTC (in 7.0s): 3 failures within 10.0s"),
            "{a}"
        );
        assert!(a.contains("<td class=\"failures\">3 of 3</td>"), "{a}");
    }

    #[test]
    fn the_html_page_says_a_backend_refusing_connections_is_out() {
        let mut pool = pool();
        let _ = pool.probe_sent(1, 3, Duration::from_secs(1));
        let _ = pool.probe_answered(3, answer(503, MadeBy::Proxy), Duration::from_secs(2));
        let html = html(&pool, None, Duration::from_secs(2));
        let app2 = row(&html, 1);
        assert!(
            app2.contains("refusing connections while other backends accept them"),
            "{app2}"
        );
    }

    #[test]
    fn the_html_page_names_the_pool_guard_that_keeps_a_failing_backend_in() {
        let mut pool = pool();
        let _ = pool.probe_sent(0, 3, Duration::from_secs(1));
        let _ = pool.probe_answered(3, answer(500, MadeBy::Backend), Duration::from_secs(1));
        let html = html(&pool, None, Duration::from_secs(2));
        assert!(
            row(&html, 0).contains("kept in by the pool guard: every backend fails its probes"),
            "{html}"
        );
        assert!(
            html.contains("<p id=\"pool-guard\" class=\"guard engaged\">pool guard: every backend"),
            "{html}"
        );
    }

    #[test]
    fn the_html_page_escapes_backend_names() {
        let config = Config::parse(
            br#"{"upstreams":[{"name":"app&'1","authority":"app1"},{"name":"app2"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let html = html(
            &Pool::new(config, Duration::ZERO, |_| ()),
            None,
            Duration::ZERO,
        );
        assert!(
            html.contains("<td class=\"name\">app&amp;&#39;1</td>"),
            "{html}"
        );
        assert!(!html.contains("app&'1"), "{html}");
    }

    #[test]
    fn html_text_escapes_every_character_html_gives_a_meaning_to() {
        assert_eq!(
            escaped(r#"<b a="1" c='2'>&</b>"#),
            "&lt;b a=&quot;1&quot; c=&#39;2&#39;&gt;&amp;&lt;/b&gt;"
        );
    }

    #[test]
    fn the_html_page_reloads_itself_and_loads_nothing_else() {
        let html = html(&pool(), None, Duration::from_secs(1));
        assert!(
            html.contains("<meta http-equiv=\"refresh\" content=\"2\">"),
            "{html}"
        );
        assert!(html.contains("<style>"), "{html}");
        assert_eq!(
            html.matches("href=").count(),
            html.matches("<link rel=\"icon\" href=\"data:,\">").count(),
            "the only link is the empty icon: {html}"
        );
        for external in ["<script", "src=", "url(", "@import"] {
            assert!(!html.contains(external), "{external} in {html}");
        }
    }
}
