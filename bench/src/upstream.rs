//! The throughput runs' upstreams: the tiniest HTTP/1.1 server hyper makes, answering `200 ok` at
//! once on every path (`/up` included), in a process of its own so it can be pinned to a core.
//!
//! Why not the e2e fake upstream in `ok` mode: it answers after `tokio::time::sleep(0)`, which
//! waits for the next tick of tokio's 1 ms timer wheel, so each answer takes up to a millisecond
//! and a few connections top out near 10,000 req/s, below one Envoy worker. The bench measures that
//! too (the `--e2e` flag serves the fake upstream instead), and prints both.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::Ipv4Addr;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::upstream::FakeUpstream;

/// Serves one upstream per name on free loopback ports, printing `NAME ADDR` for each, until
/// stdin closes (the parent ended or died). With `e2e`, the e2e fake upstream in `ok` mode.
pub fn serve(names: &[String], e2e: bool) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut fakes = Vec::new();
        for name in names {
            let addr = if e2e {
                let fake = FakeUpstream::start(name, Mode::Ok).await?;
                let addr = fake.addr();
                fakes.push(fake);
                addr
            } else {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
                let addr = listener.local_addr()?;
                tokio::spawn(accept(listener));
                addr
            };
            println!("{name} {addr}");
        }
        let mut sink = Vec::new();
        tokio::io::stdin().read_to_end(&mut sink).await?;
        Ok(())
    })
}

async fn accept(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|_: Request<hyper::body::Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
