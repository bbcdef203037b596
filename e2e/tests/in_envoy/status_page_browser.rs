//! The HTML status page as an operator sees it: Debian's chromium, headless, opens
//! `/upcheck/status.html` on the status page's own loopback listener of a real Envoy with upcheck
//! in front of the incident's fleet (app1 healthy, app2's sidecar answering 502 to everything,
//! its probe included). What the browser
//! built from the page (its DOM) must show app2 out with its reason and app1 in, and app2's change
//! in the history; a screenshot is left at `target/status-page.png` to look at.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use tokio::time::{sleep, Instant};
use upcheck_e2e::browser;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::upstream::FakeUpstream;

/// The HTML page's path (the default `status_path` and `.html`).
const PAGE: &str = "/upcheck/status.html";

/// Waits until the JSON page says app1 takes traffic and app2 does not (the first probe round).
async fn until_app2_is_out(envoy: &Envoy) -> Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = http
            .get(envoy.status_url("/upcheck/status.json")?)
            .send()
            .await?
            .text()
            .await?;
        let page: serde_json::Value =
            serde_json::from_str(&body).with_context(|| format!("status.json: {body}"))?;
        let routable = |i: usize| page["backends"][i]["routable"].as_bool();
        if routable(0) == Some(true) && routable(1) == Some(false) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "app2 still not out after 15 s: {body}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

/// The `<tr>` of the backend at `index`, as the browser serialized it.
fn row(dom: &str, index: usize) -> Result<&str> {
    let start = dom
        .find(&format!("<tr id=\"backend-{index}\""))
        .with_context(|| format!("no row for backend {index} in the DOM:\n{dom}"))?;
    let rest = dom.get(start..).unwrap_or_default();
    let end = rest.find("</tr>").context("an unclosed row")?;
    Ok(rest.get(..end).unwrap_or_default())
}

#[tokio::test]
async fn a_browser_shows_app2_out_with_its_reason_and_app1_in() -> Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Status(502)).await?;
    let envoy = Envoy::builder()
        .upstream(&app1)
        .upstream(&app2)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    until_app2_is_out(&envoy).await?;

    let url = envoy.status_url(PAGE)?;
    let response = reqwest::get(&url).await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(response.status(), 200);
    assert_eq!(
        header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header("cache-control").as_deref(), Some("no-store"));

    let png = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/status-page.png");
    browser::screenshot(&url, &png, 1200, 640).await?;
    println!("screenshot: {}", png.display());

    let dom = browser::dump_dom(&url).await?;
    let (app1_row, app2_row) = (row(&dom, 0)?, row(&dom, 1)?);
    println!("app1: {app1_row}\napp2: {app2_row}");
    assert!(app1_row.contains(">app1</td>"), "{app1_row}");
    assert!(
        app1_row.contains("<td class=\"traffic in\">in</td>"),
        "{app1_row}"
    );
    assert!(app1_row.contains("passing its probes"), "{app1_row}");
    assert!(app2_row.contains(">app2</td>"), "{app2_row}");
    assert!(
        app2_row.contains("<td class=\"traffic out\">out</td>"),
        "{app2_row}"
    );
    assert!(
        app2_row.contains("failing its probes:") && app2_row.contains("the last answered 502"),
        "{app2_row}"
    );
    assert!(
        dom.contains("pool guard: off"),
        "the guard is off while app1 serves:\n{dom}"
    );
    let history = dom
        .split_once("<table id=\"history\">")
        .map(|(_, table)| table)
        .with_context(|| format!("no history in the DOM:\n{dom}"))?;
    assert!(
        history
            .contains("<td class=\"name\">app2</td><td class=\"change\">unknown → unhealthy</td>")
            && history.contains("unhealthy: 1 probe answered 502"),
        "app2's change, with the log line's reason:\n{history}"
    );
    // The page is the filter's own answer: no page request reached a backend.
    assert_eq!(app1.counts().requests + app2.counts().requests, 0);
    Ok(())
}
