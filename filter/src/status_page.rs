//! The status page, answered by the filter itself: every backend's health as this VM routes
//! by it. Closed to connections that did not arrive at a loopback address unless
//! `status_public` is set, since it names the backends (the rule: [`page::open_to`]).
//!
//! Each form has its own path: `<status_path>` (text), `.json`, `.html` (for a browser). Paths,
//! not content negotiation on `Accept`: `curl` and scripts keep the text page whatever they send,
//! a link to the HTML page opens the same thing in every browser, and nothing in between has to
//! honour a `Vary` header.

use crate::vm::{self, Vm};
use proxy_wasm::hostcalls;
use proxy_wasm::types::MapType;
use upcheck_policy::page;

/// Answers the request if it is for the status page; true if it did.
pub fn answer(v: &mut Vm) -> bool {
    let Some(pool) = v.pool.as_ref() else {
        return false;
    };
    let Some(page_path) = pool.config().status_path.as_deref() else {
        return false;
    };
    let Ok(Some(path)) = hostcalls::get_map_value(MapType::HttpRequestHeaders, ":path") else {
        return false;
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let form = match path.strip_prefix(page_path) {
        Some("") => Form::Text,
        Some(".json") => Form::Json,
        Some(".html") => Form::Html,
        _ => return false,
    };
    let now = vm::now();
    let local = hostcalls::get_property(vec!["destination", "address"])
        .ok()
        .flatten()
        .and_then(|a| String::from_utf8(a).ok());
    if !page::open_to(local.as_deref(), pool.config()) {
        respond(
            403,
            "text/plain",
            "upcheck: the status page is open to loopback clients only\n",
        );
    } else {
        match form {
            Form::Text => respond(200, "text/plain; charset=utf-8", &page::text(pool, now)),
            Form::Json => respond(200, "application/json", &page::json(pool, now)),
            Form::Html => respond(200, "text/html; charset=utf-8", &page::html(pool, now)),
        }
    }
    true
}

/// Which rendering of the page a path asks for.
enum Form {
    Text,
    Json,
    Html,
}

fn respond(status: u32, content_type: &str, body: &str) {
    let headers = vec![
        ("content-type", content_type),
        ("cache-control", "no-store"),
    ];
    if let Err(status) = hostcalls::send_http_response(status, headers, Some(body.as_bytes())) {
        log::warn!("upcheck: the status page could not be sent ({status:?})");
    }
}
