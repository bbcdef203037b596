//! Requests written by hand on a plain TCP connection.
//!
//! An HTTP client library normalises header names and may merge repeated headers; the routing
//! header scenarios send a client's copy of the routing header in odd case and twice, exactly as
//! written, because those are the forms a filter could miss.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The status of one `GET /` to `addr` with `headers` (whole lines, no CRLF) added as written;
/// an error if no HTTP response came within 2 s.
pub async fn status_of(addr: SocketAddr, headers: &[&str]) -> anyhow::Result<u16> {
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
