//! A client can never choose a cluster. Envoy routes on `x-upcheck-upstream`, so a client that
//! sends it itself could reach any cluster Envoy knows, including one that is not in upcheck's
//! pool at all. upcheck removes every copy, whatever its case, before setting its own pick.
//!
//! The requests are written by hand on a plain TCP connection: an HTTP client library would
//! normalise the header's case and might merge the two copies, which are the point here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::upstream::FakeUpstream;

/// The status of one `GET /` to `addr` with `headers` (whole lines, no CRLF) added as written.
async fn status_of(addr: SocketAddr, headers: &[&str]) -> anyhow::Result<u16> {
    let mut request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = timeout(Duration::from_secs(2), exchange).await??;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    status.ok_or_else(|| anyhow::anyhow!("not an HTTP response: {text:?}"))
}

#[tokio::test]
async fn a_client_naming_a_cluster_in_the_routing_header_never_reaches_it() -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let teapot = FakeUpstream::start("teapot", Mode::Status(418)).await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .upstream(&teapot)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    let attempts: [&[&str]; 3] = [
        &["x-upcheck-upstream: teapot"],
        &["X-Upcheck-Upstream: teapot"],
        &["x-upcheck-upstream: teapot", "X-UPCHECK-UPSTREAM: teapot"],
    ];

    // From the start (requests held at cold start included), 20 rounds of every form.
    let mut statuses = Vec::new();
    for _ in 0..20 {
        for headers in attempts {
            statuses.push(status_of(envoy.addr(), headers).await?);
        }
    }
    let mut tally = BTreeMap::new();
    for status in &statuses {
        *tally.entry(status).or_insert(0) += 1;
    }
    println!(
        "routing header from the client, 3 forms x 20: statuses {tally:?}, teapot {:?}",
        teapot.counts()
    );

    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(teapot.counts().requests, 0);
    assert_eq!(app1.counts().requests + app2.counts().requests, 60);
    assert_eq!(
        app1.counts().with_routing_header + app2.counts().with_routing_header,
        0
    );
    Ok(())
}
