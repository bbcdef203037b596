//! Certificates for TLS to the tests' etcd, made by each test in its own directory with the
//! `openssl` command, as an operator's CA would issue them: a CA, a server certificate for the
//! members (SAN IP:127.0.0.1 and DNS:localhost, and usable as a client too, which etcd's own
//! gateway needs when it asks clients for a certificate) and a client certificate for the
//! balancers and the harness, without a Common Name: with `--client-cert-auth` and
//! authentication both on, etcd's JSON gateway answers 400 to any request whose client
//! certificate names one, since it cannot take the user from it. Nothing is kept between runs
//! and no key leaves the directory.
//!
//! [`Certificates::client`] is the harness's HTTPS client of etcd: trusting the test's CA only
//! and showing the client certificate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// A certificate and its private key, PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// The test's CA and the certificates it signed.
#[derive(Debug, Clone)]
pub struct Certificates {
    /// The CA's certificate, which the members and the balancers trust.
    pub ca: PathBuf,
    /// The members' certificate.
    pub server: Pair,
    /// The balancers' (and the harness's) client certificate.
    pub client: Pair,
}

/// Runs `openssl` with the words of `line` as its arguments, in `dir`; an error with what it
/// said when it fails.
fn openssl(dir: &Path, line: &str) -> Result<()> {
    let output = Command::new("openssl")
        .args(line.split_whitespace())
        .current_dir(dir)
        .output()
        .context(
            "cannot run openssl: the TLS tests make their certificates with it (Debian's openssl \
             package)",
        )?;
    if !output.status.success() {
        bail!(
            "openssl {line}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A new P-256 key, as `openssl req` takes it.
const NEW_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

/// Makes a key `name.key` and a certificate `name.pem` for `subject` (no spaces) signed by the
/// CA in `dir`, with serial number `serial` and the extensions `extensions` (OpenSSL's config
/// syntax).
fn issue(dir: &Path, name: &str, subject: &str, serial: u32, extensions: &str) -> Result<Pair> {
    std::fs::write(dir.join(format!("{name}.ext")), extensions)?;
    openssl(
        dir,
        &format!("req -new {NEW_KEY} -keyout {name}.key -out {name}.csr -subj {subject}"),
    )?;
    openssl(
        dir,
        &format!(
            "x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -set_serial {serial} -days 2 \
             -extfile {name}.ext -out {name}.pem"
        ),
    )?;
    Ok(Pair {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    })
}

impl Certificates {
    /// Makes the CA and its two certificates in `dir`.
    pub fn make(dir: &Path) -> Result<Certificates> {
        openssl(
            dir,
            &format!(
                "req -x509 {NEW_KEY} -keyout ca.key -out ca.pem -days 2 -subj /CN=upcheck-test-ca \
                 -addext basicConstraints=critical,CA:TRUE \
                 -addext keyUsage=critical,keyCertSign,cRLSign"
            ),
        )?;
        let end = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n";
        let server = issue(
            dir,
            "member",
            "/CN=etcd-member",
            2,
            &format!(
                "{end}extendedKeyUsage=serverAuth,clientAuth\n\
                 subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            ),
        )?;
        let client = issue(
            dir,
            "balancer",
            "/O=upcheck-balancers",
            3,
            &format!("{end}extendedKeyUsage=clientAuth\n"),
        )?;
        Ok(Certificates {
            ca: dir.join("ca.pem"),
            server,
            client,
        })
    }

    /// Another client certificate of this CA, `name.pem` and `name.key` beside it, without a
    /// Common Name as the balancers' (an operator's, say).
    pub fn another_client(&self, name: &str) -> Result<Pair> {
        let dir = self.ca.parent().context("the CA's directory")?;
        issue(
            dir,
            name,
            &format!("/O={name}"),
            4,
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=clientAuth\n",
        )
    }

    /// An HTTPS client that trusts this CA only and shows the client certificate, with `timeout`.
    pub fn client(&self, timeout: Duration) -> Result<reqwest::Client> {
        let ca = std::fs::read(&self.ca)?;
        let identity = [
            std::fs::read(&self.client.cert)?,
            std::fs::read(&self.client.key)?,
        ]
        .concat();
        Ok(reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(&ca)?)
            .identity(reqwest::Identity::from_pem(&identity)?)
            .build()?)
    }
}
