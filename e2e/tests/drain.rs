//! Drain in a real Envoy: app2 starts answering with `x-envoy-immediate-health-check-fail`, on
//! its pages first (each such answer drains it until its next passing probe) and then on its
//! probe as well. No user ever sees the header, nothing fails, and while its probe carries the
//! header no new request reaches app2.
//!
//! The fake upstreams cannot add a header to their answers, so app2 here is a small HTTP/1.1
//! server of this test's own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, INTERVAL, RATE};
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;
use upcheck_policy::drain::SIGNAL_HEADER;

/// What app2 does, and what it was sent.
#[derive(Default)]
struct Backend {
    /// Its pages answer with the signal.
    pages_signal: AtomicBool,
    /// Its probe answers with the signal.
    probe_signals: AtomicBool,
    /// User requests received.
    pages: AtomicU64,
}

/// Serves one connection: every request is a bodiless GET, answered 200 `ok`.
async fn serve(mut stream: TcpStream, backend: Arc<Backend>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end + 4);
        let probe = head.split(' ').nth(1) == Some("/up");
        let signal = if probe {
            backend.probe_signals.load(Ordering::SeqCst)
        } else {
            backend.pages.fetch_add(1, Ordering::SeqCst);
            backend.pages_signal.load(Ordering::SeqCst)
        };
        let extra = if signal {
            format!("{SIGNAL_HEADER}: true\r\n")
        } else {
            String::new()
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nserver: drain-test\r\n{extra}\r\nok"
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn start_backend() -> anyhow::Result<(std::net::SocketAddr, Arc<Backend>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let backend = Arc::new(Backend::default());
    let shared = backend.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    Ok((addr, backend))
}

#[tokio::test]
async fn a_backend_answering_with_the_drain_header_gets_no_new_requests_and_users_never_see_it(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let (app2, backend) = start_backend().await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .backend("app2", app2)
        .routing(Routing::Cluster)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    sleep(2 * INTERVAL).await;
    let client = reqwest::Client::new();

    // Pages carry the header: each such answer drains app2 until its next passing probe.
    backend.pages_signal.store(true, Ordering::SeqCst);
    let mut leaked = 0;
    let mut statuses = Vec::new();
    for _ in 0..40 {
        let response = client.get(envoy.url("/")).send().await?;
        statuses.push(response.status().as_u16());
        leaked += usize::from(response.headers().contains_key(SIGNAL_HEADER));
        sleep(Duration::from_millis(50)).await;
    }
    let reached = backend.pages.load(Ordering::SeqCst);
    println!("pages with the header: app2 took {reached} of 40 requests");
    assert!(reached >= 1, "the header was never sent");
    assert_eq!(leaked, 0, "users got {SIGNAL_HEADER}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    // The probe carries it too: once a probe has said so, app2 takes no new request.
    backend.probe_signals.store(true, Ordering::SeqCst);
    sleep(2 * INTERVAL).await;
    let before = backend.pages.load(Ordering::SeqCst);
    let replay = Replay::new(envoy.url("/"), RATE, Duration::from_secs(3)).connection_per_request();
    let report = replay.run().await?;
    let during = backend.pages.load(Ordering::SeqCst) - before;
    println!("probe with the header: {report}; app2 took {during}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(during, 0, "app2 took new requests while it drained");
    assert_eq!(envoy.stat("wasmcustom.upcheck.app2.draining").await?, 1);
    assert_eq!(
        envoy
            .stat("wasmcustom.upcheck.app2.request_failures")
            .await?,
        0
    );
    assert_eq!(
        envoy.stat("wasmcustom.upcheck.app2.probe_failures").await?,
        0
    );
    Ok(())
}
