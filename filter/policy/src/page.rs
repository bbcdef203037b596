//! The status page: every backend's health as the policy sees it, for a person (text, or HTML in
//! a browser) and for a machine (JSON), rendered from a [`Pool`] with no I/O; and what a status
//! page filter (`"role": "status_page"`) answers each request with ([`answer`]).
//!
//! Every form ends with the history of the pool's changes, newest first ([`crate::history`]):
//! unlike probes, every change is shared, so every worker's page shows the same history.
//!
//! The HTML page says, per backend, why it takes traffic or not. It shows the last probe only:
//! any worker may answer the page, but only the one holding the probing lease sees probes go out
//! and come back, and what the workers share is each backend's latest probe, so a probe history
//! (or a probe's latency) would be on the page only when the prober happened to answer it.
//!
//! Each form has its own path: `<status_path>` (text), `.json`, `.html` (for a browser). Paths,
//! not content negotiation on `Accept`: `curl` and scripts keep the text page whatever they send,
//! a link to the HTML page opens the same thing in every browser, and nothing in between has to
//! honour a `Vary` header.

use crate::active::{Health, ProbeOutcome};
use crate::drain::Drain;
use crate::etcd::shown::{Holder, Shown};
use crate::guard::Guard;
use crate::history::timestamp;
use crate::json_string::quoted;
use crate::pool::{Member, Pool};
use crate::time::Time;
use crate::warm_up::Warming;
use std::fmt::Write;
use upcheck_config::duration;
use upcheck_config::StatusPage;

/// Whether a request that arrived at `local_address` (the connection's local `ip:port`, Envoy's
/// `destination.address`) may read the page. Unless `status_public` is set, only a connection
/// made to a loopback address may: Linux never delivers a packet for 127.0.0.0/8 or ::1 from
/// another machine, so such a connection comes from this one. The client's own address is no
/// help: Envoy takes it from `X-Forwarded-For` unless `use_remote_address` is set, so a client
/// can claim to be 127.0.0.1. (The shipped listener is bound to 127.0.0.1, so this holds by
/// construction there; the rule keeps the page closed on a listener bound elsewhere.)
pub fn open_to(local_address: Option<&str>, page: &StatusPage) -> bool {
    page.public
        || local_address
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .is_some_and(|a| a.ip().is_loopback())
}

/// One rendering of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Plain text, at `status_path`.
    Text,
    /// JSON, at `status_path` + `.json`.
    Json,
    /// HTML for a browser, at `status_path` + `.html`.
    Html,
}

impl Form {
    /// The `content-type` it is sent with.
    pub fn content_type(self) -> &'static str {
        match self {
            Form::Text => "text/plain; charset=utf-8",
            Form::Json => "application/json",
            Form::Html => "text/html; charset=utf-8",
        }
    }

    /// The page in this form, with what the prober shows of the fleet, if the pool has one.
    pub fn render<H>(self, pool: &Pool<H>, fleet: Option<&Shown>, now: Time) -> String {
        match self {
            Form::Text => text(pool, fleet, now),
            Form::Json => json(pool, fleet, now),
            Form::Html => html(pool, fleet, now),
        }
    }
}

/// What a status page filter answers a request with: it answers every request itself, so
/// nothing that reaches its listener is ever routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200 with the page in this form.
    Page(Form),
    /// 403: the connection was not made to a loopback address ([`open_to`]).
    Forbidden,
    /// 404: not one of the page's paths.
    NotFound,
}

impl Answer {
    /// The status code it is sent with.
    pub fn status(self) -> u32 {
        match self {
            Answer::Page(_) => 200,
            Answer::Forbidden => 403,
            Answer::NotFound => 404,
        }
    }

    /// The plain-text body of a refusal (`None` for the page, which is rendered).
    pub fn refusal(self, page: &StatusPage) -> Option<String> {
        match self {
            Answer::Page(_) => None,
            Answer::Forbidden => {
                Some("upcheck: the status page is open to loopback clients only\n".to_owned())
            }
            Answer::NotFound => Some(format!(
                "upcheck: this listener serves only the status page: {0}, {0}.json, {0}.html\n",
                page.path
            )),
        }
    }
}

/// What to answer a request for `path` (`:path`, query and fragment included) that arrived at
/// `local_address` (see [`open_to`]). The address is judged first, so a client the page is closed
/// to learns nothing, not even its paths.
pub fn answer(page: &StatusPage, path: &str, local_address: Option<&str>) -> Answer {
    if !open_to(local_address, page) {
        return Answer::Forbidden;
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    match path.strip_prefix(page.path.as_str()) {
        Some("") => Answer::Page(Form::Text),
        Some(".json") => Answer::Page(Form::Json),
        Some(".html") => Answer::Page(Form::Html),
        _ => Answer::NotFound,
    }
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
    /// Since when its probes time out while its pages answer (they count neither way).
    contradicted: Option<Time>,
    /// Back in rotation with the backends whose probes fail alike.
    back: bool,
    /// While it drains: since when, and what said so.
    drain: Option<Drain>,
    /// Its warm-up under way, if it is warming up.
    warming: Option<Warming>,
    /// Where its probe duty is, with a fleet.
    duty: Option<Holder>,
}

fn lines<'a, H>(
    pool: &'a Pool<H>,
    fleet: Option<&'a Shown>,
    now: Time,
) -> impl Iterator<Item = Line<'a>> {
    let passive = &pool.config().health_checks.passive;
    pool.members().iter().enumerate().map(move |(i, m)| Line {
        name: m.name(),
        routable: m.routable,
        status: m.evidence.active.status,
        ejected: m.ejected(),
        failures: m.evidence.passive.count(now, passive),
        last_probe: m.evidence.active.last,
        accepting: m.evidence.accepting(),
        outlier: m
            .evidence
            .passive
            .outlier
            .in_force(now)
            .map(|(verdict, until)| (verdict.to_string(), until)),
        contradicted: m.evidence.active.contradicted,
        back: m.back,
        drain: m.draining(),
        warming: pool.warming_up(i, now),
        duty: fleet.and_then(|f| f.holder(&m.key)),
    })
}

/// Which balancer probes a backend, in a few words, onto `out`.
fn duty(out: &mut String, holder: &Holder) {
    match holder {
        Holder::Here => out.push_str("probed here"),
        Holder::Other(lease) => {
            let _ = write!(out, "probed by balancer {lease:x}");
        }
        Holder::Nobody => out.push_str("probed by no balancer yet"),
    }
}

/// The fleet in a sentence, onto `out`: this balancer's name (its lease ID, 0 before it has
/// one), whether it has fallen back to local, and when it last read the shared view (if ever).
/// Nothing in it needs escaping in HTML.
fn fleet_summary(out: &mut String, fleet: &Shown, now: Time) {
    let local = if fleet.local() {
        ", fallen back to local (etcd unreachable): every backend is probed here"
    } else {
        ""
    };
    let _ = write!(
        out,
        "fleet: balancer {:x} of {}{local}",
        fleet.me().unwrap_or(0),
        fleet.balancers()
    );
    if let Some(at) = fleet.read() {
        out.push_str("; shared view read ");
        out.push_str(&ago(now, at));
        out.push_str(" ago");
    }
}

/// What overrides a backend's probes, if anything, in a few words.
fn overruled(line: &Line<'_>, now: Time) -> Option<String> {
    if line.back {
        return Some(
            "back in rotation: every backend fails its probes, and its own failed alike while its pages answered"
                .to_owned(),
        );
    }
    line.contradicted.map(|since| {
        format!(
            "its probes time out while its pages answer (for {}): they count neither way",
            ago(now, since)
        )
    })
}

fn ago(now: Time, at: Time) -> String {
    duration::display(now.saturating_sub(at))
}

/// Plain text: one line per backend, then the fleet guard.
pub fn text<H>(pool: &Pool<H>, fleet: Option<&Shown>, now: Time) -> String {
    let mut out = String::from("upcheck\n");
    for l in lines(pool, fleet, now) {
        let _ = write!(
            out,
            "{:<24} {:<9} {:<9} failures={} {}",
            l.name,
            if l.routable { "in" } else { "out" },
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
        if let Some(note) = overruled(&l, now) {
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
    let _ = writeln!(out, "fleet guard: {guard}");
    text_history(&mut out, pool, now);
    out
}

/// JSON: `{"backends": [{"name", "routable", "status", "ejected", "failures", "accepting",
/// "outlier", "overruled", "draining", "warming", "last_probe", "last_probe_ago_ms"}],
/// "fleet_guard": bool, "fleet_guard_reason": string}`; `outlier` is `null` or, while an outlier
/// ejection is in force, `{"verdict", "ends_in_ms"}`; `overruled` is `null` or why its probes do
/// not decide (they time out while its pages answer, or fail alike with its peers'); `draining` is
/// `null` or, while it drains, `{"by", "since_ms"}` (what said so; how long ago); `warming` is
/// `null` or, while it warms up, `{"percent", "ends_in_ms"}` (its share of its weight, and when it
/// gets the whole); `probe_duty` is `null` without a fleet, else `"here"`, `"nobody"` (while no
/// balancer holds it) or the holder's lease ID in hex. `fleet` is `null` or `{"balancer",
/// "balancers", "local", "last_read_ago_ms"}` (this balancer's lease ID in hex, `"0"` before it
/// has one; how many balancers the last read counted; whether it has fallen back to local; how
/// long ago it last read the shared view, `null` if never). `history` lists the pool's changes newest first ([`json_history`]).
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
        match overruled(&l, now) {
            Some(note) => {
                let _ = write!(out, ",\"overruled\":{}", quoted(&note));
            }
            None => out.push_str(",\"overruled\":null"),
        }
        match l.drain {
            Some(drain) => {
                let ms = now.saturating_sub(drain.since).as_millis();
                let _ = write!(
                    out,
                    ",\"draining\":{{\"by\":{},\"since_ms\":{}}}",
                    quoted(&drain.by.to_string()),
                    u64::try_from(ms).unwrap_or(u64::MAX)
                );
            }
            None => out.push_str(",\"draining\":null"),
        }
        match l.warming {
            Some(w) => {
                let ms = w.until.saturating_sub(now).as_millis();
                let _ = write!(
                    out,
                    ",\"warming\":{{\"percent\":{},\"ends_in_ms\":{}}}",
                    w.percent(),
                    u64::try_from(ms).unwrap_or(u64::MAX)
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
        "],\"fleet_guard\":{},\"fleet_guard_reason\":{}",
        guard.engaged(),
        quoted(&guard.to_string())
    );
    match fleet {
        Some(f) => {
            let _ = write!(
                out,
                ",\"fleet\":{{\"balancer\":\"{:x}\",\"balancers\":{},\"local\":{},\"last_read_ago_ms\":",
                f.me().unwrap_or(0),
                f.balancers(),
                f.local()
            );
            match f.read() {
                Some(at) => {
                    let ms = now.saturating_sub(at).as_millis();
                    let _ = write!(out, "{}}}", u64::try_from(ms).unwrap_or(u64::MAX));
                }
                None => out.push_str("null}"),
            }
        }
        None => out.push_str(",\"fleet\":null"),
    }
    json_history(&mut out, pool, now);
    out.push('}');
    out
}

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
/// window; then the fleet guard. It reloads itself every 2 s and loads nothing else (inline
/// style, no scripts, an empty icon so a browser does not ask the backends for `/favicon.ico`);
/// every name and reason is HTML-escaped. With a fleet, each row also says which balancer probes
/// the backend, and a line after the fleet guard's says when the shared view was last read, or
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
    for (i, (line, member)) in lines(pool, fleet, now).zip(pool.members()).enumerate() {
        html_row(&mut out, i, &line, member, pool, now);
    }
    let guard = pool.guard();
    let _ = write!(
        out,
        "</tbody></table>\n<p id=\"fleet-guard\" class=\"guard{}\">fleet guard: {}</p>\n",
        if guard.engaged() { " engaged" } else { "" },
        escaped(&guard.to_string())
    );
    if let Some(f) = fleet {
        let engaged = if f.local() { " engaged" } else { "" };
        let _ = write!(out, "<p id=\"fleet\" class=\"guard{engaged}\">");
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

/// The history in the text form, newest first, after the fleet guard: one line per change
/// (when, how long ago, backend, from -> to, why); nothing while there is none.
fn text_history<H>(out: &mut String, pool: &Pool<H>, now: Time) {
    if pool.history().is_empty() {
        return;
    }
    out.push_str("history, newest first:\n");
    for c in pool.history().iter().rev() {
        let _ = writeln!(
            out,
            "  {} ({} ago) {} {} → {}: {}",
            timestamp(c.at),
            ago(now, c.at),
            c.backend.as_deref().unwrap_or("fleet guard"),
            c.kind.from(),
            c.kind.to(),
            c.cause
        );
    }
}

/// The history as the JSON form's `history` member: newest first, each change `{"at"
/// (RFC 3339, UTC), "ago_ms", "backend" (`null` for the fleet guard), "from", "to", "type" (as
/// in the JSON log), "cause"}`.
fn json_history<H>(out: &mut String, pool: &Pool<H>, now: Time) {
    out.push_str(",\"history\":[");
    for (i, c) in pool.history().iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let ms = now.saturating_sub(c.at).as_millis();
        let _ = write!(
            out,
            "{{\"at\":\"{}\",\"ago_ms\":{},\"backend\":{},\"from\":\"{}\",\"to\":\"{}\",\"type\":\"{}\",\"cause\":{}}}",
            timestamp(c.at),
            u64::try_from(ms).unwrap_or(u64::MAX),
            c.backend.as_deref().map_or_else(|| "null".to_owned(), quoted),
            c.kind.from(),
            c.kind.to(),
            c.kind.event_type(),
            quoted(&c.cause)
        );
    }
    out.push(']');
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
    for c in pool.history().iter().rev() {
        let _ = writeln!(
            out,
            "<tr class=\"change\"><td class=\"when\">{} ago<br><span class=\"note\">{}</span></td>\
             <td class=\"name\">{}</td><td class=\"change\">{} &rarr; {}</td><td class=\"why\">{}</td></tr>",
            ago(now, c.at),
            timestamp(c.at),
            escaped(c.backend.as_deref().unwrap_or("fleet guard")),
            c.kind.from(),
            c.kind.to(),
            escaped(&c.cause)
        );
    }
    out.push_str("</tbody></table>\n");
}

/// One backend's row of the HTML page.
fn html_row<H>(
    out: &mut String,
    index: usize,
    line: &Line<'_>,
    member: &Member<H>,
    pool: &Pool<H>,
    now: Time,
) {
    let traffic = if line.routable { "in" } else { "out" };
    let _ = write!(
        out,
        "<tr id=\"backend-{index}\" class=\"{traffic}\"><td class=\"name\">{}</td>\
         <td class=\"traffic {traffic}\">{traffic}</td><td class=\"why\">{}</td>\
         <td class=\"status\">{} for {}</td><td class=\"probe\">",
        escaped(line.name),
        escaped(&standing(line, member, pool, now)),
        line.status,
        ago(now, member.evidence.active.since),
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
    let _ = writeln!(
        out,
        "</td><td class=\"failures\">{} of {}</td></tr>",
        line.failures,
        pool.config().health_checks.passive.max_fails
    );
}

/// Why a backend takes traffic or not, in the order the fleet rules decide it.
fn standing<H>(line: &Line<'_>, member: &Member<H>, pool: &Pool<H>, now: Time) -> String {
    let config = pool.config();
    let passive = &config.health_checks.passive;
    let guard = pool.guard();
    if let (true, Some((verdict, until))) = (line.ejected, &line.outlier) {
        return format!(
            "ejected as the odd one out until {} (in {}): {verdict}",
            time_of_day(*until),
            ago(*until, now)
        );
    }
    if let Some(drain) = line.drain {
        let kept = if line.routable {
            ", kept in: every backend drains"
        } else {
            ", no new requests"
        };
        return format!(
            "draining since {} (for {}){kept}: {}",
            time_of_day(drain.since),
            ago(now, drain.since),
            drain.by
        );
    }
    if line.ejected {
        let until = member
            .evidence
            .passive
            .next_expiry(now, passive)
            .unwrap_or(now);
        return format!(
            "ejected until {} (in {}): {} failures within {}",
            time_of_day(until),
            ago(until, now),
            line.failures,
            duration::display(passive.fail_duration)
        );
    }
    if !line.routable {
        return if !line.accepting {
            "refusing connections while other backends accept them".to_owned()
        } else {
            match line.status {
                Health::Unhealthy => {
                    let streak = member.evidence.active.streak;
                    let passes = config.health_checks.active.passes;
                    match line.last_probe {
                        Some((_, outcome)) if streak < 0 => format!(
                            "failing its probes: {} in a row, the last {outcome}",
                            streak.unsigned_abs()
                        ),
                        _ if streak > 0 => format!(
                            "failing its probes, recovering: {streak} of {passes} passes in a row"
                        ),
                        _ => "failing its probes".to_owned(),
                    }
                }
                Health::Unknown => {
                    "no verdict from its probes yet, and others are healthy".to_owned()
                }
                Health::Healthy => format!("left out by the fleet guard: {guard}"),
            }
        };
    }
    if let Some(note) = overruled(line, now) {
        return note;
    }
    match (line.status, guard) {
        (Health::Healthy, _) if member.evidence.passive.full(now, passive) => format!(
            "passing its probes; its failures would eject it, but max_ejection_percent ({}%) keeps it",
            config.max_ejection_percent
        ),
        (Health::Healthy, _) => match line.warming {
            Some(w) => format!(
                "passing its probes; warming up: {} % of its weight, the whole from {} (in {})",
                w.percent(),
                time_of_day(w.until),
                ago(w.until, now)
            ),
            None => "passing its probes".to_owned(),
        },
        (Health::Unknown, Guard::Off) => {
            "no verdict from its probes yet, and no backend is known healthy".to_owned()
        }
        (_, guard) => format!("kept in by the fleet guard: {guard}"),
    }
}

/// The UTC time of day of `at` (a time since the Unix epoch, as the host's clock gives it).
fn time_of_day(at: Time) -> String {
    let secs = at.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
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
    use crate::active::{MadeBy, ProbeAnswer};
    use crate::outcome::{ProxyFailure, RequestOutcome};
    use crate::pool::{Retried, Routed};
    use std::time::Duration;
    use upcheck_config::Config;

    /// app1 passes its first probe and app-2 fails it (answering 502), under `config`.
    fn pool_of(config: &[u8]) -> Pool {
        let config = Config::parse(config).unwrap_or_else(|e| panic!("{e}"));
        let mut pool = Pool::new(config, Duration::ZERO, |_| ());
        pool.lease(true, Duration::ZERO, 1);
        pool.probe_sent(0, 1, Duration::ZERO);
        pool.probe_sent(1, 2, Duration::ZERO);
        pool.probe_answered(
            1,
            ProbeAnswer {
                status: 200,
                made_by: MadeBy::Backend,
                signalled: false,
                body: b"",
            },
            Duration::from_millis(10),
        );
        pool.probe_answered(
            2,
            ProbeAnswer {
                status: 502,
                made_by: MadeBy::Backend,
                signalled: false,
                body: b"",
            },
            Duration::from_millis(20),
        );
        pool
    }

    fn pool() -> Pool {
        pool_of(br#"{"upstreams":[{"name":"app1"},{"name":"app-2"}]}"#)
    }

    /// app-2 fails its first probe and passes at 30 s, warming up over 100 s.
    fn warming_pool() -> Pool {
        let mut pool = pool_of(
            br#"{"upstreams":[{"name":"app1"},{"name":"app-2"}],"health_checks":{"slow_start":"100s"}}"#,
        );
        pool.probe_sent(1, 3, Duration::from_secs(30));
        pool.probe_answered(
            3,
            ProbeAnswer {
                status: 200,
                made_by: MadeBy::Backend,
                signalled: false,
                body: b"",
            },
            Duration::from_secs(30),
        );
        pool
    }

    #[test]
    fn every_form_shows_a_warming_backends_share_of_its_weight_and_when_it_ends() {
        let now = Duration::from_secs(55);
        let pool = warming_pool();
        let text = text(&pool, None, now);
        assert!(
            text.contains("failures=0 warming 25 % for 1m15s more last probe passed"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, None, now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["backends"][0]["warming"], serde_json::Value::Null);
        assert_eq!(v["backends"][1]["warming"]["percent"], 25);
        assert_eq!(v["backends"][1]["warming"]["ends_in_ms"], 75_000);
        let html = html(&pool, None, now);
        assert!(
            row(&html, 1).contains(
                "passing its probes; warming up: 25 % of its weight, the whole from 00:02:10 UTC (in 1m15s)"
            ),
            "{html}"
        );
        assert!(!super::text(&pool, None, Duration::from_secs(130)).contains("warming"));
    }

    /// app1's duty held here (lease 2a), app-2's by balancer ff, read at 700 ms.
    fn fleet(pool: &Pool, local: bool) -> Shown {
        let duties = pool.members().iter().map(|m| m.key.clone());
        let duties = duties.zip([Some(0x2a), Some(0xff)]);
        Shown::new(
            Some(0x2a),
            local,
            Some(Duration::from_millis(700)),
            3,
            duties,
        )
    }

    #[test]
    fn every_form_shows_which_balancer_probes_each_backend_and_when_the_view_was_read() {
        let (pool, now) = (pool(), Duration::from_secs(1));
        let shown = fleet(&pool, false);
        let text = text(&pool, Some(&shown), now);
        assert!(
            text.contains("failures=0 probed here last probe passed"),
            "{text}"
        );
        assert!(
            text.contains("probed by balancer ff last probe answered 502"),
            "{text}"
        );
        assert!(
            text.contains("fleet: balancer 2a of 3; shared view read 300ms ago\nfleet guard"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, Some(&shown), now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["backends"][0]["probe_duty"], "here");
        assert_eq!(v["backends"][1]["probe_duty"], "ff");
        assert_eq!(
            v["fleet"],
            serde_json::json!({"balancer": "2a", "balancers": 3, "local": false, "last_read_ago_ms": 300})
        );
        let html = html(&pool, Some(&shown), now);
        assert!(
            row(&html, 1).contains("<span class=\"duty\">probed by balancer ff</span>"),
            "{html}"
        );
        assert!(
            html.contains("<p id=\"fleet\" class=\"guard\">fleet: balancer 2a of 3"),
            "{html}"
        );
    }

    #[test]
    fn every_form_says_a_balancer_fallen_back_to_local_probes_everything_itself() {
        let (pool, now) = (pool(), Duration::from_secs(9));
        let shown = fleet(&pool, true);
        let text = text(&pool, Some(&shown), now);
        assert!(
            text.contains("probed here last probe answered 502"),
            "{text}"
        );
        assert!(
            text.contains("fleet: balancer 2a of 3, fallen back to local (etcd unreachable): every backend is probed here; shared view read 8.3s ago"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, Some(&shown), now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["fleet"]["local"], true);
        assert_eq!(v["backends"][1]["probe_duty"], "here");
        let html = html(&pool, Some(&shown), now);
        assert!(
            html.contains(
                "<p id=\"fleet\" class=\"guard engaged\">fleet: balancer 2a of 3, fallen back to local"
            ),
            "{html}"
        );
        let alone = json(&pool, None, now);
        assert!(
            alone.contains("\"fleet\":null") && !super::text(&pool, None, now).contains("fleet:"),
            "{alone}"
        );
    }

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
        assert_eq!(v["fleet_guard"], false);
    }

    #[test]
    fn only_a_connection_to_a_loopback_address_reads_the_page_unless_it_is_public() {
        let page = StatusPage::default();
        assert!(open_to(Some("127.0.0.1:8080"), &page));
        assert!(open_to(Some("127.0.0.9:8080"), &page));
        assert!(open_to(Some("[::1]:8080"), &page));
        assert!(!open_to(Some("10.0.0.1:8080"), &page));
        assert!(
            !open_to(Some("127.0.0.1"), &page),
            "no port: not Envoy's form"
        );
        assert!(!open_to(None, &page), "a host that does not say");
        let public = StatusPage {
            public: true,
            ..page
        };
        assert!(open_to(Some("10.0.0.1:8080"), &public));
    }

    #[test]
    fn each_form_has_its_own_path_and_a_query_does_not_change_it() {
        let page = StatusPage::default();
        let local = Some("127.0.0.1:9902");
        for (path, form) in [
            ("/upcheck/status", Form::Text),
            ("/upcheck/status?x=1", Form::Text),
            ("/upcheck/status.json", Form::Json),
            ("/upcheck/status.json#top", Form::Json),
            ("/upcheck/status.html", Form::Html),
        ] {
            assert_eq!(answer(&page, path, local), Answer::Page(form), "{path}");
        }
        let moved = StatusPage {
            path: "/lb".into(),
            ..page
        };
        assert_eq!(answer(&moved, "/lb.json", local), Answer::Page(Form::Json));
        assert_eq!(answer(&moved, "/upcheck/status", local), Answer::NotFound);
    }

    #[test]
    fn any_other_path_is_not_found_and_never_routed() {
        let page = StatusPage::default();
        let local = Some("127.0.0.1:9902");
        for path in [
            "/",
            "/up",
            "/upcheck/status/",
            "/upcheck/statuses",
            "/upcheck/status.xml",
            "",
        ] {
            let answer = answer(&page, path, local);
            assert_eq!(answer, Answer::NotFound, "{path}");
            assert_eq!(answer.status(), 404);
            let body = answer.refusal(&page).unwrap_or_default();
            assert!(body.contains("/upcheck/status.json"), "{body}");
        }
    }

    #[test]
    fn a_connection_the_page_is_closed_to_is_refused_before_its_path_is_looked_at() {
        let page = StatusPage::default();
        for path in ["/upcheck/status", "/anything"] {
            let answer = answer(&page, path, Some("10.0.0.1:9902"));
            assert_eq!(answer, Answer::Forbidden, "{path}");
            assert_eq!(answer.status(), 403);
            let body = answer.refusal(&page).unwrap_or_default();
            assert!(!body.contains("/upcheck/status"), "{body}");
        }
    }

    #[test]
    fn each_form_is_sent_as_its_own_content_type() {
        assert_eq!(Form::Text.content_type(), "text/plain; charset=utf-8");
        assert_eq!(Form::Json.content_type(), "application/json");
        assert_eq!(Form::Html.content_type(), "text/html; charset=utf-8");
        let now = Duration::from_secs(1);
        assert_eq!(
            Form::Json.render(&pool(), None, now),
            json(&pool(), None, now)
        );
    }

    #[test]
    fn the_text_status_reads_one_line_per_backend() {
        let text = text(&pool(), None, Duration::from_secs(1));
        assert!(text.contains("app1                     in        healthy   failures=0 last probe passed 990ms ago"), "{text}");
        assert!(
            text.contains("out       unhealthy failures=0 last probe answered 502 980ms ago"),
            "{text}"
        );
        assert!(text.ends_with("fleet guard: off\n"), "{text}");
    }
    /// The row of the backend at `index` in an HTML page.
    fn row(html: &str, index: usize) -> &str {
        let start = html
            .find(&format!("<tr id=\"backend-{index}\""))
            .unwrap_or_else(|| panic!("no row {index}: {html}"));
        let rest = html.get(start..).unwrap_or_default();
        rest.get(..rest.find("</tr>").unwrap_or(rest.len()))
            .unwrap_or_default()
    }

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
        assert!(html.contains("fleet guard: off"), "{html}");
    }

    #[test]
    fn the_html_page_shows_an_ejection_with_its_end_and_reason() {
        let config = Config::parse(br#"{"upstreams":[{"name":"a"},{"name":"b"},{"name":"c"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut pool = Pool::new(config, Duration::ZERO, |_| ());
        pool.lease(true, Duration::ZERO, 1);
        for (token, index) in (1..).zip(0..3) {
            pool.probe_sent(index, token, Duration::ZERO);
            pool.probe_answered(
                token,
                ProbeAnswer {
                    status: 200,
                    made_by: MadeBy::Backend,
                    signalled: false,
                    body: b"",
                },
                Duration::from_secs(1),
            );
        }
        let mut table = Vec::new();
        for (id, at) in (1..).zip([2, 3, 4]) {
            let at = Duration::from_secs(at);
            let failed = RequestOutcome::Failed(ProxyFailure::Reset);
            for change in pool
                .request_settled(
                    id,
                    Routed {
                        index: 0,
                        generation: pool.generation(),
                    },
                    Retried::No,
                    failed,
                    || at,
                )
                .share
            {
                let checks = pool.config().health_checks.clone();
                let applied = change.apply(&mut table, &checks);
                pool.passive_written(&table, Some((&change, applied)), at);
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
        pool.probe_sent(1, 3, Duration::from_secs(1));
        pool.probe_answered(
            3,
            ProbeAnswer {
                status: 503,
                made_by: MadeBy::Proxy,
                signalled: false,
                body: b"",
            },
            Duration::from_secs(2),
        );
        let html = html(&pool, None, Duration::from_secs(2));
        let app2 = row(&html, 1);
        assert!(
            app2.contains("refusing connections while other backends accept them"),
            "{app2}"
        );
    }

    #[test]
    fn the_html_page_names_the_fleet_guard_that_keeps_a_failing_backend_in() {
        let mut pool = pool();
        pool.probe_sent(0, 3, Duration::from_secs(1));
        pool.probe_answered(
            3,
            ProbeAnswer {
                status: 500,
                made_by: MadeBy::Backend,
                signalled: false,
                body: b"",
            },
            Duration::from_secs(1),
        );
        let html = html(&pool, None, Duration::from_secs(2));
        assert!(
            row(&html, 0).contains("kept in by the fleet guard: every backend fails its probes"),
            "{html}"
        );
        assert!(
            html.contains(
                "<p id=\"fleet-guard\" class=\"guard engaged\">fleet guard: every backend"
            ),
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
