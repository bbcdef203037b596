//! The status page names every backend and its health, so it is closed to clients other than
//! loopback unless `status_public` is set. These scenarios reach it from a real non-loopback
//! address of this machine (a test address on a veth pair, see [`LocalAddress`]) and from
//! 127.0.0.1, on one Envoy listening on the test address only, with a socket bound to each source
//! so Envoy sees that peer.

use std::net::{IpAddr, Ipv4Addr};

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::local_address::LocalAddress;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::raw_http::status_from;
use upcheck_e2e::upstream::FakeUpstream;

/// The status page's path (the default `status_path`).
const PAGE: &str = "/upcheck/status";

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// An Envoy with upcheck in front of one healthy backend, listening on `address` only.
async fn envoy_on(address: &LocalAddress, app1: &FakeUpstream) -> anyhow::Result<Envoy> {
    Envoy::builder()
        .upstream(app1)
        .listen_on(address.ip())
        .wasm_filter(fast_checks(&["app1"]))
        .start()
        .await
}

/// The status of `GET PAGE` from `source` with `headers`, printed as a row of the scenario.
async fn page_status(envoy: &Envoy, source: IpAddr, headers: &[&str]) -> anyhow::Result<u16> {
    let status = status_from(source, envoy.addr(), PAGE, headers).await?;
    println!(
        "  from {source:<15} {:<40} -> {status}",
        format!("{headers:?}")
    );
    Ok(status)
}

#[tokio::test]
async fn the_status_page_answers_a_loopback_client_and_refuses_a_non_loopback_one(
) -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = envoy_on(&address, &app1).await?;
    println!("status page on {}{PAGE}:", envoy.addr());

    assert_eq!(page_status(&envoy, LOOPBACK, &[]).await?, 200);
    assert_eq!(page_status(&envoy, address.ip(), &[]).await?, 403);
    // The page is the filter's own answer: no request reached the backend.
    assert_eq!(app1.counts().requests, 0);
    Ok(())
}
