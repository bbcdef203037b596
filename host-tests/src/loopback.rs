//! Clusters served by a real HTTP/1.1 server on 127.0.0.1 instead of a script: what lets the
//! module's fleet talk to a real etcd (its JSON gateway) from this host.
//!
//! Why: etcd's answers (leases, revisions, the shapes of its JSON) are what the fleet must be
//! right about, and a scripted etcd would only echo what its author believed. So an http call to
//! a cluster named with [`crate::Host::real_cluster`] is sent, as Envoy sends it, to the real
//! server: one connection per call (`connection: close`), on a thread of its own so the VMs go
//! on meanwhile, bounded by the call's timeout (at most [`MAX_TIMEOUT`]) and by [`MAX_ANSWER`].
//! The answer (`:status`, the server's headers, the body) is delivered with
//! `proxy_on_http_call_response` at the first [`crate::Host::advance`] after it arrived; a call
//! not answered within its timeout gets Envoy's 504, a refused connection Envoy's 503, an answer
//! that is not HTTP/1.1 Envoy's 503 `protocol_error`.
//!
//! The real server lives in real time and the host in virtual time: a test that uses one paces
//! the virtual clock itself (advancing each host by the real time elapsed, for instance).

use crate::abi::{header, Headers};
use crate::envoy::Reply;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

/// The longest a call to a real server may take, whatever timeout the guest gave (none included).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of an answer (status line, headers and body) read from a real server.
pub const MAX_ANSWER: usize = 8 << 20;

/// One http call answered by a real server ([`crate::Host::real_calls`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealCall {
    /// The token the guest got for it.
    pub token: u32,
    /// The VM that dispatched it.
    pub vm: usize,
    /// The cluster it was sent to.
    pub cluster: String,
    /// Its `:path`.
    pub path: String,
    /// When it was dispatched, in virtual time since the host started.
    pub sent: Duration,
    /// Bytes of the request body.
    pub sent_bytes: usize,
    /// The status the guest was given: the server's, or Envoy's 503 or 504.
    pub status: u16,
    /// Bytes of the answer's body, as the guest was given it.
    pub answer_bytes: usize,
    /// Real time from dispatch to the answer (or to the failure).
    pub took: Duration,
}

/// What a call's thread sends back.
struct Finished {
    token: u32,
    reply: Reply,
    took: Duration,
}

/// A call on its way.
struct Waiting {
    call: RealCall,
    context: u32,
}

/// The real clusters of one process and their calls.
pub(crate) struct Loopback {
    clusters: BTreeMap<String, SocketAddr>,
    waiting: BTreeMap<u32, Waiting>,
    done: (Sender<Finished>, Receiver<Finished>),
    /// Every call answered so far, in the order the answers were taken.
    pub answered: Vec<RealCall>,
}

impl Default for Loopback {
    fn default() -> Self {
        Loopback {
            clusters: BTreeMap::new(),
            waiting: BTreeMap::new(),
            done: channel(),
            answered: Vec::new(),
        }
    }
}

/// A request to send, as the guest dispatched it.
pub(crate) struct Call<'a> {
    pub token: u32,
    pub vm: usize,
    pub context: u32,
    pub cluster: &'a str,
    pub headers: &'a Headers,
    pub body: Vec<u8>,
    pub timeout: Option<Duration>,
    /// Virtual time of the dispatch.
    pub now: Duration,
}

impl Loopback {
    /// Calls to `cluster` go to the server at `address` from now on.
    pub(crate) fn serve(&mut self, cluster: &str, address: SocketAddr) {
        self.clusters.insert(cluster.to_string(), address);
    }

    /// The real server behind `cluster`, if there is one.
    pub(crate) fn address(&self, cluster: &str) -> Option<SocketAddr> {
        self.clusters.get(cluster).copied()
    }

    /// Sends `call` on a thread of its own; its answer waits for [`Loopback::take_answers`].
    pub(crate) fn send(&mut self, call: Call<'_>) {
        let Some(&address) = self.clusters.get(call.cluster) else {
            return;
        };
        let record = RealCall {
            token: call.token,
            vm: call.vm,
            cluster: call.cluster.to_string(),
            path: header(call.headers, ":path")
                .unwrap_or_default()
                .to_string(),
            sent: call.now,
            sent_bytes: call.body.len(),
            status: 0,
            answer_bytes: 0,
            took: Duration::ZERO,
        };
        let request = encode(call.headers, &call.body);
        let timeout = call.timeout.unwrap_or(MAX_TIMEOUT).min(MAX_TIMEOUT);
        let done = self.done.0.clone();
        let token = call.token;
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = exchange(address, &request, started + timeout).unwrap_or_else(|e| e);
            // The host may be gone by now; then nobody wants the answer.
            let _ = done.send(Finished {
                token,
                reply,
                took: started.elapsed(),
            });
        });
        self.waiting.insert(
            call.token,
            Waiting {
                call: record,
                context: call.context,
            },
        );
    }

    /// The answers that arrived since the last look: (vm, context, token, reply) each.
    pub(crate) fn take_answers(&mut self) -> Vec<(usize, u32, u32, Reply)> {
        let mut answers = Vec::new();
        while let Ok(finished) = self.done.1.try_recv() {
            let Some(Waiting { mut call, context }) = self.waiting.remove(&finished.token) else {
                continue;
            };
            call.status = finished.reply.status;
            call.answer_bytes = finished.reply.body.len();
            call.took = finished.took;
            answers.push((call.vm, context, call.token, finished.reply));
            self.answered.push(call);
        }
        answers
    }
}

/// The request on the wire: HTTP/1.1, the guest's headers but the pseudo-headers, its body.
fn encode(headers: &Headers, body: &[u8]) -> Vec<u8> {
    let pseudo = |name: &str| header(headers, name).unwrap_or_default();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {}\r\n",
        pseudo(":method"),
        pseudo(":path"),
        pseudo(":authority")
    );
    for (name, value) in headers.iter().filter(|(n, _)| !n.starts_with(':')) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

/// Sends `request` to `address` and reads the answer to the end, all by `deadline`. The `Err`
/// is the answer Envoy makes up instead.
fn exchange(address: SocketAddr, request: &[u8], deadline: Instant) -> Result<Reply, Reply> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let failed = |e: std::io::Error| match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Reply::timeout(),
        _ => Reply::connection_failure(),
    };
    let mut stream = TcpStream::connect_timeout(&address, left().max(Duration::from_millis(1)))
        .map_err(failed)?;
    stream
        .set_write_timeout(Some(left().max(Duration::from_millis(1))))
        .map_err(failed)?;
    stream.write_all(request).map_err(failed)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if left().is_zero() {
            return Err(Reply::timeout());
        }
        stream.set_read_timeout(Some(left())).map_err(failed)?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e)),
        }
        if answer.len() > MAX_ANSWER {
            return Err(Reply::protocol_error());
        }
    }
    parse(&answer).ok_or_else(Reply::protocol_error)
}

/// An HTTP/1.1 answer read to the end of its connection, as the guest gets it: `:status`, the
/// server's headers less the connection's own, and the body (de-chunked).
fn parse(answer: &[u8]) -> Option<Reply> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(answer.get(..end)?).ok()?;
    let mut body = answer.get(end + 4..)?.to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let status: u16 = status_line
        .strip_prefix("HTTP/1.")?
        .get(2..5)?
        .parse()
        .ok()?;
    let mut headers = vec![(":status".to_string(), status.to_string())];
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_string());
        match name.as_str() {
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" | "keep-alive" => {}
            _ => headers.push((name, value)),
        }
    }
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Reply::upstream(status, headers, body))
}

/// The body of a chunked transfer encoding.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(rest.get(..line)?).ok()?;
        let size = size.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        rest = rest.get(line + 2..)?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_answer_reaches_the_guest_whole_without_the_connection_headers() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
            Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
            4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        let reply = parse(answer).unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, b"{\"a\":1}");
        assert_eq!(
            reply.headers,
            vec![
                (":status".to_string(), "200".to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ]
        );
    }

    #[test]
    fn an_answer_that_is_not_http_is_refused() {
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").is_none());
    }

    /// A server on a free loopback port that reads one request and answers `answer` (or
    /// nothing, holding the connection for ten seconds, for `None`); and its address.
    fn server(answer: Option<&'static [u8]>) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            match answer {
                Some(answer) => stream.write_all(answer).unwrap(),
                None => std::thread::sleep(Duration::from_secs(10)),
            }
        });
        address
    }

    #[test]
    fn a_real_servers_answer_comes_back_and_silence_or_a_closed_port_get_envoys_own() {
        // Generous for an answer that comes at once (a loaded machine may be slow to schedule
        // the server's thread); the silent server holds its connection far longer than this,
        // so its 504 can only come from the deadline.
        let soon = || Instant::now() + Duration::from_secs(3);
        let answering = server(Some(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"));
        let reply = exchange(answering, b"POST / HTTP/1.1\r\n\r\n", soon()).unwrap();
        assert_eq!((reply.status, reply.body.as_slice()), (200, &b"{}"[..]));

        let silent = server(None);
        let reply = exchange(silent, b"POST / HTTP/1.1\r\n\r\n", soon()).unwrap_err();
        assert_eq!(
            (reply.status, reply.details.as_str()),
            (504, "upstream_response_timeout")
        );

        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let reply = exchange(closed, b"POST / HTTP/1.1\r\n\r\n", soon()).unwrap_err();
        assert_eq!(reply.status, 503);
        assert!(
            reply.details.contains("connection_failure"),
            "{}",
            reply.details
        );
    }

    #[test]
    fn the_request_carries_the_guests_headers_and_body_and_closes() {
        let headers: Headers = [
            (":method", "POST"),
            (":path", "/v3/kv/range"),
            (":authority", "etcd"),
            ("content-type", "application/json"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let request = encode(&headers, b"{}");
        assert_eq!(
            String::from_utf8(request).unwrap(),
            "POST /v3/kv/range HTTP/1.1\r\nhost: etcd\r\ncontent-type: application/json\r\n\
             content-length: 2\r\nconnection: close\r\n\r\n{}"
        );
    }
}
