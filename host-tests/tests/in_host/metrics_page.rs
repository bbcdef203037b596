//! The module's metrics page (`/upcheck/metrics`) in NGINX's profile, where ngx_wasm_module shows
//! the module's metrics to nobody: a real Prometheus 2.42 (`UPCHECK_PROMETHEUS`, `make
//! prometheus`) scrapes it, through a small HTTP server on loopback that hands each scrape to the
//! status page's server of the host (the host has no sockets of its own), and finds every series
//! Envoy's stats give, each with the value the host keeps for the module's metric.

use crate::support::{ok, secs};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use upcheck_e2e::prometheus::{Job, Prometheus, SCRAPE_INTERVAL};
use upcheck_host_tests::{Behaviour, Host, HostOptions, Profile, RequestSpec, UPCHECK_WASM};

/// How long the test waits for Prometheus to have scraped what it looks for.
const PATIENCE: Duration = Duration::from_secs(30);

/// The incident in NGINX's profile: app1 passing its probes, app2 answering 502, the status
/// page's server (opened as `upcheck nginx` opens it) at 127.0.0.1:9902.
fn incident() -> Host {
    let options = HostOptions {
        profile: Profile::Nginx,
        ..HostOptions::default()
    };
    let mut host = Host::from_file(UPCHECK_WASM, options)
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} (run `make build`): {e}"));
    host.upstream("app1");
    host.upstream("app2").path("/up", Behaviour::status(502));
    let upstreams: Vec<String> = ["app1", "app2"]
        .iter()
        .map(|name| {
            let address = host.address(name).unwrap_or_default();
            format!(r#"{{"name":"{name}","cluster":"{address}"}}"#)
        })
        .collect();
    let config = |extra: &str| {
        format!(
            r#"{{"proxy":"nginx","upstreams":[{}]{extra}}}"#,
            upstreams.join(",")
        )
    };
    ok(host.listen(
        "127.0.0.1:9902",
        &config(r#","role":"status_page","status_public":true"#),
    ));
    ok(host.start(&config("")));
    ok(host.advance(secs(2)));
    host
}

/// Answers every connection waiting on `listener` with what the host's status page server
/// answers its request's path; how many it answered.
fn serve(listener: &TcpListener, host: &mut Host) -> usize {
    let mut served = 0;
    while let Ok((stream, _)) = listener.accept() {
        answer(stream, host);
        served += 1;
    }
    served
}

/// One HTTP/1.1 exchange: the request line's path to the host, its answer back, and close.
fn answer(mut stream: TcpStream, host: &mut Host) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request);
    let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let record = ok(host.request(RequestSpec {
        path,
        source_address: "127.0.0.1:40000".to_string(),
        destination_address: "127.0.0.1:9902".to_string(),
        ..RequestSpec::default()
    }));
    let status = record.status().unwrap_or(502);
    let head = format!(
        "HTTP/1.1 {status} -\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        record.body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&record.body);
}

/// The name the module gave the host for a series Prometheus has: `upcheck.<backend>.<metric>`,
/// `upcheck.<backend>.state_<state>`, or `upcheck.<metric>` for the pool's.
fn stat(labels: &serde_json::Map<String, serde_json::Value>) -> String {
    let label = |name: &str| labels.get(name).and_then(|v| v.as_str());
    let name = label("__name__").unwrap_or_default();
    let metric = name.strip_prefix("upcheck_").unwrap_or(name);
    match (label("backend"), label("state")) {
        (Some(backend), Some(state)) => format!("upcheck.{backend}.state_{state}"),
        (Some(backend), None) => format!("upcheck.{backend}.{metric}"),
        _ => format!("upcheck.{metric}"),
    }
}

#[tokio::test]
async fn prometheus_scraping_nginxs_metrics_page_finds_every_series_with_the_hosts_values() {
    let mut host = incident();
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    listener.set_nonblocking(true).expect("non-blocking");
    let target = listener.local_addr().expect("its address");
    let prometheus = Prometheus::scraping_jobs(&[Job::module("nginx", target)], &[])
        .await
        .unwrap_or_else(|e| panic!("prometheus: {e}"));

    // Virtual time runs while Prometheus scrapes: the probes find app2 failing.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        serve(&listener, &mut host);
        ok(host.advance(Duration::from_millis(100)));
        let healthy = prometheus.query("upcheck_healthy").await.expect("a query");
        if healthy.len() == 2 && healthy.iter().any(|s| s.value == 0.0) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{healthy:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Then the clock stops: two more scrapes see a module that does nothing.
    let mut scrapes = 0;
    while scrapes < 2 {
        scrapes += serve(&listener, &mut host);
        tokio::time::sleep(SCRAPE_INTERVAL / 10).await;
    }
    tokio::time::sleep(SCRAPE_INTERVAL / 2).await;
    serve(&listener, &mut host);
    let samples = prometheus
        .query(r#"{__name__=~"upcheck_.*"}"#)
        .await
        .expect("a query");
    let scraped: BTreeMap<String, u64> = samples
        .iter()
        .map(|s| (stat(&s.labels), s.value as u64))
        .collect();
    let kept: BTreeMap<String, u64> = host
        .metrics()
        .into_iter()
        .filter(|(name, _)| name.starts_with("upcheck."))
        .collect();
    for (name, value) in &scraped {
        println!(
            "{name:<40} scraped {value:>10} host {:>10?}",
            kept.get(name)
        );
    }
    assert_eq!(
        scraped, kept,
        "every metric the module defined, at its value"
    );
    assert_eq!(scraped.get("upcheck.app2.healthy"), Some(&0));
    assert_eq!(scraped.get("upcheck.app1.state_healthy"), Some(&1));
    assert!(scraped.get("upcheck.app2.probes") >= Some(&1));
}
