//! TLS to a fleet's etcd for the command line: `upcheck backends` reaches the members as the
//! balancers' Envoy does, trusting the CA FILE names and checking each member's certificate for
//! its IP address (or FILE's SNI), and shows a client certificate when it has one.
//!
//! A [`Connector`] is made once per command from FILE's CA and the certificate in use; every
//! connection to a member of a fleet on TLS goes through it ([`crate::http1`]), so nothing of a
//! call (a password, a token, a key) crosses in plain text. rustls, blocking, over the command's
//! own HTTP/1.1.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::etcd::ClientCertificate;

/// TLS to a fleet's members: its CA, the client certificate shown, and the name checked.
#[derive(Clone)]
pub struct Connector {
    config: Arc<ClientConfig>,
    sni: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("sni", &self.sni)
            .finish_non_exhaustive()
    }
}

/// A connection to a member: plain TCP, or TLS over it.
pub enum Conn {
    /// Plain HTTP (a fleet whose FILE says no TLS).
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Conn {
    /// How long a read may wait.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.set_read_timeout(timeout),
            Conn::Tls(s) => s.sock.set_read_timeout(timeout),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf).map_err(|e| closed(s, e)),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf).map_err(|e| closed(s, e)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush().map_err(|e| closed(s, e)),
        }
    }
}

/// The member closed the connection as the first request went out over TLS, and said nothing
/// TLS could read: with TLS 1.3 a client sends its request right after its own part of the
/// handshake, so a member that refuses the client's certificate closes the connection under it,
/// and its alert may be lost with the connection.
#[derive(Debug)]
pub struct ClosedAfterHandshake;

impl std::fmt::Display for ClosedAfterHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the member closed the connection right after the TLS handshake")
    }
}

impl std::error::Error for ClosedAfterHandshake {}

/// A read or write of `s` that failed with `e`: the member's TLS alert if one arrived before it closed
/// (read now, so that the error names it), or [`ClosedAfterHandshake`] for a connection closed
/// under the write; any other error as it is.
fn closed(s: &mut StreamOwned<ClientConnection, TcpStream>, e: io::Error) -> io::Error {
    if !matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    ) {
        return e;
    }
    let _ = s.sock.set_read_timeout(Some(Duration::from_millis(200)));
    if s.conn.read_tls(&mut s.sock).is_ok() {
        if let Err(tls) = s.conn.process_new_packets() {
            return io::Error::new(e.kind(), tls);
        }
    }
    io::Error::new(e.kind(), ClosedAfterHandshake)
}

/// The certificates of PEM file `path`, or why not (naming `what` and the path, never the
/// contents).
fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let found: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .collect();
    let found = found.map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if found.is_empty() {
        return Err(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(found)
}

impl Connector {
    /// TLS trusting the CA at `ca` only, showing `client` when given, and checking each
    /// member's certificate for `sni` (else for the member's IP address). Refused, naming the
    /// file: one that cannot be read or holds no certificate or key, a key that is not the
    /// certificate's.
    pub fn new(
        ca: &Path,
        client: Option<&ClientCertificate>,
        sni: Option<&str>,
    ) -> Result<Connector, String> {
        let mut roots = RootCertStore::empty();
        for cert in certificates("the CA", ca)? {
            roots
                .add(cert)
                .map_err(|e| format!("the CA {}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let config = match client {
            Some(c) => {
                let chain = certificates("the client certificate", &c.cert)?;
                let key = PrivateKeyDer::from_pem_file(&c.key).map_err(|e| {
                    format!("the client certificate's key {}: {e}", c.key.display())
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    format!(
                        "the client certificate {} with the key {}: {e}",
                        c.cert.display(),
                        c.key.display()
                    )
                })?
            }
            None => builder.with_no_client_auth(),
        };
        let sni = sni
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|e| format!("the server name {name}: {e}"))
            })
            .transpose()?;
        Ok(Connector {
            config: Arc::new(config),
            sni,
        })
    }

    /// TLS over `tcp`, connected to member `addr`: the handshake happens with the first write.
    pub fn wrap(&self, tcp: TcpStream, addr: SocketAddr) -> io::Result<Conn> {
        let name = self
            .sni
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let connection =
            ClientConnection::new(self.config.clone(), name).map_err(io::Error::other)?;
        Ok(Conn::Tls(Box::new(StreamOwned::new(connection, tcp))))
    }
}

/// What a failed call to a member over TLS means, in words an operator can act on, when the
/// failure is TLS's; none otherwise.
pub fn explain(e: &io::Error) -> Option<String> {
    let inner = e.get_ref()?;
    if let Some(closed) = inner.downcast_ref::<ClosedAfterHandshake>() {
        return Some(format!(
            "{closed}: it most likely refused the client certificate: use one its \
             --trusted-ca-file signed (--cert and --key, or UPCHECK_ETCD_CERT and UPCHECK_ETCD_KEY)"
        ));
    }
    let tls = inner.downcast_ref::<rustls::Error>()?;
    let hint = match tls {
        rustls::Error::AlertReceived(_) => {
            "etcd refused the client certificate: use one its --trusted-ca-file signed \
             (--cert and --key, or UPCHECK_ETCD_CERT and UPCHECK_ETCD_KEY)"
        }
        rustls::Error::InvalidCertificate(_) => {
            "the member's certificate is not one FILE's CA signed for its address"
        }
        _ => "the TLS handshake failed",
    };
    Some(format!("{tls}: {hint}"))
}
