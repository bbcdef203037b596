//! A real etcd cluster on 127.0.0.1 for one test, and the balancers that share one view of health
//! through it: Envoys started from what `upcheck envoy --etcd` writes.
//!
//! The binary comes from `UPCHECK_ETCD` (set by `mk/etcd.mk`, which installs Debian's
//! `etcd-server`); a test fails, never skips, without it. Each member runs in a temporary
//! directory of its own on free loopback ports and is killed by its own pid when its handle
//! drops (or when the test kills it). The test reads and writes etcd itself through the same JSON
//! gateway the module uses ([`Etcd::range`], [`Etcd::put`]).
//!
//! [`Etcd::start_tls`] starts the members with client TLS on and a client certificate required
//! (`--client-cert-auth`), the certificates made by the test ([`crate::tls`]): the balancers
//! reach it as `upcheck envoy --etcd-ca --etcd-cert --etcd-key` writes, and the harness over
//! HTTPS with the same CA and client certificate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::time::{sleep, Instant};
use upcheck_cli::envoy::{render, Settings};
use upcheck_cli::etcd::TlsFlags;

use crate::envoy::{binary, module, Turn};
use crate::envoy_process::{EnvoyProcess, Launch, PATIENCE, PORT_ATTEMPTS};
use crate::ports::free_addr;
use crate::tls::Certificates;
use crate::upstream::FakeUpstream;

/// One etcd member.
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    child: Option<Child>,
}

/// A running etcd cluster; every member is killed when it drops.
pub struct Etcd {
    members: Vec<Member>,
    dir: TempDir,
    http: reqwest::Client,
    /// The root user's token, once authentication is on ([`Etcd::enable_auth`]).
    token: Option<String>,
    /// The certificates of client TLS, when it is on ([`Etcd::start_tls`]).
    tls: Option<Certificates>,
    /// Every Envoy turn of the test binary: a fleet test runs its own balancers and times what
    /// etcd carries between them, alone.
    _alone: Turn,
}

/// The root user's password in the tests' etcd.
const ROOT_PASSWORD: &str = "root-of-the-test";

fn etcd_binary() -> Result<PathBuf> {
    let path = std::env::var_os("UPCHECK_ETCD")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .context("UPCHECK_ETCD is not set: run the tests through `make e2e` or `make host-test`, which install etcd-server (mk/etcd.mk)")?;
    if !path.is_file() {
        bail!(
            "UPCHECK_ETCD={} is not a file: run the tests through `make e2e` or `make host-test`",
            path.display()
        );
    }
    Ok(path)
}

fn b64(bytes: &[u8]) -> String {
    upcheck_policy::etcd::gateway::base64(bytes)
}

impl Etcd {
    /// Starts a cluster of `size` members and waits until every one answers `/health`. Its ports
    /// are picked free just before, and another process can take one in between: the cluster is
    /// then started again on other ports, up to [`PORT_ATTEMPTS`] times in all.
    pub async fn start(size: usize) -> Result<Etcd> {
        Etcd::start_with(size, false).await
    }

    /// [`Etcd::start`] with client TLS: each member serves HTTPS with a certificate of the test's
    /// CA and asks every client for a certificate of that CA too.
    pub async fn start_tls(size: usize) -> Result<Etcd> {
        Etcd::start_with(size, true).await
    }

    async fn start_with(size: usize, tls: bool) -> Result<Etcd> {
        let mut attempt = 1;
        loop {
            match Etcd::start_once(size, tls, Turn::alone().await?).await {
                Err(e)
                    if attempt < PORT_ATTEMPTS
                        && e.to_string().contains("address already in use") =>
                {
                    eprintln!("attempt {attempt}: {e:#}; starting etcd on other ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(size: usize, tls: bool, alone: Turn) -> Result<Etcd> {
        let binary = etcd_binary()?;
        let dir = tempfile::Builder::new().prefix("upcheck-etcd-").tempdir()?;
        let tls = match tls {
            true => Some(Certificates::make(dir.path())?),
            false => None,
        };
        let timeout = Duration::from_secs(2);
        let http = match &tls {
            Some(certificates) => certificates.client(timeout)?,
            None => reqwest::Client::builder()
                .no_proxy()
                .timeout(timeout)
                .build()?,
        };
        let mut members = Vec::new();
        for i in 0..size {
            members.push(Member {
                name: format!("m{i}"),
                client: free_addr()?,
                peer: free_addr()?,
                child: None,
            });
        }
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect();
        let initial = initial.join(",");
        for m in &mut members {
            m.child = Some(spawn(&binary, dir.path(), m, &initial, tls.as_ref())?);
        }
        let mut etcd = Etcd {
            members,
            dir,
            http,
            token: None,
            tls,
            _alone: alone,
        };
        let deadline = Instant::now() + PATIENCE;
        for i in 0..size {
            while !etcd.healthy(i).await {
                if etcd.exited(i) {
                    bail!("etcd member {i} exited: {}", etcd.log(i));
                }
                if Instant::now() > deadline {
                    bail!(
                        "etcd member {i} not healthy after {PATIENCE:?}: {}",
                        etcd.log(i)
                    );
                }
                sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(etcd)
    }

    /// The members' client addresses (what `upcheck envoy --etcd` takes).
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.client).collect()
    }

    /// What `upcheck envoy` is told of TLS to this cluster: nothing, or its CA and the client
    /// certificate (`--etcd-ca`, `--etcd-cert`, `--etcd-key`).
    pub fn tls_flags(&self) -> TlsFlags {
        match &self.tls {
            Some(certificates) => TlsFlags {
                ca: Some(certificates.ca.clone()),
                cert: Some(certificates.client.cert.clone()),
                key: Some(certificates.client.key.clone()),
                sni: None,
            },
            None => TlsFlags::default(),
        }
    }

    /// The URL of `path` on member `m`, over HTTPS when TLS is on.
    fn url(&self, m: &Member, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{path}", m.client)
    }

    /// Whether member `i` answers `/health` with `"health":"true"`.
    pub async fn healthy(&self, i: usize) -> bool {
        let Some(m) = self.members.get(i) else {
            return false;
        };
        let answer = self.http.get(self.url(m, "/health")).send().await;
        match answer {
            Ok(r) => r.text().await.is_ok_and(|t| t.contains("\"true\"")),
            Err(_) => false,
        }
    }

    /// Whether member `i` has exited.
    fn exited(&mut self, i: usize) -> bool {
        self.members
            .get_mut(i)
            .and_then(|m| m.child.as_mut())
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Member `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        let name = format!("m{i}.log");
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Starts every member again on the data it left (after [`Etcd::kill`]), and waits until
    /// each answers `/health`.
    pub async fn restart(&mut self) -> Result<()> {
        let binary = etcd_binary()?;
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect();
        for i in 0..self.members.len() {
            self.kill(i);
            if let Some(m) = self.members.get(i) {
                let child = spawn(
                    &binary,
                    self.dir.path(),
                    m,
                    &initial.join(","),
                    self.tls.as_ref(),
                )?;
                if let Some(m) = self.members.get_mut(i) {
                    m.child = Some(child);
                }
            }
        }
        let deadline = Instant::now() + PATIENCE;
        for i in 0..self.members.len() {
            while !self.healthy(i).await {
                if Instant::now() > deadline {
                    bail!(
                        "etcd member {i} not healthy again after {PATIENCE:?}: {}",
                        self.log(i)
                    );
                }
                sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Kills member `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.members.get_mut(i).and_then(|m| m.child.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let mut last = None;
        for m in &self.members {
            let url = self.url(m, path);
            let mut request = self.http.post(&url).body(body.to_string());
            if let Some(token) = &self.token {
                request = request.header("authorization", token);
            }
            match request.send().await {
                Ok(r) if r.status().is_success() => {
                    return Ok(serde_json::from_str(&r.text().await?)?)
                }
                Ok(r) => last = Some(anyhow::anyhow!("{url}: {}", r.status())),
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no etcd member")))
    }

    /// Turns etcd's authentication on, with `user` (password `password`) whose one role may read
    /// and write the keys under `prefix` and nothing else; the harness itself goes on as root.
    pub async fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) -> Result<()> {
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let steps = [
            ("/v3/auth/role/add", json!({"name": "root"})),
            (
                "/v3/auth/user/add",
                json!({"name": "root", "password": ROOT_PASSWORD}),
            ),
            (
                "/v3/auth/user/grant",
                json!({"user": "root", "role": "root"}),
            ),
            ("/v3/auth/role/add", json!({"name": "balancer"})),
            (
                "/v3/auth/role/grant",
                json!({"name": "balancer", "perm": {"permType": "READWRITE",
                       "key": b64(prefix.as_bytes()), "range_end": b64(&end)}}),
            ),
            (
                "/v3/auth/user/add",
                json!({"name": user, "password": password}),
            ),
            (
                "/v3/auth/user/grant",
                json!({"user": user, "role": "balancer"}),
            ),
            ("/v3/auth/enable", json!({})),
        ];
        for (path, body) in steps {
            self.post(path, body).await.context(path)?;
        }
        let answer = self
            .post(
                "/v3/auth/authenticate",
                json!({"name": "root", "password": ROOT_PASSWORD}),
            )
            .await?;
        self.token = answer["token"].as_str().map(str::to_owned);
        ensure!(self.token.is_some(), "no root token: {answer}");
        Ok(())
    }

    /// Whether `user` (password `password`) may read the keys under `prefix`.
    pub async fn may_read(&self, user: &str, password: &str, prefix: &str) -> Result<bool> {
        let answer = self
            .post(
                "/v3/auth/authenticate",
                json!({"name": user, "password": password}),
            )
            .await?;
        let token = answer["token"].as_str().context("no token")?.to_owned();
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let m = self.members.first().context("no member")?;
        let response = self
            .http
            .post(self.url(m, "/v3/kv/range"))
            .header("authorization", token)
            .body(json!({"key": b64(prefix.as_bytes()), "range_end": b64(&end)}).to_string())
            .send()
            .await?;
        Ok(response.status().is_success())
    }

    /// Every key under `prefix` with its value and lease, read through the JSON gateway.
    pub async fn range(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, i64)>> {
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let answer = self
            .post(
                "/v3/kv/range",
                json!({"key": b64(prefix.as_bytes()), "range_end": b64(&end)}),
            )
            .await?;
        let unb64 = |v: &Value| {
            upcheck_policy::etcd::gateway::unbase64(v.as_str().unwrap_or("")).unwrap_or_default()
        };
        Ok(answer["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| {
                        (
                            String::from_utf8_lossy(&unb64(&kv["key"])).into_owned(),
                            unb64(&kv["value"]),
                            kv["lease"]
                                .as_str()
                                .and_then(|l| l.parse().ok())
                                .unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Writes `value` at `key` (without a lease), as anyone with access to etcd could.
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.post(
            "/v3/kv/put",
            json!({"key": b64(key.as_bytes()), "value": b64(value)}),
        )
        .await
        .map(|_| ())
    }
}

/// Runs member `m` of the cluster `initial`, its data and log in `dir`: anew, or again on the
/// data it left (etcd then ignores the `--initial-*` flags); with `tls`, its client URL serves
/// HTTPS and requires a client certificate of the CA (the peers keep plain HTTP).
fn spawn(
    binary: &Path,
    dir: &Path,
    m: &Member,
    initial: &str,
    tls: Option<&Certificates>,
) -> Result<Child> {
    let data = dir.join(&m.name);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", m.name)))?;
    let client = match tls {
        Some(_) => format!("https://{}", m.client),
        None => format!("http://{}", m.client),
    };
    let mut command = Command::new(binary);
    if let Some(certificates) = tls {
        command
            .arg("--trusted-ca-file")
            .arg(&certificates.ca)
            .arg("--cert-file")
            .arg(&certificates.server.cert)
            .arg("--key-file")
            .arg(&certificates.server.key)
            .arg("--client-cert-auth");
    }
    command
        .args(["--name", &m.name])
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &format!("http://{}", m.peer)])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://{}", m.peer),
        ])
        .args(["--initial-cluster", initial])
        .args(["--initial-cluster-state", "new"])
        .args(["--initial-cluster-token", "upcheck-e2e"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// One balancer: a real Envoy with upcheck, started from `upcheck envoy`'s configuration.
pub struct Balancer {
    process: Option<EnvoyProcess>,
    /// Where users connect.
    pub listener: SocketAddr,
    /// Its admin interface.
    pub admin: SocketAddr,
    /// Its status page listener.
    pub status: SocketAddr,
    _dir: TempDir,
    http: reqwest::Client,
}

/// The plugin configuration of the fleet tests: `backends` in host routing, probed every second
/// with a 500 ms timeout, and with `fleet` when given (its `cluster` filled in by `--etcd`).
pub fn plugin(backends: &[&FakeUpstream], fleet: Option<Value>) -> Value {
    let upstreams: Vec<Value> = backends
        .iter()
        .map(|b| json!({"name": b.name(), "address": b.addr().to_string()}))
        .collect();
    let mut config = json!({
        "routing": "host",
        "upstreams": upstreams,
        "health_checks": {
            "active": {"path": "/up", "interval": "1s", "timeout": "500ms"},
            "passive": {"fail_duration": "2s", "max_fails": 3},
        },
    });
    if let Some(fleet) = fleet {
        config["fleet"] = fleet;
    }
    config
}

impl Balancer {
    /// Starts an Envoy (one worker) with `plugin`, joined to `etcd` if given, as `upcheck envoy
    /// [--etcd …]` writes it, and waits until it is ready; started again on other ports when one
    /// was taken meanwhile, up to [`PORT_ATTEMPTS`] times in all.
    pub async fn start(plugin: &Value, etcd: Option<&Etcd>) -> Result<Balancer> {
        let mut attempt = 1;
        loop {
            match Balancer::start_once(plugin, etcd).await {
                Err(e)
                    if attempt < PORT_ATTEMPTS
                        && e.to_string().contains("Address already in use") =>
                {
                    eprintln!("attempt {attempt}: a port was taken; starting Envoy on other ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(plugin: &Value, etcd: Option<&Etcd>) -> Result<Balancer> {
        let mut source = upcheck_cli::plugin::read(plugin.to_string().as_bytes())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let joined = match etcd {
            Some(etcd) => {
                let mut joined = upcheck_cli::etcd::join(&mut source, etcd.clients())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                joined.tls = etcd
                    .tls_flags()
                    .tls(true)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                Some(joined)
            }
            None => None,
        };
        let mut deployment =
            upcheck_cli::deployment::plan(&source, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        deployment.etcd = joined;
        let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
        let (listener, admin, status) = (free_addr()?, free_addr()?, free_addr()?);
        let settings = Settings {
            listen: listener,
            admin,
            status,
            wasm: module()?.display().to_string(),
            concurrency: 1,
            input: "the fleet test".into(),
            membership: None,
        };
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, render(&deployment, &settings))?;
        let mut process = EnvoyProcess::spawn(Launch {
            binary: binary()?,
            bootstrap: &config,
            dir: dir.path(),
            concurrency: 1,
            cpu: None,
            // The log is read while Envoy runs: flushed every 100 ms rather than every 10 s.
            args: &["--log-level", "info", "--file-flush-interval-msec", "100"],
        })?;
        if let Err(e) = process.until_ready(admin, Duration::from_millis(50)).await {
            bail!("{e}: {}{}", process.log(), process.output());
        }
        Ok(Balancer {
            process: Some(process),
            listener,
            admin,
            status,
            _dir: dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
        })
    }

    /// Kills it with SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(EnvoyProcess::log)
            .unwrap_or_default()
    }

    /// One user request to `/`: whether it was answered 200.
    pub async fn user_request(&self) -> bool {
        let answer = self
            .http
            .get(format!("http://{}/", self.listener))
            .send()
            .await;
        answer.is_ok_and(|r| r.status().is_success())
    }

    /// Its statistics (`/stats`) and status page (text) as served now.
    pub async fn stats_and_page(&self) -> Result<String> {
        let stats = self
            .http
            .get(format!("http://{}/stats", self.admin))
            .send()
            .await?
            .text()
            .await?;
        let page = self
            .http
            .get(format!("http://{}/upcheck/status", self.status))
            .send()
            .await?
            .text()
            .await?;
        Ok(stats + &page)
    }

    /// Its status page in JSON, as served now.
    pub async fn page_json(&self) -> Result<Value> {
        let url = format!("http://{}/upcheck/status.json", self.status);
        let text = self.http.get(url).send().await?.text().await?;
        serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))
    }

    /// A counter of upcheck's (`wasmcustom.upcheck.<name>`), 0 when Envoy has none yet.
    pub async fn counter(&self, name: &str) -> Result<u64> {
        let stat = format!("wasmcustom.upcheck.{name}");
        let url = format!(
            "http://{}/stats?filter=^{}$",
            self.admin,
            stat.replace('.', "\\.")
        );
        let body = self.http.get(url).send().await?.text().await?;
        Ok(body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{stat}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0))
    }
}
