//! The little HTTP/1.1 the command line speaks: to Envoy's admin interface and the status page on
//! loopback, and to etcd's JSON gateway (plain HTTP, or HTTPS through a [`Connector`]).
//!
//! Each request is one connection with `Connection: close`, read until the body is whole by its
//! length or its last chunk (Envoy holds a connection it answered itself open for a second,
//! waiting for the client to close first). A watch of etcd is one response that never ends: its
//! messages are read as they arrive ([`Stream`]). That is all these need, where an HTTP client
//! crate would bring an async runtime into the operator's binary.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use crate::etcd_tls::{Conn, Connector};

/// How long a connection may take to open.
const CONNECT: Duration = Duration::from_secs(2);
/// How long a request waits for its answer.
const ANSWER: Duration = Duration::from_secs(5);

/// A GET: the status and the body.
pub fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    exchange(addr, None, "GET", path, &[], "")
}

/// A GET of a JSON body answered 200.
pub fn get_json(addr: SocketAddr, path: &str) -> io::Result<Value> {
    let (status, body) = get(addr, path)?;
    if status != 200 {
        return Err(io::Error::other(format!("{addr}{path} answered {status}")));
    }
    serde_json::from_str(&body).map_err(io::Error::other)
}

/// A POST of `body` (JSON) with `headers`, over TLS when `tls` is given: the status and the body.
pub fn post(
    addr: SocketAddr,
    tls: Option<&Connector>,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<(u16, String)> {
    exchange(addr, tls, "POST", path, headers, body)
}

fn request(
    addr: SocketAddr,
    tls: Option<&Connector>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<Conn> {
    let tcp = TcpStream::connect_timeout(&addr, CONNECT)?;
    tcp.set_read_timeout(Some(ANSWER))?;
    let mut stream = match tls {
        Some(tls) => tls.wrap(tcp, addr)?,
        None => Conn::Plain(tcp),
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        head.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()?;
    Ok(stream)
}

fn exchange(
    addr: SocketAddr,
    tls: Option<&Connector>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<(u16, String)> {
    let mut stream = request(addr, tls, method, path, headers, body)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16_384];
    loop {
        let n = stream.read(&mut buf)?;
        raw.extend_from_slice(buf.get(..n).unwrap_or_default());
        if n == 0 || whole(&raw) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::other("no end of headers"))?;
    let status = status_of(head)?;
    let body = match chunked(head) {
        true => dechunk(body),
        false => body.to_owned(),
    };
    Ok((status, body))
}

fn status_of(head: &str) -> io::Result<u16> {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("no status"))
}

fn chunked(head: &str) -> bool {
    head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    })
}

/// Whether a response read so far is whole: its headers, and a body as long as its
/// `content-length` or ending in the last chunk.
fn whole(raw: &[u8]) -> bool {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    if chunked(head) {
        return body.ends_with("0\r\n\r\n");
    }
    let length = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    });
    length.is_some_and(|length| body.len() >= length)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(rest.get(..size).unwrap_or_default());
        body = rest
            .get(size..)
            .unwrap_or_default()
            .trim_start_matches("\r\n");
    }
    out
}

/// A response whose body is a stream of JSON values (etcd's watch), read as they arrive.
pub struct Stream {
    stream: Conn,
    /// What was read and not yet taken apart: the headers, then chunks.
    raw: Vec<u8>,
    /// Whether the headers were read (a 200 with a chunked body).
    started: bool,
    /// The body so far, dechunked, from the first value not yet returned.
    body: Vec<u8>,
    /// Whether the last chunk came: the values still in `body` are all there are.
    ended: bool,
}

impl Stream {
    /// POSTs `body` (over TLS when `tls` is given) and returns the response to read, each read
    /// waiting at most `patience`.
    pub fn open(
        addr: SocketAddr,
        tls: Option<&Connector>,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
        patience: Duration,
    ) -> io::Result<Stream> {
        let stream = request(addr, tls, "POST", path, headers, body)?;
        stream.set_read_timeout(Some(patience))?;
        Ok(Stream {
            stream,
            raw: Vec::new(),
            started: false,
            body: Vec::new(),
            ended: false,
        })
    }

    /// The next value, or none if none arrived within the patience; an error once the stream
    /// ended or answered anything but a chunked 200.
    pub fn next_value(&mut self) -> io::Result<Option<Value>> {
        loop {
            if let Some(value) = self.value()? {
                return Ok(Some(value));
            }
            if self.ended {
                return Err(io::Error::other("the stream ended"));
            }
            let mut buf = [0u8; 16_384];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::Error::other("the stream ended")),
                Ok(n) => self.raw.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A whole value from what was read, if there is one.
    fn value(&mut self) -> io::Result<Option<Value>> {
        if !self.started {
            let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Ok(None);
            };
            let head =
                String::from_utf8_lossy(self.raw.get(..end).unwrap_or_default()).into_owned();
            let status = status_of(&head)?;
            if status != 200 || !chunked(&head) {
                return Err(io::Error::other(format!("answered {status}")));
            }
            self.raw.drain(..end + 4);
            self.started = true;
        }
        // Every whole chunk goes to the body.
        while let Some(line) = self.raw.windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(self.raw.get(..line).unwrap_or_default())
                .ok()
                .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
                .ok_or_else(|| io::Error::other("a chunk without its size"))?;
            if size == 0 {
                // The values before it are still to be taken.
                self.ended = true;
                break;
            }
            let Some(chunk) = self.raw.get(line + 2..line + 2 + size) else {
                break;
            };
            if self.raw.len() < line + 4 + size {
                break;
            }
            self.body.extend_from_slice(chunk);
            self.raw.drain(..line + 4 + size);
        }
        let mut values = serde_json::Deserializer::from_slice(&self.body).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let used = values.byte_offset();
                self.body.drain(..used);
                Ok(Some(value))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            Some(Err(e)) => Err(io::Error::other(e)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_whole_at_its_length_or_its_last_chunk() {
        assert!(!whole(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhel"));
        assert!(whole(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"));
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
        assert!(!whole(chunked));
        assert!(whole(&[&chunked[..], b"0\r\n\r\n"].concat()));
    }

    #[test]
    fn a_chunked_body_reads_as_its_chunks_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }

    /// A stream whose server answers with `parts`, 30 ms apart.
    fn served(parts: &'static [&'static [u8]]) -> (Stream, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = peer.read(&mut request).unwrap();
            for part in parts {
                peer.write_all(part).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let stream = Stream::open(addr, None, "/v3/watch", &[], "{}", ANSWER).unwrap();
        (stream, server)
    }

    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";

    /// Every value a stream whose server answers with `parts` yields, until it ends.
    fn values(parts: &'static [&'static [u8]]) -> Vec<Value> {
        let (mut stream, server) = served(parts);
        let mut values = Vec::new();
        let ended = loop {
            match stream.next_value() {
                Ok(Some(value)) => values.push(value),
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        assert!(ended, "the last chunk ends the stream, after {values:?}");
        server.join().unwrap();
        values
    }

    #[test]
    fn a_stream_yields_each_value_once_it_is_whole_whatever_the_chunks() {
        let parts: &[&[u8]] = &[
            HEAD,
            b"8\r\n{\"a\":1}\n\r\n5\r\n{\"b\":\r\n",
            b"2\r\n2}\r\n",
            b"0\r\n\r\n",
        ];
        assert_eq!(
            values(parts),
            [serde_json::json!({"a": 1}), serde_json::json!({"b": 2})]
        );
    }

    #[test]
    fn values_that_come_with_the_last_chunk_are_taken_before_the_stream_ends() {
        let parts: &[&[u8]] = &[HEAD, b"8\r\n{\"a\":1}\n\r\n7\r\n{\"b\":2}\r\n0\r\n\r\n"];
        assert_eq!(
            values(parts),
            [serde_json::json!({"a": 1}), serde_json::json!({"b": 2})]
        );
    }
}
