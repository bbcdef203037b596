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
//!
//! Each form is a module of its own (`as_text`, `as_json`, `as_html`), rendered from one model
//! (`model`: a line per backend, and the words the forms share); why a backend takes traffic or
//! not, as the HTML page words it, is `why`'s.
//!
//! The same listener serves the module's metrics in Prometheus' text format at
//! [`METRICS_PATH`] (`as_prometheus`), for a host that has no metrics endpoint of its own.

mod as_html;
mod as_json;
mod as_prometheus;
mod as_text;
#[cfg(test)]
mod fixtures;
mod model;
mod why;

pub use as_html::html;
pub use as_json::json;
pub use as_prometheus::{prometheus, Stat, CONTENT_TYPE as METRICS_CONTENT_TYPE, METRICS_PATH};
pub use as_text::text;

use crate::etcd::shown::Shown;
use crate::pool::Pool;
use crate::time::Time;
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
    /// 200 with the module's metrics in Prometheus' text format ([`prometheus`]).
    Metrics,
    /// 403: the connection was not made to a loopback address ([`open_to`]).
    Forbidden,
    /// 404: not one of the page's paths.
    NotFound,
}

impl Answer {
    /// The status code it is sent with.
    pub fn status(self) -> u32 {
        match self {
            Answer::Page(_) | Answer::Metrics => 200,
            Answer::Forbidden => 403,
            Answer::NotFound => 404,
        }
    }

    /// The plain-text body of a refusal (`None` for the page, which is rendered).
    pub fn refusal(self, page: &StatusPage) -> Option<String> {
        match self {
            Answer::Page(_) | Answer::Metrics => None,
            Answer::Forbidden => {
                Some("upcheck: the status page is open to loopback clients only\n".to_owned())
            }
            Answer::NotFound => Some(format!(
                "upcheck: this listener serves only the status page: {0}, {0}.json, {0}.html; and \
                 the metrics: {METRICS_PATH}\n",
                page.path
            )),
        }
    }
}

/// What to answer a request for `path` (`:path`, query and fragment included) that arrived at
/// `local_address` (see [`open_to`]). The address is judged first, so a client the page is closed
/// to learns nothing, not even its paths. The page's own paths come before [`METRICS_PATH`], so a
/// page moved there stays the page.
pub fn answer(page: &StatusPage, path: &str, local_address: Option<&str>) -> Answer {
    if !open_to(local_address, page) {
        return Answer::Forbidden;
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    match path.strip_prefix(page.path.as_str()) {
        Some("") => Answer::Page(Form::Text),
        Some(".json") => Answer::Page(Form::Json),
        Some(".html") => Answer::Page(Form::Html),
        _ if path == METRICS_PATH => Answer::Metrics,
        _ => Answer::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{fleet, fleet_watching, pool, row, warming_pool};
    use super::*;
    use crate::etcd::shown::Watching;
    use std::time::Duration;

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
            text.contains("fleet: balancer 2a of 3; shared view read 300ms ago\npool guard"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, Some(&shown), now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["backends"][0]["probe_duty"], "here");
        assert_eq!(v["backends"][1]["probe_duty"], "ff");
        assert_eq!(
            v["fleet"],
            serde_json::json!({"balancer": "2a", "balancers": 3, "local": false, "last_read_ago_ms": 300, "watch": null})
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
    fn every_form_shows_the_watch_a_balancer_follows_etcd_with() {
        let (pool, now) = (pool(), Duration::from_secs(1));
        let live = Watching {
            live: true,
            revision: 42,
            events: 7,
            resyncs: 1,
            last_event: Some(Duration::from_millis(900)),
        };
        let shown = fleet_watching(&pool, false, Some(live));
        let text = text(&pool, Some(&shown), now);
        assert!(
            text.contains("; following etcd at revision 42, 7 changes heard, the last 100ms ago, 1 fresh reads\n"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, Some(&shown), now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v["fleet"]["watch"],
            serde_json::json!({"live": true, "revision": 42, "events": 7, "resyncs": 1, "last_event_ago_ms": 100})
        );
        let html = html(&pool, Some(&shown), now);
        assert!(html.contains("following etcd at revision 42"), "{html}");
        let waiting = Watching {
            live: false,
            last_event: None,
            ..live
        };
        let shown = fleet_watching(&pool, false, Some(waiting));
        assert!(super::text(&pool, Some(&shown), now)
            .contains("etcd's watch not in place: the prefix is read until it is"));
        let v: serde_json::Value =
            serde_json::from_str(&json(&pool, Some(&shown), now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["fleet"]["watch"]["live"], false);
        assert_eq!(
            v["fleet"]["watch"]["last_event_ago_ms"],
            serde_json::Value::Null
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
    fn the_metrics_have_their_own_path_beside_the_page_wherever_the_page_is() {
        let page = StatusPage::default();
        let local = Some("127.0.0.1:9902");
        for path in ["/upcheck/metrics", "/upcheck/metrics?name[]=x"] {
            assert_eq!(answer(&page, path, local), Answer::Metrics, "{path}");
        }
        assert_eq!(Answer::Metrics.status(), 200);
        assert_eq!(Answer::Metrics.refusal(&page), None);
        let moved = StatusPage {
            path: "/lb".into(),
            ..page.clone()
        };
        assert_eq!(answer(&moved, "/upcheck/metrics", local), Answer::Metrics);
        assert_eq!(answer(&page, "/upcheck/metrics/", local), Answer::NotFound);
        assert_eq!(
            answer(&page, "/upcheck/metrics", Some("10.0.0.1:9902")),
            Answer::Forbidden
        );
        let not_found = Answer::NotFound.refusal(&page).unwrap_or_default();
        assert!(not_found.contains("/upcheck/metrics"), "{not_found}");
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
}
