//! The status page names every backend and its health, so it is closed to other machines. It is
//! served on a listener of its own, bound to loopback: Linux never delivers a packet for
//! 127.0.0.0/8 or ::1 from another machine, and the users' listener never serves it (there the
//! page's path is a path like any other, sent to a backend). A status page listener bound
//! elsewhere by mistake still serves the page only on connections that arrived at a loopback
//! address, unless `status_public` is set, whatever `X-Forwarded-For` claims. (A client's own
//! address, the `source.address` property, cannot be trusted: with Envoy's default
//! `use_remote_address: false` it is the last `X-Forwarded-For` entry.) These scenarios reach
//! Envoy from a real non-loopback address of this machine (a test address on a veth pair, see
//! [`LocalAddress`]) and from 127.0.0.1, with a socket bound to each source.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::local_address::LocalAddress;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::raw_http::status_from;
use upcheck_e2e::upstream::FakeUpstream;

/// The status page's path (the default `status_path`).
const PAGE: &str = "/upcheck/status";

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The status of `GET PAGE` from `source` to `to` with `headers`, printed as a row of the
/// scenario.
async fn page_status(source: IpAddr, to: SocketAddr, headers: &[&str]) -> anyhow::Result<u16> {
    let status = status_from(source, to, PAGE, headers).await?;
    println!(
        "  from {source:<15} to {to:<21} {:<40} -> {status}",
        format!("{headers:?}")
    );
    Ok(status)
}

#[tokio::test]
async fn the_status_page_answers_on_its_loopback_listener_and_the_users_listener_never_serves_it(
) -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .upstream(&app1)
        .listen_on(address.ip())
        .wasm_filter(fast_checks(&["app1"]))
        .start()
        .await?;
    let status = envoy.status_addr()?;
    println!(
        "users' listener {}, status page listener {status}:",
        envoy.addr()
    );
    assert_eq!(page_status(LOOPBACK, status, &[]).await?, 200);
    assert_eq!(
        page_status(LOOPBACK, status, &["X-Forwarded-For: 1.2.3.4"]).await?,
        200,
        "a local client behind its own proxy still reads it"
    );
    assert_eq!(
        app1.counts().requests,
        0,
        "the page is the filter's own answer"
    );

    for headers in [&[][..], &["X-Forwarded-For: 127.0.0.1"]] {
        assert_eq!(
            page_status(address.ip(), envoy.addr(), headers).await?,
            200,
            "the backend's answer"
        );
    }
    assert_eq!(
        app1.counts().requests,
        2,
        "on the users' listener the page's path reached the backend, twice"
    );
    let elsewhere = SocketAddr::new(address.ip(), status.port());
    let refused = status_from(address.ip(), elsewhere, PAGE, &[])
        .await
        .map_err(|e| e.to_string());
    println!(
        "  from {:<15} to {elsewhere:<21} -> {refused:?}",
        address.ip()
    );
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("Connection refused")),
        "nothing listens for the page on the non-loopback address: {refused:?}"
    );
    Ok(())
}

/// A client can claim any address in `X-Forwarded-For`; the page goes by where the connection
/// arrived. All cases are printed before any is asserted.
#[tokio::test]
async fn a_status_page_listener_bound_off_loopback_refuses_every_client_whatever_x_forwarded_for_claims(
) -> anyhow::Result<()> {
    let address = LocalAddress::create()?;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .upstream(&app1)
        .status_on(address.ip())
        .wasm_filter(fast_checks(&["app1"]))
        .start()
        .await?;
    let status = envoy.status_addr()?;
    println!("status page listener bound to {status}:");
    let cases: [(IpAddr, &[&str]); 5] = [
        (address.ip(), &[]),
        (address.ip(), &["X-Forwarded-For: 127.0.0.1"]),
        (address.ip(), &["X-Forwarded-For: 1.2.3.4, 127.0.0.9"]),
        (address.ip(), &["X-Forwarded-For: ::1"]),
        (LOOPBACK, &[]),
    ];
    let mut wrong = Vec::new();
    for (source, headers) in cases {
        let answered = page_status(source, status, headers).await?;
        if answered != 403 {
            wrong.push(format!(
                "from {source} with {headers:?}: {answered}, expected 403"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(app1.counts().requests, 0);
    Ok(())
}
