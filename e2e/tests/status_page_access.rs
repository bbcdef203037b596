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

/// A client can claim any address in `X-Forwarded-For`; the page must go by the connection's
/// real peer. With Envoy's default `use_remote_address: false`, the `source.address` property is
/// the last `X-Forwarded-For` entry when the header is there (measured on Envoy 1.40:
/// `127.0.0.1:0`, `127.0.0.9:0`, `[::1]:0` for the three claims below), so a filter reading it
/// takes the claim for the peer. All cases are printed before any is asserted.
#[tokio::test]
async fn the_status_page_refuses_a_non_loopback_client_whatever_x_forwarded_for_claims(
) -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = envoy_on(&address, &app1).await?;
    println!("status page on {}{PAGE}:", envoy.addr());
    let cases: [(IpAddr, &[&str], u16); 5] = [
        (address.ip(), &[], 403),
        (address.ip(), &["X-Forwarded-For: 127.0.0.1"], 403),
        (address.ip(), &["X-Forwarded-For: 1.2.3.4, 127.0.0.9"], 403),
        (address.ip(), &["X-Forwarded-For: ::1"], 403),
        (LOOPBACK, &[], 200),
    ];
    let mut wrong = Vec::new();
    for (source, headers, expected) in cases {
        let status = page_status(&envoy, source, headers).await?;
        if status != expected {
            wrong.push(format!(
                "from {source} with {headers:?}: {status}, expected {expected}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}
