//! The members of a test's etcd cluster as processes: started, checked for health, killed and
//! started again on the data they left; member 0 in a network namespace of its own when asked
//! (`super::apart`), and parted from its peers.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::time::{sleep, Instant};
use upcheck_cli::etcd::TlsFlags;

use super::apart::{Network, Partition};
use super::{Etcd, Member};
use crate::envoy::Turn;
use crate::envoy_process::{PATIENCE, PORT_ATTEMPTS};
use crate::ports::{free_addr, free_addr_on};
use crate::tls::Certificates;

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

impl Etcd {
    /// Starts a cluster of `size` members and waits until every one answers `/health`. Its ports
    /// are picked free just before, and another process can take one in between: the cluster is
    /// then started again on other ports, up to [`PORT_ATTEMPTS`] times in all.
    pub async fn start(size: usize) -> Result<Etcd> {
        Etcd::start_with(size, false, false, None).await
    }

    /// [`Etcd::start`] for a test that runs `envoys` Envoys beside other tests' rather than
    /// alone: one whose bars are counts (users failed, probes sent, values refused), which hold
    /// on a loaded machine, not timings.
    pub async fn start_beside(size: usize, envoys: u32) -> Result<Etcd> {
        Etcd::start_with(size, false, false, Some(envoys)).await
    }

    /// [`Etcd::start`] with client TLS: each member serves HTTPS with a certificate of the test's
    /// CA and asks every client for a certificate of that CA too.
    pub async fn start_tls(size: usize) -> Result<Etcd> {
        Etcd::start_with(size, true, false, None).await
    }

    /// [`Etcd::start`] with member 0 in a network namespace the test makes, joined to this
    /// machine by a veth pair in a /30 of 10.201.0.0/16 no other test holds: member 0 listens on
    /// the namespace's address (clients on 2379, peers on 2380), the others for peers on the host
    /// end and for clients on 127.0.0.1, so that [`Etcd::partition`] can part member 0 from its
    /// peers alone. The namespace and the veth go when the cluster drops. Needs root and `ip`.
    /// Its test runs `envoys` Envoys beside other tests' ([`Etcd::start_beside`]).
    pub async fn start_apart(size: usize, envoys: u32) -> Result<Etcd> {
        Etcd::start_with(size, false, true, Some(envoys)).await
    }

    /// A cluster as the starters above say, its test holding `envoys` of the binary's Envoy
    /// turns, or every one (`None`).
    async fn start_with(size: usize, tls: bool, apart: bool, envoys: Option<u32>) -> Result<Etcd> {
        let mut attempt = 1;
        loop {
            let turn = match envoys {
                Some(envoys) => Turn::many(envoys).await?,
                None => Turn::alone().await?,
            };
            match Etcd::start_once(size, tls, apart, turn).await {
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

    async fn start_once(size: usize, tls: bool, apart: bool, turn: Turn) -> Result<Etcd> {
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
        let network = match apart {
            true => Some(Network::make()?),
            false => None,
        };
        let mut members = Vec::new();
        for i in 0..size {
            let member = match &network {
                // A namespace of its own: every port is free there.
                Some(network) if i == 0 => Member {
                    name: format!("m{i}"),
                    client: SocketAddr::new(IpAddr::V4(network.inside), 2379),
                    peer: SocketAddr::new(IpAddr::V4(network.inside), 2380),
                    netns: Some(network.name.clone()),
                    child: None,
                },
                Some(network) => Member {
                    name: format!("m{i}"),
                    client: free_addr()?,
                    peer: free_addr_on(IpAddr::V4(network.host))?,
                    netns: None,
                    child: None,
                },
                None => Member {
                    name: format!("m{i}"),
                    client: free_addr()?,
                    peer: free_addr()?,
                    netns: None,
                    child: None,
                },
            };
            members.push(member);
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
            network,
            _turn: turn,
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

    /// The certificates of client TLS, when the cluster was started with it
    /// ([`Etcd::start_tls`]): to issue more of its CA.
    pub fn certificates(&self) -> Option<&Certificates> {
        self.tls.as_ref()
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

    /// Parts member 0 from its peers until the partition drops: every packet between its address
    /// and the members' peer ports dropped by the kernel, both directions, while its clients
    /// reach it as before. Only for a cluster started with [`Etcd::start_apart`].
    pub fn partition(&self) -> Result<Partition> {
        let network = self
            .network
            .as_ref()
            .context("only a cluster started with Etcd::start_apart can be partitioned")?;
        let peers: Vec<u16> = self.members.iter().map(|m| m.peer.port()).collect();
        let client = self.members.first().map(|m| m.client.port());
        if let Some(both) = client.filter(|c| peers.contains(c)) {
            bail!("port {both} is member 0's client port and a peer port: the partition would cut its clients");
        }
        Partition::new(network.inside, &peers)
    }

    /// Kills member `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.members.get_mut(i).and_then(|m| m.child.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
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
    let mut command = match &m.netns {
        Some(netns) => {
            // `ip netns exec` enters the namespace and execs etcd: the child's pid is etcd's.
            let mut command = Command::new("ip");
            command.args(["netns", "exec", netns]).arg(binary);
            command
        }
        None => Command::new(binary),
    };
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
        // The least bcrypt work etcd allows on the tests' passwords: at its default (10), each
        // user added and each authentication costs etcd tens of milliseconds of CPU, which
        // beside the Envoy tests, at `make test`'s `nice -n 19`, outlasted a 2 s request.
        .args(["--bcrypt-cost", "4"])
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
