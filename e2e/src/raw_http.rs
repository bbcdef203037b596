//! Requests written by hand on a plain TCP connection.
//!
//! An HTTP client library normalises header names and may merge repeated headers; the routing
//! header scenarios send a client's copy of the routing header in odd case and twice, exactly as
//! written, because those are the forms a filter could miss. The status page scenarios also choose
//! the address a request comes from, which a client library does not let them do.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// The status of one `GET /` to `addr` with `headers` (whole lines, no CRLF) added as written;
/// an error if no HTTP response came within 2 s.
pub async fn status_of(addr: SocketAddr, headers: &[&str]) -> anyhow::Result<u16> {
    status(None, addr, "/", headers).await
}

/// The status of one `GET path` to `addr` from a socket bound to `source` (an address of this
/// machine), so the server sees that peer address; otherwise as [`status_of`].
pub async fn status_from(
    source: IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[&str],
) -> anyhow::Result<u16> {
    status(Some(source), addr, path, headers).await
}

async fn status(
    source: Option<IpAddr>,
    addr: SocketAddr,
    path: &str,
    headers: &[&str],
) -> anyhow::Result<u16> {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let exchange = async {
        let mut stream = match source {
            None => TcpStream::connect(addr).await?,
            Some(source) => {
                let socket = match source {
                    IpAddr::V4(_) => TcpSocket::new_v4()?,
                    IpAddr::V6(_) => TcpSocket::new_v6()?,
                };
                socket.bind(SocketAddr::new(source, 0))?;
                socket.connect(addr).await?
            }
        };
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
