//! The status page names every backend and its health, so it is closed to clients other than
//! loopback unless `status_public` is set. It is served only on connections that arrived at a
//! loopback address: Linux never delivers a packet for 127.0.0.0/8 or ::1 from another machine,
//! so such a connection comes from this one, whatever `X-Forwarded-For` claims. (A client's own
//! address, the `source.address` property, cannot be trusted: with Envoy's default
//! `use_remote_address: false` it is the last `X-Forwarded-For` entry.) These scenarios reach
//! the page from a real non-loopback address of this machine (a test address on a veth pair, see
//! [`LocalAddress`]) and from 127.0.0.1, with a socket bound to each source.

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
async fn envoy_on(address: IpAddr, app1: &FakeUpstream) -> anyhow::Result<Envoy> {
    Envoy::builder()
        .upstream(app1)
        .listen_on(address)
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
async fn the_status_page_answers_on_loopback_and_nowhere_else() -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let local = envoy_on(LOOPBACK, &app1).await?;
    println!("status page on {}{PAGE}:", local.addr());
    assert_eq!(page_status(&local, LOOPBACK, &[]).await?, 200);
    assert_eq!(
        page_status(&local, LOOPBACK, &["X-Forwarded-For: 1.2.3.4"]).await?,
        200,
        "a local client behind its own proxy still reads it"
    );
    drop(local);
    let public = envoy_on(address.ip(), &app1).await?;
    println!("status page on {}{PAGE}:", public.addr());
    assert_eq!(page_status(&public, address.ip(), &[]).await?, 403);
    assert_eq!(
        page_status(&public, LOOPBACK, &[]).await?,
        403,
        "a connection to a public address is refused, even from this machine"
    );
    // The page is the filter's own answer: no request reached the backend.
    assert_eq!(app1.counts().requests, 0);
    Ok(())
}

/// A client can claim any address in `X-Forwarded-For`; the page goes by where the connection
/// arrived. All cases are printed before any is asserted.
#[tokio::test]
async fn the_status_page_refuses_a_non_loopback_client_whatever_x_forwarded_for_claims(
) -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = envoy_on(address.ip(), &app1).await?;
    println!("status page on {}{PAGE}:", envoy.addr());
    let cases: [&[&str]; 4] = [
        &[],
        &["X-Forwarded-For: 127.0.0.1"],
        &["X-Forwarded-For: 1.2.3.4, 127.0.0.9"],
        &["X-Forwarded-For: ::1"],
    ];
    let mut wrong = Vec::new();
    for headers in cases {
        let status = page_status(&envoy, address.ip(), headers).await?;
        if status != 403 {
            wrong.push(format!("with {headers:?}: {status}, expected 403"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}
